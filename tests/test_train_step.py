"""The Llama-3-8B-shaped train step: sharded over cp x tp, it computes what it
computes on one device.

The numerical check runs in a subprocess: 8 host devices need XLA_FLAGS set before
jax initializes its backend, and pytest's process may already have a jax backend.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sharded_equals_one_device():
  """Runs in the child: the train step on a cp 4 x tp 2 mesh against one device."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from hlo_tools.programs import train_step as ts
  config = ts.TrainConfig(num_layers=1, hidden=64, num_heads=8, num_kv_heads=2,
                          head_dim=16, mlp=128, vocab=128, seq_len=64, dtype="f32",
                          q_chunk=8, k_chunk=8)

  def run(cp, tp):
    mesh = ts.make_mesh(jax.devices()[:cp * tp], cp, tp)
    config.validate({"cp": cp, "tp": tp})
    abstract, tree = jax.tree_util.tree_flatten_with_path(ts.example_args(config, mesh))
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
    return jax.jit(ts.train_step_function(config, mesh))(*jax.tree.unflatten(tree, values))

  sharded, single = run(4, 2), run(1, 1)
  errors = [float(np.max(np.abs(np.asarray(a) - np.asarray(b))) /
                  max(float(np.max(np.abs(np.asarray(b)))), 1e-30))
            for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(single))]
  return {"loss": float(sharded[2]), "errors": errors}


def test_sharded_train_step_matches_one_device():
  code = ("import json, sys; from tests import test_train_step as t; "
          "print(json.dumps(t._sharded_equals_one_device()))")
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert 4.0 < result["loss"] < 6.0  # about ln(128) for small random weights
  # Loss, parameters, both Adam moments and the step: equal up to f32 rounding of
  # differently ordered sums.
  assert max(result["errors"]) < 1e-3, result["errors"]
