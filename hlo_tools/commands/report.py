"""`hlo-tools report`: what the NVSHMEM pass does to a program, as an HTML page.

    hlo-tools report [SOURCE] [--topology=SPEC] [--out=DIR] [--cost-table=F]
                     [--num-partitions=N] [ring options] [--arg=... --out_spec=...]

SOURCE is
  absent            the embedded default: ring attention with Llama-3-8B attention
                    shapes (32 query / 8 KV heads x 128, bf16, causal) side by side
                    on one host of 8 H200s (1x1x8) and on 2 hosts x 4 (1x2x4), at a
                    short (4K tokens) and a long (128K tokens) context: where NVSHMEM
                    wins, where it loses and where it cannot run. With --topology or
                    --seq_len, that one configuration only.
  FILE              an HLO module (text, or a serialized HloModuleProto), as it is;
  DIR               a dump directory (`hlo-tools dump` or XLA's --xla_dump_to): the
                    module entering async-collective-creator when the dump has every
                    pass, and its after-optimizations module;
  module:function   a per-shard JAX function, compiled like `hlo-tools dump
                    module:function` (--arg, --out_spec, --nocheck_vma).

For each configuration: the pass (nvshmem-opt, with upstream's assigner beside it)
on the module entering async-collective-creator and on the after-optimizations
module; explain (the selection core's reasoning per collective-permute); verify of
both rewritten modules; diff before/after; the per-pass trace of each permute when
the dump has every pass; a chart of modeled time vs message size. DIR (default
./nvshmem_report) gets index.html, report.json and one directory per configuration
(json/, hlo/, dump/). It is written next to DIR and swapped in at the end: DIR holds
the old report or the new one, never a mix, even when the run is killed.

Exit status: 0 report written and every check passed, 1 written but a verify check
failed, 2 error (bad option or input, compile failure, nvshmem-opt missing or failing).
"""

import dataclasses
import json
import math
import os
import re
import shutil
import signal
import sys
import time

from hlo_tools import cli_io
from hlo_tools import selection
from hlo_tools.commands import common
from hlo_tools.commands import diff as df
from hlo_tools.commands import dump as dump_mod
from hlo_tools.commands import explain
from hlo_tools.commands import outdir
from hlo_tools.commands import verify as vf
from hlo_tools.model import decisions, driver, dumps, source as inputs
from hlo_tools.model.source import InputError

# Llama-3-8B attention.
DEFAULTS = {"seq_len": 131072, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
            "batch": 1, "dtype": "bf16", "causal": True, "backward": False}
DEFAULT_TOPOLOGY = "1x2x4"
# The embedded default: one host vs two, short vs long context.
DEFAULT_GRID = (("1x1x8", 4096), ("1x1x8", 131072), ("1x2x4", 4096), ("1x2x4", 131072))
DEFAULT_OUT = "nvshmem_report"
_TOPO_RE = re.compile(r"^(?:(\d+)x)?(\d+)x(\d+)((?::.*)?)$")
CHART_SIZES = [2 ** e for e in range(10, 31)]  # 1 KiB .. 1 GiB
COLORS = {"nccl": "#1f77b4", "nvshmem": "#2ca02c", "chosen": "#000000",
          "nccl_net": "#9467bd", "nvshmem_nvl": "#8c564b"}
_LABELS = {"nccl": "NCCL (whole permute)", "nvshmem": "NVSHMEM (whole permute, if eligible)",
           "chosen": "chosen by the core", "nccl_net": "one NCCL network edge",
           "nvshmem_nvl": "one NVSHMEM NVLink edge"}


def parse_topology_arg(spec):
  """'2x4' -> ('1x2x4', '1x2x4'); '1x2x4:nvl8' -> ('1x2x4', '1x2x4:nvl8')."""
  m = _TOPO_RE.match(spec or "")
  if not m:
    raise InputError(f"bad --topology {spec!r}: expected SxHxG or HxG, e.g. 1x2x4")
  slices = m.group(1) or "1"
  compile_topo = f"{slices}x{m.group(2)}x{m.group(3)}"
  return compile_topo, compile_topo + m.group(4)


# ---------------------------------------------------------------------------------------
# What to report on

@dataclasses.dataclass
class Case:
  """One configuration: a module (or a program to compile) on one topology."""
  id: str  # directory name inside DIR
  title: str
  topology: str  # the selection core's spec
  compile_topology: str = None  # SxHxG, for programs compiled here
  source: dict = None  # a dump.dump() source: ring or module:function
  config: dict = None  # the ring's shapes
  path: str = None  # FILE or DIR given by the user


