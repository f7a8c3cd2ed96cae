"""hlo-tools explain: per-permute reasoning on real fixtures, the pass's output, bad input."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.model import driver

from conftest import placed

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
DRIVER = REPO / "build" / "nvshmem-opt"
# A table where NVSHMEM wins on NVLink at every size (the pass then writes NVSHMEM).
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"
RING_PAIRS = [[i, (i + 1) % 8] for i in range(8)]


def run(capsys, *argv):
  rc = cli.main(["explain", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def pass_output(tmp_path, fixture, topology, *extra):
  """nvshmem-opt's rewrite of a fixture (the pass's real output)."""
  out = tmp_path / f"{fixture}.{topology}.nvshmem.hlo"
  # --annotate: the pass records its decision on each op (verify checks NCCL ones too).
  proc = subprocess.run(
    [
      str(DRIVER),
      str(FIXTURES / f"{fixture}.hlo"),
      f"--topology={topology}",
      "--annotate",
      "-o",
      str(out),
      *extra,
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  return out


def test_two_hosts_ring_is_nccl(capsys):
  rc, out, err = run(
    capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--topology=1x2x4", "--format=json"
  )
  assert rc == 0, err
  result = json.loads(out)
  [e] = result["collectives"]
  assert e["pairs"] == RING_PAIRS
  assert e["bytes"] == 65536 and e["form"] == "sync"
  assert e["while_loop"] and e["trip_count"] == 8
  assert e["edges_by_class"]["network"] == 2 and e["edges_by_class"]["nvlink"] == 6
  assert e["choice"] == {"plan": "nccl", "backend": "DEFAULT"}
  # NVSHMEM refused: two edges leave their host (NVSHMEM_TEAM_SHARED).
  assert e["modeled_us"]["nvshmem"] is None and e["modeled_us"]["nccl"] > 0
  assert "2 of 8 edges leave their host" in e["reason"]
  # Upstream's assigner, with one GPU per process, does not look at hosts.
  assert e["upstream"]["backend"] == "NVSHMEM"
  if DRIVER.exists():
    assert e["upstream"]["source"] == "nvshmem-opt --compare-upstream"


def test_one_host_ring_is_nvshmem_text(capsys):
  rc, out, _ = run(
    capsys,
    FIXTURES / "ring_1x1x8.after_optimizations.hlo",
    "--topology=1x1x8",
    f"--cost-table={FAST_NVSHMEM}",
  )
  assert rc == 0
  assert "%collective-permute-start" in out
  assert "choice        nvshmem (backend NVSHMEM" in out
  assert "upstream XLA  NVSHMEM" in out
  assert "trip count 8" in out


def test_no_upstream_guess_without_driver(capsys, monkeypatch):
  # Upstream's answer comes from its real assigner in the driver; without the driver
  # it is unavailable, not re-derived from a Python copy of its rule.
  monkeypatch.setenv("NVSHMEM_OPT", "/nonexistent/nvshmem-opt")
  rc, out, _ = run(
    capsys, FIXTURES / "ring_1x1x8.before_async.hlo", "--topology=1x1x8", "--format=json"
  )
  assert rc == 0
  [e] = json.loads(out)["collectives"]
  assert e["upstream"]["backend"] is None
  assert e["upstream"]["source"].startswith("unavailable")


def test_no_split_where_nvlink_is_slow(capsys, tmp_path):
  # NCCL over NVLink slow: NVSHMEM would win on the NVLink edges, but the permute
  # runs whole on one backend, priced by its slowest (network) edge, where NCCL wins.
  table = tmp_path / "slow_nccl_nvlink.cost"
  table.write_text(
    "links { backend: NCCL link_class: NVLINK latency_us: 30 bandwidth_gbps: 450 per_buffer_us: 0 }\n"
  )
  out_hlo = pass_output(tmp_path, "ring_1x2x4.before_async", "1x2x4", f"--cost-table={table}")
  rc, out, err = run(capsys, out_hlo, "--topology=1x2x4", f"--cost-table={table}", "--format=json")
  assert rc == 0, err
  [e] = json.loads(out)["collectives"]
  assert not {"split_part", "decided_on", "model_plan"} & set(e)
  assert "split" not in e["modeled_us"]
  assert e["choice"]["plan"] == "nccl" and e["recorded"]["plan"] == "nccl"
  assert "leave their host" in e["reason"]


def test_pass_output_records_the_decision(capsys, tmp_path):
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, _ = run(
    capsys, out_hlo, "--topology=1x1x8", f"--cost-table={FAST_NVSHMEM}", "--format=json"
  )
  assert rc == 0
  [e] = json.loads(out)["collectives"]
  assert e["current_backend"] == "NVSHMEM" and e["form"] == "start-done"
  assert e["recorded"]["plan"] == "nvshmem"


def test_json_to_out_file(capsys, tmp_path):
  dest = tmp_path / "explain.json"
  rc, out, _ = run(
    capsys,
    FIXTURES / "shift_1x2x4.before_async.hlo",
    "--topology=1x2x4",
    "--format=json",
    f"--out={dest}",
  )
  assert rc == 0 and out == ""
  [e] = json.loads(dest.read_text())["collectives"]
  assert len(e["pairs"]) == 7  # i -> i+1, no wrap-around


def truncated(tmp_path):
  text = (FIXTURES / "ring_1x2x4.before_async.hlo").read_text()
  path = tmp_path / "truncated.hlo"
  path.write_text(text[: len(text) // 2])
  return path


def broken_pairs(tmp_path, pairs="{{0,1},{1}}"):
  text = (FIXTURES / "ring_1x2x4.before_async.hlo").read_text()
  text = text.replace(
    "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}",
    f"source_target_pairs={pairs}",
  )
  path = tmp_path / "broken_pairs.hlo"
  path.write_text(text)
  return path


def test_bad_input_is_one_line_naming_the_file(capsys, tmp_path):
  rc, out, err = run(capsys, truncated(tmp_path), "--topology=1x2x4")
  assert rc == 2 and out == ""
  assert len(err.strip().splitlines()) == 1
  assert err.startswith(f"{tmp_path / 'truncated.hlo'}:")
  rc, _, err = run(capsys, tmp_path / "missing.hlo", "--topology=1x2x4")
  assert rc == 2 and "missing.hlo: cannot read" in err
  rc, _, err = run(capsys, broken_pairs(tmp_path), "--topology=1x2x4")
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert "broken_pairs.hlo:368:" in err and "source_target_pairs" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--topology=2x")
  assert rc == 2 and "topology" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--devices-per-host=3")
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert "do not fill hosts of 3 GPUs" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--devices-per-host=0")
  assert rc == 2 and "--devices-per-host: '0' is not a positive integer" in err
  rc, _, err = run(
    capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--devices-per-host=4", "--topology=1x2x4"
  )
  assert rc == 2 and "give one" in err


def test_topology_derived_by_the_driver(capsys):
  """Without --topology, the topology nvshmem-opt (and so the pass) derives: the same
  explanation as with the equivalent spec."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  for flags, spec in (([], "1x1x8"), (["--devices-per-host=4"], "1x2x4")):
    rc, derived, _ = run(capsys, path, *flags, "--format=json")
    assert rc == 0
    rc, given, _ = run(capsys, path, f"--topology={spec}", "--format=json")
    assert rc == 0
    # Both carry the module's map, from XLA's config beside it.
    assert json.loads(derived)["topology"] == f"{spec}:map=0,1,2,3,4,5,6,7"
    assert json.loads(derived) == json.loads(given)


