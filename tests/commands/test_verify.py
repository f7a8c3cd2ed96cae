"""hlo_tools.commands.verify: `hlo-tools verify`'s arguments, exit statuses and output."""

import json
from pathlib import Path

import pytest

from hlo_tools import cli

from conftest import FIXTURES

RING = "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}"


def run(capsys, *argv):
  rc = cli.main(["verify", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def edited(tmp_path, source, old, new, name="edited.hlo"):
  text = Path(source).read_text()
  assert old in text
  path = tmp_path / name
  path.write_text(text.replace(old, new))
  return path


def test_bad_input_is_one_line_naming_the_file(capsys, tmp_path):
  text = (FIXTURES / "ring_1x2x4.after_optimizations.hlo").read_text()
  trunc = tmp_path / "truncated.hlo"
  trunc.write_text(text[: len(text) // 3])
  rc, out, err = run(capsys, trunc, "--topology=1x2x4")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert err.startswith(f"{trunc}:")
  rc, _, err = run(capsys, tmp_path / "nope.hlo", "--topology=1x2x4")
  assert rc == 2 and "nope.hlo: cannot read" in err
  broken = edited(
    tmp_path, FIXTURES / "ring_1x2x4.before_async.hlo", RING, "source_target_pairs={{0,1},{1,x}}"
  )
  rc, _, err = run(capsys, broken, "--topology=1x2x4")
  assert rc == 2 and ":368:" in err and "source_target_pairs" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--topology=bogus")
  assert rc == 2 and len(err.strip().splitlines()) == 1


def test_topology_derived_by_the_driver(capsys, tmp_path):
  """No --topology: the checks run on the topology nvshmem-opt derives from the module."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  rc, out, err = run(capsys, path, "--devices-per-host=4", "--format=json")
  assert rc == 0
  result = json.loads(out)
  assert result["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7" and result["passed"]
  # The picked topology decides every check: said on stderr, as nvshmem-opt says it.
  [line] = err.strip().splitlines()
  assert "no --topology; using 1x2x4" in line
  rc, out, err = run(capsys, path, "--devices-per-host=5")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert "do not fill hosts of 5 GPUs" in err


# Two partitions, the second pair's target outside them: the permutation check fails.
OUT_OF_RANGE = """HloModule m, num_partitions=2

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  ROOT %cp = f32[16]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2}}
}
"""


def test_a_failed_check_exits_1_after_the_whole_text(capsys, tmp_path):
  path = tmp_path / "m.hlo"
  path.write_text(OUT_OF_RANGE)
  rc, out, err = run(capsys, path, "--topology=1x1x2", "--no-hlo-verifier")
  assert rc == 1 and err == ""
  lines = out.splitlines()
  assert "FAIL permutation" in lines
  assert "  fail %cp (main) line 5: target 2 outside 0..1 (2 partitions)" in lines
  # The core cannot place the pair either: selection fails beside it.
  assert lines[-1].startswith(f"{path}: FAILED: permutation, selection (topology 1x1x2, ")


def test_out_writes_the_json_and_prints_nothing(capsys, tmp_path):
  dest = tmp_path / "verify.json"
  rc, out, _ = run(
    capsys,
    FIXTURES / "ring_1x2x4.before_async.hlo",
    "--topology=1x2x4",
    "--format=json",
    "--no-hlo-verifier",
    f"--out={dest}",
  )
  assert rc == 0 and out == ""
  result = json.loads(dest.read_text())
  # The map is XLA's config's, beside the fixture.
  assert result["passed"] and result["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7"


def test_out_that_is_the_input_is_refused(capsys, tmp_path):
  path = tmp_path / "m.hlo"
  path.write_text((FIXTURES / "ring_1x2x4.before_async.hlo").read_text())
  rc, out, err = run(capsys, path, "--topology=1x2x4", f"--out={path}")
  assert rc == 2 and out == ""
  assert err.strip() == f"{path}: refusing to overwrite an input"


def test_bad_flags_are_one_line(capsys):
  rc, out, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--format=yaml")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert err.startswith("hlo-tools verify: argument --format: invalid choice: 'yaml'")
  rc, _, err = run(capsys)
  assert rc == 2 and "the following arguments are required: file" in err


def test_help_says_what_the_command_does(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["verify", "--help"])
  assert e.value.code == 0
  out = " ".join(capsys.readouterr().out.split())
  assert out.startswith("usage: hlo-tools verify [-h] [--topology TOPOLOGY]")
  assert "named checks on a module's collective-permutes" in out
  for flag in ("--no-hlo-verifier", "--per-op-modes", "--num-partitions", "--max-input-bytes"):
    assert flag in out, flag
