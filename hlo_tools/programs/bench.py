"""The JAX programs `hlo-tools bench` compiles (the compile itself: hlo_tools.ops.bench.programs).

llama  a Llama-3-8B-shaped transformer layer stack (hidden 4096, 32 query heads,
       8 K/V heads, head dim 128, MLP 14336, bf16) whose attention is the ring of
       hlo_tools.programs.ring_attention over CP=8, loss gradients (forward and backward)
       w.r.t. the input and every weight; `num_layers` layers, unrolled.
ring   an unrolled ring of ppermute + matmul steps (the reader benchmark's generator):
       cheap to compile, so it scales to big modules for the reader and diff.
"""

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jax is imported when a program is built, not with the module
  import jax
  from jax.sharding import Mesh


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  """Llama-3-8B layer shape; seq_len is global (split over the CP ring)."""

  num_layers: int = 4
  seq_len: int = 8192
  hidden: int = 4096
  num_heads: int = 32
  num_kv_heads: int = 8
  head_dim: int = 128
  mlp: int = 14336
  batch: int = 1
  dtype: str = "bf16"


def _rms_norm(x: "jax.Array") -> "jax.Array":
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  xf = x.astype(jnp.float32)
  return (xf * (1.0 / jnp.sqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5))).astype(x.dtype)


def llama_function(config: LlamaConfig, mesh: "Mesh") -> Callable[..., Any]:
  """Global (weights, x) -> (d weights, d x) of a sum-of-squares loss over the stack."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  from hlo_tools.programs import ring_attention  # pylint: disable=import-outside-toplevel

  attn = ring_attention.ring_attention(mesh, causal=True)
  b, s = config.batch, config.seq_len
  h, kvh, d = config.num_heads, config.num_kv_heads, config.head_dim

  def loss(weights: list[dict[str, "jax.Array"]], x: "jax.Array") -> "jax.Array":
    # A Python loop, not a scan: every layer is its own code in the module, as in
    # an unrolled production step, so the module grows with num_layers.
    for w in weights:
      y = _rms_norm(x)
      q = (y @ w["wq"]).reshape(b, s, h, d)
      k = (y @ w["wk"]).reshape(b, s, kvh, d)
      v = (y @ w["wv"]).reshape(b, s, kvh, d)
      x = x + attn(q, k, v).reshape(b, s, h * d) @ w["wo"]
      y = _rms_norm(x)
      x = x + (jax.nn.silu(y @ w["w1"]) * (y @ w["w3"])) @ w["w2"]
    return jnp.sum(jnp.square(x.astype(jnp.float32)))

  return jax.grad(loss, argnums=(0, 1))


def llama_args(
  config: LlamaConfig, mesh: "Mesh"
) -> tuple[list[dict[str, "jax.ShapeDtypeStruct"]], "jax.ShapeDtypeStruct"]:
  """Abstract arguments: replicated weights, activations sharded along the sequence."""
  import jax  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel

  from hlo_tools.programs import ring_attention  # pylint: disable=import-outside-toplevel

  dt = ring_attention.DTYPES[config.dtype]
  rep = NamedSharding(mesh, P())
  hd, kvd = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
  shapes = {
    "wq": (config.hidden, hd),
    "wk": (config.hidden, kvd),
    "wv": (config.hidden, kvd),
    "wo": (hd, config.hidden),
    "w1": (config.hidden, config.mlp),
    "w3": (config.hidden, config.mlp),
    "w2": (config.mlp, config.hidden),
  }
  weights = [
    {k: jax.ShapeDtypeStruct(v, dt, sharding=rep) for k, v in shapes.items()}
    for _ in range(config.num_layers)
  ]
  x = jax.ShapeDtypeStruct(
    (config.batch, config.seq_len, config.hidden),
    dt,
    sharding=NamedSharding(mesh, P(None, ring_attention.AXIS)),
  )
  return weights, x


def ring_function(layers: int, mesh: "Mesh") -> Callable[..., Any]:
  """bench_reader's unrolled ring: `layers` ppermute + matmul steps, no loop."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax import lax  # pylint: disable=import-outside-toplevel
  from jax.sharding import PartitionSpec as P  # pylint: disable=import-outside-toplevel

  n = mesh.devices.size
  perm = [(j, (j + 1) % n) for j in range(n)]

  def ring(x: "jax.Array", w: "jax.Array") -> "jax.Array":
    for k in range(layers):  # unrolled on purpose: a big module
      x = jnp.tanh(lax.ppermute(x, "cp", perm) @ w + k)
    return x

  return jax.shard_map(ring, mesh=mesh, in_specs=(P("cp"), P()), out_specs=P("cp"))


def ring_args(mesh: "Mesh") -> tuple["jax.ShapeDtypeStruct", "jax.ShapeDtypeStruct"]:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel

  n = mesh.devices.size
  return (
    jax.ShapeDtypeStruct((n * 128, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp"))),
    jax.ShapeDtypeStruct((256, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P())),
  )
