#!/usr/bin/env python3
"""Ring attention step time in JAX on the machine's GPUs, NCCL and (where it works) NVSHMEM.

    python3 gpu/ring_step_bench.py --out-dir=DIR [--seq-lens=32K,64K,128K,256K]
                                   [--modes=nccl,nvshmem_flag,nvshmem_transform]

The program is the project's own example, hlo_tools/ring_attention.py (imported
from the repository this script sits in): RingConfig(seq_len, num_heads=32,
num_kv_heads=8, head_dim=128, bf16, causal), forward, sequence-sharded over a
mesh of every visible GPU. One ring step is one K/V rotation; the forward runs
as many steps as there are devices, so step time = forward time / devices.

Each mode runs in its own child process, because XLA reads XLA_FLAGS once:

  nccl               plain XLA (collective-permutes on NCCL).
  nvshmem_flag       XLA_FLAGS += --xla_gpu_experimental_enable_nvshmem=true, which
                     lets upstream XLA's CollectiveBackendAssigner pick NVSHMEM
                     (XLA until early 2026; jax 0.11.2's XLA no longer knows it).
  nvshmem_transform  a compiler pass registered through
                     jax.extend.xla.register_hlo_module_transformation that sets
                     collective_backend_config.backend = NVSHMEM on every
                     collective-permute(-start) of the module (what the project's
                     pass does for NVLink-only rings); --transform-with-flag also
                     sets the NVSHMEM flag.
  permute_peer       XLA_FLAGS += --xla_gpu_collective_permute_mode=peer: the newer
                     XLA's copy-engine path (D2D memcpy into the peer's buffer).
  permute_symmetric  ... =symmetric: one-sided put+signal on NCCL symmetric memory.

For every mode and length the child records: whether compilation succeeded (the
exact error otherwise), the collective-permutes of the compiled HLO with their
backends, the memory XLA asks for, the median forward time over --iters runs
after --warmup runs, and a check of the output against plain attention at a
small length. DIR receives ring_results.json, ring_results.csv and the
compiled HLO of each mode's smallest length.

NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0,
NVSHMEM_DISABLE_NVLS=1, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}
os.environ.update(MULTICAST_OFF)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("nccl", "nvshmem_flag", "nvshmem_transform", "permute_peer",
         "permute_symmetric")
NVSHMEM_FLAG = "--xla_gpu_experimental_enable_nvshmem=true"
PERMUTE_MODE_FLAG = "--xla_gpu_collective_permute_mode="
# The XLA flags each mode adds (XLA reads XLA_FLAGS once per process).
MODE_FLAGS = {
    "nccl": [],
    "nvshmem_flag": [NVSHMEM_FLAG],
    "nvshmem_transform": [],  # --transform-with-flag adds NVSHMEM_FLAG
    "permute_peer": [PERMUTE_MODE_FLAG + "peer"],
    "permute_symmetric": [PERMUTE_MODE_FLAG + "symmetric"],
}
# Flags a mode replaces when the caller's XLA_FLAGS already hold them.
_OWN_FLAG_PREFIXES = ("--xla_gpu_experimental_enable_nvshmem", PERMUTE_MODE_FLAG)
DEFAULT_SEQ_LENS = "32K,64K,128K,256K"
RESULT_COLUMNS = ("mode", "seq_len", "devices", "status", "forward_s", "step_s",
                  "permutes", "backends", "temp_gib", "error")
_PERMUTE_RE = re.compile(r"\s(collective-permute(?:-start)?)\(")


class BenchError(Exception):
  """A user-facing failure, printed as one line."""


# ---------------------------------------------------------------------------
# Pure helpers (tested on the CPU)

def parse_seq_len(text):
  """'32K' -> 32768, '256k' -> 262144, '4096' -> 4096."""
  m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", text)
  if not m:
    raise BenchError(f"bad sequence length {text!r} (e.g. 4096, 32K)")
  value = int(m.group(1)) * {"": 1, "k": 1024, "m": 1 << 20}[m.group(2).lower()]
  if value <= 0:
    raise BenchError(f"sequence length {text!r} must be positive")
  return value


def parse_seq_lens(text):
  lens = sorted({parse_seq_len(t) for t in text.split(",") if t.strip()})
  if not lens:
    raise BenchError("no sequence lengths given")
  return lens


def parse_modes(text):
  modes = [m.strip() for m in text.split(",") if m.strip()]
  bad = [m for m in modes if m not in MODES]
  if bad or not modes:
    raise BenchError(f"unknown mode(s) {bad or text!r}: {', '.join(MODES)}")
  return modes


def mode_env(mode, base_env, transform_with_flag=False):
  """Environment of a mode's child: multicast off, and the mode's XLA flags."""
  env = dict(base_env)
  env.update(MULTICAST_OFF)
  env.setdefault("PYTHONUNBUFFERED", "1")
  flags = env.get("XLA_FLAGS", "").split()
  flags = [f for f in flags if not f.startswith(_OWN_FLAG_PREFIXES)]
  flags += MODE_FLAGS[mode]
  if mode == "nvshmem_transform" and transform_with_flag:
    flags.append(NVSHMEM_FLAG)
  env["XLA_FLAGS"] = " ".join(flags)
  return env


def _match_brace(text, start):
  """Index just past the JSON object starting at text[start] == '{'."""
  depth, i, in_str = 0, start, False
  while i < len(text):
    c = text[i]
    if in_str:
      if c == "\\":
        i += 1
      elif c == '"':
        in_str = False
    elif c == '"':
      in_str = True
    elif c == "{":
      depth += 1
    elif c == "}":
      depth -= 1
      if depth == 0:
        return i + 1
    i += 1
  raise ValueError("unbalanced backend_config")


def set_permute_backend(hlo_text, backend="NVSHMEM"):
  """Sets collective_backend_config.backend on every collective-permute(-start).

  Returns (new text, number of instructions changed). Lines with a JSON
  backend_config get the field set inside it; lines without one get a new
  backend_config. Other instructions are left byte for byte.
  """
  out, changed = [], 0
  for line in hlo_text.split("\n"):
    if not _PERMUTE_RE.search(line):
      out.append(line)
      continue
    key = "backend_config={"
    at = line.find(key)
    if at >= 0:
      begin = at + len("backend_config=")
      end = _match_brace(line, begin)
      config = json.loads(line[begin:end])
      config.setdefault("collective_backend_config", {})["backend"] = backend
      line = line[:begin] + json.dumps(config, separators=(",", ":")) + line[end:]
    else:
      config = {"collective_backend_config": {"backend": backend}}
      line = line.rstrip() + ", backend_config=" + json.dumps(config, separators=(",", ":"))
    out.append(line)
    changed += 1
  return "\n".join(out), changed


def permute_backends(hlo_text):
  """{opcode: {backend: count}} of the collective-permutes in HLO text.

  The backend is collective_backend_config.backend (DEFAULT when absent), with
  '/MODE' appended when the config names a collectives_mode other than INVALID.
  """
  found = {}
  for line in hlo_text.split("\n"):
    m = _PERMUTE_RE.search(line)
    if not m:
      continue
    backend = "DEFAULT"
    at = line.find("backend_config={")
    if at >= 0:
      begin = at + len("backend_config=")
      try:
        config = json.loads(line[begin:_match_brace(line, begin)])
        cbc = config.get("collective_backend_config") or {}
        backend = cbc.get("backend") or "DEFAULT"
        mode = cbc.get("collectives_mode")
        if mode and mode != "COLLECTIVES_MODE_INVALID":
          backend += "/" + mode
      except ValueError:
        backend = "UNPARSED"
    per = found.setdefault(m.group(1), {})
    per[backend] = per.get(backend, 0) + 1
  return found


def summarize_backends(found):
  """'collective-permute-start:NVSHMEM=2' style one-liner ('none' when empty)."""
  parts = [f"{op}:{b}={n}" for op, per in sorted(found.items())
           for b, n in sorted(per.items())]
  return " ".join(parts) if parts else "none"


def result_rows(results):
  """Flat CSV rows (RESULT_COLUMNS) from the per-mode child results."""
  rows = []
  for mode, res in results.items():
    if not res.get("runs"):
      rows.append({"mode": mode, "status": "failed", "error": res.get("error", "")})
    for run in res.get("runs", []):
      rows.append({
          "mode": mode, "seq_len": run.get("seq_len"), "devices": res.get("devices"),
          "status": run.get("status"), "forward_s": run.get("forward_s", ""),
          "step_s": run.get("step_s", ""), "permutes": run.get("permutes", ""),
          "backends": run.get("backends", ""), "temp_gib": run.get("temp_gib", ""),
          "error": (run.get("error") or "")[:300]})
  return rows


def build_parser():
  p = argparse.ArgumentParser(prog="ring_step_bench.py",
                              description=__doc__.split("\n\n")[0])
  p.add_argument("--out-dir", default="ring_bench", help="where results and HLO go")
  p.add_argument("--seq-lens", default=DEFAULT_SEQ_LENS,
                 help="global sequence lengths, comma list (e.g. 8K,16K,32K)")
  p.add_argument("--nvshmem-seq-lens", default=None,
                 help="lengths for every mode but nccl (default: --seq-lens)")
  p.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
  p.add_argument("--iters", type=int, default=5, help="timed forwards per length")
  p.add_argument("--warmup", type=int, default=2, help="untimed forwards per length")
  p.add_argument("--check-seq", default="2K",
                 help="length of the check against plain attention (0: no check)")
  p.add_argument("--num-heads", type=int, default=32)
  p.add_argument("--num-kv-heads", type=int, default=8)
  p.add_argument("--head-dim", type=int, default=128)
  p.add_argument("--dtype", default="bf16")
  p.add_argument("--timeout", type=float, default=240, help="seconds per mode's child")
  p.add_argument("--transform-with-flag", action="store_true",
                 help="nvshmem_transform also sets " + NVSHMEM_FLAG)
  p.add_argument("--platforms", default="cpu,cuda,gpu",
                 help="platforms the transformation is registered for")
  p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
  p.add_argument("--result", help=argparse.SUPPRESS)
  return p


def parse_args(argv):
  args = build_parser().parse_args(argv)
  args.seq_len_list = parse_seq_lens(args.seq_lens)
  args.nvshmem_seq_len_list = (parse_seq_lens(args.nvshmem_seq_lens)
                               if args.nvshmem_seq_lens else args.seq_len_list)
  args.mode_list = parse_modes(args.modes)
  args.check_seq_len = parse_seq_len(args.check_seq) if args.check_seq != "0" else 0
  if args.iters < 1 or args.warmup < 0:
    raise BenchError("--iters must be >= 1 and --warmup >= 0")
  return args


# ---------------------------------------------------------------------------
# Child: one mode, every length (needs jax; a GPU for real numbers)

class _Transform:
  """The registered pass: NVSHMEM on every collective-permute; keeps what it saw."""

  def __init__(self, dump_dir):
    self.dump_dir = dump_dir
    self.calls = []
    self.dumped = 0

  def __call__(self, proto_bytes):
    from jax._src.lib import xla_client
    record = {"bytes_in": len(proto_bytes)}
    try:
      module = xla_client.hlo.HloModule.from_serialized_hlo_module_proto(proto_bytes)
      text = module.to_string()
      record["module"] = module.name
      record["permutes_in"] = summarize_backends(permute_backends(text))
      new_text, changed = set_permute_backend(text, "NVSHMEM")
      record["changed"] = changed
      n = len(self.calls)
      interesting = changed or "ring" in module.name
      if self.dump_dir and interesting and self.dumped < 3:
        self.dumped += 1
        with open(os.path.join(self.dump_dir, f"transform_{n}_{module.name}_in.hlo"),
                  "w") as f:
          f.write(text)
      if not changed:
        self.calls.append(record)
        return None
      out = xla_client.hlo.hlo_module_from_text(new_text).as_serialized_hlo_module_proto()
      record["permutes_out"] = summarize_backends(permute_backends(new_text))
      self.calls.append(record)
      return out
    except Exception as e:  # reported, and the module is left as it was
      record["error"] = f"{type(e).__name__}: {e}"
      self.calls.append(record)
      return None


def _register_transform(transform, platforms):
  from jax.extend import xla as jx
  kwargs = {"name": "ring_bench_nvshmem_permutes",
            "platforms": [p for p in platforms.split(",") if p]}
  stage = getattr(jx, "PipelineStage", None)
  if stage is not None:
    kwargs["stage"] = stage.PRE_SCHEDULER
  jx.register_hlo_module_transformation(transform, **kwargs)


def _run_child(args):
  info = {"mode": args.child, "env": {k: os.environ.get(k) for k in
                                       list(MULTICAST_OFF) + ["XLA_FLAGS"]},
          "runs": []}
  try:
    _child_body(args, info)
    info["ok"] = True
  except BaseException as e:
    import traceback
    info["ok"] = False
    info["error"] = f"{type(e).__name__}: {e}"[:4000]
    info["traceback"] = traceback.format_exc()[-4000:]
  with open(args.result, "w") as f:
    json.dump(info, f, indent=1, default=str)
  return 0


def _child_body(args, info):
  sys.path.insert(0, REPO)
  transform = None
  os.makedirs(args.out_dir, exist_ok=True)
  if args.child == "nvshmem_transform":
    transform = _Transform(args.out_dir)
    try:
      _register_transform(transform, args.platforms)
      info["transform_registered"] = True
    except Exception as e:
      info["transform_registered"] = False
      info["transform_error"] = f"{type(e).__name__}: {e}"
  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding, PartitionSpec as P
  from hlo_tools import ring_attention as ra
  info["jax"] = jax.__version__
  devices = jax.devices()
  info["devices"] = len(devices)
  info["device_kind"] = devices[0].device_kind
  info["platform"] = devices[0].platform
  mesh = ra.make_mesh(devices)
  n = len(devices)
  try:
    limit = devices[0].memory_stats().get("bytes_limit")
  except Exception:
    limit = None
  info["bytes_limit"] = limit
  seq_lens = args.nvshmem_seq_len_list if args.child != "nccl" else args.seq_len_list
  sharding = NamedSharding(mesh, P(None, ra.AXIS))

  def make_inputs(config):
    dtype = ra.DTYPES[config.dtype]
    shapes = config.shapes()

    def gen(key):
      ks = jax.random.split(key, 3)
      return tuple(jax.random.normal(k, s, jnp.float32).astype(dtype)
                   for k, s in zip(ks, shapes))
    gen = jax.jit(gen, out_shardings=(sharding,) * 3)
    return gen(jax.random.PRNGKey(0))

  def config_for(seq):
    return ra.RingConfig(seq_len=seq, num_heads=args.num_heads,
                         num_kv_heads=args.num_kv_heads, head_dim=args.head_dim,
                         dtype=args.dtype, causal=True, backward=False)

  # Correctness at a small length: the ring against plain attention.
  if args.check_seq_len:
    try:
      config = config_for(args.check_seq_len)
      config.validate(n)
      q, k, v = make_inputs(config)
      got = jax.jit(ra.example_function(config, mesh))(q, k, v)
      want = jax.jit(ra.reference_function(config))(q, k, v)
      err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))))
      info["check"] = {"seq_len": args.check_seq_len, "max_abs_err": err,
                       "ok": err < 5e-2}
      del q, k, v, got, want
    except Exception as e:
      info["check"] = {"seq_len": args.check_seq_len, "ok": False,
                       "error": f"{type(e).__name__}: {e}"[:2000]}

  for seq in seq_lens:
    run = {"seq_len": seq}
    info["runs"].append(run)
    config = config_for(seq)
    try:
      config.validate(n)
      fn = jax.jit(ra.example_function(config, mesh))
      t0 = time.perf_counter()
      lowered = fn.lower(*ra.example_args(config, mesh))
      try:  # what jax hands XLA, before any XLA pass
        run["lowered_permutes"] = summarize_backends(
            permute_backends(lowered.as_text(dialect="hlo")))
      except Exception as e:
        run["lowered_permutes"] = f"? ({type(e).__name__}: {e})"[:300]
      compiled = lowered.compile()
      run["compile_s"] = time.perf_counter() - t0
      text = compiled.as_text()
      found = permute_backends(text)
      run["permutes"] = sum(sum(v.values()) for v in found.values())
      run["backends"] = summarize_backends(found)
      if seq == seq_lens[0]:
        with open(os.path.join(args.out_dir, f"{args.child}_{seq}.after_optimizations.hlo"),
                  "w") as f:
          f.write(text)
      try:
        mem = compiled.memory_analysis()
        need = (mem.temp_size_in_bytes + mem.argument_size_in_bytes
                + mem.output_size_in_bytes)
        run["temp_gib"] = round(mem.temp_size_in_bytes / 2**30, 2)
        run["need_gib"] = round(need / 2**30, 2)
      except Exception as e:
        need = None
        run["memory_analysis_error"] = str(e)[:300]
      if limit and need and need > limit:
        run["status"] = "skipped_memory"
        run["error"] = (f"needs {need / 2**30:.1f} GiB per device, the device has "
                        f"{limit / 2**30:.1f} GiB")
        print(f"[{args.child}] seq {seq}: {run['error']}", file=sys.stderr, flush=True)
        break  # longer sequences need more
      q, k, v = make_inputs(config)
      for _ in range(args.warmup):
        compiled(q, k, v).block_until_ready()
      times = []
      for _ in range(args.iters):
        t0 = time.perf_counter()
        compiled(q, k, v).block_until_ready()
        times.append(time.perf_counter() - t0)
      run["times_s"] = times
      run["forward_s"] = statistics.median(times)
      run["step_s"] = run["forward_s"] / n
      run["status"] = "ok"
      print(f"[{args.child}] seq {seq}: forward {run['forward_s'] * 1e3:.2f} ms, "
            f"permutes {run['backends']}", file=sys.stderr, flush=True)
      del q, k, v
    except Exception as e:
      run["status"] = "error"
      run["error"] = f"{type(e).__name__}: {e}"[:3000]
      print(f"[{args.child}] seq {seq}: {run['error'][:500]}", file=sys.stderr, flush=True)
      if "RESOURCE_EXHAUSTED" in run["error"] or "out of memory" in run["error"].lower():
        break
  if transform is not None:
    info["transform_calls"] = transform.calls


# ---------------------------------------------------------------------------
# Launcher

def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  os.makedirs(args.out_dir, exist_ok=True)
  if args.child:
    return _run_child(args)
  results = {}
  for mode in args.mode_list:
    path = os.path.join(args.out_dir, f"child_{mode}.json")
    cmd = [sys.executable, os.path.abspath(__file__), f"--child={mode}",
           f"--result={path}"] + _passthrough(args)
    env = mode_env(mode, os.environ, args.transform_with_flag)
    print(f"== {mode}: XLA_FLAGS={env['XLA_FLAGS']!r}", file=sys.stderr, flush=True)
    log_path = os.path.join(args.out_dir, f"child_{mode}.log")
    t0 = time.time()
    with open(log_path, "w") as log:
      try:
        proc = subprocess.run(cmd, env=env, timeout=args.timeout, stdout=log,
                              stderr=subprocess.STDOUT)
        status = proc.returncode
      except subprocess.TimeoutExpired:
        status = "timeout"
    tail = log_tail(log_path)
    sys.stderr.write(tail + "\n")
    if os.path.exists(path):
      with open(path) as f:
        results[mode] = json.load(f)
    else:
      # A fatal XLA log line (bad flag, abort) is the exact reason: keep it.
      fatal = [l for l in tail.splitlines() if l[:1] in "FE" and "]" in l]
      results[mode] = {"ok": False, "runs": [],
                       "error": (f"child gave no result (exit status {status})"
                                 + (": " + fatal[-1] if fatal else ""))}
    results[mode]["wall_s"] = round(time.time() - t0, 1)
    results[mode]["exit_status"] = status
  with open(os.path.join(args.out_dir, "ring_results.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
  rows = result_rows(results)
  with open(os.path.join(args.out_dir, "ring_results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
      w.writerow({k: r.get(k, "") for k in RESULT_COLUMNS})
  for r in rows:
    fwd = f"{float(r['forward_s']) * 1e3:9.2f} ms" if r.get("forward_s") else " " * 12
    print(f"{r['mode']:18s} {str(r.get('seq_len', '')):>7s} {r['status']:15s} {fwd} "
          f"{r.get('backends', '')} {r.get('error', '')[:200]}")
  return 0


def log_tail(path, lines=15, width=400):
  """The last lines of a child's log, each cut to width characters."""
  try:
    with open(path, errors="replace") as f:
      text = f.read().splitlines()
  except OSError:
    return ""
  return "\n".join(l[:width] for l in text[-lines:])


def _passthrough(args):
  return [f"--out-dir={args.out_dir}",
          f"--seq-lens={','.join(map(str, args.seq_len_list))}",
          f"--nvshmem-seq-lens={','.join(map(str, args.nvshmem_seq_len_list))}",
          f"--iters={args.iters}", f"--warmup={args.warmup}",
          f"--check-seq={args.check_seq_len}", f"--num-heads={args.num_heads}",
          f"--num-kv-heads={args.num_kv_heads}", f"--head-dim={args.head_dim}",
          f"--dtype={args.dtype}", f"--platforms={args.platforms}"]


if __name__ == "__main__":
  try:
    sys.exit(main())
  except BenchError as e:
    print(f"ring_step_bench.py: {e}", file=sys.stderr)
    sys.exit(2)
