"""Ring attention in JAX: the example whose collective-permutes the NVSHMEM pass moves.

Sequence parallelism over a mesh axis `cp`: each device keeps its query block and
passes its K/V block around the ring, one step per device. Grouped-query
attention: `num_heads` query heads share `num_kv_heads` K/V heads.

Per step one `lax.ppermute` moves K and V as one array, issued before the step's
attention and independent of it, so the compiled step overlaps the transfer with
the attention (XLA keeps one collective-permute in flight at a time, so separate
K and V permutes would leave one exposed). The ring folds the per-step results
together by their logsumexp.

The ring has its own custom VJP: the backward runs the ring again with each
block's gradients computed from the global output and logsumexp (exact shares,
as in FlashAttention-2's backward), and K/V travel with their f32 gradient
accumulators in one buffer per step; one last permute returns each block's
gradient to its owner.

The per-block kernel (`kernel=`): `cudnn` is cuDNN's fused flash attention
(hlo_tools.programs.attention_kernels); `blocked` is the memory-efficient online softmax
below, which runs everywhere: it walks query and key chunks with a running max
and sum, never building a block's whole score matrix, and skips causal chunks
that lie wholly in the future (dynamic loop bounds). `auto` takes cuDNN on a GPU
backend when the dtype and head size fit, else the blocked softmax (CPU tests,
deviceless compiles).

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

AXIS = "cp"

Array = jax.Array
Pos = jax.Array | int  # a block's global position: traced, or a Python int
Kernel = tuple[str, int, int]  # the per-block kernel's name, query and key chunk
# What a block's backward needs: q, k, v, their positions, out and lse.
Residuals = tuple[Array, Array, Array, Pos, Pos, Array, Array]

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


def _merge(out_a: Array, lse_a: Array, out_b: Array, lse_b: Array) -> tuple[Array, Array]:
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


def _pack(kv: Array, acc: Array) -> Array:
  """K/V and the f32 gradient accumulator in one buffer (bit-exact), for one permute."""
  bits = lax.bitcast_convert_type(acc, kv.dtype)  # 16-bit kv: [..., d, 2]
  return jnp.concatenate([kv, bits.reshape(acc.shape[:-1] + (-1,))], axis=-1)


def _unpack(msg: Array, d: int) -> tuple[Array, Array]:
  kv, bits = msg[..., :d], msg[..., d:]
  if bits.shape[-1] != d:
    bits = bits.reshape(bits.shape[:-1] + (d, -1))
  return kv, lax.bitcast_convert_type(bits, jnp.float32)


def _varying_axes(x: Array) -> frozenset[str]:
  """The manual mesh axes x varies over (jax >= 0.10: aval.mat; before: aval.vma)."""
  aval = jax.typeof(x)
  mat = getattr(aval, "mat", None)
  return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def _ring_perm(axis_name: str, q: Array) -> tuple[int, Array, list[tuple[int, int]]]:
  """(n, this device's index, the ring's pairs).

  The index is typed as varying over every manual axis q varies over (under a
  shard_map over more axes, e.g. tensor parallelism), so that the positions and
  the loop carries derived from it match what the loops compute from q.
  """
  n = lax.axis_size(axis_name)
  me = lax.axis_index(axis_name)
  other_axes = tuple(sorted(_varying_axes(q) - {axis_name}))
  if other_axes:
    me = lax.pcast(me, other_axes, to="varying")
  # Send to the next device: after i steps device `me` holds block (me - i) mod n.
  return n, me, [(j, (j + 1) % n) for j in range(n)]


def _ring_forward(
  qg: Array, k: Array, v: Array, causal: bool, axis_name: str, kernel: Kernel
) -> tuple[Array, Array]:
  """(out f32, lse) of this device's queries against every device's K/V block."""
  n, me, perm = _ring_perm(axis_name, qg)
  b, sq, kvh, g, d = qg.shape

  def step(i: Array, state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
    out, lse, kv = state
    # K and V travel as one array: one permute per step. It is issued first and
    # does not depend on this step's attention, so XLA overlaps the two (its
    # scheduler keeps one collective-permute in flight at a time, so separate K
    # and V permutes would run one of them exposed).
    kv_next = lax.ppermute(kv, axis_name, perm)
    src = (me - i) % n
    o_i, lse_i = _pair_fwd(kernel, qg, kv[0], kv[1], me * sq, src * sq, causal)
    out, lse = _merge(out, lse, o_i, lse_i)
    return out, lse, kv_next

  # Carries typed as varying over the ring axis like the loop's outputs.
  out0, lse0 = _vary_like(
    me, jnp.zeros(qg.shape, jnp.float32), jnp.full((b, kvh, g, sq), -jnp.inf, jnp.float32)
  )
  out, lse, _ = lax.fori_loop(0, n, step, (out0, lse0, jnp.stack([k, v])))
  return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _ring(qg: Array, k: Array, v: Array, causal: bool, axis_name: str, kernel: Kernel) -> Array:
  out, _ = _ring_forward(qg, k, v, causal, axis_name, kernel)
  return out.astype(qg.dtype)


def _ring_fwd_rule(
  qg: Array, k: Array, v: Array, causal: bool, axis_name: str, kernel: Kernel
) -> tuple[Array, tuple[Array, ...]]:
  out, lse = _ring_forward(qg, k, v, causal, axis_name, kernel)
  out = out.astype(qg.dtype)
  return out, (qg, k, v, out, lse)


def _ring_bwd_rule(
  causal: bool, axis_name: str, kernel: Kernel, res: tuple[Array, ...], dout: Array
) -> tuple[Array, Array, Array]:
  """The ring again, K/V travelling with their f32 gradient accumulators.

  Each step's block gradients use the global out and lse, so they are exact
  shares. The accumulator a device sends at the top of step i holds block
  src(i-1)'s gradient so far (its own share from step i-1 plus what it received
  then), so both the K/V and the gradient transfer are independent of step i's
  attention and overlap it; after the loop one more permute hands every block's
  total to its owner.
  """
  qg, k, v, out, lse = res
  n, me, perm = _ring_perm(axis_name, qg)
  sq, d = qg.shape[1], k.shape[-1]

  def step(i: Array, state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
    dq, kv, send = state
    kv_next, recv = _unpack(lax.ppermute(_pack(kv, send), axis_name, perm), d)
    src = (me - i) % n
    dq_i, dk_i, dv_i = _pair_bwd(
      kernel, qg, kv[0], kv[1], me * sq, src * sq, out, lse, dout, causal
    )
    return dq + dq_i, kv_next, recv + jnp.stack([dk_i, dv_i]).astype(jnp.float32)

  dq0, send0 = _vary_like(
    me, jnp.zeros(qg.shape, jnp.float32), jnp.zeros((2,) + k.shape, jnp.float32)
  )
  dq, _, send = lax.fori_loop(0, n, step, (dq0, jnp.stack([k, v]), send0))
  dkv = lax.ppermute(send, axis_name, perm)
  return dq.astype(qg.dtype), dkv[0].astype(k.dtype), dkv[1].astype(v.dtype)


_ring.defvjp(_ring_fwd_rule, _ring_bwd_rule)


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

  kernel: `blocked` (the online softmax above, runs everywhere), `cudnn` (cuDNN
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
