"""hlo_tools.ops.heuristics.measurements: measurement CSVs read row by row, each bad
row named by its line, and times in another unit refused."""

import hashlib

import pytest

from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import calibrate, measurements
from hlo_tools.ops.heuristics.measurements import Point

CSV = (
  "# 2x H200, one box\n"
  "backend,link_class,bytes,seconds,operands,step_s,baseline_s,jax_version,devices\n"
  "nccl,nvlink,1024,1e-05,2,3e-05,2e-05,0.10.2,2\n"
  "\n"
  "nccl,nvlink,1048576,2e-05,1,4e-05,2e-05,0.10.2,2\n"
  "NVSHMEM,NVLink,4096,8e-06,1,3e-05,2e-05,0.10.2,2\n"
)


def test_rows_become_points_in_microseconds_with_their_lines(tmp_path):
  path = tmp_path / "m.csv"
  path.write_text(CSV)
  provenance = {}
  groups = measurements.read_measurements(str(path), provenance)
  # Comment and blank lines keep their numbers; backend and link class in any case.
  assert groups == {
    ("nccl", "nvlink"): [
      Point(1024, pytest.approx(10.0), 3, 2, pytest.approx(30.0), pytest.approx(20.0)),
      Point(1048576, pytest.approx(20.0), 5, 1, pytest.approx(40.0), pytest.approx(20.0)),
    ],
    ("nvshmem", "nvlink"): [
      Point(4096, pytest.approx(8.0), 6, 1, pytest.approx(30.0), pytest.approx(20.0))
    ],
  }
  assert provenance == {"jax_version": {"0.10.2"}, "devices": {"2"}}


def test_digest_is_the_sha256_of_the_bytes_read(tmp_path):
  path = tmp_path / "m.csv"
  path.write_text(CSV)
  measurements.read_measurements(str(path))
  assert measurements.digest(str(path)) == hashlib.sha256(CSV.encode()).hexdigest()


def test_text_that_is_not_utf8_names_its_line_and_byte(tmp_path):
  path = tmp_path / "m.csv"
  path.write_bytes(b"backend,link_class,bytes,seconds\nnccl,nvlink,\xff,1e-05\n")
  with pytest.raises(HeuristicsError, match=r"m\.csv:2: not UTF-8 text \(byte 45\)$"):
    measurements.read_measurements(str(path))


def test_a_zero_time_is_refused(tmp_path):
  path = tmp_path / "m.csv"
  path.write_text("backend,link_class,bytes,seconds\nnccl,nvlink,1024,0\n")
  with pytest.raises(HeuristicsError, match=r"m\.csv:2: seconds is 0; a transfer takes time"):
    measurements.read_measurements(str(path))


@pytest.mark.parametrize(
  "point, bound",
  [
    (Point(1024, 2e6, 7, 1), "2 s for one permute of 1024 bytes is over 1 s"),
    (Point(1024, 0.05, 7, 1), "5e-08 s for one permute of 1024 bytes is under 0.1 us"),
    # 1 MiB in 10 ms: 105 MB/s, slower than any GPU link.
    (Point(1 << 20, 1e4, 7, 1), "moves at most 104.9 MB/s (1048576 bytes in 0.01 s), under 500"),
    # 1 GiB in 50 us: 21 TB/s, faster than any.
    (
      Point(1 << 30, 50.0, 7, 1),
      "moves at most 2.147e+07 MB/s (1073741824 bytes in 5e-05 s), over",
    ),
  ],
)
def test_times_no_gpu_link_gives_are_refused_at_their_row(point, bound):
  with pytest.raises(HeuristicsError) as e:
    measurements.check_units("m.csv", ("nccl", "nvlink"), [point])
  assert str(e.value).startswith("m.csv:7: ") and bound in str(e.value), str(e.value)
  assert "microseconds or milliseconds" in str(e.value)


def test_plausible_times_pass_the_unit_check():
  # 1 KiB in 10 us and 1 MiB in 20 us (52 GB/s): an NVLink permute.
  points = [Point(1024, 10.0, 2, 1), Point(1 << 20, 20.0, 3, 1)]
  assert measurements.check_units("m.csv", ("nccl", "nvlink"), points) is None


@pytest.mark.parametrize(
  "operands, message",
  [
    ("0", "not a whole number >= 1"),
    ("1.5", "not a whole number >= 1"),
    ("x", "operands 'x' is not a number"),
  ],
)
def test_bad_operands_name_the_line(tmp_path, operands, message):
  path = tmp_path / "bad.csv"
  path.write_text(
    "backend,link_class,bytes,seconds,operands\n"
    "nccl,nvlink,1024,1e-5,1\n"
    f"nccl,nvlink,2048,1e-5,{operands}\n"
  )
  with pytest.raises(HeuristicsError) as e:
    calibrate.calibrate(str(path))
  assert f"{path}:3: " in str(e.value) and message in str(e.value)


def test_calibrate_accepts_spaced_header_and_comments(tmp_path):
  path = tmp_path / "m.csv"
  path.write_text(
    "# measured on box 7\nBackend, Link Class, bytes, seconds, host\n"
    "nccl, network, 0, 10e-6, a\nnccl, network, 50000, 11e-6, a\n"
  )
  _, fits = calibrate.calibrate(str(path))
  assert fits[("nccl", "network")].latency_us == pytest.approx(10)
  assert fits[("nccl", "network")].bandwidth_gbps == pytest.approx(50)
