"""Ring attention in JAX: the example whose collective-permutes the NVSHMEM pass moves.

Sequence parallelism over a mesh axis `cp`: each device keeps its query block and
passes its K/V block around the ring with one `lax.ppermute` per step (K and V
together), one step per device. Grouped-query attention: `num_heads` query heads
share `num_kv_heads` K/V heads.

The step is memory-efficient (FlashAttention-2 style): `block_attention` walks
query and key chunks with a running max and sum, never building a block's whole
score matrix, and returns (out, logsumexp). Its custom VJP keeps only q, k, v,
out and logsumexp and recomputes the scores chunk by chunk in the backward, so
forward and backward both stay O(sequence x head_dim) in memory. The ring folds
the per-step results together by their logsumexp. Causal chunks that lie wholly
in the future are skipped (their loops have dynamic bounds), so a device whose
K/V block comes from a later position does no work for it.

Layout: q is [batch, seq, num_heads, head_dim], k and v are
[batch, seq, num_kv_heads, head_dim]; all three are sharded along seq.
"""

import dataclasses
import functools
import math

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

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

  def validate(self, num_devices):
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype {self.dtype!r} not in {sorted(DTYPES)}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    if self.seq_len % num_devices:
      raise ValueError(f"seq_len={self.seq_len} is not divisible by the "
                       f"{num_devices} devices of the ring")
    if self.q_chunk < 1 or self.k_chunk < 1:
      raise ValueError("q_chunk and k_chunk must be >= 1")

  def shapes(self):
    """Global (q, k, v) shapes."""
    q = (self.batch, self.seq_len, self.num_heads, self.head_dim)
    kv = (self.batch, self.seq_len, self.num_kv_heads, self.head_dim)
    return q, kv, kv


def _chunk(length, want):
  """A chunk size that divides `length`: `want` when it does, else a divisor."""
  return length if want >= length else math.gcd(length, want)


def _scores(qc, kc, q_pos0, k_pos0, causal, scale):
  """f32 scores [b, kvh, g, cq, ck] of a query chunk against a key chunk, masked."""
  s = jnp.einsum("bqhgd,bkhd->bhgqk", qc, kc,
                 preferred_element_type=jnp.float32) * scale
  if causal:
    q_pos = q_pos0 + jnp.arange(qc.shape[1])
    k_pos = k_pos0 + jnp.arange(kc.shape[1])
    s = jnp.where(k_pos[None, :] <= q_pos[:, None], s, -jnp.inf)
  return s


def _vary_like(ref, *xs):
  """xs typed like the scalar `ref` with respect to shard_map's manual axes.

  Inside shard_map a loop carry must vary over the mesh axes its loop output
  varies over, and fresh zeros vary over none. Adding ref * 0 (a per-device
  position) gives them ref's axis types on every jax version, without naming
  the axis; outside shard_map it is a no-op.
  """
  zero = (jnp.asarray(ref) * 0).astype(jnp.float32)
  return tuple(x + zero for x in xs)


def _needed_k_chunks(q_end, k_off, ck, nk, causal):
  """Key chunks a query chunk ending at position q_end (inclusive) must visit."""
  if not causal:
    return nk
  return jnp.clip((q_end - k_off) // ck + 1, 0, nk)


def _first_q_chunk(k_start, q_off, cq, nq, causal):
  """First query chunk that sees a key chunk starting at k_start."""
  if not causal:
    return 0
  return jnp.clip((k_start - q_off) // cq, 0, nq)


def _block_fwd_impl(q, k, v, q_off, k_off, causal, cq, ck):
  """Chunked online softmax. q [b, sq, kvh, g, d]; k, v [b, sk, kvh, d].

  Returns out [b, sq, kvh, g, d] f32 (normalized) and lse [b, kvh, g, sq] f32
  (-inf for rows with no visible key).
  """
  b, sq, kvh, g, d = q.shape
  nq, nk = sq // cq, k.shape[1] // ck
  scale = 1.0 / np.sqrt(d)

  def q_chunk(i):
    qc = lax.dynamic_slice_in_dim(q, i * cq, cq, axis=1)
    q_pos0 = q_off + i * cq

    def k_step(j, carry):
      acc, m, l = carry
      kc = lax.dynamic_slice_in_dim(k, j * ck, ck, axis=1)
      vc = lax.dynamic_slice_in_dim(v, j * ck, ck, axis=1)
      s = _scores(qc, kc, q_pos0, k_off + j * ck, causal, scale)
      m_new = jnp.maximum(m, s.max(axis=-1))
      m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # no -inf - -inf
      p = jnp.exp(s - m_safe[..., None])
      alpha = jnp.exp(m - m_safe)
      pv = jnp.einsum("bhgqk,bkhd->bhgqd", p.astype(v.dtype), vc,
                      preferred_element_type=jnp.float32)
      return acc * alpha[..., None] + pv, m_new, l * alpha + p.sum(axis=-1)

    acc0 = jnp.zeros((b, kvh, g, cq, d), jnp.float32)
    m0 = jnp.full((b, kvh, g, cq), -jnp.inf, jnp.float32)
    l0 = jnp.zeros((b, kvh, g, cq), jnp.float32)
    acc0, m0, l0 = _vary_like(q_pos0, acc0, m0, l0)
    hi = _needed_k_chunks(q_pos0 + cq - 1, k_off, ck, nk, causal)
    acc, m, l = lax.fori_loop(0, hi, k_step, (acc0, m0, l0))
    seen = l > 0
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), -jnp.inf)
    return out, lse

  outs, lses = lax.map(q_chunk, jnp.arange(nq))  # [nq, b, kvh, g, cq, (d)]
  out = jnp.transpose(outs, (1, 0, 4, 2, 3, 5)).reshape(b, sq, kvh, g, d)
  lse = jnp.transpose(lses, (1, 2, 3, 0, 4)).reshape(b, kvh, g, sq)
  return out, lse


