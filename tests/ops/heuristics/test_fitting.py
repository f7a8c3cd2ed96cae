"""hlo_tools.ops.heuristics.fitting: a cost table's parametric row fitted to measured
permute times (bandwidth from the top points, latency and per-buffer cost by
relative least squares)."""

import math

import pytest

from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import fitting
from hlo_tools.ops.heuristics.measurements import Point

KEY = ("nccl", "nvlink")


def test_solve_is_gaussian_elimination():
  # 2x + y = 3, x + 3y = 5: x = 4/5, y = 7/5.
  assert fitting._solve([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0]) == [
    pytest.approx(0.8),
    pytest.approx(1.4),
  ]
  # The second row is twice the first: no single solution.
  assert fitting._solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0]) is None


def test_medians_per_operand_count_and_size():
  points = [Point(1024, us, 1, 1) for us in (10.0, 30.0, 12.0)]
  points += [Point(1024, 5.0, 1, 2), Point(1024, 7.0, 1, 2)]
  assert fitting.medians(points) == {(1, 1024): 12.0, (2, 1024): 6.0}


def test_top_slope_pools_the_two_largest_sizes_of_each_operand_count():
  points = [
    Point(1_000_000, 10.0, 1, 1),
    Point(2_000_000, 15.0, 1, 1),
    Point(3_000_000, 25.0, 1, 1),  # top two of one buffer: 10 us over 1 MB
    Point(1_000_000, 20.0, 1, 2),
    Point(2_000_000, 50.0, 1, 2),  # of two buffers: 30 us over 1 MB
  ]
  assert fitting.top_slope_us_per_mb(points) == pytest.approx(20.0)  # 40 us over 2 MB
  assert fitting.top_slope_us_per_mb([Point(1024, 1.0, 1, 1)]) is None


def test_exact_model_data_gives_its_parameters_back():
  # 5 us + 2 us per extra buffer + bytes at 100 GB/s (1e-5 us a byte).
  points = [
    Point(n, 5.0 + (ops - 1) * 2.0 + n * 1e-5, 1, ops)
    for ops in (1, 2)
    for n in (10_000, 100_000, 1_000_000)
  ]
  fit = fitting.fit_group("m.csv", KEY, points)
  assert fit.latency_us == pytest.approx(5.0)
  assert fit.per_buffer_us == pytest.approx(2.0)
  assert fit.bandwidth_gbps == pytest.approx(100.0)
  assert (fit.points, fit.sizes, fit.operand_counts, fit.clamped) == (6, 3, [1, 2], "")
  assert fit.rms_rel == pytest.approx(0.0, abs=1e-12)
  # One operand count: no per-buffer cost is fitted.
  assert fitting.fit_group("m.csv", KEY, points[:3]).per_buffer_us is None


def test_a_negative_latency_is_held_at_zero():
  # 1 us less than the bandwidth alone at every size: latency -1 is noise, not physics.
  points = [Point(n, n * 1e-5 - 1.0, 1, 1) for n in (1_000_000, 2_000_000, 4_000_000)]
  fit = fitting.fit_group("m.csv", KEY, points)
  assert fit.clamped == "latency" and fit.latency_us == 0.0
  assert fit.bandwidth_gbps == pytest.approx(100.0)


def test_fit_quality_is_the_relative_error_at_each_point():
  # 10 us + bytes at 1 GB/s: 11 us at 1000 bytes (measured 12), 12 us at 2000 (10).
  points = [Point(1000, 12.0, 2, 1), Point(2000, 10.0, 3, 1)]
  fit = fitting.Fit(10.0, 1.0, None, points)
  assert fit.model_us(1000, operands=3) == 11.0  # no per-buffer cost fitted
  assert fit.max_rel_by_size == {1000: pytest.approx(1 / 12), 2000: pytest.approx(0.2)}
  assert fit.max_rel == pytest.approx(0.2)
  assert fit.rms_rel == pytest.approx(math.sqrt(((1 / 12) ** 2 + 0.2**2) / 2))


def test_a_fit_needs_two_sizes_and_time_that_grows():
  with pytest.raises(HeuristicsError, match=r"^m\.csv:4: nccl nvlink has measurements at 1"):
    fitting.fit_group("m.csv", KEY, [Point(1024, 5.0, 4, 1), Point(1024, 6.0, 5, 1)])
  with pytest.raises(HeuristicsError, match=r"^m\.csv:2: nccl nvlink: time does not grow"):
    fitting.fit_group("m.csv", KEY, [Point(1024, 20.0, 2, 1), Point(4096, 10.0, 3, 1)])
