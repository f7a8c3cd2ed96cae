"""`hlo-tools heuristics calibrate`: fit a cost table from measured point-to-point times.

    hlo-tools heuristics calibrate CSV [--out=TABLE] [--base-table=F]

CSV columns (header required, any order, extra columns ignored): backend
(nccl|nvshmem), link_class (same_device|nvlink|nvlink_domain|network), bytes,
seconds: one measured transfer per line. For each (backend, link class) with
data, latency and bandwidth come from a least-squares fit of
    t = latency + bytes / bandwidth.
The table written is the defaults (or --base-table) with the fitted entries
replaced, in the core's text format, so nvshmem-opt --cost-table and
hlo_tools.selection.load_cost_table accept it. Without --out it goes to stdout.
"""

import argparse
import csv
import math
import os
import sys

from hlo_tools import heuristics_io
from hlo_tools import selection
from hlo_tools.heuristics_io import HeuristicsError

BACKENDS = ("nccl", "nvshmem")
REQUIRED = ("backend", "link_class", "bytes", "seconds")


class Fit:
  """One (backend, link class) fit and how well it matches its points."""

  def __init__(self, latency_us, bandwidth_gbps, points, sizes, rms_rel, max_rel,
               clamped):
    self.latency_us = latency_us
    self.bandwidth_gbps = bandwidth_gbps
    self.points = points
    self.sizes = sizes
    self.rms_rel = rms_rel
    self.max_rel = max_rel
    self.clamped = clamped


def _column_key(name):
  # "link class", "Link-Class" and "link_class" all name the same column.
  return name.strip().lower().replace(" ", "_").replace("-", "_")


def read_measurements(path):
  """{(backend, link_class): [(bytes, us, line)]}; HeuristicsError names file:line."""
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
  rows = list(csv.reader([l for _, l in numbered]))
  header_line, header = numbered[0][0], [_column_key(c) for c in rows[0]]
  missing = [c for c in REQUIRED if c not in header]
  if missing:
    raise HeuristicsError(f"{path}:{header_line}: missing column(s) "
                          f"{', '.join(missing)} (header must name "
                          f"{', '.join(REQUIRED)})")
  index = {c: header.index(c) for c in REQUIRED}
  groups = {}
  for (line, _), fields in zip(numbered[1:], rows[1:]):
    where = f"{path}:{line}"
    if len(fields) != len(header):
      raise HeuristicsError(f"{where}: {len(fields)} fields, header has "
                            f"{len(header)}")
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
    if nbytes != int(nbytes):
      raise HeuristicsError(f"{where}: bytes {fields[index['bytes']].strip()!r} "
                            "is not a whole number")
    if seconds == 0:
      raise HeuristicsError(f"{where}: seconds is 0; a transfer takes time")
    groups.setdefault((backend, link_class), []).append(
        (int(nbytes), seconds * 1e6, line))
  if not groups:
    raise HeuristicsError(f"{path}:{header_line}: header but no measurements")
  return groups


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


