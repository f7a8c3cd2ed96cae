"""hlo_tools.ops.heuristics.calibrate: `hlo-tools heuristics calibrate` on the XLA-level
permute CSV (per-buffer cost, provenance, error by size) and on point-to-point CSVs;
synthetic data from known parameters and the committed 2x H200 measurements."""

import os
import random
import subprocess
import sys

import pytest

from hlo_tools import cli, selection
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import calibrate, evaluate, fitting, measurements

from conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"
NVSHMEM_OPT = os.path.join(os.path.dirname(sys.executable), "nvshmem-opt")
TOOL_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
HEADER = (
  "backend,link_class,bytes,seconds,operands,step_s,baseline_s,devices,jax_version,loop_trips"
)
# (latency us, per extra buffer us, GB/s)
TRUE = {("nccl", "nvlink"): (13.0, 1.5, 300.0), ("nvshmem", "nvlink"): (20.0, 9.0, 380.0)}


def write_xla_csv(path, params, noise=0.0, seed=0, step=2):
  """Rows as the XLA-level bench writes them; seconds from the known model;
  sizes every `step` powers of two."""
  rng = random.Random(seed)
  lines = [HEADER]
  for (backend, link_class), (latency, per_buffer, gbps) in params.items():
    for operands in (1, 2, 4):
      for exponent in range(10, 29, step):  # 1 KiB .. 256 MiB
        nbytes = 1 << exponent
        us = latency + (operands - 1) * per_buffer + nbytes / (gbps * 1e3)
        us *= 1 + rng.gauss(0, noise)
        baseline = 12e-6
        lines.append(
          f"{backend},{link_class},{nbytes},{us * 1e-6!r},{operands},"
          f"{us * 1e-6 + baseline!r},{baseline!r},2,0.9.1,50"
        )
  path.write_text("\n".join(lines) + "\n")
  return path


def test_recovers_latency_per_buffer_and_bandwidth(tmp_path):
  path = write_xla_csv(tmp_path / "bench.csv", TRUE, noise=0.01)
  text, fits = calibrate.calibrate(str(path), machine="2x H200 NVLink", date="2026-11-30")
  table = selection.CostTable.parse(text, "fitted")
  for key, (latency, per_buffer, gbps) in TRUE.items():
    fit = fits[key]
    assert fit.operand_counts == [1, 2, 4]
    assert fit.latency_us == pytest.approx(latency, rel=0.05), key
    assert fit.per_buffer_us == pytest.approx(per_buffer, abs=0.5), key
    assert fit.bandwidth_gbps == pytest.approx(gbps, rel=0.03), key
    assert table.link(*key) == (
      pytest.approx(fit.latency_us, rel=1e-5),
      pytest.approx(fit.bandwidth_gbps, rel=1e-5),
    )
    assert table.per_buffer_us(*key) == pytest.approx(fit.per_buffer_us, rel=1e-5, abs=1e-6)
    assert max(fit.max_rel_by_size.values()) < evaluate.GOAL_REL
    # The core predicts with the written table the measured times at the
    # measured points (the curve), and the fit beyond the largest size.
    assert table.sm_interference(key[0]) == 0
    measured = fitting.medians(measurements.read_measurements(str(path))[key])
    for (operands, nbytes), us in measured.items():
      assert selection.edge_time_us(table, key[0], key[1], nbytes, operands) == (
        pytest.approx(us, rel=1e-5)
      )
    top = max(n for _, n in measured)
    assert selection.edge_time_us(table, key[0], key[1], 2 * top, 1) == pytest.approx(
      measured[(1, top)] + top / (fit.bandwidth_gbps * 1e3), rel=1e-5
    )
  # Provenance: machine, versions, date and the CSV's name head the table.
  assert "# Measured on: 2x H200 NVLink" in text
  assert "# jax: 0.9.1; devices: 2; loop trips: 50" in text
  assert "# Measurements: bench.csv (sha256 " in text
  assert "# Calibrated: 2026-11-30" in text
  assert table.backends == "nccl,nvshmem"


