"""`hlo-tools` entry point: dispatches `hlo-tools COMMAND ...` to the command's module,
and is the one place where a failure becomes an exit status and one line on stderr."""

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from hlo_tools import __version__, bounded_input, messages
from hlo_tools.errors import ESCAPE_ERRORS, InputError
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
# What each command does, for `hlo-tools --help` (each has its own --help).
SUMMARIES = {
  "dump": "compile a JAX program deviceless for a GPU topology (or index an XLA "
  "--xla_dump_to folder) into a stage directory",
  "parse": "read HLO text or a .hlo.pb and summarise it and its collective-permutes",
  "explain": "why each collective-permute gets its backend: modeled times, the "
  "choice, upstream's answer; each program of a dump folder",
  "verify": "named checks that a module's permutes can run as written on the target "
  "runtime (exit 1 when one fails)",
  "diff": "what changed between two modules or stages, collectives first; --trace "
  "follows each permute through XLA's passes",
  "report": "an HTML report of what the pass does to a program, a module or a dump "
  "folder: rewrite, explain, verify, diff, charts",
  "heuristics": "test and tune the backend-selection heuristic: sweep, check-pass, "
  "calibrate the cost table",
  "bench": "the pass's and the tools' speed, each next to the reference it competes with",
}
HELP = "\n".join(
  [USAGE, "", "Commands:"]
  + [f"  {name:<11}{SUMMARIES[name]}" for name in sorted(COMMANDS)]
  + [
    "",
    "hlo-tools COMMAND --help says more of one; hlo-tools --version its version.",
    "Exit status: 0 ok, 1 a check failed (verify, report), 2 bad input, 130 interrupted.",
  ]
)

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
EXIT_SIGPIPE = 141  # 128 + SIGPIPE, as a shell reports `hlo-tools ... | head`


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv:
    print(HELP, file=sys.stderr)
    return EXIT_BAD_INPUT
  if argv[0] in ("-h", "--help"):
    print(HELP)
    return 0
  if argv[0] == "--version":
    print(f"hlo-tools {__version__}")
    return 0
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
  _escape_unencodable_output()
  bounded_input.set_input_timeout()  # a command's --input-timeout lasts for that command
  messages.forget_notes()
  try:
    code = command_main(argv)
    sys.stdout.flush()
    return code
  except BrokenPipeError:
    _quiet_stdout()
    return EXIT_SIGPIPE
  except InputError as e:
    messages.print_error(e)
  except OSError as e:
    # `path: what went wrong`, not Python's "[Errno N] ...: 'path'".
    where = f"{e.filename}: " if e.filename else ""
    messages.print_error(f"{prog}: {where}{e.strerror or e}")
  except KeyboardInterrupt:
    outdir.discard_work_dirs()
    messages.print_error(f"{prog}: interrupted; nothing written")
    return EXIT_INTERRUPTED
  return EXIT_BAD_INPUT


def _escape_unencodable_output() -> None:
  # A file name that is not UTF-8 reaches the text as lone surrogates: printed with
  # its bytes escaped (\xff), whatever the locale, never a UnicodeEncodeError.
  for stream in (sys.stdout, sys.stderr):
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
      try:
        reconfigure(errors=ESCAPE_ERRORS)
      except (ValueError, OSError):
        pass


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
