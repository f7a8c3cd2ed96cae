"""The ring loop of ring attention: one K/V permute per step, the per-step results merged by
their logsumexp, and the ring's custom VJP (K/V travelling with their gradient accumulators)."""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from hlo_tools.programs.ring_blocks import Array, Kernel, _pair_bwd, _pair_fwd, _vary_like


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


def _pack(kv: Array, acc: Array) -> Array:
  """K/V and the f32 gradient accumulator in one buffer, for one permute. Exact but
  where 16-bit K/V carry an accumulator whose low half reads as a bf16 NaN (about 1
  sum in 256): XLA's CPU compiler concatenates bf16 through f32 and writes the
  canonical NaN there, a few ulps off (tests/programs/test_ring_loop.py). Packing
  as 32-bit integers would avoid it and change the program's HLO; the GPU
  compiler's handling is unmeasured."""
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
