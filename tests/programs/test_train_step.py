"""hlo_tools/programs/train_step.py: the Llama-3-8B-shaped train step: its numbers,
its shapes and checks, and its committed fixtures as the hlo_tools reader sees them.

The numerical check runs in a subprocess: 8 host devices need XLA_FLAGS set before
jax initializes its backend, and pytest's process may already have a jax backend.
"""

import json
import os
import subprocess
import sys

import pytest
from jax.sharding import PartitionSpec as P

from hlo_tools.hlo import reader
from hlo_tools.model import collectives
from hlo_tools.programs import train_step

from conftest import CPU_CODEGEN_O0, FIXTURES, ROOT

# topology -> (cp, tp), as scripts/gen_fixtures.py compiles them; the train step's
# defaults: 2 layers, 65536 tokens, batch 1, 8 KV heads x 128, hidden 4096, bf16.
MESHES = {"1x1x8": (4, 2), "1x2x8": (2, 8), "1x4x4": (4, 4)}
LAYERS, SEQ, KV_HEADS, HEAD_DIM, HIDDEN, BF16 = 2, 65536, 8, 128, 4096, 2


def _module(topology, stage="after_optimizations"):
  path = os.path.join(FIXTURES, f"train_step_{topology}.{stage}.hlo")
  with open(path) as f:
    return reader.parse_hlo_text(f.read(), path)


def _ring_pairs(cp, tp, step):
  """The cp ring at every tp rank: device c*tp+t sends to ((c+step) % cp)*tp+t."""
  return {(c * tp + t, ((c + step) % cp) * tp + t) for c in range(cp) for t in range(tp)}


