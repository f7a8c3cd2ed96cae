"""`hlo-tools heuristics calibrate`: a cost table from measured permute times.

    hlo-tools heuristics calibrate CSV [--out=TABLE] [--base-table=F]
        [--holdout=none|odd-powers-of-two] [--holdout-csv=CSV]
        [--machine=TEXT] [--software=TEXT] [--note=TEXT]... [--date=YYYY-MM-DD]
        [--plot=FILE.png] [--errors-csv=FILE]

CSV columns (header required, any order, extra columns ignored): backend
(nccl|nvshmem|peer|symmetric), link_class (same_device|nvlink|nvlink_domain|
network; never network for nvshmem, which the pinned XLA runs only inside one
host), bytes (all buffers of one permute together), seconds (the permute's own
time), and optionally operands (buffers in the one permute; 1 when absent, as in
point-to-point CSVs), step_s and baseline_s (the loop step with and without the
permute, for the step check).

For each (backend, link class) with data the table gets a `links` entry with
  * the measured curve: one `points` entry per (operands, bytes), the median of the
    CSV's rows there (rows of zero bytes are left out: the curve is in log(bytes));
  * the parametric row as fallback and for extrapolation: bandwidth from the top
    points (the slope between the two largest sizes), then latency and per-buffer
    cost (when several operand counts) by least squares with that bandwidth,
        t = latency + (operands - 1) * per_buffer + bytes / bandwidth.
With --holdout=odd-powers-of-two, sizes that are not powers of 4 are held out: no
points, only validation; --holdout-csv gives a second CSV to validate on.
The table is the defaults (or --base-table) with those entries replaced, in text
format (the project's CostTableProto), headed by provenance comments, so nvshmem-opt
--cost-table and hlo_tools.selection.load_cost_table accept it. Without --out it goes to stdout.
The core itself prices every measurement with the written table, and the
relative error at every size is printed for (a) the calibration sizes, (b) the
held-out sizes and (c) the whole loop step (baseline + modeled permute), each
against the goal of 10%; --plot draws model against measurement.
"""

import datetime
import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from hlo_tools import bounded_input, selection
from hlo_tools._selection_core import CostTable
from hlo_tools.errors import HeuristicsError, escape_name
from hlo_tools.ops.heuristics.evaluate import HOLDOUTS, split_holdout
from hlo_tools.ops.heuristics.fitting import Fit, fit_group
from hlo_tools.ops.heuristics.measurements import Groups, Key, read_measurements
from hlo_tools.ops.heuristics.table_text import provenance_lines, render_table


class Calibration(NamedTuple):
  text: str  # the table, as written
  fits: dict[Key, Fit]
  table: CostTable  # the text as the core parsed it
  calibration: Groups
  held_out: Groups


def run_calibration(
  csv_path: str,
  base_table_path: str | None = None,
  machine: str | None = None,
  date: str | None = None,
  holdout: str = "none",
  holdout_csv: str | None = None,
  software: str | None = None,
  notes: Iterable[str] = (),
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
) -> Calibration:
  """Fits, writes and re-reads the table; keeps the measurements apart by set. Each
  file is read as every input is (within max_bytes and the input timeout)."""
  if holdout not in HOLDOUTS:
    raise HeuristicsError(f"--holdout={holdout}: expected one of {', '.join(HOLDOUTS)}")
  base = selection.load_cost_table(base_table_path, max_bytes)
  provenance: dict[str, set[str]] = {}
  calibration, held_out = split_holdout(read_measurements(csv_path, provenance, max_bytes), holdout)
  if not calibration:
    raise HeuristicsError(f"{csv_path}: no calibration sizes (powers of 4) left after the holdout")
  if holdout_csv:
    for key, points in read_measurements(holdout_csv, max_bytes=max_bytes).items():
      held_out.setdefault(key, []).extend(points)
  fits = {key: fit_group(csv_path, key, points) for key, points in sorted(calibration.items())}
  date = date or datetime.datetime.now(datetime.UTC).date().isoformat()
  text = render_table(
    base,
    fits,
    os.path.basename(csv_path),
    provenance_lines(csv_path, provenance, machine, date, software, holdout, holdout_csv, notes),
    calibration,
  )
  text = escape_name(text)  # a file name or note that is not UTF-8: its bytes as \xff
  try:
    table = selection.parse_cost_table(text, "calibrated table")
  except selection.SelectionError as e:  # a bug here, not bad input; still one line
    raise HeuristicsError(f"internal error, the written table does not parse: {e}") from None
  return Calibration(text, fits, table, calibration, held_out)


def calibrate(
  csv_path: str,
  base_table_path: str | None = None,
  machine: str | None = None,
  date: str | None = None,
  **kwargs: Any,
) -> tuple[str, dict[Key, Fit]]:
  """Returns (table text, {key: Fit}); the text is checked by the core's parser."""
  result = run_calibration(csv_path, base_table_path, machine, date, **kwargs)
  return result.text, result.fits
