"""hlo_tools.model.description: what `hlo-tools explain` prints as JSON, from one run of
nvshmem-opt or, without it, through the core's binding."""

import pytest

from hlo_tools import selection
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model import decisions, description, options, sources

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


# One source of module facts: the tools take each permute's decision, bytes and device
# edges, and the module's partition count, from nvshmem-opt's JSON (XLA's own parse);
# the Python reader decides only where the driver gives no answer, and then with the
# same facts (a cross-check on real HLO).
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


# ---------------------------------------------------------------------------------------
# One permute's entry

COND_RING = FIXTURES / "cond_ring_1x1x8.before_async.hlo"


def _branch_permute():
  """cond_ring's permute in the true branch of a conditional inside a 7-trip loop,
  decided through the binding."""
  selected = options.load("1x1x8")
  source = sources.read_source(str(COND_RING))
  perms = decisions.analyze(source, selected.topology, selected.table)
  [perm] = [p for p in perms if p.record.start == "ppermute.4.0"]
  return perm, selected.table


def test_a_permute_under_a_branch_runs_at_most_its_loops_trips():
  perm, table = _branch_permute()
  entry = description.describe_permute(perm, table=table)
  assert (entry["computation"], entry["instruction"], entry["form"]) == (
    "region_1.1_spmd",
    "ppermute.4.0",
    "sync",
  )
  assert entry["under_branch"] == {
    "conditional": "conditional.1.clone",
    "computation": "region_0.3_spmd",
    "branch": "region_1.1_spmd",
  }
  assert entry["loops"] == [{"while": "while.16", "computation": "main.6_spmd", "trip_count": 7}]
  assert (entry["while_loop"], entry["while_computation"]) == ("while.16", "main.6_spmd")
  # A branch runs on some trips only: no exact count, at most the loop's.
  assert entry["trip_count"] is None and entry["trips_at_least"] is None
  assert (entry["trips_at_most"], entry["runs_per_step"], entry["runs_bound"]) == (7, 7, "at most")
  assert entry["modeled_loop_us"] == pytest.approx(entry["modeled_us"]["chosen"] * 7)
  assert entry["bytes"] == 2048 * 4096 * 4 and entry["buffers"] == 1
  assert entry["pairs"] == [[i, (i + 1) % 8] for i in range(8)]
  edges = [(e["source"], e["target"]) for e in entry["edges"]]
  assert edges == [(i, (i + 1) % 8) for i in range(8)]
  assert {e["link_class"] for e in entry["edges"]} == {"nvlink"}  # one host of 8
  assert entry["decided_by"] == "core binding"
  assert (entry["current_backend"], entry["current_plan"]) == ("DEFAULT", "nccl")
  assert entry["current_collectives_mode"] is None and entry["current_unsafe"] == []
  assert entry["recorded"] is None and entry["requested_mode"] is None
  assert entry["user_mark"] is None
  assert list(entry["modeled_us"]) == [*selection.BACKENDS, "chosen"]
  assert set(entry["backends"]) == {"nccl", "nvshmem"}
  plan = entry["choice"]["plan"]
  assert entry["choice"]["backend"] == {"nccl": "DEFAULT", "nvshmem": "NVSHMEM"}[plan]


def test_upstreams_answer_or_why_there_is_none():
  perm, _ = _branch_permute()
  key = ("region_1.1_spmd", "ppermute.4.0")
  assert description.describe_permute(perm, upstream={key: "nvshmem"})["upstream"] == {
    "backend": "nvshmem",
    "source": "nvshmem-opt --compare-upstream",
  }
  assert description.describe_permute(perm, upstream_why="the driver failed")["upstream"] == {
    "backend": None,
    "source": "unavailable: the driver failed",
  }
  assert description.describe_permute(perm, upstream={})["upstream"] == {
    "backend": None,
    "source": "unavailable: nvshmem-opt gave no answer for it",
  }


# The frontend attributes nvshmem-opt --annotate writes (its output on ring_1x1x8).
ANNOTATED = """HloModule m, num_partitions=2

ENTRY e {
  p = f32[8] parameter(0)
  ROOT cp = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}, frontend_attributes={_nvshmem_modeled_us="nccl=10.170,nvshmem=37.976,peer=none",_nvshmem_plan="nccl",_nvshmem_reason="NCCL: NVSHMEM 37.98 us does not beat NCCL 10.17 us"}
}
"""


def test_recorded_reads_what_the_pass_wrote_on_the_op():
  module = parse_hlo_text(ANNOTATED)
  assert description._recorded(module.entry.instruction("cp")) == {
    "plan": "nccl",
    "reason": "NCCL: NVSHMEM 37.98 us does not beat NCCL 10.17 us",
    "modeled_us": {"nccl": 10.17, "nvshmem": 37.976, "peer": None},
  }
  assert description._recorded(module.entry.instruction("p")) is None


DECISION = {
  "backend_us": {"nccl": 5.0, "nvshmem": None, "peer": 4.0},
  "refused": {"nvshmem": "it would hang"},
  "edges_by_class": {"same_device": 0, "nvlink": 6, "nvlink_domain": 0, "network": 2},
}


def test_backend_entries_over_the_set():
  assert description.backend_entries(DECISION, ("nccl", "nvshmem", "symmetric")) == {
    "nccl": {"us": 5.0, "refused": None},
    "nvshmem": {"us": None, "refused": "it would hang"},
    "symmetric": {"us": None, "refused": None},
  }


# NCCL priced by parameters over NVLink and by a measured curve across hosts, where
# it is far slower; peer memory by parameters.
TABLE = """links { backend: NCCL link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }
links { backend: NCCL link_class: NETWORK latency_us: 20 bandwidth_gbps: 50 per_buffer_us: 0
  points { buffers: 1 bytes: 1024 us: 21 }
  points { buffers: 1 bytes: 1048576 us: 40 } }
links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }
"""


def test_pricing_names_the_slowest_edge_class_and_its_model():
  table = selection.parse_cost_table(TABLE)
  got = description.pricing(table, DECISION, 65536, 1)
  assert got["nccl"] == {"link_class": "network", "model": "measured curve"}
  assert "nvshmem" not in got  # refused: not priced
  assert got["peer"]["model"] == "parametric"
  # Inside one host, NVLink is all there is.
  inside = dict(DECISION, edges_by_class={"same_device": 0, "nvlink": 8, "network": 0})
  assert description.pricing(table, inside, 65536, 1)["nccl"] == {
    "link_class": "nvlink",
    "model": "parametric",
  }
  assert description.pricing(table, dict(DECISION, edges_by_class={}), 65536, 1) == {}


NO_PERMUTE = "HloModule m\n\nENTRY e {\n  ROOT p = f32[8] parameter(0)\n}\n"


def test_module_report_runs_no_driver_where_none_is_needed(tmp_path):
  path = tmp_path / "m.hlo"
  path.write_text(NO_PERMUTE)
  selected = options.load("1x1x8")
  source = sources.read_source(str(path))
  assert description.module_report(str(path), selected, source, use_driver=False) == (
    None,
    "not asked of nvshmem-opt",
  )
  assert description.module_report(str(path), selected, source) == (None, None)
  result = description.describe(str(path), selected)
  assert result["collectives"] == [] and result["module"] == "m"
  assert (result["num_partitions"], result["num_partitions_from"]) == (1, "default")
