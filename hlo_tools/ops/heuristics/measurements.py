"""Measurement CSVs for calibration: reading, row checks and unit checks."""

import csv
import hashlib
import math
from collections.abc import Sequence
from typing import NamedTuple

from hlo_tools import bounded_input, selection
from hlo_tools.errors import HeuristicsError

BACKENDS = selection.BACKENDS
REQUIRED = ("backend", "link_class", "bytes", "seconds")
# A measurement CSV is thousands of rows: a side input's bound (bounded_input.side_limit).
WHAT = "a measurement CSV"


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


def _column_key(name: str) -> str:
  # "link class", "Link-Class" and "link_class" all name the same column.
  return name.strip().lower().replace(" ", "_").replace("-", "_")


# sha256 of each CSV as read (path -> hex digest): the table's provenance names the
# bytes that were fitted, without reading the file a second time (a FIFO gives its
# bytes once).
_digests: dict[str, str] = {}


def digest(path: str, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES) -> str:
  """The sha256 of the CSV at `path`: of the bytes read_measurements read, else read
  now (bounded, as every input)."""
  if path not in _digests:
    _digests[path] = hashlib.sha256(
      bounded_input.read_side_input(path, WHAT, max_bytes)
    ).hexdigest()
  return _digests[path]


def _read_rows(path: str, max_bytes: int) -> list[tuple[int, list[str]]]:
  """[(line number, fields)] of the non-comment lines, header first; the file read as
  every side input is (bounded in size by max_bytes and a CSV's own limit, in time by
  the input timeout)."""
  data = bounded_input.read_side_input(path, WHAT, max_bytes)
  _digests[path] = hashlib.sha256(data).hexdigest()
  try:
    lines = data.decode("utf-8").splitlines()
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise HeuristicsError(f"{path}:{line}: not UTF-8 text (byte {e.start})") from None
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


def read_measurements(
  path: str,
  provenance: dict[str, set[str]] | None = None,
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
) -> Groups:
  """{(backend, link_class): [Point]}; HeuristicsError names file:line.

  When `provenance` is a dict, it receives the sets of values of the CSV's
  jax_version, devices and loop_trips columns where present.
  """
  rows = _read_rows(path, max_bytes)
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
