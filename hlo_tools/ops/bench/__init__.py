"""The P1-P3 benchmarks: the pass's and the tools' speed, each next to the reference it
competes with (the goals: hlo_tools.commands.bench's help)."""

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hlo_tools import atomic_output
from hlo_tools.ops.bench import programs, reader

GOALS = {"P1": 0.005, "P2": 1.0, "P3": 1.5, "HOOK": 1.15}
# P3's per-instruction diff time at ~100k instructions over that at ~10k: 1.0 is linear.
GROWTH_GOAL = 1.2
FULL = {
  "layers": 32,
  "seq_len": 8192,
  "ring_layers": 2400,
  "ring_small": 240,
  "hook_small": 8,
  "hook_large": 32,
  "runs": 5,
}
QUICK = {
  "layers": 1,
  "seq_len": 8192,
  "ring_layers": 60,
  "ring_small": 12,
  "hook_small": 2,
  "hook_large": 4,
  "runs": 1,
}

Result = dict[str, Any]  # a figure's record, as `hlo-tools bench` writes it in JSON


def stats(samples: Sequence[float]) -> Result:
  """Median, min and max of a list of numbers (the samples kept for the record)."""
  return {
    "median": statistics.median(samples),
    "min": min(samples),
    "max": max(samples),
    "n": len(samples),
    "samples": samples,
  }


def _log(message: str) -> None:
  print(f"hlo-tools bench: {message}", file=sys.stderr, flush=True)


def _keep(keep_dir: str | None, name: str, text: str) -> None:
  if keep_dir:
    os.makedirs(keep_dir, exist_ok=True)
    atomic_output.write_atomic(os.path.join(keep_dir, name), text)


# ---------------------------------------------------------------------------------------
# P1


def run_pass(
  path: str, out_path: str, topology: str | None = programs.TOPOLOGY
) -> tuple[float, float, dict[str, Any]]:
  """One nvshmem-opt run: (pass seconds from its report, whole-process seconds)."""
  from hlo_tools.model import driver  # pylint: disable=import-outside-toplevel

  exe = driver.find_nvshmem_opt()
  if exe is None:
    raise RuntimeError(driver.NOT_INSTALLED)
  cmd = [exe, path, "--report=-", "-o", out_path]
  if topology:  # None: the driver derives it from the module
    cmd.append(f"--topology={topology}")
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, env=driver.driver_env(), capture_output=True, text=True, check=False)
  wall = time.perf_counter() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"nvshmem-opt failed: {driver.first_message(proc.stderr)}")
  report: dict[str, Any] = json.loads(proc.stdout)
  return report["pass_us"] * 1e-6, wall, report


