"""A Llama-3-8B-shaped train step with tensor and context parallelism.

The program users compile when they want ring attention for long contexts: a few
decoder layers (RMSNorm, grouped-query attention with rotary positions, a SwiGLU
MLP) under `jax.shard_map` over a 2-D mesh (`cp`, `tp`):

* context parallelism over `cp`: every device holds a block of the sequence, and
  attention is `hlo_tools.programs.ring_attention`'s ring (K and V rotate with one
  collective-permute per step, in a loop; the backward pass runs the ring again
  for their gradients);
* tensor parallelism over `tp`, Megatron-style: the Q/K/V and gate/up projections
  are split by column (heads, MLP units), the output and down projections by row;
  a block's partial outputs are summed by a `psum` over `tp` in the forward pass,
  and its input's gradient by a `psum` over `tp` in the backward pass;
* `jax.value_and_grad` of the token-mean cross-entropy on each device, the
  gradients summed over `cp` (every device holds every parameter of its tp rank),
  clipped to a global norm and applied by Adam (or SGD). The update runs under
  `jit` outside the shard_map, as optimizers do: XLA's partitioner adds the
  all-reduce of the norm over the sharded gradients.

The collectives are written out (shard_map with check_vma=False) rather than left to
shard_map's type system, so the program states exactly which all-reduce runs where
and does not depend on how the ring types its loop carries.

The mesh is devices reshaped to (cp, tp), `tp` the faster-varying axis, so on a
topology of hosts with G GPUs and tp <= G each tensor-parallel group sits inside
one host and the ring runs across hosts once cp exceeds G / tp.

Defaults are Llama 3 8B's layer shapes (hidden 4096, 32 query / 8 KV heads x 128,
MLP 14336) with 2 layers and an 8192-token vocabulary, so that a deviceless compile
takes tens of seconds: the HLO grows with the layer count, not with the shapes.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.typing import DTypeLike

from hlo_tools.programs import ring_attention

CP, TP = "cp", "tp"
DTYPES = ring_attention.DTYPES

Array = jax.Array
# A pytree: {"embed": ..., "layers": [{name: ...}], ...} of arrays, specs or shapes.
Tree = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Model and step shapes (seq_len is the global sequence length)."""

  num_layers: int = 2
  hidden: int = 4096
  num_heads: int = 32
  num_kv_heads: int = 8
  head_dim: int = 128
  mlp: int = 14336
  vocab: int = 8192
  seq_len: int = 65536
  batch: int = 1
  dtype: str = "bf16"
  rotary: bool = True
  optimizer: str = "adam"  # or "sgd"
  learning_rate: float = 1e-4
  clip_norm: float = 1.0
  q_chunk: int = ring_attention.DEFAULT_CHUNK
  k_chunk: int = ring_attention.DEFAULT_CHUNK

  def validate(self, mesh_shape: Mapping[str, int]) -> None:
    """Raises ValueError unless the shapes divide over mesh_shape {axis: size}."""
    cp, tp = mesh_shape.get(CP, 1), mesh_shape.get(TP, 1)
    if set(mesh_shape) - {CP, TP}:
      raise ValueError(
        f"the train step's mesh axes are {CP} and {TP}, not "
        f"{', '.join(sorted(set(mesh_shape) - {CP, TP}))}"
      )
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype {self.dtype!r} not in {sorted(DTYPES)}")
    if self.optimizer not in ("adam", "sgd"):
      raise ValueError(f"optimizer {self.optimizer!r}: expected adam or sgd")
    if min(self.num_layers, self.hidden, self.vocab, self.seq_len, self.batch) < 1:
      raise ValueError("num_layers, hidden, vocab, seq_len and batch must be >= 1")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
      )
    for name, value in (("num_kv_heads", self.num_kv_heads), ("mlp", self.mlp)):
      if value % tp:
        raise ValueError(f"{name}={value} does not split over tp={tp}")
    if self.seq_len % cp:
      raise ValueError(f"seq_len={self.seq_len} does not split over cp={cp}")
    if self.rotary and self.head_dim % 2:
      raise ValueError(f"rotary positions need an even head_dim, not {self.head_dim}")