def _tokens(n):
  return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def ring_case(config, topology_arg):
  compile_topo, spec = parse_topology_arg(topology_arg)
  return Case(id=f"{spec.replace(':', '_')}-{_tokens(config['seq_len'])}",
              title=f"ring attention, {_tokens(config['seq_len'])} tokens, on {spec}",
              topology=spec, compile_topology=compile_topo,
              source={"kind": "ring", "config": config}, config=config)


def plan_cases(args, config, explicit):
  """The cases a command line asks for (see the module docstring)."""
  topology = args.topology or DEFAULT_TOPOLOGY
  if args.source is None:
    if explicit:
      return [ring_case(config, topology)]
    return [ring_case(dict(config, seq_len=n), topo) for topo, n in DEFAULT_GRID]
  compile_topo, spec = parse_topology_arg(topology)
  name = re.sub(r"[^\w.-]+", "_", os.path.basename(os.path.normpath(args.source)))
  if os.path.isdir(args.source) or os.path.isfile(args.source):
    return [Case(id=name, title=f"{args.source} on {spec}", topology=spec,
                 path=os.path.abspath(args.source))]
  if re.match(r"^[\w.]+:\w+$", args.source):
    source = {"kind": "function", "function": args.source, "args": args.arg,
              "out_spec": args.out_spec, "check_vma": args.check_vma}
    return [Case(id=name, title=f"{args.source} on {spec}", topology=spec,
                 compile_topology=compile_topo, source=source)]
  raise InputError(f"{args.source}: no such file or directory, and not module:function")


# ---------------------------------------------------------------------------------------
# Inputs of one case: hlo/before_async.hlo (and hlo/after_optimizations.hlo)

def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def _compiled_inputs(case, case_dir, say):
  """Compiles the case's program with every pass dumped; returns its dump directory."""
  dump_dir = os.path.join(case_dir, "dump")
  say(f"{case.id}: compiling for {case.compile_topology} (deviceless, all passes)")
  try:
    dump_mod.dump(case.source, dump_dir, target=dump_mod.Target(topology=case.compile_topology),
                  all_passes=True, options=dict(case.config or {}), progress=False)
  except dump_mod.DumpError as e:
    raise InputError(f"hlo-tools report: compile failed: {e}") from None
  return dump_dir


def _file_text(path, max_bytes):
  """HLO text of FILE: text as is; a serialized HloModuleProto printed by jaxlib."""
  try:
    data = cli_io.read_input(path, max_bytes)
  except cli_io.InputReadError as e:
    raise InputError(str(e)) from None
  if b"\0" not in data[:4096]:
    return data.decode("utf-8", errors="replace")
  try:
    from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel
    return xla_client.XlaComputation(data).as_hlo_text()
  except Exception as e:  # pylint: disable=broad-except  # jaxlib's own error types
    raise InputError(f"{path}: neither HLO text nor a serialized HloModuleProto: "
                        f"{' '.join(str(e).split())}") from None


def prepare_inputs(case, case_dir, say, max_bytes):
  """Writes the case's input modules under hlo/; returns ({stage: path}, dump dir)."""
  hlo_dir = os.path.join(case_dir, "hlo")
  os.makedirs(hlo_dir, exist_ok=True)
  dump_dir = None
  if case.path is not None and os.path.isfile(case.path):
    text = _file_text(case.path, max_bytes)
    _write(os.path.join(hlo_dir, "input.hlo"), text)
    return {"input": os.path.join(hlo_dir, "input.hlo")}, None
  dump_dir = case.path if case.path is not None else _compiled_inputs(case, case_dir, say)
  stages = {}
  for stage in ("before_async", "after_optimizations"):
    try:
      src = dumps.read_stage(dump_dir, stage, max_bytes)
    except InputError:
      continue  # a dump without every pass has no before_async
    stages[stage] = os.path.join(hlo_dir, f"{stage}.hlo")
    _write(stages[stage], src.text)
  if not stages:
    raise InputError(f"{dump_dir}: no after_optimizations module and no per-pass "
                        "snapshots in this dump directory")
  return stages, dump_dir


# ---------------------------------------------------------------------------------------
# Analysis of one case

