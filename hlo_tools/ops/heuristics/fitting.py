"""Fitting a cost table's parametric row to measured permute times."""

import math
import statistics
from collections.abc import Iterable, Sequence

from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics.measurements import Key, Point


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
