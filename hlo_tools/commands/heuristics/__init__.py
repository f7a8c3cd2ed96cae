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

from hlo_tools import cli_io
from hlo_tools.commands import common
from hlo_tools.commands.heuristics.shared import HeuristicsError

# subcommand -> module with main(argv); imported lazily (check-pass pulls in
# the dump machinery, sweep may pull in matplotlib).
SUBCOMMANDS = {
    "sweep": "hlo_tools.commands.heuristics.sweep",
    "check-pass": "hlo_tools.commands.heuristics.check",
    "calibrate": "hlo_tools.calibrate",
}


def main(argv):
  prog = argv[0] if argv else "hlo-tools heuristics"
  parser = common.parser_for(prog, __doc__)
  parser.add_argument("subcommand", choices=sorted(SUBCOMMANDS))
  parser.add_argument("args", nargs=argparse.REMAINDER)

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
