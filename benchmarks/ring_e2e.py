#!/usr/bin/env python3
"""Ring attention end to end: step time per collective-permute mode, one process per GPU.

    python3 benchmarks/ring_e2e.py --out-dir=DIR --modes=nccl,peer,pass
        [--seq-lens=32K,64K,128K,256K] [--directions=fwd,fwd_bwd] [--budget-s=570]
    python3 benchmarks/ring_e2e.py merge OUT.csv IN.csv [IN.csv ...]

The program is hlo_tools/programs/ring_attention.py (on GPUs cuDNN flash attention per
block, K and V in one permute per ring step; the committed 2-GPU results of
2026-11-30 ran the ring before that: blocked online softmax, K and V in two
permutes): Llama-3-8B attention by default (32 query heads, 8 KV
heads, head_dim 128, bf16, causal), batch 1, the sequence sharded over every
device. Direction `fwd` runs the attention; `fwd_bwd` runs the gradients of
sum(out^2) with respect to q, k and v (forward, then backward).

step_s, the CSV's time: the median over --iters timed calls (after --warmup
untimed ones) of the wall time of one call of the compiled program, from
dispatch to block_until_ready, taken on every process and the slowest process's
median kept, divided by the number of devices N. The program makes exactly N
ring steps (each: one K/V permute and one block of attention), so step_s is the
mean time of one step; under the causal mask devices do unequal work per step.

Modes (each runs in fresh child processes, one per GPU, because XLA reads
XLA_FLAGS once per process):
  nccl       plain XLA.
  nvshmem    --xla_gpu_experimental_enable_nvshmem=true (jax <= 0.10.1: upstream's
             assigner puts every permute on NVSHMEM).
  peer       --xla_gpu_collective_permute_mode=peer (jax >= 0.10.2).
  symmetric  --xla_gpu_collective_permute_mode=symmetric (jax >= 0.10.2).
  pass       the selection core's per-op choice. With
             jax.extend.xla.register_hlo_module_transformation (jax >= 0.10.2)
             hlo_tools.jax_hook runs inside the compile (backends nccl,peer).
             Without it (jax 0.9.1) one process first compiles (does not run)
             the same program for the N devices with plain flags, the core
             decides on the compiled module's permutes (bytes, operands, pairs),
             and the mode its decision selects (nccl or nvshmem) is executed;
             `pass_route` in the JSON says which and why.

Outputs in --out-dir: ring_step.csv (header exactly seq_len,direction,mode,step_s;
successful runs only), ring_e2e.json (versions, devices, per run: compile_s,
times, the permutes and backends in the compiled HLO, memory, errors; the
numerical check of each mode), <mode>/ (logs, events, compiled HLO of the
smallest run). Both files are rewritten after every run, so a killed call
keeps what finished. --budget-s stops cleanly; --run-timeout kills a run that
hangs (the rest of the mode continues in fresh processes).

NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0,
NVSHMEM_DISABLE_NVLS=1, TORCH_SYMM_MEM_DISABLE_MULTICAST=1). NVSHMEM_SYMMETRIC_SIZE
defaults to 16G (the caller's value wins).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # pylint: disable=wrong-import-position
from benchlib import MULTICAST_OFF, free_port  # pylint: disable=wrong-import-position,unused-import

os.environ.update(MULTICAST_OFF)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSV_HEADER = ("seq_len", "direction", "mode", "step_s")
DIRECTIONS = ("fwd", "fwd_bwd")
MODE_FLAGS = {
  "nccl": [],
  "nvshmem": ["--xla_gpu_experimental_enable_nvshmem=true"],
  "peer": ["--xla_gpu_collective_permute_mode=peer"],
  "symmetric": ["--xla_gpu_collective_permute_mode=symmetric"],
  "pass": [],
}
_OWN_FLAGS = (
  "--xla_gpu_experimental_enable_nvshmem",
  "--xla_gpu_collective_permute_mode",
  "--xla_force_host_platform_device_count",
)
_PERMUTE_RE = re.compile(r"\s(collective-permute(?:-start)?)\(")


# A user-facing failure, printed as one line (the shared scripts' error).
E2EError = benchlib.BenchError


def log(msg):
  print(f"[ring_e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Pure helpers (tested without a GPU)


def parse_seq_len(text):
  m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", text)
  if not m or int(m.group(1)) <= 0:
    raise E2EError(f"bad sequence length {text!r} (e.g. 4096, 32K)")
  return int(m.group(1)) * {"": 1, "k": 1024, "m": 1 << 20}[m.group(2).lower()]


def parse_list(text, allowed, what):
  return benchlib.parse_list(text, allowed, what=what)


def mode_env(mode, base, platform, num_procs, devices_per_proc, route=None):
  """Environment of a mode's children: multicast off and exactly the mode's flags."""
  flags = list(MODE_FLAGS[route or mode])
  if platform == "cpu":
    flags.append(f"--xla_force_host_platform_device_count={devices_per_proc}")
  env = benchlib.child_env(base, drop_flags=_OWN_FLAGS, xla_flags=flags)
  env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [base.get("PYTHONPATH")] if p])
  if platform == "cpu":
    env["JAX_PLATFORMS"] = "cpu"
  # NVSHMEM's symmetric heap holds the permuted K/V (and their gradients): 512 MiB
  # per direction at 256K tokens on 2 GPUs, several live at once; 1 GiB default.
  env.setdefault("NVSHMEM_SYMMETRIC_SIZE", "16G")
  return env


def permute_summary(text):
  """{'collective-permute-start:NVSHMEM': 1, '...:DEFAULT/COLLECTIVES_PEER_MEMORY': 2}."""
  from hlo_tools.hook import text_edit

  found = {}
  for line in text.split("\n"):
    m = _PERMUTE_RE.search(line)
    if not m:
      continue
    backend, mode = "DEFAULT", None
    at = line.find("backend_config={")
    if at >= 0:
      begin = at + len("backend_config=")
      try:
        cbc = (
          json.loads(line[begin : text_edit._match_brace(line, begin)]).get(  # pylint: disable=protected-access
            "collective_backend_config"
          )
          or {}
        )
        backend = cbc.get("backend") or "DEFAULT"
        mode = cbc.get("collectives_mode")
      except ValueError:
        backend = "UNPARSED"
    key = f"{m.group(1)}:{backend}"
    if mode and mode != "COLLECTIVES_MODE_INVALID":
      key += "/" + mode
    found[key] = found.get(key, 0) + 1
  return found


def route_for(decisions):
  """(mode to execute, why) from the core's decisions on one compiled module.

  The loop's K/V permute (the most bytes) decides when plans differ.
  """
  if not decisions:
    return "nccl", "no collective-permute in the module"
  main = max(decisions, key=lambda d: (d["in_loop"], d["bytes"]))
  plans = sorted({d["plan"] for d in decisions})
  route = "nvshmem" if main["plan"] == "nvshmem" else "nccl"
  why = f"core plan {main['plan']} for {main['permute']} ({main['bytes']} B)"
  if len(plans) > 1:
    why += f"; other permutes: {','.join(plans)} (one global flag cannot mix)"
  return route, why


def csv_rows(runs):
  return [
    {
      "seq_len": r["seq_len"],
      "direction": r["direction"],
      "mode": r["mode"],
      "step_s": f"{r['step_s']:.6g}",
    }
    for r in runs
    if r.get("step_s") is not None
  ]


def write_csv(path, rows):
  benchlib.write_csv(
    path, CSV_HEADER, sorted(rows, key=lambda r: (int(r["seq_len"]), r["direction"], r["mode"]))
  )


def read_csv(path):
  try:
    with open(path, newline="") as f:
      reader = csv.DictReader(f)
      if tuple(reader.fieldnames or ()) != CSV_HEADER:
        raise E2EError(f"{path}:1: header is not {','.join(CSV_HEADER)}")
      rows = []
      for i, r in enumerate(reader, start=2):
        try:
          int(r["seq_len"]), float(r["step_s"])
        except (TypeError, ValueError):
          raise E2EError(f"{path}:{i}: bad row {r}") from None
        rows.append(r)
      return rows
  except OSError as e:
    raise E2EError(f"{path}: {e.strerror}") from None


def merge(out, inputs):
  """Rows of all inputs, a later file's (seq_len, direction, mode) replacing earlier."""
  rows = {}
  for path in inputs:
    for r in read_csv(path):
      rows[(int(r["seq_len"]), r["direction"], r["mode"])] = r
  write_csv(out, list(rows.values()))
  return len(rows)


