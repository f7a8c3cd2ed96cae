"""hlo_tools/programs/ring_attention.py: ring attention matches plain attention on 8
CPU devices (forward and gradients).

Cases run with one chunk per block and with several query/key chunks per block
(the blocked online softmax, its causal skipping and the ring's custom VJP), in
f32 and bf16; on the CPU the kernel choice `auto` falls back to the blocked
softmax, and these cases check that path numerically. One more check compiles a
forward+backward and asserts that no buffer has the shape of a whole block's
score matrix; another compiles the ring for two GPUs without a GPU and checks
that every permute of a ring step overlaps that step's attention.

The comparison runs in a subprocess: 8 host devices need XLA_FLAGS set before jax
initializes its backend, and pytest's process may already have a jax backend.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

# The children run this file as a script: the checkout and tests/ (conftest) on the path.
_CHILD_PATH = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])

# (causal, backward, dtype, tolerance relative to the reference's max magnitude,
#  (q_chunk, k_chunk)); blocks are 32 tokens, so (8, 16) makes 4 x 2 chunks.
ONE = (2048, 2048)
MANY = (8, 16)
CASES = [
  (True, False, "f32", 1e-5, ONE),
  (False, False, "f32", 1e-5, ONE),
  (True, True, "f32", 1e-4, ONE),
  (False, True, "f32", 1e-4, ONE),
  (True, False, "bf16", 3e-2, ONE),
  (True, False, "f32", 1e-5, MANY),
  (False, False, "f32", 1e-5, MANY),
  (True, True, "f32", 1e-4, MANY),
  (False, True, "f32", 1e-4, MANY),
  (True, False, "bf16", 3e-2, MANY),
  (True, True, "bf16", 3e-2, MANY),
  (False, True, "bf16", 3e-2, MANY),
]


def _compare(cases):
  """Runs in the child: max |ring - reference| / max |reference| per case and output."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from hlo_tools.programs import ring_attention

  assert len(jax.devices()) == 8, jax.devices()
  mesh = ring_attention.make_mesh(jax.devices())
  results = []
  references = {}  # one compile per (causal, backward): the reference sees only those
  for causal, backward, dtype, _, (q_chunk, k_chunk) in cases:
    # seq 256 over 8 devices: blocks of 32; 4 q heads sharing 2 kv heads (GQA).
    config = ring_attention.RingConfig(
      seq_len=256,
      num_heads=4,
      num_kv_heads=2,
      head_dim=32,
      dtype=dtype,
      causal=causal,
      backward=backward,
      batch=2,
      q_chunk=q_chunk,
      k_chunk=k_chunk,
    )
    rng = np.random.default_rng(0)
    args = [
      jnp.asarray(rng.standard_normal(s), ring_attention.DTYPES[dtype]) for s in config.shapes()
    ]
    got = jax.jit(ring_attention.example_function(config, mesh))(*args)
    # The reference runs in f32 so that bf16 cases measure the ring's error only.
    if (causal, backward) not in references:
      references[causal, backward] = jax.jit(ring_attention.reference_function(config))
    ref = references[causal, backward](*[a.astype(jnp.float32) for a in args])
    errors = []
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
      assert g.shape == r.shape, (g.shape, r.shape)
      g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
      errors.append(float(np.max(np.abs(g - r)) / np.max(np.abs(r))))
    results.append(errors)
  return {
    "errors": results,
    "score_shapes": _score_shapes(ring_attention, mesh),
    "kernel": ring_attention.attention_kernels.resolve("auto", jnp.bfloat16, 128),
    "simulated": _simulated_errors(ring_attention),
    "two_axes": _two_axis_errors(ring_attention),
  }


