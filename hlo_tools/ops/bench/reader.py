"""Times hlo_text's parser against jaxlib's C++ HLO parser on the same text.

`python -m hlo_tools.ops.bench.reader [FILE] [--runs=N] [--previous=PATH]` benchmarks
FILE, or a multi-MB module it compiles with JAX (an unrolled ring of ppermutes for 8
H200s, compiled on the CPU). --previous also times another hlo_text.py (e.g. one taken
with `git show REV:hlo_tools/hlo_text.py`) in the same turns.
"""

import argparse
import functools
import gc
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hlo_tools.hlo.reader import parse_hlo_text


def _seconds(fn: Callable[[], object]) -> float:
  """Wall seconds of fn(), from a collected heap: no parser pays for another's garbage
  (the collector stays on during the call, as in use)."""
  gc.collect()
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


def bench_parse(
  text: str, runs: int = 5, others: Mapping[str, Callable[[str], object]] | None = None
) -> dict[str, Any]:
  """Parse seconds of ours and jaxlib's (`jaxlib._hlo.hlo_module_from_text`).

  The parsers take turns within each run, and which goes first rotates, so that drift
  of the machine (frequency, other load) falls on all of them alike; each call starts
  from a collected heap. Medians under
  ours_s/jaxlib_s; every run under ours_samples/jaxlib_samples. `others` ({label:
  parse function}) are timed in the same turns, under others[label].
  """
  parsers: dict[str, Callable[[], object]] = {"ours": lambda: parse_hlo_text(text)}
  try:
    from jaxlib._hlo import hlo_module_from_text  # pylint: disable=import-outside-toplevel

    jaxlib_parse: Callable[[str], object] = hlo_module_from_text
    parsers["jaxlib"] = lambda: jaxlib_parse(text)
  except ImportError:
    pass
  for label, parse in (others or {}).items():
    parsers[label] = functools.partial(parse, text)
  samples: dict[str, list[float]] = {label: [] for label in parsers}
  order = list(parsers)
  for r in range(runs):
    for label in order[r % len(order) :] + order[: r % len(order)]:
      samples[label].append(_seconds(parsers[label]))
  ours, theirs = samples.pop("ours"), samples.pop("jaxlib", [])
  result = {
    "bytes": len(text.encode()),
    "lines": text.count("\n"),
    "runs": runs,
    "ours_s": statistics.median(ours),
    "jaxlib_s": None,
    "ratio": None,
    "ours_samples": ours,
    "jaxlib_samples": theirs,
    "others": {
      label: {"median_s": statistics.median(s), "samples": s} for label, s in samples.items()
    },
  }
  if theirs:
    result.update(
      jaxlib_s=statistics.median(theirs), ratio=statistics.median(ours) / statistics.median(theirs)
    )
  return result


def _generate_big_module(layers: int = 400) -> str:
  """Optimized HLO of an unrolled ring: `layers` ppermute + matmul steps, no loop."""
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax import lax  # pylint: disable=import-outside-toplevel
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel

  import hlo_tools  # pylint: disable=import-outside-toplevel

  config = os.path.join(os.path.dirname(hlo_tools.__file__), "data", "h200_gpu_target_config.pbtxt")
  with open(config) as config_file:
    topo = topologies.get_topology_desc(
      platform="cuda", topology="1x2x4", target_config=config_file.read()
    )
  mesh = jax.sharding.Mesh(topo.devices, ("cp",))
  n = len(topo.devices)
  perm = [(j, (j + 1) % n) for j in range(n)]

  def ring(x: jax.Array, w: jax.Array) -> jax.Array:
    for k in range(layers):  # unrolled on purpose: a big module
      x = jnp.tanh(lax.ppermute(x, "cp", perm) @ w + k)
    return x

  f = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=(P("cp"), P()), out_specs=P("cp")))
  x = jax.ShapeDtypeStruct((n * 128, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp")))
  w = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
  text = f.lower(x, w).compile().as_text()
  if text is None:
    raise RuntimeError("jax printed no text of the compiled ring")
  return text


def _load_reader(path: str) -> Callable[[str], object]:
  """The parse_hlo_text of another hlo_text.py."""
  spec = importlib.util.spec_from_file_location("hlo_text_previous", path)
  if spec is None or spec.loader is None:
    raise OSError(f"{path}: not a Python module")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  parse: Callable[[str], object] = module.parse_hlo_text
  return parse


def _ms(samples: Sequence[float]) -> str:
  return (
    f"{statistics.median(samples) * 1e3:.1f} ms "
    f"[{min(samples) * 1e3:.1f}, {max(samples) * 1e3:.1f}]"
  )


def main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m hlo_tools.ops.bench.reader", description=(__doc__ or "").split("\n\n")[0]
  )
  parser.add_argument("file", nargs="?", help="HLO text (default: compile a ring)")
  parser.add_argument("--runs", type=int, default=5)
  parser.add_argument("--previous", help="another hlo_text.py to time alongside")
  args = parser.parse_args(argv[1:])
  if args.file:
    with open(args.file) as f:
      text = f.read()
  else:
    text = _generate_big_module()
  others = {"previous": _load_reader(args.previous)} if args.previous else None
  r = bench_parse(text, args.runs, others)
  print(f"{r['bytes'] / 1e6:.2f} MB, {r['lines']} lines, median [min, max] of {r['runs']}:")
  print(f"  ours      {_ms(r['ours_samples'])}")
  for label, other in r["others"].items():
    print(f"  {label:9s} {_ms(other['samples'])}")
  if r["jaxlib_s"]:
    print(f"  jaxlib    {_ms(r['jaxlib_samples'])}")
    ratios = [a / b for a, b in zip(r["ours_samples"], r["jaxlib_samples"])]
    print(f"  ours / jaxlib {r['ratio']:.2f} (per run {min(ratios):.2f}-{max(ratios):.2f})")
    for label, other in r["others"].items():
      print(f"  {label} / jaxlib {other['median_s'] / r['jaxlib_s']:.2f}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
