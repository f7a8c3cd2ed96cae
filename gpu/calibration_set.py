#!/usr/bin/env python3
"""The pinned-XLA calibration CSV: what each backend costs when it really runs.

    python3 gpu/calibration_set.py FINE.csv UNCOMBINED.csv OUT.csv

At the pin, XLA's permute combiner runs after the backend assigner: permutes it
combines (K buffers, total <= 30 MiB + 7 bytes, the default combine threshold)
come out with backend DEFAULT even under --xla_gpu_experimental_enable_nvshmem,
so FINE.csv's nvshmem rows with several operands below the threshold measured
NCCL. Our pass runs after the combiner and may put such a combined permute on
NVSHMEM, whose thunk does a put and a barrier per buffer; the closest measured
cost is K separate NVSHMEM permutes (UNCOMBINED.csv, combine threshold 0).

OUT keeps FINE.csv's nccl rows (XLA's default combining) and its one-operand
nvshmem rows, and takes the several-operand nvshmem rows from UNCOMBINED.csv.
"""
import csv
import os
import sys


def main(argv):
  if len(argv) != 3:
    print(__doc__.split("\n")[2].strip(), file=sys.stderr)
    return 2
  fine, uncombined, out = argv
  with open(fine, newline="") as f:
    reader = csv.DictReader(f)
    header = reader.fieldnames
    rows = [r for r in reader
            if r["backend"] == "nccl" or int(r["operands"]) == 1]
  with open(uncombined, newline="") as f:
    rows += [r for r in csv.DictReader(f)
             if r["backend"] == "nvshmem" and int(r["operands"]) > 1]
  rows.sort(key=lambda r: (r["backend"], int(r["operands"]), int(r["bytes"])))
  tmp = out + ".tmp"
  with open(tmp, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=header)
    w.writeheader()
    w.writerows(rows)
  os.replace(tmp, out)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
