"""The report's charts: modeled time of a permute vs its size, per backend, as
self-contained log-log SVGs (no scripts, no external files).

One chart per kind of permute in the module: permutes with the same pairs and
number of buffers share a curve, and each is marked at its own size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from hlo_tools import selection
from hlo_tools.model.sources import Source
from hlo_tools.ops.diff import esc
from hlo_tools.ops.sizes import format_bytes

CHART_SIZES = [2**e for e in range(10, 31)]  # 1 KiB .. 1 GiB, widened to every mark
# Colours by the core's order, so that a backend or link class the core adds gets
# one: NCCL blue, NVSHMEM green, peer orange, symmetric cyan; edges by link class.
_BACKEND_PALETTE = ("#1f77b4", "#2ca02c", "#ff7f0e", "#17becf", "#d62728", "#bcbd22")
_EDGE_PALETTE = ("#7f7f7f", "#8c564b", "#e377c2", "#9467bd", "#d62728", "#bcbd22")
COLORS = {
  **{b: _BACKEND_PALETTE[i % len(_BACKEND_PALETTE)] for i, b in enumerate(selection.BACKENDS)},
  "chosen": "#000000",
  **{
    f"edge_{c}": _EDGE_PALETTE[i % len(_EDGE_PALETTE)] for i, c in enumerate(selection.LINK_CLASSES)
  },
}
NAMES = {n: r["label"] for n, r in selection.BACKEND_INFO.items()}
_CLASS_NAMES = {
  "network": "network",
  "nvlink": "NVLink",
  "nvlink_domain": "NVLink-domain",
  "same_device": "same-device",
}
MAX_CHARTS = 8  # kinds of permute drawn per configuration; the table lists them all

# A kind of permute: (its pairs, buffers, cross-partition).
Kind = tuple[tuple[tuple[int, ...], ...], int, bool]
# A scale: bytes or microseconds -> SVG coordinate.
Scale = Callable[[float], float]


def _label(key: str) -> str:
  if key == "chosen":
    return "chosen by the core (dotted)"
  if key.startswith("edge_"):
    return f"NCCL, one {_CLASS_NAMES.get(key[5:], key[5:])} edge alone"
  return f"{NAMES[key]} (whole permute)"


def chart_sizes(marks: Iterable[int | None]) -> list[int]:
  """Powers of two from 1 KiB to 1 GiB, widened so that every permute's size is inside."""
  sizes = [m for m in marks if m and m > 0]
  lo = min([CHART_SIZES[0]] + [1 << (m.bit_length() - 1) for m in sizes])
  hi = max([CHART_SIZES[-1]] + [1 << (m - 1).bit_length() for m in sizes])
  return [1 << e for e in range(lo.bit_length() - 1, hi.bit_length())]


def permute_kinds(perms: list[dict[str, Any]]) -> dict[Kind, list[dict[str, Any]]]:
  """The module's permutes grouped by (pairs, buffers, cross-partition), in order."""
  kinds: dict[Kind, list[dict[str, Any]]] = {}
  for e in perms:
    key: Kind = (
      tuple(tuple(p) for p in e["pairs"]),
      e.get("buffers", 1),
      e.get("channel_id") is not None,
    )
    kinds.setdefault(key, []).append(e)
  return kinds


def _kind_chart(
  topology: selection.Topology,
  table: selection.CostTable,
  source: Source,
  key: Kind,
  members: list[dict[str, Any]],
) -> dict[str, Any]:
  pairs, buffers, cross = key
  offered = table.backends.split(",")
  classes = sorted({c for e in members for c, n in e["edges_by_class"].items() if n})
  series: dict[str, list[float | None]] = {b: [] for b in offered}
  series["chosen"] = []
  # Per-edge lines only where edges differ: they show the slowest edge pricing a permute.
  edge_keys = [f"edge_{c}" for c in classes] if len(classes) > 1 else []
  series.update({k: [] for k in edge_keys})
  refused: dict[str, dict[str, Any]] = {}
  sizes = chart_sizes(e["bytes"] for e in members)
  for size in sizes:
    d = selection.decide(
      topology,
      table,
      size,
      list(pairs),
      cross,
      source.num_partitions,
      source.num_replicas,
      buffers=buffers,
    )
    for b in offered:
      series[b].append(d["backend_us"].get(b))
      if b in d["refused"] and b not in refused:
        refused[b] = {"from": size, "every_size": size == sizes[0], "reason": d["refused"][b]}
    series["chosen"].append(d["chosen_us"])
    for k in edge_keys:
      series[k].append(selection.edge_time_us(table, "nccl", k[5:], size, buffers))
  # An edge class that prices the whole permute draws the NCCL line again: said in
  # the NCCL line's legend instead of a line hidden under it.
  priced_by = [
    k[5:]
    for k in edge_keys
    if all(
      a == b or (a and b and abs(a - b) <= 1e-9 * b) for a, b in zip(series[k], series["nccl"])
    )
  ]
  for c in priced_by:
    del series[f"edge_{c}"]
  marks = sorted({(e["bytes"], format_bytes(e["bytes"])) for e in members})
  # Curves the table estimates (latency + size / bandwidth) where it has no measured
  # one: a backend priced on any of these edge classes, an edge class's own line.
  estimated = [
    b
    for b in offered
    if any(series[b]) and any(not table.has_measured_curve(b, c) for c in classes)
  ]
  estimated += [
    k for k in series if k.startswith("edge_") and not table.has_measured_curve("nccl", k[5:])
  ]
  return {
    "instructions": [e["instruction"] for e in members],
    "pairs": [list(p) for p in pairs],
    "buffers": buffers,
    "sizes": sizes,
    "edge_classes": classes,
    "nccl_priced_by": priced_by,
    "series_us": series,
    "refused": refused,
    "marks": marks,
    "estimated": estimated,
  }


