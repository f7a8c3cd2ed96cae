#!/usr/bin/env python3
"""Ring collective-permute microbenchmark at the level XLA works, one process per GPU.

    python3 benchmarks/xla_permute_bench.py --out=permute.csv [--backends=nccl,nvshmem]
        [--operands=1,2,4] [--sizes=1K:256M:4] [--trips=50] [--reps=5]
        [--chain=1] [--compiles=1] [--reference-operands=1]
        [--compute-bytes=64M] [--uncombined=nvshmem] [--details=permute.json]
        [--budget-s=480]
    python3 benchmarks/xla_permute_bench.py --hang-check --out=hang.json [--timeout=40]

Each process owns one GPU (jax.distributed, local_device_ids=[rank]), or with
--single-process one process drives every GPU; the program is
a `lax.fori_loop` whose body rotates K operands around the ring with one
`lax.ppermute` (XLA's permute combiner makes it one multi-operand
collective-permute, as it does for ring attention's K and V) and multiplies them
by a constant. The same loop without the permute gives the baseline: the loop,
the multiply and the kernel launches. The permute's own time per step is
step - baseline, which is what the cost model predicts.

Small permutes (10-25 us) sit on a loop step whose overhead moves by a few us
from one compile to the next, so one compile of each loop gives a noisy
difference. Two options cut that noise:
  --chain=N     N dependent (permute, multiply) pairs per loop step, and N
                multiplies in the baseline: own = (step - baseline) / N, so the
                compile-to-compile change of the loop's overhead is divided by N.
  --compiles=C  C independent compiles of step and baseline per point, in C
                rounds over all points (a budget cut leaves every point with the
                rounds done); the row is the compile whose own time is the median,
                and own_spread_s is the max - min of own over the compiles.
With a chain, every operand also reads one element of the next after each
multiply, so XLA's combiner can join only the K permutes of one position.
--reference-operands=1 adds the same sizes at --chain=1 for those operand counts,
to check that a permute in a chain costs what a lone permute per step costs.
--compute-bytes=64M puts a memory-bound kernel of that size (per device) before
the permutes of every step, in step and baseline: the GPU is busy while the host
queues the permute, as in a program with compute.
--uncombined=nvshmem sets XLA's permute combine threshold to 0 for those backends
(at the pin the combiner runs after the NVSHMEM assigner, so combined permutes
would run on NCCL).

Backends are XLA modes, each in fresh processes because XLA reads XLA_FLAGS once:
  nccl       plain XLA
  nvshmem    --xla_gpu_experimental_enable_nvshmem=true (XLA up to jax 0.10.1: the
             assigner puts every permute on NVSHMEM; buffers in memory space S(1))
  peer       --xla_gpu_collective_permute_mode=peer (XLA of jax >= 0.10.2)
  symmetric  --xla_gpu_collective_permute_mode=symmetric

--sizes are the bytes each device sends per permute, all operands together
(each operand holds bytes/K). The CSV header is
  backend,link_class,bytes,seconds,operands,step_s,baseline_s,devices,jax_version,loop_trips
and `hlo-tools heuristics calibrate` reads it as is. A row's times are the slowest
rank's medians (a ring step ends when its slowest edge does).

--hang-check runs a non-cyclic shift (pairs {0->1} on two GPUs: device 0 has no
source) twice under a timeout: as XLA runs it on NCCL (what our pass emits for it)
and with the NVSHMEM flag, whose permute calls a world-team barrier only on devices
with a source. It records, per variant, whether it finished, timed out, or failed.

NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0,
NVSHMEM_DISABLE_NVLS=1, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # pylint: disable=wrong-import-position
from benchlib import MULTICAST_OFF, BenchError, parse_list, parse_size  # pylint: disable=wrong-import-position,unused-import

os.environ.update(MULTICAST_OFF)

BACKEND_FLAGS = {
  "nccl": [],
  "nvshmem": ["--xla_gpu_experimental_enable_nvshmem=true"],
  "peer": ["--xla_gpu_collective_permute_mode=peer"],
  "symmetric": ["--xla_gpu_collective_permute_mode=symmetric"],
}
_OWN_PREFIXES = (
  "--xla_gpu_experimental_enable_nvshmem",
  "--xla_gpu_collective_permute_mode",
  "--xla_gpu_collective_permute_combine_threshold_bytes",
)
CSV_HEADER = (
  "backend",
  "link_class",
  "bytes",
  "seconds",
  "operands",
  "step_s",
  "baseline_s",
  "devices",
  "jax_version",
  "loop_trips",
  "chain",
  "compiles",
  "own_spread_s",
  "compute_bytes",
)
NO_COMBINE_FLAG = "--xla_gpu_collective_permute_combine_threshold_bytes=0"


def parse_sizes(text):
  """'1K:256M' -> powers of two from 1 KiB to 256 MiB ('1K:256M:4': powers of 4);
  '1K,1M' -> those two."""
  return benchlib.parse_sizes(text)


def backend_env(backend, base_env, uncombined=False):
  env = benchlib.child_env(
    base_env,
    drop_flags=_OWN_PREFIXES,
    xla_flags=(BACKEND_FLAGS[backend] + ([NO_COMBINE_FLAG] if uncombined else [])),
  )
  # Symmetric heap for the largest buffers (in, out, and XLA's own).
  env.setdefault("NVSHMEM_SYMMETRIC_SIZE", "4G")
  return env


def csv_rows(backend, points, devices, jax_version, trips, compute_bytes=0, link_class=None):
  """CSV rows from the merged points (times per permute slot of the loop);
  link_class defaults to one host's (nvlink, or same_device for one GPU)."""
  link_class = link_class or ("nvlink" if devices > 1 else "same_device")
  rows = []
  for p in points:
    if p.get("step_s") is None or p.get("baseline_s") is None:
      continue
    rows.append(
      {
        "backend": backend,
        "link_class": link_class,
        "bytes": p["bytes"],
        "seconds": max(p["step_s"] - p["baseline_s"], 0.0),
        "operands": p["operands"],
        "step_s": p["step_s"],
        "baseline_s": p["baseline_s"],
        "devices": devices,
        "jax_version": jax_version,
        "loop_trips": trips,
        "chain": p.get("chain", 1),
        "compiles": p.get("compiles", 1),
        "own_spread_s": p.get("own_spread_s", 0.0),
        "compute_bytes": compute_bytes,
      }
    )
  return rows


