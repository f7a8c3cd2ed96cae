"""`hlo-tools bench`: the pass's and the tools' speed, each next to the reference it competes with.

    hlo-tools bench [--json=PATH] [--only=P1,P2,P3,HOOK] [--runs=N] [--quick]
                    [--layers=N] [--ring-layers=N] [--keep=DIR]

  P1 pass overhead  nvshmem-opt's pass time (`pass_us` of its report: the pass alone,
                    no process start or parsing) / XLA's deviceless GPU compile time
                    of the same program (only `.compile()`, in a clean child), on a
                    Llama-3-8B-shaped ring-attention layer stack, forward and backward,
                    CP=8 on 1x2x4. The pass reads the module XLA's async-collective-
                    creator receives. Goal <= 0.5%.
  P2 reader speed   hlo_tools' parse time / jaxlib's `hlo_module_from_text` time on the
                    same >= 10 MB HLO text compiled from JAX; plus peak memory of each.
                    Goal <= 1.0.
  P3 diff scaling   the diff as `hlo-tools diff --format=json` runs it (the parsed
                    modules frozen and the collector paused, the JSON written) on two ~50k-
                    instruction modules (a module and the pass's rewrite of it) / the
                    time to parse both; and the growth of the per-instruction diff
                    time from ~10k to ~100k instructions in both.
                    Goals <= 1.5, growth <= 1.2.
  HOOK compile      the JAX hook's hook.compile / plain `.compile()` of the same
                    program (an unrolled ring of 8 and of 32 steps, deviceless on
                    1x1x8, a table under which the hook moves it to peer memory),
                    each side in its own process; the larger ratio of the two
                    sizes. Goal <= 1.15. Only with --only (not in the default set).

Every figure is the median of --runs runs with min and max; the two sides of a ratio
are measured in the same run, interleaved where they share a process. --quick uses
small programs (for tests): its numbers say nothing about the goals.
"""

import argparse
import json
import subprocess
import time
from typing import Any

from hlo_tools import atomic_output
from hlo_tools.commands import common
from hlo_tools.errors import InputError
from hlo_tools.ops import bench
from hlo_tools.ops.bench import env, hook as bench_hook


def _parser(prog: str) -> common.ArgumentParser:
  p = common.parser_for(prog, __doc__)
  p.add_argument("--json", default=None, metavar="PATH", help="write the results here")
  p.add_argument("--only", default="P1,P2,P3", help="comma-separated subset of P1,P2,P3,HOOK")
  p.add_argument(
    "--runs", type=int, default=None, help="runs per figure (default 5; 1 with --quick)"
  )
  p.add_argument("--quick", action="store_true", help="small sizes, for tests")
  p.add_argument("--layers", type=int, default=None, help="P1: Llama layers")
  p.add_argument(
    "--ring-layers", type=int, default=None, help="P2 and P3 (large): steps of the unrolled ring"
  )
  p.add_argument(
    "--keep", default=None, metavar="DIR", help="also write the benchmarked modules here"
  )
  return p


def _sizes(prog: str, args: argparse.Namespace) -> tuple[list[str], dict[str, int], int]:
  only = [x.strip().upper() for x in args.only.split(",") if x.strip()]
  if not only or any(x not in bench.GOALS for x in only):
    raise InputError(f"{prog}: --only takes P1, P2, P3, HOOK; got {args.only!r}")
  sizes = dict(bench.QUICK if args.quick else bench.FULL)
  # A flag given is a flag taken: 0 is refused, never read as "not given".
  for flag, value in (("--layers", args.layers), ("--ring-layers", args.ring_layers)):
    if value is not None and value < 1:
      raise InputError(f"{prog}: {flag} must be >= 1")
  if args.layers is not None:
    sizes["layers"] = args.layers
  if args.ring_layers is not None:
    sizes["ring_layers"] = args.ring_layers
  runs = sizes["runs"] if args.runs is None else args.runs
  if runs < 1:
    raise InputError(f"{prog}: --runs must be >= 1")
  return only, sizes, runs


def main(argv: list[str]) -> int:
  prog = argv[0] if argv else "hlo-tools bench"
  parser = _parser(prog)

  def run(args: argparse.Namespace) -> int:
    only, sizes, runs = _sizes(prog, args)
    if args.json:  # a run takes minutes: a bad path is refused before, not after
      common.check_output_file(args.json, "--json")
    result: dict[str, Any] = {
      "quick": args.quick,
      "runs": runs,
      "sizes": sizes,
      "machine": env.machine(),
      "versions": env.versions(),
    }
    start = time.perf_counter()
    benches = {
      "P1": bench.bench_p1,
      "P2": bench.bench_p2,
      "P3": bench.bench_p3,
      "HOOK": bench_hook.bench_hook,
    }
    try:
      for key in ("P1", "P2", "P3", "HOOK"):
        if key in only:
          result[key] = benches[key](sizes, runs, args.keep)
    except (RuntimeError, subprocess.CalledProcessError) as e:
      raise InputError(f"{prog}: {e}") from None
    result["bench_s"] = time.perf_counter() - start
    print(bench.table(result))
    if args.json:
      atomic_output.write_atomic(args.json, json.dumps(result, indent=1) + "\n")
    return 0

  return common.run_command(parser, argv, run)