def test_exact_data_is_exact_and_the_table_decides_with_it(tmp_path):
  path = write_xla_csv(tmp_path / "bench.csv", TRUE)
  text, fits = calibrate.calibrate(str(path))
  assert fits[("nvshmem", "nvlink")].per_buffer_us == pytest.approx(9.0, rel=1e-6)
  assert fits[("nccl", "nvlink")].latency_us == pytest.approx(13.0, rel=1e-6)
  table = selection.CostTable.parse(text, "fitted")
  t = selection.parse_topology("1x1x2:map=0,1")
  ring = [(0, 1), (1, 0)]
  # Large single buffers: NVSHMEM's bandwidth wins. Small, four buffers: its
  # per-buffer barrier loses.
  assert selection.decide(t, table, 256 << 20, ring)["plan"] == "nvshmem"
  small = selection.decide(t, table, 64 << 10, ring, buffers=4)
  assert small["plan"] == "nccl"
  assert small["backend_us"]["nvshmem"] == pytest.approx(20 + 27 + 65536 / 380e3, rel=1e-6)


def test_older_point_to_point_csv_keeps_base_per_buffer(tmp_path):
  path = tmp_path / "p2p.csv"
  path.write_text(
    "backend,link_class,bytes,seconds\nnvshmem,nvlink,1000,6e-6\nnvshmem,nvlink,1000000,8e-6\n"
  )
  text, fits = calibrate.calibrate(str(path))
  assert fits[("nvshmem", "nvlink")].per_buffer_us is None
  default = selection.load_cost_table()
  table = selection.CostTable.parse(text, "fitted")
  assert table.per_buffer_us("nvshmem", "nvlink") == default.per_buffer_us("nvshmem", "nvlink")
  assert "per_buffer from the base table" in text
  # One backend measured: the base table's backend set stays.
  assert table.backends == default.backends


def test_peer_and_symmetric_measurements_set_the_backend_set(tmp_path):
  params = {
    ("nccl", "nvlink"): (15.0, 6.0, 280.0),
    ("peer", "nvlink"): (15.0, 7.0, 280.0),
    ("symmetric", "nvlink"): (13.0, 8.0, 278.0),
  }
  text, _ = calibrate.calibrate(str(write_xla_csv(tmp_path / "b.csv", params)))
  table = selection.CostTable.parse(text, "fitted")
  assert table.backends == "nccl,peer,symmetric"
  # Whether the runtime supports signals is not something a CSV says.
  assert table.symmetric_signals is False


def test_nvshmem_network_rows_are_an_input_error_at_their_line(tmp_path, capsys):
  # The pinned XLA runs NVSHMEM only inside NVSHMEM_TEAM_SHARED (one host): a
  # measured NVSHMEM row across hosts is bad input, not a table the core refuses
  # after it was written.
  path = write_xla_csv(tmp_path / "hosts.csv", {("nccl", "network"): (20.0, 7.0, 45.0)})
  lines = path.read_text().splitlines()
  lines.insert(5, "nvshmem,network,1024,2e-05,1,5e-05,3e-05,16,0.9.1,50")
  path.write_text("\n".join(lines) + "\n")
  out = tmp_path / "table.txt"
  rc = cli.main(["heuristics", "calibrate", str(path), f"--out={out}"])
  _, err = capsys.readouterr()
  assert rc == 2 and len(err.strip().splitlines()) == 1, err
  assert f"{path}:6: nvshmem has no network row" in err and "internal" not in err, err
  assert not out.exists()


