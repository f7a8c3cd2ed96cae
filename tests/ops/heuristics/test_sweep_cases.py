"""hlo_tools.ops.heuristics.sweep_cases: the sweep's cases and one case's row (each
plan's modeled time, the core's choice, the model's best, the oracle, upstream's)."""

import math

import pytest

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools.ops.heuristics import sweep, sweep_cases, sweep_summary

# NCCL and NVSHMEM over NVLink, both 1 GB/s (1000 bytes a us): NCCL 10 us + 3 us per
# extra buffer, NVSHMEM 5 us + 4 us.
TABLE = """margin: 0.05
links { backend: NCCL link_class: NVLINK latency_us: 10 bandwidth_gbps: 1 per_buffer_us: 3 }
links { backend: NVSHMEM link_class: NVLINK latency_us: 5 bandwidth_gbps: 1 per_buffer_us: 4 }
"""
TWO_GPUS = "1x1x2:map=0,1"


def test_rings_wrap_around_and_shifts_do_not():
  assert sweep_cases.pairs_for("ring", 4) == [(0, 1), (1, 2), (2, 3), (3, 0)]
  assert sweep_cases.pairs_for("kv", 4) == sweep_cases.pairs_for("ring", 4)
  assert sweep_cases.pairs_for("shift", 4) == [(0, 1), (1, 2), (2, 3)]
  assert sweep_cases._pairs_text([(0, 1), (1, 0)]) == "{{0,1},{1,0}}"


def test_ratio_of_zero_times():
  assert sweep_cases._ratio(3.0, 2.0) == 1.5
  assert sweep_cases._ratio(0.0, 0.0) == 1.0 and sweep_cases._ratio(1.0, 0.0) == math.inf


def _decision(nccl, nvshmem):
  return {"backend_us": {"nccl": nccl, "nvshmem": nvshmem}}


def test_oracle_is_the_fastest_plan_ties_going_to_nccl():
  assert sweep_cases._oracle(_decision(10.0, 10.0)) == ("nccl", 10.0)
  assert sweep_cases._oracle(_decision(10.0, 9.0)) == ("nvshmem", 9.0)
  assert sweep_cases._oracle(_decision(10.0, None)) == ("nccl", 10.0)


def test_best_leaves_nccl_only_past_the_margin():
  # A 5% margin: NVSHMEM must take at most 95 us against NCCL's 100.
  assert sweep_cases._best(_decision(100.0, 96.0), 0.05) == "nccl"
  assert sweep_cases._best(_decision(100.0, 95.0), 0.05) == "nvshmem"
  assert sweep_cases._best(_decision(100.0, None), 0.05) == "nccl"


def test_case_name_gives_the_buffer_size():
  row = {"topology": "1x2x4", "shape": "kv", "buffer_bytes": 1536}
  assert sweep_cases.case_name(row) == "1x2x4 kv 1.5 KiB"


def test_row_of_a_two_gpu_ring_and_kv_pair():
  table = selection.CostTable.parse(TABLE, "test")
  topology = selection.parse_topology(TWO_GPUS)
  ring = sweep_cases.evaluate(TWO_GPUS, topology, table, "ring", 1000, "nccl")
  # 1000 B both ways over NVLink: NCCL 10 + 1 us, NVSHMEM 5 + 1 us.
  assert (ring["bytes"], ring["num_edges"], ring["edges_nvlink"]) == (1000, 2, 2)
  assert (ring["nccl_us"], ring["nvshmem_us"]) == (11.0, 6.0)
  assert (ring["chosen_plan"], ring["best_plan"], ring["oracle_plan"]) == ("nvshmem",) * 3
  assert ring["ratio_to_nccl"] == pytest.approx(6 / 11)
  # Upstream kept NCCL here: priced as NCCL.
  assert (ring["upstream_plan"], ring["upstream_us"]) == ("nccl", 11.0)
  assert not ring["mixed"] and not ring["multi_host"] and not ring["inside_margin"]
  # K and V in one permute: twice the bytes, one extra buffer each side.
  kv = sweep_cases.evaluate(TWO_GPUS, topology, table, "kv", 1000, "nvshmem")
  assert kv["bytes"] == 2000 and (kv["nccl_us"], kv["nvshmem_us"]) == (15.0, 11.0)
  assert (kv["upstream_plan"], kv["upstream_us"], kv["ratio_to_upstream"]) == ("nvshmem", 11.0, 1.0)


