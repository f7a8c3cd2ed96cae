"""hlo_tools.ops.report.chart: modeled time of each kind of permute against its size,
per backend, as self-contained log-log SVGs."""

import json
import re

import pytest

from hlo_tools import selection
from hlo_tools.model import sources
from hlo_tools.ops import report
from hlo_tools.ops.report import chart as report_chart
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.sizes import format_bytes

from conftest import FIXTURES


def _svgs(page):
  return re.findall(r"<svg.*?</svg>", page, flags=re.S)


def test_sizes_are_powers_of_two_widened_to_every_mark():
  assert report_chart.chart_sizes([]) == [1 << e for e in range(10, 31)]  # 1 KiB .. 1 GiB
  # 512 B and 3 GiB: from 512 B up to 4 GiB; None and 0 mark nothing.
  assert report_chart.chart_sizes([512, 3 << 30, None, 0]) == [1 << e for e in range(9, 33)]


def _entry(name, pairs, buffers=1, channel_id=1, nbytes=1024):
  return {"instruction": name, "pairs": pairs, "buffers": buffers, "channel_id": channel_id,
          "bytes": nbytes}  # fmt: skip


def test_permutes_of_one_kind_share_a_curve():
  ring = [[0, 1], [1, 0]]
  a, b = _entry("a", ring, nbytes=1024), _entry("b", ring, nbytes=4096)
  kv = _entry("kv", ring, buffers=2)
  local = _entry("local", ring, channel_id=None)  # not cross-partition
  assert report_chart.permute_kinds([a, kv, b, local]) == {
    (((0, 1), (1, 0)), 1, True): [a, b],
    (((0, 1), (1, 0)), 2, True): [kv],
    (((0, 1), (1, 0)), 1, False): [local],
  }


def test_a_shift_on_two_gpus_is_priced_for_nccl_only():
  # 0 -> 1: device 0 has no source, so NVSHMEM is refused at every size.
  src = sources.read_source(str(FIXTURES / "shift_1x1x2.before_async.hlo"))
  entry = dict(_entry("ppermute.3.0", [[0, 1]], nbytes=32768), edges_by_class={"nvlink": 1})
  topology = selection.parse_topology("1x1x2:map=0,1")
  data = report_chart.chart_data(
    topology, selection.load_cost_table(), {"collectives": [entry]}, src
  )
  assert data["kinds"] == 1
  [c] = data["charts"]
  assert c["sizes"] == report_chart.CHART_SIZES and c["marks"] == [(32768, "32.0 KiB")]
  assert all(us > 0 for us in c["series_us"]["nccl"])
  assert c["series_us"]["chosen"] == c["series_us"]["nccl"]
  assert set(c["series_us"]["nvshmem"]) == {None}
  assert (
    c["refused"]["nvshmem"]["every_size"] and "has no source" in c["refused"]["nvshmem"]["reason"]
  )
  assert c["edge_classes"] == ["nvlink"] and c["nccl_priced_by"] == []  # one class: no edge line


CHART = {
  "instructions": ["a", "b"],
  "pairs": [[0, 1], [1, 0]],
  "buffers": 2,
  "sizes": [1024, 2048, 4096],
  "series_us": {
    "nccl": [10.0, 20.0, 40.0],
    "nvshmem": [None, None, None],
    "chosen": [10.0, 20.0, 40.0],
    "edge_nvlink": [5.0, 6.0, 8.0],
  },
  "nccl_priced_by": ["network"],
  "estimated": ["edge_nvlink"],
  "refused": {
    "nvshmem": {
      "from": 1024,
      "every_size": True,
      "reason": "nvshmem refused: edges leave their host",
    }
  },
  "marks": [(2048, "2.0 KiB")],
}


def test_legend_names_each_drawn_line_and_each_refusal():
  assert report_chart.legend_lines(CHART) == [
    ("nccl", "NCCL (whole permute: its network edges, the slowest)"),
    ("chosen", "chosen by the core (dotted)"),
    (
      "edge_nvlink",
      "NCCL, one NVLink edge alone: ESTIMATED, latency + size / bandwidth (no measured curve)",
    ),
    (None, "NVSHMEM refused at every size: edges leave their host"),
  ]
  assert report_chart._wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_svg_draws_the_chosen_line_last_and_marks_each_size():
  svg = report_chart.svg_chart(CHART, report_chart.chart_title(CHART, "1x2x4"))
  assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.endswith("</svg>")
  assert re.findall(r'<polyline class="series-(\w+)"', svg) == ["nccl", "edge_nvlink", "chosen"]
  assert 'stroke-dasharray="4 3"/>' in svg and ">2.0 KiB</text>" in svg
  assert "2-edge permute of 2 buffer(s) on 1x2x4: modeled time vs size" in svg
  assert "<script" not in svg