def test_cli_reports_calibration_held_out_and_step_and_plots(tmp_path, capsys):
  path = write_xla_csv(tmp_path / "bench.csv", TRUE, noise=0.01, step=1)
  out, png, errors = tmp_path / "table.txt", tmp_path / "fit.png", tmp_path / "e.csv"
  rc = cli.main(
    [
      "heuristics",
      "calibrate",
      str(path),
      f"--out={out}",
      f"--plot={png}",
      "--machine=test box",
      "--holdout=odd-powers-of-two",
      f"--errors-csv={errors}",
    ]
  )
  assert rc == 0
  err = capsys.readouterr().err
  assert "nvshmem nvlink: measured curve of 30 points; parametric row latency" in err
  lines = err.splitlines()
  calib = [l for l in lines if l.startswith("  (a) calibration sizes")]
  held = [l for l in lines if l.startswith("  (b) held-out sizes")]
  step = [l for l in lines if l.startswith("  (c) loop step")]
  assert len(calib) == len(held) == len(step) == 2
  # The curve passes through its points; held-out sizes are only predicted.
  assert "1KiB:0.0% 4KiB:0.0%" in calib[0] and "2KiB:" not in calib[0]
  assert "2KiB:" in held[0] and "4KiB:" not in held[0]
  assert "2KiB:" in step[0] and "*" in step[0]
  text = out.read_text()
  assert "points { buffers: 1 bytes: 1024 " in text
  assert "points { buffers: 1 bytes: 2048 " not in text
  assert "# Points: sizes that are powers of 4" in text
  table = selection.load_cost_table(out)
  assert table.has_measured_curve("nvshmem", "nvlink")
  # The errors CSV holds what the report summarizes: the core's price of every
  # measurement.
  rows = errors.read_text().splitlines()
  assert rows[0].startswith("backend,link_class,operands,bytes,set,")
  held_rows = [r.split(",") for r in rows[1:] if ",held_out," in r]
  assert len(held_rows) == 2 * 3 * 9
  for r in held_rows:
    model = selection.edge_time_us(table, r[0], r[1], int(r[3]), int(r[2]))
    assert float(r[6]) == pytest.approx(model, abs=1e-4)
  # Synthetic data from the parametric model: log-log interpolation stays
  # within the goal between powers of 4.
  assert all(abs(float(r[7])) < evaluate.GOAL_REL for r in held_rows)
  assert png.stat().st_size > 10000 and png.read_bytes()[:4] == b"\x89PNG"


def test_holdout_csv_validates_and_bad_holdout_is_refused(tmp_path):
  cal = write_xla_csv(tmp_path / "cal.csv", TRUE)
  other = write_xla_csv(tmp_path / "val.csv", TRUE, noise=0.05, seed=3)
  result = calibrate.run_calibration(str(cal), holdout_csv=str(other))
  assert "# Validated on: val.csv (sha256 " in result.text
  checks = evaluate.evaluate(result.table, result.calibration, result.held_out)
  held = [c for c in checks if c.held_out]
  assert len(held) == 2 * 3 * 10
  summary = evaluate.summary(checks)
  rms, worst, count = summary[("nccl", "nvlink", "held_out")]
  assert count == 30 and 0 < rms <= worst < 0.2
  assert summary[("nccl", "nvlink", "calibration")][1] < 1e-5
  with pytest.raises(HeuristicsError, match="--holdout=all: expected one of"):
    calibrate.run_calibration(str(cal), holdout="all")


def test_duplicate_rows_give_their_median_as_the_point(tmp_path):
  path = tmp_path / "dup.csv"
  path.write_text(
    "backend,link_class,bytes,seconds,operands\n"
    "nccl,nvlink,1024,10e-6,1\nnccl,nvlink,1024,30e-6,1\n"
    "nccl,nvlink,1024,12e-6,1\nnccl,nvlink,1048576,40e-6,1\n"
  )
  text, _ = calibrate.calibrate(str(path))
  assert "  points { buffers: 1 bytes: 1024 us: 12 }\n" in text
  table = selection.CostTable.parse(text, "dup")
  assert table.points("nccl", "nvlink") == [(1, 1024, 12.0), (1, 1048576, 40.0)]


@pytest.mark.parametrize(
  "name, backends",
  [
    ("h200x2_xla_permute_jax091.csv", "nccl,nvshmem"),
    ("h200x2_xla_permute_jax0112.csv", "nccl,peer,symmetric"),
  ],
)
def test_committed_h200_csvs_read_as_is(name, backends):
  path = RESULTS / name
  text, fits = calibrate.calibrate(str(path))
  table = selection.CostTable.parse(text, name)
  assert table.backends == backends
  for fit in fits.values():
    assert fit.operand_counts == [1, 2, 4] and fit.sizes == 10
    # Physical sanity: H200 NVLink, below the ~450 GB/s link, above 200.
    assert 200 < fit.bandwidth_gbps < 450 and 0 < fit.latency_us < 40
  if backends == "nccl,nvshmem":
    # Measured: NVSHMEM moves large messages faster than NCCL.
    assert fits[("nvshmem", "nvlink")].bandwidth_gbps > fits[("nccl", "nvlink")].bandwidth_gbps


