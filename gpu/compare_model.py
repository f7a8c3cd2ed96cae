#!/usr/bin/env python3
"""Compare measured point-to-point times with the cost model's predictions.

    python3 gpu/compare_model.py MEASURED.csv [--table=CALIBRATED.txt]
        [--copy=COPY.csv] [--out-csv=F] [--markdown=F] [--plot=F.png]

MEASURED.csv is p2p_bench.py's output (backend,link_class,bytes,seconds, ...).
For every measured point the model's edge time is computed from the built-in
default cost table and, with --table, from a calibrated one (e.g. written by
`hlo-tools heuristics calibrate`):

  transfer_us = latency_us + bytes / (bandwidth_GBps * 1e3)
  modeled_us  = latency_us + bytes / (bandwidth_GBps * 1e3) * (1 + sm_interference)

`transfer` is what a measurement without overlapping compute should match;
`modeled` is what the selection core uses (hlo_tools.selection.edge_time_us,
which this script checks its own arithmetic against when hlo_tools imports).
Prints a per-(backend, link class) summary of relative errors; --markdown
writes a table at a few sizes, --out-csv every point, --plot a PNG.
"""

import argparse
import csv
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKDOWN_SIZES = (1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20)


def parse_table(text):
  """{'links': {(backend, class): (lat_us, bw_GBps)}, 'sm': {backend: f}} of table text."""
  links, sm = {}, {}
  for line in text.splitlines():
    words = line.split("#", 1)[0].split()
    if not words:
      continue
    if words[0] == "link" and len(words) == 5:
      links[(words[1], words[2])] = (float(words[3]), float(words[4]))
    elif words[0] == "sm_interference" and len(words) == 3:
      sm[words[1]] = float(words[2])
  return {"links": links, "sm": sm}


def transfer_us(table, backend, link_class, nbytes):
  lat, bw = table["links"][(backend, link_class)]
  return lat + nbytes / (bw * 1e3)


def modeled_us(table, backend, link_class, nbytes):
  lat, bw = table["links"][(backend, link_class)]
  return lat + nbytes / (bw * 1e3) * (1 + table["sm"].get(backend, 0.0))


def read_measured(path):
  """[(backend, link_class, bytes, us)] from a CSV with the calibrate header."""
  rows = []
  with open(path, newline="") as f:
    lines = [l for l in f if l.strip() and not l.lstrip().startswith("#")]
  for r in csv.DictReader(lines):
    rows.append((r["backend"].strip(), r["link_class"].strip(), int(r["bytes"]),
                 float(r["seconds"]) * 1e6))
  return rows


def compare(measured, tables):
  """Rows of dicts: measured and each table's transfer/modeled time and error."""
  out = []
  for backend, link_class, nbytes, us in measured:
    row = {"backend": backend, "link_class": link_class, "bytes": nbytes,
           "measured_us": us}
    for name, table in tables.items():
      if (backend, link_class) not in table["links"]:
        continue
      t = transfer_us(table, backend, link_class, nbytes)
      m = modeled_us(table, backend, link_class, nbytes)
      row[f"{name}_transfer_us"] = t
      row[f"{name}_modeled_us"] = m
      row[f"{name}_transfer_err"] = (t - us) / us
    out.append(row)
  return out


def summarize(rows, table_names):
  """{(backend, class, table): (rms, max abs relative error of transfer)}."""
  summary = {}
  keys = sorted({(r["backend"], r["link_class"]) for r in rows})
  for backend, link_class in keys:
    part = [r for r in rows if (r["backend"], r["link_class"]) == (backend, link_class)]
    for name in table_names:
      errs = [r[f"{name}_transfer_err"] for r in part if f"{name}_transfer_err" in r]
      if errs:
        summary[(backend, link_class, name)] = (
            math.sqrt(sum(e * e for e in errs) / len(errs)), max(abs(e) for e in errs))
  return summary


def ratio_rows(rows, table_names):
  """NVSHMEM/NCCL time ratio per (link class, bytes): measured and per table (modeled)."""
  by = {}
  for r in rows:
    by.setdefault((r["link_class"], r["bytes"]), {})[r["backend"]] = r
  out = []
  for (link_class, nbytes), pair in sorted(by.items()):
    if "nccl" not in pair or "nvshmem" not in pair:
      continue
    row = {"link_class": link_class, "bytes": nbytes,
           "measured": pair["nvshmem"]["measured_us"] / pair["nccl"]["measured_us"]}
    for name in table_names:
      a, b = pair["nvshmem"].get(f"{name}_modeled_us"), pair["nccl"].get(f"{name}_modeled_us")
      if a is not None and b:
        row[name] = a / b
    out.append(row)
  return out


def _size(n):
  for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if n >= div and n % div == 0:
      return f"{n // div} {unit}"
  return f"{n} B"


