"""`hlo-tools heuristics calibrate` on the XLA-level permute CSV: per-buffer cost,
provenance, error by size; synthetic data from known parameters and the committed
2x H200 measurements."""

import pathlib
import random

import pytest

from hlo_tools import calibrate
from hlo_tools import selection
from hlo_tools.heuristics_io import HeuristicsError

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu" / "results"
HEADER = ("backend,link_class,bytes,seconds,operands,step_s,baseline_s,devices,"
          "jax_version,loop_trips")
# (latency us, per extra buffer us, GB/s)
TRUE = {("nccl", "nvlink"): (13.0, 1.5, 300.0),
        ("nvshmem", "nvlink"): (20.0, 9.0, 380.0)}


def write_xla_csv(path, params, noise=0.0, seed=0):
  """Rows as the XLA-level bench writes them; seconds from the known model."""
  rng = random.Random(seed)
  lines = [HEADER]
  for (backend, link_class), (latency, per_buffer, gbps) in params.items():
    for operands in (1, 2, 4):
      for exponent in range(10, 29, 2):  # 1 KiB .. 256 MiB
        nbytes = 1 << exponent
        us = latency + (operands - 1) * per_buffer + nbytes / (gbps * 1e3)
        us *= 1 + rng.gauss(0, noise)
        baseline = 12e-6
        lines.append(f"{backend},{link_class},{nbytes},{us * 1e-6!r},{operands},"
                     f"{us * 1e-6 + baseline!r},{baseline!r},2,0.9.1,50")
  path.write_text("\n".join(lines) + "\n")
  return path


def test_recovers_latency_per_buffer_and_bandwidth(tmp_path):
  path = write_xla_csv(tmp_path / "bench.csv", TRUE, noise=0.01)
  text, fits = calibrate.calibrate(str(path), machine="2x H200 NVLink",
                                   date="2026-11-30")
  table = selection.CostTable.parse(text, "fitted")
  for key, (latency, per_buffer, gbps) in TRUE.items():
    fit = fits[key]
    assert fit.operand_counts == [1, 2, 4]
    assert fit.latency_us == pytest.approx(latency, rel=0.05), key
    assert fit.per_buffer_us == pytest.approx(per_buffer, abs=0.5), key
    assert fit.bandwidth_gbps == pytest.approx(gbps, rel=0.03), key
    assert table.link(*key) == (pytest.approx(fit.latency_us, rel=1e-5),
                                pytest.approx(fit.bandwidth_gbps, rel=1e-5))
    assert table.per_buffer_us(*key) == pytest.approx(fit.per_buffer_us, rel=1e-5,
                                                      abs=1e-6)
    assert max(fit.max_rel_by_size.values()) < calibrate.GOAL_REL
    # The core predicts with the written table what the fit predicts.
    assert table.sm_interference(key[0]) == 0
    for nbytes, operands in [(1024, 1), (1 << 20, 2), (256 << 20, 4)]:
      assert selection.edge_time_us(table, key[0], key[1], nbytes, operands) == (
          pytest.approx(fit.model_us(nbytes, operands), rel=1e-5))
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
  t = selection.parse_topology("1x1x2")
  ring = [(0, 1), (1, 0)]
  # Large single buffers: NVSHMEM's bandwidth wins. Small, four buffers: its
  # per-buffer barrier loses.
  assert selection.decide(t, table, 256 << 20, ring)["plan"] == "nvshmem"
  small = selection.decide(t, table, 64 << 10, ring, buffers=4)
  assert small["plan"] == "nccl"
  assert small["backend_us"]["nvshmem"] == pytest.approx(20 + 27 + 65536 / 380e3, rel=1e-6)


def test_older_point_to_point_csv_keeps_base_per_buffer(tmp_path):
  path = tmp_path / "p2p.csv"
  path.write_text("backend,link_class,bytes,seconds\n"
                  "nvshmem,nvlink,1000,6e-6\nnvshmem,nvlink,1000000,8e-6\n")
  text, fits = calibrate.calibrate(str(path))
  assert fits[("nvshmem", "nvlink")].per_buffer_us is None
  default = selection.load_cost_table()
  table = selection.CostTable.parse(text, "fitted")
  assert table.per_buffer_us("nvshmem", "nvlink") == default.per_buffer_us(
      "nvshmem", "nvlink")
  assert "per_buffer from the base table" in text
  # One backend measured: the base table's backend set stays.
  assert table.backends == default.backends


def test_peer_and_symmetric_measurements_set_the_backend_set(tmp_path):
  params = {("nccl", "nvlink"): (15.0, 6.0, 280.0), ("peer", "nvlink"): (15.0, 7.0, 280.0),
            ("symmetric", "nvlink"): (13.0, 8.0, 278.0)}
  text, _ = calibrate.calibrate(str(write_xla_csv(tmp_path / "b.csv", params)))
  table = selection.CostTable.parse(text, "fitted")
  assert table.backends == "nccl,peer,symmetric"
  # Whether the runtime supports signals is not something a CSV says.
  assert table.symmetric_signals is False


@pytest.mark.parametrize("operands, message", [("0", "not a whole number >= 1"),
                                               ("1.5", "not a whole number >= 1"),
                                               ("x", "operands 'x' is not a number")])
def test_bad_operands_name_the_line(tmp_path, operands, message):
  path = tmp_path / "bad.csv"
  path.write_text("backend,link_class,bytes,seconds,operands\n"
                  "nccl,nvlink,1024,1e-5,1\n"
                  f"nccl,nvlink,2048,1e-5,{operands}\n")
  with pytest.raises(HeuristicsError) as e:
    calibrate.calibrate(str(path))
  assert f"{path}:3: " in str(e.value) and message in str(e.value)


def test_cli_prints_error_by_size_and_plots(tmp_path, capsys):
  path = write_xla_csv(tmp_path / "bench.csv", TRUE, noise=0.01)
  out, png = tmp_path / "table.txt", tmp_path / "fit.png"
  rc = calibrate.main(["calibrate", str(path), f"--out={out}", f"--plot={png}",
                       "--machine=test box"])
  assert rc == 0
  err = capsys.readouterr().err
  assert "nvshmem nvlink: latency" in err and "per buffer" in err
  assert "max relative error by size: 1KiB:" in err
  assert "goal <= 10% at every size: met" in err
  assert png.stat().st_size > 10000 and png.read_bytes()[:4] == b"\x89PNG"
  assert selection.load_cost_table(out).per_buffer_us("nvshmem", "nvlink") > 0


@pytest.mark.parametrize("name, backends", [
    ("h200x2_xla_permute_jax091.csv", "nccl,nvshmem"),
    ("h200x2_xla_permute_jax0112.csv", "nccl,peer,symmetric")])
def test_committed_h200_csvs_read_as_is(name, backends):
  path = RESULTS / name
  if not path.exists():
    pytest.skip("no committed measurements")
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