def _block_bwd_impl(q, k, v, q_off, k_off, out, lse, dout, dlse, causal, cq, ck):
  """Recomputes P chunk by chunk; dS = P * (dP - D) + P * dlse, D = rowsum(dO * O)."""
  b, sq, kvh, g, d = q.shape
  nq, nk = sq // cq, k.shape[1] // ck
  scale = 1.0 / np.sqrt(d)
  # Matmul inputs in the inputs' dtype (bf16 runs on the tensor cores), f32 sums.
  cdt = q.dtype
  mm = functools.partial(jnp.einsum, preferred_element_type=jnp.float32)
  delta = jnp.einsum("bqhgd,bqhgd->bhgq", dout.astype(jnp.float32), out)
  dout = dout.astype(cdt)
  lse_safe = jnp.where(jnp.isfinite(lse), lse, 0.0)
  dlse = dlse.astype(jnp.float32)

  def k_chunk(dq, j):
    kc = lax.dynamic_slice_in_dim(k, j * ck, ck, axis=1)
    vc = lax.dynamic_slice_in_dim(v, j * ck, ck, axis=1)
    k_pos0 = k_off + j * ck

    def q_step(i, carry):
      dq, dk, dv = carry
      qc = lax.dynamic_slice_in_dim(q, i * cq, cq, axis=1)
      doc = lax.dynamic_slice_in_dim(dout, i * cq, cq, axis=1)
      rows = lambda x: lax.dynamic_slice_in_dim(x, i * cq, cq, axis=3)
      s = _scores(qc, kc, q_off + i * cq, k_pos0, causal, scale)
      p = jnp.exp(s - rows(lse_safe)[..., None])
      dv = dv + mm("bhgqk,bqhgd->bkhd", p.astype(cdt), doc)
      dp = mm("bqhgd,bkhd->bhgqk", doc, vc)
      ds = (p * (dp - rows(delta)[..., None] + rows(dlse)[..., None]) * scale).astype(cdt)
      dk = dk + mm("bhgqk,bqhgd->bkhd", ds, qc)
      dqc = mm("bhgqk,bkhd->bqhgd", ds, kc)
      dq = lax.dynamic_update_slice_in_dim(
          dq, lax.dynamic_slice_in_dim(dq, i * cq, cq, axis=1) + dqc, i * cq, axis=1)
      return dq, dk, dv

    zeros_kv, = _vary_like(k_pos0 + q_off,
                           jnp.zeros((b, ck, kvh, d), jnp.float32))
    lo = _first_q_chunk(k_pos0, q_off, cq, nq, causal)
    dq, dk, dv = lax.fori_loop(lo, nq, q_step, (dq, zeros_kv, zeros_kv))
    return dq, (dk, dv)

  dq0, = _vary_like(q_off + k_off, jnp.zeros(q.shape, jnp.float32))
  dq, (dks, dvs) = lax.scan(k_chunk, dq0, jnp.arange(nk))  # dks [nk, b, ck, kvh, d]
  merge = lambda x: jnp.moveaxis(x, 0, 1).reshape(k.shape)
  return dq, merge(dks), merge(dvs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def block_attention(q, k, v, q_off, k_off, causal, cq, ck):
  """Attention of q [b, sq, kvh, g, d] against one K/V block at position k_off.

  q_off and k_off are the blocks' global start positions (int32 scalars, may be
  traced). Returns (out f32 [b, sq, kvh, g, d], lse f32 [b, kvh, g, sq]).
  """
  return _block_fwd_impl(q, k, v, q_off, k_off, causal, cq, ck)


def _block_attention_fwd(q, k, v, q_off, k_off, causal, cq, ck):
  out, lse = _block_fwd_impl(q, k, v, q_off, k_off, causal, cq, ck)
  return (out, lse), (q, k, v, q_off, k_off, out, lse)


def _block_attention_bwd(causal, cq, ck, res, cotangents):
  q, k, v, q_off, k_off, out, lse = res
  dout, dlse = cotangents
  dq, dk, dv = _block_bwd_impl(q, k, v, q_off, k_off, out, lse, dout, dlse,
                               causal, cq, ck)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


block_attention.defvjp(_block_attention_fwd, _block_attention_bwd)


def _merge(out_a, lse_a, out_b, lse_b):
  """Combines two partial attentions over disjoint keys by their logsumexp."""
  m = jnp.maximum(lse_a, lse_b)
  m_safe = jnp.where(m == -jnp.inf, 0.0, m)
  wa, wb = jnp.exp(lse_a - m_safe), jnp.exp(lse_b - m_safe)
  total = wa + wb
  seen = total > 0
  inv = 1.0 / jnp.where(seen, total, 1.0)
  lse = jnp.where(seen, m_safe + jnp.log(jnp.where(seen, total, 1.0)), -jnp.inf)
  to_rows = lambda w: jnp.transpose(w * inv, (0, 3, 1, 2))[..., None]
  return out_a * to_rows(wa) + out_b * to_rows(wb), lse


def _varying_axes(x):
  """The manual mesh axes x varies over (jax >= 0.10: aval.mat; before: aval.vma)."""
  aval = jax.typeof(x)
  mat = getattr(aval, "mat", None)
  return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def ring_attention_shard(q, k, v, *, causal, axis_name=AXIS, q_chunk=DEFAULT_CHUNK,
                         k_chunk=DEFAULT_CHUNK):
  """Per-device body (inside shard_map): q/k/v are this device's sequence blocks."""
  n = lax.axis_size(axis_name)
  # Under a shard_map over more axes (tensor parallelism), q also varies over
  # those; the position and the accumulators must vary like it (shard_map's types).
  other_axes = tuple(sorted(_varying_axes(q) - {axis_name}))
  me = lax.axis_index(axis_name)
  if other_axes:
    me = lax.pcast(me, other_axes, to="varying")
  b, sq, h, d = q.shape
  kvh = k.shape[2]
  g = h // kvh
  block = sq  # every device holds an equal block of the sequence
  cq, ck = _chunk(sq, q_chunk), _chunk(k.shape[1], k_chunk)
  qg = q.reshape(b, sq, kvh, g, d)
  # Send to the next device: after i steps device `me` holds block (me - i) mod n.
  perm = [(j, (j + 1) % n) for j in range(n)]

  def step(i, state):
    out, lse, k_cur, v_cur = state
    # One permute carries K and V; it does not depend on this step's compute,
    # so XLA can overlap the transfer with it.
    k_next, v_next = lax.ppermute((k_cur, v_cur), axis_name, perm)
    src = (me - i) % n
    o_i, lse_i = block_attention(qg, k_cur, v_cur, me * block, src * block,
                                 causal, cq, ck)
    out, lse = _merge(out, lse, o_i, lse_i)
    return out, lse, k_next, v_next

  # The accumulators differ per device, so they must be typed as varying over the
  # axis like the loop's outputs (shard_map checks the carry's manual axis types).
  varying = functools.partial(lax.pcast, axis_name=(axis_name,) + other_axes,
                              to="varying")
  out0 = varying(jnp.zeros((b, sq, kvh, g, d), jnp.float32))
  lse0 = varying(jnp.full((b, kvh, g, sq), -jnp.inf, jnp.float32))
  out, _, _, _ = lax.fori_loop(0, n, step, (out0, lse0, k, v))
  return out.reshape(b, sq, h, d).astype(q.dtype)


def make_mesh(devices):
  return Mesh(np.asarray(devices), (AXIS,))


def ring_attention(mesh, causal, q_chunk=DEFAULT_CHUNK, k_chunk=DEFAULT_CHUNK):
  """Global function (q, k, v) -> out, sequence-sharded over the mesh's `cp` axis."""
  spec = P(None, AXIS)
  body = functools.partial(ring_attention_shard, causal=causal, q_chunk=q_chunk,
                           k_chunk=k_chunk)
  return jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec)


def _loss(out):
  # A loss whose cotangent depends on the output, so the backward pass is not trivial.
  return jnp.sum(jnp.square(out.astype(jnp.float32)))


def example_function(config, mesh):
  """The function the dump compiles: forward, or loss gradients for backward."""
  attn = ring_attention(mesh, config.causal, config.q_chunk, config.k_chunk)
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
