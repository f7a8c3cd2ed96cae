"""The report's chart: modeled time of a permute vs its size, per backend, as a
self-contained log-log SVG (no scripts, no external files)."""

import math

from hlo_tools import selection
from hlo_tools.commands import common
from hlo_tools.commands.diff import esc

CHART_SIZES = [2 ** e for e in range(10, 31)]  # 1 KiB .. 1 GiB
COLORS = {"nccl": "#1f77b4", "nvshmem": "#2ca02c", "peer": "#ff7f0e",
          "symmetric": "#17becf", "chosen": "#000000", "nccl_net": "#9467bd",
          "nvshmem_nvl": "#8c564b"}
_LABELS = {"nccl": "NCCL (whole permute)", "nvshmem": "NVSHMEM (whole permute, if eligible)",
           "peer": "peer memory (whole permute, if eligible)",
           "symmetric": "symmetric memory (whole permute, if eligible)",
           "chosen": "chosen by the core", "nccl_net": "one NCCL network edge",
           "nvshmem_nvl": "one NVSHMEM NVLink edge"}
# The series of the backends the table's set offers; the others stay empty.
_OFFERED = ("nvshmem", "peer", "symmetric")


def chart_data(topology, table, explained, source):
  """Modeled microseconds per backend at each chart size, for the first permute's pairs."""
  perms = explained["collectives"]
  n = topology.num_devices
  pairs = [tuple(p) for p in perms[0]["pairs"]] if perms else [(i, (i + 1) % n)
                                                               for i in range(n)]
  buffers = perms[0].get("buffers", 1) if perms else 1
  offered = table.backends.split(",")
  series = {k: [] for k in COLORS if k not in _OFFERED or k in offered}
  if "nvshmem" not in offered:
    del series["nvshmem_nvl"]
  for size in CHART_SIZES:
    d = selection.decide(topology, table, size, pairs, True, source.num_partitions, 1,
                         buffers=buffers)
    series["nccl"].append(d["backend_us"]["nccl"])
    for backend in _OFFERED:
      if backend in series:
        series[backend].append(d["backend_us"].get(backend))
    series["chosen"].append(d["chosen_us"])
    series["nccl_net"].append(selection.edge_time_us(table, "nccl", "network", size, buffers))
    if "nvshmem_nvl" in series:
      series["nvshmem_nvl"].append(selection.edge_time_us(table, "nvshmem", "nvlink", size,
                                                           buffers))
  marks = sorted({(e["bytes"], common.human_bytes(e["bytes"])) for e in perms})
  return {"sizes": CHART_SIZES, "series_us": series, "pairs": pairs, "buffers": buffers,
          "marks": marks}


def _svg_axes(out, box, lo, hi, x, y):
  left, top, pw, ph = box
  decade = lo
  while decade <= hi * 1.0001:
    yy = y(decade)
    out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" '
               'stroke="#eee"/>')
    out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" '
               f'text-anchor="end">{decade:g}</text>')
    decade *= 10
  for size in CHART_SIZES[::2]:
    xx = x(size)
    out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" stroke="#eee"/>')
    out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" font-size="11" '
               f'text-anchor="middle">{esc(common.human_bytes(size).replace(".0 ", " "))}</text>')


def _svg_series(out, series, box, x, y):
  left, top, pw, _ = box
  legend_y = top + 10
  for key, points in series.items():
    if not any(points):
      continue
    dash = ' stroke-dasharray="6 4"' if key in ("nccl_net", "nvshmem_nvl") else ""
    width = 3.5 if key == "chosen" else 2
    opacity = ' stroke-opacity="0.35"' if key == "chosen" else ""
    segs, cur = [], []
    for size, v in zip(CHART_SIZES, points):
      if v:
        cur.append(f"{x(size):.1f},{y(v):.1f}")
      elif cur:
        segs.append(cur)
        cur = []
    segs += [cur] if cur else []
    for seg in segs:
      out.append(f'<polyline class="series-{key}" fill="none" stroke="{COLORS[key]}" '
                 f'stroke-width="{width}"{dash}{opacity} points="{" ".join(seg)}"/>')
    lx = left + pw + 12
    out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 24}" y2="{legend_y}" '
               f'stroke="{COLORS[key]}" stroke-width="{width}"{dash}{opacity}/>')
    out.append(f'<text x="{lx + 30}" y="{legend_y + 4}" font-size="11">'
               f'{esc(_LABELS[key])}</text>')
    legend_y += 18
  if "nvshmem" in series and not any(series["nvshmem"]):
    out.append(f'<text x="{left + pw + 12}" y="{legend_y + 4}" font-size="11" fill="#777">'
               'NVSHMEM for the whole permute: not</text>')
    out.append(f'<text x="{left + pw + 12}" y="{legend_y + 18}" font-size="11" fill="#777">'
               'eligible (refused: see the reason)</text>')


def svg_chart(series, marks, title):
  """Log-log SVG line chart, self-contained (no scripts, no external files)."""
  w, h, left, right, top, bottom = 900, 460, 70, 250, 30, 50
  pw, ph = w - left - right, h - top - bottom
  values = [v for s in series.values() for v in s if v]
  lo = 10 ** math.floor(math.log10(min(values)))
  hi = 10 ** math.ceil(math.log10(max(values)))
  x0, x1 = math.log2(CHART_SIZES[0]), math.log2(CHART_SIZES[-1])
  x = lambda size: left + (math.log2(size) - x0) / (x1 - x0) * pw
  y = lambda v: top + (1 - (math.log10(v) - math.log10(lo)) /
                       (math.log10(hi) - math.log10(lo))) * ph
  out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         f'viewBox="0 0 {w} {h}" role="img" aria-label="{esc(title)}">',
         f'<text x="{left}" y="18" font-size="14" font-weight="600">{esc(title)}</text>',
         f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
  _svg_axes(out, (left, top, pw, ph), lo, hi, x, y)
  out.append(f'<text x="{left + pw / 2}" y="{h - 8}" font-size="12" text-anchor="middle">'
             'bytes per device</text>')
  out.append(f'<text x="16" y="{top + ph / 2}" font-size="12" text-anchor="middle" '
             f'transform="rotate(-90 16 {top + ph / 2})">modeled time (us)</text>')
  for size, label in marks:
    if CHART_SIZES[0] <= size <= CHART_SIZES[-1]:
      xx = x(size)
      out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" '
                 'stroke="#d62728" stroke-dasharray="4 3"/>')
      out.append(f'<text x="{xx + 3:.1f}" y="{top + 12}" font-size="11" '
                 f'fill="#d62728">{esc(label)}</text>')
  _svg_series(out, series, (left, top, pw, ph), x, y)
  out.append("</svg>")
  return "\n".join(out)