def test_derived_topology_is_named_on_stderr(capsys):
  """Without --topology the topology is said, once, on stderr (as nvshmem-opt says it);
  stdout stays the explanation alone."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  rc, out, err = run(capsys, path, "--devices-per-host=4", "--format=json")
  assert rc == 0 and json.loads(out)["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7"
  [line] = err.strip().splitlines()
  assert "no --topology; using 1x2x4" in line and str(path) in line
  rc, _, err = run(capsys, path, "--topology=1x2x4", "--format=json")
  assert rc == 0 and err == ""


def test_file_of_a_dump_takes_the_topology_of_its_manifest(tmp_path, capsys):
  """A module inside an `hlo-tools dump` directory is explained on the topology the
  dump was compiled for (its manifest.json), which the module text does not carry."""
  dump_dir = tmp_path / "dump"
  shutil.copytree(FIXTURES / "ring_product_grad_1x2x4.passes", dump_dir)
  manifest = json.loads((dump_dir / "manifest.json").read_text())
  manifest["target"]["topology"] = "2x1x4"
  (dump_dir / "manifest.json").write_text(json.dumps(manifest))
  module = dump_dir / "ring.hlo"
  shutil.copyfile(FIXTURES / "ring_1x1x8.before_async.hlo", module)
  rc, out, err = run(capsys, module, "--format=json")
  # A file the manifest does not list has no config of its own: no map.
  assert rc == 0 and json.loads(out)["topology"] == "2x1x4"
  assert "using 2x1x4, the topology the dump was compiled for" in err
  rc, out, _ = run(capsys, module, "--devices-per-host=8", "--format=json")
  assert rc == 0 and json.loads(out)["topology"] == "1x1x8"


def test_installed_entry_point_explains_without_the_driver():
  exe = REPO / ".venv" / "bin" / "hlo-tools"
  assert exe.exists(), f"{exe} is not installed: run scripts/setup.sh"
  proc = subprocess.run(
    [
      str(exe),
      "explain",
      str(FIXTURES / "ring_2x2x4.before_async.hlo"),
      "--topology=2x2x4",
      "--format=json",
    ],
    capture_output=True,
    text=True,
    check=False,
    env=dict(os.environ, NVSHMEM_OPT="/nonexistent"),
  )
  assert proc.returncode == 0, proc.stderr
  [e] = json.loads(proc.stdout)["collectives"]
  assert len(e["pairs"]) == 16 and e["edges_by_class"]["network"] == 4


# jax's lowered HLO (`jax.jit(f).lower(...).as_text(dialect="hlo")`): no num_partitions in
# the header, scan loops without known_trip_count.
LOWERED = FIXTURES / "ring_1x2x4.lowered.hlo"


def test_lowered_module_infers_partitions_and_trip_count(capsys):
  assert "num_partitions" not in LOWERED.read_text().split("\n", 1)[0]
  # An NVSHMEM-favoured table: the measured default keeps 64 KiB on NCCL.
  # jax's lowered text comes without XLA's config: the map is given.
  rc, out, err = run(
    capsys,
    LOWERED,
    f"--topology={placed('1x1x8')}",
    "--format=json",
    f"--cost-table={FAST_NVSHMEM}",
  )
  assert rc == 0, err
  result = json.loads(out)
  assert result["num_partitions"] == 8
  assert result["num_partitions_from"] == (
    "inferred from the Shardy mesh in its frontend attributes"
  )
  assert [e["instruction"] for e in result["collectives"]] == ["ppermute.1"]
  for e in result["collectives"]:
    assert e["pairs"] == RING_PAIRS and e["trip_count"] == 8
    assert e["choice"]["plan"] == "nvshmem"
  rc, out, _ = run(capsys, LOWERED, "--topology=1x2x4")
  assert rc == 0
  assert "8 partitions (inferred from the Shardy mesh in its frontend attributes)" in out
  assert "trip count 8" in out and "trip count unknown" not in out
  assert "choice        nccl" in out


def test_num_partitions_overrides_topology_and_mesh(capsys, tmp_path):
  # Without the mesh the topology gives the count; --num-partitions overrides both.
  text = LOWERED.read_text()
  header, rest = text.split("\n", 1)
  bare = tmp_path / "no_mesh.hlo"
  bare.write_text(header.split(", frontend_attributes=")[0] + "\n" + rest)
  rc, out, err = run(capsys, bare, "--topology=1x2x4", "--format=json")
  assert rc == 0, err
  assert json.loads(out)["num_partitions_from"] == "inferred from the topology's 8 devices"
  rc, out, err = run(capsys, bare, "--topology=1x2x4", "--num-partitions=4", "--format=json")
  assert rc == 2 and "outside" in err and "\n" not in err.strip()
  rc, out, err = run(capsys, bare, "--topology=2x2x4", "--num-partitions=8", "--format=json")
  assert rc == 0, err
  assert json.loads(out)["num_partitions"] == 8


def test_trip_count_of_scan_loop_before_optimization():
  from hlo_tools.hlo.reader import parse_hlo_file
  from hlo_tools.model.collectives import collective_permutes

  recs = collective_permutes(parse_hlo_file(LOWERED))
  assert [(r.while_loop, r.trip_count) for r in recs] == [("while.30", 8)]
  # A bound of 5 from 0, `le` instead of `lt`: 6 trips.
  text = LOWERED.read_text().replace(
    "constant.80 = s32[] constant(8)", "constant.80 = s32[] constant(5)"
  )
  text = text.replace(
    "compare(get-tuple-element.93, constant.80), direction=LT",
    "compare(get-tuple-element.93, constant.80), direction=LE",
  )
  from hlo_tools.hlo.reader import parse_hlo_text

  assert [r.trip_count for r in collective_permutes(parse_hlo_text(text))] == [6]


def test_upstream_is_not_the_input_backend(capsys, tmp_path):
  # A module the pass already set to NVSHMEM (one host), explained for a placement
  # where every ring edge crosses hosts: upstream's assigner, handed the module with
  # its backends reset, says DEFAULT; the module's NVSHMEM is not upstream's answer.
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, err = run(capsys, out_hlo, "--topology=1x2x4:map=0,4,1,5,2,6,3,7", "--format=json")
  assert rc == 0, err
  [e] = json.loads(out)["collectives"]
  assert e["current_backend"] == "NVSHMEM" and e["edges_by_class"]["network"] == 8
  # Upstream's assigner, with one GPU per process, gives NVSHMEM across hosts too:
  # its answer is its own, not the NVSHMEM the module carries.
  assert e["upstream"] == {"backend": "NVSHMEM", "source": "nvshmem-opt --compare-upstream"}


@pytest.mark.parametrize("command", ["explain", "verify", "diff"])
def test_unbounded_input_is_refused(command, capfd):
  # /dev/zero has no size to check up front: reading stops past the limit.
  from hlo_tools import cli

  extra = ["--topology=1x1x8"] if command != "diff" else [str(LOWERED)]
  rc = cli.main([command, "/dev/zero", *extra, "--max-input-bytes=100000"])
  _, err = capfd.readouterr()
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert "/dev/zero" in err and "100000" in err and "--max-input-bytes" in err


@pytest.mark.parametrize("command", ["explain", "verify", "parse", "diff"])
def test_module_cut_at_a_computation_boundary_is_refused(command, tmp_path, capfd):
  # XLA's parser would take the last computation as the entry; nvshmem-opt's verifier
  # rejects such a module, and so do the tools, with one line.
  from hlo_tools import cli

  text = (FIXTURES / "ring_1x1x8.before_async.hlo").read_text()
  cut = tmp_path / "cut.hlo"
  cut.write_text(text[: text.index("\nENTRY ")] + "\n")
  extra = {
    "explain": ["--topology=1x1x8"],
    "verify": ["--topology=1x1x8"],
    "parse": [],
    "diff": [str(FIXTURES / "ring_1x1x8.before_async.hlo")],
  }[command]
  rc = cli.main([command, str(cut), *extra])
  out, err = capfd.readouterr()
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
  assert f"{cut}:" in err and "no ENTRY computation" in err


def test_pre_optimization_module_is_said_to_be_one(capsys):
  # jax's lowered HLO has its permutes before collective-permute-combiner: what the
  # pass decides inside XLA can differ, and explain says so, in text and JSON.
  rc, out, err = run(capsys, LOWERED, "--topology=1x1x8")
  assert rc == 0, err
  assert out.splitlines()[1].startswith("note: this module is from before XLA's optimizations")
  assert "collective-permute-combiner" in out and "before_async" in out
  rc, out, _ = run(capsys, LOWERED, "--topology=1x1x8", "--format=json")
  assert json.loads(out)["stage"] == "before_optimizations"
  for fixture in ("ring_1x1x8.before_async.hlo", "ring_1x1x8.after_optimizations.hlo"):
    rc, out, _ = run(capsys, FIXTURES / fixture, "--topology=1x1x8")
    assert rc == 0 and "note:" not in out, fixture
    rc, out, _ = run(capsys, FIXTURES / fixture, "--topology=1x1x8", "--format=json")
    assert json.loads(out)["note"] is None


@pytest.mark.parametrize(
  "command",
  [
    ["explain", str(FIXTURES / "shift_1x1x2.before_async.hlo")],
    ["verify", str(FIXTURES / "shift_1x1x2.before_async.hlo")],
    ["report", str(FIXTURES / "shift_1x1x2.before_async.hlo"), "--out=unused"],
    ["heuristics", "sweep", "--only-given", "--no-plots", "--out=unused"],
  ],
)
def test_too_large_topology_says_so(command, capfd, tmp_path, monkeypatch):
  # The core reads 2000000 as "not a positive whole number"; it is a whole number,
  # over the limit of 2**20 devices.
  from hlo_tools import cli

  monkeypatch.chdir(tmp_path)
  rc = cli.main([*command, "--topology=1x2000000x8"])
  out, err = capfd.readouterr()
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
  assert "'2000000' is too large (max 1048576 devices)" in err
  assert "whole number" not in err and not list(tmp_path.iterdir())


# Modules as jax 0.9.1 and 0.10.2 build them for GPUs: replica_groups=mesh[...] on
# the tensor-parallel all-reduces and collectives_mode in every collective's
# backend_config (0.10.2), which the wheel's XLA does not know.
REAL_MODULES = [
  ("train_step_1x1x8.after_optimizations.hlo", "1x1x8", 6),
  ("train_step_1x2x8.after_optimizations.hlo", "1x2x8", 6),
  ("train_step_1x4x4.after_optimizations.hlo", "1x4x4", 6),
  ("train_step_1x2x8.before_async.hlo", "1x2x8", 6),
  ("driver_tp_cp_1x1x8.after_optimizations.hlo", "1x1x8", 1),
  ("jax091/ring_1x2x4.after_optimizations.hlo", "1x2x4", 1),
]


@pytest.mark.parametrize("fixture,topology,permutes", REAL_MODULES)
def test_every_tool_reads_real_modules(capsys, fixture, topology, permutes):
  path = FIXTURES / fixture
  text = path.read_text()
  rc, out, err = run(capsys, path, f"--topology={topology}", "--format=json")
  assert rc == 0, err
  result = json.loads(out)
  assert len(result["collectives"]) == permutes
  # Upstream's answer came from its real assigner: the driver read the module.
  assert {e["upstream"]["source"] for e in result["collectives"]} == {
    "nvshmem-opt --compare-upstream"
  }, result["collectives"][0]["upstream"]
  rc = cli.main(["verify", str(path), f"--topology={topology}", "--format=json"])
  out, err = capsys.readouterr()
  assert rc == 0, out + err
  checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
  assert checks["hlo-verifier"] == "pass" and checks["permutation"] == "pass"
  rc = cli.main(["diff", str(path), str(path), "--format=json"])
  out, err = capsys.readouterr()
  assert rc == 0, err
  assert json.loads(out)["summary"]["changed"] == 0
  if "mesh[" in text:
    assert "collectives_mode" in text


def test_upstream_column_says_exactly_why_it_is_missing(capsys, tmp_path, monkeypatch):
  # A module XLA's verifier rejects (a dot whose batch and contracting dimensions
  # clash), which our reader takes: the column quotes the driver's own line.
  bad = tmp_path / "bad.hlo"
  bad.write_text(
    (FIXTURES / "ring_1x1x8.before_async.hlo")
    .read_text()
    .replace(
      "lhs_contracting_dims={2}, rhs_batch_dims={0}",
      "lhs_contracting_dims={2}, rhs_batch_dims={1}",
      1,
    )
  )
  rc, out, err = run(capsys, bad, "--topology=1x1x8", "--format=json")
  assert rc == 0, err
  [e] = json.loads(out)["collectives"]
  assert e["upstream"]["backend"] is None
  assert e["upstream"]["source"].startswith(f"unavailable: nvshmem-opt: {bad}: ")
  assert "HloVerifier rejects" in e["upstream"]["source"]
  monkeypatch.setenv("NVSHMEM_OPT", str(tmp_path / "no-such-driver"))
  rc, out, _ = run(capsys, FIXTURES / "ring_1x1x8.before_async.hlo", "--topology=1x1x8")
  assert rc == 0
  assert "upstream XLA  - (unavailable: nvshmem-opt is not built" in out
