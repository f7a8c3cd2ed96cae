"""hlo_tools/programs/training_script.py: a script's four programs, compiled in the
order it runs them (counted at jax's entry to XLA's compile), and its ring block's
numbers against numpy, on 2 CPU devices."""

import pytest

from hlo_tools.programs import training_script

from conftest import CPU_CODEGEN_O0, run_jax

# Runs in a child (jax's CPU backend of 2 devices, not this process's); prints what it
# found.
_CHILD = r"""
import json
import jax, numpy as np
from jax._src import compiler
from jax._src.lib.mlir import ir
from jax.sharding import Mesh, PartitionSpec as P
from hlo_tools.programs import training_script as ts

# Every XLA compile jax makes goes through compiler.backend_compile_and_load (jax
# 0.10.2's compiler.py): counted here by module name.
compiled = []
backend_compile = compiler.backend_compile_and_load
def counting(backend, module, *args, **kwargs):
  compiled.append(ir.StringAttr(module.operation.attributes["sym_name"]).value)
  return backend_compile(backend, module, *args, **kwargs)
compiler.backend_compile_and_load = counting

mesh = Mesh(np.array(jax.devices()[:2]), ("cp",))
name = ts.run(mesh, {"tokens": 8, "hidden": 4, "vocab": 8, "dtype": "float32"})
out = {"returned": name, "compiled": list(compiled)}

# The ring block: each shard's queries against both shards' key/value blocks.
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 4)).astype(np.float32)  # two shards of 3 tokens
wq, wkv = (rng.standard_normal((4, 4)).astype(np.float32) / 2 for _ in range(2))
f = jax.jit(jax.shard_map(ts._ring_block, mesh=mesh, in_specs=(P("cp"), P(), P()),
                          out_specs=P("cp"), check_vma=False))
got = np.asarray(f(x.reshape(6, 4), wq, wkv)).reshape(2, 3, 4)
def attend(q, kv):
  e = np.exp(q @ kv.T - (q @ kv.T).max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True) @ kv
want = np.stack([sum(attend(xi @ wq, xj @ wkv) for xj in x) for xi in x])
out["ring_block"] = float(np.max(np.abs(got - want)))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def child():
  return run_jax(_CHILD, xla_flags=f"--xla_force_host_platform_device_count=2 {CPU_CODEGEN_O0}")


@pytest.mark.long
def test_run_compiles_the_scripts_four_programs_in_order(child):
  # init, the train step, the eval step and the metrics lambda, once each.
  assert child["compiled"] == ["jit_init", "jit_train_step", "jit_eval_step", "jit__lambda"]


@pytest.mark.long
def test_run_returns_the_train_steps_module_name(child):
  assert child["returned"] == "jit_train_step"


@pytest.mark.long
def test_ring_block_attends_to_every_shards_block(child):
  assert child["ring_block"] < 1e-5


def test_script_config_defaults_and_ring_pairs():
  config = training_script.ScriptConfig()
  assert (config.tokens, config.hidden, config.vocab, config.dtype) == (8192, 512, 1024, "bfloat16")
  assert training_script._ring(4) == [(0, 1), (1, 2), (2, 3), (3, 0)]  # pylint: disable=protected-access