def test_title_lists_the_permutes_cut_to_fit():
  title, subtitle = report_chart.chart_title(dict(CHART, instructions=["a", "b", "c"]), "1x1x8")
  assert (title, subtitle) == (
    "2-edge permute of 2 buffer(s) on 1x1x8: modeled time vs size",
    "%a, %b, %c",
  )
  names = [f"collective-permute-start.{i:02d}" for i in range(10)]
  _, cut = report_chart.chart_title(dict(CHART, instructions=names), "1x1x8")
  # A fourth name would take the line past 120 characters: three shown, the rest counted.
  assert cut == ", ".join(f"%{n}" for n in names[:3]) + " and 7 more"


def test_report_charts_every_kind_of_permute(tmp_path):
  # A 2-buffer and a 4-buffer permute: each drawn on its own curve and marked at its
  # own size; the takeaways name both, not only the first.
  data = report.build(
    [
      Case(
        id="grad",
        title="grad on 1x1x8",
        topology="1x1x8",
        path=str(FIXTURES / "ring_product_grad_1x2x4.passes"),
      )
    ],
    tmp_path / "r",
    progress=False,
  )
  [case] = data["cases"]
  chart = json.loads((tmp_path / "r" / "grad" / "json" / "chart.json").read_text())
  perms = case["collective_permutes"]
  assert len(perms) == 2 and chart["kinds"] == 2
  by_name = {p["instruction"]: p for p in perms}
  for c in chart["charts"]:
    [name] = c["instructions"]
    perm = by_name[name]
    assert c["buffers"] == perm["buffers"]
    # The permute's own modeled time lies on its chart's curve, at its size.
    i = c["sizes"].index(perm["bytes"])
    assert c["series_us"]["nccl"][i] == pytest.approx(perm["modeled_us"]["nccl"])
    assert [perm["bytes"], format_bytes(perm["bytes"])] in c["marks"]
  assert sorted(c["buffers"] for c in chart["charts"]) == [2, 4]
  page = (tmp_path / "r" / "index.html").read_text()
  assert len(_svgs(page)) == 2
  takeaways = page[page.index('id="takeaways"') : page.index('id="comparison"')]
  assert all(f"%{p['instruction']}" in takeaways for p in perms)


def test_chart_on_one_host_has_no_network_line_and_shows_the_choice(tmp_path):
  path = str(FIXTURES / "ring_1x1x8.before_async.hlo")
  data = report.build(
    [Case(id=t, title=t, topology=t, path=path) for t in ("1x1x8", "1x2x4")],
    tmp_path / "r",
    progress=False,
  )
  assert len(data["cases"]) == 2
  page = (tmp_path / "r" / "index.html").read_text()
  one_host, two_hosts = _svgs(page)
  assert "series-edge_network" not in one_host and "network edge" not in one_host
  # Two hosts: the network edges price the whole NCCL permute, which the NCCL line's
  # legend says; the NVLink edge alone is a line of its own.
  assert "series-edge_nvlink" in two_hosts and "its network edges, the slowest" in two_hosts
  # No line hidden under another: drawn series differ (the chosen one lies on its
  # backend's by design).
  for svg in (one_host, two_hosts):
    drawn = re.findall(r'<polyline class="series-(\w+)"[^>]* points="([^"]*)"', svg)
    points = [p for k, p in drawn if k != "chosen"]
    assert len(points) == len(set(points)), [k for k, _ in drawn]
  for svg in (one_host, two_hosts):
    # The chosen line is drawn last (on top) and named in the legend.
    lines = re.findall(r'<polyline class="series-(\w+)"', svg)
    assert lines[-1] == "chosen" and "chosen by the core" in svg
    # The legend is inside the picture: every legend text above the bottom edge.
    height = float(re.search(r'<svg[^>]* height="([\d.]+)"', svg).group(1))
    assert all(
      float(y) < height for y in re.findall(r'class="legend" x="[\d.]+" y="([\d.]+)"', svg)
    )


def test_chart_legend_gives_the_real_refusal(tmp_path):
  # A shift on one host: NVSHMEM is refused because device 0 has no source, not
  # because of the network (every edge is NVLink here).
  data = report.build(
    [
      Case(
        id="shift",
        title="shift",
        topology="1x1x8",
        path=str(FIXTURES / "shift_1x2x4.before_async.hlo"),
      )
    ],
    tmp_path / "r",
    progress=False,
  )
  [perm] = data["cases"][0]["collective_permutes"]
  assert perm["edges_by_class"]["network"] == 0
  [svg] = _svgs((tmp_path / "r" / "index.html").read_text())
  legend = " ".join(re.findall(r'class="legend"[^>]*>([^<]*)<', svg))
  assert "NVSHMEM refused at every size" in legend and "has no source" in legend
  assert "network" not in legend and "series-nvshmem" not in svg