def _two_axis_errors(ring_attention):
  """The ring over cp inside a cp x tp shard_map (heads split over tp), shard_map's
  type checks on: output and gradients vs the reference."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, PartitionSpec as P

  mesh = Mesh(np.asarray(jax.devices()).reshape(4, 2), ("cp", "tp"))
  spec = P(None, "cp", "tp")
  attn = jax.shard_map(
    lambda q, k, v: ring_attention.ring_attention_shard(
      q, k, v, causal=True, axis_name="cp", q_chunk=8, k_chunk=8
    ),
    mesh=mesh,
    in_specs=(spec,) * 3,
    out_specs=spec,
  )
  rng = np.random.default_rng(2)
  args = [
    jnp.asarray(rng.standard_normal(s), jnp.float32)
    for s in ((1, 64, 4, 16), (1, 64, 2, 16), (1, 64, 2, 16))
  ]
  got = (jax.jit(attn)(*args),) + jax.jit(
    jax.grad(lambda *a: ring_attention._loss(attn(*a)), argnums=(0, 1, 2))
  )(*args)
  ref = (ring_attention.reference_attention(*args, True),) + jax.grad(
    lambda *a: ring_attention._loss(ring_attention.reference_attention(*a, True)), argnums=(0, 1, 2)
  )(*args)
  return [
    float(np.max(np.abs(np.asarray(g) - np.asarray(r))) / np.max(np.abs(np.asarray(r))))
    for g, r in zip(got, ref)
  ]


def _simulated_errors(ring_attention):
  """The ring of 4 blocks on one device (vmap): output and gradients vs the reference."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  config = ring_attention.RingConfig(
    seq_len=128, num_heads=4, num_kv_heads=2, head_dim=16, dtype="f32", causal=True
  )
  rng = np.random.default_rng(1)
  args = [jnp.asarray(rng.standard_normal(s), jnp.float32) for s in config.shapes()]
  got = (
    ring_attention.simulated_ring(4, True, q_chunk=8, k_chunk=16)(*args),
  ) + ring_attention.simulated_ring(4, True, loss=ring_attention._loss, q_chunk=8, k_chunk=16)(
    *args
  )
  ref = (ring_attention.reference_attention(*args, True),) + jax.grad(
    lambda q, k, v: ring_attention._loss(ring_attention.reference_attention(q, k, v, True)),
    argnums=(0, 1, 2),
  )(*args)
  return [
    float(np.max(np.abs(np.asarray(g) - np.asarray(r))) / np.max(np.abs(np.asarray(r))))
    for g, r in zip(got, ref)
  ]


def _score_shapes(ring_attention, mesh):
  """Shapes in a compiled forward+backward that hold a whole block's scores.

  Blocks of 128 tokens, chunks of 16 x 32, head_dim 8: a dimension pair
  "128,128" can only be a block x block score matrix.
  """
  import re

  config = ring_attention.RingConfig(
    seq_len=1024,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    dtype="f32",
    causal=True,
    backward=True,
    q_chunk=16,
    k_chunk=32,
  )
  fn = __import__("jax").jit(ring_attention.example_function(config, mesh))
  text = fn.lower(*ring_attention.example_args(config, mesh)).compile().as_text()
  chunked = bool(re.search(r"\[[\d,]*\b16,32\]", text))
  return {
    "full": sorted(set(re.findall(r"\w+\[[\d,]*\b128,128\b[\d,]*\]", text))),
    "chunked": chunked,
  }


