#!/usr/bin/env python3
"""The pinned-XLA calibration CSV: what each backend costs when it really runs.

    python3 benchmarks/calibration_set.py FINE.csv UNCOMBINED.csv OUT.csv [SMALL.csv ...]
        [--small-upto=2M]

At the pin, XLA's permute combiner runs after the backend assigner: permutes it
combines (K buffers, total <= 30 MiB + 7 bytes, the default combine threshold)
come out with backend DEFAULT even under --xla_gpu_experimental_enable_nvshmem,
so FINE.csv's nvshmem rows with several operands below the threshold measured
NCCL. Our pass runs after the combiner and may put such a combined permute on
NVSHMEM, whose thunk does a put and a barrier per buffer; the closest measured
cost is K separate NVSHMEM permutes (UNCOMBINED.csv, combine threshold 0).

OUT keeps FINE.csv's nccl rows (XLA's default combining) and its one-operand
nvshmem rows, and takes the several-operand nvshmem rows from UNCOMBINED.csv.

SMALL.csv files are low-noise sweeps (xla_permute_bench.py --chain=N, nvshmem
uncombined): their rows of the largest chain (not the chain-1 reference rows)
replace every row up to --small-upto bytes; several files are duplicates, and
the calibration takes the median of duplicate rows.
"""

import csv
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BenchError, parse_size  # pylint: disable=wrong-import-position


def read(path):
  with open(path, newline="") as f:
    reader = csv.DictReader(f)
    return reader.fieldnames, list(reader)


def small_rows(path, upto):
  """Rows of the file's largest chain, up to `upto` bytes."""
  _, rows = read(path)
  chains = {int(r.get("chain") or 1) for r in rows}
  top = max(chains)
  return [r for r in rows if int(r.get("chain") or 1) == top and int(r["bytes"]) <= upto]


def build(fine, uncombined, smalls=(), upto=2 << 20):
  header, rows = read(fine)
  rows = [r for r in rows if r["backend"] == "nccl" or int(r["operands"]) == 1]
  rows += [r for r in read(uncombined)[1] if r["backend"] == "nvshmem" and int(r["operands"]) > 1]
  if smalls:
    rows = [r for r in rows if int(r["bytes"]) > upto]
    for path in smalls:
      rows += small_rows(path, upto)
    header = list(header) + [c for c in ("chain", "compiles", "own_spread_s") if c not in header]
  rows.sort(key=lambda r: (r["backend"], int(r["operands"]), int(r["bytes"])))
  for r in rows:  # the one-compile, one-permute-per-step sweeps
    r.setdefault("chain", "1")
    r.setdefault("compiles", "1")
    r.setdefault("own_spread_s", "")
  return header, rows


def main(argv):
  upto = 2 << 20
  args = []
  for a in argv:
    if a.startswith("--small-upto="):
      try:
        upto = parse_size(a.split("=", 1)[1])
      except BenchError as e:
        print(f"calibration_set: --small-upto: {e}", file=sys.stderr)
        return 2
    else:
      args.append(a)
  if len(args) < 3:
    print(__doc__.split("\n")[2].strip(), file=sys.stderr)
    return 2
  fine, uncombined, out, smalls = args[0], args[1], args[2], args[3:]
  header, rows = build(fine, uncombined, smalls, upto)
  from hlo_tools.atomic_output import write_atomic  # pylint: disable=import-outside-toplevel

  buf = io.StringIO()
  w = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
  w.writeheader()
  w.writerows(rows)
  write_atomic(out, buf.getvalue())
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
