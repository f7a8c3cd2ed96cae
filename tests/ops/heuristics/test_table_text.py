"""hlo_tools.ops.heuristics.table_text: the calibrated cost table as text, its fitted
entries set through the core, headed by where the numbers come from."""

import hashlib

import pytest

from hlo_tools import selection
from hlo_tools.ops.heuristics import table_text
from hlo_tools.ops.heuristics.fitting import Fit
from hlo_tools.ops.heuristics.measurements import Point

KEY = ("nvshmem", "nvlink")
# Measured at three sizes, 1 KiB twice (median 12 us); zero bytes has no place in
# log(bytes).
POINTS = [
  Point(0, 5.0, 2, 1),
  Point(1024, 10.0, 3, 1),
  Point(1024, 14.0, 4, 1),
  Point(4096, 20.0, 5, 1),
]
FIT = Fit(3.14159265, 400.0, None, POINTS)
# A base whose NVSHMEM time carries an SM-interference factor.
BASE = "sm_interference { backend: NVSHMEM fraction: 0.2 }\n"


def test_provenance_says_where_the_numbers_come_from(tmp_path):
  csv, csv_bytes = tmp_path / "bench.csv", b"backend,link_class,bytes,seconds\n"
  csv.write_bytes(csv_bytes)
  val, val_bytes = tmp_path / "val.csv", b"other bytes\n"
  val.write_bytes(val_bytes)
  lines = table_text.provenance_lines(
    str(csv),
    {"jax_version": {"0.9.1", "0.10.2"}, "loop_trips": {"50"}},
    None,
    "2026-01-31",
    software="XLA at abc123",
    holdout="odd-powers-of-two",
    holdout_csv=str(val),
    notes=["NVLink 4"],
  )
  sha = lambda data: hashlib.sha256(data).hexdigest()
  assert lines[:5] == [
    "# Measured on: not given (calibrate --machine=...)",
    "# jax: 0.10.2, 0.9.1; devices: not recorded in the CSV; loop trips: 50",
    "# Software: XLA at abc123",
    "# Note: NVLink 4",
    f"# Measurements: bench.csv (sha256 {sha(csv_bytes)})",
  ]
  assert lines[5].startswith("# Calibrated: 2026-01-31 by hlo-tools heuristics calibrate")
  assert lines[6:] == [
    "# Points: sizes that are powers of 4; the other sizes were held out for validation",
    f"# Validated on: val.csv (sha256 {sha(val_bytes)})",
  ]


def test_block_key_reads_backend_and_link_class_of_a_printed_entry():
  block = ["links {", "  backend: NVSHMEM", "  link_class: NVLINK", "  latency_us: 3", "}"]
  assert table_text._block_key(block) == ("nvshmem", "nvlink")
  assert table_text._block_key(["sm_interference { backend: NCCL fraction: 0 }"]) == ("nccl", None)


def test_six_significant_digits():
  assert table_text._g6(3.14159265) == 3.14159
  assert table_text._g6(123456789.0) == 123457000.0


def test_backend_set_only_of_two_or_more_backends():
  assert table_text._measured_backend_set([("nccl", "nvlink")]) is None
  assert table_text._measured_backend_set([KEY, ("nccl", "network")]) == "nccl,nvshmem"


def test_table_gets_the_fitted_row_and_the_measured_curve():
  base = selection.CostTable.parse(BASE, "base")
  table = table_text.build_table(base, {KEY: FIT}, {KEY: POINTS})
  assert table.link(*KEY) == (3.14159, 400.0)
  # One operand count measured: the per-buffer cost stays the base table's.
  assert table.per_buffer_us(*KEY) == base.per_buffer_us(*KEY)
  assert table.points(*KEY) == [(1, 1024, 12.0), (1, 4096, 20.0)]
  # The measured time is the permute's whole cost: no factor on top of it.
  assert base.sm_interference("nvshmem") == pytest.approx(0.2)
  assert table.sm_interference("nvshmem") == 0
  # The base is left as it was.
  assert base.points(*KEY) != table.points(*KEY)


def test_text_comments_each_fitted_entry_and_parses_back():
  base = selection.CostTable.parse(BASE, "base")
  text = table_text.render_table(base, {KEY: FIT}, "m.csv", ["# Measured on: box"], {KEY: POINTS})
  lines = text.splitlines()
  assert lines[:3] == [
    "# Cost table fitted by hlo-tools heuristics calibrate from m.csv.",
    "# Measured on: box",
    "# Links entries without a '# fit' comment keep the base table's values.",
  ]
  fit_line = next(i for i, l in enumerate(lines) if l.startswith("# fit nvshmem nvlink:"))
  assert lines[fit_line].startswith("# fit nvshmem nvlink: 4 points at 3 sizes, operands 1;")
  assert lines[fit_line].endswith("; per_buffer from the base table (one operand count measured)")
  assert lines[fit_line + 1] == (
    "# measured curve nvshmem nvlink: 2 points, median of the CSV's rows at each (operands, bytes)"
  )
  assert lines[fit_line + 2 : fit_line + 5] == [
    "links {",
    "  backend: NVSHMEM",
    "  link_class: NVLINK",
  ]
  assert (
    "sm_interference { backend: NVSHMEM fraction: 0 }  # measured: included in the fit" in lines
  )
  assert len([l for l in lines if l.startswith("# fit ")]) == 1
  parsed = selection.CostTable.parse(text, "rendered")
  assert parsed.link(*KEY) == (3.14159, 400.0)
