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

import csv
import datetime
import hashlib
import io
import math
import os
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from hlo_tools import cli_io, selection
from hlo_tools._selection_core import CostTable
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.sizes import format_bytes

BACKENDS = selection.BACKENDS
REQUIRED = ("backend", "link_class", "bytes", "seconds")
GOAL_REL = 0.10  # Goal for the model's error at every size.


class Point(NamedTuple):
  """One measurement: time in microseconds, its CSV line for messages, and the loop
  step with and without the permute (None when the CSV has no such columns)."""

  bytes: int
  us: float
  line: int
  operands: int
  step_us: float | None = None
  baseline_us: float | None = None


Key = tuple[str, str]  # (backend, link class)
Groups = dict[Key, list[Point]]  # the measurements of each pair


class Fit:
  """One (backend, link class) fit and how well it matches its points."""

  def __init__(
    self,
    latency_us: float,
    bandwidth_gbps: float,
    per_buffer_us: float | None,
    points: Sequence[Point],
    clamped: str = "",
  ) -> None:
    self.latency_us = latency_us
    self.bandwidth_gbps = bandwidth_gbps
    self.per_buffer_us = per_buffer_us  # None: not fitted (one operand count).
    self.points = len(points)
    self.sizes = len({p.bytes for p in points})
    self.operand_counts = sorted({p.operands for p in points})
    self.clamped = clamped  # Which parameters were held at 0, if any.
    rel = [(self.model_us(p.bytes, p.operands) - p.us) / p.us for p in points]
    self.rms_rel = math.sqrt(sum(r * r for r in rel) / len(rel))
    self.max_rel = max(abs(r) for r in rel)
    by_size: dict[int, float] = {}
    for p, r in zip(points, rel):
      by_size[p.bytes] = max(by_size.get(p.bytes, 0.0), abs(r))
    self.max_rel_by_size = dict(sorted(by_size.items()))

  def model_us(self, nbytes: float, operands: int = 1) -> float:
    per_buffer = self.per_buffer_us or 0.0
    return self.latency_us + (operands - 1) * per_buffer + nbytes / (self.bandwidth_gbps * 1e3)


def _column_key(name: str) -> str:
  # "link class", "Link-Class" and "link_class" all name the same column.
  return name.strip().lower().replace(" ", "_").replace("-", "_")


def _read_rows(path: str) -> list[tuple[int, list[str]]]:
  """[(line number, fields)] of the non-comment lines, header first."""
  try:
    with open(path, newline="") as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise HeuristicsError(f"{path}: {e.strerror}") from None
  except UnicodeDecodeError:
    raise HeuristicsError(f"{path}: not a text file") from None
  # Comment and blank lines are skipped but keep their numbers for messages.
  numbered = [
    (i + 1, l) for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith("#")
  ]
  if not numbered:
    raise HeuristicsError(
      f"{path}: empty; expected a header line '{','.join(REQUIRED)}' and measurements"
    )
  rows = csv.reader([l for _, l in numbered])
  return [(line, fields) for (line, _), fields in zip(numbered, rows)]


def read_measurements(path: str, provenance: dict[str, set[str]] | None = None) -> Groups:
  """{(backend, link_class): [Point]}; HeuristicsError names file:line.

  When `provenance` is a dict, it receives the sets of values of the CSV's
  jax_version, devices and loop_trips columns where present.
  """
  rows = _read_rows(path)
  header_line, header = rows[0][0], [_column_key(c) for c in rows[0][1]]
  missing = [c for c in REQUIRED if c not in header]
  if missing:
    raise HeuristicsError(
      f"{path}:{header_line}: missing column(s) "
      f"{', '.join(missing)} (header must name "
      f"{', '.join(REQUIRED)})"
    )
  index = {c: header.index(c) for c in header}
  groups: Groups = {}
  for line, fields in rows[1:]:
    where = f"{path}:{line}"
    if len(fields) != len(header):
      raise HeuristicsError(f"{where}: {len(fields)} fields, header has {len(header)}")
    key, point = _parse_row(where, line, fields, index)
    groups.setdefault(key, []).append(point)
    if provenance is not None:
      for column in ("jax_version", "devices", "loop_trips"):
        if column in index:
          provenance.setdefault(column, set()).add(fields[index[column]].strip())
  if not groups:
    raise HeuristicsError(f"{path}:{header_line}: header but no measurements")
  for key, points in groups.items():
    check_units(path, key, points)
  return groups


