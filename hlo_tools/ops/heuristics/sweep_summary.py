"""The heuristics sweep's summary: the numbers the goals are stated in, computed from the rows,
and the lines the sweep prints last."""

import math
from collections.abc import Sequence
from typing import Any

from hlo_tools.ops.heuristics.sweep_cases import EPS, PLANS, RING_SHAPES, Row, case_name


def _geomean(values: Sequence[float]) -> float | None:
  return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _stats(rows: Sequence[Row], key: str) -> dict[str, Any] | None:
  values = [r[key] for r in rows]
  if not values:
    return None
  worst = max(rows, key=lambda r: r[key])
  best = min(rows, key=lambda r: r[key])
  return {
    "geomean": _geomean(values),
    "min": best[key],
    "max": worst[key],
    "min_case": case_name(best),
    "max_case": case_name(worst),
  }


def summarize(rows: Sequence[Row]) -> dict[str, Any]:
  """The numbers the issue's goals are stated in; computed from rows alone.

  Upstream's plans that would hang XLA's NVSHMEM barrier are counted apart, never in
  a ratio: a plan that does not finish has no time to compare. A goal over no case
  is None (not applicable), neither met nor missed."""
  matches = [r for r in rows if r["chosen_plan"] == r["best_plan"]]
  runs = [r for r in rows if not r["upstream_hangs"]]
  worse_than_upstream = [r for r in runs if r["ratio_to_upstream"] > 1 + EPS]
  mixed_rings = [r for r in runs if r["mixed"] and r["shape"] in RING_SHAPES]
  kept = [r for r in rows if r["inside_margin"]]
  summary: dict[str, Any] = {
    "cases": len(rows),
    "choice_equals_best": len(matches),
    "choice_equals_best_fraction": len(matches) / len(rows) if rows else 1.0,
    "mismatches": [case_name(r) for r in rows if r["chosen_plan"] != r["best_plan"]],
    "kept_inside_margin": [case_name(r) for r in kept],
    "choice_equals_oracle": sum(1 for r in rows if r["chosen_plan"] == r["oracle_plan"]),
    "ratio_to_oracle": _stats(rows, "ratio_to_oracle"),
    "ratio_to_upstream": _stats(runs, "ratio_to_upstream"),
    "worse_than_upstream": len(worse_than_upstream),
    "upstream_would_hang": len(rows) - len(runs),
    "worse_than_upstream_over_heap": sum(1 for r in worse_than_upstream if r["upstream_over_heap"]),
    # Upstream's plan above the heap would not fit NVSHMEM's default heap,
    # so the comparison is also given without those cases.
    "ratio_to_upstream_within_heap": _stats(
      [r for r in runs if not r["upstream_over_heap"]], "ratio_to_upstream"
    ),
    "mixed_multi_host_ring_cases": len(mixed_rings),
    "mixed_ratio_to_upstream": _stats(mixed_rings, "ratio_to_upstream"),
    "mixed_ratio_to_nccl": _stats(mixed_rings, "ratio_to_nccl"),
    "plans_chosen": {p: sum(1 for r in rows if r["chosen_plan"] == p) for p in PLANS},
  }
  mixed = summary["mixed_ratio_to_upstream"]
  summary["goals"] = {
    "choice_equals_best_everywhere": len(matches) == len(rows) if rows else None,
    "never_worse_than_upstream": not worse_than_upstream if runs else None,
    # "At least 20% better" on every mixed multi-host ring, as a ratio <= 0.8.
    "mixed_rings_20pct_better_than_upstream": None if mixed is None else mixed["max"] <= 0.8 + EPS,
  }
  return summary


def _fmt_stats(stats: dict[str, Any] | None) -> str:
  if stats is None:
    return "n/a (no such cases)"
  return (
    f"geomean {stats['geomean']:.3f}x, best {stats['min']:.3f}x "
    f"({stats['min_case']}), worst {stats['max']:.3f}x ({stats['max_case']})"
  )


def _goal(ok: bool | None) -> str:
  return "n/a (no such cases)" if ok is None else "MET" if ok else "NOT MET"


def _cases(names: Sequence[str], limit: int = 5) -> str:
  more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


def format_summary(summary: dict[str, Any]) -> list[str]:
  """Lines printed at the end of the sweep; the `choice == best` line is last."""
  s, g = summary, summary["goals"]
  lines = [
    f"cases: {s['cases']}; plans chosen: "
    + ", ".join(f"{p} {n}" for p, n in s["plans_chosen"].items()),
    f"worst ratio to oracle (margin ignored): {s['ratio_to_oracle']['max']:.3f}x "
    f"({s['ratio_to_oracle']['max_case']})"
    if s["ratio_to_oracle"]
    else "worst ratio to oracle (margin ignored): n/a",
    "ratio to upstream's assigner (where its plan runs): " + _fmt_stats(s["ratio_to_upstream"]),
    f"worse than upstream's assigner: {s['worse_than_upstream']} cases "
    f"({s['worse_than_upstream_over_heap']} of them where upstream's NVSHMEM "
    "plan exceeds the symmetric heap); upstream's plan would hang XLA's NVSHMEM "
    f"barrier in {s['upstream_would_hang']} cases (in no ratio)",
    "ratio to upstream's assigner where its plan runs and fits the heap: "
    + _fmt_stats(s["ratio_to_upstream_within_heap"]),
    f"mixed multi-host rings ({s['mixed_multi_host_ring_cases']} cases):",
    "  ratio to upstream's assigner: " + _fmt_stats(s["mixed_ratio_to_upstream"]),
    "  ratio to NCCL-only: " + _fmt_stats(s["mixed_ratio_to_nccl"]),
    "goals: choice == model's best everywhere: "
    f"{_goal(g['choice_equals_best_everywhere'])}; never worse than upstream: "
    f"{_goal(g['never_worse_than_upstream'])}; >=20% better on mixed multi-host "
    f"rings: {_goal(g['mixed_rings_20pct_better_than_upstream'])}",
  ]
  if s["kept_inside_margin"]:
    lines.append(
      f"NCCL kept inside the margin (the oracle, margin ignored, differs): "
      f"{_cases(s['kept_inside_margin'])}"
    )
  if s["mismatches"]:
    lines.append(f"choice != model's best in: {_cases(s['mismatches'])}")
  lines.append(
    f"choice == model's best: {100 * s['choice_equals_best_fraction']:.1f}% "
    f"({s['choice_equals_best']} of {s['cases']})"
  )
  return lines
