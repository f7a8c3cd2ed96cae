"""hlo_tools.ops.heuristics.plot: the sweep's PNG per topology and the calibration's
model-against-measurement PNG."""

import sys

import pytest

from hlo_tools import cli, selection
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import plot
from hlo_tools.ops.heuristics.calibrate import Calibration
from hlo_tools.ops.heuristics.evaluate import Check
from hlo_tools.ops.heuristics.fitting import Fit
from hlo_tools.ops.heuristics.measurements import Point

PNG = b"\x89PNG\r\n\x1a\n"


def test_file_name_is_the_spec_made_safe():
  assert plot.file_name("1x2x4") == "sweep_1x2x4.png"
  assert plot.file_name("2x2x2:nvl4") == "sweep_2x2x2_nvl4.png"
  assert plot.file_name("1x1x2:map=1,0") == "sweep_1x1x2_map_1_0.png"


def _row(shape, size, chosen, oracle):
  nccl, nvshmem = 10.0 + size / 1e3, 12.0 + size / 2e3
  return {
    "shape": shape,
    "buffer_bytes": size,
    "num_edges": 8,
    "edges_network": 2,
    "nccl_us": nccl,
    "nvshmem_us": nvshmem,
    "upstream_us": nvshmem,
    "chosen_plan": chosen,
    "chosen_us": nccl if chosen == "nccl" else nvshmem,
    "oracle_plan": oracle,
    "oracle_us": min(nccl, nvshmem),
  }


def test_sweep_plot_is_one_png_per_topology(tmp_path):
  rows = [_row("ring", 1024, "nccl", "nccl"), _row("ring", 1 << 20, "nccl", "nvshmem")]
  rows += [_row("kv", 1024, "nccl", "nccl"), _row("kv", 1 << 20, "nvshmem", "nvshmem")]
  path = plot.plot_topology(str(tmp_path), "1x2x4:nvl4", rows)
  assert path == str(tmp_path / "sweep_1x2x4_nvl4.png")
  assert (tmp_path / "sweep_1x2x4_nvl4.png").read_bytes()[:8] == PNG


def test_without_matplotlib_the_message_says_how_to_go_on(monkeypatch):
  monkeypatch.setitem(sys.modules, "matplotlib", None)
  with pytest.raises(HeuristicsError, match=r"plots need matplotlib .*or pass --no-plots"):
    plot.plot_topology("/nonexistent", "1x2x4", [_row("ring", 1024, "nccl", "nccl")])


def test_calibration_plot_is_written(tmp_path):
  key = ("nccl", "nvlink")
  table = selection.CostTable.parse(
    "links { backend: NCCL link_class: NVLINK latency_us: 10 bandwidth_gbps: 1 per_buffer_us: 0 }",
    "test",
  )
  fit = Fit(10.0, 1.0, None, [Point(1000, 11.0, 2, 1), Point(4000, 14.0, 3, 1)])
  result = Calibration("", {key: fit}, table, {}, {})
  checks = [
    Check("nccl", "nvlink", 1, 1000, False, 11.0, 11.0, None, None),
    Check("nccl", "nvlink", 1, 2000, True, 13.0, 12.0, None, None),
    Check("nccl", "nvlink", 1, 4000, False, 14.0, 14.0, None, None),
  ]
  path = tmp_path / "fit.png"
  plot.plot_calibration(str(path), result, checks, "m.csv")
  assert path.read_bytes()[:8] == PNG


@pytest.mark.long
def test_sweep_plots_a_topology_where_a_shape_has_no_edges(tmp_path):
  # A non-cyclic shift on one device moves nothing; the plot must still be drawn.
  rc = cli.main(["heuristics", "sweep", "--topology=1x1x1", f"--out={tmp_path}"])
  assert rc == 0
  assert list(tmp_path.glob("*1x1x1*.png"))
