"""hlo_tools.ops.explain: per-permute reasoning on real fixtures and on the pass's
output, and the text helpers of an explanation."""

import json
import subprocess

from hlo_tools import cli
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model import driver
from hlo_tools.ops import explain

from conftest import FIXTURES, NVSHMEM_OPT as DRIVER, placed

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


# ---------------------------------------------------------------------------------------
# The text helpers, on entries as explain() writes them.


def test_pairs_text_cuts_long_lists():
  assert explain.pairs_text([[0, 1], [1, 0]]) == "0->1 1->0"
  ring = [[i, (i + 1) % 20] for i in range(20)]
  text = explain.pairs_text(ring)
  assert text.startswith("0->1 1->2 ") and text.endswith("15->16 ... (20 pairs)")


def test_where_text_names_every_loop_innermost_first():
  entry = {"computation": "body", "line": 12, "loops": [], "under_branch": None}
  assert explain.where_text(entry) == "%body line 12; not in a loop"
  entry["loops"] = [
    {"while": "inner", "computation": "outer_body", "trip_count": 4},
    {"while": "outer", "computation": "main", "trip_count": None},
  ]
  entry["under_branch"] = {"conditional": "cond", "computation": "body"}
  assert explain.where_text(entry) == (
    "%body line 12; a branch of conditional %cond in %body; "
    "while %inner in %outer_body (trip count 4) inside "
    "while %outer in %main (trip count unknown)"
  )
  assert explain.loop_counts(entry) == [4, None]


def test_upstream_text_only_where_the_set_offers_nvshmem():
  entry = {"upstream": {"backend": "NVSHMEM", "source": "nvshmem-opt --compare-upstream"}}
  assert explain.upstream_text(entry, "nccl,nvshmem") == (
    "NVSHMEM (nvshmem-opt --compare-upstream)"
  )
  assert explain.upstream_text(entry, None) == "NVSHMEM (nvshmem-opt --compare-upstream)"
  assert explain.upstream_text(entry, "nccl,peer") == (
    "not compared: its assigner picks only NVSHMEM, which the backend set nccl,peer does not offer"
  )
  missing = {"upstream": {"backend": None, "source": "unavailable: not built"}}
  assert explain.upstream_text(missing, None) == "- (unavailable: not built)"


def test_modeled_and_current_text():
  assert explain.us(None) == "-" and explain.us(1.234) == "1.23 us"
  assert explain.modeled_text({"nccl": 1.5, "nvshmem": None}, {}) == "nccl 1.50 us, nvshmem -"
  sets = {"nccl": {"us": 2.0, "refused": None}, "peer": {"us": None, "refused": "two hosts"}}
  assert explain.modeled_text({}, sets) == "nccl 2.00 us, peer refused"
  entry = {"current_backend": "DEFAULT", "current_collectives_mode": None}
  assert explain.current_text(entry) == "DEFAULT"
  entry.update(current_collectives_mode="COLLECTIVES_PEER_MEMORY", current_plan="peer")
  assert explain.current_text(entry) == "DEFAULT, collectives_mode COLLECTIVES_PEER_MEMORY (peer)"


def test_choice_text_leads_with_the_users_mark():
  entry = {
    "user_mark": "peer",
    "choice": {"plan": "peer", "backend": "DEFAULT"},
    "choice_collectives_mode": "COLLECTIVES_PEER_MEMORY",
    "modeled_us": {"chosen": 3.0},
    "current_backend": "DEFAULT",
    "current_collectives_mode": None,
    "mark_not_run": "COLLECTIVES_PRIVATE_MEMORY",
  }
  assert explain.choice_text(entry) == (
    "marked by the user: peer -> peer (backend DEFAULT, collectives_mode "
    "COLLECTIVES_PEER_MEMORY, 3.00 us); now DEFAULT; runs COLLECTIVES_PRIVATE_MEMORY on "
    "this XLA, not as marked"
  )


def test_priced_text_says_a_parametric_price_is_an_estimate():
  measured = {"nccl": {"link_class": "nvlink", "model": "measured"}}
  assert explain.priced_text(measured) == "nccl by its slowest edge, nvlink (measured)"
  parametric = {"nvshmem": {"link_class": "network", "model": "parametric"}}
  assert explain.priced_text(parametric).startswith(
    "nvshmem by its slowest edge, network (parametric); parametric: an estimate"
  )


SYNC = """HloModule m, num_partitions=2

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  ROOT %cp = f32[16]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
"""


def test_a_module_of_sync_permutes_without_fusions_is_pre_optimization():
  module = parse_hlo_text(SYNC, "m.hlo")
  assert explain.is_pre_optimization(module, [{"form": "sync"}])
  # An async permute, or none at all: not a module before XLA's optimizations.
  assert not explain.is_pre_optimization(module, [{"form": "start-done"}])
  assert not explain.is_pre_optimization(module, [])
