"""hlo_tools.ops.heuristics.sweep_summary: the numbers the goals are stated in,
computed from the sweep's rows alone, and the lines printed last."""

import json
import math

import pytest

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import cli
from hlo_tools.ops.heuristics import sweep, sweep_cases, sweep_summary


def run_cli(argv, capsys):
  rc = cli.main(["heuristics"] + argv)
  out, err = capsys.readouterr()
  return rc, out, err


def _row(topology, shape, size, chosen, best, oracle, **kw):
  row = {
    "topology": topology,
    "shape": shape,
    "buffer_bytes": size,
    "chosen_plan": chosen,
    "best_plan": best,
    "oracle_plan": oracle,
    "inside_margin": best != oracle,
    "upstream_hangs": False,
    "upstream_over_heap": False,
    "mixed": False,
    "ratio_to_oracle": 1.0,
    "ratio_to_upstream": 1.0,
    "ratio_to_nccl": 1.0,
  }
  row.update(kw)
  return row


ROWS = [
  _row("1x2x4", "ring", 1 << 10, "nccl", "nccl", "nccl", mixed=True),
  _row("1x2x4", "ring", 1 << 20, "nvshmem", "nvshmem", "nvshmem", mixed=True,
       ratio_to_upstream=0.5, ratio_to_nccl=0.5),
  # Upstream's plan would hang: in no ratio to upstream.
  _row("1x1x8", "shift", 1 << 10, "nccl", "nccl", "nvshmem", upstream_hangs=True,
       ratio_to_upstream=2.0, ratio_to_oracle=1.04),
  # The core missed its own best; upstream's NVSHMEM overflows the heap.
  _row("1x1x8", "ring", 1 << 30, "nccl", "nvshmem", "nvshmem", upstream_over_heap=True,
       ratio_to_upstream=1.25, ratio_to_oracle=1.25),
]  # fmt: skip


def test_summary_counts_and_ratios_from_the_rows():
  s = sweep_summary.summarize(ROWS)
  assert (s["cases"], s["choice_equals_best"], s["choice_equals_oracle"]) == (4, 3, 2)
  assert s["choice_equals_best_fraction"] == 0.75
  assert s["mismatches"] == ["1x1x8 ring 1 GiB"]
  assert s["kept_inside_margin"] == ["1x1x8 shift 1 KiB"]
  assert s["ratio_to_oracle"] == {
    "geomean": pytest.approx((1.04 * 1.25) ** 0.25),
    "min": 1.0,
    "max": 1.25,
    "min_case": "1x2x4 ring 1 KiB",
    "max_case": "1x1x8 ring 1 GiB",
  }
  # The hanging shift is in no ratio to upstream.
  up = s["ratio_to_upstream"]
  assert (up["min"], up["max"], up["min_case"]) == (0.5, 1.25, "1x2x4 ring 1 MiB")
  assert up["geomean"] == pytest.approx((0.5 * 1.25) ** (1 / 3))
  assert (s["worse_than_upstream"], s["worse_than_upstream_over_heap"]) == (1, 1)
  assert s["upstream_would_hang"] == 1
  assert s["ratio_to_upstream_within_heap"]["max"] == 1.0
  assert s["mixed_multi_host_ring_cases"] == 2 and s["mixed_ratio_to_nccl"]["min"] == 0.5
  assert s["plans_chosen"] == {"nccl": 3, "nvshmem": 1}
  assert s["goals"] == {
    "choice_equals_best_everywhere": False,
    "never_worse_than_upstream": False,
    # The 1 KiB mixed ring is no better than upstream: not 20% better.
    "mixed_rings_20pct_better_than_upstream": False,
  }


def test_goals_over_no_cases_are_neither_met_nor_missed():
  s = sweep_summary.summarize([])
  assert s["cases"] == 0 and s["choice_equals_best_fraction"] == 1.0
  assert s["ratio_to_oracle"] is None and s["mixed_ratio_to_upstream"] is None
  assert set(s["goals"].values()) == {None}


def test_printed_lines_end_with_the_choice_line():
  lines = sweep_summary.format_summary(sweep_summary.summarize(ROWS))
  assert lines[0] == "cases: 4; plans chosen: nccl 3, nvshmem 1"
  assert lines[1] == "worst ratio to oracle (margin ignored): 1.250x (1x1x8 ring 1 GiB)"
  [goals] = [l for l in lines if l.startswith("goals:")]
  assert goals.count("NOT MET") == 3
  assert "NCCL kept inside the margin (the oracle, margin ignored, differs): " in "\n".join(lines)
  assert "choice != model's best in: 1x1x8 ring 1 GiB" in lines
  assert lines[-1] == "choice == model's best: 75.0% (3 of 4)"


def test_long_case_lists_are_cut_to_five():
  names = [f"case {i}" for i in range(7)]
  assert sweep_summary._cases(names) == "case 0, case 1, case 2, case 3, case 4 (+2 more)"
  assert sweep_summary._cases(names[:2]) == "case 0, case 1"
  assert sweep_summary._geomean([2.0, 8.0]) == pytest.approx(4.0)
  assert sweep_summary._geomean([]) is None and not math.isnan(sweep_summary._geomean([1.0]))


def test_sweep_never_prices_a_plan_that_hangs():
  # Upstream's NVSHMEM plan for a shift hangs XLA's barrier: it has no time, so it is
  # in no ratio (it was the "worst 1.332x (1x1x8 shift 16 MiB)").
  topologies = sweep.parse_topologies(["1x1x8"])
  rows = sweep_cases.sweep(topologies, selection.load_cost_table())
  s = sweep_summary.summarize(rows)
  assert s["upstream_would_hang"] > 0
  for key in ("ratio_to_upstream", "ratio_to_upstream_within_heap"):
    assert "shift" not in s[key]["max_case"] and "shift" not in s[key]["min_case"]
  runs = [r for r in rows if not r["upstream_hangs"]]
  assert s["ratio_to_upstream"]["max"] == max(r["ratio_to_upstream"] for r in runs)
  assert "in no ratio" in "\n".join(sweep_summary.format_summary(s))


def test_sweep_goal_over_no_case_is_not_applicable(tmp_path, capsys):
  # One host: no mixed multi-host ring, so that goal is neither met nor missed.
  rc, out, err = run_cli(
    [
      "sweep",
      f"--out={tmp_path}",
      "--no-plots",
      "--only-given",
      "--topology=1x1x8",
      "--sizes=1K,1M",
    ],
    capsys,
  )
  assert rc == 0, err
  summary = json.loads((tmp_path / "sweep.json").read_text())["summary"]
  assert summary["mixed_multi_host_ring_cases"] == 0
  assert summary["goals"]["mixed_rings_20pct_better_than_upstream"] is None
  [goals] = [l for l in out.splitlines() if l.startswith("goals:")]
  assert ">=20% better on mixed multi-host rings: n/a (no such cases)" in goals
  assert goals.count("NOT MET") == sum(1 for v in summary["goals"].values() if v is False)
