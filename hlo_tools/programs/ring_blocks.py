"""The ring's per-block attention: the blocked online softmax (with its custom VJP) and the
per-pair dispatch to it or to cuDNN's flash attention, in the ring's GQA layout."""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlo_tools.programs import attention_kernels

Array = jax.Array
Pos = jax.Array | int  # a block's global position: traced, or a Python int
Kernel = tuple[str, int, int]  # the per-block kernel's name, query and key chunk
# What a block's backward needs: q, k, v, their positions, out and lse.
Residuals = tuple[Array, Array, Array, Pos, Pos, Array, Array]


def _scores(qc: Array, kc: Array, q_pos0: Pos, k_pos0: Pos, causal: bool, scale: float) -> Array:
  """f32 scores [b, kvh, g, cq, ck] of a query chunk against a key chunk, masked."""
  s = jnp.einsum("bqhgd,bkhd->bhgqk", qc, kc, preferred_element_type=jnp.float32) * scale
  if causal:
    q_pos = q_pos0 + jnp.arange(qc.shape[1])
    k_pos = k_pos0 + jnp.arange(kc.shape[1])
    s = jnp.where(k_pos[None, :] <= q_pos[:, None], s, -jnp.inf)
  return s


def _vary_like(ref: Pos, *xs: Array) -> tuple[Array, ...]:
  """xs typed like the scalar `ref` with respect to shard_map's manual axes.

  Inside shard_map a loop carry must vary over the mesh axes its loop output
  varies over, and fresh zeros vary over none. Adding ref * 0 (a per-device
  position) gives them ref's axis types on every jax version, without naming
  the axis; outside shard_map it is a no-op.
  """
  zero = (jnp.asarray(ref) * 0).astype(jnp.float32)
  return tuple(x + zero for x in xs)