def _run_pass(hlo_dir, json_dir, stage, path, case, cost_table, partitions):
  """nvshmem-opt (rewrite, upstream beside it) on one stage; (report, output path)."""
  out = os.path.join(hlo_dir, f"{stage}.nvshmem.hlo")
  try:
    rc, report, message = driver.run_nvshmem_opt(
        path, case.topology, cost_table, mode="rewrite", out=out, compare_upstream=True,
        num_partitions=partitions, tmp_dir=json_dir, annotate=True)
  except FileNotFoundError as e:
    raise InputError(f"hlo-tools report: {e}") from None
  if rc != 0:
    raise InputError(f"hlo-tools report: nvshmem-opt failed on {case.id}/hlo/{stage}.hlo "
                        f"(exit {rc}): {message}")
  _write(os.path.join(json_dir, f"pass_{stage}.json"), json.dumps(report, indent=1))
  return report, out


def analyze_case(case, case_dir, stages, dump_dir, cost_table, num_partitions, say):
  """Runs the pass, explain, verify, diff and trace; writes json/; returns the results."""
  hlo_dir, json_dir = os.path.join(case_dir, "hlo"), os.path.join(case_dir, "json")
  os.makedirs(json_dir, exist_ok=True)
  topology, table = decisions.load_selection(case.topology, cost_table)
  rel = lambda p: os.path.relpath(p, os.path.dirname(case_dir))
  sources = {s: inputs.resolve_partitions(inputs.read_source(p, rel(p)), topology, num_partitions)
             for s, p in stages.items()}
  first = next(iter(stages))
  partitions = inputs.driver_partitions(sources[first])
  say(f"{case.id}: running nvshmem-opt, explain, verify, diff")
  passes, rewritten = {}, {}
  for stage, path in stages.items():
    passes[stage], out = _run_pass(hlo_dir, json_dir, stage, path, case, cost_table,
                                   partitions)
    rewritten[stage] = inputs.resolve_partitions(inputs.read_source(out, rel(out)), topology,
                                             num_partitions)
  explained = explain.explain(stages[first], case.topology, cost_table, source=sources[first],
                         upstream=driver.upstream_from_report(passes[first]))
  verified = {s: vf.verify(rewritten[s].path, case.topology, cost_table, source=rewritten[s],
                           num_partitions=num_partitions) for s in stages}
  diffs = {s: df.diff_sources(sources[s], rewritten[s]) for s in stages}
  trace = _trace(dump_dir)
  chart = chart_data(topology, table, explained, sources[first])
  for name, value in [("explain", explained), ("trace", trace), ("chart", chart)] + \
      [(f"verify_{s}", v) for s, v in verified.items()] + \
      [(f"diff_{s}", df.to_json(d)) for s, d in diffs.items()]:
    _write(os.path.join(json_dir, f"{name}.json"), json.dumps(value, indent=1))
  return {"case": case, "stages": list(stages), "explain": explained, "passes": passes,
          "verify": verified, "diff": diffs, "trace": trace, "chart": chart,
          "sources": sources, "rewritten": rewritten, "first": first, "dump_dir": dump_dir}


def _trace(dump_dir):
  if dump_dir is None:
    return None
  try:
    return df.trace(dump_dir)
  except InputError:
    return None  # a dump without per-pass snapshots: nothing to trace


def case_summary(result, case_dir_name):
  """The case's entry in report.json."""
  case = result["case"]
  verified = result["verify"]
  files = sorted(os.path.join(case_dir_name, sub, f)
                 for sub in ("json", "hlo") for f in result.get("_files", {}).get(sub, []))
  return {
      "id": case.id, "title": case.title, "topology": case.topology,
      "config": case.config, "input": case.path, "stages": result["stages"],
      "collective_permutes": [
          {k: e[k] for k in ("instruction", "computation", "bytes", "buffers",
                             "edges_by_class", "modeled_us", "choice", "reason",
                             "trip_count")}
          | {"upstream": e["upstream"]["backend"]} for e in result["explain"]["collectives"]],
      "verify_passed": all(v["passed"] for v in verified.values()),
      "failed_checks": sorted({c for v in verified.values() for c in v["failed_checks"]}),
      "files": files,
  }


# ---------------------------------------------------------------------------------------
# The chart

