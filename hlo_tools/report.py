"""`hlo-tools report`: the whole story for one ring-attention model, as an HTML page.

    hlo-tools report [--out=DIR] [--topology=1x2x4] [--cost-table=F] [--seq_len=N]
                     [--num_heads=N] [--num_kv_heads=N] [--head_dim=N] [--batch=N]
                     [--dtype=bf16|f16|f32] [--causal|--nocausal] [--backward]

With no options: ring attention with Llama-3-8B attention shapes (32 query heads,
8 KV heads, head dim 128, bf16, 128K tokens, causal, forward), compiled
deviceless on this CPU for 8 H200s as 1 slice x 2 hosts x 4 GPUs, every XLA pass
dumped. Then:
  1. the NVSHMEM pass (nvshmem-opt) on the module entering async-collective-creator
     (what XLA's backend assigner sees) and on the after-optimizations module;
  2. explain: per collective-permute, the selection core's reasoning and upstream's;
  3. verify both rewritten modules against the topology;
  4. diff before/after the pass, and trace each collective-permute through XLA's passes;
  5. a chart of modeled time vs message size (1 KiB .. 1 GiB) per backend for the
     ring's pairs on this topology (selection.decide / edge_time_us).
DIR (default ./nvshmem_report) gets index.html, report.json, json/ (explain,
verify, diff, trace, the driver's reports), hlo/ (inputs and rewritten modules) and
dump/ (the stage directory). It is written to a temporary directory and moved into
place at the end; an existing DIR is replaced only if it holds an earlier report.

--topology takes SxHxG, HxG (one slice) or the selection core's SPEC
(SxHxG[:nvlN][:map=...]); the compile uses SxHxG.

Exit status: 0 report written and every check passed, 1 written but a verify check
failed, 2 error (bad option, compile failure, nvshmem-opt missing or failing).
"""

import json
import math
import os
import re
import shutil
import sys
import tempfile
import time

from hlo_tools import diff as df
from hlo_tools import dump as dump_mod
from hlo_tools import explain as ex
from hlo_tools import selection
from hlo_tools import verify as vf

# Llama-3-8B attention at 128K context.
DEFAULTS = {"seq_len": 131072, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
            "batch": 1, "dtype": "bf16", "causal": True, "backward": False}
DEFAULT_TOPOLOGY = "1x2x4"
DEFAULT_OUT = "nvshmem_report"
_TOPO_RE = re.compile(r"^(?:(\d+)x)?(\d+)x(\d+)((?::.*)?)$")
CHART_SIZES = [2 ** e for e in range(10, 31)]  # 1 KiB .. 1 GiB
COLORS = {"nccl": "#1f77b4", "nvshmem": "#2ca02c", "split": "#ff7f0e",
          "chosen": "#000000", "nccl_net": "#9467bd", "nvshmem_nvl": "#8c564b"}


def parse_topology_arg(spec):
  """'2x4' -> ('1x2x4', '1x2x4'); '1x2x4:nvl8' -> ('1x2x4', '1x2x4:nvl8')."""
  m = _TOPO_RE.match(spec or "")
  if not m:
    raise ex.InputError(f"bad --topology {spec!r}: expected SxHxG or HxG, e.g. 1x2x4")
  slices = m.group(1) or "1"
  compile_topo = f"{slices}x{m.group(2)}x{m.group(3)}"
  return compile_topo, compile_topo + m.group(4)


# ---------------------------------------------------------------------------------------
# The chart

def chart_series(topology, table, pairs, num_partitions):
  """Modeled microseconds per backend at each chart size, for the ring's pairs."""
  series = {k: [] for k in ("nccl", "nvshmem", "split", "chosen", "nccl_net",
                            "nvshmem_nvl")}
  for size in CHART_SIZES:
    d = selection.decide(topology, table, size, pairs, True, num_partitions, 1)
    series["nccl"].append(d["nccl_us"])
    series["nvshmem"].append(d["nvshmem_us"])
    series["split"].append(d["split_us"])
    series["chosen"].append(d["chosen_us"])
    series["nccl_net"].append(selection.edge_time_us(table, "nccl", "network", size))
    series["nvshmem_nvl"].append(selection.edge_time_us(table, "nvshmem", "nvlink", size))
  return series


_LABELS = {"nccl": "NCCL (whole permute)", "nvshmem": "NVSHMEM (whole permute, if eligible)",
           "split": "split NVSHMEM+NCCL", "chosen": "chosen by the core",
           "nccl_net": "one NCCL network edge", "nvshmem_nvl": "one NVSHMEM NVLink edge"}


