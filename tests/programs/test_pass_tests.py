"""hlo_tools/programs/pass_tests.py: each per-shard program computes what its
docstring says, run as a ring of 4 blocks on one CPU device (jax.vmap names the
ring axis) against numpy."""

import pytest

from conftest import CPU_CODEGEN_O0, run_jax

# Runs in a child (jax's CPU backend, not this process's): each program under
# jax.jit(jax.vmap(..., axis_name="cp")) and its numpy oracle; prints max errors.
_CHILD = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from hlo_tools.programs import pass_tests as pt

n, size = 4, 6
rng = np.random.default_rng(0)
k, v, q = (rng.standard_normal((n, size)).astype(np.float32) for _ in range(3))
on_ring = lambda f: jax.jit(jax.vmap(f, axis_name="cp"))
prev = lambda a: np.roll(a, 1, axis=0)  # device i holds what device i - 1 had
err = lambda got, want: float(np.max(np.abs(np.asarray(got) - want)))
out = {}
k1, v1 = on_ring(pt.kv_step)(k, v)
out["kv_step"] = max(err(k1, prev(k)), err(v1, prev(v)))
every = lambda a: np.broadcast_to(a, (n, size))  # the same on every device
out["kv_loop"] = err(on_ring(pt.kv_loop)(k, v), every((k * v).sum(0)))
out["ring_shift"] = err(on_ring(pt.ring_shift)(k), prev(k) * 2)
out["ring_sum_fresh_carry"] = err(on_ring(pt.ring_sum_fresh_carry)(k), every(k.sum(0)))
# Per device the loss is sum(q * sum_j k_j v_j); every device's cotangent is 1, so
# d/dk of the devices' summed losses is (sum_d q_d) * v, and likewise for v.
dq, dk, dv = on_ring(pt.ring_product_grad)(q, k, v)
kv = (k * v).sum(0)
loss = (q * kv).sum(1, keepdims=True)
out["ring_product_grad"] = [err(dq, kv + loss), err(dk, q.sum(0) * v), err(dv, q.sum(0) * k)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def errors():
  return run_jax(_CHILD, xla_flags=CPU_CODEGEN_O0)


def test_kv_step_rotates_k_and_v_one_device_on(errors):
  assert errors["kv_step"] == 0


def test_kv_loop_sums_every_blocks_product(errors):
  assert errors["kv_loop"] < 1e-5


def test_ring_shift_doubles_the_previous_devices_block(errors):
  assert errors["ring_shift"] == 0


def test_ring_sum_fresh_carry_sums_every_block(errors):
  assert errors["ring_sum_fresh_carry"] < 1e-5


def test_ring_product_grad_returns_each_blocks_gradient_to_its_owner(errors):
  # The hand-written backward rotates K, V and their gradients a whole turn.
  assert max(errors["ring_product_grad"]) < 1e-4, errors["ring_product_grad"]
