"""`hlo-tools heuristics calibrate`: fit a cost table from measured permute times.

    hlo-tools heuristics calibrate CSV [--out=TABLE] [--base-table=F]
        [--machine=TEXT] [--date=YYYY-MM-DD] [--plot=FILE.png]

CSV columns (header required, any order, extra columns ignored): backend
(nccl|nvshmem|peer|symmetric), link_class (same_device|nvlink|nvlink_domain|
network), bytes (all buffers of one permute together), seconds (the permute's own
time), and optionally operands (buffers in the one permute; 1 when absent, as in
point-to-point CSVs). For each (backend, link class) with data, a least-squares
fit of
    t = latency + (operands - 1) * per_buffer + bytes / bandwidth
gives the three numbers (per_buffer only when the data has more than one operand
count; otherwise the base table's value stays). The table written is the defaults
(or --base-table) with the fitted entries replaced, in the core's text format,
headed by provenance comments (machine, jax version, devices, date, CSV name),
so nvshmem-opt --cost-table and hlo_tools.selection.load_cost_table accept it.
Without --out it goes to stdout. The fit's relative error at every size is
printed (the goal is 10% or less); --plot draws model against measurement.
"""

import argparse
import collections
import csv
import datetime
import hashlib
import math
import os
import sys

from hlo_tools import heuristics_io
from hlo_tools import selection
from hlo_tools.heuristics_io import HeuristicsError

BACKENDS = selection.BACKENDS
REQUIRED = ("backend", "link_class", "bytes", "seconds")
GOAL_REL = 0.10  # Goal for the model's error at every size.

# One measurement: time in microseconds, its CSV line for messages.
Point = collections.namedtuple("Point", "bytes us line operands")


class Fit:
  """One (backend, link class) fit and how well it matches its points."""

  def __init__(self, latency_us, bandwidth_gbps, per_buffer_us, points,
               clamped=""):
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
    by_size = {}
    for p, r in zip(points, rel):
      by_size[p.bytes] = max(by_size.get(p.bytes, 0.0), abs(r))
    self.max_rel_by_size = dict(sorted(by_size.items()))

  def model_us(self, nbytes, operands=1):
    per_buffer = self.per_buffer_us or 0.0
    return (self.latency_us + (operands - 1) * per_buffer +
            nbytes / (self.bandwidth_gbps * 1e3))


def _column_key(name):
  # "link class", "Link-Class" and "link_class" all name the same column.
  return name.strip().lower().replace(" ", "_").replace("-", "_")


def _read_rows(path):
  """[(line number, fields)] of the non-comment lines, header first."""
  try:
    with open(path, newline="") as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise HeuristicsError(f"{path}: {e.strerror}") from None
  except UnicodeDecodeError:
    raise HeuristicsError(f"{path}: not a text file") from None
  # Comment and blank lines are skipped but keep their numbers for messages.
  numbered = [(i + 1, l) for i, l in enumerate(lines)
              if l.strip() and not l.lstrip().startswith("#")]
  if not numbered:
    raise HeuristicsError(f"{path}: empty; expected a header line "
                          f"'{','.join(REQUIRED)}' and measurements")
  rows = csv.reader([l for _, l in numbered])
  return [(line, fields) for (line, _), fields in zip(numbered, rows)]


def read_measurements(path, provenance=None):
  """{(backend, link_class): [Point]}; HeuristicsError names file:line.

  When `provenance` is a dict, it receives the sets of values of the CSV's
  jax_version, devices and loop_trips columns where present.
  """
  rows = _read_rows(path)
  header_line, header = rows[0][0], [_column_key(c) for c in rows[0][1]]
  missing = [c for c in REQUIRED if c not in header]
  if missing:
    raise HeuristicsError(f"{path}:{header_line}: missing column(s) "
                          f"{', '.join(missing)} (header must name "
                          f"{', '.join(REQUIRED)})")
  index = {c: header.index(c) for c in header}
  groups = {}
  for line, fields in rows[1:]:
    where = f"{path}:{line}"
    if len(fields) != len(header):
      raise HeuristicsError(f"{where}: {len(fields)} fields, header has "
                            f"{len(header)}")
    key, point = _parse_row(where, line, fields, index)
    groups.setdefault(key, []).append(point)
    if provenance is not None:
      for column in ("jax_version", "devices", "loop_trips"):
        if column in index:
          provenance.setdefault(column, set()).add(fields[index[column]].strip())
  if not groups:
    raise HeuristicsError(f"{path}:{header_line}: header but no measurements")
  return groups


