"""Ring attention matches plain attention on 8 CPU devices (forward and gradients).

Cases run with one chunk per block and with several query/key chunks per block
(the blocked online softmax, its causal skipping and its custom VJP), in f32 and
bf16; one more check compiles a forward+backward and asserts that no buffer has
the shape of a whole block's score matrix.

The comparison runs in a subprocess: 8 host devices need XLA_FLAGS set before jax
initializes its backend, and pytest's process may already have a jax backend.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
  from hlo_tools import ring_attention as ra
  assert len(jax.devices()) == 8, jax.devices()
  mesh = ra.make_mesh(jax.devices())
  results = []
  for causal, backward, dtype, _, (q_chunk, k_chunk) in cases:
    # seq 256 over 8 devices: blocks of 32; 4 q heads sharing 2 kv heads (GQA).
    config = ra.RingConfig(seq_len=256, num_heads=4, num_kv_heads=2, head_dim=32,
                           dtype=dtype, causal=causal, backward=backward, batch=2,
                           q_chunk=q_chunk, k_chunk=k_chunk)
    rng = np.random.default_rng(0)
    args = [jnp.asarray(rng.standard_normal(s), ra.DTYPES[dtype]) for s in config.shapes()]
    got = jax.jit(ra.example_function(config, mesh))(*args)
    # The reference runs in f32 so that bf16 cases measure the ring's error only.
    ref = jax.jit(ra.reference_function(config))(*[a.astype(jnp.float32) for a in args])
    errors = []
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
      assert g.shape == r.shape, (g.shape, r.shape)
      g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
      errors.append(float(np.max(np.abs(g - r)) / np.max(np.abs(r))))
    results.append(errors)
  return {"errors": results, "score_shapes": _score_shapes(ra, mesh)}


def _score_shapes(ra, mesh):
  """Shapes in a compiled forward+backward that hold a whole block's scores.

  Blocks of 128 tokens, chunks of 16 x 32, head_dim 8: a dimension pair
  "128,128" can only be a block x block score matrix.
  """
  import re
  config = ra.RingConfig(seq_len=1024, num_heads=4, num_kv_heads=2, head_dim=8,
                         dtype="f32", causal=True, backward=True, q_chunk=16,
                         k_chunk=32)
  fn = __import__("jax").jit(ra.example_function(config, mesh))
  text = fn.lower(*ra.example_args(config, mesh)).compile().as_text()
  chunked = bool(re.search(r"\[[\d,]*\b16,32\]", text))
  return {"full": sorted(set(re.findall(r"\w+\[[\d,]*\b128,128\b[\d,]*\]", text))),
          "chunked": chunked}


@pytest.fixture(scope="module")
def child():
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8",
             PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
  proc = subprocess.run([sys.executable, __file__, json.dumps(CASES)], env=env,
                        capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"{'causal' if c else 'full'}-{'fwdbwd' if b else 'fwd'}-{d}"
                              f"-{'many' if ch == MANY else 'one'}"
                              for c, b, d, _, ch in CASES])
def test_ring_matches_reference(child, index):
  tolerance = CASES[index][3]
  outputs = child["errors"][index]
  # Forward: one output; backward: gradients for q, k and v.
  assert len(outputs) == (3 if CASES[index][1] else 1)
  for err in outputs:
    assert err < tolerance, outputs


def test_no_full_score_matrix(child):
  shapes = child["score_shapes"]
  assert shapes["chunked"], "no 16x32 score chunk in the compiled module"
  assert shapes["full"] == [], shapes["full"]


def test_config_validation():
  from hlo_tools.ring_attention import RingConfig
  with pytest.raises(ValueError, match="num_kv_heads"):
    RingConfig(num_heads=6, num_kv_heads=4).validate(8)
  with pytest.raises(ValueError, match="divisible"):
    RingConfig(seq_len=100).validate(8)
  assert RingConfig(seq_len=64, num_heads=4, num_kv_heads=2, head_dim=8).shapes() == (
      (1, 64, 4, 8), (1, 64, 2, 8), (1, 64, 2, 8))


if __name__ == "__main__":
  print(json.dumps(_compare(json.loads(sys.argv[1]))))
