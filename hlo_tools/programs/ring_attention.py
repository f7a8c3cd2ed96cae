"""Ring attention in JAX: the example whose collective-permutes the NVSHMEM pass moves.

Sequence parallelism over a mesh axis `cp`: each device keeps its query block and
passes its K/V block around the ring, one step per device. Grouped-query
attention: `num_heads` query heads share `num_kv_heads` K/V heads.

Per step one `lax.ppermute` moves K and V as one array, issued before the step's
attention and independent of it, so the compiled step overlaps the transfer with
the attention (XLA keeps one collective-permute in flight at a time, so separate
K and V permutes would leave one exposed). The ring folds the per-step results
together by their logsumexp.

The ring (hlo_tools.programs.ring_loop) has its own custom VJP: the backward runs
the ring again with each block's gradients computed from the global output and
logsumexp (exact shares, as in FlashAttention-2's backward), and K/V travel with
their f32 gradient accumulators in one buffer per step; one last permute returns
each block's gradient to its owner.

The per-block kernel (`kernel=`): `cudnn` is cuDNN's fused flash attention
(hlo_tools.programs.attention_kernels); `blocked` is the memory-efficient online softmax
(hlo_tools.programs.ring_blocks), which runs everywhere: it walks query and key
chunks with a running max and sum, never building a block's whole score matrix,
and skips causal chunks that lie wholly in the future (dynamic loop bounds).
`auto` takes cuDNN on a GPU backend when the dtype and head size fit, else the
blocked softmax (CPU tests, deviceless compiles).

Layout: q is [batch, seq, num_heads, head_dim], k and v are
[batch, seq, num_kv_heads, head_dim]; all three are sharded along seq.
"""

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from hlo_tools.programs import attention_kernels
from hlo_tools.programs.ring_blocks import Array
from hlo_tools.programs.ring_loop import _ring

AXIS = "cp"

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32, "f16": jnp.float16}

DEFAULT_CHUNK = 2048


@dataclasses.dataclass(frozen=True)
class RingConfig:
  """Shape and mode of one ring-attention example (seq_len is the global length)."""

  seq_len: int = 8192
  num_heads: int = 8
  num_kv_heads: int = 8
  head_dim: int = 128
  dtype: str = "bf16"
  causal: bool = True
  backward: bool = False
  batch: int = 1
  q_chunk: int = DEFAULT_CHUNK
  k_chunk: int = DEFAULT_CHUNK
  kernel: str = "auto"  # per-block attention: auto, blocked or cudnn

  def validate(self, num_devices: int) -> None:
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype {self.dtype!r} not in {sorted(DTYPES)}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
      )
    if self.seq_len % num_devices:
      raise ValueError(
        f"seq_len={self.seq_len} is not divisible by the {num_devices} devices of the ring"
      )
    if self.q_chunk < 1 or self.k_chunk < 1:
      raise ValueError("q_chunk and k_chunk must be >= 1")
    attention_kernels.resolve(self.kernel, DTYPES[self.dtype], self.head_dim)

  def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Global (q, k, v) shapes."""
    q = (self.batch, self.seq_len, self.num_heads, self.head_dim)
    kv = (self.batch, self.seq_len, self.num_kv_heads, self.head_dim)
    return q, kv, kv


def _chunk(length: int, want: int) -> int:
  """A chunk size that divides `length`: `want` when it does, else a divisor."""
  return length if want >= length else math.gcd(length, want)


def ring_attention_shard(
  q: Array,
  k: Array,
  v: Array,
  *,
  causal: bool,
  axis_name: str = AXIS,
  q_chunk: int = DEFAULT_CHUNK,
  k_chunk: int = DEFAULT_CHUNK,
  kernel: str = "auto",
) -> Array:
  """Per-device body (inside shard_map): q/k/v are this device's sequence blocks.

  kernel: `blocked` (ring_blocks' online softmax, runs everywhere), `cudnn` (cuDNN
  flash attention, GPU, 16-bit) or `auto` (cuDNN on a GPU backend when it fits).
  """
  b, sq, h, d = q.shape
  kvh = k.shape[2]
  name = attention_kernels.resolve(kernel, q.dtype, d)
  spec = (name, _chunk(sq, q_chunk), _chunk(k.shape[1], k_chunk))
  out = _ring(q.reshape(b, sq, kvh, h // kvh, d), k, v, causal, axis_name, spec)
  return out.reshape(b, sq, h, d)


def simulated_ring(
  num_blocks: int,
  causal: bool,
  kernel: str = "auto",
  loss: Callable[[Array], Array] | None = None,
  q_chunk: int = DEFAULT_CHUNK,
  k_chunk: int = DEFAULT_CHUNK,
) -> Callable[[Array, Array, Array], Array | tuple[Array, ...]]:
  """The ring of `num_blocks` devices run on one device (jax.vmap names the ring axis).

  Same per-step code, permutes and kernels as the sharded ring; for checking the
  ring's arithmetic where there is one GPU. Returns (q, k, v) -> out, or with
  `loss` (a function of an output block, summed over blocks) the gradients of
  the summed loss. The gradient is taken per block inside the vmap, where the
  ring's backward can name its axis (jax traces a custom VJP's backward outside
  an enclosing vmap's axes).
  """
  attn = functools.partial(
    ring_attention_shard, causal=causal, q_chunk=q_chunk, k_chunk=k_chunk, kernel=kernel
  )
  body: Callable[..., Any] = attn
  if loss is not None:
    body = jax.grad(lambda q, k, v: loss(attn(q, k, v)), argnums=(0, 1, 2))
  split = lambda x: jnp.moveaxis(x.reshape(x.shape[0], num_blocks, -1, *x.shape[2:]), 1, 0)
  join = lambda x, like: jnp.moveaxis(x, 0, 1).reshape(like.shape)

  def fn(q: Array, k: Array, v: Array) -> Array | tuple[Array, ...]:
    out = jax.vmap(body, axis_name=AXIS)(split(q), split(k), split(v))
    if loss is None:
      return join(out, q)
    return tuple(join(g, x) for g, x in zip(out, (q, k, v)))

  return fn


def make_mesh(devices: Sequence[jax.Device]) -> Mesh:
  return Mesh(np.asarray(devices), (AXIS,))


def ring_attention(
  mesh: Mesh,
  causal: bool,
  q_chunk: int = DEFAULT_CHUNK,
  k_chunk: int = DEFAULT_CHUNK,
  kernel: str = "auto",
) -> Callable[..., Any]:
  """Global function (q, k, v) -> out, sequence-sharded over the mesh's `cp` axis."""
  spec = P(None, AXIS)
  body = functools.partial(
    ring_attention_shard, causal=causal, q_chunk=q_chunk, k_chunk=k_chunk, kernel=kernel
  )
  return jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec)


