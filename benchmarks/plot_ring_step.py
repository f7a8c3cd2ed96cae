#!/usr/bin/env python3
"""Ring-attention step time vs sequence length, one panel per direction.

    python3 benchmarks/plot_ring_step.py OUT.png CSV [CSV ...]

Each CSV has the header seq_len,direction,mode,step_s (benchmarks/ring_e2e.py); a
line per (file, mode), labelled with the file's stem when several are given.
"""

import csv
import os
import sys


def load(path):
  rows = {}
  with open(path, newline="") as f:
    for r in csv.DictReader(f):
      key = (r["direction"], r["mode"])
      rows.setdefault(key, []).append((int(r["seq_len"]), float(r["step_s"])))
  return {k: sorted(v) for k, v in rows.items()}


def main(argv):
  if len(argv) < 2:
    print(__doc__.split("\n")[2].strip(), file=sys.stderr)
    return 2
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  out, paths = argv[0], argv[1:]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for ax, direction in zip(axes, ("fwd", "fwd_bwd")):
    for path in paths:
      stem = os.path.splitext(os.path.basename(path))[0]
      for (d, mode), pts in sorted(load(path).items()):
        if d != direction:
          continue
        label = f"{stem}: {mode}" if len(paths) > 1 else mode
        ax.plot(
          [p[0] // 1024 for p in pts], [p[1] * 1e3 for p in pts], marker="o", label=label, alpha=0.8
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (K tokens)")
    ax.set_ylabel("ring step (ms)")
    ax.set_title(direction)
    ax.legend(fontsize=7)
  fig.suptitle("Ring attention on 2x H200, step time per permute mode")
  fig.tight_layout()
  fig.savefig(out, dpi=110)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
