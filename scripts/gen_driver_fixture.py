#!/usr/bin/env python3
"""Regenerates tests/fixtures/driver_tp_cp_1x1x8.after_optimizations.hlo.

    .venv/bin/python scripts/gen_driver_fixture.py [--out=PATH]

A small program that mixes tensor and context parallelism, compiled deviceless by the
venv's jax (0.10.2) for 8 H200 GPUs of one host (1x1x8), on a 2-D mesh cp=4 x tp=2:
  * inside jax.shard_map: a matmul whose partial sums are psum'ed over tp (an
    all-reduce with explicit replica groups) and ring-rotated over cp with ppermute
    (a collective-permute);
  * outside it, under jit: the sum of the result, which GSPMD reduces over all eight
    devices with an all-reduce that jaxlib 0.10 prints as `replica_groups=mesh[...]`,
    a form the tensorflow wheel's XLA cannot parse.
Its backend configs carry the jax >= 0.10.2 fields that wheel's XLA does not know
(collectives_mode, kernel_strategy). Source locations are stripped as in
scripts/gen_fixtures.py.
"""

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "driver_tp_cp_1x1x8.after_optimizations.hlo")
TARGET_CONFIG = os.path.join(ROOT, "hlo_tools", "data", "h200_gpu_target_config.pbtxt")

# Run in a child: deviceless compiles need JAX_PLATFORMS=cpu before jax is imported.
PROGRAM = r"""
import sys
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

with open(sys.argv[1]) as f:
  topo = topologies.get_topology_desc(platform="cuda", topology="1x1x8",
                                      target_config=f.read())
mesh = Mesh(np.array(topo.devices).reshape(4, 2), ("cp", "tp"))


def block(x, w):
  h = jax.lax.psum(x @ w, "tp")
  n = jax.lax.axis_size("cp")
  return jax.lax.ppermute(h, "cp", [(i, (i + 1) % n) for i in range(n)])


def step(x, w):
  h = jax.shard_map(block, mesh=mesh, in_specs=(P("cp", "tp"), P("tp", None)),
                    out_specs=P("cp", None))(x, w)
  return jnp.sum(h * h)


def arg(shape, spec):
  return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))


compiled = jax.jit(step).lower(arg((512, 256), P("cp", "tp")),
                               arg((256, 256), P("tp", None))).compile()
sys.stdout.write(compiled.as_text())
"""


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=DEFAULT_OUT)
  args = parser.parse_args()
  sys.path.insert(0, os.path.join(ROOT, "scripts"))
  from gen_fixtures import normalize  # pylint: disable=import-outside-toplevel

  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  text = subprocess.run(
    [sys.executable, "-c", PROGRAM, TARGET_CONFIG],
    env=env,
    capture_output=True,
    text=True,
    check=True,
    timeout=600,
  ).stdout
  for needed in ("replica_groups=mesh[", "collective-permute-start", "collectives_mode"):
    if needed not in text:
      sys.exit(f"gen_driver_fixture: the compiled module lacks {needed!r}")
  with open(args.out, "w") as f:
    f.write(normalize(text))
  print(args.out)


if __name__ == "__main__":
  main()
