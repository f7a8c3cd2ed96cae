"""hlo_tools/programs/bench.py: the bench's programs, the Llama-shaped layer stack and
the unrolled ring: their arguments, their permutes and their numbers (on 2 CPU
devices, against plain jax written here)."""

import pytest

from hlo_tools.programs import bench

from conftest import CPU_CODEGEN_O0, run_jax

# Runs in a child (jax's CPU backend of 2 devices, not this process's); prints what it
# found.
_CHILD = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh
from hlo_tools.programs import bench

mesh = Mesh(np.array(jax.devices()[:2]), ("cp",))
out = {}
# The default Llama config's abstract arguments: no data.
weights, x = bench.llama_args(bench.LlamaConfig(), mesh)
spec = lambda a: list(a.sharding.spec)  # [None, "cp"]: the sequence split over cp
out["llama_args"] = {"layers": len(weights), "x": [list(x.shape), str(x.dtype), spec(x)],
                     "weights": {k: list(v.shape) for k, v in weights[0].items()},
                     "weights_specs": [spec(v) for v in weights[0].values()]}
x_arg, w_arg = bench.ring_args(mesh)
out["ring_args"] = [[list(a.shape), str(a.dtype), spec(a)] for a in (x_arg, w_arg)]

# The unrolled ring: one permute per layer, no loop; its numbers on each shard.
text = jax.jit(bench.ring_function(3, mesh)).lower(x_arg, w_arg).as_text()
out["ring_hlo"] = [text.count("stablehlo.collective_permute"), "stablehlo.while" in text]
rng = np.random.default_rng(0)
xs = rng.standard_normal((2, 4, 8)).astype(np.float32)  # two shards of 4 rows
w = rng.standard_normal((8, 8)).astype(np.float32) / 4
got = np.asarray(jax.jit(bench.ring_function(2, mesh))(xs.reshape(8, 8), w)).reshape(2, 4, 8)
want = xs
for k in range(2):  # each layer: the other shard's block, times w, plus the layer index
  want = np.tanh(want[::-1] @ w + k)
out["ring_numbers"] = float(np.max(np.abs(got - want)))

# One small f32 layer through the ring against the same layer with plain causal
# attention over the whole sequence: the loss's gradients match.
config = bench.LlamaConfig(num_layers=1, seq_len=8, hidden=8, num_heads=4, num_kv_heads=2,
                           head_dim=2, mlp=6, dtype="f32")
b, s, h, kvh, d = 1, 8, 4, 2, 2

def rms(v):
  return v / jnp.sqrt(jnp.mean(v * v, axis=-1, keepdims=True) + 1e-5)

def attention(q, k, v):  # causal, K/V heads shared by groups of query heads
  k, v = jnp.repeat(k, h // kvh, axis=2), jnp.repeat(v, h // kvh, axis=2)
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
  scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -jnp.inf)
  return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v)

def loss(weights, x):
  for p in weights:
    y = rms(x)
    q, k, v = ((y @ p[n]).reshape(b, s, -1, d) for n in ("wq", "wk", "wv"))
    x = x + attention(q, k, v).reshape(b, s, h * d) @ p["wo"]
    y = rms(x)
    x = x + (jax.nn.silu(y @ p["w1"]) * (y @ p["w3"])) @ p["w2"]
  return jnp.sum(x * x)

abstract_weights, abstract_x = bench.llama_args(config, mesh)
values = lambda a: jnp.asarray(rng.standard_normal(a.shape) / 2, jnp.float32)
weights = jax.tree.map(values, abstract_weights)
x = values(abstract_x)
got = jax.jit(bench.llama_function(config, mesh))(weights, x)
want = jax.jit(jax.grad(loss, argnums=(0, 1)))(weights, x)
out["llama_grads"] = max(float(jnp.max(jnp.abs(g - w)) / jnp.max(jnp.abs(w)))
                         for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def child():
  return run_jax(_CHILD, xla_flags=f"--xla_force_host_platform_device_count=2 {CPU_CODEGEN_O0}")


def test_the_default_config_is_llama_3_8bs_layer():
  c = bench.LlamaConfig()
  assert (c.hidden, c.num_heads, c.num_kv_heads, c.head_dim, c.mlp) == (4096, 32, 8, 128, 14336)
  assert (c.num_layers, c.seq_len, c.batch, c.dtype) == (4, 8192, 1, "bf16")


@pytest.mark.long
def test_llama_args_replicate_the_weights_and_split_the_sequence(child):
  got = child["llama_args"]
  assert got["layers"] == 4
  assert got["x"] == [[1, 8192, 4096], "bfloat16", [None, "cp"]]
  assert got["weights"] == {
    "wq": [4096, 4096],
    "wk": [4096, 1024],
    "wv": [4096, 1024],
    "wo": [4096, 4096],
    "w1": [4096, 14336],
    "w3": [4096, 14336],
    "w2": [14336, 4096],
  }
  assert got["weights_specs"] == [[]] * 7  # replicated


@pytest.mark.long
def test_ring_args_give_each_device_128_rows(child):
  assert child["ring_args"] == [
    [[256, 256], "bfloat16", ["cp"]],
    [[256, 256], "bfloat16", []],
  ]


@pytest.mark.long
def test_ring_function_unrolls_one_permute_per_layer(child):
  assert child["ring_hlo"] == [3, False]
  assert child["ring_numbers"] < 1e-5


@pytest.mark.long
def test_llama_function_is_the_gradient_of_the_layer_stack(child):
  assert child["llama_grads"] < 1e-4, child["llama_grads"]
