"""`hlo-tools heuristics`: test and tune the backend-selection heuristic.

    hlo-tools heuristics sweep [--out=DIR] [--topology=SPEC ...] [--cost-table=F]
    hlo-tools heuristics check-pass [--topology=SPEC ...] [--cost-table=F]
    hlo-tools heuristics calibrate CSV [--out=TABLE]

sweep: modeled times of every plan over sizes x topologies x shapes, against
the oracle, upstream XLA's rule and NCCL-only. check-pass: compile real JAX
programs for a sample of those cases and check the C++ pass decides what the
core predicts. calibrate: fit a cost table from measured point-to-point times.
"""

import importlib
import sys

from hlo_tools.heuristics_io import HeuristicsError

# subcommand -> module with main(argv); imported lazily (check-pass pulls in
# the dump machinery, sweep may pull in matplotlib).
SUBCOMMANDS = {
    "sweep": "hlo_tools.heuristics_sweep",
    "check-pass": "hlo_tools.heuristics_check",
    "calibrate": "hlo_tools.calibrate",
}


def main(argv):
  prog = argv[0] if argv else "hlo-tools heuristics"
  rest = list(argv[1:])
  usage = f"usage: {prog} {{{','.join(SUBCOMMANDS)}}} [ARGS...]"
  if not rest or rest[0] in ("-h", "--help"):
    print(usage, file=sys.stdout if rest else sys.stderr)
    return 0 if rest else 2
  name = rest[0]
  if name not in SUBCOMMANDS:
    print(f"{prog}: unknown subcommand {name!r}; {usage}", file=sys.stderr)
    return 2
  sub_prog = f"{prog} {name}"
  try:
    return importlib.import_module(SUBCOMMANDS[name]).main([sub_prog] + rest[1:])
  except HeuristicsError as e:
    print(f"{sub_prog}: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"{sub_prog}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main(["hlo-tools heuristics"] + sys.argv[1:]))
