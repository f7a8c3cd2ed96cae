#!/usr/bin/env python3
"""Regenerates the fixtures that come with XLA's module config beside them.

    .venv/bin/python scripts/gen_config_fixtures.py [--out_dir=tests/fixtures]
        [--only=NAME ...] [--xla_dump_dir=DIR]

Each fixture is one deviceless H200 compile (jax's own API, in a child process, with
XLA dumping every pass) of a 32 MiB-per-device ring over a mesh axis, written as
  <name>.<stage>.hlo            the module (stages before_async, after_optimizations;
                                source locations stripped as in gen_fixtures.py)
  <name>.<stage>.config.pbtxt   XLA's HloModuleConfigProto of that compile (its
                                static_device_assignment and debug_options), with
                                the dump path XLA records blanked

The rings need what `hlo-tools dump` does not build: a mesh over a permuted device
list, a user's collectives-mode mark, a ring whose direction a conditional picks.
--xla_dump_dir keeps XLA's whole dump folder of each compile under DIR/<name>.
"""

# pylint: disable=import-outside-toplevel  # jax only in the child, with XLA_FLAGS set
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hlo_tools.errors import DumpError  # pylint: disable=wrong-import-position
from hlo_tools.hlo import module_config  # pylint: disable=wrong-import-position
from hlo_tools.model import dumps  # pylint: disable=wrong-import-position
from hlo_tools.ops import dump_compile, dump_target  # pylint: disable=wrong-import-position

from gen_fixtures import blank_dump_path  # pylint: disable=wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import SNAPSHOT_PASS, normalize  # pylint: disable=wrong-import-position

# A block of f32[2048,4096] per device: 32 MiB a message.
BLOCK = (2048, 4096)
# Device i of the list is mesh position i: partition i runs on device PERMUTED[i].
PERMUTED = [0, 4, 1, 5, 2, 6, 3, 7]
STAGES = ("before_async", "after_optimizations")

# name -> (topology, device order or None, mesh shape, axis names, ring kind)
FIXTURES = {
  # A (dp, cp) mesh over the permuted list: the cp ring at each dp index runs on
  # 0,4,1,5 and 2,6,3,7, so every hop crosses the two hosts.
  "perm_ring_1x2x4": ("1x2x4", PERMUTED, (2, 4), ("dp", "cp"), "plain"),
  # One axis over the same list: the 8-ring 0->4->1->5->2->6->3->7->0.
  "perm_flat_ring_1x2x4": ("1x2x4", PERMUTED, (8,), ("cp",), "plain"),
  # The permute inside set_xla_metadata(_xla_collectives_mode="private").
  "marked_ring_1x1x8": ("1x1x8", None, (8,), ("cp",), "marked"),
  # Forward on even trips, backward on odd ones, each permute in a lax.cond branch.
  "cond_ring_1x1x8": ("1x1x8", None, (8,), ("cp",), "cond"),
}


# ----------------------------------------------------------------------------
# Child side: jax, with XLA_FLAGS already set.


def _ring_body(kind, n):
  from jax import lax
  from jax.experimental.xla_metadata import set_xla_metadata

  forward = [(i, (i + 1) % n) for i in range(n)]
  backward = [(i, (i - 1) % n) for i in range(n)]

  def step(i, block):
    if kind == "marked":
      with set_xla_metadata(_xla_collectives_mode="private"):
        return lax.ppermute(block, "cp", forward)
    if kind == "cond":
      return lax.cond(
        i % 2 == 0,
        lambda b: lax.ppermute(b, "cp", forward),
        lambda b: lax.ppermute(b, "cp", backward),
        block,
      )
    return lax.ppermute(block, "cp", forward)

  def body(i, carry):
    block, acc = carry
    block = step(i, block)
    return block, acc + block

  return body


