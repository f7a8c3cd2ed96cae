#!/usr/bin/env python3
"""Regenerates the fixtures of programs on part of their hosts and of rings whose
destination XLA's buffer assignment places (deviceless GPU compiles on the CPU):

    .venv/bin/python scripts/gen_fixtures_part_of_host.py [--out_dir=tests/fixtures]

Each is one jax compile for an H200 topology (jax's deviceless CUDA compile, the
repository's target config), written as XLA dumped it after optimizations, with its
config (the device assignment) and its buffer assignment beside it:

  part_host_matmul_1x1x8   a collective matmul (a loop that multiplies its 32 MiB
                           block and passes it round a ring) on devices 0-3 of one
                           host of 8: the host's GPUs 4-7 run no part of it
  part_hosts_matmul_1x2x8  the same with a ring inside each host, on devices 0-3 and
                           8-11 of two hosts of 8: GPUs 4-7 and 12-15 run none of it
  donated_ring_1x1x8     a 32 MiB ring over one host of 8 into a donated second
                         argument: the permute writes into parameter 1's buffer
  returned_ring_1x1x8    the same ring, not donated: the program returns the buffer the
                         permute writes

Source locations are stripped, and the config's dump path blanked, as
scripts/gen_fixtures.py does for the other fixtures.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_CONFIG = os.path.join(ROOT, "hlo_tools", "data", "h200_gpu_target_config.pbtxt")

# name -> (program, topology jax compiles for, the devices of the program by index,
# mesh shape, donate the input). Rings over the last mesh axis: inside each host.
FIXTURES = {
  "part_host_matmul_1x1x8": ("matmul", "1x1x8", list(range(4)), (1, 4), False),
  "part_hosts_matmul_1x2x8": ("matmul", "1x2x8", [0, 1, 2, 3, 8, 9, 10, 11], (2, 4), False),
  "donated_ring_1x1x8": ("ring_into", "1x1x8", list(range(8)), (1, 8), True),
  "returned_ring_1x1x8": ("ring", "1x1x8", list(range(8)), (1, 8), False),
}
# Each device's block: 4096 x 4096 bf16, 32 MiB, where the default table puts one
# host's ring on NVSHMEM; the matmul's weights are 4096 x 256.
ROWS, COLS, OUT = 4096, 4096, 256


def child(spec):
  """In a child with XLA_FLAGS set: lowers and compiles one program."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.experimental import topologies
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  with open(TARGET_CONFIG) as f:
    config = f.read()
  devices = topologies.get_topology_desc(
    platform="cuda", topology=spec["topology"], target_config=config
  ).devices
  chosen = [devices[i] for i in spec["devices"]]
  mesh = Mesh(np.asarray(chosen).reshape(spec["mesh"]), ("host", "ring"))
  size = spec["mesh"][1]
  perm = [(i, (i + 1) % size) for i in range(size)]

  def ring(x):
    return jax.lax.ppermute(x, "ring", perm)

  def matmul(x, w):
    def step(_, carry):
      block, acc = carry
      return jax.lax.ppermute(block, "ring", perm), acc + block @ w

    acc = jnp.zeros((x.shape[0], w.shape[1]), jnp.float32)
    return jax.lax.fori_loop(0, size, step, (x, acc))[1]

  rows = P(("host", "ring"))
  block = jax.ShapeDtypeStruct(
    (len(chosen) * ROWS, COLS), jnp.bfloat16, sharding=NamedSharding(mesh, rows)
  )

  def ring_into(x, out):  # `out` is donated: its buffer takes the result
    del out
    return ring(x)

  if spec["program"] == "ring":
    fn = jax.shard_map(ring, mesh=mesh, in_specs=rows, out_specs=rows)
    args = [block]
  elif spec["program"] == "ring_into":
    fn = jax.shard_map(ring_into, mesh=mesh, in_specs=(rows, rows), out_specs=rows)
    args = [block, block]
  else:
    fn = jax.shard_map(matmul, mesh=mesh, in_specs=(rows, P()), out_specs=rows, check_vma=False)
    args = [
      block,
      jax.ShapeDtypeStruct((COLS, OUT), jnp.bfloat16, sharding=NamedSharding(mesh, P())),
    ]
  jitted = jax.jit(fn, donate_argnums=(len(args) - 1,) if spec["donate"] else (), keep_unused=True)
  jitted.lower(*args).compile()


def normalize(text):
  """Drops source locations: the FileNames..StackFrames tables and their references."""
  text = re.sub(r"\nFileNames\n.*?\nStackFrames\n(?:\d+ \{[^\n]*\}\n)*", "\n", text, flags=re.S)
  text = re.sub(r" stack_frame_id=\d+", "", text)
  return re.sub(
    r' source_file="[^"]*"| source_line=\d+| source_end_line=\d+'
    r"| source_column=\d+| source_end_column=\d+",
    "",
    text,
  )


def generate(name, out_dir):
  """Compiles one fixture and writes its three files; returns their paths."""
  program, topology, devices, mesh, donate = FIXTURES[name]
  spec = {"program": program, "topology": topology, "devices": devices, "mesh": mesh}
  spec["donate"] = donate
  with tempfile.TemporaryDirectory(prefix="gen-part-of-host-") as work:
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
    env["XLA_FLAGS"] = f"--xla_dump_to={work} --xla_dump_hlo_as_text"
    subprocess.run(
      [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env, check=True
    )
    after = [
      p
      for p in glob.glob(os.path.join(work, "module_*.jit_*after_optimizations.txt"))
      if "buffer-assignment" not in p
    ]
    if len(after) != 1:
      raise SystemExit(f"{name}: expected one module after optimizations, found {after}")
    key = os.path.basename(after[0]).split(".sm_")[0]
    stem = os.path.join(out_dir, f"{name}.after_optimizations")
    with open(after[0]) as f:
      text = normalize(f.read())
    with open(stem + ".hlo", "w") as f:
      f.write(text)
    shutil.copyfile(
      after[0][: -len(".txt")] + "-buffer-assignment.txt", stem + "-buffer-assignment.txt"
    )
    with open(os.path.join(work, key + ".config.pbtxt")) as f:
      config = re.sub(r'^(\s*xla_dump_to: )".*"$', r'\1""', f.read(), flags=re.M)
    with open(stem + ".config.pbtxt", "w") as f:
      f.write(config)
  return [stem + ".hlo", stem + "-buffer-assignment.txt", stem + ".config.pbtxt"]


def main(argv):
  if argv[:1] == ["--child"]:
    child(json.loads(argv[1]))
    return 0
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "tests", "fixtures"))
  parser.add_argument("--only", action="append", choices=sorted(FIXTURES))
  args = parser.parse_args(argv)
  for name in args.only or FIXTURES:
    for path in generate(name, args.out_dir):
      print(os.path.relpath(path, ROOT))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