# ---------------------------------------------------------------------------
# Arguments


def build_parser():
  p = argparse.ArgumentParser(prog="ring_e2e.py", description=__doc__.split("\n\n")[0])
  p.add_argument("--out-dir", default="ring_e2e", help="where results go")
  p.add_argument("--modes", default="nccl,pass", help="comma list of " + ",".join(MODE_FLAGS))
  p.add_argument("--seq-lens", default="32K,64K,128K,256K", help="global lengths, comma list")
  p.add_argument("--directions", default="fwd,fwd_bwd", help="fwd, fwd_bwd or both")
  p.add_argument("--iters", type=int, default=5, help="timed calls per run")
  p.add_argument("--warmup", type=int, default=2, help="untimed calls per run")
  p.add_argument(
    "--check-seq",
    default="4K",
    help="length of the check against plain attention, once per mode (0: none)",
  )
  p.add_argument("--num-procs", type=int, default=2, help="processes = GPUs")
  p.add_argument(
    "--single-process", action="store_true", help="one process driving --num-procs devices"
  )
  p.add_argument(
    "--platform",
    choices=("gpu", "cpu"),
    default="gpu",
    help="cpu: host devices (testing the harness)",
  )
  p.add_argument("--num-heads", type=int, default=32)
  p.add_argument("--num-kv-heads", type=int, default=8)
  p.add_argument("--head-dim", type=int, default=128)
  p.add_argument("--dtype", default="bf16")
  p.add_argument("--causal", type=int, choices=(0, 1), default=1)
  p.add_argument("--q-chunk", type=int, default=2048)
  p.add_argument("--k-chunk", type=int, default=2048)
  p.add_argument(
    "--kernel",
    choices=("auto", "blocked", "cudnn"),
    default="auto",
    help="per-block attention (auto: cuDNN on GPUs where it fits)",
  )
  p.add_argument("--topology", default=None, help="for pass (default 1x1xN)")
  p.add_argument("--pass-backends", default="nccl,peer", help="hook's backend set")
  p.add_argument(
    "--cost-table",
    default=None,
    help="cost table file for pass (default: the core's built-in table)",
  )
  p.add_argument(
    "--pass-via",
    choices=("auto", "hook", "route"),
    default="auto",
    help="pass mode: the hook when jax has it (auto), or always the "
    "decision-selected global mode (route)",
  )
  p.add_argument("--budget-s", type=float, default=570, help="whole call, then stop cleanly")
  p.add_argument(
    "--run-timeout",
    type=float,
    default=240,
    help="seconds one run (compile + calls) may take before it is killed",
  )
  p.add_argument(
    "--start-timeout",
    type=float,
    default=180,
    help="seconds for children to start (imports, distributed init, check)",
  )
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--mode", help=argparse.SUPPRESS)
  p.add_argument("--items", default="", help=argparse.SUPPRESS)
  p.add_argument("--do-check", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--route", default=None, help=argparse.SUPPRESS)
  # Tests of the watchdog: the worker blocks forever at this length, as a hung
  # collective would.
  p.add_argument("--hang-at", type=int, default=0, help=argparse.SUPPRESS)
  return p


def parse_args(argv):
  a = build_parser().parse_args(argv)
  a.argv = list(argv)
  a.mode_list = parse_list(a.modes, tuple(MODE_FLAGS), "mode")
  a.direction_list = parse_list(a.directions, DIRECTIONS, "direction")
  a.seq_len_list = sorted({parse_seq_len(t) for t in a.seq_lens.split(",") if t.strip()})
  if not a.seq_len_list:
    raise E2EError("no sequence lengths given")
  a.check_len = 0 if a.check_seq.strip() == "0" else parse_seq_len(a.check_seq)
  if a.iters < 5 and a.platform == "gpu":
    raise E2EError("--iters must be >= 5 on the GPU (median of at least 5 runs)")
  if a.iters < 1 or a.warmup < 0 or a.num_procs < 1:
    raise E2EError("--iters >= 1, --warmup >= 0 and --num-procs >= 1 are required")
  for s in a.seq_len_list + ([a.check_len] if a.check_len else []):
    if s % a.num_procs:
      raise E2EError(f"sequence length {s} is not divisible by {a.num_procs} devices")
  a.topology = a.topology or f"1x1x{a.num_procs}"
  if a.cost_table:
    if not os.path.isfile(a.cost_table):
      raise E2EError(f"{a.cost_table}: no such cost table")
    a.cost_table = os.path.abspath(a.cost_table)
  return a


def items_of(args):
  """Runs in order: shorter lengths first, both directions per length."""
  return [(s, d) for s in args.seq_len_list for d in args.direction_list]


# ---------------------------------------------------------------------------
# Worker: one process (one GPU, or every device with --single-process)


class Events:
  """Append-only JSON lines the parent reads while the worker runs."""

  def __init__(self, path):
    self.f = open(path, "a")  # pylint: disable=consider-using-with

  def emit(self, **event):
    event["t"] = time.time()
    self.f.write(json.dumps(event, default=str) + "\n")
    self.f.flush()


def _init_jax(args):
  import jax

  if args.platform == "cpu" and not args.single_process:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if not args.single_process and args.num_procs > 1:
    kwargs = {} if args.platform == "cpu" else {"local_device_ids": [args.rank]}
    jax.distributed.initialize(
      f"127.0.0.1:{args.port}", num_processes=args.num_procs, process_id=args.rank, **kwargs
    )
  return jax


def _config(args, seq_len, direction):
  from hlo_tools.programs import ring_attention

  return ring_attention.RingConfig(
    seq_len=seq_len,
    num_heads=args.num_heads,
    num_kv_heads=args.num_kv_heads,
    head_dim=args.head_dim,
    dtype=args.dtype,
    causal=bool(args.causal),
    backward=direction == "fwd_bwd",
    q_chunk=args.q_chunk,
    k_chunk=args.k_chunk,
    kernel=args.kernel,
  )


def _inputs(jax, config, mesh, seed=0):
  """Random q, k, v made on their devices (no host copy of the global arrays)."""
  from jax.sharding import NamedSharding, PartitionSpec as P

  from hlo_tools.programs import ring_attention

  sharding = NamedSharding(mesh, P(None, ring_attention.AXIS))
  dtype = ring_attention.DTYPES[config.dtype]
  keys = jax.random.split(jax.random.key(seed), 3)
  return [
    jax.jit(lambda k, s=s: jax.random.normal(k, s, dtype), out_shardings=sharding)(key)
    for key, s in zip(keys, config.shapes())
  ]


def _scalar(x):
  import numpy as np

  return float(np.asarray(x.addressable_data(0)))


def _check(jax, args, mesh, direction):
  """max|ring - plain| / max|plain| per output, plain attention in f32."""
  import jax.numpy as jnp
  from jax.sharding import NamedSharding, PartitionSpec as P

  from hlo_tools.programs import ring_attention

  config = _config(args, args.check_len, direction)
  ring, ref = (
    ring_attention.example_function(config, mesh),
    ring_attention.reference_function(config),
  )

  def errors(q, k, v):
    got = jax.tree.leaves(ring(q, k, v))
    want = jax.tree.leaves(ref(*[a.astype(jnp.float32) for a in (q, k, v)]))
    return [
      jnp.max(jnp.abs(g.astype(jnp.float32) - w)) / jnp.max(jnp.abs(w)) for g, w in zip(got, want)
    ]

  fn = jax.jit(errors, out_shardings=NamedSharding(mesh, P()))
  errs = [_scalar(e) for e in fn(*_inputs(jax, config, mesh, seed=1))]
  tol = 3e-2 if config.dtype in ("bf16", "f16") else 1e-4
  return {
    "seq_len": args.check_len,
    "direction": direction,
    "errors": errs,
    "tolerance": tol,
    "ok": all(e < tol for e in errs),
  }


def _run_item(jax, args, mesh, seq_len, direction, events, dump_hlo, hook=None):
  from hlo_tools.programs import ring_attention

  seen = len(hook.decisions) if hook is not None else 0
  config = _config(args, seq_len, direction)
  config.validate(mesh.size)
  inputs = _inputs(jax, config, mesh)
  t0 = time.perf_counter()
  lowered = jax.jit(ring_attention.example_function(config, mesh)).lower(*inputs)
  # On a stock XLA the hook applies one mode for the program (its compile()); with
  # the series its transformation decides per permute inside that compile.
  compiled = hook.compile(lowered) if hook is not None else lowered.compile()
  compile_s = time.perf_counter() - t0
  text = compiled.as_text()
  if dump_hlo:
    with open(dump_hlo, "w") as f:
      f.write(text)
  mem = None
  try:
    m = compiled.memory_analysis()
    mem = {
      k: getattr(m, k)
      for k in ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes")
      if hasattr(m, k)
    }
  except Exception:  # not every backend reports it
    pass
  events.emit(
    event="compiled",
    seq_len=seq_len,
    direction=direction,
    compile_s=compile_s,
    backends=permute_summary(text),
    memory=mem,
  )
  for _ in range(args.warmup):
    jax.block_until_ready(compiled(*inputs))
  times = []
  for _ in range(args.iters):
    t = time.perf_counter()
    jax.block_until_ready(compiled(*inputs))
    times.append(time.perf_counter() - t)
  return {
    "compile_s": compile_s,
    "times_s": times,
    "median_s": statistics.median(times),
    "backends": permute_summary(text),
    "memory": mem,
    "hook_decisions": hook.decisions[seen:] if hook is not None else None,
    "hook_program": hook.programs[-1] if hook is not None and hook.programs else None,
  }


def worker(args):
  mode_dir = os.path.join(args.out_dir, args.mode)
  events = Events(os.path.join(mode_dir, f"events_rank{args.rank}.jsonl"))
  try:
    jax = _init_jax(args)
    from hlo_tools.programs import ring_attention

    hook = None
    if args.mode == "pass" and not args.route:
      from hlo_tools import jax_hook

      hook = jax_hook.install(
        args.topology,
        backends=args.pass_backends.split(","),
        platforms=("cpu",) if args.platform == "cpu" else ("cuda", "gpu"),
        report=os.path.join(mode_dir, f"hook_rank{args.rank}.json"),
        cost_table=args.cost_table,
      )
    import jaxlib

    mesh = ring_attention.make_mesh(jax.devices())
    events.emit(
      event="ready",
      route=args.route,
      jax=jax.__version__,
      jaxlib=jaxlib.__version__,
      python=sys.version.split()[0],
      xla_flags=os.environ.get("XLA_FLAGS", ""),
      devices=[f"{d.platform}:{d.id}:{getattr(d, 'device_kind', '')}" for d in jax.devices()],
      process_count=jax.process_count(),
      hook=hook is not None,
    )
    if args.do_check and args.check_len:
      for direction in args.direction_list:
        events.emit(event="check", **_check(jax, args, mesh, direction))
    for n, item in enumerate(args.items.split(";")):
      seq_len, direction = int(item.split(",")[0]), item.split(",")[1]
      events.emit(event="start", seq_len=seq_len, direction=direction)
      while seq_len == args.hang_at:
        time.sleep(60)
      dump = (
        os.path.join(mode_dir, f"compiled_{seq_len}_{direction}.hlo")
        if args.rank == 0 and n == 0
        else None
      )
      try:
        res = _run_item(jax, args, mesh, seq_len, direction, events, dump, hook)
        events.emit(event="done", seq_len=seq_len, direction=direction, **res)
      except Exception as e:  # recorded; the next run may still work (e.g. after OOM)
        events.emit(
          event="error",
          seq_len=seq_len,
          direction=direction,
          error=f"{type(e).__name__}: {e}"[:4000],
        )
    if hook is not None:
      events.emit(
        event="hook", decisions=hook.decisions[-20:], calls=hook.calls[-20:], xla=hook.xla
      )
    events.emit(event="exit")
  except BaseException as e:
    events.emit(event="fatal", error=f"{type(e).__name__}: {e}"[:4000])
    raise
  return 0


def probe(args):
  """Child for `pass` without a hook: the core's decision per run, from the
  permutes of the same program compiled (not run) by one process for the N
  devices, with plain XLA flags."""
  events = Events(os.path.join(args.out_dir, "pass", "events_probe.jsonl"))
  try:
    import jax

    try:
      from jax.extend import xla as jx

      has_hook = hasattr(jx, "register_hlo_module_transformation")
    except ImportError:
      has_hook = False
    if args.pass_via == "route":
      has_hook = False
    elif args.pass_via == "hook" and not has_hook:
      raise E2EError(f"jax {jax.__version__} has no register_hlo_module_transformation")
    events.emit(event="info", jax=jax.__version__, has_hook=has_hook)
    if has_hook:
      return 0
    from hlo_tools.hlo import reader
    from hlo_tools.hook import decide
    from hlo_tools.model import collectives
    from hlo_tools.programs import ring_attention

    try:
      sel = decide.import_selection()
    except ImportError as e:
      events.emit(event="core_error", error=f"core binding not importable: {e}")
      return 0
    table = sel.load_cost_table(args.cost_table)
    mesh = ring_attention.make_mesh(jax.devices()[: args.num_procs])
    # The mesh's own device order: the program's ids run on these devices.
    spec = (
      args.topology
      if ":map=" in args.topology
      else (args.topology + ":map=" + ",".join(str(d.id) for d in mesh.devices.flat))
    )
    topo = sel.parse_topology(spec, table.backends)
    for item in args.items.split(";"):
      seq_len, direction = int(item.split(",")[0]), item.split(",")[1]
      config = _config(args, seq_len, direction)
      config.validate(mesh.size)
      text = (
        jax.jit(ring_attention.example_function(config, mesh))
        .lower(*ring_attention.example_args(config, mesh))
        .compile()
        .as_text()
      )
      decisions = []
      module = reader.parse_hlo_text(text)
      for p in collectives.collective_permutes(module):
        instr = next(i for i in module.computation(p.computation).instructions if i.name == p.start)
        d = sel.decide(
          topo, table, p.bytes_per_device, [tuple(x) for x in p.pairs], buffers=len(instr.operands)
        )
        decisions.append(
          {
            "permute": p.start,
            "bytes": p.bytes_per_device,
            "operands": len(instr.operands),
            "pairs": p.pairs,
            "in_loop": p.while_loop is not None,
            "plan": d["plan"],
            "reason": d["reason"],
            "modeled_us": d.get("backend_us"),
          }
        )
      route, why = route_for(decisions)
      events.emit(
        event="route",
        seq_len=seq_len,
        direction=direction,
        route=route,
        why=why,
        decisions=decisions,
      )
  except BaseException as e:
    events.emit(event="fatal", error=f"{type(e).__name__}: {e}"[:4000])
    raise
  return 0


# ---------------------------------------------------------------------------
# Parent: modes one after another, each in fresh children


class Results:
  """Everything measured so far; written (atomically) after every change."""

  def __init__(self, args):
    self.args = args
    self.data = {
      "argv": sys.argv[1:],
      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
      "step_s": __doc__.split("step_s, the CSV's time: ")[1].split("\n\n")[0],
      "modes": {},
    }

  def mode(self, mode):
    return self.data["modes"].setdefault(
      mode, {"info": None, "checks": [], "runs": [], "errors": [], "pass_route": {}}
    )

  def add_run(self, mode, run):
    self.mode(mode)["runs"].append(run)
    self.write()

  def write(self):
    out = self.args.out_dir
    runs = [r for m in self.data["modes"].values() for r in m["runs"]]
    write_csv(os.path.join(out, "ring_step.csv"), csv_rows(runs))
    benchlib.write_json(os.path.join(out, "ring_e2e.json"), self.data)


def _spawn(args, mode, route, items, do_check, launch):
  """Starts the children of one launch; returns [(rank, Popen, log path)]."""
  nproc = 1 if args.single_process else args.num_procs
  per_proc = args.num_procs if args.single_process else 1
  env = mode_env(mode, os.environ, args.platform, nproc, per_proc, route)
  port = free_port()
  procs = []
  for rank in range(nproc):
    cmd = [
      sys.executable,
      os.path.abspath(__file__),
      "--worker",
      f"--rank={rank}",
      f"--port={port}",
      f"--mode={mode}",
      "--items=" + ";".join(f"{s},{d}" for s, d in items),
    ]
    cmd += [a for a in args.argv if a not in ("--do-check",)]
    if do_check:
      cmd.append("--do-check")
    if route:
      cmd.append(f"--route={route}")
    path = os.path.join(args.out_dir, mode, f"log_launch{launch}_rank{rank}.txt")
    with open(path, "w") as logf:
      procs.append((rank, benchlib.spawn(cmd, env, logf), path))
  log(
    f"{mode}{'/' + route if route else ''}: launch {launch}, {nproc} process(es), "
    f"XLA_FLAGS={env['XLA_FLAGS']!r}, {len(items)} run(s)"
  )
  return procs


def _kill(procs):
  benchlib.kill([p for _, p, _ in procs])


def _tail(path, n=1500):
  try:
    with open(path, errors="replace") as f:
      return f.read()[-n:]
  except OSError:
    return ""


class _Reader:
  """New events of every rank since the last call."""

  def __init__(self, mode_dir, ranks):
    self.paths = [os.path.join(mode_dir, f"events_rank{r}.jsonl") for r in ranks]
    self.offsets = [0] * len(self.paths)
    for i, p in enumerate(self.paths):
      self.offsets[i] = os.path.getsize(p) if os.path.exists(p) else 0

  def read(self):
    out = []
    for i, p in enumerate(self.paths):
      if not os.path.exists(p):
        continue
      with open(p) as f:
        f.seek(self.offsets[i])
        chunk = f.read()
      done = chunk.rfind("\n") + 1
      self.offsets[i] += len(chunk[:done].encode())
      out += [(i, json.loads(l)) for l in chunk[:done].splitlines() if l.strip()]
    return out


def _run_launch(args, res, mode, route, pending, do_check, launch, deadline, route_info):
  """One set of children over `pending`; returns (runs finished, stop the mode?)."""
  nranks = 1 if args.single_process else args.num_procs
  reader = _Reader(os.path.join(args.out_dir, mode), range(nranks))  # before any event
  procs = _spawn(args, mode, route, pending, do_check, launch)
  started_at, current, per_item, finished, ready = time.time(), None, {}, 0, False
  item_started, dead_since = started_at, None
  m = res.mode(mode)

  def finish(item, status, error=None):
    nonlocal finished
    got = per_item.pop(item, {})
    dones = [e for e in got.values() if e["event"] == "done"]
    run = {
      "seq_len": item[0],
      "direction": item[1],
      "mode": mode,
      "status": status,
      "step_s": None,
      "error": error,
    }
    if route_info.get(item):
      run["pass_route"] = route_info[item]
    errs = [e["error"] for e in got.values() if e["event"] == "error"]
    if dones and len(dones) == nranks and not errs and status == "ok":
      medians = [e["median_s"] for e in dones]
      run.update(
        step_s=max(medians) / args.num_procs,
        median_s_per_rank=medians,
        times_s_rank0=dones[0]["times_s"],
        compile_s=dones[0]["compile_s"],
        backends=dones[0]["backends"],
        memory=dones[0]["memory"],
      )
      if dones[0].get("hook_decisions") is not None:
        run["hook_decisions"] = dones[0]["hook_decisions"]
      if dones[0].get("hook_program") is not None:
        run["hook_program"] = dones[0]["hook_program"]
    elif status == "ok":
      run.update(status="error", error=" | ".join(errs)[:4000] or "incomplete")
    pending.remove(item)
    finished += 1
    res.add_run(mode, run)
    log(
      f"{mode}: {item[0]} {item[1]} {run['status']}"
      + (f" step_s={run['step_s']:.6g}" if run["step_s"] else f" {run['error']}"[:300])
    )

  while True:
    for rank, e in reader.read():
      kind = e["event"]
      if kind == "ready":
        ready = True
        if rank == 0:
          m["info"] = e
      elif kind == "check" and rank == 0:
        m["checks"].append(e)
        log(
          f"{mode}: check {e['direction']} at {e['seq_len']}: errors {e['errors']} "
          f"{'ok' if e['ok'] else 'FAILED'}"
        )
      elif kind == "hook" and rank == 0:
        m["hook"] = e
      elif kind == "start":
        current = (e["seq_len"], e["direction"])
        per_item.setdefault(current, {})
        item_started = time.time()
      elif kind in ("done", "error"):
        item = (e["seq_len"], e["direction"])
        per_item.setdefault(item, {})[rank] = e
        if len(per_item[item]) == nranks:
          finish(item, "ok")
          current = None
      elif kind == "fatal":
        m["errors"].append(f"rank {rank}: {e['error']}")
    res.write()
    alive = [p for _, p, _ in procs if p.poll() is None]
    now = time.time()
    if not pending:
      # Let the workers write their last events (the hook's summary) and exit.
      if (
        any(p.poll() is None for _, p, _ in procs)
        and time.time() - (dead_since or time.time()) < 20
      ):
        dead_since = dead_since or time.time()
        time.sleep(0.5)
        continue
      _kill(procs)
      return finished, False
    why = None
    if now > deadline:
      why = "budget"
    elif current is not None and now - item_started > args.run_timeout:
      why = "timeout"
    elif current is None and not ready and now - started_at > args.start_timeout:
      why = "start_timeout"
    elif len(alive) < len(procs):
      # A rank is gone: give the others a moment to report, then stop this launch.
      dead_since = dead_since or now
      why = "exited" if now - dead_since > 3 else None
    if why is None:
      time.sleep(0.5)
      continue
    _kill(procs)
    for rank, e in reader.read():  # what was written before the kill
      if e["event"] == "fatal":
        m["errors"].append(f"rank {rank}: {e['error']}")
    tails = " || ".join(f"rank {r}: {_tail(path, 600)}" for r, _, path in procs)
    if current is not None and current in pending:
      finish(
        current,
        "timeout" if why == "timeout" else "error" if why == "exited" else why,
        f"{why} after {now - item_started:.0f} s; log tail: {tails}",
      )
    if why in ("start_timeout", "exited") and current is None:
      m["errors"].append(f"launch {launch}: {why}; log tail: {tails}")
      return finished, not finished
    return finished, why == "budget"


def run_mode(args, res, mode, deadline, probe_info):
  os.makedirs(os.path.join(args.out_dir, mode), exist_ok=True)
  groups, route_info = [(None, items_of(args))], {}
  if mode == "pass" and probe_info and not probe_info.get("has_hook"):
    routes = probe_info.get("routes", {})
    if probe_info.get("error"):
      res.mode(mode)["errors"].append(probe_info["error"])
      return
    res.mode(mode)["pass_route"] = {f"{s},{d}": r for (s, d), r in routes.items()}
    groups = {}
    for item in items_of(args):
      if item in routes:
        groups.setdefault(routes[item]["route"], []).append(item)
        route_info[item] = f"{routes[item]['route']}: {routes[item]['why']}"
    groups = sorted(groups.items())
  launch, checked = 0, False
  for route, items in groups:
    pending = list(items)
    while pending and time.time() < deadline:
      done, stop = _run_launch(
        args, res, mode, route, pending, not checked, launch, deadline, route_info
      )
      checked, launch = True, launch + 1
      if stop:
        break
    for item in list(pending):
      res.add_run(
        mode,
        {
          "seq_len": item[0],
          "direction": item[1],
          "mode": mode,
          "status": "skipped",
          "step_s": None,
          "error": "budget" if time.time() >= deadline else "not run",
        },
      )
      pending.remove(item)


def run_probe(args, deadline):
  """The `pass` mode's CPU child: jax version, hook or not, and routes without a hook."""
  os.makedirs(os.path.join(args.out_dir, "pass"), exist_ok=True)
  path = os.path.join(args.out_dir, "pass", "events_probe.jsonl")
  if os.path.exists(path):
    os.remove(path)
  env = mode_env("pass", os.environ, args.platform, 1, args.num_procs, "nccl")
  cmd = [
    sys.executable,
    os.path.abspath(__file__),
    "--probe",
    "--mode=pass",
    "--items=" + ";".join(f"{s},{d}" for s, d in items_of(args)),
  ] + args.argv
  info = {"routes": {}}
  log_path = os.path.join(args.out_dir, "pass", "log_probe.txt")
  try:
    with open(log_path, "w") as logf:
      subprocess.run(
        cmd,
        env=env,
        stdout=logf,
        stderr=subprocess.STDOUT,
        timeout=max(10, min(300, deadline - time.time())),
        check=False,
      )
  except subprocess.TimeoutExpired:
    info["error"] = "route probe timed out"
  with open(path) if os.path.exists(path) else open(os.devnull) as f:
    for line in f:
      e = json.loads(line)
      if e["event"] == "info":
        info.update(jax=e["jax"], has_hook=e["has_hook"])
      elif e["event"] == "route":
        info["routes"][(e["seq_len"], e["direction"])] = e
      elif e["event"] in ("core_error", "fatal"):
        info["error"] = e["error"]
  if "has_hook" not in info and "error" not in info:
    info["error"] = "route probe failed: " + _tail(log_path)
  log(
    f"pass: jax {info.get('jax')}, hook {'yes' if info.get('has_hook') else 'no'}"
    + (
      f", routes {sorted({r['route'] for r in info['routes'].values()})}" if info["routes"] else ""
    )
    + (f", {info['error'][:300]}" if "error" in info else "")
  )
  return info


def orchestrate(args):
  os.makedirs(args.out_dir, exist_ok=True)
  deadline = time.time() + args.budget_s - 5
  res = Results(args)
  res.data["env"] = {k: os.environ.get(k) for k in list(MULTICAST_OFF) + ["XLA_FLAGS"]}
  probe_info = None
  if "pass" in args.mode_list:
    probe_info = run_probe(args, deadline)
    res.mode("pass")["probe"] = {k: v for k, v in probe_info.items() if k != "routes"}
    res.mode("pass")["probe"]["routes"] = {
      f"{s},{d}": r for (s, d), r in probe_info["routes"].items()
    }
  for mode in args.mode_list:
    if time.time() > deadline - 20:
      for s, d in items_of(args):
        res.add_run(
          mode,
          {
            "seq_len": s,
            "direction": d,
            "mode": mode,
            "status": "skipped",
            "step_s": None,
            "error": "budget",
          },
        )
      continue
    run_mode(args, res, mode, deadline, probe_info)
  res.data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
  res.write()
  log(f"wrote {os.path.join(args.out_dir, 'ring_step.csv')} and ring_e2e.json")
  return 0


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  try:
    if argv[:1] == ["merge"]:
      if len(argv) < 3:
        raise E2EError("usage: ring_e2e.py merge OUT.csv IN.csv [IN.csv ...]")
      n = merge(argv[1], argv[2:])
      log(f"{argv[1]}: {n} rows")
      return 0
    args = parse_args(argv)
    if args.worker:
      return worker(args)
    if args.probe:
      return probe(args)
    return orchestrate(args)
  except E2EError as e:
    print(f"ring_e2e.py: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
