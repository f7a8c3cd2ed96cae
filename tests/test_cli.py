"""hlo_tools.cli: the `hlo-tools` entry point's help, version and dispatch, and the one
place where a failure becomes an exit status and one line on stderr."""

import errno
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import bounded_input, cli
from hlo_tools.errors import InputError

from conftest import NVSHMEM_OPT, ROOT


def _cli(*args, **kwargs):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
    **kwargs,
  )


def _driver(*args):
  return subprocess.run(
    [str(NVSHMEM_OPT), *map(str, args)], capture_output=True, text=True, timeout=120
  )


def test_cli_help_version_and_no_command():
  result = _cli()
  assert result.returncode == 2 and result.stdout == ""
  assert "Commands:" in result.stderr
  result = _cli("--help")
  assert result.returncode == 0
  for name in ("dump", "parse", "explain", "verify", "diff", "report", "heuristics", "bench"):
    assert re.search(rf"^  {name} +\S.{{20,}}", result.stdout, re.M), name
  from hlo_tools import __version__

  assert _cli("--version").stdout == f"hlo-tools {__version__}\n"
  version = _driver("--version")
  assert version.returncode == 0
  assert version.stdout == f"nvshmem-opt {__version__} (XLA of the TensorFlow wheel it links)\n"


def test_no_command_and_an_unknown_one_are_bad_input(capsys):
  assert cli.main([]) == cli.EXIT_BAD_INPUT == 2
  out, err = capsys.readouterr()
  assert out == "" and err.startswith(cli.USAGE) and "Commands:" in err
  assert cli.main(["frobnicate", "x.hlo"]) == 2
  out, err = capsys.readouterr()
  assert out == "" and err == f"hlo-tools: unknown command 'frobnicate'; {cli.USAGE}\n"


def test_every_command_has_a_module_with_main_and_a_summary():
  assert sorted(cli.SUMMARIES) == sorted(cli.COMMANDS)
  for name, module in cli.COMMANDS.items():
    spec = importlib.util.find_spec(module)
    assert spec is not None and "def main(" in Path(spec.origin).read_text(), name
  # The usage line lists them in order, as argparse would.
  assert (
    cli.USAGE
    == "usage: hlo-tools {bench,diff,dump,explain,heuristics,parse,report,verify} [ARGS...]"
  )


def test_run_returns_the_commands_status_and_gives_it_argv(capsys):
  seen = []
  assert cli.run(lambda argv: seen.append(argv) or 1, ["hlo-tools verify", "m.hlo"]) == 1
  assert seen == [["hlo-tools verify", "m.hlo"]]


def test_bad_input_is_one_line_and_status_2(capsys):
  def bad_input(argv):
    raise InputError("m.hlo:3:5: unknown opcode 'kopy'")

  assert cli.run(bad_input, ["hlo-tools parse"]) == 2
  assert capsys.readouterr().err == "m.hlo:3:5: unknown opcode 'kopy'\n"

  def missing(argv):
    raise FileNotFoundError(errno.ENOENT, "No such file or directory", "gone.hlo")

  assert cli.run(missing, ["hlo-tools parse"]) == 2
  # `path: what went wrong`, not Python's "[Errno 2] ...: 'path'".
  assert capsys.readouterr().err == "hlo-tools parse: gone.hlo: No such file or directory\n"


def test_interrupt_is_130_and_a_closed_stdout_141(capsys):
  def interrupted(argv):
    raise KeyboardInterrupt

  assert cli.run(interrupted, ["hlo-tools report"]) == cli.EXIT_INTERRUPTED == 130
  assert capsys.readouterr().err == "hlo-tools report: interrupted; nothing written\n"

  def reader_gone(argv):
    raise BrokenPipeError(errno.EPIPE, "Broken pipe")

  assert cli.run(reader_gone, ["hlo-tools parse"]) == cli.EXIT_SIGPIPE == 141
  assert capsys.readouterr().err == ""  # quietly


def test_each_command_starts_with_the_default_input_timeout():
  # A command's --input-timeout lasts for that command only.
  bounded_input.set_input_timeout(3.0)
  seen = []
  try:
    cli.run(lambda argv: seen.append(bounded_input._timeout[0]) or 0, ["hlo-tools parse"])
  finally:
    bounded_input.set_input_timeout()
  assert seen == [bounded_input.DEFAULT_INPUT_TIMEOUT]


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_in_process(capsys, flag):
  assert cli.main([flag]) == 0
  assert capsys.readouterr().out == cli.HELP + "\n"