def chart_data(topology, table, explained, source):
  """Modeled microseconds per backend at each chart size, for the first permute's pairs."""
  perms = explained["collectives"]
  n = topology.num_devices
  pairs = [tuple(p) for p in perms[0]["pairs"]] if perms else [(i, (i + 1) % n)
                                                               for i in range(n)]
  buffers = perms[0].get("buffers", 1) if perms else 1
  series = {k: [] for k in COLORS}
  for size in CHART_SIZES:
    d = selection.decide(topology, table, size, pairs, True, source.num_partitions, 1,
                         buffers=buffers)
    series["nccl"].append(d["nccl_us"])
    series["nvshmem"].append(d["nvshmem_us"])
    series["chosen"].append(d["chosen_us"])
    series["nccl_net"].append(selection.edge_time_us(table, "nccl", "network", size, buffers))
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
               f'text-anchor="middle">{df.esc(common.human_bytes(size).replace(".0 ", " "))}</text>')


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
               f'{df.esc(_LABELS[key])}</text>')
    legend_y += 18
  if not any(series.get("nvshmem", [])):
    out.append(f'<text x="{left + pw + 12}" y="{legend_y + 4}" font-size="11" fill="#777">'
               'NVSHMEM for the whole permute: not</text>')
    out.append(f'<text x="{left + pw + 12}" y="{legend_y + 18}" font-size="11" fill="#777">'
               'eligible (edges cross the network)</text>')


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
         f'viewBox="0 0 {w} {h}" role="img" aria-label="{df.esc(title)}">',
         f'<text x="{left}" y="18" font-size="14" font-weight="600">{df.esc(title)}</text>',
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
                 f'fill="#d62728">{df.esc(label)}</text>')
  _svg_series(out, series, (left, top, pw, ph), x, y)
  out.append("</svg>")
  return "\n".join(out)


# ---------------------------------------------------------------------------------------
# The page

def _num(v):
  return "-" if v is None else f"{v:.2f}"


def verdict(entry):
  """One phrase: what the core chose and by how much, or why NVSHMEM cannot run."""
  m = entry["modeled_us"]
  nccl, nvshmem = m["nccl"], m["nvshmem"]
  if nvshmem is None:
    why = entry["reason"]
    for prefix in ("NCCL: ", "nvshmem refused: "):
      why = why[len(prefix):] if why.startswith(prefix) else why
    return f"NCCL only: NVSHMEM cannot run here ({why})"
  delta = (nccl - nvshmem) / nccl * 100 if nccl else 0.0
  if entry["choice"]["plan"] == "nvshmem":
    return f"NVSHMEM wins: {delta:.1f}% faster than NCCL"
  if delta < 0:
    return f"NCCL wins: NVSHMEM would be {-delta:.1f}% slower"
  if entry["reason"].startswith("NCCL: NVSHMEM") and "margin" in entry["reason"]:
    return f"NCCL kept: NVSHMEM only {delta:.1f}% faster, inside the core's margin"
  return "NCCL: " + entry["reason"].split(": ", 1)[-1]


def comparison_rows(results):
  """The side-by-side table: one row per collective-permute of every case."""
  rows = []
  for r in results:
    for e in r["explain"]["collectives"]:
      m = e["modeled_us"]
      trips = e["trip_count"] or 1
      rows.append({"case": r["case"].id, "title": r["case"].title,
                   "topology": r["case"].topology, "instruction": e["instruction"],
                   "bytes": e["bytes"], "buffers": e.get("buffers", 1),
                   "trip_count": e["trip_count"], "edges_by_class": e["edges_by_class"],
                   "nccl_us": m["nccl"], "nvshmem_us": m["nvshmem"],
                   "chosen_us": m["chosen"], "plan": e["choice"]["plan"],
                   "saved_us_per_run": (m["nccl"] - m["chosen"]) * trips,
                   "upstream": e["upstream"]["backend"], "verdict": verdict(e)})
  return rows