# What one permute's time can be on any GPU link: a CSV outside these bounds is in
# another unit (microseconds or milliseconds in the seconds column), and a table
# fitted from it would be wrong by a factor of a thousand or a million.
MAX_PERMUTE_US = 1e6  # 1 s: 1 GiB at 1 GB/s
MIN_PERMUTE_US = 0.1  # a kernel launch alone takes longer
MIN_BANDWIDTH_MBPS = 500.0  # at 1 MiB and up; 10 Gb Ethernet alone moves 1.25 GB/s
MAX_BANDWIDTH_MBPS = 1e7  # 10 TB/s; NVLink 4 moves 0.9 TB/s
_UNIT_HINT = "the seconds column must hold seconds (a CSV in microseconds or milliseconds?)"


def check_units(path: str, key: Key, points: Sequence[Point]) -> None:
  """Refuses measurements no GPU link can produce, naming the first such row."""
  for p in points:
    if p.us > MAX_PERMUTE_US or p.us < MIN_PERMUTE_US:
      bound = "over 1 s" if p.us > MAX_PERMUTE_US else "under 0.1 us"
      raise HeuristicsError(
        f"{path}:{p.line}: {p.us * 1e-6:g} s for one permute of "
        f"{p.bytes} bytes is {bound}: {_UNIT_HINT}"
      )
  large = [p for p in points if p.bytes >= 1 << 20]
  if not large:
    return
  fastest = max(large, key=lambda p: p.bytes / p.us)  # bytes per us = MB/s
  rate = fastest.bytes / fastest.us
  if rate < MIN_BANDWIDTH_MBPS or rate > MAX_BANDWIDTH_MBPS:
    bound = "under 500 MB/s" if rate < MIN_BANDWIDTH_MBPS else "over 10 TB/s"
    raise HeuristicsError(
      f"{path}:{fastest.line}: {key[0]} over {key[1]} moves at most "
      f"{rate:.4g} MB/s ({fastest.bytes} bytes in "
      f"{fastest.us * 1e-6:g} s), {bound}: {_UNIT_HINT}"
    )


def _parse_row(
  where: str, line: int, fields: list[str], index: dict[str, int]
) -> tuple[Key, Point]:
  backend = fields[index["backend"]].strip().lower()
  link_class = fields[index["link_class"]].strip().lower()
  if backend not in BACKENDS:
    raise HeuristicsError(f"{where}: unknown backend {backend!r} ({', '.join(BACKENDS)})")
  if link_class not in selection.LINK_CLASSES:
    raise HeuristicsError(
      f"{where}: unknown link class {link_class!r} ({', '.join(selection.LINK_CLASSES)})"
    )
  if backend == "nvshmem" and link_class == "network":
    raise HeuristicsError(
      f"{where}: nvshmem has no network row: the pinned XLA runs "
      "NVSHMEM only inside NVSHMEM_TEAM_SHARED (one host)"
    )
  nbytes = _number(where, "bytes", fields[index["bytes"]])
  seconds = _number(where, "seconds", fields[index["seconds"]])
  operands = 1.0
  if "operands" in index:
    operands = _number(where, "operands", fields[index["operands"]])
    if operands < 1 or operands != int(operands):
      raise HeuristicsError(
        f"{where}: operands {fields[index['operands']].strip()!r} is not a whole number >= 1"
      )
  if nbytes != int(nbytes):
    raise HeuristicsError(
      f"{where}: bytes {fields[index['bytes']].strip()!r} is not a whole number"
    )
  if seconds == 0:
    raise HeuristicsError(f"{where}: seconds is 0; a transfer takes time")
  loop = [
    _number(where, c, fields[index[c]]) * 1e6 if c in index else None
    for c in ("step_s", "baseline_s")
  ]
  return (backend, link_class), Point(
    int(nbytes), seconds * 1e6, line, int(operands), loop[0], loop[1]
  )