def _parse_row(where, line, fields, index):
  backend = fields[index["backend"]].strip().lower()
  link_class = fields[index["link_class"]].strip().lower()
  if backend not in BACKENDS:
    raise HeuristicsError(f"{where}: unknown backend {backend!r} "
                          f"({', '.join(BACKENDS)})")
  if link_class not in selection.LINK_CLASSES:
    raise HeuristicsError(f"{where}: unknown link class {link_class!r} "
                          f"({', '.join(selection.LINK_CLASSES)})")
  nbytes = _number(where, "bytes", fields[index["bytes"]])
  seconds = _number(where, "seconds", fields[index["seconds"]])
  operands = 1.0
  if "operands" in index:
    operands = _number(where, "operands", fields[index["operands"]])
    if operands < 1 or operands != int(operands):
      raise HeuristicsError(f"{where}: operands "
                            f"{fields[index['operands']].strip()!r} is not a "
                            "whole number >= 1")
  if nbytes != int(nbytes):
    raise HeuristicsError(f"{where}: bytes {fields[index['bytes']].strip()!r} "
                          "is not a whole number")
  if seconds == 0:
    raise HeuristicsError(f"{where}: seconds is 0; a transfer takes time")
  return (backend, link_class), Point(int(nbytes), seconds * 1e6, line,
                                      int(operands))


def _number(where, column, text):
  try:
    value = float(text)
  except ValueError:
    raise HeuristicsError(f"{where}: {column} {text.strip()!r} is not a number") from None
  if not math.isfinite(value):
    raise HeuristicsError(f"{where}: {column} {text.strip()!r} is not finite")
  if value < 0:
    raise HeuristicsError(f"{where}: {column} {text.strip()!r} is negative")
  return value


def _solve(matrix, vector):
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


def _weighted_fit(points, use_latency, use_per_buffer):
  """[latency, per_buffer, us per MB] minimizing the relative residuals.

  Columns left out are held at 0. Sizes span six decades and timing noise grows
  with the time, so plain least squares would let the largest points swamp the
  microsecond latency; weighting each residual by 1/t weighs every size alike.
  """
  columns = [i for i, used in enumerate((use_latency, use_per_buffer, True)) if used]
  rows = [((1.0, p.operands - 1.0, p.bytes / 1e6), p.us) for p in points]
  normal = [[0.0] * len(columns) for _ in columns]
  rhs = [0.0] * len(columns)
  for features, t in rows:
    w = 1.0 / (t * t)
    for i, ci in enumerate(columns):
      rhs[i] += w * features[ci] * t
      for j, cj in enumerate(columns):
        normal[i][j] += w * features[ci] * features[cj]
  solution = _solve(normal, rhs)
  if solution is None:
    return None
  params = [0.0, 0.0, 0.0]
  for ci, value in zip(columns, solution):
    params[ci] = value
  return params


def fit_group(path, key, points):
  """Fits latency, per-buffer cost (when several operand counts) and bandwidth."""
  sizes = sorted({p.bytes for p in points})
  where = f"{path}:{min(p.line for p in points)}"
  if len(sizes) < 2:
    raise HeuristicsError(
        f"{where}: {key[0]} {key[1]} has measurements at {len(sizes)} distinct "
        "size; at least 2 are needed to fit latency and bandwidth")
  with_buffers = len({p.operands for p in points}) > 1
  # Negative latency or per-buffer cost is noise, not physics: hold such a
  # parameter at 0 and refit the others.
  clamped = []
  use_latency, use_per_buffer = True, with_buffers
  params = None
  for _ in range(3):
    params = _weighted_fit(points, use_latency, use_per_buffer)
    if params is None:
      break
    if use_latency and params[0] < 0:
      use_latency = False
      clamped.append("latency")
    elif use_per_buffer and params[1] < 0:
      use_per_buffer = False
      clamped.append("per_buffer")
    else:
      break
  if params is None or params[2] <= 0:
    slope = "nan" if params is None else f"{params[2] / 1e6:.3g}"
    raise HeuristicsError(
        f"{where}: {key[0]} {key[1]}: time does not grow with size (fitted "
        f"{slope} us/byte), so no bandwidth can be derived")
  return Fit(latency_us=params[0], bandwidth_gbps=1e3 / params[2],
             per_buffer_us=params[1] if with_buffers else None, points=points,
             clamped=", ".join(clamped))