def bench_p1(sizes: Mapping[str, int], runs: int, keep_dir: str | None = None) -> Result:
  config = {"num_layers": sizes["layers"], "seq_len": sizes["seq_len"]}
  program = {"name": "llama", "config": config}
  _log(f"P1: dumping the before-async module of a {sizes['layers']}-layer Llama stack")
  raw = programs.before_async_text(program)
  # See legacy_replica_groups: the pinned XLA parser cannot read jaxlib 0.10's
  # mesh-style replica groups, so they are spelled out first (same groups).
  text = programs.legacy_replica_groups(raw)
  rewritten_groups = raw.count("replica_groups=mesh[")
  _keep(keep_dir, "p1_llama.before_async.hlo", text)
  module = _module_size(text)
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-p1-") as tmp:
    path = os.path.join(tmp, "before_async.hlo")
    with open(path, "w") as f:
      f.write(text)
    # The compile child goes first and alone: the two cores are its, not shared.
    _log(f"P1: timing XLA's compile ({runs} runs, in a child)")
    compile_s = programs.compile_times(program, runs)
    _log(f"P1: timing nvshmem-opt ({max(runs, 5)} runs)")
    pass_s: list[float] = []
    process_s: list[float] = []
    report: dict[str, Any] = {}
    for _ in range(max(runs, 5)):
      p, w, report = run_pass(path, os.path.join(tmp, "out.hlo"))
      pass_s.append(p)
      process_s.append(w)
  ratio = statistics.median(pass_s) / statistics.median(compile_s)
  decisions = report.get("decisions") or []
  return {
    "ratio": ratio,
    # Bounds, not paired runs: the compile and the pass run in different processes.
    "ratio_min": min(pass_s) / max(compile_s),
    "ratio_max": max(pass_s) / min(compile_s),
    "goal": GOALS["P1"],
    "met": ratio <= GOALS["P1"],
    "pass_s": stats(pass_s),
    "process_s": stats(process_s),
    "process_ratio": statistics.median(process_s) / statistics.median(compile_s),
    "compile_s": stats(compile_s),
    "module": dict(
      module,
      program="llama",
      topology=programs.TOPOLOGY,
      num_layers=sizes["layers"],
      seq_len=sizes["seq_len"],
      hidden=4096,
      num_heads=32,
      num_kv_heads=8,
      head_dim=128,
      mlp=14336,
      dtype="bf16",
      cp=8,
      mesh_replica_groups_rewritten=rewritten_groups,
      permutes_decided=len(decisions),
    ),
  }


def _module_size(text: str) -> dict[str, int]:
  """Bytes, lines, instructions and collective-permutes of a module's text.

  Counted with a line regex, not a parser: hlo_text rejects jaxlib 0.10's mesh
  replica groups in the raw Llama module, and the count must not depend on that.
  """
  import re  # pylint: disable=import-outside-toplevel

  n = len(re.findall(r"^\s+(?:ROOT )?%?[\w.\-]+ = ", text, flags=re.M))
  return {
    "bytes": len(text.encode()),
    "lines": text.count("\n"),
    "instructions": n,
    "collective_permutes": len(re.findall(r" collective-permute(?:-start)?\(", text)),
  }


# ---------------------------------------------------------------------------------------
# P2


def bench_p2(sizes: Mapping[str, int], runs: int, keep_dir: str | None = None) -> Result:
  layers = sizes["ring_layers"]
  _log(f"P2: compiling an unrolled {layers}-step ring for its HLO text")
  text = _ring_texts(layers)[1]
  _keep(keep_dir, "p2_ring.after_optimizations.hlo", text)
  _log(f"P2: parsing {len(text) / 1e6:.1f} MB, {runs} runs each, interleaved")
  r = reader.bench_parse(text, runs)
  ours, theirs = r["ours_samples"], r["jaxlib_samples"]
  ratios = [a / b for a, b in zip(ours, theirs)]
  ratio = statistics.median(ours) / statistics.median(theirs)
  memory = _p2_memory(text)
  return {
    "ratio": ratio,
    "ratio_min": min(ratios),
    "ratio_max": max(ratios),
    "goal": GOALS["P2"],
    "met": ratio <= GOALS["P2"],
    "ours_s": stats(ours),
    "jaxlib_s": stats(theirs),
    "module": dict(_module_size(text), program="ring", ring_layers=layers),
    "memory": memory,
  }


