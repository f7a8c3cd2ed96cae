#!/usr/bin/env python3
"""Runs the runtime rules the selection core follows, on the GPUs at hand.

    python3 benchmarks/runtime_rules_check.py --out-dir=DIR [--gpus=N] [--pinned-path=DIR]
        [--parts=types,shift] [--types=s8,f8e4m3fn,bf16] [--timeout=120]
        [--shift-timeout=60] [--trips=3] [--elems=4096]

Two checks, each in fresh child processes (XLA reads XLA_FLAGS once):

types   pinned XLA (jax 0.9.1 on --pinned-path; --xla_gpu_experimental_enable_nvshmem=true),
        one process per GPU. A permute of each element type in a loop, put on NVSHMEM by
        upstream's assigner (the flag), and the plan the core emits for an s8 permute
        (backend DEFAULT: no NVSHMEM flag, so NCCL). At the pin the NVSHMEM put exists
        only for F64, F32, F16, BF16, S32, S64, U32 and U64 (nvshmem_communicator.cc,
        NvshmemCommunicator::P2P), so s8 and fp8 should fail there and bf16 run.
        2+ GPUs: the ring {i -> i+1}. 1 GPU: {0 -> 0}, which XLA emits as a copy (a
        degenerate permute), and {} (no pairs), the one permute on one device that
        reaches the NVSHMEM thunk; neither reaches the put.
shift   today's XLA (the jax on the default path, >= 0.10.2), one process for 2 GPUs:
        {0 -> 1} with --xla_gpu_collective_permute_mode=peer, killed after
        --shift-timeout seconds: run, hang or fail. Needs 2 GPUs.

Each child compiles with --xla_dump_to and records the compiled permutes' backend and
the collective thunks of the dumped thunk sequence, runs the loop and checks every
device's values against numpy. Outputs in --out-dir: runtime_rules.csv (one row per
run: part,variant,dtype,pairs,gpus,processes,status,values,backend,thunks,error,
jax_version,wall_s) and runtime_rules.json (the rows, versions, log tails, date).

NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0,
NVSHMEM_DISABLE_NVLS=1, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time

_GPU = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_GPU, os.path.dirname(_GPU)]  # benchlib; hlo_tools for its writer
import benchlib  # pylint: disable=wrong-import-position
from benchlib import MULTICAST_OFF, BenchError, parse_list  # pylint: disable=wrong-import-position

os.environ.update(MULTICAST_OFF)

PARTS = ("types", "shift")
# HLO element type -> numpy / ml_dtypes name.
TYPES = {
  "s8": "int8",
  "u8": "uint8",
  "f8e4m3fn": "float8_e4m3fn",
  "f8e5m2": "float8_e5m2",
  "bf16": "bfloat16",
  "f16": "float16",
  "f32": "float32",
  "s32": "int32",
}
NVSHMEM_FLAG = "--xla_gpu_experimental_enable_nvshmem=true"
PEER_FLAG = "--xla_gpu_collective_permute_mode=peer"
_OWN_PREFIXES = (
  "--xla_gpu_experimental_enable_nvshmem",
  "--xla_gpu_collective_permute_mode",
  "--xla_dump_to",
  "--xla_dump_hlo_as_text",
)
CSV_HEADER = (
  "part",
  "variant",
  "dtype",
  "pairs",
  "gpus",
  "processes",
  "status",
  "values",
  "backend",
  "thunks",
  "error",
  "jax_version",
  "wall_s",
)
# A child prints one line starting with this, holding its result as JSON.
RESULT_TAG = "RESULT "


# ---------------------------------------------------------------------------
# The plan: which runs make up each part on `gpus` GPUs.


def ring_pairs(gpus):
  return [(i, (i + 1) % gpus) for i in range(gpus)]


def plan_runs(parts, types, gpus):
  """Runs as dicts: part, variant, dtype, pairs, processes, flags, pinned, skip."""
  runs = []
  if "types" in parts:
    pair_sets = [ring_pairs(gpus)] if gpus >= 2 else [[(0, 0)], []]
    for pairs in pair_sets:
      for dtype in types:
        runs.append(
          dict(
            part="types",
            variant="nvshmem",
            dtype=dtype,
            pairs=pairs,
            processes=gpus,
            flags=[NVSHMEM_FLAG],
            pinned=True,
          )
        )
      if "s8" in types:  # the core's plan for s8: DEFAULT (it refuses NVSHMEM there)
        runs.append(
          dict(
            part="types",
            variant="pass",
            dtype="s8",
            pairs=pairs,
            processes=gpus,
            flags=[],
            pinned=True,
          )
        )
  if "shift" in parts:
    run = dict(
      part="shift",
      variant="peer",
      dtype="f32",
      pairs=[(0, 1)],
      processes=1,
      flags=[PEER_FLAG],
      pinned=False,
    )
    if gpus < 2:
      run["skip"] = f"needs 2 GPUs, {gpus} visible"
    runs.append(run)
  return runs


def pairs_text(pairs):
  return "{" + ",".join(f"{s}->{t}" for s, t in pairs) + "}"


def parse_pairs(text):
  """'0-1,1-0' -> [(0, 1), (1, 0)]; '' or 'none' -> []."""
  if text in ("", "none"):
    return []
  try:
    return [tuple(int(v) for v in p.split("-")) for p in text.split(",")]
  except ValueError:
    raise BenchError(f"bad pairs {text!r} (e.g. 0-1,1-0)") from None


def pairs_arg(pairs):
  return ",".join(f"{s}-{t}" for s, t in pairs) or "none"


# ---------------------------------------------------------------------------
# Child: one process of one run.


def expected_shards(pairs, ndev, trips, elems, dtype_np):
  """Every device's values after `trips` permutes: a device without a source gets zeros."""
  import numpy as np  # pylint: disable=import-outside-toplevel

  shards = [initial_shard(d, elems, dtype_np) for d in range(ndev)]
  for _ in range(trips):
    nxt = [np.zeros_like(s) for s in shards]
    for s, t in pairs:
      nxt[t] = shards[s].copy()
    shards = nxt
  return shards