def fit_group(path, key, points):
  """Least squares of t = a + b * bytes, each point weighted by 1/t.

  Sizes span six decades and timing noise grows with the time, so plain least
  squares would let the 1 GB points swamp the microsecond latency; minimizing
  the relative residuals (t - a - b x) / t weighs every size alike.
  """
  sizes = sorted({x for x, _, _ in points})
  first_line = min(line for _, _, line in points)
  where = f"{path}:{first_line}"
  if len(sizes) < 2:
    raise HeuristicsError(
        f"{where}: {key[0]} {key[1]} has measurements at {len(sizes)} distinct "
        "size; at least 2 are needed to fit latency and bandwidth")
  w = [1.0 / (t * t) for _, t, _ in points]  # squared weights of 1/t residuals
  sw = sum(w)
  sx = sum(wi * x for wi, (x, _, _) in zip(w, points))
  sy = sum(wi * t for wi, (_, t, _) in zip(w, points))
  sxx = sum(wi * x * x for wi, (x, _, _) in zip(w, points))
  sxy = sum(wi * x * t for wi, (x, t, _) in zip(w, points))
  det = sw * sxx - sx * sx
  latency = (sxx * sy - sx * sxy) / det
  slope = (sw * sxy - sx * sy) / det
  clamped = False
  if latency < 0:
    # Noise at tiny latencies can push the intercept below zero; a negative
    # latency is meaningless, so refit through the origin.
    latency, slope, clamped = 0.0, sxy / sxx, True
  if slope <= 0:
    raise HeuristicsError(
        f"{where}: {key[0]} {key[1]}: time does not grow with size (fitted "
        f"{slope:.3g} us/byte), so no bandwidth can be derived")
  rel = [(latency + slope * x - t) / t for x, t, _ in points]
  return Fit(latency_us=latency, bandwidth_gbps=1.0 / (slope * 1e3),
             points=len(points), sizes=len(sizes),
             rms_rel=math.sqrt(sum(r * r for r in rel) / len(rel)),
             max_rel=max(abs(r) for r in rel), clamped=clamped)


def render_table(base, fits, source):
  """Cost-table text: base entries, fitted link lines replaced and annotated."""
  out = [f"# Cost table fitted by hlo-tools heuristics calibrate from {source}.",
         "# Link entries without a '# fit' comment keep the base table's values."]
  for line in str(base).splitlines():
    words = line.split()
    key = tuple(words[1:3]) if words[:1] == ["link"] else None
    if key in fits:
      fit = fits[key]
      note = "; latency clamped to 0, refit through the origin" if fit.clamped else ""
      out.append(f"# fit {key[0]} {key[1]}: {fit.points} points at {fit.sizes} "
                 f"sizes, rms relative error {100 * fit.rms_rel:.2f}%, max "
                 f"{100 * fit.max_rel:.2f}%{note}")
      out.append(f"link {key[0]} {key[1]} {fit.latency_us:.6g} "
                 f"{fit.bandwidth_gbps:.6g}")
    else:
      out.append(line)
  return "\n".join(out) + "\n"


def calibrate(csv_path, base_table_path=None):
  """Returns (table text, {key: Fit}); the text is checked by the core's parser."""
  groups = read_measurements(csv_path)
  fits = {key: fit_group(csv_path, key, points)
          for key, points in sorted(groups.items())}
  try:
    base = selection.load_cost_table(base_table_path)
  except selection.SelectionError as e:
    raise HeuristicsError(str(e)) from None
  text = render_table(base, fits, os.path.basename(csv_path))
  try:
    selection.CostTable.parse(text, "calibrated table")
  except ValueError as e:  # a bug here, not bad input; still one line
    raise HeuristicsError(f"internal error, the written table does not parse: {e}") from None
  return text, fits


def main(argv):
  p = argparse.ArgumentParser(prog=argv[0], description=__doc__.split("\n\n")[0])
  p.add_argument("csv", help="measured times: backend,link_class,bytes,seconds")
  p.add_argument("--out", default="-", help="cost table to write ('-': stdout)")
  p.add_argument("--base-table", help="table whose entries are kept where the CSV "
                 "has no data (default: the built-in defaults)")
  args = p.parse_args(argv[1:])
  text, fits = calibrate(args.csv, args.base_table)
  for (backend, link_class), fit in fits.items():
    print(f"{backend} {link_class}: latency {fit.latency_us:.4g} us, bandwidth "
          f"{fit.bandwidth_gbps:.4g} GB/s ({fit.points} points, rms error "
          f"{100 * fit.rms_rel:.2f}%)", file=sys.stderr)
  if args.out == "-":
    sys.stdout.write(text)
  else:
    try:
      heuristics_io.write_atomic(args.out, text)
    except OSError as e:
      raise HeuristicsError(f"{args.out}: {e.strerror}") from None
    print(f"wrote {args.out}", file=sys.stderr)
  return 0