def svg_chart(series, marks, title):
  """Log-log SVG line chart, self-contained (no scripts, no external files)."""
  w, h, left, right, top, bottom = 900, 460, 70, 250, 30, 50
  pw, ph = w - left - right, h - top - bottom
  values = [v for s in series.values() for v in s if v]
  lo = 10 ** math.floor(math.log10(min(values)))
  hi = 10 ** math.ceil(math.log10(max(values)))
  x0, x1 = math.log2(CHART_SIZES[0]), math.log2(CHART_SIZES[-1])

  def x(size):
    return left + (math.log2(size) - x0) / (x1 - x0) * pw

  def y(v):
    return top + (1 - (math.log10(v) - math.log10(lo)) /
                  (math.log10(hi) - math.log10(lo))) * ph

  out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         f'viewBox="0 0 {w} {h}" role="img" aria-label="{df.esc(title)}">',
         f'<text x="{left}" y="18" font-size="14" font-weight="600">{df.esc(title)}</text>',
         f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
  decade = lo
  while decade <= hi * 1.0001:
    yy = y(decade)
    out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" '
               'stroke="#eee"/>')
    label = f"{decade:g}"
    out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" '
               f'text-anchor="end">{label}</text>')
    decade *= 10
  for size in CHART_SIZES[::2]:
    xx = x(size)
    out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" stroke="#eee"/>')
    out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" font-size="11" '
               f'text-anchor="middle">{df.esc(ex.human_bytes(size).replace(".0 ", " "))}</text>')
  out.append(f'<text x="{left + pw / 2}" y="{h - 8}" font-size="12" text-anchor="middle">'
             'bytes per device</text>')
  out.append(f'<text x="16" y="{top + ph / 2}" font-size="12" text-anchor="middle" '
             f'transform="rotate(-90 16 {top + ph / 2})">modeled time (us)</text>')
  for name, label in marks:
    if CHART_SIZES[0] <= name <= CHART_SIZES[-1]:
      xx = x(name)
      out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" '
                 'stroke="#d62728" stroke-dasharray="4 3"/>')
      out.append(f'<text x="{xx + 3:.1f}" y="{top + 12}" font-size="11" '
                 f'fill="#d62728">{df.esc(label)}</text>')
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
    if cur:
      segs.append(cur)
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
  out.append("</svg>")
  return "\n".join(out)


# ---------------------------------------------------------------------------------------
# The page

def _decision_table(explained, pass_report):
  by_name = {(d["computation"], d["instruction"]): d
             for d in (pass_report or {}).get("decisions", [])}
  rows = ["<table id=\"decisions\" class=\"decisions\"><tr><th>collective-permute</th>"
          "<th>where</th><th>bytes/device</th><th>edges</th><th>NCCL us</th>"
          "<th>NVSHMEM us</th><th>split us</th><th>choice</th><th>upstream XLA</th>"
          "<th>pass wrote</th><th>reason</th></tr>"]
  for e in explained["collectives"]:
    m = e["modeled_us"]
    d = by_name.get((e["computation"], e["instruction"]), {})
    edges = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v)
    loop = (f"while %{e['while_loop']} x{e['trip_count']}" if e["while_loop"] else "no loop")
    new = ", ".join(d.get("new_instructions") or []) or "-"
    rows.append(
        f"<tr><td class=\"mono\">%{df.esc(e['instruction'])}</td>"
        f"<td class=\"mono\">%{df.esc(e['computation'])} line {e['line']}<br>{df.esc(loop)}</td>"
        f"<td>{df.esc(ex.human_bytes(e['bytes']))}</td><td>{df.esc(edges)}</td>"
        f"<td>{df.esc(_num(m['nccl']))}</td><td>{df.esc(_num(m['nvshmem']))}</td>"
        f"<td>{df.esc(_num(m['split']))}</td>"
        f"<td><b>{df.esc(e['choice']['plan'])}</b> ({df.esc(e['choice']['backend'])})</td>"
        f"<td>{df.esc(e['upstream']['backend'])}<br><small>{df.esc(e['upstream']['source'])}"
        f"</small></td><td class=\"mono\">{df.esc(d.get('backend', '-'))}: {df.esc(new)}</td>"
        f"<td>{df.esc(e['reason'])}</td></tr>")
  rows.append("</table>")
  return "\n".join(rows)


def _num(v):
  return "-" if v is None else f"{v:.2f}"


