#!/usr/bin/env python3
"""Regenerates the HLO modules embedded in the C++ pass test.

    .venv/bin/python scripts/gen_pass_test_modules.py [--check]

Compiles the programs of hlo_tools/programs/pass_tests.py for H200 topologies on
the CPU (deviceless) and writes the module XLA's async-collective-creator
receives as C++ raw string constants into
core/xla/backends/gpu/transforms/collectives/permute_backend_assigner_test_modules.inc.
--check compares instead of writing and exits 1 when the file is stale.
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import gen_fixtures  # pylint: disable=wrong-import-position

OUTPUT = os.path.join(
  ROOT,
  "core",
  "xla",
  "backends",
  "gpu",
  "transforms",
  "collectives",
  "permute_backend_assigner_test_modules.inc",
)


def _function(name, args):
  return {
    "kind": "function",
    "function": f"hlo_tools.programs.pass_tests:{name}",
    "args": args,
    "out_spec": "cp",
  }


KV = ["512,2,64:bf16:cp", "512,2,64:bf16:cp"]
# constant name -> (source, topology, stage, what it shows)
MODULES = {
  "kKvStepModule": (
    _function("kv_step", KV),
    "1x1x8",
    "before_async",
    "K and V rotated by one combined (variadic) permute",
  ),
  "kKvLoopModule": (
    _function("kv_loop", KV),
    "1x2x4",
    "before_async",
    "combined K/V permute inside a while body",
  ),
}
# (fixture of scripts/gen_fixtures.py, stage, constant, what it shows)
SHIFT_FIXTURES = [
  (
    "shift_1x1x2",
    "before_async",
    "kShiftPairModule",
    "non-cyclic shift on two devices, pairs {0,1}",
  ),
]


def render():
  pieces = [
    "// HLO of small JAX programs (ring steps of K and V, shifts) compiled by\n"
    "// XLA for H200 topologies, each taken at the stage its comment names:\n"
    "// real modules for the pass's tests. Generated; do not edit.\n"
  ]
  with tempfile.TemporaryDirectory(prefix="pass-test-modules-") as out_dir:
    for constant, (source, topology, stage, what) in MODULES.items():
      name = constant[1:]
      gen_fixtures.FIXTURES[name] = (source, topology, (stage,))
      (path,) = gen_fixtures.generate(name, out_dir)
      with open(path) as f:
        text = f.read()
      pieces.append(_constant(constant, text, f"{what}; {topology}, {stage}"))
    for name, stage, constant, what in SHIFT_FIXTURES:
      topology = gen_fixtures.FIXTURES[name][1]
      paths = gen_fixtures.generate(name, out_dir)
      (path,) = [p for p in paths if p.endswith(f".{stage}.hlo")]
      with open(path) as f:
        pieces.append(_constant(constant, f.read(), f"{what}; {topology}, {stage}"))
  return "\n".join(pieces)


def _constant(name, text, comment):
  text = "\n".join(line for line in text.splitlines() if line.strip()) + "\n"
  assert ')hlo"' not in text
  return f'// {comment}\nconstexpr char {name}[] = R"hlo(\n{text})hlo";\n'


def main(argv):
  parser = argparse.ArgumentParser(prog=argv[0])
  parser.add_argument("--check", action="store_true")
  args = parser.parse_args(argv[1:])
  text = render()
  if args.check:
    with open(OUTPUT) as f:
      if f.read() != text:
        print(f"{OUTPUT} is stale: run {argv[0]}", file=sys.stderr)
        return 1
    return 0
  tmp = OUTPUT + ".tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, OUTPUT)
  print(f"wrote {OUTPUT}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
