"""`hlo-tools heuristics sweep`: the backend-selection heuristic over sizes x topologies x shapes.

    hlo-tools heuristics sweep [--out=DIR] [--topology=SPEC ...] [--cost-table=F]
                               [--sizes=1K,64M,...] [--only-given] [--no-plots]

Every number comes from the C++ core the pass runs (hlo_tools.selection): one
implementation of the model, not a Python copy of it. For each case the sweep
records each plan's modeled time, the plan the core chooses, the model's best (the
fastest eligible plan that beats NCCL by the table's margin, as the core's rule
says), the oracle (the fastest eligible plan, margin ignored: where it differs from
the best, NCCL was kept inside the margin), upstream XLA's choice (its real
CollectiveBackendAssigner, run by nvshmem-opt --compare-upstream) priced with the
same model, and NCCL-only. DIR receives sweep.csv, sweep.json and one PNG per
topology; the summary is printed last.
"""

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core, cli_io
from hlo_tools._selection_core import CostTable, Topology
from hlo_tools.errors import HeuristicsError
from hlo_tools.model import driver
from hlo_tools.ops.sizes import format_bytes, parse_size

# One case of the sweep (COLUMNS), and the core's decision dict (selection.decide).
Row = dict[str, Any]
Decision = dict[str, Any]
# (spec as given, its parsed Topology)
Topologies = Sequence[tuple[str, Topology]]

DEFAULT_TOPOLOGIES = ("1x1x8", "1x2x4", "2x2x4", "1x4x2", "1x9x8:nvl72")
# 1 KiB .. 1 GiB in factors of two: the grid a user reads off a log-log plot.
DEFAULT_SIZES = tuple(1 << e for e in range(10, 31))
# shape -> (buffers moved by one permute, cyclic). Combined K/V is one
# variadic permute of two equal buffers (XLA's combiner merges the K and V
# rotations), so it moves twice the bytes over the same pairs.
SHAPES = {"ring": (1, True), "kv": (2, True), "shift": (1, False)}
PLANS = ("nccl", "nvshmem")
# Shapes that count as rings in the "mixed multi-host rings" goal.
RING_SHAPES = ("ring", "kv")
# Relative slack when comparing modeled times: they are sums of doubles.
EPS = 1e-9

COLUMNS = (
  "topology",
  "shape",
  "buffer_bytes",
  "bytes",
  "num_devices",
  "num_edges",
  *(f"edges_{c}" for c in selection.LINK_CLASSES),  # the core's link classes
  "mixed",
  "multi_host",
  "nccl_us",
  "nvshmem_us",
  "chosen_plan",
  "chosen_us",
  "best_plan",
  "inside_margin",
  "oracle_plan",
  "oracle_us",
  "upstream_plan",
  "upstream_us",
  "upstream_over_heap",
  "upstream_hangs",
  "ratio_to_oracle",
  "ratio_to_upstream",
  "ratio_to_nccl",
  "reason",
)


def pairs_for(shape: str, num_devices: int) -> list[tuple[int, int]]:
  """Partition-id pairs of one permute: i -> i+1, wrapping around for rings."""
  _, cyclic = SHAPES[shape]
  if cyclic:
    return [(i, (i + 1) % num_devices) for i in range(num_devices)]
  return [(i, i + 1) for i in range(num_devices - 1)]


def _ratio(a: float, b: float) -> float:
  if b == 0:
    return 1.0 if a == 0 else math.inf
  return a / b


def _oracle(decision: Decision) -> tuple[str, float]:
  """Fastest eligible plan, margin ignored; ties go to the earlier of PLANS.

  NCCL first because it is the default: an equal-time alternative is no gain.
  """
  times = {plan: decision["backend_us"][plan] for plan in PLANS}
  best = "nccl"
  for plan in PLANS[1:]:
    if times[plan] is not None and times[plan] < times[best]:
      best = plan
  return best, times[best]


def _best(decision: Decision, margin: float) -> str:
  """The model's own best: the fastest eligible plan among those that beat NCCL by
  the margin (NCCL, the default, is given up only then), else NCCL."""
  times = decision["backend_us"]
  bar = times["nccl"] * (1 - margin)
  winners = [
    (times[p], p) for p in PLANS[1:] if times[p] is not None and times[p] <= bar * (1 + EPS)
  ]
  return min(winners)[1] if winners else "nccl"


# The module upstream's assigner is asked about: one permute per shape, named after it.
_UPSTREAM_MODULE = """HloModule sweep_upstream, num_partitions={n}

ENTRY main {{
  a = f32[64]{{0}} parameter(0)
  b = f32[64]{{0}} parameter(1)
  ring = f32[64]{{0}} collective-permute(a), channel_id=1, source_target_pairs={ring}
  kv = (f32[64]{{0}}, f32[64]{{0}}) collective-permute(a, b), channel_id=2, source_target_pairs={ring}
  shift = f32[64]{{0}} collective-permute(a), channel_id=3, source_target_pairs={shift}
  ROOT out = (f32[64]{{0}}, (f32[64]{{0}}, f32[64]{{0}}), f32[64]{{0}}) tuple(ring, kv, shift)
}}
"""  # noqa: E501  (HLO as XLA prints it)