def test_upstreams_nvshmem_shift_hangs_and_is_flagged():
  # 0 -> 1 only: device 0 has no source, so NVSHMEM's barrier would hang.
  table = selection.CostTable.parse(TABLE, "test")
  topology = selection.parse_topology(TWO_GPUS)
  shift = sweep_cases.evaluate(TWO_GPUS, topology, table, "shift", 1000, "nvshmem")
  assert shift["nvshmem_us"] is None and shift["chosen_plan"] == "nccl"
  assert shift["upstream_hangs"] and shift["upstream_us"] == 6.0
  assert shift["ratio_to_upstream"] == pytest.approx(11 / 6)


def test_upstream_plans_come_from_the_real_assigner():
  # Upstream's assigner puts every collective-permute inside one host on NVSHMEM.
  plans = sweep_cases.upstream_plans([("1x1x8", selection.parse_topology("1x1x8"))])
  assert plans == {("1x1x8", s): "nvshmem" for s in ("ring", "kv", "shift")}


def test_sweep_default_table_findings():
  """What holds for the shipped table, whatever its calibrated numbers."""
  topologies = sweep.parse_topologies(sweep_cases.DEFAULT_TOPOLOGIES)
  table = selection.load_cost_table()
  rows = sweep_cases.sweep(topologies, table)
  s = sweep_summary.summarize(rows)
  assert s["cases"] == 5 * 3 * 21
  # The core departs from the fastest plan only inside its margin.
  for row in rows:
    assert row["chosen_us"] <= row["oracle_us"] / (1 - table.margin) + 1e-9
  # Worse than upstream only inside the margin, where upstream overflows the heap, or
  # where upstream's NVSHMEM is a plan the pinned runtime cannot run (edges between
  # hosts: the core refuses NVSHMEM there, nvshmem_us is None).
  for row in rows:
    if row["ratio_to_upstream"] > 1 and not row["upstream_hangs"] and row["nvshmem_us"] is not None:
      assert row["upstream_over_heap"] or row["ratio_to_upstream"] <= 1 / (1 - table.margin)
  # Upstream's assigner (asked through the driver) picks NVSHMEM for a shift inside an
  # NVLink domain, which would hang; the core never does.
  hanging = {(r["topology"], r["shape"]) for r in rows if r["upstream_hangs"]}
  assert ("1x1x8", "shift") in hanging and all(shape == "shift" for _, shape in hanging)
  assert not [r for r in rows if r["upstream_hangs"] and r["chosen_plan"] == "nvshmem"]
  assert set(s["plans_chosen"]) == {"nccl", "nvshmem"}
  assert s["mixed_ratio_to_nccl"]["min"] == s["mixed_ratio_to_nccl"]["max"] == 1.0


def test_sweep_choice_is_the_models_best_and_the_margin_is_named():
  # Where the choice differs from the oracle it is the margin: NVSHMEM modeled
  # faster by less than the core's 5%, NCCL kept (1x1x8 and 1x9x8:nvl72 at K/V 4 MiB
  # each, before NVSHMEM was charged the barrier its thunk now enters before its
  # puts). The choice equals the model's best (margin applied) everywhere.
  topologies = sweep.parse_topologies(sweep_cases.DEFAULT_TOPOLOGIES)
  table = selection.load_cost_table()
  rows = sweep_cases.sweep(topologies, table)
  s = sweep_summary.summarize(rows)
  assert s["mismatches"] == [] and s["choice_equals_best"] == len(rows)
  assert s["goals"]["choice_equals_best_everywhere"] is True
  for row in rows:
    if row["chosen_plan"] != row["oracle_plan"]:
      assert row["inside_margin"] and row["chosen_plan"] == "nccl"
      assert row["nvshmem_us"] > row["nccl_us"] * (1 - table.margin)
  assert {n.split()[0] for n in s["kept_inside_margin"]} <= {"1x1x8", "1x9x8:nvl72"}
  lines = sweep_summary.format_summary(s)
  assert any(l.startswith("NCCL kept inside the margin") for l in lines) == bool(
    s["kept_inside_margin"]
  )