def merge_compiles(chain, compiles):
  """One point from its compiles [(step_s, baseline_s)] per loop trip.

  Each compile gives own = (step - baseline) / chain; the point takes the
  compile whose own time is the median (the lower middle one for an even
  count), so step_s - baseline_s stays that compile's own time. Times are per
  permute slot (divided by chain)."""
  owns = [((st - ba) / chain, st / chain, ba / chain) for st, ba in compiles]
  ranked = sorted(owns)
  own, step, base = ranked[(len(ranked) - 1) // 2]
  return {
    "step_s": step,
    "baseline_s": base,
    "compiles": len(owns),
    "own_compiles_s": [o for o, _, _ in owns],
    "own_spread_s": ranked[-1][0] - ranked[0][0],
  }


def merge_ranks(rank_results):
  """Per (chain, operands, bytes): per compile the slowest rank's step and
  baseline (a ring step ends when its slowest edge does), then the median
  compile (merge_compiles)."""
  merged = {}
  for res in rank_results:
    for p in res.get("points", []):
      chain = p.get("chain", 1)
      key = (chain, p["operands"], p["bytes"])
      m = merged.setdefault(
        key,
        {
          "chain": chain,
          "operands": p["operands"],
          "bytes": p["bytes"],
          "runs": {},
          "step_spread": None,
          "baseline_spread": None,
        },
      )
      for c, run in enumerate(p.get("runs", [])):
        if run.get("step_s") is None or run.get("baseline_s") is None:
          continue
        old = m["runs"].get(c)
        m["runs"][c] = (
          run if old is None else {k: max(old[k], run[k]) for k in ("step_s", "baseline_s")}
        )
        for k in ("step_spread", "baseline_spread"):
          if run.get(k) is not None:
            m[k] = run[k] if m[k] is None else max(m[k], run[k])
  points = []
  for key in sorted(merged):
    m = merged[key]
    by_compile = m.pop("runs")
    runs = [by_compile[c] for c in sorted(by_compile)]
    if runs:
      m.update(merge_compiles(m["chain"], [(r["step_s"], r["baseline_s"]) for r in runs]))
    points.append(m)
  return points


# ---------------------------------------------------------------------------
# Child: one rank.


def _init_distributed(args):
  import jax

  if args.single_process:  # one process drives every visible GPU
    return jax
  kwargs = {"local_device_ids": [args.rank]}
  if os.environ.get("JAX_PLATFORMS") == "cpu":  # CPU test runs: gloo, no ids
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs = {}
  jax.distributed.initialize(
    f"127.0.0.1:{args.port}", num_processes=args.nprocs, process_id=args.rank, **kwargs
  )
  return jax


def _permute_backends(compiled_text):
  """Backend of each collective-permute(-start) in compiled HLO text."""
  found = []
  for line in compiled_text.splitlines():
    m = re.search(r"\s(collective-permute(?:-start)?)\(", line)
    if not m:
      continue
    b = re.search(r'"backend":"(\w+)"', line)
    mode = re.search(r'"collectives_mode":"(\w+)"', line)
    args = line[m.end() :].split(")", 1)[0]
    found.append(
      {
        "op": m.group(1),
        "backend": b.group(1) if b else None,
        "collectives_mode": mode.group(1) if mode else None,
        "operands": args.count("%") or len([a for a in args.split(",") if a]),
        "symmetric_memory": "S(1)" in line,
      }
    )
  return found


def _build(jax, mesh, operands, elems, perm, with_permute, trips, chain=1, compute_elems=0):
  import jax.numpy as jnp
  from jax import lax
  from jax.sharding import NamedSharding, PartitionSpec as P

  try:
    from jax import shard_map

    smap = lambda f: shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  except ImportError:
    from jax.experimental.shard_map import shard_map

    smap = lambda f: shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_rep=False)

  def mix(xs):
    # Every operand takes one element of the next, so the permutes of one chain
    # position depend on all of the position before: XLA's combiner can then
    # join only the K permutes of one position, as in ring attention's K and V.
    # One position (chain 1) needs no mixing: the step is the plain multiply.
    if len(xs) == 1 or chain == 1:
      return tuple(x * jnp.float32(1.0001) for x in xs)
    return tuple(
      x * jnp.float32(1.0001) + xs[(i + 1) % len(xs)][:1] * jnp.float32(1e-30)
      for i, x in enumerate(xs)
    )

  def chained(xs):
    for _ in range(chain):  # each pair depends on the one before
      if with_permute:
        xs = lax.ppermute(xs, "x", perm)
      # The barrier keeps the baseline's multiplies apart, one kernel per
      # position as between the permutes (fused they would cost less).
      xs = lax.optimization_barrier(mix(xs)) if chain > 1 else mix(xs)
    return xs

  def step(xs):
    if not compute_elems:
      return chained(xs)
    # A memory-bound kernel first, which the operands then depend on (the
    # barrier stops XLA from recomputing the one element they read): the GPU
    # is busy while the host queues the permute, as in a program with compute.
    big = lax.optimization_barrier(xs[-1] * jnp.float32(1.0001))
    ops = tuple(x + big[:1] * jnp.float32(1e-30) for x in xs[:-1])
    return chained(ops) + (big,)

  @jax.jit
  @smap
  def loop(xs):
    return lax.fori_loop(0, trips, lambda i, v: step(v), xs)

  sharding = NamedSharding(mesh, P("x"))
  n = mesh.devices.size
  xs = tuple(
    jax.device_put(jnp.ones((n * elems,), jnp.float32) * (k + 1), sharding) for k in range(operands)
  )
  if compute_elems:
    xs += (jax.device_put(jnp.ones((n * compute_elems,), jnp.float32), sharding),)
  return loop, xs


