"""hlo_tools/programs/parallel_shapes.py: what its rings compute (against numpy on 4
CPU devices), and the tools on its parallel shapes, compiled deviceless with jax
0.10.2 (scripts/gen_fixtures.py): a GPipe pipeline beside a cp ring, dp x cp x tp on
four hosts, a ring both ways, Ulysses all-to-all, a scan over rematerialized layers
around a ring."""

import json

import pytest

from hlo_tools import cli
from hlo_tools.model import description, options, sources
from hlo_tools.model.collectives import collective_permutes, trips_text
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.page import comparison_rows

from conftest import CPU_CODEGEN_O0, FIXTURES, placed, run_jax

PIPELINE = FIXTURES / "pipeline_1x2x4.before_async.hlo"
SCAN_REMAT = FIXTURES / "scan_remat_1x1x8.before_async.hlo"
BIDIR = FIXTURES / "bidir_1x1x8.before_async.hlo"
ULYSSES = FIXTURES / "ulysses_1x1x8.before_async.hlo"
DP_CP_TP = FIXTURES / "dp_cp_tp_1x4x8.before_async.hlo"
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"  # NVSHMEM wins on NVLink at every size


def run(capsys, *argv):
  rc = cli.main([*map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def permutes(path):
  return {len(r.pairs): r for r in collective_permutes(sources.read_source(path).module)}


# ---------------------------------------------------------------------------------------
# What the per-shard programs compute, under shard_map on 4 CPU devices

# Runs in a child (jax's CPU backend of 4 devices, not this process's): each program
# and its numpy oracle; prints the max errors.
_NUMBERS = r"""
import json
import jax, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from hlo_tools.programs import parallel_shapes as ps

n, tokens, hidden = 4, 3, 4
mesh = Mesh(np.array(jax.devices()[:n]), ("cp",))
rng = np.random.default_rng(0)
x = rng.standard_normal((n * tokens, hidden)).astype(np.float32)  # block i on device i
w = rng.standard_normal((hidden, hidden)).astype(np.float32) / 2
blocks = x.reshape(n, tokens, hidden)

def softmax(s):
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def attend(q, kv):
  return softmax(q @ kv.T) @ kv

def on_cp(f, specs):
  return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=specs, out_specs=P("cp")))

err = lambda got, want: float(np.max(np.abs(np.asarray(got) - want)))
out = {}
# ring_mix: each device's queries against every device's block, one step each.
want = np.concatenate([sum(attend(b @ w, kv) for kv in blocks) for b in blocks])
out["ring_mix"] = err(on_cp(ps.ring_mix, (P("cp"), P()))(x, w), want)
# bidirectional_ring: at step t device i holds the first half of block i - t and the
# second half of block i + t.
half = hidden // 2
want = np.concatenate([
    sum(attend(blocks[i] @ w, np.concatenate([blocks[(i - t) % n][:, :half],
                                             blocks[(i + t) % n][:, half:]], -1))
        for t in range(n))
    for i in range(n)])
out["bidirectional_ring"] = err(on_cp(ps.bidirectional_ring, (P("cp"), P()))(x, w), want)
# ulysses_attention: every head attends over the whole sequence.
heads, d = 4, 2
q, k, v = (rng.standard_normal((n * tokens, heads, d)).astype(np.float32) for _ in range(3))
scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
want = np.einsum("hqk,khd->qhd", softmax(scores), v)
out["ulysses_attention"] = err(on_cp(ps.ulysses_attention, (P("cp"),) * 3)(q, k, v), want)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def numbers():
  return run_jax(_NUMBERS, xla_flags=f"--xla_force_host_platform_device_count=4 {CPU_CODEGEN_O0}")


@pytest.mark.parametrize("program", ["ring_mix", "bidirectional_ring", "ulysses_attention"])
def test_program_computes_attention_over_every_block(numbers, program):
  assert numbers[program] < 1e-5, numbers


# ---------------------------------------------------------------------------------------
# Trip counts multiply through every enclosing loop


def test_pipeline_ring_runs_steps_times_ring_trips():
  by_pairs = permutes(PIPELINE)
  ring, shift = by_pairs[8], by_pairs[4]  # the cp ring (8 pairs), the pp shift (4)
  assert [n for _, _, n in ring.loops] == [4, 7]  # ring loop inside the 7-step schedule
  assert ring.trip_count == 28 and ring.while_loop == ring.loops[0][0]
  assert [n for _, _, n in shift.loops] == [7] and shift.trip_count == 7


def test_scan_over_remat_layers_multiplies_layers_and_ring_steps():
  records = collective_permutes(sources.read_source(SCAN_REMAT).module)
  assert len(records) == 3  # forward, the rematerialized forward, backward
  assert all(r.trip_count == 32 and [n for _, _, n in r.loops] == [8, 4] for r in records)


def test_trips_text_says_at_least_where_a_count_is_unknown():
  assert trips_text([4, 7]) == "x28 trips (7 x 4)"
  assert trips_text([8]) == "x8 trips"
  assert trips_text([4, None]).startswith("at least x4 trips (? x 4")
  assert trips_text([None]) == "trips unknown"
  assert trips_text([]) == ""


def test_unknown_outer_count_gives_at_least(tmp_path, capsys, monkeypatch):
  # The pipeline with its schedule loop's recorded count taken away: its condition is
  # a fusion, which this reader does not count, so alone it says the ring runs at
  # least its own 4 trips; nvshmem-opt's report counts the loop with XLA's own loop
  # analysis (7), and explain takes its facts from there.
  path = tmp_path / "pipeline_unknown.hlo"
  path.write_text(
    PIPELINE.read_text().replace('"known_trip_count":{"n":"7"}', '"known_trip_count":{}')
  )
  ring, shift = permutes(path)[8], permutes(path)[4]
  assert [n for _, _, n in ring.loops] == [4, None]
  assert ring.trip_count is None and ring.trips_at_least == 4
  assert shift.trip_count is None
  rc, out, err = run(capsys, "explain", path, "--topology=1x2x4", "--format=json")
  assert rc == 0, err
  ring_e, shift_e = sorted(json.loads(out)["collectives"], key=lambda e: -len(e["pairs"]))
  assert ring_e["decided_by"] == "nvshmem-opt"
  assert [loop["trip_count"] for loop in ring_e["loops"]] == [4, 7]
  assert ring_e["modeled_loop_us"] == ring_e["modeled_us"]["chosen"] * 28
  # Without the driver the reader's own facts stand.
  monkeypatch.setenv("NVSHMEM_OPT", str(tmp_path / "no_driver"))
  rc, out, err = run(capsys, "explain", path, "--topology=1x2x4", "--format=json")
  assert rc == 0, err
  ring_e, shift_e = sorted(json.loads(out)["collectives"], key=lambda e: -len(e["pairs"]))
  assert ring_e["decided_by"] == "core binding"
  assert ring_e["modeled_loop_us"] == ring_e["modeled_us"]["chosen"] * 4
  assert shift_e["modeled_loop_us"] is None  # nothing known about how often it runs
  rc, out, _ = run(capsys, "explain", path, "--topology=1x2x4")
  assert "at least x4 trips (? x 4" in out and "trip count unknown" in out


def test_explain_text_shows_nested_trips(capsys):
  rc, out, err = run(capsys, "explain", PIPELINE, "--topology=1x2x4")
  assert rc == 0, err
  assert "x28 trips (7 x 4) = " in out
  assert "(trip count 4) inside while" in out and "(trip count 7)" in out


def test_report_saved_per_run_counts_every_loop():
  # A table where NVSHMEM wins on NVLink: the ring saves time on each of its 28 runs.
  explained = description.describe(
    str(PIPELINE), options.load("1x2x4", str(FAST_NVSHMEM)), use_driver=False
  )
  case = Case(id="pipeline", title="pipeline", topology="1x2x4")
  [ring_row] = [
    r for r in comparison_rows([{"case": case, "explain": explained}]) if r["trip_count"] == 28
  ]
  [e] = [e for e in explained["collectives"] if len(e["pairs"]) == 8]
  saved_once = e["modeled_us"]["nccl"] - e["modeled_us"]["chosen"]
  assert e["choice"]["plan"] == "nvshmem" and saved_once > 0
  assert abs(ring_row["saved_us_per_run"] - saved_once) < 1e-9
  assert abs(ring_row["saved_us_per_step"] - 28 * saved_once) < 1e-9
  assert ring_row["trips"] == "x28 trips (7 x 4)"


# ---------------------------------------------------------------------------------------
# report module:function takes every option that shapes the compile, as dump does

PIPELINE_FLAGS = (
  "--topology=1x2x4",
  "--mesh=pp:2,cp:4",
  "--nocheck_vma",
  "--arg=6,64,32:f32:None,cp",
  "--arg=2,32,32:f32:pp",
  "--out_spec=None,cp",
)


@pytest.mark.long
def test_report_compiles_a_function_on_a_two_axis_mesh(capsys, tmp_path):
  rc, out, err = run(
    capsys,
    "report",
    "hlo_tools.programs.parallel_shapes:pipeline_ring",
    *PIPELINE_FLAGS,
    "--quiet",
    f"--out={tmp_path / 'r'}",
  )
  assert rc == 0, err
  report = json.loads((tmp_path / "r" / "report.json").read_text())
  [case] = report["cases"]
  manifest = json.loads((tmp_path / "r" / case["id"] / "dump" / "manifest.json").read_text())
  assert manifest["mesh"] == {"pp": 2, "cp": 4}
  assert sorted(p["trip_count"] for p in case["collective_permutes"]) == [7, 28]
  assert "verify: all checks pass" in out


def test_report_names_the_mesh_flag_it_takes(capsys, tmp_path):
  # Without --mesh the compile fails naming --mesh; report takes it (no dead end).
  flags = [f for f in PIPELINE_FLAGS if not f.startswith("--mesh")]
  rc, _, err = run(
    capsys,
    "report",
    "hlo_tools.programs.parallel_shapes:pipeline_ring",
    *flags,
    "--quiet",
    f"--out={tmp_path / 'r'}",
  )
  assert rc == 2 and "--mesh=" in err and "unrecognized" not in err


def test_dump_and_report_share_the_compile_options():
  from hlo_tools.commands import dump as dump_cmd, report as report_cmd  # pylint: disable=import-outside-toplevel

  def flags(parser):
    return {o for a in parser._actions for o in a.option_strings}  # pylint: disable=protected-access

  shared = {
    "--mesh",
    "--arg",
    "--out_spec",
    "--global",
    "--check_vma",
    "--nocheck_vma",
    "--target_config",
  }
  assert shared <= flags(dump_cmd._parser("dump")) & flags(report_cmd._parser("report"))  # pylint: disable=protected-access


def test_report_refuses_compile_options_for_a_file(capsys, tmp_path):
  rc, _, err = run(capsys, "report", PIPELINE, "--mesh=pp:2,cp:4", f"--out={tmp_path / 'r'}")
  assert rc == 2 and "--mesh applies to a module:function SOURCE" in err


# ---------------------------------------------------------------------------------------
# explain and verify take DIR:STAGE, as diff does; the manifest names before_async


@pytest.mark.long
def test_explain_and_verify_read_a_dump_stage(capsys, tmp_path):
  dump_dir = tmp_path / "pipeline"
  rc, _, err = run(
    capsys,
    "dump",
    "hlo_tools.programs.parallel_shapes:pipeline_ring",
    *PIPELINE_FLAGS,
    "--all_passes",
    "--quiet",
    f"--out={dump_dir}",
  )
  assert rc == 0, err
  manifest = json.loads((dump_dir / "manifest.json").read_text())
  assert manifest["stages"]["before_async"] == "before_async.hlo"
  assert (dump_dir / "before_async.hlo").read_text().startswith("HloModule")
  for stage in ("before_async", "after_optimizations"):
    rc, out, err = run(capsys, "explain", f"{dump_dir}:{stage}", "--format=json")
    assert rc == 0, err
    assert "using 1x2x4, the topology the dump was compiled for" in err
    result = json.loads(out)
    assert result["file"] == f"{dump_dir}:{stage}"
    assert sorted(e["trip_count"] for e in result["collectives"]) == [7, 28]
  rc, out, err = run(capsys, "verify", f"{dump_dir}:before_async")
  assert rc == 0, err
  assert f"{dump_dir}:before_async: all checks pass (topology 1x2x4" in out
  rc, _, err = run(capsys, "verify", f"{dump_dir}:no_such_stage")
  assert rc == 2 and "unknown stage 'no_such_stage'" in err


# ---------------------------------------------------------------------------------------
# The pre-optimization warning names the stage the tools actually used


@pytest.mark.long
def test_report_dir_does_not_warn_on_its_before_async_stage(capsys, tmp_path):
  # K and V rotated once: the module entering async-collective-creator has two
  # permutes and no fusion, as a module before optimizations looks.
  dump_dir = tmp_path / "kv"
  rc, _, err = run(
    capsys,
    "dump",
    "hlo_tools.programs.pass_tests:kv_step",
    "--topology=1x1x2",
    "--arg=64,8:f32:cp",
    "--arg=64,8:f32:cp",
    "--out_spec=cp",
    "--out_spec=cp",
    "--all_passes",
    "--quiet",
    f"--out={dump_dir}",
  )
  assert rc == 0, err
  assert "fusion" not in (dump_dir / "before_async.hlo").read_text()
  rc, out, err = run(capsys, "report", dump_dir, "--quiet", f"--out={tmp_path / 'r'}")
  assert rc == 0, err
  assert "before XLA's optimizations" not in out
  for spec, warned in (
    (f"{dump_dir}:before_async", False),
    (dump_dir / "before_async.hlo", False),
    (f"{dump_dir}:before_optimizations", True),
  ):
    rc, out, err = run(capsys, "explain", spec)
    assert rc == 0, err
    assert ("before XLA's optimizations" in out) == warned, spec


# ---------------------------------------------------------------------------------------
# A plan the input already carries is judged by its runtime's rules


def with_backend(path, tmp_path, pairs_text, backend="NVSHMEM", name="edited.hlo", mode=None):
  """The module at `path` with the permute of `pairs_text` set to `backend` (and
  collectives_mode `mode`), as a hand edit (or upstream's assigner) writes it."""
  text = path.read_text()
  old = f"source_target_pairs={pairs_text}, "
  assert text.count(old) == 1, pairs_text
  config = (
    '{"collective_backend_config":{"backend":"'
    + backend
    + '"'
    + (f',"collectives_mode":"{mode}"' if mode else "")
    + "}}"
  )
  out = tmp_path / name
  out.write_text(text.replace(old, f"{old}backend_config={config}, "))
  return out


SHIFT_PAIRS = "{{0,4},{1,5},{2,6},{3,7}}"  # the pipeline's pp shift on 1x2x4


def test_unsafe_nvshmem_shift_fails_verify_explain_and_report(capsys, tmp_path):
  edited = with_backend(PIPELINE, tmp_path, SHIFT_PAIRS)
  rc, out, _ = run(capsys, "verify", edited, "--topology=1x2x4", "--format=json")
  assert rc == 1
  failed = json.loads(out)["failed_checks"]
  assert "nvshmem-team" in failed and "nvshmem-runtime" in failed
  rc, out, _ = run(capsys, "explain", edited, "--topology=1x2x4")
  assert rc == 0 and out.count("UNSAFE") == 2  # the header and the shift's row
  assert "have no source" in out and "NVSHMEM_TEAM_SHARED" in out
  rc, out, err = run(
    capsys, "report", edited, "--topology=1x2x4", "--quiet", f"--out={tmp_path / 'r'}"
  )
  assert rc == 1, err
  assert "verify: all checks pass" not in out
  assert "FAILED" in out and "nvshmem-team" in out and "nvshmem-runtime" in out
  page = (tmp_path / "r" / "index.html").read_text()
  assert "edited.hlo (as given)" in page


def test_nvshmem_fp8_ring_fails_on_its_element_type(capsys, tmp_path):
  fp8 = FIXTURES / "fp8_kv_ring_1x1x8.before_async.hlo"
  ring = "{{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}"
  edited = with_backend(fp8, tmp_path, ring)
  rc, out, _ = run(capsys, "verify", edited, f"--topology={placed('1x1x8')}")
  assert rc == 1
  assert "element type f8e4m3fn is not one NVSHMEM puts" in out
  assert "FAILED: nvshmem-runtime" in out  # a ring: every device has a source
  # The same ring in bf16 runs: its NVSHMEM plan passes the runtime's rules.
  bf16 = with_backend(FIXTURES / "ring_1x1x8.before_async.hlo", tmp_path, ring, name="bf16.hlo")
  rc, out, _ = run(capsys, "verify", bf16, f"--topology={placed('1x1x8')}", "--format=json")
  checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
  assert checks["nvshmem-runtime"] == "pass" and checks["nvshmem-team"] == "pass"


def test_nvshmem_across_hosts_of_one_nvlink_domain_is_refused(capsys, tmp_path):
  # The cp ring of dp x cp x tp crosses hosts; even where one NVLink domain spans
  # them (:nvl32) nothing establishes that NVSHMEM_TEAM_SHARED does.
  [rec] = collective_permutes(sources.read_source(DP_CP_TP).module)
  pairs = "{" + ",".join(f"{{{s},{t}}}" for s, t in rec.pairs) + "}"
  edited = with_backend(DP_CP_TP, tmp_path, pairs)
  # Placed (:map=), so that the hosts of the edges are known.
  for topology in (placed("1x4x8"), placed("1x4x8:nvl32")):
    rc, out, _ = run(capsys, "verify", edited, f"--topology={topology}", "--format=json")
    [check] = [c for c in json.loads(out)["checks"] if c["name"] == "nvshmem-runtime"]
    assert rc == 1 and check["status"] == "fail", topology
    assert "edges leave their host" in check["results"][0]["message"]


def test_upstream_assigners_nvshmem_shift_fails_verify(capsys, tmp_path):
  # Upstream's assigner puts the two-GPU shift {0->1} on NVSHMEM (small message);
  # written into the module, verify fails it: device 0 has no source.
  from hlo_tools.model import driver  # pylint: disable=import-outside-toplevel

  shift = FIXTURES / "shift_1x1x2.before_async.hlo"
  report, why = driver.explain_report(str(shift), "1x1x2", None)
  assert report is not None, why
  assert list(driver.upstream_from_report(report).values()) == ["NVSHMEM"]
  edited = with_backend(shift, tmp_path, "{{0,1}}")
  rc, out, _ = run(capsys, "verify", edited, "--topology=1x1x2", "--format=json")
  assert rc == 1 and "nvshmem-team" in json.loads(out)["failed_checks"]


def test_peer_memory_across_hosts_is_marked_unsafe(capsys, tmp_path):
  # The bidirectional ring's clockwise half set to peer memory on two hosts of 4:
  # XLA of jax 0.10.2 copies through peer memory only inside one process.
  ring = "{{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}"
  edited = with_backend(BIDIR, tmp_path, ring, backend="DEFAULT", mode="COLLECTIVES_PEER_MEMORY")
  rc, out, _ = run(
    capsys, "verify", edited, f"--topology={placed('1x2x4')}", "--backends=nccl,peer"
  )
  assert rc == 1 and "FAIL peer-safety" in out and "leave their host" in out
  # Without a map (an edited copy has no XLA config beside it) the order is unknown,
  # but no order puts 8 devices in a process of 4: the process rule is the reason.
  rc, out, _ = run(capsys, "verify", edited, "--topology=1x2x4", "--backends=nccl,peer")
  assert rc == 1 and "FAIL peer-safety" in out
  assert "4 of the program's 8 devices are outside its first device's process" in out
  rc, out, _ = run(capsys, "explain", edited, "--topology=1x2x4", "--backends=nccl,peer")
  assert rc == 0 and "UNSAFE" in out and "COLLECTIVES_PEER_MEMORY" in out


# ---------------------------------------------------------------------------------------
# The rule each backend really applies, with its runtime's code


def test_report_states_each_backends_rule(capsys, tmp_path):
  # Peer memory on the non-cyclic pp shift of one host: allowed (a device without a
  # source gets zeros), and the page says why instead of claiming a source for all.
  rc, _, err = run(
    capsys,
    "report",
    FIXTURES / "shift_1x1x2.before_async.hlo",
    "--topology=1x1x2",
    "--backends=nccl,peer",
    "--quiet",
    f"--out={tmp_path / 'r'}",
  )
  assert rc == 0, err
  page = (tmp_path / "r" / "index.html").read_text()
  assert "every device of the program has a source" not in page
  assert "GpuCliqueKey::is_local, gpu_clique_key.h:98" in page
  assert "collective_permute_thunk.cc:317" in page and "gets zeros (:472)" in page
  rc, _, err = run(
    capsys, "report", PIPELINE, "--topology=1x2x4", "--quiet", f"--out={tmp_path / 'n'}"
  )
  page = (tmp_path / "n" / "index.html").read_text()
  assert "nvshmem_communicator.cc:367" in page and "NVSHMEM_TEAM_SHARED" in page


# ---------------------------------------------------------------------------------------
# Small ones


def test_ulysses_has_nothing_to_decide(capsys):
  import subprocess  # pylint: disable=import-outside-toplevel

  from hlo_tools.model import driver  # pylint: disable=import-outside-toplevel

  rc, out, err = run(capsys, "explain", ULYSSES, "--topology=1x1x8")
  assert rc == 0, err
  assert "0 collective-permute(s)" in out and "nothing for the pass to decide" in out
  rc, out, _ = run(capsys, "verify", ULYSSES, "--topology=1x1x8")
  assert rc == 0 and "no collective-permutes" in out
  proc = subprocess.run(
    [str(driver.find_nvshmem_opt()), str(ULYSSES), "--topology=1x1x8", "--mode=explain"],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert "no collective-permutes, nothing for the pass to decide" in proc.stdout


def test_topology_larger_than_the_module_is_said(capsys):
  rc, out, _ = run(capsys, "explain", BIDIR, "--topology=1x2x8")
  assert rc == 0
  assert "warning: topology 1x2x8 has 16 GPUs but the module runs on 8" in out
  rc, out, _ = run(capsys, "verify", BIDIR, "--topology=1x2x8")
  assert "has 16 GPUs but the module runs on 8" in out


def test_report_says_the_topology_is_larger_than_the_module(capsys, tmp_path):
  rc, out, err = run(
    capsys, "report", BIDIR, "--topology=1x2x8", "--quiet", f"--out={tmp_path / 'r'}"
  )
  assert rc == 0, err
  assert "warning: topology 1x2x8 has 16 GPUs but the module runs on 8" in out


def test_derived_topology_names_the_other_host_shapes(capsys):
  rc, _, err = run(capsys, "explain", BIDIR)
  assert rc == 0
  assert "using 1x1x8" in err
  assert "warning:" in err and "(1x2x4, 1x4x2)" in err and "--topology" in err


def test_bidirectional_ring_prices_each_direction_by_its_slowest_edge(capsys):
  rc, out, _ = run(capsys, "explain", BIDIR, "--topology=1x2x4", "--format=json")
  assert rc == 0
  forward, backward = json.loads(out)["collectives"]
  assert sorted(map(tuple, forward["pairs"])) == [(i, (i + 1) % 8) for i in range(8)]
  assert sorted(map(tuple, backward["pairs"])) == sorted((i, (i - 1) % 8) for i in range(8))
  for e in (forward, backward):
    assert e["trip_count"] == 8 and e["edges_by_class"]["network"] == 2
    # The slowest edge crosses hosts; the default table estimates it (no curve there).
    assert e["priced_by"]["nccl"] == {"link_class": "network", "model": "parametric"}
  rc, out, _ = run(capsys, "explain", BIDIR, "--topology=1x2x4")
  assert "nccl by its slowest edge, network (parametric); " in out
  assert "parametric: an estimate, latency + size / bandwidth" in out


def test_dp_cp_tp_ring_runs_over_cp_across_hosts(capsys):
  # dp 2 x cp 4 x tp 4 on 4 hosts of 8: the cp ring of each (dp, tp) pair steps by 4
  # devices, so half its edges leave the host; 8 rings of 4 in one permute.
  rc, out, err = run(capsys, "explain", DP_CP_TP, "--topology=1x4x8", "--format=json")
  assert rc == 0, err
  [e] = json.loads(out)["collectives"]
  assert len(e["pairs"]) == 32 and [0, 4] in e["pairs"] and [12, 0] in e["pairs"]
  assert e["trip_count"] == 4 and e["bytes"] == 16 * 32 * 4
  assert e["edges_by_class"]["network"] == 16 and e["edges_by_class"]["nvlink"] == 16
  assert e["choice"]["plan"] == "nccl" and e["priced_by"]["nccl"]["link_class"] == "network"


def test_explain_and_verify_name_a_missing_stage_or_directory(capsys, tmp_path):
  for argv, message in (
    ((tmp_path,), "is a directory; name a stage, e.g. "),
    ((f"{tmp_path}/none:before_async",), "cannot read: No such file"),
    ((f"{tmp_path}:before_async",), "no XLA module dumps"),
  ):
    for command in ("explain", "verify"):
      rc, _, err = run(capsys, command, *argv, "--topology=1x1x8")
      assert rc == 2 and message in err and err.count("\n") == 1, (command, err)
