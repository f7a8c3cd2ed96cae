"""Does jax's set_xla_metadata(_xla_collectives_mode=...) reach the compiled permute?

    python3 benchmarks/mode_attribute_check.py --target-config=FILE --out-dir=DIR

Compiles a two-permute ring (the first permute marked "peer", the second not) with
the installed jax, twice: deviceless for 1x1x2 H200s (the CUDA plugin's topology
description) and, where a GPU is present, for the local devices. Writes each
compiled module and a JSON summary: per collective-permute, its pairs, operands and
the frontend attribute; whether the unmarked permute was combined into the marked one.
"""

import argparse
import json
import os
import re
import sys

RING_PAIRS = [(0, 1), (1, 0)]


def ring_fn(mesh, lax, set_xla_metadata, shard_map, P):
  pairs = RING_PAIRS if mesh.devices.size == 2 else [(0, 0)]

  def ring(x, y):
    with set_xla_metadata(_xla_collectives_mode="peer"):
      a = lax.ppermute(x, "cp", pairs)
    return a, lax.ppermute(y, "cp", pairs)

  return shard_map(ring, mesh=mesh, in_specs=(P("cp"), P("cp")), out_specs=(P("cp"), P("cp")))


def permutes(text):
  """One record per collective-permute(-start) statement of the entry text."""
  out = []
  for line in text.splitlines():
    m = re.search(r"= \S.* (collective-permute(?:-start)?)\((.*?)\)", line)
    if not m or "collective-permute-done" in line:
      continue
    attr = re.search(r'_xla_collectives_mode="?([A-Za-z_]+)', line)
    out.append(
      {
        "op": m.group(1),
        "operands": len([o for o in m.group(2).split(",") if o.strip()]),
        "pairs": (re.search(r"source_target_pairs=(\{\{.*?\}\})", line) or [None, ""])[1],
        "mode_attribute": attr.group(1) if attr else None,
      }
    )
  return out


def compile_ring(devices, jax, args_shape=(8192, 256)):
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax import lax  # pylint: disable=import-outside-toplevel
  from jax.experimental.xla_metadata import set_xla_metadata  # pylint: disable=import-outside-toplevel
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel

  shard_map = getattr(jax, "shard_map", None)
  if shard_map is None:
    from jax.experimental.shard_map import shard_map  # pylint: disable=import-outside-toplevel
  mesh = Mesh(devices, ("cp",))
  f = jax.jit(ring_fn(mesh, lax, set_xla_metadata, shard_map, P))
  spec = jax.ShapeDtypeStruct(args_shape, jnp.float32, sharding=NamedSharding(mesh, P("cp")))
  return f.lower(spec, spec).compile().as_text()


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--target-config", required=True)
  ap.add_argument("--out-dir", required=True)
  args = ap.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel

  os.makedirs(args.out_dir, exist_ok=True)
  result = {"jax": jax.__version__, "cases": {}}
  topo = topologies.get_topology_desc(
    platform="cuda", topology="1x1x2", target_config=open(args.target_config).read()
  )
  cases = {"deviceless_1x1x2": topo.devices}
  try:
    gpus = jax.devices("gpu")
    cases[f"local_{len(gpus)}gpu"] = gpus
  except RuntimeError:
    pass
  for name, devices in cases.items():
    try:
      text = compile_ring(devices, jax)
    except Exception as e:  # pylint: disable=broad-except
      result["cases"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
      continue
    with open(os.path.join(args.out_dir, f"{name}.hlo"), "w") as f:
      f.write(text)
    result["cases"][name] = {"permutes": permutes(text)}
  json.dump(result, sys.stdout, indent=1)
  with open(os.path.join(args.out_dir, "mode_attribute.json"), "w") as f:
    json.dump(result, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