def _time(jax, fn, xs, reps):
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    out = fn(xs)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def _measure_once(jax, mesh, ring, operands, elems, chain, args, result):
  """One compile of step and baseline, timed alternately so drift hits both
  alike: {step_s, baseline_s} per loop trip (medians) and their spreads."""
  compute = compute_bytes(args) // 4
  step_fn, xs = _build(jax, mesh, operands, elems, ring, True, args.trips, chain, compute)
  base_fn, _ = _build(jax, mesh, operands, elems, ring, False, args.trips, chain, compute)
  seen = result.setdefault("compiled_permutes", {})
  if f"{chain}x{operands}" not in seen:
    seen[f"{chain}x{operands}"] = _permute_backends(step_fn.lower(xs).compile().as_text())
  jax.block_until_ready(step_fn(xs))
  jax.block_until_ready(base_fn(xs))
  steps, bases = [], []
  for _ in range(args.reps):
    steps.append(_time(jax, step_fn, xs, 1) / args.trips)
    bases.append(_time(jax, base_fn, xs, 1) / args.trips)
  step, base = statistics.median(steps), statistics.median(bases)
  return {
    "step_s": step,
    "baseline_s": base,
    "step_spread": (max(steps) - min(steps)) / step,
    "baseline_spread": (max(bases) - min(bases)) / base,
  }


