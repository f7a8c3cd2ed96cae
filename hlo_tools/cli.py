"""`hlo-tools` entry point: dispatches `hlo-tools COMMAND ...` to the command's module,
and is the one place where a failure becomes an exit status and one line on stderr."""

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from hlo_tools import cli_io
from hlo_tools.errors import InputError
from hlo_tools.ops import outdir

# command -> module whose main(argv) implements it. Modules are imported lazily so
# that reading HLO never pays for importing jax.
COMMANDS = {
    "dump": "hlo_tools.commands.dump",
    "parse": "hlo_tools.commands.parse",
    "explain": "hlo_tools.commands.explain",
    "verify": "hlo_tools.commands.verify",
    "diff": "hlo_tools.commands.diff",
    "report": "hlo_tools.commands.report",
    "heuristics": "hlo_tools.commands.heuristics",
    "bench": "hlo_tools.commands.bench",
}

USAGE = "usage: hlo-tools {" + ",".join(sorted(COMMANDS)) + "} [ARGS...]"

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
EXIT_SIGPIPE = 141  # 128 + SIGPIPE, as a shell reports `hlo-tools ... | head`


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ("-h", "--help"):
    print(USAGE)
    return 0 if argv else EXIT_BAD_INPUT
  command, rest = argv[0], argv[1:]
  if command not in COMMANDS:
    print(f"hlo-tools: unknown command {command!r}; {USAGE}", file=sys.stderr)
    return EXIT_BAD_INPUT
  module = importlib.import_module(COMMANDS[command])
  command_main: Callable[[list[str]], int] = module.main
  return run(command_main, ["hlo-tools " + command] + rest)


def run(command_main: Callable[[list[str]], int], argv: list[str]) -> int:
  """command_main(argv)'s exit status. Bad input of any kind (an InputError, its
  subclasses included, or an OSError) ends it with one line on stderr and status 2;
  Ctrl-C with one line and 130, its work directories removed; a reader who closed
  stdout early (`| head`) quietly with 141."""
  prog = argv[0]
  try:
    code = command_main(argv)
    sys.stdout.flush()
    return code
  except BrokenPipeError:
    _quiet_stdout()
    return EXIT_SIGPIPE
  except InputError as e:
    cli_io.print_error(e)
  except OSError as e:
    cli_io.print_error(f"{prog}: {e}")
  except KeyboardInterrupt:
    outdir.discard_work_dirs()
    cli_io.print_error(f"{prog}: interrupted; nothing written")
    return EXIT_INTERRUPTED
  return EXIT_BAD_INPUT


def _quiet_stdout() -> None:
  # Python would report the broken pipe again when flushing stdout at exit: point
  # the descriptor at /dev/null first.
  try:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
  except (OSError, ValueError):
    pass


if __name__ == "__main__":
  sys.exit(main())
