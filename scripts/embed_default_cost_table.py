#!/usr/bin/env python3
"""Checks, or rewrites, the measured NVLink curves of the selection core's default
table (the kNvlinkUs array of backend_cost_table.cc) against a calibrated table.

    scripts/embed_default_cost_table.py [TABLE] [--check]

TABLE defaults to core/tables/h200x2_nvlink_cost_table.txtpb (written by
`hlo-tools heuristics calibrate`); its NCCL and NVSHMEM NVLink points at 1, 2 and
4 buffers and 1 KiB * 4^i bytes (i = 0..9) become the array's rows. --check changes
nothing and exits 1 when the array differs. Rebuild the core afterwards.

The array's third backend, peer memory, comes from
core/tables/h200x2_nvlink_cost_table_jax0112.txtpb (XLA of jax 0.11.2).
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "core/xla/backends/gpu/transforms/collectives/backend_cost_table.cc")
DEFAULT_TABLE = "core/tables/h200x2_nvlink_cost_table.txtpb"
BUFFERS = (1, 2, 4)
SIZES = tuple(1024 << (2 * i) for i in range(10))
ARRAY = re.compile(
  r"(constexpr double kNvlinkUs\[kMeasuredBackends\]\[3\]\[kMeasuredSizes\] = )"
  r"\{.*?\};\n",
  re.S,
)
PEER_TABLE = "core/tables/h200x2_nvlink_cost_table_jax0112.txtpb"


def curves(text, name, backends=("NCCL", "NVSHMEM")):
  """[backend][buffers] -> the times at SIZES, from the table's NVLink entries."""
  rows = []
  for backend in backends:
    entry = re.search(
      rf"links \{{\s*backend: {backend}\s*link_class: NVLINK\b(.*?)\n\}}", text, re.S
    )
    if entry is None:
      raise ValueError(f"{name}: no {backend} NVLINK entry")
    points = {
      (int(b), int(n)): u
      for b, n, u in re.findall(
        r"points \{ buffers: (\d+) bytes: (\d+) us: ([0-9.e+-]+) \}", entry.group(1)
      )
    }
    try:
      rows.append([[points[(b, n)] for n in SIZES] for b in BUFFERS])
    except KeyError as e:
      raise ValueError(f"{name}: {backend} NVLINK has no point at {e.args[0]}") from None
  return rows


def render(rows):
  """The array's initializer as clang-format lays it out."""
  out = []
  for b, backend in enumerate(rows):
    for n, times in enumerate(backend):
      head = ("{{" if n == 0 else " {") if b == 0 or n else "{{"
      lines = [", ".join(times[:8]) + ",", ", ".join(times[8:])]
      tail = "}" + ("}" if n == 2 else "") + ("};" if n == 2 and b == len(rows) - 1 else ",")
      indent = "    "
      out.append(f"{indent}{head}{lines[0]}\n      {lines[1]}{tail}")
  return "{\n" + "\n".join(out) + "\n"


def numbers(array):
  return [float(x) for x in re.findall(r"[0-9][0-9.e+-]*", array.split("= ", 1)[1])]


def main(argv):
  check = "--check" in argv
  args = [a for a in argv if a != "--check"]
  if len(args) > 1 or any(a.startswith("-") for a in args):
    print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
    return 2
  table = args[0] if args else os.path.join(ROOT, DEFAULT_TABLE)
  try:
    with open(table, encoding="utf-8") as f:
      rows = curves(f.read(), table)
    with open(os.path.join(ROOT, PEER_TABLE), encoding="utf-8") as f:
      rows += curves(f.read(), PEER_TABLE, ("PEER",))
    with open(SOURCE, encoding="utf-8") as f:
      source = f.read()
  except OSError as e:
    print(f"embed_default_cost_table: {e.filename}: {e.strerror}", file=sys.stderr)
    return 2
  except ValueError as e:
    print(f"embed_default_cost_table: {e}", file=sys.stderr)
    return 2
  found = ARRAY.search(source)
  if found is None:
    print(f"embed_default_cost_table: {SOURCE}: no kNvlinkUs array", file=sys.stderr)
    return 2
  have = numbers(found.group(0))
  want = [float(u) for backend in rows for times in backend for u in times]
  if check:
    if have != want:
      print(
        f"{SOURCE}: the default table's curves differ from {table} or {PEER_TABLE}", file=sys.stderr
      )
      return 1
    return 0
  if have != want:
    updated = source[: found.start()] + found.group(1) + render(rows) + source[found.end() :]
    tmp = SOURCE + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(updated)
    os.replace(tmp, SOURCE)
    print(f"updated {SOURCE}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