def param_specs(config: TrainConfig) -> Tree:
  """PartitionSpec of every parameter: column splits on dim 1, row splits on dim 0."""
  layer = {
    "attn_norm": P(),
    "wq": P(None, TP),
    "wk": P(None, TP),
    "wv": P(None, TP),
    "wo": P(TP, None),
    "mlp_norm": P(),
    "w_gate": P(None, TP),
    "w_up": P(None, TP),
    "w_down": P(TP, None),
  }
  return {
    "embed": P(),
    "layers": [dict(layer) for _ in range(config.num_layers)],
    "final_norm": P(),
    "lm_head": P(),
  }


def param_shapes(config: TrainConfig) -> Tree:
  c = config
  layer = {
    "attn_norm": (c.hidden,),
    "wq": (c.hidden, c.num_heads * c.head_dim),
    "wk": (c.hidden, c.num_kv_heads * c.head_dim),
    "wv": (c.hidden, c.num_kv_heads * c.head_dim),
    "wo": (c.num_heads * c.head_dim, c.hidden),
    "mlp_norm": (c.hidden,),
    "w_gate": (c.hidden, c.mlp),
    "w_up": (c.hidden, c.mlp),
    "w_down": (c.mlp, c.hidden),
  }
  return {
    "embed": (c.vocab, c.hidden),
    "layers": [dict(layer) for _ in range(c.num_layers)],
    "final_norm": (c.hidden,),
    "lm_head": (c.hidden, c.vocab),
  }


def _rms_norm(x: Array, weight: Array) -> Array:
  x32 = x.astype(jnp.float32)
  scale = lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + 1e-5)
  return (x32 * scale).astype(x.dtype) * weight


def _rotary(x: Array, positions: Array) -> Array:
  """Rotary position embedding of x [b, s, heads, d] at positions [s] (half split)."""
  d = x.shape[-1]
  inv_freq = 1.0 / (500000.0 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
  angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]  # [s, d/2]
  cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x.dtype)


@jax.custom_vjp
def _tp_input(x: Array) -> Array:
  """Megatron's f: identity forward; the gradient is summed over tp (every tp rank
  holds part of the columns x feeds)."""
  return x


_tp_input.defvjp(lambda x: (x, None), lambda _, g: (lax.psum(g, TP),))


@jax.custom_vjp
def _tp_output(x: Array) -> Array:
  """Megatron's g: the partial outputs of the row-split matmul summed over tp; the
  gradient passes through (every tp rank needs all of it)."""
  return lax.psum(x, TP)


_tp_output.defvjp(lambda x: (lax.psum(x, TP), None), lambda _, g: (g,))


def _attention(x: Array, p: Mapping[str, Array], config: TrainConfig, positions: Array) -> Array:
  """Column-split Q/K/V (this device's heads), the ring over cp, row-split output."""
  b, s, _ = x.shape
  d = config.head_dim
  x = _tp_input(x)
  q = (x @ p["wq"]).reshape(b, s, -1, d)
  k = (x @ p["wk"]).reshape(b, s, -1, d)
  v = (x @ p["wv"]).reshape(b, s, -1, d)
  if config.rotary:
    q, k = _rotary(q, positions), _rotary(k, positions)
  out = ring_attention.ring_attention_shard(
    q, k, v, causal=True, axis_name=CP, q_chunk=config.q_chunk, k_chunk=config.k_chunk
  )
  return _tp_output(out.reshape(b, s, -1) @ p["wo"])


def _mlp(x: Array, p: Mapping[str, Array]) -> Array:
  x = _tp_input(x)
  h = jax.nn.silu(x @ p["w_gate"]) * (x @ p["w_up"])
  return _tp_output(h @ p["w_down"])


def _local_loss(params: Tree, tokens: Array, targets: Array, config: TrainConfig) -> Array:
  """This device's share of the token-mean loss (its tokens' sum / all tokens)."""
  s = tokens.shape[1]
  positions = lax.axis_index(CP) * s + jnp.arange(s)
  x = params["embed"][tokens]
  for layer in params["layers"]:
    x = x + _attention(_rms_norm(x, layer["attn_norm"]), layer, config, positions)
    x = x + _mlp(_rms_norm(x, layer["mlp_norm"]), layer)
  logits = jnp.dot(
    _rms_norm(x, params["final_norm"]), params["lm_head"], preferred_element_type=jnp.float32
  )
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1).sum()
  return nll / (config.batch * config.seq_len)


