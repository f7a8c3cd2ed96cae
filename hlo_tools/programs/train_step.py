"""A Llama-3-8B-shaped train step with tensor and context parallelism.

The program users compile when they want ring attention for long contexts: a few
decoder layers (RMSNorm, grouped-query attention with rotary positions, a SwiGLU
MLP) under `jax.shard_map` over a 2-D mesh (`cp`, `tp`):

* context parallelism over `cp`: every device holds a block of the sequence, and
  attention is `hlo_tools.ring_attention`'s ring (K and V rotate with one
  collective-permute per step, in a loop; their gradients rotate back);
* tensor parallelism over `tp`, Megatron-style: the Q/K/V and gate/up projections
  are split by column (heads, MLP units), the output and down projections by row,
  and a `psum` over `tp` sums each block's partial output (shard_map's types put
  the matching all-reduce into the backward pass);
* `jax.value_and_grad` of the token-mean cross-entropy, then an Adam (or SGD)
  update of every parameter.

The mesh is devices reshaped to (cp, tp), `tp` the faster-varying axis, so on a
topology of hosts with G GPUs and tp <= G each tensor-parallel group sits inside
one host and the ring runs across hosts once cp exceeds G / tp.

Defaults are Llama 3 8B's layer shapes (hidden 4096, 32 query / 8 KV heads x 128,
MLP 14336) with 2 layers and a 8192-token vocabulary, so that a deviceless compile
takes tens of seconds: the HLO grows with the layer count, not with the shapes.
"""

import dataclasses
import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from hlo_tools import ring_attention

CP, TP = "cp", "tp"
DTYPES = ring_attention.DTYPES


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
  q_chunk: int = ring_attention.DEFAULT_CHUNK
  k_chunk: int = ring_attention.DEFAULT_CHUNK

  def validate(self, mesh_shape):
    """Raises ValueError unless the shapes divide over mesh_shape {axis: size}."""
    cp, tp = mesh_shape.get(CP, 1), mesh_shape.get(TP, 1)
    if set(mesh_shape) - {CP, TP}:
      raise ValueError(f"the train step's mesh axes are {CP} and {TP}, not "
                       f"{', '.join(sorted(set(mesh_shape) - {CP, TP}))}")
    if self.dtype not in DTYPES:
      raise ValueError(f"dtype {self.dtype!r} not in {sorted(DTYPES)}")
    if self.optimizer not in ("adam", "sgd"):
      raise ValueError(f"optimizer {self.optimizer!r}: expected adam or sgd")
    if min(self.num_layers, self.hidden, self.vocab, self.seq_len, self.batch) < 1:
      raise ValueError("num_layers, hidden, vocab, seq_len and batch must be >= 1")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")
    for name, value in (("num_kv_heads", self.num_kv_heads), ("mlp", self.mlp)):
      if value % tp:
        raise ValueError(f"{name}={value} does not split over tp={tp}")
    if self.seq_len % cp:
      raise ValueError(f"seq_len={self.seq_len} does not split over cp={cp}")
    if self.rotary and self.head_dim % 2:
      raise ValueError(f"rotary positions need an even head_dim, not {self.head_dim}")


def param_specs(config):
  """PartitionSpec of every parameter: column splits on dim 1, row splits on dim 0."""
  layer = {"attn_norm": P(), "wq": P(None, TP), "wk": P(None, TP), "wv": P(None, TP),
           "wo": P(TP, None), "mlp_norm": P(), "w_gate": P(None, TP),
           "w_up": P(None, TP), "w_down": P(TP, None)}
  return {"embed": P(), "layers": [dict(layer) for _ in range(config.num_layers)],
          "final_norm": P(), "lm_head": P()}


def param_shapes(config):
  c = config
  layer = {"attn_norm": (c.hidden,), "wq": (c.hidden, c.num_heads * c.head_dim),
           "wk": (c.hidden, c.num_kv_heads * c.head_dim),
           "wv": (c.hidden, c.num_kv_heads * c.head_dim),
           "wo": (c.num_heads * c.head_dim, c.hidden), "mlp_norm": (c.hidden,),
           "w_gate": (c.hidden, c.mlp), "w_up": (c.hidden, c.mlp),
           "w_down": (c.mlp, c.hidden)}
  return {"embed": (c.vocab, c.hidden), "layers": [dict(layer) for _ in range(c.num_layers)],
          "final_norm": (c.hidden,), "lm_head": (c.hidden, c.vocab)}