def test_h200_calibration_set_validates_on_held_out_sizes_from_2_mib():
  """The documented finding: the measured curve from the powers of 4 predicts the
  held-out odd powers of two within 10% from 2 MiB up, for both backends."""
  path = RESULTS / "h200x2_xla_permute_calibration_jax091.csv"
  result = calibrate.run_calibration(str(path), holdout="odd-powers-of-two")
  checks = evaluate.evaluate(result.table, result.calibration, result.held_out)
  held = [c for c in checks if c.held_out]
  assert {c.backend for c in held} == {"nccl", "nvshmem"}
  assert all(not evaluate._power_of_four(c.bytes) for c in held)
  for c in held:
    if c.bytes >= 2 << 20:
      assert abs(evaluate.relative(c.model_us, c.measured_us)) <= evaluate.GOAL_REL, c
      assert abs(evaluate.relative(c.model_step_us, c.step_us)) <= evaluate.GOAL_REL, c
  # The committed table is this calibration.
  committed = selection.load_cost_table(ROOT / "core" / "tables" / "h200x2_nvlink_cost_table.txtpb")
  for key in (("nccl", "nvlink"), ("nvshmem", "nvlink")):
    assert committed.points(*key) == result.table.points(*key)


@pytest.mark.parametrize(
  "scale, needle", [(1e6, "over 1 s"), (1e3, "under 500 MB/s"), (1e-6, "under 0.1 us")]
)
def test_csv_in_another_unit_is_refused(tmp_path, capsys, scale, needle):
  # The seconds column in microseconds (x1e6) fitted a latency of 1e7 us and called
  # the goal met; in milliseconds (x1e3) every size is 1000x too slow; x1e-6 is
  # faster than any launch. Each is refused with one line naming the row.
  good = write_xla_csv(tmp_path / "good.csv", TRUE)
  lines = good.read_text().splitlines()
  out = [lines[0]]
  for line in lines[1:]:
    fields = line.split(",")
    fields[3] = repr(float(fields[3]) * scale)
    out.append(",".join(fields))
  bad = tmp_path / "bad.csv"
  bad.write_text("\n".join(out) + "\n")
  with pytest.raises(HeuristicsError) as e:
    measurements.read_measurements(str(bad))
  message = str(e.value)
  assert needle in message and "microseconds or milliseconds" in message
  assert message.startswith(f"{bad}:") and "\n" not in message
  rc = cli.main(["heuristics", "calibrate", str(bad), f"--out={tmp_path / 'table.txt'}"])
  _, err = capsys.readouterr()
  assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err
  assert not (tmp_path / "table.txt").exists()
  measurements.read_measurements(str(good))  # seconds: accepted


def run_cli(argv, capsys):
  rc = cli.main(["heuristics"] + argv)
  out, err = capsys.readouterr()
  return rc, out, err


# ---------------------------------------------------------------------------
# Point-to-point CSVs (backend, link_class, bytes, seconds)


# Point-to-point CSVs: (latency us, GB/s)
P2P_TRUE = {
  ("nccl", "nvlink"): (4.0, 300.0),
  ("nccl", "network"): (15.0, 40.0),
  ("nvshmem", "nvlink"): (3.0, 400.0),
  ("nvshmem", "nvlink_domain"): (7.5, 200.0),
}


def write_measurements(path, params, noise=0.01, seed=0, repeats=3):
  rng = random.Random(seed)
  lines = ["backend,link_class,bytes,seconds"]
  for (backend, link_class), (latency_us, gbps) in params.items():
    for exponent in range(10, 31, 2):  # 1 KiB .. 1 GiB
      nbytes = 1 << exponent
      for _ in range(repeats):
        us = (latency_us + nbytes / (gbps * 1e3)) * (1 + rng.gauss(0, noise))
        lines.append(f"{backend},{link_class},{nbytes},{us * 1e-6!r}")
  path.write_text("\n".join(lines) + "\n")
  return path


def test_calibrate_recovers_known_parameters(tmp_path):
  text, fits = calibrate.calibrate(str(write_measurements(tmp_path / "m.csv", P2P_TRUE)))
  assert set(fits) == set(P2P_TRUE)
  (tmp_path / "t.txt").write_text(text)
  table = selection.load_cost_table(str(tmp_path / "t.txt"))
  for (backend, link_class), (latency, gbps) in P2P_TRUE.items():
    got_latency, got_gbps = table.link(backend, link_class)
    assert got_latency == pytest.approx(latency, rel=0.03), (backend, link_class)
    assert got_gbps == pytest.approx(gbps, rel=0.03), (backend, link_class)
  # Entries without data keep the defaults, to the bit.
  default = selection.load_cost_table()
  for key in [("nccl", "same_device"), ("nvshmem", "network")]:
    assert table.link(*key) == default.link(*key)
  assert table.margin == default.margin
  assert "# fit nccl network: 33 points at 11 sizes" in text