def _number(where: str, column: str, text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise HeuristicsError(f"{where}: {column} {text.strip()!r} is not a number") from None
  if not math.isfinite(value):
    raise HeuristicsError(f"{where}: {column} {text.strip()!r} is not finite")
  if value < 0:
    raise HeuristicsError(f"{where}: {column} {text.strip()!r} is negative")
  return value


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
  """Gaussian elimination with partial pivoting; None when singular."""
  n = len(vector)
  a = [row[:] + [v] for row, v in zip(matrix, vector)]
  for col in range(n):
    pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
    if abs(a[pivot][col]) < 1e-300:
      return None
    a[col], a[pivot] = a[pivot], a[col]
    for r in range(col + 1, n):
      f = a[r][col] / a[col][col]
      for c in range(col, n + 1):
        a[r][c] -= f * a[col][c]
  x = [0.0] * n
  for r in reversed(range(n)):
    x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
  return x


def _weighted_fit(
  points: Sequence[Point], use_latency: bool, use_per_buffer: bool, us_per_mb: float
) -> list[float] | None:
  """[latency, per_buffer] minimizing the relative residuals, given the
  transfer time per MB (the bandwidth from the top points).

  Columns left out are held at 0. Sizes span six decades and timing noise grows
  with the time, so plain least squares would let the largest points swamp the
  microsecond latency; weighting each residual by 1/t weighs every size alike.
  """
  columns = [i for i, used in enumerate((use_latency, use_per_buffer)) if used]
  normal = [[0.0] * len(columns) for _ in columns]
  rhs = [0.0] * len(columns)
  for p in points:
    features, t = (1.0, p.operands - 1.0), p.us
    rest = t - p.bytes / 1e6 * us_per_mb
    w = 1.0 / (t * t)
    for i, ci in enumerate(columns):
      rhs[i] += w * features[ci] * rest
      for j, cj in enumerate(columns):
        normal[i][j] += w * features[ci] * features[cj]
  solution = _solve(normal, rhs) if columns else []
  if solution is None:
    return None
  params = [0.0, 0.0]
  for ci, value in zip(columns, solution):
    params[ci] = value
  return params


def medians(points: Iterable[Point]) -> dict[tuple[int, int], float]:
  """{(operands, bytes): median us} over duplicate rows."""
  by_key: dict[tuple[int, int], list[float]] = {}
  for p in points:
    by_key.setdefault((p.operands, p.bytes), []).append(p.us)
  return {key: statistics.median(us) for key, us in sorted(by_key.items())}


def top_slope_us_per_mb(points: Iterable[Point]) -> float | None:
  """Transfer time per MB between the two largest sizes of each operand count
  (medians), all counts pooled; None when no count has two sizes."""
  curves: dict[int, list[tuple[int, float]]] = {}
  for (operands, nbytes), us in medians(points).items():
    curves.setdefault(operands, []).append((nbytes, us))
  d_bytes = d_us = 0.0
  for curve in curves.values():
    if len(curve) >= 2:
      (b0, t0), (b1, t1) = curve[-2], curve[-1]
      d_bytes += b1 - b0
      d_us += t1 - t0
  return d_us / d_bytes * 1e6 if d_bytes > 0 else None


def fit_group(path: str, key: Key, points: Sequence[Point]) -> Fit:
  """The parametric row: bandwidth from the top points, then latency and
  per-buffer cost (when several operand counts) by least squares."""
  sizes = sorted({p.bytes for p in points})
  where = f"{path}:{min(p.line for p in points)}"
  if len(sizes) < 2:
    raise HeuristicsError(
      f"{where}: {key[0]} {key[1]} has measurements at {len(sizes)} distinct "
      "size; at least 2 are needed to fit latency and bandwidth"
    )
  us_per_mb = top_slope_us_per_mb(points)
  if us_per_mb is None or us_per_mb <= 0:
    slope = "nan" if us_per_mb is None else f"{us_per_mb / 1e6:.3g}"
    raise HeuristicsError(
      f"{where}: {key[0]} {key[1]}: time does not grow with size (fitted "
      f"{slope} us/byte), so no bandwidth can be derived"
    )
  with_buffers = len({p.operands for p in points}) > 1
  # Negative latency or per-buffer cost is noise, not physics: hold such a
  # parameter at 0 and refit the other.
  clamped = []
  use_latency, use_per_buffer = True, with_buffers
  params = [0.0, 0.0]
  for _ in range(3):
    fitted = _weighted_fit(points, use_latency, use_per_buffer, us_per_mb)
    if fitted is None:
      params = [0.0, 0.0]
      break
    params = fitted
    if use_latency and params[0] < 0:
      use_latency = False
      clamped.append("latency")
    elif use_per_buffer and params[1] < 0:
      use_per_buffer = False
      clamped.append("per_buffer")
    else:
      break
  return Fit(
    latency_us=max(params[0], 0.0),
    bandwidth_gbps=1e3 / us_per_mb,
    per_buffer_us=max(params[1], 0.0) if with_buffers else None,
    points=points,
    clamped=", ".join(clamped),
  )


def provenance_lines(
  csv_path: str,
  provenance: Mapping[str, Iterable[str]],
  machine: str | None,
  date: str,
  software: str | None = None,
  holdout: str = "none",
  holdout_csv: str | None = None,
  notes: Iterable[str] = (),
) -> list[str]:
  """Comment lines saying where the fitted numbers come from."""

  def values(column: str) -> str:
    found = sorted(provenance.get(column, ()))
    return ", ".join(found) if found else "not recorded in the CSV"

  lines = [
    f"# Measured on: {machine or 'not given (calibrate --machine=...)'}",
    f"# jax: {values('jax_version')}; devices: {values('devices')}; "
    f"loop trips: {values('loop_trips')}",
  ]
  if software:
    lines.append(f"# Software: {software}")
  lines += [f"# Note: {note}" for note in notes]
  lines += [
    f"# Measurements: {os.path.basename(csv_path)} (sha256 {_sha256(csv_path)})",
    f"# Calibrated: {date} by hlo-tools heuristics calibrate; model: the "
    "measured curve (points: log-log interpolation, linear in buffers), "
    "the links entry's numbers outside the measured sizes and buffer counts",
  ]
  if holdout != "none":
    lines.append(
      "# Points: sizes that are powers of 4; the other sizes were held out for validation"
    )
  if holdout_csv:
    lines.append(f"# Validated on: {os.path.basename(holdout_csv)} (sha256 {_sha256(holdout_csv)})")
  return lines


def _sha256(path: str) -> str:
  try:
    with open(path, "rb") as f:
      return hashlib.sha256(f.read()).hexdigest()
  except OSError as e:
    raise HeuristicsError(f"{path}: {e.strerror}") from None


def build_table(
  base: CostTable, fits: Mapping[Key, Fit], groups: Groups | None = None
) -> CostTable:
  """The base table with each fitted pair's row and its measured points (medians
  of `groups`, the calibration measurements) set through the core, which checks
  them as it checks a table's text; fitted backends' SM interference 0 (the
  measured time is the permute's whole cost: a factor on top would make the core
  predict other times than were measured) and the backend set measured."""
  table = base.copy()
  for key, fit in fits.items():
    per_buffer = fit.per_buffer_us
    if per_buffer is None:
      per_buffer = base.per_buffer_us(*key)
    table.set_link(
      *key,
      _g6(fit.latency_us),
      _g6(fit.bandwidth_gbps),
      _g6(max(per_buffer, 0.0)),
      _curve(groups, key),
    )
    table.set_sm_interference(key[0], 0.0)
  backends = _measured_backend_set(fits)
  if backends:
    table.backends = backends
  return table


def render_table(
  base: CostTable,
  fits: Mapping[Key, Fit],
  source: str,
  provenance: Iterable[str] = (),
  groups: Groups | None = None,
) -> str:
  """Cost-table text (text proto): the table build_table makes, as the core prints
  it, with a comment on each fitted entry."""
  out = [f"# Cost table fitted by hlo-tools heuristics calibrate from {source}."]
  out += list(provenance)
  out.append("# Links entries without a '# fit' comment keep the base table's values.")
  fitted_backends = {b for b, _ in fits}
  lines = iter(str(build_table(base, fits, groups)).splitlines())
  for line in lines:
    if line.startswith("links {"):
      block = [line] + list(_until_block_end(lines))
      backend, link_class = _block_key(block)
      key = (backend or "", link_class or "")
      if key in fits:
        out += _fit_comments(key, fits[key], len(_curve(groups, key)))
      out.extend(block)
    elif line.startswith("backends:") and _measured_backend_set(fits):
      out.append(f"{line}  # the backends measured")
    elif line.startswith("sm_interference {") and _block_key([line])[0] in fitted_backends:
      out.append(f"{line}  # measured: included in the fit")
    else:
      out.append(line)
  return "\n".join(out) + "\n"


def _until_block_end(lines: Iterator[str]) -> Iterator[str]:
  for line in lines:
    yield line
    if line == "}":
      return


def _block_key(block: Sequence[str]) -> tuple[str | None, str | None]:
  """(backend, link class) of a printed `links` block, lower case as in CSVs;
  link class None for an sm_interference line."""
  fields: dict[str, str] = {}
  for line in block:
    words = line.replace("{", " ").replace("}", " ").split()
    for name, value in zip(words, words[1:]):
      if name in ("backend:", "link_class:"):
        fields[name] = value.lower()
  return fields.get("backend:"), fields.get("link_class:")


def _curve(groups: Groups | None, key: Key) -> list[tuple[int, int, float]]:
  """[(operands, bytes, median us)] of the pair's measurements; zero-byte rows fit
  the line but have no place in log(bytes)."""
  return [
    (ops, n, _g6(us)) for (ops, n), us in medians((groups or {}).get(key, [])).items() if n > 0
  ]


def _g6(value: float) -> float:
  """Six significant digits: the table keeps what the measurements resolve."""
  return float(f"{value:.6g}")


def _fit_comments(key: Key, fit: Fit, points: int) -> list[str]:
  note = f"; held at 0: {fit.clamped}" if fit.clamped else ""
  if fit.per_buffer_us is None:
    note += "; per_buffer from the base table (one operand count measured)"
  worst = max(fit.max_rel_by_size.values())
  lines = [
    f"# fit {key[0]} {key[1]}: {fit.points} points at {fit.sizes} sizes, "
    f"operands {','.join(map(str, fit.operand_counts))}; parametric row "
    f"(bandwidth from the top points) rms relative error "
    f"{100 * fit.rms_rel:.2f}%, max {100 * worst:.2f}%{note}"
  ]
  if points:
    lines.append(
      f"# measured curve {key[0]} {key[1]}: {points} points, median of the "
      "CSV's rows at each (operands, bytes)"
    )
  return lines


def _measured_backend_set(fits: Iterable[Key]) -> str | None:
  """The CSV's backends as a table's backend set, or None if not a valid set."""
  names = sorted({b for b, _ in fits}, key=BACKENDS.index)
  if len(names) < 2:
    return None
  table = selection.CostTable.default()
  try:
    table.backends = ",".join(names)
  except ValueError:
    return None
  return table.backends


HOLDOUTS = ("none", "odd-powers-of-two")


def _power_of_four(n: int) -> bool:
  return n > 0 and n & (n - 1) == 0 and (n.bit_length() - 1) % 2 == 0


def split_holdout(groups: Groups, holdout: str) -> tuple[Groups, Groups]:
  """(calibration, held-out) groups: with odd-powers-of-two, sizes that are
  not powers of 4 are held out."""
  if holdout == "none":
    return groups, {}
  calibration: Groups = {}
  held_out: Groups = {}
  for key, points in groups.items():
    for p in points:
      target = calibration if _power_of_four(p.bytes) else held_out
      target.setdefault(key, []).append(p)
  return calibration, held_out


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
) -> Calibration:
  """Fits, writes and re-reads the table; keeps the measurements apart by set."""
  if holdout not in HOLDOUTS:
    raise HeuristicsError(f"--holdout={holdout}: expected one of {', '.join(HOLDOUTS)}")
  provenance: dict[str, set[str]] = {}
  calibration, held_out = split_holdout(read_measurements(csv_path, provenance), holdout)
  if not calibration:
    raise HeuristicsError(f"{csv_path}: no calibration sizes (powers of 4) left after the holdout")
  if holdout_csv:
    for key, points in read_measurements(holdout_csv).items():
      held_out.setdefault(key, []).extend(points)
  fits = {key: fit_group(csv_path, key, points) for key, points in sorted(calibration.items())}
  base = selection.load_cost_table(base_table_path)
  date = date or datetime.datetime.now(datetime.UTC).date().isoformat()
  text = render_table(
    base,
    fits,
    os.path.basename(csv_path),
    provenance_lines(csv_path, provenance, machine, date, software, holdout, holdout_csv, notes),
    calibration,
  )
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