def _rms_norm(x, weight):
  x32 = x.astype(jnp.float32)
  scale = lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + 1e-5)
  return (x32 * scale).astype(x.dtype) * weight


def _rotary(x, positions):
  """Rotary position embedding of x [b, s, heads, d] at positions [s] (half split)."""
  d = x.shape[-1]
  inv_freq = 1.0 / (500000.0 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
  angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]  # [s, d/2]
  cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x.dtype)


def _attention(x, p, config, positions):
  """Column-split Q/K/V (this device's heads), the ring over cp, row-split output."""
  b, s, _ = x.shape
  d = config.head_dim
  q = (x @ p["wq"]).reshape(b, s, -1, d)
  k = (x @ p["wk"]).reshape(b, s, -1, d)
  v = (x @ p["wv"]).reshape(b, s, -1, d)
  if config.rotary:
    q, k = _rotary(q, positions), _rotary(k, positions)
  out = ring_attention.ring_attention_shard(q, k, v, causal=True, axis_name=CP,
                                            q_chunk=config.q_chunk, k_chunk=config.k_chunk)
  return lax.psum(out.reshape(b, s, -1) @ p["wo"], TP)


def _mlp(x, p):
  h = jax.nn.silu(x @ p["w_gate"]) * (x @ p["w_up"])
  return lax.psum(h @ p["w_down"], TP)


def _local_loss(params, tokens, targets, config):
  """Per-shard body: the token-mean loss over the whole sequence (psum over cp)."""
  s = tokens.shape[1]
  positions = lax.axis_index(CP) * s + jnp.arange(s)
  x = params["embed"][tokens]
  for layer in params["layers"]:
    x = x + _attention(_rms_norm(x, layer["attn_norm"]), layer, config, positions)
    x = x + _mlp(_rms_norm(x, layer["mlp_norm"]), layer)
  logits = jnp.dot(_rms_norm(x, params["final_norm"]), params["lm_head"],
                   preferred_element_type=jnp.float32)
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1).sum()
  return lax.psum(nll, CP) / (config.batch * config.seq_len)


def loss_function(config, mesh):
  """Global (params, tokens, targets) -> loss, sharded over the mesh by shard_map."""
  data = P(None, CP)
  return jax.shard_map(functools.partial(_local_loss, config=config), mesh=mesh,
                       in_specs=(param_specs(config), data, data), out_specs=P())


def _adam(params, grads, state, lr, b1=0.9, b2=0.95, eps=1e-8):
  step = state["step"] + 1
  m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), state["m"], grads)
  v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)),
                   state["v"], grads)
  c1, c2 = 1 - b1 ** step, 1 - b2 ** step
  new = jax.tree.map(lambda p, m, v: (p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)
                                      ).astype(p.dtype), params, m, v)
  return new, {"step": step, "m": m, "v": v}


def train_step_function(config, mesh):
  """(params, opt_state, tokens, targets) -> (params, opt_state, loss)."""
  loss_fn = loss_function(config, mesh)

  def step(params, opt_state, tokens, targets):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
    if config.optimizer == "sgd":
      new = jax.tree.map(lambda p, g: (p - config.learning_rate * g).astype(p.dtype),
                         params, grads)
      return new, opt_state, loss
    new, opt_state = _adam(params, grads, opt_state, config.learning_rate)
    return new, opt_state, loss

  return step


def make_mesh(devices, cp, tp):
  """devices (in id order) as a (cp, tp) mesh: consecutive devices share a tp group."""
  return Mesh(np.asarray(devices).reshape(cp, tp), (CP, TP))


def _abstract(shape, dtype, mesh, spec):
  return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def example_args(config, mesh):
  """Abstract (params, opt_state, tokens, targets) for lowering: no data."""
  dtype = DTYPES[config.dtype]
  specs = param_specs(config)
  shapes = param_shapes(config)
  is_shape = lambda x: isinstance(x, tuple)
  params = jax.tree.map(lambda shp, spec: _abstract(shp, dtype, mesh, spec), shapes, specs,
                        is_leaf=is_shape)
  if config.optimizer == "adam":
    moments = lambda: jax.tree.map(
        lambda shp, spec: _abstract(shp, jnp.float32, mesh, spec), shapes, specs,
        is_leaf=is_shape)
    state = {"step": _abstract((), jnp.int32, mesh, P()), "m": moments(), "v": moments()}
  else:
    state = {}
  data = _abstract((config.batch, config.seq_len), jnp.int32, mesh, P(None, CP))
  return params, state, data, data