@pytest.fixture(scope="module")
def child():
  from conftest import CPU_CODEGEN_O0

  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS=f"--xla_force_host_platform_device_count=8 {CPU_CODEGEN_O0}",
    PYTHONPATH=_CHILD_PATH,
  )
  proc = subprocess.run(
    [sys.executable, __file__, json.dumps(CASES)],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.long
@pytest.mark.parametrize(
  "index",
  range(len(CASES)),
  ids=[
    f"{'causal' if c else 'full'}-{'fwdbwd' if b else 'fwd'}-{d}-{'many' if ch == MANY else 'one'}"
    for c, b, d, _, ch in CASES
  ],
)
def test_ring_matches_reference(child, index):
  tolerance = CASES[index][3]
  outputs = child["errors"][index]
  # Forward: one output; backward: gradients for q, k and v.
  assert len(outputs) == (3 if CASES[index][1] else 1)
  for err in outputs:
    assert err < tolerance, outputs


@pytest.mark.long
def test_no_full_score_matrix(child):
  shapes = child["score_shapes"]
  assert shapes["chunked"], "no 16x32 score chunk in the compiled module"
  assert shapes["full"] == [], shapes["full"]


@pytest.mark.long
def test_cpu_falls_back_to_the_blocked_kernel(child):
  assert child["kernel"] == "blocked"


@pytest.mark.long
def test_simulated_ring_matches_reference(child):
  # Forward and the gradients for q, k, v through the ring's custom VJP.
  assert len(child["simulated"]) == 4
  assert max(child["simulated"]) < 1e-4, child["simulated"]


@pytest.mark.long
def test_ring_runs_inside_a_two_axis_shard_map(child):
  # K/V heads split over tp, the ring over cp: the carries follow q's manual axes.
  assert len(child["two_axes"]) == 4
  assert max(child["two_axes"]) < 1e-4, child["two_axes"]


def _overlap_child():
  """Deviceless compile of the 2-GPU ring (forward, forward+backward); permute windows."""
  import jax
  from jax.experimental import topologies

  from hlo_tools.ops import ring_overlap
  from hlo_tools.ops.dump_target import DEFAULT_TARGET_CONFIG
  from hlo_tools.programs import ring_attention

  with open(DEFAULT_TARGET_CONFIG, encoding="utf-8") as f:
    devices = topologies.get_topology_desc(
      platform="cuda", topology="1x1x2", target_config=f.read()
    ).devices
  mesh = ring_attention.make_mesh(devices)
  result = {"jax": jax.__version__}
  for backward in (False, True):
    config = ring_attention.RingConfig(
      seq_len=32768, num_heads=32, num_kv_heads=8, backward=backward
    )
    fn = jax.jit(ring_attention.example_function(config, mesh))
    text = fn.lower(*ring_attention.example_args(config, mesh)).compile().as_text()
    result["fwd_bwd" if backward else "fwd"] = ring_overlap.permute_windows(text)
  return result


@pytest.fixture(scope="module")
def overlap():
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
    PYTHONPATH=_CHILD_PATH,
  )
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    [sys.executable, __file__, "overlap"],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.long
@pytest.mark.parametrize("direction", ["fwd", "fwd_bwd"])
def test_ring_step_permutes_overlap_attention(overlap, direction):
  """In the loop body every permute starts before and ends after the step's attention."""
  windows = overlap[direction]
  in_loop = [w for w in windows if w["in_loop_body"]]
  # One permute per ring step: K and V (and in the backward their gradients) travel
  # as one buffer.
  assert len(in_loop) == (2 if direction == "fwd_bwd" else 1), windows
  assert not any(w["synchronous"] for w in windows), windows
  for w in in_loop:
    assert w["attention_between"] >= 1, w
  # Outside the loops only the backward's last hand-off of the gradients.
  outside = [w for w in windows if not w["in_loop_body"]]
  assert len(outside) == (1 if direction == "fwd_bwd" else 0), windows


def test_config_refuses_bad_heads_and_lengths():
  from hlo_tools.programs.ring_attention import RingConfig

  with pytest.raises(ValueError, match="num_kv_heads"):
    RingConfig(num_heads=6, num_kv_heads=4).validate(8)
  with pytest.raises(ValueError, match="divisible"):
    RingConfig(seq_len=100).validate(8)
  assert RingConfig(seq_len=64, num_heads=4, num_kv_heads=2, head_dim=8).shapes() == (
    (1, 64, 4, 8),
    (1, 64, 2, 8),
    (1, 64, 2, 8),
  )


if __name__ == "__main__":
  if sys.argv[1] == "overlap":
    print(json.dumps(_overlap_child()))
  else:
    print(json.dumps(_compare(json.loads(sys.argv[1]))))


def test_overlap_reader_reports_a_synchronous_permute_as_not_overlapped():
  from hlo_tools.ops import ring_overlap

  with open(os.path.join(FIXTURES, "ring_1x1x8.before_async.hlo"), encoding="utf-8") as f:
    windows = ring_overlap.permute_windows(f.read())
  assert windows and all(w["synchronous"] and w["attention_between"] == 0 for w in windows)
  with open(os.path.join(FIXTURES, "ring_1x1x8.after_optimizations.hlo"), encoding="utf-8") as f:
    windows = ring_overlap.permute_windows(f.read())
  assert windows and not any(w["synchronous"] for w in windows)


def test_overlap_reader_cli_names_an_unreadable_file(tmp_path):
  missing = tmp_path / "none.hlo"
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.ops.ring_overlap", str(missing)],
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
    env=dict(os.environ, PYTHONPATH=str(ROOT)),
  )
  assert proc.returncode == 2
  assert proc.stderr.count("\n") == 1 and str(missing) in proc.stderr


def test_chunk_divides_the_block():
  from hlo_tools.programs.ring_attention import _chunk  # pylint: disable=import-outside-toplevel

  assert _chunk(32, 2048) == 32  # one chunk for a block shorter than asked
  assert _chunk(32, 8) == 8
  assert _chunk(48, 32) == 16  # else the greatest common divisor