def _comparison_html(rows):
  out = ["<table id=\"comparison\" class=\"decisions\"><tr><th>configuration</th>"
         "<th>collective-permute</th><th>bytes/device</th><th>edges</th><th>NCCL us</th>"
         "<th>NVSHMEM us</th><th>choice</th><th>saved per run (us)</th>"
         "<th>upstream XLA</th><th>what it shows</th></tr>"]
  for row in rows:
    edges = ", ".join(f"{k} {v}" for k, v in row["edges_by_class"].items() if v)
    trips = f" x{row['trip_count']} trips" if row["trip_count"] else ""
    cls = "add" if row["plan"] == "nvshmem" else "same"
    out.append(
        f"<tr><td><a href=\"#{df.esc(row['case'])}\">{df.esc(row['title'])}</a></td>"
        f"<td class=\"mono\">%{df.esc(row['instruction'])}</td>"
        f"<td>{df.esc(common.human_bytes(row['bytes']))} in {row['buffers']} buffer(s)"
        f"{df.esc(trips)}</td><td>{df.esc(edges)}</td><td>{_num(row['nccl_us'])}</td>"
        f"<td>{_num(row['nvshmem_us'])}</td><td class=\"{cls}\"><b>{df.esc(row['plan'])}</b>"
        f"</td><td>{_num(row['saved_us_per_run'])}</td><td>{df.esc(row['upstream'])}</td>"
        f"<td>{df.esc(row['verdict'])}</td></tr>")
  out.append("</table>")
  return "\n".join(out)


def _decision_table(result):
  by_name = {(d["computation"], d["instruction"]): d
             for d in result["passes"][result["first"]].get("decisions", [])}
  rows = [f"<table class=\"decisions\" id=\"decisions-{df.esc(result['case'].id)}\"><tr>"
          "<th>collective-permute</th><th>where</th><th>bytes/device</th><th>edges</th>"
          "<th>NCCL us</th><th>NVSHMEM us</th><th>choice</th><th>upstream XLA</th>"
          "<th>pass wrote</th><th>reason</th></tr>"]
  for e in result["explain"]["collectives"]:
    m = e["modeled_us"]
    d = by_name.get((e["computation"], e["instruction"]), {})
    edges = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v)
    loop = f"while %{e['while_loop']} x{e['trip_count']}" if e["while_loop"] else "no loop"
    new = ", ".join(d.get("new_instructions") or []) or "-"
    rows.append(
        f"<tr><td class=\"mono\">%{df.esc(e['instruction'])}</td>"
        f"<td class=\"mono\">%{df.esc(e['computation'])} line {e['line']}<br>{df.esc(loop)}</td>"
        f"<td>{df.esc(common.human_bytes(e['bytes']))}</td><td>{df.esc(edges)}</td>"
        f"<td>{_num(m['nccl'])}</td><td>{_num(m['nvshmem'])}</td>"
        f"<td><b>{df.esc(e['choice']['plan'])}</b> ({df.esc(e['choice']['backend'])})</td>"
        f"<td>{df.esc(e['upstream']['backend'])}<br><small>{df.esc(e['upstream']['source'])}"
        f"</small></td><td class=\"mono\">{df.esc(d.get('backend', '-'))}: {df.esc(new)}</td>"
        f"<td>{df.esc(e['reason'])}</td></tr>")
  rows.append("</table>")
  return "\n".join(rows)


def _verify_html(result):
  status = ("all checks pass" if result["passed"] else
            "FAILED: " + df.esc(", ".join(result["failed_checks"])))
  rows = [f"<p><b>{df.esc(result['file'])}</b>: {status}</p><table class=\"verify\">"
          "<tr><th>check</th><th>status</th><th>details</th></tr>"]
  for c in result["checks"]:
    cls = {"pass": "add", "fail": "del"}.get(c["status"], "same")
    detail = "<br>".join(
        df.esc((f"%{r['instruction']} line {r['line']}: " if r["instruction"] else "")
               + r["message"]) for r in c["results"]) or df.esc(c["note"])
    rows.append(f"<tr><td>{df.esc(c['name'])}</td><td class=\"{cls}\">{df.esc(c['status'])}"
                f"</td><td class=\"mono\">{detail}</td></tr>")
  rows.append("</table>")
  return "\n".join(rows)


def _case_html(result, max_rows):
  case = result["case"]
  chart = result["chart"]
  first = result["first"]
  body = [f"<h2 id=\"{df.esc(case.id)}\">{df.esc(case.title)}</h2>",
          f"<p>Decisions on the module {'entering async-collective-creator' if first == 'before_async' else 'as given'}"
          f" (<span class=\"mono\">{df.esc(case.id)}/hlo/{df.esc(first)}.hlo</span>):</p>",
          _decision_table(result),
          svg_chart(chart["series_us"], chart["marks"],
                    f"{len(chart['pairs'])}-edge permute of {chart['buffers']} buffer(s) on "
                    f"{case.topology}: modeled time vs size")]
  body += [_verify_html(v) for v in result["verify"].values()]
  for stage, d in result["diff"].items():
    body.append(f"<details><summary>Diff of {df.esc(stage)} before vs after the pass"
                "</summary>")
    body.append(df.diff_html(d, result["sources"][stage], result["rewritten"][stage],
                             max_rows=max_rows) if stage == first else
                df.collectives_html(d["collectives"]))
    body.append("</details>")
  if result["trace"]:
    body.append("<details><summary>Per-pass trace of each collective-permute</summary>")
    body.append(df.trace_html(result["trace"]))
    body.append("</details>")
  return "\n".join(body)