def chart_data(
  topology: selection.Topology,
  table: selection.CostTable,
  explained: dict[str, Any],
  source: Source,
) -> dict[str, Any]:
  """{"sizes", "charts": one per kind of permute (at most MAX_CHARTS), "kinds": how
  many kinds the module has}; no charts for a module without collective-permutes."""
  kinds = permute_kinds(explained["collectives"])
  charts = [
    _kind_chart(topology, table, source, key, members)
    for key, members in list(kinds.items())[:MAX_CHARTS]
  ]
  return {"charts": charts, "kinds": len(kinds)}


def _svg_axes(
  out: list[str],
  box: tuple[int, int, int, int],
  lo: float,
  hi: float,
  x: Scale,
  y: Scale,
  sizes: list[int],
) -> None:
  left, top, pw, ph = box
  decade = lo
  while decade <= hi * 1.0001:
    yy = y(decade)
    out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#eee"/>')
    out.append(
      f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{decade:g}</text>'
    )
    decade *= 10
  for size in sizes[::2]:
    xx = x(size)
    out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" stroke="#eee"/>')
    out.append(
      f'<text x="{xx:.1f}" y="{top + ph + 16}" font-size="11" '
      f'text-anchor="middle">{esc(format_bytes(size).replace(".0 ", " "))}</text>'
    )


def _style(key: str, estimated: bool = False) -> str:
  if key == "chosen":
    return 'stroke="#000000" stroke-width="2.5" stroke-dasharray="1 5" stroke-linecap="round"'
  dash = ' stroke-dasharray="6 4"' if key.startswith("edge_") else ""
  # An estimated curve is drawn faint: it is no measurement.
  faint = ' stroke-opacity="0.45"' if estimated else ""
  return f'stroke="{COLORS[key]}" stroke-width="2"{dash}{faint}'


def _polylines(points: list[float | None], x: Scale, y: Scale, sizes: list[int]) -> list[list[str]]:
  segs: list[list[str]] = []
  cur: list[str] = []
  for size, v in zip(sizes, points):
    if v:
      cur.append(f"{x(size):.1f},{y(v):.1f}")
    elif cur:
      segs.append(cur)
      cur = []
  return segs + ([cur] if cur else [])


def _wrap(text: str, width: int = 120) -> list[str]:
  words, cur = text.split(), ""
  lines: list[str] = []
  for w in words:
    if cur and len(cur) + 1 + len(w) > width:
      lines.append(cur)
      cur = w
    else:
      cur = f"{cur} {w}" if cur else w
  return lines + ([cur] if cur else [])


def legend_lines(chart: dict[str, Any]) -> list[tuple[str | None, str]]:
  """[(series key or None, text)]: one per drawn series, then each refusal's reason."""
  items: list[tuple[str | None, str]] = [
    (k, _label(k)) for k, pts in chart["series_us"].items() if any(pts)
  ]
  if chart.get("nccl_priced_by"):
    names = " and ".join(_CLASS_NAMES.get(c, c) for c in chart["nccl_priced_by"])
    items = [
      (k, f"NCCL (whole permute: its {names} edges, the slowest)" if k == "nccl" else text)
      for k, text in items
    ]
  estimated = set(chart.get("estimated") or ())
  items = [
    (
      k,
      f"{text}: ESTIMATED, latency + size / bandwidth (no measured curve)"
      if k in estimated
      else text,
    )
    for k, text in items
  ]
  for b, r in chart["refused"].items():
    where = "at every size" if r["every_size"] else f"from {format_bytes(r['from'])}"
    reason = r["reason"].split(" refused: ", 1)[-1]
    items += [(None, line) for line in _wrap(f"{NAMES.get(b, b)} refused {where}: {reason}")]
  return items


