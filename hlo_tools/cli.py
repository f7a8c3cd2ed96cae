"""`hlo-tools` entry point: dispatches `hlo-tools COMMAND ...` to the command's module."""

import importlib
import sys

from hlo_tools import cli_io

# command -> module whose main(argv) implements it. Modules are imported lazily so
# that reading HLO never pays for importing jax.
COMMANDS = {
    "dump": "hlo_tools.commands.dump",
    "parse": "hlo_tools.hlo_parse_cli",
    "explain": "hlo_tools.commands.explain",
    "verify": "hlo_tools.commands.verify",
    "diff": "hlo_tools.commands.diff",
    "report": "hlo_tools.commands.report",
    "heuristics": "hlo_tools.commands.heuristics",
    "bench": "hlo_tools.commands.bench",
}

USAGE = "usage: hlo-tools {" + ",".join(sorted(COMMANDS)) + "} [ARGS...]"


def main(argv=None):
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ("-h", "--help"):
    print(USAGE)
    return 0 if argv else 2
  command, rest = argv[0], argv[1:]
  if command not in COMMANDS:
    print(f"hlo-tools: unknown command {command!r}; {USAGE}", file=sys.stderr)
    return 2
  module = importlib.import_module(COMMANDS[command])
  return cli_io.run_main(module.main, ["hlo-tools " + command] + rest)


if __name__ == "__main__":
  sys.exit(main())
