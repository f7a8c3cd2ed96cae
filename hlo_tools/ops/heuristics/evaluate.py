"""Hold-out and evaluation of a calibrated table: every measurement priced by the core."""

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from hlo_tools import atomic_output, selection
from hlo_tools._selection_core import CostTable
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics.fitting import Fit, medians
from hlo_tools.ops.heuristics.measurements import Groups, Key, Point
from hlo_tools.ops.sizes import format_bytes

GOAL_REL = 0.10  # Goal for the model's error at every size.

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
    atomic_output.write_atomic(path, text)
  except OSError as e:
    raise HeuristicsError(f"{path}: {e.strerror}") from None
