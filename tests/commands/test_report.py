"""hlo_tools.commands.report: `hlo-tools report`'s arguments (the SOURCE they name, the
options it would ignore), its exit statuses and the names its errors use."""

import json
import os
import subprocess
import sys

import pytest

from hlo_tools import cli
from hlo_tools.commands import report as report_command

from conftest import FIXTURES, ROOT

RING = FIXTURES / "ring_1x1x8.after_optimizations.hlo"  # ring attention, 8 devices
# A training script's --xla_dump_to folder: four programs, two with ring permutes.
TEXT_DUMP = FIXTURES / "training_script_1x1x8.xla_dump"
PROGRAMS = [
  "module_0001.jit_init",
  "module_0669.jit_train_step",
  "module_1383.jit_eval_step",
  "module_2066.jit__lambda",
]
EVAL = PROGRAMS[2]


def _broken(tmp_path):
  """The ring with its permute's opcode misspelt; (path, line of the error)."""
  lines = RING.read_text().split("\n")
  [i] = [i for i, l in enumerate(lines) if " collective-permute-start(" in l]
  lines[i] = lines[i].replace(" collective-permute-start(", " collective-permute-strt(")
  path = tmp_path / "bad.hlo"
  path.write_text("\n".join(lines))
  return path, i + 1


def test_report_of_stdin_names_stdin(tmp_path):
  path, line = _broken(tmp_path)
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "report",
      "-",
      "--topology=1x1x8",
      f"--out={tmp_path / 'r'}",
      "--quiet",
    ],
    stdin=path.open("rb"),
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 2
  assert proc.stderr.strip().startswith(f"<stdin>:{line}:"), proc.stderr


def test_report_names_a_binary_file_as_the_user_gave_it(tmp_path, capsys, monkeypatch):
  # Not a serialized HloModuleProto: the error names "junk.pb", not its absolute path.
  (tmp_path / "junk.pb").write_bytes(b"\0\1\2 not a proto " * 64)
  monkeypatch.chdir(tmp_path)
  assert cli.main(["report", "junk.pb", "--topology=1x1x8", "--out=r", "--quiet"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("junk.pb: neither HLO text nor a serialized HloModuleProto"), err


def _cli(*args, **kwargs):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
    **kwargs,
  )


def test_report_of_one_program(tmp_path):
  # DIR:PROGRAM, with DIR named relative to the working directory as a module:function
  # would be (no slash): the folder wins.
  out = tmp_path / "report"
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "report",
      f"{TEXT_DUMP.name}:eval_step",
      f"--out={out}",
      "--quiet",
    ],
    capture_output=True,
    text=True,
    cwd=FIXTURES,
    timeout=300,
    env=dict(os.environ, PYTHONPATH=str(ROOT)),
  )
  assert result.returncode == 0, result.stderr[-2000:]
  report = json.loads((out / "report.json").read_text())
  assert [c["dump_program"] for c in report["cases"]] == [EVAL]
  assert len(report["cases"][0]["collective_permutes"]) == 1
  result = _cli("report", f"{TEXT_DUMP}:warp_step", f"--out={tmp_path / 'r2'}", "--quiet")
  assert result.returncode == 2 and all(k in result.stderr for k in PROGRAMS)


# ---------------------------------------------------------------------------------------
# Options the SOURCE would ignore, refused before any module is read or compiled.


@pytest.mark.parametrize(
  "argv,message",
  [
    (
      [str(RING), "--topology=1x1x8", "--devices-per-host=8"],
      "--devices-per-host and --topology: give one",
    ),
    (
      [str(RING), "--seq_len=4096"],
      f"--seq_len shapes the built-in ring-attention example; {RING} is compiled or read as it is",
    ),
    (
      [str(RING), "--mesh=cp:8"],
      f"--mesh applies to a module:function SOURCE (it shapes the compile), not to {RING}",
    ),
    (
      ["--nocheck_vma"],
      "--nocheck_vma applies to a module:function SOURCE (it shapes the compile), not to "
      "the built-in default",
    ),
    (["--devices-per-host=4"], "--devices-per-host applies to a FILE or DIR without --topology"),
    (["--seq_len=0"], "--seq_len must be >= 1, got 0"),
  ],
)
def test_an_option_the_source_ignores_is_refused(argv, message, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  assert cli.main(["report", *argv, "--quiet"]) == 2
  out, err = capsys.readouterr()
  [line] = err.strip().splitlines()
  assert out == "" and line.startswith(f"hlo-tools report: {message}"), line
  assert os.listdir(tmp_path) == []  # no report, no work directory


def test_a_source_is_a_function_only_when_nothing_stands_at_its_name(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert report_command._is_function("pkg.mod:fn")
  assert not report_command._is_function(None)
  assert not report_command._is_function(str(RING))
  # DIR:PROGRAM of a dump folder named relative to the working directory.
  (tmp_path / "dump").mkdir()
  assert not report_command._is_function("dump:train_step")
  (tmp_path / "a:b").write_text("")
  assert not report_command._is_function("a:b")
