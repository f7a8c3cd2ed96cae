"""Per-shard JAX programs for `hlo-tools heuristics check-pass`.

One compile per topology is what makes the check fast (each compile starts a
child process and imports jax), so one program carries every sampled case: one
permute per (shape, size). Each permute's input depends on the previous
permute's result, which keeps XLA's collective-permute-combiner from merging
permutes with equal pairs into one variadic permute of a size we did not ask
for. Combined K/V is the exception on purpose: its two buffers are rotated
together, exactly as ring attention does, and XLA combines them into one.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

AXIS = "cp"


def _ring(n: int) -> list[tuple[int, int]]:
  return [(j, (j + 1) % n) for j in range(n)]


def _shift(n: int) -> list[tuple[int, int]]:
  return [(j, j + 1) for j in range(n - 1)]


def _feed(x: jax.Array, previous: jax.Array | None) -> jax.Array:
  """x plus a scalar taken from `previous`: a data dependence, no size change."""
  if previous is None:
    return x
  return x + jnp.sum(previous[:1]).astype(x.dtype)


def chain(shapes: Sequence[str]) -> Callable[..., tuple[jax.Array, ...]]:
  """A per-shard function applying one permute per entry of `shapes`.

  shapes: tuple of "ring" | "kv" | "shift"; the function takes one 1-D array per
  buffer (kv takes two) in that order and returns the last results.
  """

  def fn(*arrays: jax.Array) -> tuple[jax.Array, ...]:
    n = lax.axis_size(AXIS)
    args = list(arrays)
    previous = None
    outputs: list[jax.Array] = []
    for shape in shapes:
      if shape == "kv":
        k, v = _feed(args.pop(0), previous), args.pop(0)
        k, v = lax.ppermute(k, AXIS, _ring(n)), lax.ppermute(v, AXIS, _ring(n))
        outputs += [k, v]
        previous = k
      else:
        pairs = _ring(n) if shape == "ring" else _shift(n)
        y = lax.ppermute(_feed(args.pop(0), previous), AXIS, pairs)
        outputs.append(y)
        previous = y
    return tuple(outputs)

  return fn


# The program check-pass compiles: its cases are (shape, per-buffer size) pairs
# in this order; hlo_tools.ops.heuristics.check gives the sizes.
SAMPLE_SHAPES = ("ring", "ring", "kv", "shift")
sample = chain(SAMPLE_SHAPES)
