"""One source of module facts: the tools take each permute's decision, bytes and
device edges, and the module's partition count, from nvshmem-opt's JSON (XLA's own
parse); the Python reader decides only where the driver gives no answer, and then
with the same facts (a cross-check on real HLO) and the same partition rule."""

import pytest

from hlo_tools import selection
from hlo_tools.model import description, driver, options, sources

from conftest import FIXTURES

FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"

CASES = [
  ("ring_1x2x4.before_async.hlo", "1x2x4"),
  ("ring_2x2x4.after_optimizations.hlo", "2x2x4"),
  ("train_step_1x1x8.before_async.hlo", "1x1x8"),
  ("pipeline_1x2x4.before_async.hlo", "1x2x4"),
  ("fp8_kv_ring_1x1x8.before_async.hlo", "1x1x8"),
  ("ring_1x2x4.lowered.hlo", "1x2x4"),
  ("jax0112/h200_jax0112_ppermute_loop.after_optimizations.hlo", "1x1x2"),
]

FACTS = (
  "bytes",
  "buffers",
  "edges",
  "edges_by_class",
  "reason",
  "loops",
  "trip_count",
  "trips_at_least",
)


def _by_op(result):
  return {(c["computation"], c["instruction"]): c for c in result["collectives"]}


@pytest.mark.parametrize("name,spec", CASES)
def test_explain_takes_the_drivers_facts_and_the_reader_agrees(name, spec):
  path = FIXTURES / name
  told = description.describe(path, options.load(spec, FAST_NVSHMEM))
  assert told["collectives"], name
  assert {c["decided_by"] for c in told["collectives"]} == {"nvshmem-opt"}
  alone = description.describe(path, options.load(spec, FAST_NVSHMEM), use_driver=False)
  assert {c["decided_by"] for c in alone["collectives"]} == {"core binding"}
  assert alone["num_partitions"] == told["num_partitions"]
  told, alone = _by_op(told), _by_op(alone)
  assert told.keys() == alone.keys()
  for op, entry in told.items():
    assert entry["choice"] == alone[op]["choice"], op
    for fact in FACTS:
      if fact == "reason" and entry["reason"].startswith("not rewritten: "):
        # The driver says why the pass leaves this form alone, then the model's reason.
        assert entry["reason"].endswith("model: " + alone[op]["reason"]), op
        continue
      assert entry[fact] == alone[op][fact], (op, fact)
    for backend, us in entry["modeled_us"].items():
      other = alone[op]["modeled_us"][backend]
      assert (us is None) == (other is None), (op, backend)
      assert us is None or us == pytest.approx(other, rel=1e-6), (op, backend)


def test_fp8_ring_is_refused_nvshmem_by_either_path():
  # The element-type rule reaches the binding too: before, only the driver knew it.
  path = FIXTURES / "fp8_kv_ring_1x1x8.before_async.hlo"
  for use_driver in (True, False):
    result = description.describe(path, options.load("1x1x8", FAST_NVSHMEM), use_driver=use_driver)
    for c in result["collectives"]:
      assert c["choice"]["plan"] == "nccl"
      assert "f8e4m3fn" in c["backends"]["nvshmem"]["refused"]


def _bare(tmp_path):
  """The lowered ring without its Shardy mesh: no num_partitions, no mesh."""
  header, rest = (FIXTURES / "ring_1x2x4.lowered.hlo").read_text().split("\n", 1)
  bare = tmp_path / "no_mesh.hlo"
  bare.write_text(header.split(", frontend_attributes=")[0] + "\n" + rest)
  return bare


@pytest.mark.parametrize(
  "mesh,spec", [(True, "1x2x4"), (True, None), (False, "2x2x4"), (False, None)]
)
def test_reader_and_driver_settle_partitions_alike(tmp_path, mesh, spec):
  path = FIXTURES / "ring_1x2x4.lowered.hlo" if mesh else _bare(tmp_path)
  topology = selection.parse_topology(spec) if spec else None
  source = sources.resolve_partitions(sources.read_source(path), topology)
  rc, report, message = driver.run_nvshmem_opt(path, spec, devices_per_host=4)
  assert rc == 0, message
  assert source.num_partitions == report["num_partitions"]
  assert source.partitions_from == f"inferred from {report['partitions_from']}"
  expected = 8 if mesh or spec is None else 16
  assert report["num_partitions"] == expected


def test_driver_json_gives_loops_edges_and_counts():
  rc, report, message = driver.run_nvshmem_opt(
    FIXTURES / "scan_remat_1x1x8.before_async.hlo", "1x1x8"
  )
  assert rc == 0, message
  assert (report["num_partitions"], report["num_replicas"]) == (8, 1)
  assert report["partitions_from"] == ""  # the header states it
  assert len(report["decisions"]) == 3
  for d in report["decisions"]:
    # A remat scan of 4 steps around a ring of 8: nested loops, innermost first.
    assert [loop["trip_count"] for loop in d["loops"]] == [8, 4]
    assert d["loops"][1]["computation"] == "main.19_spmd"
    assert len(d["edges"]) == len(d["pairs"]) == 8
    assert {link for _, _, link in d["edges"]} == {"nvlink"}
    assert d["buffers"] >= 1 and d["bytes"] > 0


def test_driver_error_is_not_its_partition_note(tmp_path):
  # A module without num_partitions whose ids need 16 devices on an 8-device
  # topology: the driver first notes the count it inferred, then fails; the tools
  # quote the failure.
  bad = tmp_path / "wide.hlo"
  bad.write_text(
    (FIXTURES / "ring_1x2x4.lowered.hlo")
    .read_text()
    .replace("source_target_pairs={{0,1}", "source_target_pairs={{0,15}", 1)
  )
  report, why = driver.explain_report(bad, "1x2x4", None)
  assert report is None
  assert "needs 16 devices" in why and "gives no num_partitions" not in why