class Check(NamedTuple):
  """One priced measurement (medians over duplicate rows); times in us; the step's
  times None where the CSV has none."""

  backend: str
  link_class: str
  operands: int
  bytes: int
  held_out: bool
  measured_us: float
  model_us: float
  step_us: float | None
  model_step_us: float | None


def _loop_medians(points: Iterable[Point]) -> dict[tuple[int, int], tuple[float, float]]:
  """{(operands, bytes): (median step, median baseline)} where both are known."""
  by_key: dict[tuple[int, int], list[tuple[float, float]]] = {}
  for p in points:
    if p.step_us is not None and p.baseline_us is not None:
      by_key.setdefault((p.operands, p.bytes), []).append((p.step_us, p.baseline_us))
  return {
    k: (statistics.median(s for s, _ in v), statistics.median(b for _, b in v))
    for k, v in by_key.items()
  }


def evaluate(table: CostTable, calibration: Groups, held_out: Groups) -> list[Check]:
  """Every measurement priced by the core with `table`, as [Check]."""
  checks = []
  for groups, is_held_out in ((calibration, False), (held_out, True)):
    for (backend, link_class), points in sorted(groups.items()):
      loops = _loop_medians(points)
      for (operands, nbytes), us in medians(points).items():
        model = selection.edge_time_us(table, backend, link_class, nbytes, operands)
        loop = loops.get((operands, nbytes))
        checks.append(
          Check(
            backend,
            link_class,
            operands,
            nbytes,
            is_held_out,
            us,
            model,
            loop[0] if loop else None,
            loop[1] + model if loop else None,
          )
        )
  return checks


