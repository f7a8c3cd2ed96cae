"""hlo_tools.ops.heuristics.evaluate: sizes held out, every measurement priced with a
calibrated table, and the relative error by size against the 10% goal."""

import pytest

from hlo_tools import selection
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import evaluate
from hlo_tools.ops.heuristics.evaluate import Check
from hlo_tools.ops.heuristics.fitting import Fit
from hlo_tools.ops.heuristics.measurements import Point

KEY = ("nccl", "nvlink")
# NCCL over NVLink: 10 us + bytes at 1 GB/s (1000 bytes a us), no per-buffer cost.
TABLE = (
  "links { backend: NCCL link_class: NVLINK latency_us: 10 bandwidth_gbps: 1 per_buffer_us: 0 }\n"
)


def test_powers_of_four_are_the_calibration_sizes():
  assert [n for n in (0, 1, 2, 4, 12, 16, 1024, 2048, 4096) if evaluate._power_of_four(n)] == [
    1,
    4,
    16,
    1024,
    4096,
  ]


def test_odd_powers_of_two_are_held_out():
  points = [Point(n, 1.0, i, 1) for i, n in enumerate((1024, 2048, 4096))]
  groups = {KEY: points}
  assert evaluate.split_holdout(groups, "none") == (groups, {})
  calibration, held_out = evaluate.split_holdout(groups, "odd-powers-of-two")
  assert calibration == {KEY: [points[0], points[2]]} and held_out == {KEY: [points[1]]}


def test_every_measurement_is_priced_by_the_core():
  table = selection.CostTable.parse(TABLE, "test")
  calibration = {KEY: [Point(1000, 12.0, 2, 1, 100.0, 90.0), Point(1000, 14.0, 3, 1)]}
  held_out = {KEY: [Point(3000, 13.0, 4, 2)]}
  assert evaluate.evaluate(table, calibration, held_out) == [
    # Two rows at one size: their median, 13 us; the step: 90 + 11 us modeled.
    Check("nccl", "nvlink", 1, 1000, False, 13.0, 11.0, 100.0, 101.0),
    Check("nccl", "nvlink", 2, 3000, True, 13.0, 13.0, None, None),
  ]


def _check(nbytes, measured, model, held_out=False, step=None, model_step=None):
  return Check("nccl", "nvlink", 1, nbytes, held_out, measured, model, step, model_step)


CHECKS = [
  _check(1024, 10.0, 11.0, step=100.0, model_step=110.0),
  _check(1024, 10.0, 9.0),
  _check(2048, 10.0, 12.0, held_out=True, step=100.0, model_step=105.0),
]


def test_summary_is_rms_and_worst_relative_error_per_set():
  assert evaluate.relative(11.0, 10.0) == pytest.approx(0.1)
  assert evaluate.summary(CHECKS) == {
    ("nccl", "nvlink", "calibration"): (pytest.approx(0.1), pytest.approx(0.1), 2),
    ("nccl", "nvlink", "held_out"): (pytest.approx(0.2), pytest.approx(0.2), 1),
    ("nccl", "nvlink", "step"): (
      pytest.approx(((0.1**2 + 0.05**2) / 2) ** 0.5),
      pytest.approx(0.1),
      2,
    ),
  }


def test_error_report_gives_each_size_against_the_goal():
  fit = Fit(10.0, 1.0, None, [Point(1000, 11.0, 2, 1), Point(2000, 12.0, 3, 1)])
  assert evaluate.error_report({KEY: fit}, CHECKS) == [
    "nccl nvlink: measured curve of 1 points; parametric row latency 10 us, per buffer "
    "not fitted, bandwidth 1 GB/s (top points), alone rms 0.0%, worst 0.0% on the "
    "calibration rows",
    "  (a) calibration sizes, permute: 1KiB:10.0% -> goal <= 10%: met at every size",
    "  (b) held-out sizes, permute: 2KiB:20.0%! -> goal <= 10%: missed at 1 of 1 sizes",
    "  (c) loop step = baseline + modeled permute (* held out): 1KiB:10.0% 2KiB:5.0%* "
    "-> goal <= 10%: met at every size",
  ]
  assert evaluate.error_report({KEY: fit})[1] == "  (a) calibration sizes, permute: no sizes"


def test_errors_csv_has_a_row_per_check(tmp_path):
  path = tmp_path / "errors.csv"
  evaluate.write_errors_csv(str(path), CHECKS[1:])
  assert path.read_text().splitlines() == [
    "backend,link_class,operands,bytes,set,measured_us,model_us,rel_err,"
    "step_us,model_step_us,step_rel_err",
    "nccl,nvlink,1,1024,calibration,10.0000,9.0000,-0.1000,,,",
    "nccl,nvlink,1,2048,held_out,10.0000,12.0000,0.2000,100.0000,105.0000,0.0500",
  ]
  with pytest.raises(HeuristicsError, match=r"missing/errors\.csv: no such directory"):
    evaluate.write_errors_csv(str(tmp_path / "missing" / "errors.csv"), CHECKS)
