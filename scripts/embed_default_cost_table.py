#!/usr/bin/env python3
"""Copies the measured NVLink entries of a calibrated cost table into the
selection core's default table (the generated block of
nvshmem_cost_table.cc), with the table's provenance as comments.

    scripts/embed_default_cost_table.py [TABLE] [--check]

TABLE defaults to gpu/results/h200x2_nvlink_cost_table.txtpb (written by
`hlo-tools heuristics calibrate`). --check changes nothing and exits 1 when the
source's block differs from the table. Rebuild the core afterwards.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hlo_tools.ops.heuristics import calibrate  # noqa: E402  (after the path set-up)

SOURCE = os.path.join(ROOT, "xla_src/xla/backends/gpu/transforms/collectives/"
                      "nvshmem_cost_table.cc")
DEFAULT_TABLE = "gpu/results/h200x2_nvlink_cost_table.txtpb"


def main(argv):
  check = "--check" in argv
  args = [a for a in argv if a != "--check"]
  if len(args) > 1 or any(a.startswith("-") for a in args):
    print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
    return 2
  table = args[0] if args else os.path.join(ROOT, DEFAULT_TABLE)
  try:
    with open(table) as f:
      text = f.read()
    with open(SOURCE) as f:
      source = f.read()
  except OSError as e:
    print(f"embed_default_cost_table: {e.filename}: {e.strerror}", file=sys.stderr)
    return 2
  name = os.path.relpath(os.path.abspath(table), ROOT)
  updated = calibrate.replace_default_block(source, calibrate.default_block(text, name))
  if check:
    if updated != source:
      print(f"{SOURCE}: the default table's block differs from {name}", file=sys.stderr)
      return 1
    return 0
  if updated != source:
    tmp = SOURCE + ".tmp"
    with open(tmp, "w") as f:
      f.write(updated)
    os.replace(tmp, SOURCE)
    print(f"updated {SOURCE}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
