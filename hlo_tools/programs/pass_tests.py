"""Small per-shard JAX programs whose compiled HLO feeds the C++ pass tests.

Each is the smallest real program that shows one case the pass must handle;
scripts/gen_pass_test_modules.py compiles them (deviceless, for a GPU topology)
and embeds the HLO that XLA's async-collective-creator receives.
"""

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array

AXIS = "cp"


def _ring(n: int) -> list[tuple[int, int]]:
  return [(j, (j + 1) % n) for j in range(n)]


def kv_step(k: Array, v: Array) -> tuple[Array, Array]:
  """One ring step: K and V rotated together (XLA combines the two permutes)."""
  n = lax.axis_size(AXIS)
  return lax.ppermute(k, AXIS, _ring(n)), lax.ppermute(v, AXIS, _ring(n))


def kv_loop(k: Array, v: Array) -> Array:
  """K/V rotated once per step of a loop, as ring attention does."""
  n = lax.axis_size(AXIS)

  def body(_: int, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
    k, v, acc = carry
    acc = acc + k * v
    return lax.ppermute(k, AXIS, _ring(n)), lax.ppermute(v, AXIS, _ring(n)), acc

  return lax.fori_loop(0, n, body, (k, v, k * 0))[2]


def ring_shift(x: Array) -> Array:
  """A single cyclic permute of one buffer."""
  return lax.ppermute(x, AXIS, _ring(lax.axis_size(AXIS))) * 2


def ring_sum_fresh_carry(x: Array) -> Array:
  """Sums every device's block around the ring, the carry started from fresh zeros.

  Written as code from before jax typed values as varying over mesh axes: the
  zeros vary over no axis, the permuted block over `cp`, so shard_map's default
  check (check_vma=True) rejects the loop; it compiles with check_vma=False.
  """
  n = lax.axis_size(AXIS)

  def body(carry: tuple[Array, Array], _: None) -> tuple[tuple[Array, Array], None]:
    block, acc = carry
    return (lax.ppermute(block, AXIS, _ring(n)), acc + block), None

  (_, total), _ = lax.scan(body, (x, jnp.zeros(x.shape, x.dtype)), None, length=n)
  return total


def _rotate(n: int, *xs: Array) -> tuple[Array, ...]:
  return tuple(lax.ppermute(x, AXIS, _ring(n)) for x in xs)


@jax.custom_vjp
def _ring_product(q: Array, k: Array, v: Array) -> Array:
  return _ring_product_fwd(q, k, v)[0]


def _ring_product_fwd(q: Array, k: Array, v: Array) -> tuple[Array, tuple[Array, Array, Array]]:
  n = lax.axis_size(AXIS)

  def body(_: int, carry: tuple[Array, Array, Array]) -> tuple[Array, ...]:
    k, v, acc = carry
    return (*_rotate(n, k, v), acc + q * k * v)

  return lax.fori_loop(0, n, body, (k, v, q * 0))[2], (q, k, v)


def _ring_product_bwd(res: tuple[Array, Array, Array], g: Array) -> tuple[Array, Array, Array]:
  q, k, v = res
  n = lax.axis_size(AXIS)

  def body(_: int, carry: tuple[Array, ...]) -> tuple[Array, ...]:
    k, v, dk, dv, dq = carry
    dk, dv = dk + g * q * v, dv + g * q * k
    return (*_rotate(n, k, v, dk, dv), dq + g * k * v)

  _, _, dk, dv, dq = lax.fori_loop(0, n, body, (k, v, k * 0, v * 0, q * 0))
  return dq, dk, dv


_ring_product.defvjp(_ring_product_fwd, _ring_product_bwd)


def ring_product_grad(q: Array, k: Array, v: Array) -> tuple[Array, Array, Array]:
  """Gradients of a ring reduction whose backward rotates K, V and their gradients.

  Shaped like ring attention with a hand-written backward: the forward loop rotates
  two buffers, the backward loop four (K, V, dK, dV); XLA's combiner merges each
  loop's permutes into one, 2 and 4 operands.
  """
  loss, (dq, dk, dv) = jax.value_and_grad(
    lambda q, k, v: _ring_product(q, k, v).sum(), argnums=(0, 1, 2)
  )(q, k, v)
  return dq + loss, dk, dv  # the loss keeps the forward loop alive