def render_page(report, results):
  timing = ", ".join(f"{k} {v:.2f} s" for k, v in report["timings_s"].items())
  cfg = results[0]["case"].config
  shapes = (f"{cfg['num_heads']} query / {cfg['num_kv_heads']} KV heads x {cfg['head_dim']}, "
            f"batch {cfg['batch']}, {cfg['dtype']}, {'causal' if cfg['causal'] else 'non-causal'}"
            f", {'forward+backward' if cfg['backward'] else 'forward'}; " if cfg else "")
  body = [
      "<h1>NVSHMEM collective-permute report</h1>",
      "<p>The pass gives each collective-permute the backend the selection core models "
      "as faster: NVSHMEM only where every edge stays in an NVLink domain and every "
      "device of the program has a source, NCCL elsewhere. "
      f"{df.esc(shapes)}cost table {df.esc(report['cost_table'] or 'default')}.</p>",
      "<h2>Side by side</h2>", _comparison_html(report["summary"]["comparison"]),
      f"<p class=\"mono\">versions: {df.esc(json.dumps(report['versions']))}<br>"
      f"timings: {df.esc(timing)}</p>"]
  max_rows = 4000 // len(results)
  body += [_case_html(r, max_rows) for r in results]
  body.append("<h2>Files</h2><ul>" + "".join(
      f"<li><a href=\"{df.esc(f)}\">{df.esc(f)}</a></li>" for f in report["files"]) + "</ul>")
  return df.page("NVSHMEM collective-permute report", "\n".join(body))


# ---------------------------------------------------------------------------------------
# Building the directory

def _check_out(out):
  if os.path.exists(out) and not os.path.isdir(out):
    raise InputError(f"--out {out}: exists and is not a directory")
  if os.path.isdir(out) and os.listdir(out) and \
      not os.path.exists(os.path.join(out, "report.json")):
    raise InputError(f"--out {out}: not empty and not an earlier report; "
                        "refusing to replace it")


def _versions(work, results):
  for r in results:
    path = os.path.join(work, r["case"].id, "dump", "manifest.json")
    if os.path.exists(path):
      with open(path) as f:
        return json.load(f).get("versions")
  return dump_mod._local_versions()  # pylint: disable=protected-access


def _files(work):
  out = []
  for root, _, names in os.walk(work):
    rel = os.path.relpath(root, work)
    if rel.split(os.sep)[1:2] == ["dump"]:
      continue  # the dump directories are listed by their manifest
    out += [os.path.normpath(os.path.join(rel, n)) for n in names]
  out += [os.path.join(d, "dump", "manifest.json") for d in os.listdir(work)
          if os.path.exists(os.path.join(work, d, "dump", "manifest.json"))]
  return sorted(out)


def build(cases, out, cost_table=None, num_partitions=None, progress=True,
          max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES):
  """Builds the report directory; returns the report.json dict."""
  for case in cases:
    decisions.load_selection(case.topology, cost_table)  # bad specs fail before any compile
  out = os.path.abspath(out)
  _check_out(out)
  work = outdir.make_work_dir(out)
  say = (lambda m: print(f"hlo-tools report: {m}", file=sys.stderr, flush=True)) \
      if progress else (lambda m: None)
  try:
    results, timings = [], {}
    for case in cases:
      t = time.monotonic()
      case_dir = os.path.join(work, case.id)
      stages, dump_dir = prepare_inputs(case, case_dir, say, max_bytes)
      results.append(analyze_case(case, case_dir, stages, dump_dir, cost_table,
                                  num_partitions, say))
      timings[case.id] = time.monotonic() - t
    report = {"cost_table": cost_table, "versions": _versions(work, results),
              "timings_s": timings,
              "cases": [case_summary(r, r["case"].id) for r in results],
              "summary": {"comparison": comparison_rows(results)}}
    report["summary"]["verify_passed"] = all(c["verify_passed"] for c in report["cases"])
    report["summary"]["failed_checks"] = sorted(
        {f for c in report["cases"] for f in c["failed_checks"]})
    report["files"] = ["index.html", "report.json"] + _files(work)
    _write(os.path.join(work, "report.json"), json.dumps(report, indent=1, default=str))
    _write(os.path.join(work, "index.html"), render_page(report, results))
    # mkdtemp made the directory private; a report is for reading.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(work, 0o777 & ~umask)
    outdir.publish(work, out)
    report["out"] = out
    return report
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise


def summary_text(report):
  lines = [f"NVSHMEM collective-permute report: {len(report['cases'])} configuration(s), "
           f"cost table {report['cost_table'] or 'default'}"]
  for row in report["summary"]["comparison"]:
    edges = ", ".join(f"{k} {v}" for k, v in row["edges_by_class"].items() if v)
    trips = f" x{row['trip_count']} trips" if row["trip_count"] else ""
    lines.append(f"  {row['title']}: %{row['instruction']} ({common.human_bytes(row['bytes'])}"
                 f"/device{trips}; {edges}): {row['plan']}, nccl {_num(row['nccl_us'])} us, "
                 f"nvshmem {_num(row['nvshmem_us'])} us; upstream {row['upstream']}; "
                 f"{row['verdict']}")
  s = report["summary"]
  lines.append("verify: " + ("all checks pass" if s["verify_passed"] else
                             "FAILED " + ", ".join(s["failed_checks"])))
  lines.append(f"report: {os.path.join(report['out'], 'index.html')}")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Command line

def _parser(prog):
  parser = common.parser_for(prog, __doc__)
  parser.add_argument("source", nargs="?", default=None,
                      help="absent: the embedded default; an HLO file, a dump directory "
                      "or module:function")
  parser.add_argument("--out", default=DEFAULT_OUT)
  parser.add_argument("--topology", default=None,
                      help=f"SxHxG or HxG, maybe with :nvlN / :map=... (default "
                      f"{DEFAULT_TOPOLOGY}; absent with no SOURCE: 1x1x8 and 1x2x4)")
  parser.add_argument("--cost-table", "--cost_table", dest="cost_table", default=None)
  for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
    parser.add_argument(f"--{key}", type=int, default=None)
  parser.add_argument("--dtype", choices=("bf16", "f16", "f32"), default=None)
  parser.add_argument("--causal", dest="causal", action="store_true", default=None)
  parser.add_argument("--nocausal", dest="causal", action="store_false")
  parser.add_argument("--backward", dest="backward", action="store_true", default=None)
  parser.add_argument("--nobackward", dest="backward", action="store_false")
  parser.add_argument("--arg", action="append", default=[],
                      help="module:function only: SHAPE:DTYPE[:PARTITIONSPEC]")
  parser.add_argument("--out_spec", default="cp", help="module:function only")
  parser.add_argument("--nocheck_vma", dest="check_vma", action="store_false", default=True,
                      help="module:function only: shard_map(check_vma=False)")
  parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
  common.add_partitions_flag(parser)
  cli_io.add_max_input_bytes(parser)
  return parser


def _config(prog, args):
  """The ring's shapes (defaults where not given) and whether any was given."""
  given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
  config = dict(DEFAULTS, **given)
  for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
    if config[key] < 1:
      raise InputError(f"{prog}: --{key} must be >= 1, got {config[key]}")
  return config, bool(given) or args.topology is not None


def _terminate(signum, _frame):
  raise SystemExit(128 + signum)  # runs the clean-up of the work directory


def main(argv):
  prog = argv[0] if argv else "hlo-tools report"
  parser = _parser(prog)

  def run(args):
    config, explicit = _config(prog, args)
    cases = plan_cases(args, config, explicit)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
      report = build(cases, args.out, args.cost_table, args.num_partitions,
                     progress=not args.quiet, max_bytes=args.max_input_bytes)
    finally:
      signal.signal(signal.SIGTERM, previous)
    print(summary_text(report))
    return 0 if report["summary"]["verify_passed"] else 1

  return common.run_command(parser, argv, run)


if __name__ == "__main__":
  sys.exit(cli_io.run_main(main, ["hlo-tools report"] + sys.argv[1:]))