@pytest.mark.parametrize("stage", ["before_async", "after_optimizations"])
@pytest.mark.parametrize("topology", sorted(MESHES))
def test_train_step_fixture_permutes_are_the_cp_ring(topology, stage):
  cp, tp = MESHES[topology]
  permutes = collectives.collective_permutes(_module(topology, stage))
  # K and V of one step travel in one buffer, bf16.
  kv = 2 * (SEQ // cp) * (KV_HEADS // tp) * HEAD_DIM * BF16
  rings = (_ring_pairs(cp, tp, 1), _ring_pairs(cp, tp, -1))
  for p in permutes:
    assert set(p.pairs) in rings, (p.start, p.pairs)
    assert len(p.pairs) == cp * tp  # every device sends and receives
    assert p.is_async == (stage == "after_optimizations") and p.backend == "DEFAULT"
  in_loops = sorted((p.bytes_per_device, p.trip_count) for p in permutes if p.while_loop)
  after = sorted(p.bytes_per_device for p in permutes if not p.while_loop)
  # Per layer: the forward loop rotates K/V; the backward loop rotates K/V with their
  # f32 gradient sums (3x the bytes); after it one permute hands the sums home (2x).
  assert in_loops == [(kv, cp)] * LAYERS + [(3 * kv, cp)] * LAYERS
  assert after == [2 * kv] * LAYERS


def _all_reduce_groups(module):
  """(replica groups as a set of frozensets, shape text) of every all-reduce."""
  out = []
  for comp in module.computations:
    for instr in comp.instructions:
      if instr.opcode in ("all-reduce", "all-reduce-start"):
        groups = frozenset(frozenset(g) for g in instr.replica_groups)
        out.append((groups, str(instr.shape)))
  return out


@pytest.mark.parametrize("topology", sorted(MESHES))
def test_train_step_fixture_has_tensor_and_context_all_reduces(topology):
  cp, tp = MESHES[topology]
  tp_groups = frozenset(frozenset(c * tp + t for t in range(tp)) for c in range(cp))
  cp_groups = frozenset(frozenset(c * tp + t for c in range(cp)) for t in range(tp))
  reduces = _all_reduce_groups(_module(topology))
  activation = f"bf16[1,{SEQ // cp},{HIDDEN}]"
  # Megatron: per layer, the attention and MLP outputs forward and their inputs'
  # gradients backward, each an all-reduce of one activation over tp.
  over_tp = [shape for groups, shape in reduces if groups == tp_groups]
  assert sum(activation in shape for shape in over_tp) == 4 * LAYERS, over_tp
  # The gradients summed over the sequence blocks, and the clipping norm's partial
  # sums over tp (jaxlib 0.10 prints that one in its mesh form).
  assert any(groups == cp_groups for groups, _ in reduces)
  assert any(
    groups == tp_groups and "f32" in shape and activation not in shape for groups, shape in reduces
  )


def _sharded_equals_one_device():
  """Runs in the child: the train step on a cp 4 x tp 2 mesh against one device."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from hlo_tools.programs import train_step

  config = train_step.TrainConfig(
    num_layers=1,
    hidden=64,
    num_heads=8,
    num_kv_heads=2,
    head_dim=16,
    mlp=128,
    vocab=128,
    seq_len=64,
    dtype="f32",
    q_chunk=8,
    k_chunk=8,
  )

  def run(cp, tp):
    mesh = train_step.make_mesh(jax.devices()[: cp * tp], cp, tp)
    config.validate({"cp": cp, "tp": tp})
    abstract, tree = jax.tree_util.tree_flatten_with_path(train_step.example_args(config, mesh))
    values = []
    for i, (path, a) in enumerate(abstract):
      key = jax.random.PRNGKey(i)
      if a.dtype == jnp.int32:  # tokens, targets; Adam's step count
        v = jax.random.randint(key, a.shape, 0, config.vocab) if a.shape else jnp.int32(3)
      else:
        v = jax.random.normal(key, a.shape, a.dtype) * 0.1
        if "'v'" in jax.tree_util.keystr(path):  # Adam's second moment is >= 0
          v = jnp.square(v)
      values.append(jax.device_put(v, a.sharding))
    step = train_step.train_step_function(config, mesh)
    return jax.jit(step)(*jax.tree.unflatten(tree, values))

  sharded, single = run(4, 2), run(1, 1)
  errors = [
    float(
      np.max(np.abs(np.asarray(a) - np.asarray(b)))
      / max(float(np.max(np.abs(np.asarray(b)))), 1e-30)
    )
    for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(single))
  ]
  return {"loss": float(sharded[2]), "errors": errors}


@pytest.mark.long
def test_sharded_train_step_matches_one_device():
  code = (
    "import json, sys; from tests.programs import test_train_step as t; "
    "print(json.dumps(t._sharded_equals_one_device()))"
  )
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    # The child imports this module: the checkout and tests/ (conftest) on the path.
    PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    XLA_FLAGS=f"--xla_force_host_platform_device_count=8 {CPU_CODEGEN_O0}",
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert 4.0 < result["loss"] < 6.0  # about ln(128) for small random weights
  # Loss, parameters, both Adam moments and the step: equal up to f32 rounding of
  # differently ordered sums.
  assert max(result["errors"]) < 1e-3, result["errors"]


def test_default_shapes_are_llama_3_8bs():
  shapes = train_step.param_shapes(train_step.TrainConfig())
  # 32 query heads and 8 K/V heads of 128, hidden 4096, MLP 14336; an 8192 vocabulary.
  assert shapes["layers"][0] == {
    "attn_norm": (4096,),
    "wq": (4096, 4096),
    "wk": (4096, 1024),
    "wv": (4096, 1024),
    "wo": (4096, 4096),
    "mlp_norm": (4096,),
    "w_gate": (4096, 14336),
    "w_up": (4096, 14336),
    "w_down": (14336, 4096),
  }
  assert len(shapes["layers"]) == 2
  assert (shapes["embed"], shapes["final_norm"], shapes["lm_head"]) == (
    (8192, 4096),
    (4096,),
    (4096, 8192),
  )


def test_megatron_splits_columns_then_rows():
  specs = train_step.param_specs(train_step.TrainConfig(num_layers=3))
  assert len(specs["layers"]) == 3
  layer = specs["layers"][0]
  # Q/K/V and gate/up by column (heads, MLP units), output and down by row.
  assert {k for k, v in layer.items() if v == P(None, "tp")} == {"wq", "wk", "wv", "w_gate", "w_up"}
  assert {k for k, v in layer.items() if v == P("tp", None)} == {"wo", "w_down"}
  assert specs["embed"] == specs["lm_head"] == P()


@pytest.mark.parametrize(
  "change,mesh,message",
  [
    ({}, {"cp": 4, "dp": 2}, "mesh axes are cp and tp, not dp"),
    ({"dtype": "f8"}, {}, "dtype 'f8' not in"),
    ({"optimizer": "lion"}, {}, "expected adam or sgd"),
    ({"num_layers": 0}, {}, "must be >= 1"),
    ({"num_heads": 30}, {}, "num_heads=30 is not a multiple of num_kv_heads=8"),
    ({}, {"tp": 16}, "num_kv_heads=8 does not split over tp=16"),
    ({"mlp": 100}, {"tp": 8}, "mlp=100 does not split over tp=8"),
    ({"seq_len": 100}, {"cp": 8}, "seq_len=100 does not split over cp=8"),
    ({"head_dim": 127}, {}, "rotary positions need an even head_dim"),
  ],
)
def test_validate_names_what_does_not_fit(change, mesh, message):
  with pytest.raises(ValueError, match=message):
    train_step.TrainConfig(**change).validate(mesh)


def test_validate_takes_the_fixtures_meshes():
  for cp, tp in MESHES.values():
    train_step.TrainConfig().validate({"cp": cp, "tp": tp})
  train_step.TrainConfig(rotary=False, head_dim=127).validate({})


@pytest.mark.parametrize(
  "devices,per_host,mesh",
  [
    (16, 8, [("cp", 2), ("tp", 8)]),  # two hosts: tp inside a host, the ring across
    (8, 8, [("cp", 4), ("tp", 2)]),  # one host: tp 2, the ring over the rest
    (6, 8, [("cp", 3), ("tp", 2)]),
    (3, 8, [("cp", 3), ("tp", 1)]),  # an odd count: no tensor parallelism
    (12, 8, [("cp", 6), ("tp", 2)]),  # not whole hosts
  ],
)
def test_default_mesh_keeps_tensor_parallelism_inside_a_host(devices, per_host, mesh):
  assert train_step.default_mesh(devices, per_host) == mesh
