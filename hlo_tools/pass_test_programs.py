"""Small per-shard JAX programs whose compiled HLO feeds the C++ pass tests.

Each is the smallest real program that shows one case the pass must handle;
scripts/gen_pass_test_modules.py compiles them (deviceless, for a GPU topology)
and embeds the HLO that XLA's async-collective-creator receives.
"""

import jax.numpy as jnp
from jax import lax

AXIS = "cp"


def _ring(n):
  return [(j, (j + 1) % n) for j in range(n)]


def kv_step(k, v):
  """One ring step: K and V rotated together (XLA combines the two permutes)."""
  n = lax.axis_size(AXIS)
  return lax.ppermute(k, AXIS, _ring(n)), lax.ppermute(v, AXIS, _ring(n))


def kv_loop(k, v):
  """K/V rotated once per step of a loop, as ring attention does."""
  n = lax.axis_size(AXIS)

  def body(_, carry):
    k, v, acc = carry
    acc = acc + k * v
    return lax.ppermute(k, AXIS, _ring(n)), lax.ppermute(v, AXIS, _ring(n)), acc

  return lax.fori_loop(0, n, body, (k, v, k * 0))[2]


def self_permute(x):
  """Degenerate permute: every device sends to itself."""
  n = lax.axis_size(AXIS)
  return lax.ppermute(x, AXIS, [(j, j) for j in range(n)]) * 2


def ring_shift(x):
  """A single cyclic permute of one buffer."""
  return lax.ppermute(x, AXIS, _ring(lax.axis_size(AXIS))) * 2


def ring_sum_fresh_carry(x):
  """Sums every device's block around the ring, the carry started from fresh zeros.

  Written as code from before jax typed values as varying over mesh axes: the
  zeros vary over no axis, the permuted block over `cp`, so shard_map's default
  check (check_vma=True) rejects the loop; it compiles with check_vma=False.
  """
  n = lax.axis_size(AXIS)

  def body(carry, _):
    block, acc = carry
    return (lax.ppermute(block, AXIS, _ring(n)), acc + block), None

  (_, total), _ = lax.scan(body, (x, jnp.zeros(x.shape, x.dtype)), None, length=n)
  return total