def compute_bytes(args):
  text = args.compute_bytes
  return 0 if text in ("", "0") else parse_size(text)


def point_plan(args):
  """[(chain, operands, requested bytes)]: the main grid, then the chain-1
  reference points."""
  sizes = parse_sizes(args.sizes)
  plan = [(args.chain, o, s) for o in parse_list(args.operands, cast=int) for s in sizes]
  if args.chain != 1 and args.reference_operands:
    plan += [(1, o, s) for o in parse_list(args.reference_operands, cast=int) for s in sizes]
  return plan


def run_child(args):
  result = {"rank": args.rank, "points": [], "errors": []}
  try:
    jax = _init_distributed(args)
    import numpy as np
    from jax.sharding import Mesh

    result["jax_version"] = jax.__version__
    result["devices"] = [str(d) for d in jax.devices()]
    mesh = Mesh(np.array(jax.devices()), ("x",))
    n = mesh.devices.size
    ring = [(i, (i + 1) % n) for i in range(n)]
    deadline = time.time() + args.budget_s
    points = {}
    # Rounds over compiles outermost: a budget cut leaves every point measured
    # by the rounds already done.
    for rnd in range(args.compiles):
      for chain, operands, total in point_plan(args):
        if time.time() > deadline:
          result["errors"].append(
            f"budget reached in round {rnd + 1} before chain {chain}, {operands}x{total}"
          )
          break
        elems = max(total // operands // 4, 1)
        point = points.setdefault(
          (chain, operands, total),
          {"chain": chain, "operands": operands, "bytes": elems * 4 * operands, "runs": []},
        )
        try:
          run = _measure_once(jax, mesh, ring, operands, elems, chain, args, result)
        except Exception as e:  # recorded; the compile is skipped
          run = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
          result["errors"].append(f"chain {chain}, {operands}x{total}: {run['error']}")
        point["runs"].append(run)
        print(
          f"[rank {args.rank}] round {rnd + 1} chain {chain} {operands} x "
          f"{total} B: step {run.get('step_s')} baseline {run.get('baseline_s')}",
          flush=True,
        )
      else:
        continue
      break
    result["points"] = list(points.values())
  except Exception as e:
    result["errors"].append(f"{type(e).__name__}: {str(e)[:1000]}")
  with open(args.child_out, "w") as f:
    json.dump(result, f)
  return 0


def run_hang_child(args):
  """One rank of the shift: pairs {0->1}; prints DONE when it finishes."""
  jax = _init_distributed(args)
  import numpy as np
  from jax.sharding import Mesh

  mesh = Mesh(np.array(jax.devices()), ("x",))
  fn, xs = _build(jax, mesh, 1, 1024, [(0, 1)], True, 4)
  print("permutes:", json.dumps(_permute_backends(fn.lower(xs).compile().as_text())), flush=True)
  jax.block_until_ready(fn(xs))
  print("DONE", flush=True)
  return 0


# ---------------------------------------------------------------------------
# Parent.


def _gpu_count():
  import subprocess  # pylint: disable=import-outside-toplevel

  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
  except OSError:
    return 1
  return max(len([l for l in out.stdout.splitlines() if l.startswith("GPU")]), 1)


def bench(args):
  gpus = args.nprocs or _gpu_count()
  nprocs = 1 if args.single_process else gpus
  rows, details = (
    [],
    {
      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
      "args": vars(args),
      "backends": {},
    },
  )
  start = time.time()
  with tempfile.TemporaryDirectory() as tmp:
    backends = parse_list(args.backends, BACKEND_FLAGS)
    uncombined_set = set(parse_list(args.uncombined, BACKEND_FLAGS) if args.uncombined else [])
    for i, backend in enumerate(backends):
      left = args.budget_s - (time.time() - start)
      share = left / (len(backends) - i)
      if share < 30:
        details["backends"][backend] = {"status": "skipped: no budget left"}
        continue
      outs = [os.path.join(tmp, f"{backend}_{r}.json") for r in range(nprocs)]
      extra = [
        "--child-out={}",
        "--operands",
        args.operands,
        "--sizes",
        args.sizes,
        "--trips",
        str(args.trips),
        "--reps",
        str(args.reps),
        "--chain",
        str(args.chain),
        "--compiles",
        str(args.compiles),
        "--reference-operands",
        args.reference_operands,
        "--compute-bytes",
        args.compute_bytes or "0",
        "--budget-s",
        str(max(share - 45, 10)),
      ]
      uncombined = backend in uncombined_set
      print(f"== {backend}: {gpus} GPUs, {nprocs} process(es), budget {share:.0f} s", flush=True)
      status, logs = _spawn_with_outputs(extra, backend, nprocs, share, tmp, outs, uncombined)
      ranks = []
      for o in outs:
        if os.path.exists(o):
          with open(o) as f:
            ranks.append(json.load(f))
      merged = merge_ranks(ranks)
      version = next((r.get("jax_version") for r in ranks if r.get("jax_version")), "")
      rows += csv_rows(backend, merged, gpus, version, args.trips, compute_bytes(args))
      details["backends"][backend] = {
        "status": status,
        "points": merged,
        "jax_version": version,
        "xla_flags": backend_env(backend, os.environ, uncombined)["XLA_FLAGS"],
        "compiled_permutes": [r.get("compiled_permutes") for r in ranks],
        "errors": [r.get("errors") for r in ranks],
        "log_tails": [t[-1500:] for t in logs],
      }
      print(f"   {backend}: {status}, {len(merged)} points", flush=True)
  _write_csv(args.out, rows)
  if args.details:
    _write_json(args.details, details)
  return 0


def _spawn_with_outputs(extra, backend, nprocs, timeout, tmp, outs, uncombined=False):
  # Each rank gets its own output file: fill the placeholder per rank.
  port = benchlib.free_port()
  env = backend_env(backend, os.environ, uncombined)
  procs, logs = [], []
  for r in range(nprocs):
    log = open(os.path.join(tmp, f"{backend}_{r}.log"), "w+")
    cmd = [
      sys.executable,
      os.path.abspath(__file__),
      "--rank",
      str(r),
      "--nprocs",
      str(nprocs),
      "--port",
      str(port),
    ]
    if nprocs == 1 and extra and extra[0] == "--child-out={}" and _SINGLE[0]:
      cmd.append("--single-process")
    cmd += [e.format(outs[r]) if e == "--child-out={}" else e for e in extra]
    procs.append(benchlib.spawn(cmd, env, log))
    logs.append(log)
  status = benchlib.wait_all(procs, timeout)
  texts = []
  for log in logs:
    log.seek(0)
    texts.append(log.read())
    log.close()
  return status, texts


def hang_check(args):
  nprocs = args.nprocs or _gpu_count()
  report = {
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "pairs": "{0->1}",
    "devices": nprocs,
    "timeout_s": args.timeout,
    "variants": {},
  }
  with tempfile.TemporaryDirectory() as tmp:
    for backend in parse_list(args.backends, BACKEND_FLAGS):
      t0 = time.time()
      status, logs = _spawn_with_outputs(
        ["--hang-child"], backend, nprocs, args.timeout, tmp, [None] * nprocs
      )
      done = [("DONE" in t) for t in logs]
      permutes = [l for t in logs for l in t.splitlines() if l.startswith("permutes:")]
      report["variants"][backend] = {
        "status": status,
        "ranks_done": done,
        "wall_s": round(time.time() - t0, 1),
        "compiled_permutes": permutes[:1],
        "log_tails": [t[-800:] for t in logs],
      }
      print(f"== shift on {backend}: {status}, ranks done {done}", flush=True)
  _write_json(args.out, report)
  return 0


# ---------------------------------------------------------------------------
# Cross-host mode: the user launches one process per GPU on every node.

# (process id, process count, local GPU) defaults from the launcher.
LAUNCHER_ENV = (
  ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
)


def _env_int(env, name):
  text = env.get(name, "")
  try:
    return int(text)
  except ValueError:
    raise BenchError(f"{name}={text!r} is not a whole number") from None


def cross_host_settings(args, env):
  """{coordinator, process_id, num_processes, local_id, gpus_per_host} from the
  flags, falling back to Slurm's or Open MPI's variables; BenchError on bad input."""
  pid, nprocs, local = args.process_id, args.num_processes, args.local_id
  for rank_var, size_var, local_var in LAUNCHER_ENV:
    if rank_var in env:
      pid = _env_int(env, rank_var) if pid is None else pid
      nprocs = _env_int(env, size_var) if nprocs is None and size_var in env else nprocs
      local = _env_int(env, local_var) if local is None and local_var in env else local
      break
  if ":" not in args.coordinator or not args.coordinator.rsplit(":", 1)[1].isdigit():
    raise BenchError(f"--coordinator={args.coordinator!r}: expected HOST:PORT")
  if nprocs is None or nprocs < 1:
    raise BenchError("--num-processes must be >= 1 (or set SLURM_NTASKS / OMPI_COMM_WORLD_SIZE)")
  if pid is None or not 0 <= pid < nprocs:
    raise BenchError(f"--process-id={pid} must be in 0..{nprocs - 1}")
  g = args.gpus_per_host
  if g < 1 or nprocs % g:
    raise BenchError(f"--gpus-per-host={g} must be >= 1 and divide --num-processes={nprocs}")
  if local is None:
    local = pid % g
  if not 0 <= local < g:
    raise BenchError(f"local GPU {local} must be in 0..{g - 1}")
  if len(parse_list(args.backends, BACKEND_FLAGS)) != 1:
    raise BenchError(
      "--coordinator measures one backend per launch "
      "(XLA's flags are fixed when jax starts): give one --backends"
    )
  if parse_list(args.backends, BACKEND_FLAGS) == ["nvshmem"] and nprocs > g:
    # The pinned receiver waits only in a barrier over NVSHMEM_TEAM_SHARED (one
    # host), so a put from another host is not waited for: nothing to measure.
    raise BenchError(
      f"--backends=nvshmem: the ring of {nprocs} processes leaves its "
      f"host of {g} GPUs, and NVSHMEM runs only inside one host "
      "(NVSHMEM_TEAM_SHARED) at the pinned XLA; measure nccl"
    )
  return {
    "coordinator": args.coordinator,
    "process_id": pid,
    "num_processes": nprocs,
    "local_id": local,
    "gpus_per_host": g,
  }


def ring_edges(num_devices):
  """The ring over every device in process order (one GPU per process)."""
  return [(i, (i + 1) % num_devices) for i in range(num_devices)]


def edge_link_class(src, dst, gpus_per_host):
  if src == dst:
    return "same_device"
  return "nvlink" if src // gpus_per_host == dst // gpus_per_host else "network"


def ring_link_class(edges, gpus_per_host):
  """The permute's class is its worst edge's (a ring step ends with its slowest edge)."""
  order = ("same_device", "nvlink", "network")
  return max((edge_link_class(s, d, gpus_per_host) for s, d in edges), key=order.index)


def _gather_points(jax, points, compiles):
  """Every process's runs, as rank results for merge_ranks (allgather over the
  coordinator's processes; a missing run travels as NaN)."""
  import numpy as np
  from jax.experimental import multihost_utils

  keys = sorted(points)
  local = np.full((len(keys), compiles, 2), np.nan)
  for k, key in enumerate(keys):
    for c, run in enumerate(points[key]["runs"][:compiles]):
      if run.get("step_s") is not None and run.get("baseline_s") is not None:
        local[k, c] = (run["step_s"], run["baseline_s"])
  every = np.asarray(multihost_utils.process_allgather(local))
  ranks = []
  for per_rank in every.reshape((-1,) + local.shape):
    ranks.append(
      {
        "points": [
          dict(
            points[key],
            runs=[
              {"step_s": float(s), "baseline_s": float(b)}
              for s, b in per_rank[k]
              if not np.isnan(s)
            ],
          )
          for k, key in enumerate(keys)
        ]
      }
    )
  return ranks


def run_cross_host(args, settings):
  """One process of a multi-node run; process 0 writes the CSV."""
  backend = parse_list(args.backends, BACKEND_FLAGS)[0]
  # XLA reads its flags when jax starts: set them before the import.
  os.environ.update(backend_env(backend, os.environ, False))
  import jax
  import numpy as np
  from jax.sharding import Mesh

  kwargs = {"local_device_ids": [settings["local_id"]]}
  if os.environ.get("JAX_PLATFORMS") == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs = {}
  jax.distributed.initialize(
    settings["coordinator"],
    num_processes=settings["num_processes"],
    process_id=settings["process_id"],
    **kwargs,
  )
  mesh = Mesh(np.array(jax.devices()), ("x",))
  n = mesh.devices.size
  ring = ring_edges(n)
  link = ring_link_class(ring, settings["gpus_per_host"])
  result, points = {"rank": settings["process_id"], "errors": []}, {}
  for rnd in range(args.compiles):
    for chain, operands, total in point_plan(args):
      elems = max(total // operands // 4, 1)
      point = points.setdefault(
        (chain, operands, total),
        {"chain": chain, "operands": operands, "bytes": elems * 4 * operands, "runs": []},
      )
      point["runs"].append(_measure_once(jax, mesh, ring, operands, elems, chain, args, result))
      print(
        f"[process {settings['process_id']}] round {rnd + 1} chain {chain} "
        f"{operands} x {total} B ({link})",
        flush=True,
      )
  merged = merge_ranks(_gather_points(jax, points, args.compiles))
  if settings["process_id"] == 0:
    _write_csv(
      args.out,
      csv_rows(
        backend, merged, n, jax.__version__, args.trips, compute_bytes(args), link_class=link
      ),
    )
  return 0


def _write_csv(path, rows):
  benchlib.write_csv(path, CSV_HEADER, rows)


def _write_json(path, data):
  benchlib.write_json(path, data)


def build_parser():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", help="CSV (bench) or JSON (--hang-check)")
  p.add_argument("--details", help="JSON with per-rank details")
  p.add_argument("--backends", default="nccl,nvshmem")
  p.add_argument("--operands", default="1,2,4")
  p.add_argument("--sizes", default="1K:256M:4")
  p.add_argument("--trips", type=int, default=50)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument(
    "--chain", type=int, default=1, help="dependent (permute, multiply) pairs per loop step"
  )
  p.add_argument(
    "--compiles",
    type=int,
    default=1,
    help="independent compiles per point (rounds over all points)",
  )
  p.add_argument(
    "--reference-operands",
    default="",
    help="operand counts also measured at chain 1 (with --chain > 1)",
  )
  p.add_argument(
    "--compute-bytes",
    default="",
    help="per device: a memory-bound kernel of this size before the "
    "permutes in every loop step (in step and baseline)",
  )
  p.add_argument(
    "--uncombined", default="", help="backends run with XLA's permute combine threshold at 0"
  )
  p.add_argument("--budget-s", type=float, default=480)
  p.add_argument("--timeout", type=float, default=40, help="per variant, --hang-check")
  p.add_argument("--nprocs", type=int, default=0, help="GPUs (default: all visible)")
  p.add_argument(
    "--single-process",
    action="store_true",
    help="one process drives every GPU (XLA's peer and symmetric permutes "
    "run only when one process holds every device of the permute)",
  )
  p.add_argument("--hang-check", action="store_true")
  # Cross-host mode: one process per GPU, started by the user on every node.
  p.add_argument(
    "--coordinator",
    default="",
    help="HOST:PORT of process 0; runs this process of a multi-node ring",
  )
  p.add_argument(
    "--num-processes",
    type=int,
    default=None,
    help="with --coordinator (default: SLURM_NTASKS / OMPI_COMM_WORLD_SIZE)",
  )
  p.add_argument(
    "--process-id",
    type=int,
    default=None,
    help="with --coordinator (default: SLURM_PROCID / OMPI_COMM_WORLD_RANK)",
  )
  p.add_argument(
    "--local-id",
    type=int,
    default=None,
    help="this process's GPU on its node (default: SLURM_LOCALID / "
    "OMPI_COMM_WORLD_LOCAL_RANK, else process id mod --gpus-per-host)",
  )
  p.add_argument("--gpus-per-host", type=int, default=8)
  # Child-only arguments.
  p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
  p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--child-out", help=argparse.SUPPRESS)
  p.add_argument("--hang-child", action="store_true", help=argparse.SUPPRESS)
  return p


_SINGLE = [False]


def main(argv=None):
  args = build_parser().parse_args(argv)
  _SINGLE[0] = args.single_process
  try:
    if args.rank >= 0:
      return run_hang_child(args) if args.hang_child else run_child(args)
    if not args.out:
      raise BenchError("--out is required")
    parse_sizes(args.sizes)
    parse_list(args.operands, cast=int)
    parse_list(args.backends, BACKEND_FLAGS)
    if args.uncombined:
      parse_list(args.uncombined, BACKEND_FLAGS)
    if args.reference_operands:
      parse_list(args.reference_operands, cast=int)
    compute_bytes(args)
    for name in ("trips", "reps", "chain", "compiles"):
      if getattr(args, name) < 1:
        raise BenchError(f"--{name} must be >= 1")
    if args.coordinator or args.num_processes is not None or args.process_id is not None:
      if not args.coordinator:
        raise BenchError("--num-processes / --process-id need --coordinator=HOST:PORT")
      return run_cross_host(args, cross_host_settings(args, os.environ))
    return hang_check(args) if args.hang_check else bench(args)
  except BenchError as e:
    print(f"xla_permute_bench: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
