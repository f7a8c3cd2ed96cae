"""Times hlo_text's parser against jaxlib's C++ HLO parser on the same text.

`python -m hlo_tools.commands.bench.reader [FILE]` benchmarks FILE, or a multi-MB module it compiles
with JAX (an unrolled ring of ppermutes for 8 H200s, compiled on the CPU).
"""

import os
import statistics
import sys
import time

from hlo_tools.hlo_text import parse_hlo_text


def _seconds(fn):
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


def bench_parse(text, runs=5):
  """Parse seconds of ours and jaxlib's (`jaxlib._hlo.hlo_module_from_text`).

  The two parsers take turns within each run, and which goes first alternates, so
  that drift of the machine (frequency, other load) falls on both sides alike.
  Medians under ours_s/jaxlib_s; every run under ours_samples/jaxlib_samples.
  """
  try:
    from jaxlib import _hlo  # pylint: disable=import-outside-toplevel
  except ImportError:
    _hlo = None
  ours, theirs = [], []
  for r in range(runs):
    ours_first = r % 2 == 0
    if ours_first:
      ours.append(_seconds(lambda: parse_hlo_text(text)))
    if _hlo is not None:
      theirs.append(_seconds(lambda: _hlo.hlo_module_from_text(text)))
    if not ours_first:
      ours.append(_seconds(lambda: parse_hlo_text(text)))
  result = {"bytes": len(text.encode()), "lines": text.count("\n"), "runs": runs,
            "ours_s": statistics.median(ours), "jaxlib_s": None, "ratio": None,
            "ours_samples": ours, "jaxlib_samples": theirs}
  if theirs:
    result.update(jaxlib_s=statistics.median(theirs),
                  ratio=statistics.median(ours) / statistics.median(theirs))
  return result


def _generate_big_module(layers=400):
  """Optimized HLO of an unrolled ring: `layers` ppermute + matmul steps, no loop."""
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax import lax  # pylint: disable=import-outside-toplevel
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  config = os.path.join(os.path.dirname(__file__), "data", "h200_gpu_target_config.pbtxt")
  with open(config) as f:
    topo = topologies.get_topology_desc(platform="cuda", topology="1x2x4",
                                        target_config=f.read())
  mesh = jax.sharding.Mesh(topo.devices, ("cp",))
  n = len(topo.devices)
  perm = [(j, (j + 1) % n) for j in range(n)]

  def ring(x, w):
    for k in range(layers):  # unrolled on purpose: a big module
      x = jnp.tanh(lax.ppermute(x, "cp", perm) @ w + k)
    return x

  f = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=(P("cp"), P()), out_specs=P("cp")))
  x = jax.ShapeDtypeStruct((n * 128, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp")))
  w = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
  return f.lower(x, w).compile().as_text()


def main(argv):
  if len(argv) > 1:
    with open(argv[1]) as f:
      text = f.read()
  else:
    text = _generate_big_module()
  r = bench_parse(text)
  print(f"{r['bytes'] / 1e6:.2f} MB, {r['lines']} lines: ours {r['ours_s'] * 1e3:.1f} ms, "
        f"jaxlib {r['jaxlib_s'] * 1e3:.1f} ms, ratio {r['ratio']:.2f}x (median of {r['runs']})")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
