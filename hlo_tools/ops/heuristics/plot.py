"""PNG plots: a heuristics sweep's modeled time vs size, a calibration's model vs measurement.

A sweep gets one file per topology. Separate from the sweep and the calibration so
that matplotlib is imported only when plotting.
"""

import io
import os
import re
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools import atomic_output, selection
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics.evaluate import GOAL_REL, Check, relative, write_file

if TYPE_CHECKING:  # matplotlib only when plotting; the run's type only for the checker
  from matplotlib.axes import Axes

  from hlo_tools.ops.heuristics.calibrate import Calibration

_STYLE = {"nccl": ("tab:blue", "NCCL-only"), "nvshmem": ("tab:green", "NVSHMEM-only")}
_MARKERS = {"nccl": "o", "nvshmem": "^"}


def _pyplot() -> ModuleType:
  try:
    import matplotlib
  except ImportError:
    raise HeuristicsError(
      "plots need matplotlib (pip install matplotlib==3.11.2), or pass --no-plots"
    ) from None
  matplotlib.use("Agg")  # no display; also keeps the figure off any GUI loop
  import matplotlib.pyplot as plt

  return plt


def file_name(spec: str) -> str:
  return "sweep_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", spec) + ".png"


def plot_topology(out_dir: str, spec: str, rows: Sequence[dict[str, Any]]) -> str:
  """One figure per topology, one column per shape; returns the PNG's path.

  Top row: modeled time, log-log. Bottom row: the same relative to NCCL-only,
  where the few-percent gaps the log-log row hides become visible.
  """
  plt = _pyplot()
  shapes = list(dict.fromkeys(r["shape"] for r in rows))
  fig, axes = plt.subplots(
    2, len(shapes), figsize=(5.5 * len(shapes), 8), squeeze=False, sharex="col"
  )
  for ax, rel, shape in zip(axes[0], axes[1], shapes):
    _panel(ax, rel, shape, [r for r in rows if r["shape"] == shape])
  fig.suptitle(f"topology {spec}: modeled collective-permute time")
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=90)
  plt.close(fig)
  path = os.path.join(out_dir, file_name(spec))
  atomic_output.write_atomic(path, buffer.getvalue())
  return path


def _panel(ax: "Axes", rel: "Axes", shape: str, part: Sequence[dict[str, Any]]) -> None:
  """Draws one shape's curves: absolute on `ax`, relative to NCCL on `rel`."""
  x = [r["buffer_bytes"] for r in part]
  nccl = [r["nccl_us"] for r in part]
  if not part[0]["num_edges"] or min(nccl) <= 0:
    # E.g. a non-cyclic shift on one device: nothing moves, nothing to plot.
    for axis in (ax, rel):
      axis.text(
        0.5,
        0.5,
        f"{shape}: no edges on this topology",
        ha="center",
        va="center",
        transform=axis.transAxes,
      )
    return
  for axis, scale in ((ax, [1.0] * len(part)), (rel, nccl)):
    _curves(axis, x, part, scale)
  ax.set_yscale("log")
  ax.set_ylabel("modeled time (us)")
  ax.set_title(f"{shape}: {part[0]['num_edges']} edges, {part[0]['edges_network']} network")
  rel.set_xscale("log", base=2)
  rel.set_xlabel("bytes per buffer")
  rel.set_ylabel("modeled time / NCCL-only")
  for axis in (ax, rel):
    axis.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)


def _curves(
  ax: "Axes", x: Sequence[int], part: Sequence[dict[str, Any]], scale: Sequence[float]
) -> None:
  """Every plan's curve, upstream's choice, and the choice marked; y divided by scale."""
  for plan, (color, label) in _STYLE.items():
    points = [
      (xi, r[f"{plan}_us"] / d) for xi, r, d in zip(x, part, scale) if r[f"{plan}_us"] is not None
    ]
    if points:
      ax.plot(*zip(*points), color=color, label=label, linewidth=1.2)
  ax.plot(
    x,
    [r["upstream_us"] / d for r, d in zip(part, scale)],
    color="tab:red",
    linestyle="--",
    linewidth=1,
    label="upstream assigner",
  )
  # The choice sits on its plan's curve; the marker tells plans apart where
  # curves overlap.
  for plan, marker in _MARKERS.items():
    chosen = [
      (xi, r["chosen_us"] / d) for xi, r, d in zip(x, part, scale) if r["chosen_plan"] == plan
    ]
    if chosen:
      xs, ys = zip(*chosen)
      ax.scatter(xs, ys, marker=marker, s=22, color="black", zorder=3, label=f"chosen: {plan}")
  missed = [
    (xi, r["oracle_us"] / d)
    for xi, r, d in zip(x, part, scale)
    if r["chosen_plan"] != r["oracle_plan"]
  ]
  if missed:
    xs, ys = zip(*missed)
    ax.scatter(
      xs,
      ys,
      marker="x",
      s=40,
      color="magenta",
      zorder=4,
      label="oracle, margin ignored (NCCL kept)",
    )


def plot_calibration(
  path: str, result: "Calibration", checks: Sequence[Check], source: str
) -> None:
  """PNG: per fitted pair the model per operand count as the core prices it
  (lines), measured calibration points (filled) and held-out points (open),
  and below the relative error at each."""
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError as e:
    raise HeuristicsError(f"--plot needs matplotlib ({e})") from None
  keys = sorted(result.fits)
  fig, axes = plt.subplots(2, len(keys), figsize=(5 * len(keys), 7.5), squeeze=False, sharex=True)
  for col, key in enumerate(keys):
    top, bottom = axes[0][col], axes[1][col]
    mine = [c for c in checks if (c.backend, c.link_class) == key and c.bytes > 0]
    for operands in sorted({c.operands for c in mine}):
      pts = sorted((c for c in mine if c.operands == operands), key=lambda c: c.bytes)
      lo, hi = pts[0].bytes, pts[-1].bytes
      xs = [lo * (hi / lo) ** (i / 200) for i in range(201)] if hi > lo else [lo]
      line = top.plot(
        xs,
        [selection.edge_time_us(result.table, key[0], key[1], x, operands) for x in xs],
        "-",
        label=f"model, {operands} op",
      )[0]
      color = line.get_color()
      for held, marker, fill in ((False, "o", color), (True, "s", "none")):
        sel = [c for c in pts if c.held_out == held]
        if not sel:
          continue
        label = f"{'held out' if held else 'calibration'}, {operands} op"
        top.plot(
          [c.bytes for c in sel],
          [c.measured_us for c in sel],
          marker,
          color=color,
          markerfacecolor=fill,
          label=label,
        )
        bottom.plot(
          [c.bytes for c in sel],
          [100 * relative(c.model_us, c.measured_us) for c in sel],
          marker,
          color=color,
          markerfacecolor=fill,
        )
    top.set(
      xscale="log", yscale="log", title=f"{key[0]} {key[1]}", ylabel="permute time per step (us)"
    )
    top.legend(fontsize=6, ncol=2)
    for bound in (-100 * GOAL_REL, 100 * GOAL_REL):
      bottom.axhline(bound, color="gray", linestyle="--", linewidth=0.8)
    bottom.set(
      xscale="log", xlabel="bytes per permute (all buffers)", ylabel="model - measured (%)"
    )
  fig.suptitle(f"Cost model vs measurement ({source}); open markers: held out")
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=110)
  plt.close(fig)
  write_file(path, buffer.getvalue())