def _child(name, work_dir):
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax import lax
  from jax.experimental import topologies
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  topology, order, shape, axes, kind = FIXTURES[name]
  with open(dump_target.DEFAULT_TARGET_CONFIG) as f:
    devices = topologies.get_topology_desc(
      platform="cuda", topology=topology, target_config=f.read()
    ).devices
  devices = np.asarray(devices)
  if order is not None:
    devices = devices[order]
  mesh = Mesh(devices.reshape(shape), axes)
  n = mesh.shape["cp"]
  body = _ring_body(kind, n)

  def ring(x):
    return lax.fori_loop(0, n - 1, body, (x, x))[1]

  spec = P(*axes)
  fn = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=spec, out_specs=spec))
  global_shape = tuple(b * s for b, s in zip(BLOCK, shape + (1,) * (2 - len(shape))))
  arg = jax.ShapeDtypeStruct(global_shape, jnp.float32, sharding=NamedSharding(mesh, spec))
  text = fn.lower(arg).compile().as_text()
  with open(os.path.join(work_dir, "module_name"), "w") as f:
    f.write(text.split(None, 2)[1].rstrip(","))


# ----------------------------------------------------------------------------
# Parent side.


def _compile(name, work_dir):
  """Runs the child; returns (XLA's dump folder, its main module's key)."""
  topology = FIXTURES[name][0]
  xla_dir = os.path.join(work_dir, dumps.XLA_DUMP_SUBDIR)
  # The environment `hlo-tools dump` compiles in: deviceless, every pass dumped.
  env = dump_compile._child_env(dump_target.Target(topology=topology), xla_dir, ".*")  # pylint: disable=W0212
  proc = subprocess.run(
    [sys.executable, os.path.abspath(__file__), "--child", name, work_dir],
    env=env,
    capture_output=True,
    text=True,
    check=False,
    timeout=600,
  )
  if proc.returncode != 0:
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    raise DumpError(f"compile of {name} failed (exit {proc.returncode}): {tail}")
  with open(os.path.join(work_dir, "module_name")) as f:
    module_name = f.read()
  return xla_dir, dumps.main_module(dumps.index_xla_dump(xla_dir), module_name)


def generate(name, out_dir, keep_xla_dir=None):
  """Compiles one fixture and writes its files; returns the paths written."""
  written = []
  with tempfile.TemporaryDirectory(prefix="gen-config-fixtures-") as work_dir:
    xla_dir, key = _compile(name, work_dir)
    module = dumps.index_xla_dump(xla_dir)[key]
    config_path = module_config.find_config(
      os.path.join(xla_dir, module["stages"]["after_optimizations"])
    )
    with open(config_path) as f:
      config = blank_dump_path(f.read())
    for stage in STAGES:
      if stage == "before_async":
        text = dumps.pass_snapshot_text(xla_dir, SNAPSHOT_PASS, key, when="before")
      else:
        with open(os.path.join(xla_dir, module["stages"][stage])) as f:
          text = f.read()
      path = os.path.join(out_dir, f"{name}.{stage}.hlo")
      with open(path, "w") as f:
        f.write(normalize(text))
      with open(module_config.sidecar_path(path), "w") as f:
        f.write(config)
      written += [path, module_config.sidecar_path(path)]
    if keep_xla_dir:
      dest = os.path.join(keep_xla_dir, name)
      shutil.rmtree(dest, ignore_errors=True)
      shutil.copytree(xla_dir, dest)
  return written


def main(argv):
  if len(argv) == 4 and argv[1] == "--child":
    _child(argv[2], argv[3])
    return 0
  p = argparse.ArgumentParser(prog=argv[0], description=__doc__.split("\n\n")[0])
  p.add_argument("--out_dir", default=os.path.join(ROOT, "tests", "fixtures"))
  p.add_argument(
    "--only",
    action="append",
    choices=sorted(FIXTURES),
    help="generate only these fixtures (repeatable)",
  )
  p.add_argument("--xla_dump_dir", help="also keep XLA's dump folder of each compile here")
  args = p.parse_args(argv[1:])
  os.makedirs(args.out_dir, exist_ok=True)
  for name in args.only or list(FIXTURES):
    try:
      for path in generate(name, args.out_dir, args.xla_dump_dir):
        print(f"{path} ({os.path.getsize(path)} bytes)", file=sys.stderr)
    except DumpError as e:
      print(f"{argv[0]}: {name}: {e}", file=sys.stderr)
      return 2
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
