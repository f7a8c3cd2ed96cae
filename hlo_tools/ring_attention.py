"""Ring attention in JAX: the example whose collective-permutes the NVSHMEM pass moves.

Sequence parallelism over a mesh axis `cp`: each device keeps its query block and
passes its K/V block around the ring with `lax.ppermute`, one step per device,
combining the partial results with an online (numerically stable) softmax.
Grouped-query attention: `num_heads` query heads share `num_kv_heads` K/V heads.

Layout: q is [batch, seq, num_heads, head_dim], k and v are
[batch, seq, num_kv_heads, head_dim]; all three are sharded along seq.
"""

import dataclasses
import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "cp"

# Finite "minus infinity" for masked scores: exp(MASK - m) underflows to 0 without
# ever producing inf - inf = NaN when a whole row of a block is masked.
_MASK_VALUE = -1e30

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32, "f16": jnp.float16}


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

  def validate(self, num_devices):
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype {self.dtype!r} not in {sorted(DTYPES)}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    if self.seq_len % num_devices:
      raise ValueError(f"seq_len={self.seq_len} is not divisible by the "
                       f"{num_devices} devices of the ring")

  def shapes(self):
    """Global (q, k, v) shapes."""
    q = (self.batch, self.seq_len, self.num_heads, self.head_dim)
    kv = (self.batch, self.seq_len, self.num_kv_heads, self.head_dim)
    return q, kv, kv


def _block_update(carry, q, k, v, q_offset, k_offset, causal):
  """One online-softmax step: fold the scores of q against one K/V block in.

  q is [b, sq, kvh, g, d] (pre-scaled, f32); k and v are [b, sk, kvh, d].
  carry = (o, m, l): unnormalized output [b, sq, kvh, g, d], running max and
  running denominator [b, kvh, g, sq], all f32.
  """
  o, m, l = carry
  s = jnp.einsum("bqhgd,bkhd->bhgqk", q, k.astype(jnp.float32))
  if causal:
    q_pos = q_offset + jnp.arange(q.shape[1])
    k_pos = k_offset + jnp.arange(k.shape[1])
    s = jnp.where(k_pos[None, :] <= q_pos[:, None], s, _MASK_VALUE)
  m_new = jnp.maximum(m, s.max(axis=-1))
  p = jnp.exp(s - m_new[..., None])
  # Rescale what was accumulated under the old max.
  alpha = jnp.exp(m - m_new)
  l_new = alpha * l + p.sum(axis=-1)
  pv = jnp.einsum("bhgqk,bkhd->bqhgd", p, v.astype(jnp.float32))
  alpha_o = jnp.transpose(alpha, (0, 3, 1, 2))[..., None]  # -> [b, sq, kvh, g, 1]
  return o * alpha_o + pv, m_new, l_new


def ring_attention_shard(q, k, v, *, causal, axis_name=AXIS):
  """Per-device body (inside shard_map): q/k/v are this device's sequence blocks."""
  n = lax.axis_size(axis_name)
  me = lax.axis_index(axis_name)
  b, sq, h, d = q.shape
  kvh = k.shape[2]
  g = h // kvh
  block = sq  # every device holds an equal block of the sequence
  qf = (q.astype(jnp.float32) * (1.0 / np.sqrt(d))).reshape(b, sq, kvh, g, d)
  # Send to the next device: after i steps device `me` holds block (me - i) mod n.
  perm = [(j, (j + 1) % n) for j in range(n)]

  def step(i, state):
    o, m, l, k_cur, v_cur = state
    src = (me - i) % n
    o, m, l = _block_update((o, m, l), qf, k_cur, v_cur,
                            me * block, src * block, causal)
    k_next = lax.ppermute(k_cur, axis_name, perm)
    v_next = lax.ppermute(v_cur, axis_name, perm)
    return o, m, l, k_next, v_next

  # The accumulators differ per device, so they must be typed as varying over the
  # axis like the loop's outputs (shard_map checks the carry's manual axis types).
  varying = functools.partial(lax.pcast, axis_name=axis_name, to="varying")
  o0 = varying(jnp.zeros((b, sq, kvh, g, d), jnp.float32))
  m0 = varying(jnp.full((b, kvh, g, sq), -jnp.inf, jnp.float32))
  l0 = varying(jnp.zeros((b, kvh, g, sq), jnp.float32))
  # Step 0 is the diagonal block, which leaves every causal row at least one
  # unmasked key, so m is finite from then on and -inf never meets -inf.
  o, m, l, _, _ = lax.fori_loop(0, n, step, (o0, m0, l0, k, v))
  out = o / jnp.transpose(l, (0, 3, 1, 2))[..., None]
  return out.reshape(b, sq, h, d).astype(q.dtype)


def make_mesh(devices):
  return Mesh(np.asarray(devices), (AXIS,))


def ring_attention(mesh, causal):
  """Global function (q, k, v) -> out, sequence-sharded over the mesh's `cp` axis."""
  spec = P(None, AXIS)
  return jax.shard_map(functools.partial(ring_attention_shard, causal=causal),
                       mesh=mesh, in_specs=(spec,) * 3, out_specs=spec)


def _loss(out):
  # A loss whose cotangent depends on the output, so the backward pass is not trivial.
  return jnp.sum(jnp.square(out.astype(jnp.float32)))


def example_function(config, mesh):
  """The function the dump compiles: forward, or loss gradients for backward."""
  attn = ring_attention(mesh, config.causal)
  if not config.backward:
    return attn
  return jax.grad(lambda q, k, v: _loss(attn(q, k, v)), argnums=(0, 1, 2))


def example_args(config, mesh):
  """Abstract sequence-sharded arguments (no data) for lowering."""
  sharding = NamedSharding(mesh, P(None, AXIS))
  dtype = DTYPES[config.dtype]
  return [jax.ShapeDtypeStruct(s, dtype, sharding=sharding) for s in config.shapes()]


def reference_attention(q, k, v, causal):
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


def reference_function(config):
  if not config.backward:
    return functools.partial(reference_attention, causal=config.causal)
  return jax.grad(lambda q, k, v: _loss(reference_attention(q, k, v, config.causal)),
                  argnums=(0, 1, 2))


def neighbour_shift(x):
  """Non-cyclic shift (device i -> i+1, the last sends nowhere): a permute that is no ring.

  Per-shard function for `hlo-tools dump hlo_tools.ring_attention:neighbour_shift`.
  """
  n = lax.axis_size(AXIS)
  return lax.ppermute(x, AXIS, [(j, j + 1) for j in range(n - 1)]) * 2
