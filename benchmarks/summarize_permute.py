#!/usr/bin/env python3
"""Markdown tables from xla_permute_bench.py CSVs: the permute's own time per step.

    python3 benchmarks/summarize_permute.py
        benchmarks/results/h200x2_xla_permute_jax091.csv [--ref=nccl]

One table per operand count: rows are sizes (bytes each device sends per step),
columns each backend's own time (step - baseline, µs) and its ratio to --ref.
"""

import argparse
import csv
import sys


def human(n):
  for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if n >= size and n % size == 0:
      return f"{n // size} {unit}"
  return f"{n} B"


def load(path):
  table, backends = {}, []
  with open(path, newline="") as f:
    for row in csv.DictReader(f):
      b = row["backend"]
      if b not in backends:
        backends.append(b)
      key = (int(row["operands"]), int(row["bytes"]))
      table.setdefault(key, {})[b] = (
        float(row["seconds"]) * 1e6,
        float(row["step_s"]) * 1e6,
        float(row["baseline_s"]) * 1e6,
      )
  return table, backends


def markdown(table, backends, ref):
  lines = []
  for operands in sorted({k[0] for k in table}):
    others = [b for b in backends if b != ref]
    head = ["bytes per step", f"{ref} step (µs)", f"{ref} own (µs)"]
    for b in others:
      head += [f"{b} own (µs)", f"{b} / {ref}"]
    lines += [
      f"\n{operands} operand(s):\n",
      "| " + " | ".join(head) + " |",
      "|" + "---|" * len(head),
    ]
    for ops, size in sorted(k for k in table if k[0] == operands):
      cells = table[(ops, size)]
      if ref not in cells:
        continue
      own_ref, step_ref, _ = cells[ref]
      row = [human(size), f"{step_ref:.1f}", f"{own_ref:.1f}"]
      for b in others:
        if b in cells:
          row += [f"{cells[b][0]:.1f}", f"{cells[b][0] / max(own_ref, 1e-9):.2f}"]
        else:
          row += ["-", "-"]
      lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("csv")
  p.add_argument("--ref", default="nccl")
  args = p.parse_args(argv)
  try:
    table, backends = load(args.csv)
  except (OSError, KeyError, ValueError) as e:
    print(f"summarize_permute: {args.csv}: {e}", file=sys.stderr)
    return 2
  print(markdown(table, backends, args.ref))
  return 0


if __name__ == "__main__":
  sys.exit(main())