def _needed_k_chunks(q_end: Pos, k_off: Pos, ck: int, nk: int, causal: bool) -> Pos:
  """Key chunks a query chunk ending at position q_end (inclusive) must visit."""
  if not causal:
    return nk
  return jnp.clip((q_end - k_off) // ck + 1, 0, nk)


def _first_q_chunk(k_start: Pos, q_off: Pos, cq: int, nq: int, causal: bool) -> Pos:
  """First query chunk that sees a key chunk starting at k_start."""
  if not causal:
    return 0
  return jnp.clip((k_start - q_off) // cq, 0, nq)


def _block_fwd_impl(
  q: Array, k: Array, v: Array, q_off: Pos, k_off: Pos, causal: bool, cq: int, ck: int
) -> tuple[Array, Array]:
  """Chunked online softmax. q [b, sq, kvh, g, d]; k, v [b, sk, kvh, d].

  Returns out [b, sq, kvh, g, d] f32 (normalized) and lse [b, kvh, g, sq] f32
  (-inf for rows with no visible key).
  """
  b, sq, kvh, g, d = q.shape
  nq, nk = sq // cq, k.shape[1] // ck
  scale = 1.0 / np.sqrt(d)

  def q_chunk(i: Array) -> tuple[Array, Array]:
    qc = lax.dynamic_slice_in_dim(q, i * cq, cq, axis=1)
    q_pos0 = q_off + i * cq

    def k_step(j: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
      acc, m, l = carry
      kc = lax.dynamic_slice_in_dim(k, j * ck, ck, axis=1)
      vc = lax.dynamic_slice_in_dim(v, j * ck, ck, axis=1)
      s = _scores(qc, kc, q_pos0, k_off + j * ck, causal, scale)
      m_new = jnp.maximum(m, s.max(axis=-1))
      m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # no -inf - -inf
      p = jnp.exp(s - m_safe[..., None])
      alpha = jnp.exp(m - m_safe)
      pv = jnp.einsum(
        "bhgqk,bkhd->bhgqd", p.astype(v.dtype), vc, preferred_element_type=jnp.float32
      )
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


def _block_bwd_impl(
  q: Array,
  k: Array,
  v: Array,
  q_off: Pos,
  k_off: Pos,
  out: Array,
  lse: Array,
  dout: Array,
  dlse: Array,
  causal: bool,
  cq: int,
  ck: int,
) -> tuple[Array, Array, Array]:
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

  def k_chunk(dq: Array, j: Array) -> tuple[Array, tuple[Array, Array]]:
    kc = lax.dynamic_slice_in_dim(k, j * ck, ck, axis=1)
    vc = lax.dynamic_slice_in_dim(v, j * ck, ck, axis=1)
    k_pos0 = k_off + j * ck

    def q_step(i: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
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
        dq, lax.dynamic_slice_in_dim(dq, i * cq, cq, axis=1) + dqc, i * cq, axis=1
      )
      return dq, dk, dv

    (zeros_kv,) = _vary_like(k_pos0 + q_off, jnp.zeros((b, ck, kvh, d), jnp.float32))
    lo = _first_q_chunk(k_pos0, q_off, cq, nq, causal)
    dq, dk, dv = lax.fori_loop(lo, nq, q_step, (dq, zeros_kv, zeros_kv))
    return dq, (dk, dv)

  (dq0,) = _vary_like(q_off + k_off, jnp.zeros(q.shape, jnp.float32))
  dq, (dks, dvs) = lax.scan(k_chunk, dq0, jnp.arange(nk))  # dks [nk, b, ck, kvh, d]
  merge = lambda x: jnp.moveaxis(x, 0, 1).reshape(k.shape)
  return dq, merge(dks), merge(dvs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def block_attention(
  q: Array, k: Array, v: Array, q_off: Pos, k_off: Pos, causal: bool, cq: int, ck: int
) -> tuple[Array, Array]:
  """Attention of q [b, sq, kvh, g, d] against one K/V block at position k_off.

  q_off and k_off are the blocks' global start positions (int32 scalars, may be
  traced). Returns (out f32 [b, sq, kvh, g, d], lse f32 [b, kvh, g, sq]).
  """
  return _block_fwd_impl(q, k, v, q_off, k_off, causal, cq, ck)


def _block_attention_fwd(
  q: Array, k: Array, v: Array, q_off: Pos, k_off: Pos, causal: bool, cq: int, ck: int
) -> tuple[tuple[Array, Array], Residuals]:
  out, lse = _block_fwd_impl(q, k, v, q_off, k_off, causal, cq, ck)
  return (out, lse), (q, k, v, q_off, k_off, out, lse)


def _block_attention_bwd(
  causal: bool, cq: int, ck: int, res: Residuals, cotangents: tuple[Array, Array]
) -> tuple[Array, Array, Array, None, None]:
  q, k, v, q_off, k_off, out, lse = res
  dout, dlse = cotangents
  dq, dk, dv = _block_bwd_impl(q, k, v, q_off, k_off, out, lse, dout, dlse, causal, cq, ck)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


block_attention.defvjp(_block_attention_fwd, _block_attention_bwd)


def _case(q_off: Pos, k_off: Pos) -> Array:
  """Causal block pair: 0 = all keys in the future, 1 = all in the past, 2 = diagonal."""
  return jnp.where(k_off > q_off, 0, jnp.where(k_off == q_off, 2, 1))


def _cudnn_block_fwd(
  qg: Array, k: Array, v: Array, q_off: Pos, k_off: Pos, causal: bool
) -> tuple[Array, ...]:
  """cuDNN forward of one block pair in the ring's layout: (out f32, lse [b, kvh, g, sq])."""
  b, sq, kvh, g, d = qg.shape
  vary = functools.partial(_vary_like, q_off + k_off)

  def run(mask: bool) -> Callable[[], tuple[Array, ...]]:
    def branch() -> tuple[Array, ...]:
      out, lse = attention_kernels.cudnn_fwd(qg.reshape(b, sq, kvh * g, d), k, v, mask)
      return vary(out.reshape(qg.shape), lse.reshape(b, kvh, g, sq))

    return branch

  def skip() -> tuple[Array, ...]:
    return vary(jnp.zeros(qg.shape, jnp.float32), jnp.full((b, kvh, g, sq), -jnp.inf, jnp.float32))

  if not causal:
    return run(False)()
  return lax.switch(_case(q_off, k_off), [skip, run(False), run(True)])


def _cudnn_block_bwd(
  qg: Array,
  k: Array,
  v: Array,
  q_off: Pos,
  k_off: Pos,
  out: Array,
  lse: Array,
  dout: Array,
  causal: bool,
) -> tuple[Array, ...]:
  """cuDNN gradients of one block pair given the ring's global out (qg's dtype) and lse."""
  b, sq, kvh, g, d = qg.shape
  flat = lambda x: x.reshape(b, sq, kvh * g, d)
  vary = functools.partial(_vary_like, q_off + k_off)

  def run(mask: bool) -> Callable[[], tuple[Array, ...]]:
    def branch() -> tuple[Array, ...]:
      dq, dk, dv = attention_kernels.cudnn_bwd(
        flat(qg), k, v, flat(out), lse.reshape(b, kvh * g, sq), flat(dout), mask
      )
      return vary(dq.reshape(qg.shape), dk, dv)

    return branch

  def skip() -> tuple[Array, ...]:
    return vary(
      jnp.zeros(qg.shape, jnp.float32),
      jnp.zeros(k.shape, jnp.float32),
      jnp.zeros(v.shape, jnp.float32),
    )

  if not causal:
    return run(False)()
  return lax.switch(_case(q_off, k_off), [skip, run(False), run(True)])


def _pair_fwd(
  kernel: Kernel, qg: Array, k: Array, v: Array, q_off: Pos, k_off: Pos, causal: bool
) -> tuple[Array, ...]:
  name, cq, ck = kernel
  if name == "cudnn":
    return _cudnn_block_fwd(qg, k, v, q_off, k_off, causal)
  return _block_fwd_impl(qg, k, v, q_off, k_off, causal, cq, ck)


def _pair_bwd(
  kernel: Kernel,
  qg: Array,
  k: Array,
  v: Array,
  q_off: Pos,
  k_off: Pos,
  out: Array,
  lse: Array,
  dout: Array,
  causal: bool,
) -> tuple[Array, ...]:
  name, cq, ck = kernel
  if name == "cudnn":
    return _cudnn_block_bwd(qg, k, v, q_off, k_off, out, lse, dout, causal)
  return _block_bwd_impl(
    qg, k, v, q_off, k_off, out.astype(jnp.float32), lse, dout, jnp.zeros_like(lse), causal, cq, ck
  )