_MEMORY_CHILD = r"""
import gc, json, resource, sys
which, path = sys.argv[1], sys.argv[2]
with open(path) as f:
  text = f.read()
if which == "ours":
  from hlo_tools.hlo.reader import parse_hlo_text as parse
else:
  from jaxlib._hlo import hlo_module_from_text as parse
gc.collect()
def status_kb(key):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(key + ":"):
        return int(line.split()[1])
# Reset the peak-RSS mark (VmHWM) so that reading the file does not count.
with open("/proc/self/clear_refs", "w") as f:
  f.write("5")
before = status_kb("VmRSS")
module = parse(text)
print(json.dumps({"rss_before_kb": before, "hwm_kb": status_kb("VmHWM"),
                  "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _p2_memory(text: str) -> dict[str, float]:
  """Peak memory of each parser: RSS growth in a fresh child, and ours by tracemalloc."""
  import tracemalloc  # pylint: disable=import-outside-toplevel

  from hlo_tools.hlo.reader import parse_hlo_text  # pylint: disable=import-outside-toplevel

  result: dict[str, float] = {}
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-p2-") as tmp:
    path = os.path.join(tmp, "module.hlo")
    with open(path, "w") as f:
      f.write(text)
    for which in ("ours", "jaxlib"):
      # Peak growth = VmHWM after the parse - VmRSS before it, with the peak mark
      # reset just before. Not ru_maxrss: on Linux a child's ru_maxrss starts at
      # its parent's RSS at fork (about 100 MB once this process has imported
      # jaxlib), which swamps a small parse.
      proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, which, path],
        capture_output=True,
        text=True,
        check=True,
        env=programs._env(),
      )  # pylint: disable=protected-access
      r = json.loads(proc.stdout.strip().splitlines()[-1])
      result[f"{which}_rss_peak_mb"] = (r["hwm_kb"] - r["rss_before_kb"]) / 1024
  tracemalloc.start()
  module = parse_hlo_text(text)
  _, peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  del module
  result["ours_tracemalloc_peak_mb"] = peak / 2**20
  result["rss_ratio"] = result["ours_rss_peak_mb"] / max(result["jaxlib_rss_peak_mb"], 1e-9)
  return result


# ---------------------------------------------------------------------------------------
# P3

_RING_TEXTS: dict[int, tuple[str, str]] = {}


def _ring_texts(layers: int) -> tuple[str, str]:
  """(before-async, optimized) texts of the ring, compiled once for P2 and P3."""
  if layers not in _RING_TEXTS:
    _RING_TEXTS[layers] = programs.both_texts({"name": "ring", "layers": layers})
  return _RING_TEXTS[layers]


def _diff_pair(layers: int, keep_dir: str | None, tag: str) -> tuple[str, str]:
  """A ring module as XLA's async conversion gets it, and the pass's rewrite of it."""
  text_a = _ring_texts(layers)[0]
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-p3-") as tmp:
    path_a, path_b = os.path.join(tmp, "a.hlo"), os.path.join(tmp, "b.hlo")
    with open(path_a, "w") as f:
      f.write(text_a)
    run_pass(path_a, path_b)
    with open(path_b) as f:
      text_b = f.read()
  _keep(keep_dir, f"p3_{tag}.before_async.hlo", text_a)
  _keep(keep_dir, f"p3_{tag}.after_pass.hlo", text_b)
  return text_a, text_b


def _time_diff(text_a: str, text_b: str, runs: int) -> Result:
  from hlo_tools.model import sources  # pylint: disable=import-outside-toplevel
  from hlo_tools.ops import diff  # pylint: disable=import-outside-toplevel

  parse_s: list[float] = []
  diff_s: list[float] = []
  total_s: list[float] = []
  ratios: list[float] = []
  summary = None
  for _ in range(runs):
    gc.collect()  # each run starts from a collected heap, as a fresh command does
    t0 = time.perf_counter()
    # As `hlo-tools diff A B --format=json` runs (hlo_tools/commands/diff.py), its
    # collector setting included: both modules read, their partition counts settled,
    # then the diff and its JSON with the collector paused.
    src_a = sources.read_text("a.hlo", text_a)
    src_b = sources.read_text("b.hlo", text_b)
    for src in (src_a, src_b):
      sources.resolve_partitions(src)
    t1 = time.perf_counter()
    with diff.collector_paused():
      result = diff.diff_sources(src_a, src_b, False)
      out = diff.format_json(result)
      t2 = time.perf_counter()
    parse_s.append(t1 - t0)
    diff_s.append(t2 - t1)
    total_s.append(t2 - t0)
    ratios.append((t2 - t1) / (t1 - t0))
    summary = dict(result["summary"], json_bytes=len(out))
  return {
    "parse_s": stats(parse_s),
    "diff_s": stats(diff_s),
    "ratio_runs": ratios,
    "summary": summary,
  }


def bench_p3(sizes: Mapping[str, int], runs: int, keep_dir: str | None = None) -> Result:
  result: dict[str, Result] = {}
  for tag, layers in (("small", sizes["ring_small"]), ("large", sizes["ring_layers"])):
    _log(f"P3: dumping a {layers}-step ring and running the pass on it ({tag})")
    text_a, text_b = _diff_pair(layers, keep_dir, tag)
    _log(f"P3: diffing ({tag}, {runs} runs)")
    r = _time_diff(text_a, text_b, runs)
    r["ring_layers"] = layers
    r["instructions"] = r["summary"]["instructions_a"] + r["summary"]["instructions_b"]
    r["bytes"] = len(text_a.encode()) + len(text_b.encode())
    result[tag] = r
  large, small = result["large"], result["small"]
  ratio = large["diff_s"]["median"] / large["parse_s"]["median"]
  per_instr = {k: result[k]["diff_s"]["median"] / result[k]["instructions"] for k in result}
  growth = per_instr["large"] / per_instr["small"]
  return {
    "ratio": ratio,
    "ratio_min": min(large["ratio_runs"]),
    "ratio_max": max(large["ratio_runs"]),
    "goal": GOALS["P3"],
    "met": ratio <= GOALS["P3"],
    "growth": growth,
    "growth_goal": GROWTH_GOAL,
    "growth_met": growth <= GROWTH_GOAL,
    "size_factor": large["instructions"] / small["instructions"],
    "diff_us_per_instruction": {k: v * 1e6 for k, v in per_instr.items()},
    "small": small,
    "large": large,
  }


# ---------------------------------------------------------------------------------------
# Output


def _range(st: Mapping[str, float], scale: float = 1e3, fmt: str = "{:.1f}") -> str:
  return (
    f"{fmt.format(st['median'] * scale)} [{fmt.format(st['min'] * scale)}, "
    f"{fmt.format(st['max'] * scale)}]"
  )


def table(result: Result) -> str:
  """The human-readable summary: one block per figure, medians [min, max]."""
  lines = []
  m, v = result["machine"], result["versions"]
  lines.append(
    f"machine: {m['cpu_model']}, {m['cpus_usable']} usable of "
    f"{m['cpu_count']} cores, {m['mem_total_gb']:.1f} GB RAM; {m['platform']}"
  )
  lines.append("versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
  quick = " (--quick: sizes too small for the goals)" if result["quick"] else ""
  lines.append(f"runs: {result['runs']}{quick}")
  lines.append("")
  lines.append(f"{'figure':<20} {'ratio':>10} {'[min, max]':>22} {'goal':>8}  met")
  for key, name in (
    ("P1", "P1 pass overhead"),
    ("P2", "P2 reader speed"),
    ("P3", "P3 diff / parse"),
  ):
    r = result.get(key)
    if r is None:
      continue
    if "skipped" in r:
      lines.append(f"{name:<20} skipped: {r['skipped']}")
      continue
    if key == "P1":
      vals = (
        f"{r['ratio'] * 100:.4f}%",
        f"[{r['ratio_min'] * 100:.4f}%, {r['ratio_max'] * 100:.4f}%]",
        f"{r['goal'] * 100:.1f}%",
      )
    else:
      vals = (
        f"{r['ratio']:.2f}",
        f"[{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]",
        f"{r['goal']:.1f}",
      )
    lines.append(
      f"{name:<20} {vals[0]:>10} {vals[1]:>22} {vals[2]:>8}  {'yes' if r['met'] else 'NO'}"
    )
  r = result.get("HOOK")
  if r is not None:
    sizes = "[" + ", ".join(f"{r[t]['ratio']:.2f}" for t in ("hook_small", "hook_large")) + "]"
    lines.append(
      f"{'HOOK compile ratio':<20} {r['ratio']:>10.2f} {sizes:>22} {r['goal']:>8.2f}  "
      f"{'yes' if r['met'] else 'NO'} (hook.compile / plain compile; [small, large])"
    )
  if "P3" in result and "growth" in result["P3"]:
    r = result["P3"]
    lines.append(
      f"{'P3 growth':<20} {r['growth']:>10.2f} {'':>22} {r['growth_goal']:>8.1f}  "
      f"{'yes' if r['growth_met'] else 'NO'} (per-instruction diff time, "
      f"{r['size_factor']:.1f}x more instructions)"
    )
  lines.append("")
  lines.append("raw times, median [min, max]:")
  # A skipped figure has a row above and no times.
  timed = {k: r for k, r in result.items() if isinstance(r, dict) and "skipped" not in r}
  if "P1" in timed:
    r = result["P1"]
    mod = r["module"]
    lines.append(
      f"  P1 module: Llama-3-8B-shaped, {mod['num_layers']} layers, seq "
      f"{mod['seq_len']} (CP=8, {programs.TOPOLOGY}), fwd+bwd: "
      f"{mod['instructions']} instructions, {mod['collective_permutes']} "
      f"collective-permutes, {mod['bytes'] / 1e6:.1f} MB before-async text"
    )
    lines.append(f"  P1 nvshmem-opt pass      {_range(r['pass_s'], 1e6, '{:.0f}')} us")
    lines.append(
      f"  P1 nvshmem-opt process   {_range(r['process_s'])} ms "
      f"(parse + pass + print + start-up; {r['process_ratio'] * 100:.3f}% of compile)"
    )
    lines.append(
      f"  P1 XLA compile           {_range(r['compile_s'], 1, '{:.2f}')} s "
      "(deviceless, `.compile()` only)"
    )
  if "P2" in timed:
    r = result["P2"]
    mod, mem = r["module"], r["memory"]
    lines.append(
      f"  P2 text: {mod['bytes'] / 1e6:.1f} MB, {mod['lines']} lines, "
      f"{mod['instructions']} instructions ({mod['ring_layers']}-step ring)"
    )
    lines.append(f"  P2 hlo_text parse        {_range(r['ours_s'])} ms")
    lines.append(f"  P2 jaxlib parse          {_range(r['jaxlib_s'])} ms")
    lines.append(
      f"  P2 peak memory           ours {mem['ours_rss_peak_mb']:.0f} MB RSS "
      f"({mem['ours_tracemalloc_peak_mb']:.0f} MB tracemalloc), jaxlib "
      f"{mem['jaxlib_rss_peak_mb']:.0f} MB RSS ({mem['rss_ratio']:.1f}x)"
    )
  if "P3" in result and "growth" in result["P3"]:
    for tag in ("small", "large"):
      r = result["P3"][tag]
      lines.append(
        f"  P3 {tag}: {r['instructions']} instructions in both "
        f"({r['ring_layers']}-step ring before/after the pass): "
        f"parse {_range(r['parse_s'])} ms, diff {_range(r['diff_s'])} ms"
      )
  if "HOOK" in result:
    for tag in ("hook_small", "hook_large"):
      r = result["HOOK"][tag]
      lines.append(
        f"  HOOK {r['layers']}-step ring ({result['HOOK']['topology']}): plain compile "
        f"{_range(r['plain_s'], 1, '{:.2f}')} s, with the mode by hand "
        f"{_range(r['plain_peer_s'], 1, '{:.2f}')} s, hook.compile "
        f"{_range(r['hook_s'], 1, '{:.2f}')} s ({r['applied']}, {r['compiles']} "
        f"compile(s), {r['permutes']} permutes; {r['same_mode_ratio']:.2f} of the "
        "by-hand compile)"
      )
  return "\n".join(lines)