def markdown(rows, table_names, sizes=MARKDOWN_SIZES):
  head = ["backend", "link class", "size", "measured (us)"]
  for name in table_names:
    head += [f"{name}: transfer (us)", f"{name}: modeled (us)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    if r["bytes"] not in sizes:
      continue
    cells = [r["backend"], r["link_class"], _size(r["bytes"]), f"{r['measured_us']:.2f}"]
    for name in table_names:
      t, m = r.get(f"{name}_transfer_us"), r.get(f"{name}_modeled_us")
      cells += [f"{t:.2f} ({100 * r[f'{name}_transfer_err']:+.0f}%)" if t is not None else "",
                f"{m:.2f}" if m is not None else ""]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def plot(path, rows, table_names, copy_rows=()):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  colors = {"nccl": "tab:blue", "nvshmem": "tab:green"}
  styles = {"default": ":", "calibrated": "--"}
  fig, (ax, rel) = plt.subplots(1, 2, figsize=(11, 4.2))
  for backend in ("nccl", "nvshmem"):
    part = [r for r in rows if r["backend"] == backend]
    if not part:
      continue
    x = [r["bytes"] for r in part]
    ax.plot(x, [r["measured_us"] for r in part], "o", ms=4, color=colors[backend],
            label=f"{backend} measured")
    for name in table_names:
      y = [r.get(f"{name}_modeled_us") for r in part]
      if None not in y:
        ax.plot(x, y, styles.get(name, "-."), color=colors[backend],
                label=f"{backend} model ({name} table)")
  if copy_rows:
    ax.plot([c[2] for c in copy_rows], [c[3] for c in copy_rows], "x", ms=4,
            color="gray", label=f"{copy_rows[0][0]} (copy ceiling)")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("bytes per message")
  ax.set_ylabel("time per step (us)")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)
  ratios = ratio_rows(rows, table_names)
  if ratios:
    x = [r["bytes"] for r in ratios]
    rel.plot(x, [r["measured"] for r in ratios], "o-", ms=4, color="black", label="measured")
    for name in table_names:
      y = [r.get(name) for r in ratios]
      if None not in y:
        rel.plot(x, y, styles.get(name, "-."), color="tab:red", label=f"model ({name} table)")
    rel.axhline(1.0, color="gray", lw=0.8)
    rel.set_xscale("log", base=2)
    rel.set_xlabel("bytes per message")
    rel.set_ylabel("NVSHMEM time / NCCL time")
    rel.grid(True, which="both", alpha=0.3)
    rel.legend(fontsize=7)
  classes = ", ".join(sorted({r["link_class"] for r in rows}))
  fig.suptitle(f"point-to-point step time, measured vs cost model ({classes})")
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def _default_table_text():
  sys.path.insert(0, REPO)
  from hlo_tools import selection
  return str(selection.load_cost_table())


def _check_against_core(rows, tables, paths):
  """The core's edge_time_us agrees with this script's modeled_us (when importable)."""
  try:
    sys.path.insert(0, REPO)
    from hlo_tools import selection
  except Exception:
    return None
  worst = 0.0
  for name, table in tables.items():
    core_table = selection.load_cost_table(paths.get(name))
    for r in rows:
      if f"{name}_modeled_us" in r:
        core = selection.edge_time_us(core_table, r["backend"], r["link_class"], r["bytes"])
        worst = max(worst, abs(core - r[f"{name}_modeled_us"]) / core)
  return worst


def main(argv=None):
  p = argparse.ArgumentParser(prog="compare_model.py", description=__doc__.split("\n\n")[0])
  p.add_argument("measured")
  p.add_argument("--table", help="calibrated cost table")
  p.add_argument("--copy", help="copy-ceiling CSV from p2p_bench.py (plotted only)")
  p.add_argument("--out-csv")
  p.add_argument("--markdown")
  p.add_argument("--plot")
  args = p.parse_args(argv)
  tables = {"default": parse_table(_default_table_text())}
  paths = {"default": None}
  if args.table:
    with open(args.table) as f:
      tables["calibrated"] = parse_table(f.read())
    paths["calibrated"] = args.table
  rows = compare(read_measured(args.measured), tables)
  names = list(tables)
  for (backend, link_class, name), (rms, mx) in sorted(summarize(rows, names).items()):
    print(f"{backend:8s} {link_class:12s} {name:10s} transfer vs measured: rms "
          f"{100 * rms:6.1f}%  max {100 * mx:6.1f}%")
  for r in ratio_rows(rows, names):
    extra = "  ".join(f"{n} {r[n]:.3f}" for n in names if n in r)
    print(f"ratio nvshmem/nccl {r['link_class']:12s} {_size(r['bytes']):>8s}: measured "
          f"{r['measured']:.3f}  model {extra}")
  worst = _check_against_core(rows, tables, paths)
  if worst is not None:
    print(f"selection core edge_time_us vs this script: max relative difference {worst:.2e}")
  if args.out_csv:
    cols = sorted({k for r in rows for k in r}, key=lambda k: (k not in (
        "backend", "link_class", "bytes", "measured_us"), k))
    with open(args.out_csv, "w", newline="") as f:
      w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
      w.writeheader()
      w.writerows(rows)
  if args.markdown:
    with open(args.markdown, "w") as f:
      f.write(markdown(rows, names))
  if args.plot:
    copy_rows = read_measured(args.copy) if args.copy else ()
    plot(args.plot, rows, names, copy_rows)
    print(f"wrote {args.plot}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
