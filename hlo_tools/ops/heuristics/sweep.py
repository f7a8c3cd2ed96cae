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
from collections.abc import Iterable, Sequence
from typing import Any

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import atomic_output
from hlo_tools._selection_core import CostTable, Topology
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics.sweep_cases import (
  COLUMNS,
  DEFAULT_SIZES,
  DEFAULT_TOPOLOGIES,
  SHAPES,
  Row,
  Topologies,
  sweep,
)
from hlo_tools.ops.heuristics.sweep_summary import summarize
from hlo_tools.ops.sizes import parse_size


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
  atomic_output.write_atomic(csv_path, rows_to_csv(rows))
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
  atomic_output.write_atomic(json_path, json.dumps(_json_safe(doc), indent=1) + "\n")
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