def provenance_lines(csv_path, provenance, machine, date):
  """Comment lines saying where the fitted numbers come from."""
  with open(csv_path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:12]
  def values(column):
    found = sorted(provenance.get(column, ()))
    return ", ".join(found) if found else "not recorded in the CSV"
  return [
      f"# Measured on: {machine or 'not given (calibrate --machine=...)'}",
      f"# jax: {values('jax_version')}; devices: {values('devices')}; "
      f"loop trips: {values('loop_trips')}",
      f"# Measurements: {os.path.basename(csv_path)} (sha256 {digest}...)",
      f"# Calibrated: {date} by hlo-tools heuristics calibrate; model "
      "t = latency + (operands - 1) * per_buffer + bytes / bandwidth",
  ]


def render_table(base, fits, source, provenance=()):
  """Cost-table text: base entries, fitted link lines replaced and annotated."""
  out = [f"# Cost table fitted by hlo-tools heuristics calibrate from {source}."]
  out += list(provenance)
  out.append("# Link entries without a '# fit' comment keep the base table's values.")
  backends = _measured_backend_set(fits)
  fitted_backends = {b for b, _ in fits}
  for line in str(base).splitlines():
    words = line.split()
    key = tuple(words[1:3]) if words[:1] == ["link"] else None
    if words[:1] == ["backends"] and backends:
      out.append(f"backends {backends}  # the backends measured")
    elif words[:1] == ["sm_interference"] and words[1] in fitted_backends:
      # The measured time is the whole cost of the permute; a factor on top
      # would make the core predict other times than were measured.
      out.append(f"sm_interference {words[1]} 0  # measured: included in the fit")
    elif key in fits:
      out.extend(_fit_lines(key, fits[key], base))
    else:
      out.append(line)
  return "\n".join(out) + "\n"


def _fit_lines(key, fit, base):
  note = f"; held at 0: {fit.clamped}" if fit.clamped else ""
  per_buffer = fit.per_buffer_us
  if per_buffer is None:
    per_buffer = base.per_buffer_us(*key)
    note += "; per_buffer from the base table (one operand count measured)"
  worst = max(fit.max_rel_by_size.values())
  return [f"# fit {key[0]} {key[1]}: {fit.points} points at {fit.sizes} sizes, "
          f"operands {','.join(map(str, fit.operand_counts))}, rms relative "
          f"error {100 * fit.rms_rel:.2f}%, max {100 * worst:.2f}%{note}",
          f"link {key[0]} {key[1]} {fit.latency_us:.6g} {fit.bandwidth_gbps:.6g} "
          f"{max(per_buffer, 0.0):.6g}"]


def _measured_backend_set(fits):
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


def calibrate(csv_path, base_table_path=None, machine=None, date=None):
  """Returns (table text, {key: Fit}); the text is checked by the core's parser."""
  provenance = {}
  groups = read_measurements(csv_path, provenance)
  fits = {key: fit_group(csv_path, key, points)
          for key, points in sorted(groups.items())}
  try:
    base = selection.load_cost_table(base_table_path)
  except selection.SelectionError as e:
    raise HeuristicsError(str(e)) from None
  date = date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
  text = render_table(base, fits, os.path.basename(csv_path),
                      provenance_lines(csv_path, provenance, machine, date))
  try:
    selection.CostTable.parse(text, "calibrated table")
  except ValueError as e:  # a bug here, not bad input; still one line
    raise HeuristicsError(f"internal error, the written table does not parse: {e}") from None
  return text, fits


