"""Per-shard JAX programs with the parallel shapes real training jobs mix with a
ring: a pipeline, a 3-D mesh, a ring in both directions, Ulysses all-to-all and a
scan over rematerialized layers.

Each is small (a few matmuls per step) but keeps the structure the tools must
read: permutes nested in loops, non-cyclic shifts beside rings, several mesh
axes. `hlo-tools dump hlo_tools.programs.parallel_shapes:NAME` compiles one, e.g.

    hlo-tools dump hlo_tools.programs.parallel_shapes:pipeline_ring \\
        --topology=1x2x4 --mesh=pp:2,cp:4 --nocheck_vma \\
        --arg=4,64,32:f32:None,cp --arg=2,32,32:f32:pp --out_spec=None,cp \\
        --all_passes --out=/tmp/pipeline
"""

import jax
import jax.numpy as jnp
from jax import lax

CP, PP, TP, DP = "cp", "pp", "tp", "dp"

Array = jax.Array


def _ring(n: int, step: int = 1) -> list[tuple[int, int]]:
  return [(j, (j + step) % n) for j in range(n)]


def ring_mix(x: Array, w: Array) -> Array:
  """One attention-like block whose key/value blocks travel a ring over `cp`: each
  of the cp steps mixes the local queries with the visiting block, then passes the
  block on (one permute per step)."""
  n = lax.axis_size(CP)
  q = x @ w

  def body(_: Array, carry: tuple[Array, Array]) -> tuple[Array, Array]:
    kv, acc = carry
    scores = jax.nn.softmax(q @ kv.T, axis=-1)
    return lax.ppermute(kv, CP, _ring(n)), acc + scores @ kv

  return lax.fori_loop(0, n, body, (x, jnp.zeros_like(x)))[1]


def pipeline_ring(x: Array, w: Array) -> Array:
  """GPipe: microbatches flow through the `pp` stages, each stage a ring over `cp`.

  x: [microbatches, tokens, hidden] (tokens split over cp), the pipeline's input,
  read by stage 0; w: [1, hidden, hidden], this stage's weight (split over pp).
  The schedule has microbatches + stages - 1 steps; each hands its activation to
  the next stage with a non-cyclic shift (stage i -> i+1; the last stage sends
  nowhere and stage 0 receives nothing), and runs the cp ring inside.
  """
  stages, stage = lax.axis_size(PP), lax.axis_index(PP)
  micro = x.shape[0]
  shift = [(i, i + 1) for i in range(stages - 1)]

  def step(t: Array, carry: tuple[Array, Array]) -> tuple[Array, Array]:
    state, out = carry
    inp = jnp.where(stage == 0, x[t % micro], state)
    h = ring_mix(inp, w[0])
    done = jnp.logical_and(stage == stages - 1, t >= stages - 1)
    slot = (t - stages + 1) % micro
    out = out.at[slot].set(jnp.where(done, h, out[slot]))
    return lax.ppermute(h, PP, shift), out

  init = (jnp.zeros_like(x[0]), jnp.zeros_like(x))
  return lax.fori_loop(0, micro + stages - 1, step, init)[1]


def dp_cp_tp_block(x: Array, w1: Array, w2: Array) -> tuple[Array, Array]:
  """A Megatron MLP over `tp` after a ring over `cp`, data parallel over `dp`,
  trained one SGD step (so the gradients are summed over dp).

  x: [batch, tokens, hidden] (batch over dp, tokens over cp); w1: [hidden, mlp]
  split over tp (columns), w2: [mlp, hidden] split over tp (rows).
  """

  def loss(w1: Array, w2: Array) -> Array:
    h = jax.vmap(lambda xb: ring_mix(xb, jnp.eye(xb.shape[-1], dtype=xb.dtype)))(x)
    y = lax.psum(jax.nn.gelu(h @ w1) @ w2, TP)
    return jnp.mean(y * y)

  g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
  g1, g2 = lax.pmean(g1, (DP, CP)), lax.pmean(g2, (DP, CP))
  return w1 - 0.1 * g1, w2 - 0.1 * g2


def bidirectional_ring(x: Array, w: Array) -> Array:
  """Half of each key/value block travels clockwise, half counter-clockwise over
  `cp` (two permutes per step, i -> i+1 and i -> i-1), as bidirectional ring
  attention does to use both directions of every link."""
  n = lax.axis_size(CP)
  q = x @ w
  half = x.shape[-1] // 2

  def body(_: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
    fwd, bwd, acc = carry
    kv = jnp.concatenate([fwd, bwd], axis=-1)
    acc = acc + jax.nn.softmax(q @ kv.T, axis=-1) @ kv
    return lax.ppermute(fwd, CP, _ring(n, 1)), lax.ppermute(bwd, CP, _ring(n, -1)), acc

  init = (x[..., :half], x[..., half:], jnp.zeros_like(x))
  return lax.fori_loop(0, n, body, init)[2]


def ulysses_attention(q: Array, k: Array, v: Array) -> Array:
  """DeepSpeed-Ulysses: all-to-all from a token split to a head split over `cp`,
  attention over the whole sequence per head, all-to-all back. No permute.

  q, k, v: [tokens, heads, head_dim], tokens split over cp; heads divisible by cp.
  """

  def to_heads(t: Array) -> Array:
    return lax.all_to_all(t, CP, split_axis=1, concat_axis=0, tiled=True)

  q, k, v = to_heads(q), to_heads(k), to_heads(v)
  scores = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
  out = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, axis=-1), v)
  return lax.all_to_all(out, CP, split_axis=0, concat_axis=1, tiled=True)


def scan_remat_ring(x: Array, ws: Array) -> Array:
  """A stack of layers as `lax.scan` over their weights, each layer rematerialized
  (`jax.checkpoint`) and holding a ring over `cp`; loss and gradients, so the
  backward scan recomputes each layer's ring.

  x: [tokens, hidden] (tokens over cp); ws: [layers, hidden, hidden].
  """

  def layer(h: Array, w: Array) -> tuple[Array, None]:
    return h + ring_mix(h, w), None

  def loss(ws: Array) -> Array:
    h, _ = lax.scan(jax.checkpoint(layer), x, ws)
    return jnp.mean(h * h)

  value, grads = jax.value_and_grad(loss)(ws)
  return lax.pmean(grads, CP) + value