def _pairs_text(pairs: Iterable[tuple[int, int]]) -> str:
  return "{" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}"


def upstream_plans(topologies: Topologies) -> dict[tuple[str, str], str]:
  """{(spec, shape): 'nvshmem' | 'nccl'}: upstream XLA's CollectiveBackendAssigner.

  Its answer comes from the real assigner, run by `nvshmem-opt --compare-upstream`
  on a small module per topology with one permute per shape; the assigner has no
  size threshold for collective-permutes, so one module stands for every size.
  """
  exe = driver.find_nvshmem_opt()
  if exe is None:
    raise HeuristicsError(
      f"upstream's answer comes from its assigner, run by the driver: {driver.NOT_INSTALLED}"
    )
  plans: dict[tuple[str, str], str] = {}
  with tempfile.TemporaryDirectory(prefix="heuristics-upstream-") as tmp:
    for spec, topology in topologies:
      n = topology.num_devices
      path = os.path.join(tmp, "module.hlo")
      with open(path, "w") as f:
        f.write(
          _UPSTREAM_MODULE.format(
            n=n, ring=_pairs_text(pairs_for("ring", n)), shift=_pairs_text(pairs_for("shift", n))
          )
        )
      rc, report, message = driver.run_nvshmem_opt(
        path, spec, mode="explain", compare_upstream=True, tmp_dir=tmp
      )
      if rc != 0 or not report:
        raise HeuristicsError(f"nvshmem-opt --compare-upstream failed on {spec}: {message}")
      for d in report["decisions"]:
        plans[(spec, d["instruction"])] = "nvshmem" if d.get("upstream") == "NVSHMEM" else "nccl"
  return plans


def _upstream(
  decision: Decision, table: CostTable, nbytes: int, buffers: int, plan: str
) -> tuple[str, float, bool]:
  """Upstream's plan priced with our model: (plan, us, over_heap).

  Upstream does not look at the symmetric heap, so its NVSHMEM plan is priced even
  where operand and result overflow nvshmem_max_bytes (flagged)."""
  edges = decision["edges_by_class"]
  if plan != "nvshmem" or sum(edges.values()) == 0:
    return "nccl", decision["backend_us"]["nccl"], False
  us = max(
    selection.edge_time_us(table, "nvshmem", link_class, nbytes, buffers)
    for link_class, count in edges.items()
    if count > 0
  )
  return "nvshmem", us, selection.nvshmem_heap_reason(table, nbytes) is not None


def evaluate(
  spec: str, topology: Topology, table: CostTable, shape: str, buffer_bytes: int, upstream_plan: str
) -> Row:
  """One row of the sweep: every plan's modeled time and every rule's choice."""
  n = topology.num_devices
  buffers = SHAPES[shape][0]
  nbytes = buffer_bytes * buffers
  decision = selection.decide(
    topology,
    table,
    nbytes,
    pairs_for(shape, n),
    cross_partition=True,
    num_partitions=n,
    num_replicas=1,
    buffers=buffers,
  )
  edges = decision["edges_by_class"]
  oracle_plan, oracle_us = _oracle(decision)
  best_plan = _best(decision, table.margin)
  upstream_plan, upstream_us, over_heap = _upstream(decision, table, nbytes, buffers, upstream_plan)
  # Upstream picks NVSHMEM for permutes that leave a device without a source, which
  # hang XLA's NVSHMEM barrier: priced as if they ran, but flagged.
  hangs = (
    upstream_plan == "nvshmem"
    and selection.nvshmem_hang_reason(
      _selection_core.edge_ids_to_devices(topology, pairs_for(shape, n), True, n, 1), n
    )
    is not None
  )
  in_domain = edges["same_device"] + edges["nvlink"] + edges["nvlink_domain"]
  return {
    "topology": spec,
    "shape": shape,
    "buffer_bytes": buffer_bytes,
    "bytes": nbytes,
    "num_devices": n,
    "num_edges": sum(edges.values()),
    **{f"edges_{c}": edges[c] for c in selection.LINK_CLASSES},
    "mixed": edges["network"] > 0 and in_domain > 0,
    "multi_host": edges["network"] + edges["nvlink_domain"] > 0,
    "nccl_us": decision["backend_us"]["nccl"],
    "nvshmem_us": decision["backend_us"]["nvshmem"],
    "chosen_plan": decision["plan"],
    "chosen_us": decision["chosen_us"],
    "best_plan": best_plan,
    "inside_margin": best_plan != oracle_plan,
    "oracle_plan": oracle_plan,
    "oracle_us": oracle_us,
    "upstream_plan": upstream_plan,
    "upstream_us": upstream_us,
    "upstream_over_heap": over_heap,
    "upstream_hangs": hangs,
    "ratio_to_oracle": _ratio(decision["chosen_us"], oracle_us),
    "ratio_to_upstream": _ratio(decision["chosen_us"], upstream_us),
    "ratio_to_nccl": _ratio(decision["chosen_us"], decision["backend_us"]["nccl"]),
    "reason": decision["reason"],
  }