def svg_chart(chart: dict[str, Any], title: tuple[str, str]) -> str:
  """Log-log SVG line chart with its legend below the plot (never clipped); title is
  (title, subtitle), as chart_title gives it."""
  heading, subtitle = title
  series = chart["series_us"]
  legend = legend_lines(chart)
  w, left, right, top, plot_h = 900, 70, 30, 44, 380
  pw = w - left - right
  legend_top = top + plot_h + 46
  h = legend_top + 16 * len(legend) + 10
  values = [v for s in series.values() for v in s if v]
  lo = 10 ** math.floor(math.log10(min(values)))
  hi = 10 ** math.ceil(math.log10(max(values)))
  sizes = chart["sizes"]
  x0, x1 = math.log2(sizes[0]), math.log2(sizes[-1])
  x = lambda size: left + (math.log2(size) - x0) / (x1 - x0) * pw
  y = lambda v: (
    top + (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))) * plot_h
  )
  out = [
    f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
    f'viewBox="0 0 {w} {h}" role="img" aria-label="{esc(heading)}: {esc(subtitle)}">',
    f'<text x="{left}" y="18" font-size="14" font-weight="600">{esc(heading)}</text>',
    f'<text class="permutes" x="{left}" y="34" font-size="11" fill="#555">{esc(subtitle)}</text>',
    f'<rect x="{left}" y="{top}" width="{pw}" height="{plot_h}" fill="none" stroke="#999"/>',
  ]
  _svg_axes(out, (left, top, pw, plot_h), lo, hi, x, y, sizes)
  out.append(
    f'<text x="{left + pw / 2}" y="{top + plot_h + 34}" font-size="12" '
    'text-anchor="middle">bytes per device</text>'
  )
  out.append(
    f'<text x="16" y="{top + plot_h / 2}" font-size="12" text-anchor="middle" '
    f'transform="rotate(-90 16 {top + plot_h / 2})">modeled time (us)</text>'
  )
  for i, (size, label) in enumerate(chart["marks"]):
    if sizes[0] <= size <= sizes[-1]:
      xx = x(size)
      out.append(
        f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + plot_h}" '
        'stroke="#d62728" stroke-dasharray="4 3"/>'
      )
      out.append(
        f'<text x="{xx + 3:.1f}" y="{top + 12 + 13 * (i % 3)}" font-size="11" '
        f'fill="#d62728">{esc(label)}</text>'
      )
  # The chosen line last: on top of the backend it follows, never hidden under it.
  estimated = set(chart.get("estimated") or ())
  for key in sorted(series, key=lambda k: k == "chosen"):
    for seg in _polylines(series[key], x, y, sizes):
      out.append(
        f'<polyline class="series-{key}" fill="none" '
        f'{_style(key, key in estimated)} points="{" ".join(seg)}"/>'
      )
  for i, (key, text) in enumerate(legend):
    ly = legend_top + 16 * i
    if key is not None:
      out.append(
        f'<line x1="{left}" y1="{ly}" x2="{left + 28}" y2="{ly}" {_style(key, key in estimated)}/>'
      )
    fill = "" if key else ' fill="#555"'
    out.append(
      f'<text class="legend" x="{left + 36}" y="{ly + 4}" font-size="11"{fill}>{esc(text)}</text>'
    )
  out.append("</svg>")
  return "\n".join(out)


def chart_title(chart: dict[str, Any], topology: str) -> tuple[str, str]:
  """(title, subtitle): what is drawn, then which permutes (cut to fit the width)."""
  names = chart["instructions"]
  title = (
    f"{len(chart['pairs'])}-edge permute of {chart['buffers']} buffer(s) on "
    f"{topology}: modeled time vs size"
  )
  shown: list[str] = []
  listed = ""
  for i, n in enumerate(names):
    more = len(names) - i - 1
    candidate = ", ".join(shown + [f"%{n}"]) + (f" and {more} more" if more else "")
    if len(candidate) > 120 and shown:
      listed = ", ".join(shown) + f" and {len(names) - len(shown)} more"
      break
    shown.append(f"%{n}")
    listed = candidate
  return title, listed