def _local_value_and_grad(
  params: Tree, tokens: Array, targets: Array, config: TrainConfig
) -> tuple[Array, Tree]:
  """Per-shard body: the loss and the gradients, summed over the sequence blocks."""
  loss, grads = jax.value_and_grad(_local_loss)(params, tokens, targets, config)
  return lax.psum(loss, CP), jax.tree.map(lambda g: lax.psum(g, CP), grads)


def value_and_grad_function(config: TrainConfig, mesh: Mesh) -> Callable[..., Any]:
  """Global (params, tokens, targets) -> (loss, grads), sharded by shard_map."""
  data = P(None, CP)
  specs = param_specs(config)
  return jax.shard_map(
    functools.partial(_local_value_and_grad, config=config),
    mesh=mesh,
    in_specs=(specs, data, data),
    out_specs=(P(), specs),
    check_vma=False,
  )


def _adam(
  params: Tree,
  grads: Tree,
  state: Tree,
  lr: float,
  b1: float = 0.9,
  b2: float = 0.95,
  eps: float = 1e-8,
) -> tuple[Tree, Tree]:
  step = state["step"] + 1
  m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), state["m"], grads)
  v = jax.tree.map(
    lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)), state["v"], grads
  )
  c1, c2 = 1 - b1**step, 1 - b2**step
  new = jax.tree.map(
    lambda p, m, v: (p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)).astype(p.dtype), params, m, v
  )
  return new, {"step": step, "m": m, "v": v}


def _clip_by_global_norm(grads: Tree, max_norm: float) -> Tree:
  leaves = jax.tree.leaves(grads)
  norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in leaves))
  scale = jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-6))
  return jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)


def train_step_function(
  config: TrainConfig, mesh: Mesh
) -> Callable[[Tree, Tree, Array, Array], tuple[Tree, Tree, Array]]:
  """(params, opt_state, tokens, targets) -> (params, opt_state, loss)."""
  value_and_grad = value_and_grad_function(config, mesh)

  def step(
    params: Tree, opt_state: Tree, tokens: Array, targets: Array
  ) -> tuple[Tree, Tree, Array]:
    loss, grads = value_and_grad(params, tokens, targets)
    grads = _clip_by_global_norm(grads, config.clip_norm)
    if config.optimizer == "sgd":
      new = jax.tree.map(lambda p, g: (p - config.learning_rate * g).astype(p.dtype), params, grads)
      return new, opt_state, loss
    new, opt_state = _adam(params, grads, opt_state, config.learning_rate)
    return new, opt_state, loss

  return step


def default_mesh(num_devices: int, devices_per_host: int) -> list[tuple[str, int]]:
  """[(cp, size), (tp, size)]: the layout that keeps tensor parallelism inside hosts.

  Several hosts: tp = a host's GPUs, cp = the hosts (the ring crosses hosts). One
  host: tp 2 (1 for an odd count) and cp the rest, so the ring still has a few steps.
  """
  if num_devices > devices_per_host and num_devices % devices_per_host == 0:
    tp = devices_per_host
  else:
    tp = 2 if num_devices % 2 == 0 else 1
  return [(CP, num_devices // tp), (TP, tp)]


def make_mesh(devices: Sequence[jax.Device], cp: int, tp: int) -> Mesh:
  """devices (in id order) as a (cp, tp) mesh: consecutive devices share a tp group."""
  return Mesh(np.asarray(devices).reshape(cp, tp), (CP, TP))


def _abstract(
  shape: tuple[int, ...], dtype: DTypeLike, mesh: Mesh, spec: P
) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def example_args(
  config: TrainConfig, mesh: Mesh
) -> tuple[Tree, Tree, jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
  """Abstract (params, opt_state, tokens, targets) for lowering: no data."""
  dtype = DTYPES[config.dtype]
  specs = param_specs(config)
  shapes = param_shapes(config)
  is_shape = lambda x: isinstance(x, tuple)
  params = jax.tree.map(
    lambda shp, spec: _abstract(shp, dtype, mesh, spec), shapes, specs, is_leaf=is_shape
  )
  if config.optimizer == "adam":
    moments = lambda: jax.tree.map(
      lambda shp, spec: _abstract(shp, jnp.float32, mesh, spec), shapes, specs, is_leaf=is_shape
    )
    state: Tree = {"step": _abstract((), jnp.int32, mesh, P()), "m": moments(), "v": moments()}
  else:
    state = {}
  data = _abstract((config.batch, config.seq_len), jnp.int32, mesh, P(None, CP))
  return params, state, data, data