def initial_shard(device, elems, dtype_np):
  """Small integers (exact in s8, u8, fp8 and bf16), different on every device."""
  import numpy as np  # pylint: disable=import-outside-toplevel

  return ((np.arange(elems) % 13) + 1 + 16 * device).astype(np.float32).astype(dtype_np)


def collective_thunks(dump_dir):
  """Thunk lines of the dumped thunk sequences that copy or permute."""
  found = []
  for path in sorted(glob.glob(os.path.join(dump_dir, "*thunk_sequence*"))):
    with open(path, errors="replace") as f:
      for line in f:
        if re.search(r"permute|nvshmem|copy", line, re.I):
          found.append(line.strip()[:160])
  return found


def permute_backends(compiled_text):
  """backend / collectives_mode of each collective-permute(-start) in compiled HLO."""
  found = []
  for line in compiled_text.splitlines():
    if not re.search(r"\scollective-permute(?:-start)?\(", line):
      continue
    b = re.search(r'"backend":"(\w+)"', line)
    m = re.search(r'"collectives_mode":"(\w+)"', line)
    pairs = re.search(r"source_target_pairs=(\{[^ ]*\})", line)
    found.append(
      {
        "backend": b.group(1) if b else "DEFAULT",
        "collectives_mode": m.group(1) if m else None,
        "pairs": pairs.group(1) if pairs else "{}",
      }
    )
  return found


def run_child(args):
  """One process: compile, dump, run and check; prints the RESULT line."""
  result = {"rank": args.rank, "stage": "import"}
  try:
    import jax  # pylint: disable=import-outside-toplevel

    result["jax_version"] = jax.__version__
    result["stage"] = "init"
    if args.nprocs > 1 or args.distributed:
      jax.distributed.initialize(
        f"127.0.0.1:{args.port}",
        num_processes=args.nprocs,
        process_id=args.rank,
        local_device_ids=[args.rank],
      )
    _child_body(jax, args, result)
  except Exception as e:  # pylint: disable=broad-except
    result["error"] = f"{type(e).__name__}: {e}"[:2000]
  print(RESULT_TAG + json.dumps(result), flush=True)
  return 0


