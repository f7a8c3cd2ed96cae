"""`hlo-tools heuristics`: test and tune the backend-selection heuristic.

    hlo-tools heuristics sweep [--out=DIR] [--topology=SPEC ...] [--cost-table=F]
    hlo-tools heuristics check-pass [--topology=SPEC ...] [--cost-table=F]
    hlo-tools heuristics calibrate CSV [--out=TABLE]

sweep: modeled times of every plan over sizes x topologies x shapes, against
the oracle, upstream XLA's assigner and NCCL-only. check-pass: compile real JAX
programs for a sample of those cases and check the C++ pass decides what the
core predicts. calibrate: fit a cost table from measured point-to-point times.
"""

import argparse
import importlib
import sys
import textwrap

from hlo_tools import cli_io
from hlo_tools.commands import common
from hlo_tools.ops.heuristics import HeuristicsError

# subcommand -> module with main(argv); imported lazily (check-pass pulls in
# the dump machinery, sweep may pull in matplotlib).
SUBCOMMANDS = {
    "sweep": "hlo_tools.ops.heuristics.sweep",
    "check-pass": "hlo_tools.ops.heuristics.check",
    "calibrate": "hlo_tools.calibrate",
}
# What `--help` says of each; `hlo-tools heuristics SUBCOMMAND --help` says more.
DESCRIPTIONS = {
    "sweep": "modeled time of every plan over sizes x topologies x shapes, against the "
             "model's best, upstream XLA's assigner and NCCL-only (CSV, JSON, plots)",
    "check-pass": "compile real JAX programs for a sample of the sweep's cases and check "
                  "that the C++ pass decides what the core predicts",
    "calibrate": "fit a cost table from measured permute times (a CSV of seconds from "
                 "gpu/xla_permute_bench.py)",
}


def main(argv):
  prog = argv[0] if argv else "hlo-tools heuristics"
  parser = common.ArgumentParser(
      prog=prog, description=__doc__.split("\n\n", maxsplit=1)[0],
      formatter_class=argparse.RawDescriptionHelpFormatter,
      epilog="subcommands (SUBCOMMAND --help for their options):\n" + "\n".join(
          textwrap.fill(text, 78, initial_indent=f"  {name:<11} ",
                        subsequent_indent=" " * 14) for name, text in DESCRIPTIONS.items()))
  parser.add_argument("subcommand", choices=sorted(SUBCOMMANDS),
                      help="one of: " + ", ".join(DESCRIPTIONS))
  parser.add_argument("args", nargs=argparse.REMAINDER,
                      help="the subcommand's arguments")

  def run(args):
    sub_prog = f"{prog} {args.subcommand}"
    try:
      return importlib.import_module(SUBCOMMANDS[args.subcommand]).main(
          [sub_prog] + args.args)
    except HeuristicsError as e:
      raise HeuristicsError(f"{sub_prog}: {e}") from None
    except KeyboardInterrupt:
      cli_io.print_error(f"{sub_prog}: interrupted")
      return 130

  return common.run_command(parser, argv, run)


if __name__ == "__main__":
  sys.exit(cli_io.run_main(main, ["hlo-tools heuristics"] + sys.argv[1:]))
