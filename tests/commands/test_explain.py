"""hlo_tools.commands.explain: `hlo-tools explain`'s arguments, exit statuses and output
(stdout, --out, the derived topology's note on stderr, the installed entry point)."""

import json
import os
import subprocess

import pytest

from hlo_tools import cli

from conftest import FIXTURES, ROOT as REPO

# jax's lowered HLO (`jax.jit(f).lower(...).as_text(dialect="hlo")`): no num_partitions in
# the header, scan loops without known_trip_count.
LOWERED = FIXTURES / "ring_1x2x4.lowered.hlo"


def run(capsys, *argv):
  rc = cli.main(["explain", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def test_json_to_out_file(capsys, tmp_path):
  dest = tmp_path / "explain.json"
  rc, out, _ = run(
    capsys,
    FIXTURES / "shift_1x2x4.before_async.hlo",
    "--topology=1x2x4",
    "--format=json",
    f"--out={dest}",
  )
  assert rc == 0 and out == ""
  [e] = json.loads(dest.read_text())["collectives"]
  assert len(e["pairs"]) == 7  # i -> i+1, no wrap-around


def truncated(tmp_path):
  text = (FIXTURES / "ring_1x2x4.before_async.hlo").read_text()
  path = tmp_path / "truncated.hlo"
  path.write_text(text[: len(text) // 2])
  return path


def broken_pairs(tmp_path, pairs="{{0,1},{1}}"):
  text = (FIXTURES / "ring_1x2x4.before_async.hlo").read_text()
  text = text.replace(
    "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}",
    f"source_target_pairs={pairs}",
  )
  path = tmp_path / "broken_pairs.hlo"
  path.write_text(text)
  return path


def test_bad_input_is_one_line_naming_the_file(capsys, tmp_path):
  rc, out, err = run(capsys, truncated(tmp_path), "--topology=1x2x4")
  assert rc == 2 and out == ""
  assert len(err.strip().splitlines()) == 1
  assert err.startswith(f"{tmp_path / 'truncated.hlo'}:")
  rc, _, err = run(capsys, tmp_path / "missing.hlo", "--topology=1x2x4")
  assert rc == 2 and "missing.hlo: cannot read" in err
  rc, _, err = run(capsys, broken_pairs(tmp_path), "--topology=1x2x4")
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert "broken_pairs.hlo:368:" in err and "source_target_pairs" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--topology=2x")
  assert rc == 2 and "topology" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--devices-per-host=3")
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert "do not fill hosts of 3 GPUs" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--devices-per-host=0")
  assert rc == 2 and "--devices-per-host: '0' is not a positive integer" in err
  rc, _, err = run(
    capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--devices-per-host=4", "--topology=1x2x4"
  )
  assert rc == 2 and "give one" in err


def test_topology_derived_by_the_driver(capsys):
  """Without --topology, the topology nvshmem-opt (and so the pass) derives: the same
  explanation as with the equivalent spec."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  for flags, spec in (([], "1x1x8"), (["--devices-per-host=4"], "1x2x4")):
    rc, derived, _ = run(capsys, path, *flags, "--format=json")
    assert rc == 0
    rc, given, _ = run(capsys, path, f"--topology={spec}", "--format=json")
    assert rc == 0
    # Both carry the module's map, from XLA's config beside it.
    assert json.loads(derived)["topology"] == f"{spec}:map=0,1,2,3,4,5,6,7"
    assert json.loads(derived) == json.loads(given)


def test_derived_topology_is_named_on_stderr(capsys):
  """Without --topology the topology is said, once, on stderr (as nvshmem-opt says it);
  stdout stays the explanation alone."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  rc, out, err = run(capsys, path, "--devices-per-host=4", "--format=json")
  assert rc == 0 and json.loads(out)["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7"
  [line] = err.strip().splitlines()
  assert "no --topology; using 1x2x4" in line and str(path) in line
  rc, _, err = run(capsys, path, "--topology=1x2x4", "--format=json")
  assert rc == 0 and err == ""


def test_installed_entry_point_explains_without_the_driver():
  exe = REPO / ".venv" / "bin" / "hlo-tools"
  assert exe.exists(), f"{exe} is not installed: run scripts/setup.sh"
  proc = subprocess.run(
    [
      str(exe),
      "explain",
      str(FIXTURES / "ring_2x2x4.before_async.hlo"),
      "--topology=2x2x4",
      "--format=json",
    ],
    capture_output=True,
    text=True,
    check=False,
    env=dict(os.environ, NVSHMEM_OPT="/nonexistent"),
  )
  assert proc.returncode == 0, proc.stderr
  [e] = json.loads(proc.stdout)["collectives"]
  assert len(e["pairs"]) == 16 and e["edges_by_class"]["network"] == 4


def test_num_partitions_overrides_topology_and_mesh(capsys, tmp_path):
  # Without the mesh the topology gives the count; --num-partitions overrides both.
  text = LOWERED.read_text()
  header, rest = text.split("\n", 1)
  bare = tmp_path / "no_mesh.hlo"
  bare.write_text(header.split(", frontend_attributes=")[0] + "\n" + rest)
  rc, out, err = run(capsys, bare, "--topology=1x2x4", "--format=json")
  assert rc == 0, err
  assert json.loads(out)["num_partitions_from"] == "inferred from the topology's 8 devices"
  rc, out, err = run(capsys, bare, "--topology=1x2x4", "--num-partitions=4", "--format=json")
  assert rc == 2 and "outside" in err and "\n" not in err.strip()
  rc, out, err = run(capsys, bare, "--topology=2x2x4", "--num-partitions=8", "--format=json")
  assert rc == 0, err
  assert json.loads(out)["num_partitions"] == 8


def test_bad_format_is_one_line(capsys):
  rc, out, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--format=xml")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert err.startswith("hlo-tools explain: argument --format: invalid choice: 'xml'")


def test_help_says_what_the_command_does(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["explain", "--help"])
  assert e.value.code == 0
  out = " ".join(capsys.readouterr().out.split())
  assert out.startswith("usage: hlo-tools explain [-h] [--topology TOPOLOGY]")
  assert "why each collective-permute gets its backend" in out
  for flag in ("--devices-per-host", "--cost-table", "--backends", "--per-op-modes", "--out"):
    assert flag in out, flag