def _verify_html(result):
  rows = [f"<p><b>{df.esc(result['file'])}</b>: "
          f"{'all checks pass' if result['passed'] else 'FAILED: ' + df.esc(', '.join(result['failed_checks']))}"
          "</p><table class=\"verify\"><tr><th>check</th><th>status</th><th>details</th></tr>"]
  for c in result["checks"]:
    cls = {"pass": "add", "fail": "del"}.get(c["status"], "same")
    detail = "<br>".join(
        df.esc((f"%{r['instruction']} line {r['line']}: " if r["instruction"] else "")
               + r["message"]) for r in c["results"]) or df.esc(c["note"])
    rows.append(f"<tr><td>{df.esc(c['name'])}</td><td class=\"{cls}\">{df.esc(c['status'])}"
                f"</td><td class=\"mono\">{detail}</td></tr>")
  rows.append("</table>")
  return "\n".join(rows)


def render_page(ctx):
  cfg, s = ctx["config"], ctx["summary"]
  timing = ", ".join(f"{k} {v:.2f} s" for k, v in ctx["timings"].items())
  body = [
      "<h1>NVSHMEM collective-permute report</h1>",
      f"<p>Ring attention, seq_len {cfg['seq_len']}, {cfg['num_heads']} query / "
      f"{cfg['num_kv_heads']} KV heads x {cfg['head_dim']}, batch {cfg['batch']}, "
      f"{df.esc(cfg['dtype'])}, {'causal' if cfg['causal'] else 'non-causal'}, "
      f"{'forward+backward' if cfg['backward'] else 'forward'}; compiled deviceless for "
      f"{s['num_devices']} H200s as {df.esc(ctx['topology'])}"
      f"{' with cost table ' + df.esc(ctx['cost_table']) if ctx['cost_table'] else ''}.</p>",
      f"<p class=\"mono\">versions: {df.esc(json.dumps(ctx['versions']))}<br>"
      f"timings: {df.esc(timing)}</p>",
      "<h2>Decisions (module entering async-collective-creator)</h2>",
      _decision_table(ctx["explain"], ctx["pass_reports"]["before_async"]),
      "<h2>Modeled time vs message size</h2>",
      ctx["chart"],
      "<h2>Verify</h2>",
      _verify_html(ctx["verify"]["before_async"]),
      _verify_html(ctx["verify"]["after_optimizations"]),
      "<h2>Before vs after the pass</h2>",
      "<p>Module entering async-collective-creator, before and after nvshmem-opt:</p>",
      df.diff_html(ctx["diff"], ctx["sources"]["a"], ctx["sources"]["b"]),
      "<h3>After XLA's optimizations, before and after nvshmem-opt</h3>",
      df.collectives_html(ctx["diff_after_opt"]["collectives"]),
      "<h2>Per-pass trace of each collective-permute</h2>",
      df.trace_html(ctx["trace"]),
      "<h2>Files</h2><ul>" + "".join(
          f"<li><a href=\"{df.esc(f)}\">{df.esc(f)}</a></li>" for f in ctx["files"]) + "</ul>",
  ]
  return df.page("NVSHMEM collective-permute report", "\n".join(body))


# ---------------------------------------------------------------------------------------
# Running it

def _timed(timings, name, fn, *args, **kwargs):
  t = time.monotonic()
  value = fn(*args, **kwargs)
  timings[name] = time.monotonic() - t
  return value


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def _run_pass(work, name, topology, cost_table):
  """nvshmem-opt (rewrite mode, upstream comparison) on hlo/<name>.hlo."""
  src = os.path.join(work, "hlo", f"{name}.hlo")
  out = os.path.join(work, "hlo", f"{name}.nvshmem.hlo")
  try:
    rc, report, message = ex.run_nvshmem_opt(src, topology, cost_table, mode="rewrite",
                                             out=out, compare_upstream=True, tmp_dir=work)
  except FileNotFoundError as e:
    raise ex.InputError(f"hlo-tools report: {e}") from None
  if rc != 0:
    raise ex.InputError(f"hlo-tools report: nvshmem-opt failed on {name}.hlo "
                        f"(exit {rc}): {message}")
  _write(os.path.join(work, "json", f"pass_{name}.json"), json.dumps(report, indent=1))
  return report, out


def _check_out(out):
  if os.path.exists(out) and not os.path.isdir(out):
    raise ex.InputError(f"--out {out}: exists and is not a directory")
  if os.path.isdir(out) and os.listdir(out) and \
      not os.path.exists(os.path.join(out, "report.json")):
    raise ex.InputError(f"--out {out}: not empty and not an earlier report; "
                        "refusing to replace it")