def error_report(fits):
  """Lines: per fit its parameters, then the max relative error at every size."""
  lines = []
  for (backend, link_class), fit in fits.items():
    per_buffer = ("not fitted" if fit.per_buffer_us is None
                  else f"{fit.per_buffer_us:.4g} us")
    lines.append(f"{backend} {link_class}: latency {fit.latency_us:.4g} us, "
                 f"per buffer {per_buffer}, bandwidth {fit.bandwidth_gbps:.4g} GB/s "
                 f"({fit.points} points, rms error {100 * fit.rms_rel:.2f}%)")
    over = [n for n, r in fit.max_rel_by_size.items() if r > GOAL_REL]
    cells = " ".join(f"{heuristics_io.format_bytes(n).replace(' ', '')}:"
                     f"{100 * r:.1f}%" for n, r in fit.max_rel_by_size.items())
    lines.append(f"  max relative error by size: {cells}")
    lines.append(f"  goal <= {100 * GOAL_REL:.0f}% at every size: " +
                 ("met" if not over else
                  f"missed at {len(over)} of {len(fit.max_rel_by_size)} sizes"))
  return lines


def plot(path, groups, fits, source):
  """PNG: per (backend, link class) measured points and the model per operand
  count (top), and the relative error (bottom)."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError as e:
    raise HeuristicsError(f"--plot needs matplotlib ({e})") from None
  keys = sorted(fits)
  fig, axes = plt.subplots(2, len(keys), figsize=(4.5 * len(keys), 7),
                           squeeze=False, sharex=True)
  for col, key in enumerate(keys):
    fit, top, bottom = fits[key], axes[0][col], axes[1][col]
    for operands in fit.operand_counts:
      pts = sorted(p for p in groups[key] if p.operands == operands)
      xs = [p.bytes for p in pts]
      line = top.plot(xs, [fit.model_us(x, operands) for x in xs], "-",
                      label=f"model, {operands} op")[0]
      top.plot(xs, [p.us for p in pts], "o", color=line.get_color(),
               label=f"measured, {operands} op")
      bottom.plot(xs, [100 * (fit.model_us(p.bytes, operands) - p.us) / p.us
                       for p in pts], "o-", color=line.get_color())
    top.set(xscale="log", yscale="log", title=f"{key[0]} {key[1]}",
            ylabel="permute time (us)")
    top.legend(fontsize=7)
    for bound in (-100 * GOAL_REL, 100 * GOAL_REL):
      bottom.axhline(bound, color="gray", linestyle="--", linewidth=0.8)
    bottom.set(xscale="log", xlabel="bytes per permute",
               ylabel="model - measured (%)")
  fig.suptitle(f"Cost model vs measurement ({source})")
  fig.tight_layout()
  directory = os.path.dirname(os.path.abspath(path))
  tmp = os.path.join(directory, "." + os.path.basename(path) + ".tmp.png")
  try:
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
  except OSError as e:
    raise HeuristicsError(f"{path}: {e.strerror}") from None
  finally:
    plt.close(fig)
    if os.path.exists(tmp):
      os.unlink(tmp)


def main(argv):
  p = argparse.ArgumentParser(prog=argv[0], description=__doc__.split("\n\n")[0])
  p.add_argument("csv", help="measured times: backend,link_class,bytes,seconds"
                 "[,operands,...]")
  p.add_argument("--out", default="-", help="cost table to write ('-': stdout)")
  p.add_argument("--base-table", help="table whose entries are kept where the CSV "
                 "has no data (default: the built-in defaults)")
  p.add_argument("--machine", help="where the CSV was measured, for the table's "
                 "provenance (e.g. '2x H200 SXM, NV18 NVLink')")
  p.add_argument("--date", help="date for the provenance (default: today, UTC)")
  p.add_argument("--plot", help="PNG of model vs measurement per backend")
  args = p.parse_args(argv[1:])
  text, fits = calibrate(args.csv, args.base_table, args.machine, args.date)
  for line in error_report(fits):
    print(line, file=sys.stderr)
  if args.plot:
    plot(args.plot, read_measurements(args.csv), fits, os.path.basename(args.csv))
    print(f"wrote {args.plot}", file=sys.stderr)
  if args.out == "-":
    sys.stdout.write(text)
  else:
    try:
      heuristics_io.write_atomic(args.out, text)
    except OSError as e:
      raise HeuristicsError(f"{args.out}: {e.strerror}") from None
    print(f"wrote {args.out}", file=sys.stderr)
  return 0
