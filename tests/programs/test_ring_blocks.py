"""hlo_tools/programs/ring_blocks.py: the blocked online softmax of one (query block,
key block) pair, forward and custom VJP, against plain softmax attention in numpy
and jax's own autodiff of it; the causal chunk bounds."""

import pytest

from conftest import CPU_CODEGEN_O0, run_jax

# Runs in a child (jax's CPU backend, not this process's); prints max errors.
_CHILD = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from hlo_tools.programs import ring_blocks as rb

b, s, kvh, g, d = 1, 8, 2, 2, 4
rng = np.random.default_rng(0)
q = rng.standard_normal((b, s, kvh, g, d)).astype(np.float32)
k, v = (rng.standard_normal((b, s, kvh, d)).astype(np.float32) for _ in range(2))

def reference(q, k, v, q_off, k_off, causal, xp=np):
  # Plain softmax attention of each query row over the visible keys:
  # out [b, sq, kvh, g, d], lse [b, kvh, g, sq].
  scores = xp.einsum("bqhgd,bkhd->bhgqk", q, k) / np.sqrt(d)
  if causal:
    visible = (k_off + np.arange(s))[None, :] <= (q_off + np.arange(s))[:, None]
    scores = xp.where(visible, scores, -np.inf)
  m = scores.max(-1, keepdims=True)
  m = xp.where(xp.isfinite(m), m, 0.0)
  e = xp.exp(scores - m)
  total = e.sum(-1, keepdims=True)
  out = xp.einsum("bhgqk,bkhd->bqhgd", e / xp.where(total > 0, total, 1.0), v)
  lse = xp.where(total > 0, m + xp.log(xp.where(total > 0, total, 1.0)), -np.inf)[..., 0]
  return out, lse

def err(got, want):
  # Max |got - want| over the finite entries; -inf (no visible key) must match exactly.
  got, want = np.asarray(got), np.asarray(want)
  if (np.isneginf(got) != np.isneginf(want)).any():
    return 1e9
  finite = np.isfinite(want)
  return float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))

out = {}
block = jax.jit(rb.block_attention, static_argnums=(5, 6, 7))
# (q_off, k_off, causal): no mask; the key block wholly in the past; the diagonal;
# the key block wholly in the future (no visible key: out 0, lse -inf).
for name, q_off, k_off, causal in (("full", 0, 0, False), ("past", 8, 0, True),
                                   ("diagonal", 0, 0, True), ("future", 0, 8, True)):
  got_out, got_lse = block(q, k, v, q_off, k_off, causal, 2, 4)  # 4 x 2 chunks
  want_out, want_lse = reference(q, k, v, q_off, k_off, causal)
  out[name] = [err(got_out, want_out), err(got_lse, want_lse)]

# The custom VJP against jax's autodiff of the plain reference, with cotangents on
# both the output and the logsumexp.
w_out = rng.standard_normal((b, s, kvh, g, d)).astype(np.float32)
w_lse = rng.standard_normal((b, kvh, g, s)).astype(np.float32)
def loss(f):
  def run(q, k, v):
    o, l = f(q, k, v)
    return (o * w_out).sum() + (l * w_lse).sum()
  return run
mine = jax.jit(jax.grad(loss(lambda q, k, v: rb.block_attention(q, k, v, 0, 0, True, 2, 4)),
                        argnums=(0, 1, 2)))(q, k, v)
plain = jax.jit(jax.grad(loss(lambda q, k, v: reference(q, k, v, 0, 0, True, jnp)),
                         argnums=(0, 1, 2)))(q, k, v)
out["grads"] = [err(a, b) for a, b in zip(mine, plain)]

out["case"] = [int(rb._case(0, 8)), int(rb._case(8, 0)), int(rb._case(4, 4))]
# Query chunks of 2 over key chunks of 4 from position 0: a chunk ending at 5 needs
# both, one ending at 3 the first; a key chunk starting at 4 is first seen by query
# chunk 2.
out["needed"] = [int(rb._needed_k_chunks(q_end, 0, 4, 2, True)) for q_end in (5, 3, -1)]
out["first"] = [int(rb._first_q_chunk(k_start, 0, 2, 4, True)) for k_start in (4, -4, 100)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def child():
  return run_jax(_CHILD, xla_flags=CPU_CODEGEN_O0)


@pytest.mark.parametrize("case", ["full", "past", "diagonal", "future"])
def test_block_attention_is_softmax_attention(child, case):
  out_error, lse_error = child[case]
  assert out_error < 1e-5 and lse_error < 1e-5, child[case]


def test_block_attention_gradients_are_autodiffs(child):
  assert max(child["grads"]) < 1e-4, child["grads"]


def test_causal_case_of_a_block_pair(child):
  # 0: every key in the future, 1: every key in the past, 2: the diagonal.
  assert child["case"] == [0, 1, 2]


def test_causal_chunk_bounds(child):
  assert child["needed"] == [2, 1, 0]
  assert child["first"] == [2, 0, 4]


def test_without_a_mask_every_chunk_is_visited():
  from hlo_tools.programs import ring_blocks  # pylint: disable=import-outside-toplevel

  assert ring_blocks._needed_k_chunks(0, 100, 4, 3, False) == 3  # pylint: disable=protected-access
  assert ring_blocks._first_q_chunk(100, 0, 4, 3, False) == 0  # pylint: disable=protected-access