def _loss(out: Array) -> Array:
  # A loss whose cotangent depends on the output, so the backward pass is not trivial.
  return jnp.sum(jnp.square(out.astype(jnp.float32)))


def example_function(config: RingConfig, mesh: Mesh) -> Callable[..., Any]:
  """The function the dump compiles: forward, or loss gradients for backward."""
  attn = ring_attention(mesh, config.causal, config.q_chunk, config.k_chunk, config.kernel)
  if not config.backward:
    return attn
  return jax.grad(lambda q, k, v: _loss(attn(q, k, v)), argnums=(0, 1, 2))


def example_args(config: RingConfig, mesh: Mesh) -> list[jax.ShapeDtypeStruct]:
  """Abstract sequence-sharded arguments (no data) for lowering."""
  sharding = NamedSharding(mesh, P(None, AXIS))
  dtype = DTYPES[config.dtype]
  return [jax.ShapeDtypeStruct(s, dtype, sharding=sharding) for s in config.shapes()]


def reference_attention(q: Array, k: Array, v: Array, causal: bool) -> Array:
  """Plain softmax attention with GQA, in f32, for checking the ring."""
  b, s, h, d = q.shape
  kvh = k.shape[2]
  k = jnp.repeat(k.astype(jnp.float32), h // kvh, axis=2)
  v = jnp.repeat(v.astype(jnp.float32), h // kvh, axis=2)
  scores = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k) / np.sqrt(d)
  if causal:
    mask = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(mask, scores, -jnp.inf)
  probs = jax.nn.softmax(scores, axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v).astype(q.dtype)


def reference_function(config: RingConfig) -> Callable[..., Any]:
  if not config.backward:
    return functools.partial(reference_attention, causal=config.causal)
  return jax.grad(
    lambda q, k, v: _loss(reference_attention(q, k, v, config.causal)), argnums=(0, 1, 2)
  )


def neighbour_shift(x: Array) -> Array:
  """Non-cyclic shift (device i -> i+1, the last sends nowhere): a permute that is no ring.

  Per-shard function for `hlo-tools dump hlo_tools.programs.ring_attention:neighbour_shift`.
  """
  n = lax.axis_size(AXIS)
  return lax.ppermute(x, AXIS, [(j, j + 1) for j in range(n - 1)]) * 2