def relative(model: float, measured: float) -> float:
  return (model - measured) / measured


def _by_size(checks: Iterable[Check], step: bool) -> dict[int, tuple[float, bool]]:
  """{bytes: (worst |relative error| over operand counts, held out?)}."""
  out: dict[int, tuple[float, bool]] = {}
  for c in checks:
    measured, model = (c.step_us, c.model_step_us) if step else (c.measured_us, c.model_us)
    if measured is None or model is None:
      continue
    r = abs(relative(model, measured))
    worst, held = out.get(c.bytes, (0.0, False))
    out[c.bytes] = (max(worst, r), held or c.held_out)
  return dict(sorted(out.items()))


def _size_name(nbytes: int) -> str:
  return format_bytes(nbytes, precise=True).replace(" ", "")


def _error_line(
  label: str, by_size: Mapping[int, tuple[float, bool]], mark_held_out: bool = False
) -> str:
  if not by_size:
    return f"  {label}: no sizes"
  cells = " ".join(
    f"{_size_name(n)}:{100 * r:.1f}%{'*' if mark_held_out and held else ''}"
    f"{'!' if r > GOAL_REL else ''}"
    for n, (r, held) in by_size.items()
  )
  over = [n for n, (r, _) in by_size.items() if r > GOAL_REL]
  verdict = "met at every size" if not over else f"missed at {len(over)} of {len(by_size)} sizes"
  return f"  {label}: {cells} -> goal <= {100 * GOAL_REL:.0f}%: {verdict}"


