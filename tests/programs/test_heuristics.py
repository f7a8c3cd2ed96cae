"""hlo_tools/programs/heuristics.py: check-pass's chain of permutes, run under
shard_map on 4 CPU devices against numpy."""

import pytest

from hlo_tools.programs import heuristics

from conftest import CPU_CODEGEN_O0, run_jax

# Runs in a child (jax's CPU backend of 4 devices, not this process's); prints what it
# found.
_CHILD = r"""
import json
import jax, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from hlo_tools.programs import heuristics

n, size = 4, 5
mesh = Mesh(np.array(jax.devices()[:n]), ("cp",))
on_ring = lambda f: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
rng = np.random.default_rng(0)
x, k, v, s = (rng.standard_normal((n, size)).astype(np.float32) for _ in range(4))
flat = lambda *a: [b.reshape(-1) for b in a]  # device i holds row i
fn = heuristics.chain(("ring", "kv", "shift"))
got = [np.asarray(a).reshape(n, size) for a in on_ring(fn)(*flat(x, k, v, s))]
prev = lambda a: np.roll(a, 1, axis=0)  # device i receives device i - 1's block
# ring: rotated. kv: K fed by the ring's result (its first element), then K and V
# rotated together. shift: fed by K's result, device i -> i + 1, device 0 gets zeros.
ring = prev(x)
k_out, v_out = prev(k + ring[:, :1]), prev(v)
fed = s + k_out[:, :1]
shift = np.concatenate([np.zeros((1, size), np.float32), fed[:-1]])
want = [ring, k_out, v_out, shift]
sample = on_ring(heuristics.sample)(*flat(x, x, k, v, s))
print(json.dumps({"errors": [float(np.max(np.abs(g - w))) for g, w in zip(got, want)],
                  "outputs": len(got), "sample_outputs": len(sample)}))
"""


@pytest.fixture(scope="module")
def child():
  return run_jax(_CHILD, xla_flags=f"--xla_force_host_platform_device_count=4 {CPU_CODEGEN_O0}")


def test_chain_feeds_each_permute_from_the_one_before(child):
  # One output per buffer: ring, K, V, shift.
  assert child["outputs"] == 4
  assert max(child["errors"]) < 1e-6, child["errors"]


def test_the_sample_program_has_one_buffer_per_case():
  # check-pass's cases: ring, ring, K/V (two buffers), shift.
  assert heuristics.SAMPLE_SHAPES == ("ring", "ring", "kv", "shift")


def test_the_sample_program_returns_every_buffer(child):
  assert child["sample_outputs"] == 5


def test_shift_pairs_leave_the_last_device_without_a_target():
  assert heuristics._shift(4) == [(0, 1), (1, 2), (2, 3)]  # pylint: disable=protected-access
  assert heuristics._ring(3) == [(0, 1), (1, 2), (2, 0)]  # pylint: disable=protected-access
