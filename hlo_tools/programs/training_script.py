"""A training script as users write one: it jits `init`, `train_step`, `eval_step` and a
metrics function, so XLA compiles (and `--xla_dump_to` dumps) four programs. Only the
two steps hold collective-permutes: each runs a ring over the mesh axis `cp`
(key/value blocks passed on once per step, as ring attention does), the train step
through its gradient too.

`run(mesh, config)` lowers and compiles all four on `mesh` (a one-axis mesh `cp`),
in the order a script runs them; `hlo-tools dump` runs it for a source of kind
"script" (scripts/gen_fixtures.py makes the fixture from it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

CP = "cp"
Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ScriptConfig:
  tokens: int = 8192  # over cp
  hidden: int = 512
  vocab: int = 1024
  dtype: str = "bfloat16"


def _ring(n: int) -> list[tuple[int, int]]:
  return [(j, (j + 1) % n) for j in range(n)]


def _ring_block(x: Array, wq: Array, wkv: Array) -> Array:
  """Queries against every block of keys/values, the blocks travelling the ring."""
  n = lax.axis_size(CP)
  q = x @ wq
  kv = x @ wkv

  def body(_: Array, carry: tuple[Array, Array]) -> tuple[Array, Array]:
    block, acc = carry
    scores = jax.nn.softmax((q @ block.T).astype(jnp.float32), axis=-1).astype(q.dtype)
    return lax.ppermute(block, CP, _ring(n)), acc + scores @ block

  return lax.fori_loop(0, n, body, (kv, jnp.zeros_like(q)))[1]


def _loss(params: dict[str, Array], x: Array, labels: Array) -> tuple[Array, Array]:
  h = x + _ring_block(x, params["wq"], params["wkv"])
  logits = (h @ params["out"]).astype(jnp.float32)
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]
  correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
  return lax.pmean(jnp.mean(nll), CP), lax.pmean(jnp.mean(correct), CP)


def run(mesh: Any, config: dict[str, Any] | None = None) -> str:
  """Lowers and compiles init, train_step, eval_step and metrics on `mesh`; returns
  the train step's module name (the program the script is about)."""
  cfg = ScriptConfig(**(config or {}))
  dtype = jnp.dtype(cfg.dtype)
  replicated = NamedSharding(mesh, P())
  tokens = NamedSharding(mesh, P(CP))

  def init(key: Array) -> dict[str, Array]:
    k1, k2, k3 = jax.random.split(key, 3)
    scale = cfg.hidden**-0.5
    return {
      "wq": (jax.random.normal(k1, (cfg.hidden, cfg.hidden)) * scale).astype(dtype),
      "wkv": (jax.random.normal(k2, (cfg.hidden, cfg.hidden)) * scale).astype(dtype),
      "out": (jax.random.normal(k3, (cfg.hidden, cfg.vocab)) * scale).astype(dtype),
    }

  spec = {"wq": P(), "wkv": P(), "out": P()}

  def per_shard_step(
    params: dict[str, Array], x: Array, labels: Array
  ) -> tuple[dict[str, Array], Array]:
    (loss, _), grads = jax.value_and_grad(_loss, has_aux=True)(params, x, labels)
    grads = jax.tree.map(lambda g: lax.pmean(g, CP), grads)
    return jax.tree.map(lambda p, g: p - 1e-3 * g.astype(p.dtype), params, grads), loss

  def per_shard_eval(params: dict[str, Array], x: Array, labels: Array) -> tuple[Array, Array]:
    return _loss(params, x, labels)

  def train_step(
    params: dict[str, Array], x: Array, labels: Array
  ) -> tuple[dict[str, Array], Array]:
    return jax.shard_map(
      per_shard_step,
      mesh=mesh,
      in_specs=(spec, P(CP), P(CP)),
      out_specs=(spec, P()),
      check_vma=False,
    )(params, x, labels)

  def eval_step(params: dict[str, Array], x: Array, labels: Array) -> tuple[Array, Array]:
    return jax.shard_map(
      per_shard_eval,
      mesh=mesh,
      in_specs=(spec, P(CP), P(CP)),
      out_specs=(P(), P()),
      check_vma=False,
    )(params, x, labels)

  key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
  params = {
    "wq": jax.ShapeDtypeStruct((cfg.hidden, cfg.hidden), dtype, sharding=replicated),
    "wkv": jax.ShapeDtypeStruct((cfg.hidden, cfg.hidden), dtype, sharding=replicated),
    "out": jax.ShapeDtypeStruct((cfg.hidden, cfg.vocab), dtype, sharding=replicated),
  }
  x = jax.ShapeDtypeStruct((cfg.tokens, cfg.hidden), dtype, sharding=tokens)
  labels = jax.ShapeDtypeStruct((cfg.tokens,), jnp.int32, sharding=tokens)
  scalar = jax.ShapeDtypeStruct((), jnp.float32, sharding=replicated)

  jax.jit(init, out_shardings=replicated).lower(key).compile()
  train = jax.jit(train_step).lower(params, x, labels)
  train.compile()
  jax.jit(eval_step).lower(params, x, labels).compile()
  # The metrics a script logs: a lambda, as scripts often write it (jit__lambda).
  jax.jit(lambda loss, acc: {"loss": loss, "accuracy": acc, "perplexity": jnp.exp(loss)}).lower(
    scalar, scalar
  ).compile()
  text = train.as_text(dialect="hlo")
  return text.split(None, 2)[1].rstrip(",") if text.startswith("HloModule") else "train_step"