def error_report(fits: Mapping[Key, Fit], checks: Sequence[Check] = ()) -> list[str]:
  """Lines: per fitted pair the parametric row, then the worst relative error at
  every size of (a) the calibration sizes, (b) the held-out sizes and (c) the
  loop step; '!' marks a size over the goal, '*' a held-out size in (c)."""
  lines = []
  for key, fit in fits.items():
    backend, link_class = key
    per_buffer = "not fitted" if fit.per_buffer_us is None else f"{fit.per_buffer_us:.4g} us"
    mine = [c for c in checks if (c.backend, c.link_class) == key]
    curve = sorted({(c.operands, c.bytes) for c in mine if not c.held_out})
    lines.append(
      f"{backend} {link_class}: measured curve of {len(curve)} points; "
      f"parametric row latency {fit.latency_us:.4g} us, per buffer "
      f"{per_buffer}, bandwidth {fit.bandwidth_gbps:.4g} GB/s (top "
      f"points), alone rms {100 * fit.rms_rel:.1f}%, worst "
      f"{100 * fit.max_rel:.1f}% on the calibration rows"
    )
    lines.append(
      _error_line(
        "(a) calibration sizes, permute", _by_size([c for c in mine if not c.held_out], False)
      )
    )
    lines.append(
      _error_line("(b) held-out sizes, permute", _by_size([c for c in mine if c.held_out], False))
    )
    lines.append(
      _error_line(
        "(c) loop step = baseline + modeled permute (* held out)", _by_size(mine, True), True
      )
    )
  return lines