def test_calibrate_exact_data_is_exact(tmp_path):
  path = write_measurements(
    tmp_path / "m.csv", {("nccl", "network"): (12.5, 25.0)}, noise=0.0, repeats=1
  )
  _, fits = calibrate.calibrate(str(path))
  fit = fits[("nccl", "network")]
  assert fit.latency_us == pytest.approx(12.5, rel=1e-9)
  assert fit.bandwidth_gbps == pytest.approx(25.0, rel=1e-9)


def test_calibrate_cli_writes_table_nvshmem_opt_accepts(tmp_path, capsys):
  csv_path = write_measurements(tmp_path / "m.csv", P2P_TRUE)
  out = tmp_path / "table.txt"
  rc, _, err = run_cli(["calibrate", str(csv_path), f"--out={out}"], capsys)
  assert rc == 0, err
  assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
  proc = subprocess.run(
    [NVSHMEM_OPT, "--print-cost-table", f"--cost-table={out}"],
    capture_output=True,
    text=True,
    env=TOOL_ENV,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  table = selection.CostTable.parse(proc.stdout, "printed")
  latency, gbps = table.link("nccl", "network")
  assert latency == pytest.approx(15.0, rel=0.03) and gbps == pytest.approx(40, rel=0.03)


GOOD_ROWS = "nccl,nvlink,1024,6e-6\nnccl,nvlink,1048576,1e-5\n"


@pytest.mark.parametrize(
  "content, line, message",
  [
    ("", None, "empty"),
    ("backend,link_class,bytes\n" + GOOD_ROWS, 1, "missing column(s) seconds"),
    ("backend,bytes,seconds\n" + GOOD_ROWS, 1, "missing column(s) link_class"),
    ("backend,link_class,bytes,seconds\n", 1, "no measurements"),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,abc,1e-5\n",
      4,
      "bytes 'abc' is not a number",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,64,fast\n",
      4,
      "seconds 'fast' is not a number",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "gloo,nvlink,64,1e-5\n",
      4,
      "unknown backend 'gloo'",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,pcie,64,1e-5\n",
      4,
      "unknown link class 'pcie'",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,-64,1e-5\n",
      4,
      "bytes '-64' is negative",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,64,-1e-5\n",
      4,
      "seconds '-1e-5' is negative",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,64\n",
      4,
      "3 fields, header has 4",
    ),
    (
      "backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,64.5,1e-5\n",
      4,
      "not a whole number",
    ),
    ("backend,link_class,bytes,seconds\n" + GOOD_ROWS + "nccl,nvlink,64,nan\n", 4, "not finite"),
    (
      "backend,link_class,bytes,seconds\n"
      + GOOD_ROWS
      + "nvshmem,nvlink,64,1e-5\nnvshmem,nvlink,64,2e-5\n",
      4,
      "nvshmem nvlink has measurements at 1 distinct size",
    ),
    (
      "backend,link_class,bytes,seconds\nnccl,nvlink,1024,2e-5\nnccl,nvlink,4096,1e-5\n",
      2,
      "time does not grow with size",
    ),
  ],
)
def test_calibrate_refuses_malformed_csv_naming_the_line(tmp_path, capsys, content, line, message):
  path = tmp_path / "bad.csv"
  path.write_text(content)
  rc, out, err = run_cli(["calibrate", str(path)], capsys)
  assert rc == 2 and out == ""
  lines = err.strip().splitlines()
  assert len(lines) == 1, err  # one line, no traceback
  where = f"{path}:{line}:" if line else f"{path}:"
  assert where in lines[0] and message in lines[0], lines[0]


def test_calibrate_refuses_a_missing_file_in_one_line(tmp_path, capsys):
  rc, _, err = run_cli(["calibrate", str(tmp_path / "nope.csv")], capsys)
  assert rc == 2 and "nope.csv: cannot read: No such file" in err and len(err.splitlines()) == 1