def build(config, topology_arg, out, cost_table=None, progress=True):
  """Builds the report directory; returns the report.json dict."""
  compile_topo, topo_spec = parse_topology_arg(topology_arg)
  topology, table = ex.load_selection(topo_spec, cost_table)
  out = os.path.abspath(out)
  _check_out(out)
  work = dump_mod.make_work_dir(out)
  timings = {}
  say = (lambda m: print(f"hlo-tools report: {m}", file=sys.stderr, flush=True)) \
      if progress else (lambda m: None)
  try:
    dump_dir = os.path.join(work, "dump")
    say(f"compiling ring attention for {compile_topo} (deviceless, all passes)")
    target = dump_mod.Target(topology=compile_topo)
    try:
      manifest = _timed(timings, "compile", dump_mod.dump,
                        {"kind": "ring", "config": config}, dump_dir, target=target,
                        all_passes=True, options=dict(config), progress=False)
    except dump_mod.DumpError as e:
      raise ex.InputError(f"hlo-tools report: compile failed: {e}") from None
    before = df.read_stage(dump_dir, "before_async")
    _write(os.path.join(work, "hlo", "before_async.hlo"), before.text)
    shutil.copyfile(os.path.join(dump_dir, "after_optimizations.hlo"),
                    os.path.join(work, "hlo", "after_optimizations.hlo"))
    say("running nvshmem-opt")
    t = time.monotonic()
    pass_reports, rewritten = {}, {}
    for name in ("before_async", "after_optimizations"):
      pass_reports[name], rewritten[name] = _run_pass(work, name, topo_spec, cost_table)
    timings["nvshmem-opt"] = time.monotonic() - t
    src_before = ex.read_source(os.path.join(work, "hlo", "before_async.hlo"),
                                "hlo/before_async.hlo")
    src_after = ex.read_source(rewritten["before_async"], "hlo/before_async.nvshmem.hlo")
    explained = _timed(timings, "explain", ex.explain, src_before.path, topo_spec,
                       cost_table, source=src_before)
    say("verifying")
    t = time.monotonic()
    verified = {
        "before_async": vf.verify(rewritten["before_async"], topo_spec, cost_table,
                                  source=src_after),
        "after_optimizations": vf.verify(
            rewritten["after_optimizations"], topo_spec, cost_table,
            source=ex.read_source(rewritten["after_optimizations"],
                                  "hlo/after_optimizations.nvshmem.hlo")),
    }
    timings["verify"] = time.monotonic() - t
    say("diffing and tracing")
    t = time.monotonic()
    diff_result = df.diff_sources(src_before, src_after)
    src_opt = ex.read_source(os.path.join(work, "hlo", "after_optimizations.hlo"),
                             "hlo/after_optimizations.hlo")
    src_opt_pass = ex.read_source(rewritten["after_optimizations"],
                                  "hlo/after_optimizations.nvshmem.hlo")
    diff_after_opt = df.diff_sources(src_opt, src_opt_pass)
    tr = df.trace(dump_dir)
    timings["diff+trace"] = time.monotonic() - t
    perms = explained["collectives"]
    ring_pairs = ([tuple(p) for p in perms[0]["pairs"]] if perms else
                  [(i, (i + 1) % topology.num_devices) for i in range(topology.num_devices)])
    series = chart_series(topology, table, ring_pairs, src_before.module.num_partitions)
    marks = sorted({(e["bytes"], ex.human_bytes(e["bytes"])) for e in perms})
    chart = svg_chart(series, marks, f"{len(ring_pairs)}-edge ring on {topo_spec}")
    files = ["report.json", "json/explain.json", "json/verify_before_async.json",
             "json/verify_after_optimizations.json", "json/diff.json",
             "json/diff_after_optimizations.json", "json/trace.json",
             "json/pass_before_async.json", "json/pass_after_optimizations.json",
             "json/chart.json", "hlo/before_async.hlo", "hlo/before_async.nvshmem.hlo",
             "hlo/after_optimizations.hlo", "hlo/after_optimizations.nvshmem.hlo",
             "dump/manifest.json"]
    for name, value in (("explain", explained),
                        ("verify_before_async", verified["before_async"]),
                        ("verify_after_optimizations", verified["after_optimizations"]),
                        ("diff", df.to_json(diff_result)),
                        ("diff_after_optimizations", df.to_json(diff_after_opt)),
                        ("trace", tr),
                        ("chart", {"sizes": CHART_SIZES, "series_us": series,
                                   "pairs": ring_pairs})):
      _write(os.path.join(work, "json", f"{name}.json"), json.dumps(value, indent=1))
    summary = {
        "num_devices": topology.num_devices,
        "collective_permutes": [
            {k: e[k] for k in ("instruction", "computation", "bytes", "edges_by_class",
                               "modeled_us", "choice", "reason", "trip_count")}
            | {"upstream": e["upstream"]["backend"]} for e in perms],
        "verify_passed": all(v["passed"] for v in verified.values()),
        "failed_checks": sorted({c for v in verified.values() for c in v["failed_checks"]}),
    }
    report = {"config": config, "topology": topo_spec, "compile_topology": compile_topo,
              "cost_table": cost_table, "versions": manifest.get("versions"),
              "timings_s": timings, "summary": summary, "files": files}
    _write(os.path.join(work, "report.json"), json.dumps(report, indent=1))
    ctx = {"config": config, "topology": topo_spec, "cost_table": cost_table,
           "versions": manifest.get("versions"), "timings": timings, "summary": summary,
           "explain": explained, "pass_reports": pass_reports, "verify": verified,
           "diff": diff_result, "diff_after_opt": diff_after_opt, "trace": tr,
           "chart": chart, "files": ["index.html"] + files,
           "sources": {"a": src_before, "b": src_after}}
    _write(os.path.join(work, "index.html"), render_page(ctx))
    # mkdtemp made these private; a report is for reading, so use the umask's mode.
    umask = os.umask(0)
    os.umask(umask)
    for path in (work, dump_dir):
      os.chmod(path, 0o777 & ~umask)
    dump_mod.publish(work, out)
    report["out"] = out
    return report
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise


def summary_text(report):
  cfg, s = report["config"], report["summary"]
  lines = [f"ring attention seq_len {cfg['seq_len']}, {cfg['num_heads']}/{cfg['num_kv_heads']}"
           f" heads x {cfg['head_dim']}, {cfg['dtype']}, "
           f"{'causal' if cfg['causal'] else 'non-causal'}"
           f"{', backward' if cfg['backward'] else ''} on {report['topology']} "
           f"({s['num_devices']} H200)",
           "timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in report["timings_s"].items())]
  for p in s["collective_permutes"]:
    m = p["modeled_us"]
    edges = ", ".join(f"{k} {v}" for k, v in p["edges_by_class"].items() if v)
    trips = f" x{p['trip_count']} trips" if p["trip_count"] else ""
    lines.append(f"  %{p['instruction']} ({ex.human_bytes(p['bytes'])}/device{trips}; "
                 f"{edges}): {p['choice']['plan']} [{p['choice']['backend']}], "
                 f"nccl {_num(m['nccl'])} us, nvshmem {_num(m['nvshmem'])} us, split "
                 f"{_num(m['split'])} us; upstream {p['upstream']}")
  lines.append("verify: " + ("all checks pass" if s["verify_passed"] else
                             "FAILED " + ", ".join(s["failed_checks"])))
  lines.append(f"report: {os.path.join(report['out'], 'index.html')}")
  return "\n".join(lines)


def main(argv):
  prog = argv[0] if argv else "hlo-tools report"
  parser = ex.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=DEFAULT_OUT)
  parser.add_argument("--topology", default=DEFAULT_TOPOLOGY)
  parser.add_argument("--cost-table", "--cost_table", dest="cost_table", default=None)
  for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
    parser.add_argument(f"--{key}", type=int, default=DEFAULTS[key])
  parser.add_argument("--dtype", choices=("bf16", "f16", "f32"), default=DEFAULTS["dtype"])
  parser.add_argument("--causal", dest="causal", action="store_true", default=True)
  parser.add_argument("--nocausal", dest="causal", action="store_false")
  parser.add_argument("--backward", dest="backward", action="store_true", default=False)
  parser.add_argument("--nobackward", dest="backward", action="store_false")
  parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
  try:
    args = parser.parse_args(argv[1:])
    config = {k: getattr(args, k) for k in DEFAULTS}
    for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
      if config[key] < 1:
        raise ex.InputError(f"{prog}: --{key} must be >= 1, got {config[key]}")
    report = build(config, args.topology, args.out, args.cost_table,
                   progress=not args.quiet)
  except ex.InputError as e:
    print(str(e), file=sys.stderr)
    return 2
  except OSError as e:
    print(f"{prog}: {e}", file=sys.stderr)
    return 2
  print(summary_text(report))
  return 0 if report["summary"]["verify_passed"] else 1


if __name__ == "__main__":
  sys.exit(main(["hlo-tools report"] + sys.argv[1:]))