def summary(checks: Iterable[Check]) -> dict[tuple[str, str, str], tuple[float, float, int]]:
  """{(backend, link_class, set): (rms, worst, count)} over the checks' relative
  errors; set is 'calibration', 'held_out' or 'step'."""
  buckets: dict[tuple[str, str, str], list[float]] = {}
  for c in checks:
    key = (c.backend, c.link_class)
    buckets.setdefault(key + ("held_out" if c.held_out else "calibration",), []).append(
      relative(c.model_us, c.measured_us)
    )
    if c.step_us is not None and c.model_step_us is not None:
      buckets.setdefault(key + ("step",), []).append(relative(c.model_step_us, c.step_us))
  return {
    k: (math.sqrt(sum(r * r for r in v) / len(v)), max(abs(r) for r in v), len(v))
    for k, v in sorted(buckets.items())
  }


def write_errors_csv(path: str, checks: Iterable[Check]) -> None:
  lines = [
    "backend,link_class,operands,bytes,set,measured_us,model_us,rel_err,"
    "step_us,model_step_us,step_rel_err"
  ]
  for c in checks:
    step = (
      ""
      if c.step_us is None or c.model_step_us is None
      else f"{c.step_us:.4f},{c.model_step_us:.4f},{relative(c.model_step_us, c.step_us):.4f}"
    )
    lines.append(
      f"{c.backend},{c.link_class},{c.operands},{c.bytes},"
      f"{'held_out' if c.held_out else 'calibration'},{c.measured_us:.4f},"
      f"{c.model_us:.4f},{relative(c.model_us, c.measured_us):.4f}," + (step or ",,")
    )
  write_file(path, "\n".join(lines) + "\n")


def write_file(path: str, text: str | bytes) -> None:
  try:
    cli_io.write_atomic(path, text)
  except OSError as e:
    raise HeuristicsError(f"{path}: {e.strerror}") from None


def plot(path: str, result: Calibration, checks: Sequence[Check], source: str) -> None:
  """PNG: per fitted pair the model per operand count as the core prices it
  (lines), measured calibration points (filled) and held-out points (open),
  and below the relative error at each."""
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError as e:
    raise HeuristicsError(f"--plot needs matplotlib ({e})") from None
  keys = sorted(result.fits)
  fig, axes = plt.subplots(2, len(keys), figsize=(5 * len(keys), 7.5), squeeze=False, sharex=True)
  for col, key in enumerate(keys):
    top, bottom = axes[0][col], axes[1][col]
    mine = [c for c in checks if (c.backend, c.link_class) == key and c.bytes > 0]
    for operands in sorted({c.operands for c in mine}):
      pts = sorted((c for c in mine if c.operands == operands), key=lambda c: c.bytes)
      lo, hi = pts[0].bytes, pts[-1].bytes
      xs = [lo * (hi / lo) ** (i / 200) for i in range(201)] if hi > lo else [lo]
      line = top.plot(
        xs,
        [selection.edge_time_us(result.table, key[0], key[1], x, operands) for x in xs],
        "-",
        label=f"model, {operands} op",
      )[0]
      color = line.get_color()
      for held, marker, fill in ((False, "o", color), (True, "s", "none")):
        sel = [c for c in pts if c.held_out == held]
        if not sel:
          continue
        label = f"{'held out' if held else 'calibration'}, {operands} op"
        top.plot(
          [c.bytes for c in sel],
          [c.measured_us for c in sel],
          marker,
          color=color,
          markerfacecolor=fill,
          label=label,
        )
        bottom.plot(
          [c.bytes for c in sel],
          [100 * relative(c.model_us, c.measured_us) for c in sel],
          marker,
          color=color,
          markerfacecolor=fill,
        )
    top.set(
      xscale="log", yscale="log", title=f"{key[0]} {key[1]}", ylabel="permute time per step (us)"
    )
    top.legend(fontsize=6, ncol=2)
    for bound in (-100 * GOAL_REL, 100 * GOAL_REL):
      bottom.axhline(bound, color="gray", linestyle="--", linewidth=0.8)
    bottom.set(
      xscale="log", xlabel="bytes per permute (all buffers)", ylabel="model - measured (%)"
    )
  fig.suptitle(f"Cost model vs measurement ({source}); open markers: held out")
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=110)
  plt.close(fig)
  write_file(path, buffer.getvalue())
