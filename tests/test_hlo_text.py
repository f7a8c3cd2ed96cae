"""HLO text end to end: the `hlo-tools parse` command's summary, a reader's refusal as
every command that reads a module prints it, and the reader bench. The reader's own
tests are in tests/hlo/ (test_reader.py and the files of its parts)."""

import json
import re
import subprocess
import sys

from hlo_tools import cli

from conftest import FIXTURES as FIXTURES_DIR, ROOT as REPO, SHARED_DATA

# Other test files import the compiled-here HLO from this module's name.
from generated_hlo import (  # noqa: F401
  _MESH_ALL_REDUCE,
  generated_dir,
  hlo_dump_files,
)

H200_HLO = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"


# ---------------------------------------------------------------------------------------
# CLI


def test_parse_command_summarizes_text_and_json(capsys, tmp_path):
  assert cli.main(["parse", str(H200_HLO)]) == 0
  out = capsys.readouterr().out
  assert "5 computations, 24 instructions" in out
  assert re.search(r"start-done %collective-permute-start .*trip count 4", out)
  assert cli.main(["parse", str(H200_HLO), "--json"]) == 0
  summary = json.loads(capsys.readouterr().out)
  assert summary["collective_permutes"][0]["pairs"] == [[0, 0]]
  bad = tmp_path / "bad.hlo"
  bad.write_text("HloModule m\nENTRY %e {\n  ROOT %r = f32[] bogus()\n}\n")
  assert cli.main(["parse", str(bad)]) == 2
  err = capsys.readouterr().err
  assert err == f"{bad}:3:19: unknown opcode 'bogus'\n"
  assert cli.main(["parse", str(tmp_path / "missing.hlo")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "missing.hlo" in err


def test_parse_command_runs_without_importing_jax():
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "parse", str(H200_HLO)],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0 and "collective-permutes: 1" in proc.stdout
  assert "jax" not in proc.stderr  # reading HLO must not need jax


def test_bench_parse_reports_both_parsers():
  from hlo_tools.ops.bench.reader import bench_parse  # pylint: disable=import-outside-toplevel

  r = bench_parse(H200_HLO.read_text(), runs=3)
  assert r["ours_s"] > 0 and r["jaxlib_s"] > 0 and r["ratio"] > 0


def test_repeated_source_or_target_is_rejected(tmp_path):
  base = (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()
  for pairs, what in (("{{0,1},{0,2}", "source 0"), ("{{0,1},{2,1}", "target 1")):
    text = base.replace("{{0,1},{1,2}", pairs, 1)
    assert text != base
    path = tmp_path / "dup.hlo"
    path.write_text(text)
    line = next(n for n, l in enumerate(text.split("\n"), 1) if "source_target_pairs" in l)
    col = text.split("\n")[line - 1].index("source_target_pairs=") + 21
    expected = (
      f"{path}:{line}:{col}: %ppermute.3.0: {what} appears more than once in "
      "source_target_pairs (XLA's verifier rejects this permute)\n"
    )
    for command in (["parse"], ["explain", "--topology=1x2x4"], ["verify", "--topology=1x2x4"]):
      result = subprocess.run(
        [sys.executable, "-m", "hlo_tools.cli", command[0], str(path), *command[1:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
      )
      assert (result.returncode, result.stderr) == (2, expected), command
