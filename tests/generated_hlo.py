"""HLO that JAX compiles here, for the tests that read real compiler output: a ppermute
ring compiled for 8 H200s with every pass dumped (the session fixture generated_dir),
and the program whose all-reduces jaxlib 0.10 prints with mesh replica groups."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

# Compiles a ppermute ring in a fori_loop for 8 H200s on the CPU, dumping every pass.
_GEN_SCRIPT = r"""
import os, sys
out = sys.argv[1]
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
os.environ["XLA_FLAGS"] = (f"--xla_dump_to={out}/dump --xla_dump_hlo_as_text "
                           "--xla_dump_hlo_pass_re=.*")
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(
    platform="cuda", topology="1x2x4",
    target_config=open("hlo_tools/data/h200_gpu_target_config.pbtxt").read())
mesh = jax.sharding.Mesh(topo.devices, ("cp",))
n = len(topo.devices)
perm = [(j, (j + 1) % n) for j in range(n)]
def ring(x):
  def body(i, x):
    return lax.ppermute(x, "cp", perm) * 2
  return lax.fori_loop(0, 6, body, x)
f = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
x = jax.ShapeDtypeStruct((n * 128, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp")))
open(f"{out}/ring_compiled.hlo", "w").write(f.lower(x).compile().as_text())
"""


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  env.pop("XLA_FLAGS", None)
  return env


@pytest.fixture(scope="session")
def generated_dir(tmp_path_factory):
  """HLO compiled by real JAX here; made once per session (shared with other test files)."""
  out = tmp_path_factory.getbasetemp() / "jax_generated_hlo"
  if not (out / "ring_compiled.hlo").exists():
    out.mkdir(exist_ok=True)
    proc = subprocess.run(
      [sys.executable, "-c", _GEN_SCRIPT, str(out)],
      cwd=ROOT,
      env=_env(),
      capture_output=True,
      text=True,
      timeout=600,
    )
    if proc.returncode != 0:
      pytest.fail("generating HLO with JAX failed:\n" + proc.stderr[-3000:])
  return out


def hlo_dump_files(generated_dir):
  """The pass dumps that are HLO modules (the dump dir also holds buffer assignments etc.)."""
  out = []
  for path in sorted((generated_dir / "dump").glob("*.txt")):
    with open(path, "rb") as f:
      if f.read(10) == b"HloModule ":
        out.append(path)
  return out


_MESH_ALL_REDUCE = r"""
import sys, jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
topo = topologies.get_topology_desc(platform="cuda", topology="1x2x4",
                                    target_config=open(sys.argv[1]).read())
mesh = Mesh(topo.devices, ("cp",))
c = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P())).lower(
    jax.ShapeDtypeStruct((64, 1024), jnp.float32, sharding=NamedSharding(mesh, P(None, "cp"))),
    jax.ShapeDtypeStruct((1024, 64), jnp.float32, sharding=NamedSharding(mesh, P("cp", None)))
).compile()
sys.stdout.write(c.as_text())
"""
