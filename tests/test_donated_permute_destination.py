"""Why the patched emitter checks where a NVSHMEM permute writes.

A put must land in the NVSHMEM heap, where XLA allocates buffers of the collective
memory space; an entry parameter's buffer is the caller's. In a deviceless GPU compile
(jax 0.10.2's XLA, two H200), a ring in a fori_loop whose carry is donated writes the
permute's result into parameter 0's allocation; without the donation, into one XLA
allocates. CheckNvshmemDestination (the first patch) keeps the first on NCCL.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt"

_RING_LOOP = r'''
import sys, jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(sys.argv[1]).read())
mesh = Mesh(np.array(topo.devices), ("cp",))
def body(i, c):
  k, acc = c
  return jax.lax.ppermute(k, "cp", [(0, 1), (1, 0)]), acc + jnp.sin(k)
def ring(k, acc):
  return jax.lax.fori_loop(0, 3, body, (k, acc))
f = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=(P("cp"), P("cp")),
                          out_specs=(P("cp"), P("cp"))),
            donate_argnums=(0, 1) if sys.argv[2] == "donate" else ())
a = jax.ShapeDtypeStruct((2 * 1024 * 1024,), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp")))
f.lower(a, a).compile()
'''


def _permute_result_allocation(tmp_path, mode):
  """The header line of the allocation holding collective-permute-start{1}."""
  dump = tmp_path / mode
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
             XLA_FLAGS=f"--xla_dump_to={dump}")
  subprocess.run([sys.executable, "-c", _RING_LOOP, str(TARGET), mode], check=True,
                 capture_output=True, text=True, env=env, timeout=300)
  [assignment] = dump.glob("*after_optimizations-buffer-assignment.txt")
  header = None
  for line in assignment.read_text().splitlines():
    if line.startswith("allocation "):
      header = line
    elif re.search(r"collective-permute-start(\.\d+)?\{1\}", line):
      return header
  pytest.fail(f"no collective-permute-start{{1}} in {assignment.name}")


def test_a_donated_ring_carry_is_the_permute_destination(tmp_path):
  assert ", parameter 0," in _permute_result_allocation(tmp_path, "donate")
  assert "parameter" not in _permute_result_allocation(tmp_path, "keep")