def sweep(
  topologies: Topologies,
  table: CostTable,
  sizes: Sequence[int] = DEFAULT_SIZES,
  shapes: Sequence[str] = tuple(SHAPES),
  upstream: dict[tuple[str, str], str] | None = None,
) -> list[Row]:
  """topologies: [(spec, Topology)]. Rows in topology, shape, size order.

  upstream: upstream_plans(topologies), when the caller already asked the driver."""
  upstream = upstream if upstream is not None else upstream_plans(topologies)
  return [
    evaluate(spec, topology, table, shape, size, upstream[(spec, shape)])
    for spec, topology in topologies
    for shape in shapes
    for size in sizes
  ]


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


def case_name(row: Row) -> str:
  return f"{row['topology']} {row['shape']} {format_bytes(row['buffer_bytes'], precise=True)}"


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


def rows_to_csv(rows: Iterable[Row]) -> str:
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
  writer.writeheader()
  for row in rows:
    # repr keeps every double exact, so the CSV and JSON agree to the bit.
    writer.writerow(
      {
        k: ("" if row[k] is None else repr(row[k]) if isinstance(row[k], float) else row[k])
        for k in COLUMNS
      }
    )
  return out.getvalue()


def _json_safe(value: Any) -> Any:
  if isinstance(value, float) and not math.isfinite(value):
    return None  # JSON has no inf; a zero-time reference only.
  if isinstance(value, dict):
    return {k: _json_safe(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_json_safe(v) for v in value]
  return value


def write_outputs(
  out_dir: str,
  rows: list[Row],
  summary: dict[str, Any],
  table: CostTable,
  topologies: Topologies,
  sizes: Sequence[int],
  plots: bool = True,
) -> list[str]:
  """Writes sweep.csv, sweep.json and per-topology PNGs; returns the paths."""
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  csv_path = os.path.join(out_dir, "sweep.csv")
  cli_io.write_atomic(csv_path, rows_to_csv(rows))
  paths.append(csv_path)
  doc = {
    "cost_table": str(table),
    "topologies": [s for s, _ in topologies],
    "sizes": list(sizes),
    "shapes": {k: {"buffers": b, "cyclic": c} for k, (b, c) in SHAPES.items()},
    "columns": list(COLUMNS),
    "rows": rows,
    "summary": summary,
  }
  json_path = os.path.join(out_dir, "sweep.json")
  cli_io.write_atomic(json_path, json.dumps(_json_safe(doc), indent=1) + "\n")
  paths.append(json_path)
  if plots:
    from hlo_tools.ops.heuristics import plot  # matplotlib only when plotting

    for spec, _ in topologies:
      paths.append(plot.plot_topology(out_dir, spec, [r for r in rows if r["topology"] == spec]))
  return paths


def parse_topologies(specs: Iterable[str]) -> list[tuple[str, Topology]]:
  out = []
  for spec in specs:
    try:
      out.append((spec, selection.parse_topology(spec)))
    except selection.SelectionError as e:
      raise HeuristicsError(f"--topology: {e}") from None
  return out


def load_table(path: str | None, max_bytes: int | None = None) -> CostTable:
  """The table at `path` (None: the built-in one), read as every input is."""
  return selection.load_cost_table(path, max_bytes)


def run_sweep(
  out: str,
  topology_specs: Sequence[str] = (),
  only_given: bool = False,
  cost_table: str | None = None,
  sizes: str | None = None,
  shapes: str | None = None,
  plots: bool = True,
  table: CostTable | None = None,
) -> tuple[list[str], dict[str, Any]]:
  """The sweep over the built-in topologies (and/or the given specs), written to `out`;
  returns (paths written, summary). sizes and shapes: comma-separated text, as on the
  command line (default: every size and shape). table: cost_table as the command
  already read it, else read here."""
  specs = ([] if only_given else list(DEFAULT_TOPOLOGIES)) + [
    t for t in topology_specs if only_given or t not in DEFAULT_TOPOLOGIES
  ]
  if not specs:
    raise HeuristicsError("--only-given needs at least one --topology")
  topologies = parse_topologies(specs)
  table = table or load_table(cost_table)
  size_list: tuple[int, ...] = DEFAULT_SIZES
  if sizes:
    try:
      size_list = tuple(sorted({parse_size(s) for s in sizes.split(",")}))
    except ValueError as e:
      raise HeuristicsError(f"--sizes: {e}") from None
  shape_list = tuple(s.strip() for s in (shapes or ",".join(SHAPES)).split(",") if s.strip())
  unknown = [s for s in shape_list if s not in SHAPES]
  if unknown or not shape_list:
    raise HeuristicsError(f"--shapes: unknown {unknown} (known: {', '.join(SHAPES)})")
  rows = sweep(topologies, table, size_list, shape_list)
  summary = summarize(rows)
  try:
    paths = write_outputs(out, rows, summary, table, topologies, size_list, plots=plots)
  except OSError as e:
    raise HeuristicsError(f"{e.filename or out}: {e.strerror}") from None
  return paths, summary