def _child_body(jax, args, result):
  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp
  import numpy as np
  from jax import lax
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  try:
    from jax import shard_map
  except ImportError:
    from jax.experimental.shard_map import shard_map
  pairs, dtype = parse_pairs(args.pairs), jnp.dtype(TYPES[args.dtype])
  devices = jax.devices()
  ndev = len(devices)
  mesh = Mesh(np.array(devices), ("x",))

  def body(x):
    return lax.fori_loop(0, args.trips, lambda _, v: lax.ppermute(v, "x", pairs), x)

  fn = jax.jit(shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
  sharding = NamedSharding(mesh, P("x"))
  x = jax.make_array_from_callback(
    (ndev * args.elems,),
    sharding,
    lambda idx: initial_shard((idx[0].start or 0) // args.elems, args.elems, dtype),
  )
  result["stage"] = "compile"
  compiled = fn.lower(x).compile()
  result["permutes"] = permute_backends(compiled.as_text())
  result["thunks"] = collective_thunks(args.dump_dir)
  result["stage"] = "run"
  out = jax.block_until_ready(compiled(x))
  want = expected_shards(pairs, ndev, args.trips, args.elems, dtype)
  checks = {}
  for shard in out.addressable_shards:
    d = (shard.index[0].start or 0) // args.elems
    got = np.asarray(shard.data).astype(np.float32)
    checks[str(d)] = bool(np.array_equal(got, want[d].astype(np.float32)))
  result["values"] = checks
  result["stage"] = "done"


# ---------------------------------------------------------------------------
# Parent.


def gpu_count():
  import subprocess  # pylint: disable=import-outside-toplevel

  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
  except OSError:
    return 0
  return len([l for l in out.stdout.splitlines() if l.startswith("GPU")])


def machine():
  """nvidia-smi's name, memory and driver of each GPU ('' without nvidia-smi)."""
  import subprocess  # pylint: disable=import-outside-toplevel

  try:
    out = subprocess.run(
      ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
      capture_output=True,
      text=True,
      check=False,
    )
  except OSError:
    return ""
  return "; ".join(l.strip() for l in out.stdout.splitlines() if l.strip())


def child_env(run, args, dump_dir):
  env = benchlib.child_env(
    drop_flags=_OWN_PREFIXES,
    xla_flags=run["flags"] + [f"--xla_dump_to={dump_dir}", "--xla_dump_hlo_as_text"],
  )
  path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
  if args.pinned_path:
    path = [p for p in path if os.path.abspath(p) != os.path.abspath(args.pinned_path)]
    if run["pinned"]:
      path.insert(0, args.pinned_path)
  env["PYTHONPATH"] = os.pathsep.join(path)
  return env


def parse_result(log_text):
  for line in reversed(log_text.splitlines()):
    if line.startswith(RESULT_TAG):
      try:
        return json.loads(line[len(RESULT_TAG) :])
      except ValueError:
        return None
  return None


def first_error_line(log_text):
  """The runtime's own error line from a log whose child died without a RESULT."""
  for pattern in (
    r"Invalid NVSHMEM[^\n]*",
    r"F\d{4} [^\n]*",
    r"(?:INTERNAL|UNIMPLEMENTED|"
    r"INVALID_ARGUMENT|FAILED_PRECONDITION): [^\n]*",
    r"Error[^\n]*",
  ):
    m = re.search(pattern, log_text)
    if m:
      return m.group(0)[:400]
  return ""


def summarize(run, status, results, logs, wall):
  """One CSV row from a run's process results and logs."""
  errors = [r["error"] for r in results if r and r.get("error")]
  if status == "finished" and len(results) == run["processes"] and all(results) and not errors:
    outcome = "ran"
  elif status == "timed out":
    outcome = "hang (killed)"
  else:
    outcome = "failed"
  values = {}
  for r in results:
    values.update((r or {}).get("values", {}))
  perms = next((r["permutes"] for r in results if r and r.get("permutes")), [])
  thunks = next((r["thunks"] for r in results if r and r.get("thunks")), [])
  error = (
    errors[0]
    if errors
    else (
      ""
      if outcome == "ran"
      else next((first_error_line(t) for t in logs if first_error_line(t)), status)
    )
  )
  return {
    "part": run["part"],
    "variant": run["variant"],
    "dtype": run["dtype"],
    "pairs": pairs_text(run["pairs"]),
    "gpus": run["gpus"],
    "processes": run["processes"],
    "status": outcome,
    "values": ("right" if values and all(values.values()) else "wrong" if values else "none"),
    "backend": ";".join(sorted({p["collectives_mode"] or p["backend"] for p in perms})),
    "thunks": " | ".join(thunks[:4]),
    "error": error.replace("\n", " "),
    "jax_version": next((r.get("jax_version") for r in results if r), ""),
    "wall_s": round(wall, 1),
  }


def execute(run, args, tmp):
  """Starts the run's processes, waits under its timeout; (row, detail)."""
  tag = f"{run['part']}_{run['variant']}_{run['dtype']}_{len(run['pairs'])}"
  dump_dir = os.path.join(tmp, "dump_" + tag)
  env = child_env(run, args, dump_dir)
  port = benchlib.free_port()
  procs, logs = [], []
  t0 = time.time()
  for r in range(run["processes"]):
    log = open(os.path.join(tmp, f"{tag}_{r}.log"), "w+")
    cmd = [
      sys.executable,
      os.path.abspath(__file__),
      "--child",
      "--rank",
      str(r),
      "--nprocs",
      str(run["processes"]),
      "--port",
      str(port),
      "--dtype",
      run["dtype"],
      "--pairs",
      pairs_arg(run["pairs"]),
      "--trips",
      str(args.trips),
      "--elems",
      str(args.elems),
      "--dump-dir",
      dump_dir,
    ]
    if run["part"] == "types":
      cmd.append("--distributed")
    procs.append(benchlib.spawn(cmd, env, log))
    logs.append(log)
  timeout = args.shift_timeout if run["part"] == "shift" else args.timeout
  status = benchlib.wait_all(procs, timeout)
  texts = []
  for log in logs:
    log.seek(0)
    texts.append(log.read())
    log.close()
  results = [parse_result(t) for t in texts]
  row = summarize(run, status, results, texts, time.time() - t0)
  detail = dict(
    row,
    process_status=status,
    results=results,
    xla_flags=env.get("XLA_FLAGS", ""),
    log_tails=[t[-1500:] for t in texts],
  )
  return row, detail


def skipped_row(run):
  return {
    "part": run["part"],
    "variant": run["variant"],
    "dtype": run["dtype"],
    "pairs": pairs_text(run["pairs"]),
    "gpus": run["gpus"],
    "processes": run["processes"],
    "status": "not run",
    "values": "none",
    "backend": "",
    "thunks": "",
    "error": run["skip"],
    "jax_version": "",
    "wall_s": 0,
  }


def write_outputs(out_dir, rows, details, meta):
  benchlib.write_csv(os.path.join(out_dir, "runtime_rules.csv"), CSV_HEADER, rows)
  benchlib.write_json(
    os.path.join(out_dir, "runtime_rules.json"), dict(meta, rows=rows, details=details)
  )


def check(args):
  gpus = args.gpus if args.gpus else gpu_count()
  if gpus < 1:
    raise BenchError("no GPU visible (nvidia-smi -L lists none); --gpus=N to say how many")
  parts = parse_list(args.parts, PARTS, what="part")
  types = parse_list(args.types, TYPES, what="type")
  if "types" in parts and not args.pinned_path:
    raise BenchError("the types part needs --pinned-path=DIR (jax 0.9.1's site directory)")
  if args.pinned_path and not os.path.isdir(args.pinned_path):
    raise BenchError(f"--pinned-path {args.pinned_path}: no such directory")
  os.makedirs(args.out_dir, exist_ok=True)
  runs = plan_runs(parts, types, gpus)
  meta = {
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "gpus": gpus,
    "machine": machine(),
    "python": sys.version.split()[0],
    "trips": args.trips,
    "elems": args.elems,
    "multicast_off": MULTICAST_OFF,
  }
  rows, details = [], []
  with tempfile.TemporaryDirectory() as tmp:
    for run in runs:
      run["gpus"] = gpus
      if run.get("skip"):
        row, detail = skipped_row(run), {}
      else:
        row, detail = execute(run, args, tmp)
      rows.append(row)
      details.append(detail)
      print(
        f"== {row['part']} {row['variant']} {row['dtype']} {row['pairs']}: "
        f"{row['status']}, values {row['values']}, backend {row['backend']} "
        f"{row['error'][:200]}",
        flush=True,
      )
      write_outputs(args.out_dir, rows, details, meta)  # a killed call keeps what ran
  return 0


def build_parser():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out-dir", help="where runtime_rules.csv / .json go")
  p.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all visible)")
  p.add_argument(
    "--pinned-path",
    default="",
    help="site directory holding jax 0.9.1 (first on PYTHONPATH for `types`)",
  )
  p.add_argument("--parts", default="types,shift", help="comma list of " + ",".join(PARTS))
  p.add_argument(
    "--types", default="s8,f8e4m3fn,bf16", help="element types for `types`: " + ",".join(TYPES)
  )
  p.add_argument("--timeout", type=float, default=120, help="seconds per `types` run")
  p.add_argument(
    "--shift-timeout", type=float, default=60, help="seconds before the shift counts as a hang"
  )
  p.add_argument("--trips", type=int, default=3, help="permutes per run (a loop)")
  p.add_argument("--elems", type=int, default=4096, help="elements per device")
  # Child-only arguments.
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--distributed", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--nprocs", type=int, default=1, help=argparse.SUPPRESS)
  p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--dtype", default="f32", help=argparse.SUPPRESS)
  p.add_argument("--pairs", default="none", help=argparse.SUPPRESS)
  p.add_argument("--dump-dir", default="", help=argparse.SUPPRESS)
  return p


def main(argv=None):
  args = build_parser().parse_args(argv)
  try:
    if args.child:
      return run_child(args)
    if not args.out_dir:
      raise BenchError("--out-dir is required")
    for name in ("trips", "elems"):
      if getattr(args, name) < 1:
        raise BenchError(f"--{name} must be >= 1")
    if args.gpus < 0:
      raise BenchError("--gpus must be >= 1")
    if args.timeout <= 0 or args.shift_timeout <= 0:
      raise BenchError("--timeout and --shift-timeout must be positive")
    return check(args)
  except BenchError as e:
    print(f"runtime_rules_check: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
