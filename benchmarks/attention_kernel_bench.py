#!/usr/bin/env python3
"""The per-block attention kernels of ring attention on one GPU: check, speed, schedule.

    python3 benchmarks/attention_kernel_bench.py --out-dir=DIR [--budget-s=420] [--quick]

Llama-3-8B attention (32 query heads, 8 KV heads, head_dim 128), bf16, batch 1.
Writes into DIR:
  kernel.csv    jax,s_block,causal,direction,kernel,ms,tflops (rewritten after every row)
  check.json    ring attention with the cuDNN kernel against plain f32 attention,
                forward and the gradients of q, k, v: the ring of 4 blocks run on the
                one GPU (vmap) and the sharded ring on this GPU; the cuDNN logsumexp
                against the reference one
  program.csv   the same columns for the whole ring program on this GPU (a ring of one
                step: kernel, merge, loop, the backward's packing), `ring_program_n1`;
                with benchmarks/prev_ring_attention.py present, the ring before this one
                (blocked kernel, jax's autodiff backward) as `prev_ring_program_n1`
  overlap.json  the ring compiled for two GPUs without them (deviceless, this jax's
                XLA, the project's H200 target config), forward and forward+backward,
                each kernel: every collective-permute's start/done and the attention
                ops scheduled between them (hlo_tools.ops.ring_overlap)

Kernels: `ring` = what ring attention runs per block on a GPU (cuDNN flash
attention forward with its logsumexp; backward from the output and logsumexp);
`cudnn` = jax.nn.dot_product_attention(implementation="cudnn") and its VJP;
`blocked` = the ring's own blocked online softmax (2048-token chunks).
ms = median over 5 timed calls (after a warm-up) of one kernel run: each call
runs the kernel R times in a device loop whose query is the previous output
(R chosen so that a call takes about 50 ms), time / R. FLOPs: forward
4 * s^2 * heads * head_dim (half under the causal mask), forward+backward 3.5x.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "benchmarks"), REPO]
import benchlib  # pylint: disable=wrong-import-position

os.environ.update(benchlib.MULTICAST_OFF)

HEADER = ("jax", "s_block", "causal", "direction", "kernel", "ms", "tflops")
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
PLAN = [  # (kernel, block lengths) in the order they run; ring first
  ("ring", [16384, 8192, 4096, 2048, 1024, 512, 32768, 65536]),
  ("cudnn", [16384, 8192, 2048, 32768]),
  ("blocked", [16384, 4096]),
]


def log(msg):
  print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def flops(s, causal, direction):
  fwd = 4.0 * s * s * HEADS * HEAD_DIM * (0.5 if causal else 1.0)
  return fwd * (3.5 if direction == "fwd_bwd" else 1.0)


def _inputs(s, seed=0):
  import jax
  import jax.numpy as jnp

  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  q = jax.random.normal(keys[0], (1, s, HEADS, HEAD_DIM), jnp.bfloat16)
  k = jax.random.normal(keys[1], (1, s, KV_HEADS, HEAD_DIM), jnp.bfloat16)
  v = jax.random.normal(keys[2], (1, s, KV_HEADS, HEAD_DIM), jnp.bfloat16)
  do = jax.random.normal(keys[3], (1, s, HEADS, HEAD_DIM), jnp.bfloat16)
  return q, k, v, do


def _kernel_step(kernel, causal, direction):
  """One kernel run as a loop step: (q, k, v, do) -> (q', k, v, do)."""
  import jax
  import jax.numpy as jnp

  from hlo_tools.programs import attention_kernels, ring_attention, ring_blocks

  def fwd_bwd(q, k, v, do):
    if kernel == "ring":
      out, lse = attention_kernels.cudnn_fwd(q, k, v, causal)
      return out, attention_kernels.cudnn_bwd(q, k, v, out, lse, do, causal)[0]
    if kernel == "cudnn":
      f = lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=causal, implementation="cudnn"
      )
      out, vjp = jax.vjp(f, q, k, v)
      return out, vjp(do)[0]
    b, s = q.shape[:2]
    qg = q.reshape(b, s, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
    ch = ring_attention._chunk(s, ring_attention.DEFAULT_CHUNK)  # pylint: disable=protected-access
    out, lse = ring_blocks._block_fwd_impl(qg, k, v, 0, 0, causal, ch, ch)  # pylint: disable=protected-access
    if direction == "fwd":
      return out.reshape(q.shape), None
    dq, _, _ = ring_blocks._block_bwd_impl(
      qg,
      k,
      v,
      0,
      0,
      out,
      lse,  # pylint: disable=protected-access
      do.reshape(qg.shape),
      jnp.zeros_like(lse),
      causal,
      ch,
      ch,
    )
    return out.reshape(q.shape), dq.reshape(q.shape)

  def step(c):
    q, k, v, do = c
    if direction == "fwd" and kernel != "blocked":
      out = (
        attention_kernels.cudnn_fwd(q, k, v, causal)[0]
        if kernel == "ring"
        else jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
      )
      return out.astype(q.dtype), k, v, do
    out, dq = fwd_bwd(q, k, v, do)
    nxt = out if dq is None else q.astype(jnp.float32) + 1e-3 * dq.astype(jnp.float32)
    return nxt.astype(q.dtype), k, v, do

  return step


def time_kernel(kernel, s, causal, direction, calls=5, target_s=0.05, step=None):
  import jax
  from jax import lax

  step = step or _kernel_step(kernel, causal, direction)
  loop = jax.jit(lambda c, reps: lax.fori_loop(0, reps, lambda i, c: step(c), c))
  carry = _inputs(s)

  def once(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(loop(carry, reps))
    return time.perf_counter() - t0

  once(1)
  reps = max(1, min(2000, int(target_s / max(once(1), 1e-6))))
  once(reps)
  return statistics.median(once(reps) for _ in range(calls)) / reps


def _program_step(module, kernel, causal, direction):
  """The whole per-device ring program on this one GPU (a ring of one step)."""
  import jax
  import jax.numpy as jnp

  mesh = module.make_mesh(jax.devices()[:1])
  attn = module.ring_attention(mesh, causal, **({"kernel": kernel} if kernel else {}))
  grads = jax.grad(lambda q, k, v: module._loss(attn(q, k, v)), argnums=(0, 1, 2))  # pylint: disable=protected-access
  nudge = lambda x, d: (x.astype(jnp.float32) + 1e-3 * d.astype(jnp.float32)).astype(x.dtype)

  def step(c):
    q, k, v, do = c
    if direction == "fwd":
      return attn(q, k, v).astype(q.dtype), k, v, do
    dq, dk, dv = grads(q, k, v)
    return nudge(q, dq), nudge(k, dk), nudge(v, dv), do

  return step


def program_rows(args, jax_version):
  """`ring_program_n1`: this ring (cuDNN); `prev_ring_program_n1`: the ring before it."""
  import importlib.util

  from hlo_tools.programs import ring_attention

  programs = [("ring_program_n1", ring_attention, "cudnn")]
  prev = os.path.join(REPO, "benchmarks", "prev_ring_attention.py")
  if os.path.exists(prev):
    spec = importlib.util.spec_from_file_location("prev_ring_attention", prev)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    programs.append(("prev_ring_program_n1", module, None))
  rows = []
  for name, module, kernel in programs:
    lengths = args.lengths or ([1024, 4096, 16384, 65536] if kernel else [16384, 32768])
    for s in lengths:
      for causal in (False, True) if kernel else (True, False):
        for direction in ("fwd", "fwd_bwd"):
          step = _program_step(module, kernel, causal, direction)
          try:
            sec = time_kernel(None, s, causal, direction, step=step)
          except Exception as e:  # pylint: disable=broad-except
            log(f"{name} {s} {causal} {direction}: FAILED {type(e).__name__}: {str(e)[:300]}")
            continue
          tf = flops(s, causal, direction) / sec / 1e12
          log(f"{name} s={s} causal={int(causal)} {direction} {sec * 1e3:.3f} ms {tf:.1f}")
          rows.append(
            (jax_version, s, int(causal), direction, name, f"{sec * 1e3:.4f}", f"{tf:.1f}")
          )
          write_csv(os.path.join(args.out_dir, "program.csv"), rows)
  return rows


def bench(args, jax_version, deadline):
  rows = []
  kernels = args.kernels.split(",")
  for kernel, lengths in PLAN:
    if kernel not in kernels:
      continue
    lengths = args.lengths or lengths
    for s in lengths[:2] if args.quick else lengths:
      for causal in (False, True):
        for direction in ("fwd", "fwd_bwd"):
          if time.time() > deadline:
            log(f"budget reached before {kernel} {s} {causal} {direction}")
            return rows
          try:
            sec = time_kernel(kernel, s, causal, direction)
          except Exception as e:  # pylint: disable=broad-except
            log(
              f"{kernel} {s} causal={causal} {direction}: FAILED {type(e).__name__}: {str(e)[:300]}"
            )
            continue
          tf = flops(s, causal, direction) / sec / 1e12
          log(
            f"{kernel:8s} s={s:6d} causal={int(causal)} {direction:8s} "
            f"{sec * 1e3:9.3f} ms {tf:7.1f} TFLOP/s"
          )
          rows.append(
            (jax_version, s, int(causal), direction, kernel, f"{sec * 1e3:.4f}", f"{tf:.1f}")
          )
          write_csv(os.path.join(args.out_dir, "kernel.csv"), rows)
  return rows


def write_csv(path, rows):
  benchlib.write_csv(path, HEADER, rows)


def _rel(got, ref):
  import numpy as np

  g, r = np.asarray(got, np.float32), np.asarray(ref, np.float32)
  return float(np.max(np.abs(g - r)) / np.max(np.abs(r)))


def check(seq=4096):
  """Ring attention (cuDNN kernel) vs plain f32 attention: forward and gradients."""
  import jax
  import jax.numpy as jnp

  from hlo_tools.programs import attention_kernels, ring_attention

  q, k, v, _ = _inputs(seq, seed=1)
  f32 = [x.astype(jnp.float32) for x in (q, k, v)]
  result = {}
  # The reference in full f32 (no TF32), so the errors are the ring's.
  jax.config.update("jax_default_matmul_precision", "highest")
  for causal in (True, False):
    ref_fn = lambda q, k, v, c=causal: ring_attention.reference_attention(q, k, v, c)
    # The losses run within this iteration (B023).
    ref_loss = lambda *a: ring_attention._loss(ref_fn(*a))  # pylint: disable=protected-access  # noqa: B023
    ref = (ref_fn(*f32),) + jax.grad(ref_loss, argnums=(0, 1, 2))(*f32)
    mesh = ring_attention.make_mesh(jax.devices()[:1])
    sharded = ring_attention.ring_attention(mesh, causal, kernel="cudnn")
    sharded_loss = lambda *a: ring_attention._loss(sharded(*a))  # pylint: disable=protected-access  # noqa: B023
    runs = {
      "simulated_ring4_cudnn": (
        ring_attention.simulated_ring(4, causal, "cudnn"),
        ring_attention.simulated_ring(4, causal, "cudnn", loss=ring_attention._loss),
      ),  # pylint: disable=protected-access
      "sharded_ring1_cudnn": (sharded, jax.grad(sharded_loss, argnums=(0, 1, 2))),
    }
    for name, (fwd, grads) in runs.items():
      try:
        got = (jax.jit(fwd)(q, k, v),) + tuple(jax.jit(grads)(q, k, v))
        jax.block_until_ready(got)
        result[f"{name}_causal{int(causal)}"] = [_rel(g, r) for g, r in zip(got, ref)]
      except Exception as e:  # pylint: disable=broad-except
        result[f"{name}_causal{int(causal)}"] = f"FAILED {type(e).__name__}: {str(e)[:500]}"
    scores = jnp.einsum("bqhd,bkhd->bhqk", f32[0], jnp.repeat(f32[1], HEADS // KV_HEADS, 2))
    scores = scores / jnp.sqrt(HEAD_DIM)
    if causal:
      scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -jnp.inf)
    lse_ref = jax.nn.logsumexp(scores, axis=-1)
    lse = jax.jit(lambda q, k, v, c=causal: attention_kernels.cudnn_fwd(q, k, v, c)[1])(q, k, v)
    result[f"lse_max_abs_causal{int(causal)}"] = float(jnp.max(jnp.abs(lse - lse_ref)))
  jax.config.update("jax_default_matmul_precision", None)
  return result


def overlap(out_path):
  """Deviceless 2-GPU compiles in a child (JAX_PLATFORMS=cpu, no GPU used)."""
  code = r"""
import json, sys, jax
from jax.experimental import topologies
from hlo_tools.programs import ring_attention
from hlo_tools.ops import ring_overlap
from hlo_tools.ops.dump_target import DEFAULT_TARGET_CONFIG
devs = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
    target_config=open(DEFAULT_TARGET_CONFIG).read()).devices
mesh = ring_attention.make_mesh(devs)
res = {"jax": jax.__version__}
for kernel in ("blocked", "cudnn"):
  for bwd in (False, True):
    key = f"{kernel}_{'fwd_bwd' if bwd else 'fwd'}"
    try:
      c = ring_attention.RingConfig(seq_len=32768, num_heads=32, num_kv_heads=8, backward=bwd,
                                    kernel=kernel)
      lowered = jax.jit(ring_attention.example_function(c, mesh)).lower(
          *ring_attention.example_args(c, mesh))
      text = lowered.compile().as_text()
      res[key] = ring_overlap.permute_windows(text)
    except Exception as e:
      res[key] = f"FAILED {type(e).__name__}: {str(e)[:600]}"
print(json.dumps(res))
"""
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
    PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
  )
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
  )
  try:
    res = json.loads(proc.stdout.strip().splitlines()[-1])
  except (IndexError, ValueError):
    res = {"error": proc.stderr[-3000:]}
  benchlib.write_json(out_path, res)
  return res


def _lengths(text):
  """--lengths: positive integers, comma-separated."""
  try:
    lengths = [int(x) for x in text.split(",")]
  except ValueError:
    lengths = []
  if not lengths or min(lengths) < 1:
    raise argparse.ArgumentTypeError(f"not a comma list of positive lengths: {text!r}")
  return lengths


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out-dir", required=True)
  p.add_argument("--budget-s", type=float, default=420.0, help="stop timing after this")
  p.add_argument("--quick", action="store_true", help="two block lengths per kernel")
  p.add_argument("--kernels", default="ring,cudnn,blocked")
  p.add_argument(
    "--lengths",
    type=_lengths,
    default=[],
    help="comma list of block lengths (all kernels and programs)",
  )
  p.add_argument("--skip", default="", help="comma list of check,overlap,bench,program to skip")
  args = p.parse_args(argv)
  start = time.time()
  os.makedirs(args.out_dir, exist_ok=True)
  import jax

  log(f"jax {jax.__version__} devices {jax.devices()}")
  skip = set(filter(None, args.skip.split(",")))
  if "overlap" not in skip:
    log(f"overlap: {json.dumps(overlap(os.path.join(args.out_dir, 'overlap.json')))[:3000]}")
  if "check" not in skip:
    res = check()
    benchlib.write_json(os.path.join(args.out_dir, "check.json"), {"jax": jax.__version__, **res})
    log(f"check: {json.dumps(res)}")
  if "bench" not in skip:
    bench(args, jax.__version__, start + args.budget_s)
  if "program" not in skip:
    program_rows(args, jax.__version__)
  log("done")
  return 0


if __name__ == "__main__":
  sys.exit(main())
