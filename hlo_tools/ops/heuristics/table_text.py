"""The calibrated cost table as text: the fitted entries, provenance and fit comments."""

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence

from hlo_tools import selection
from hlo_tools._selection_core import CostTable
from hlo_tools.ops.heuristics.fitting import Fit, medians
from hlo_tools.ops.heuristics.measurements import BACKENDS, Groups, Key, digest


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
  return digest(path)  # of the bytes fitted, not a second read


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
