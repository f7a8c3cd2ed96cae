"""hlo_tools.commands.dump: `hlo-tools dump`'s arguments (the source they name, the
options that do not apply to it), its exit statuses and one-line errors.

Every compile runs in a child process (as the command itself does), so these tests
never initialize jax's backend in pytest's process.
"""

import os
import subprocess
import sys

import pytest

from hlo_tools import cli
from hlo_tools.commands import dump as dump_command
from hlo_tools.errors import DumpError

from conftest import FIXTURES as FIXTURES_DIR, ROOT as ROOT_DIR

ROOT = str(ROOT_DIR)
FIXTURES = str(FIXTURES_DIR)


def _env():
  return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def run_dump(*args):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "dump", *args],
    cwd=ROOT,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )


def _one_line_error(proc, *needles):
  assert proc.returncode == 2, (proc.returncode, proc.stderr)
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  for needle in needles:
    assert needle in lines[0], lines[0]


def test_bad_topology_is_refused_before_compiling(tmp_path):
  proc = run_dump("--topology=2x4", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, "topology spec '2x4'", "SLICESxHOSTSxGPUS")
  assert not os.path.exists(tmp_path / "o")


def test_unimportable_function_is_one_line_leaving_nothing(tmp_path):
  proc = run_dump("no_such_module_xyz:fn", "--arg=8:f32:cp", "--quiet", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, "cannot import", "no_such_module_xyz")
  assert os.listdir(tmp_path) == []  # no temp directory left behind


def test_compile_error_is_one_line_leaving_nothing(tmp_path):
  proc = run_dump("--seq_len=100", "--topology=1x1x8", "--quiet", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, "divisible")
  assert os.listdir(tmp_path) == []


def test_refuses_non_empty_out(tmp_path):
  (tmp_path / "keep.txt").write_text("x")
  proc = run_dump("--topology=1x1x8", f"--out={tmp_path}")
  _one_line_error(proc, "not empty", "--overwrite")
  assert os.listdir(tmp_path) == ["keep.txt"]


@pytest.mark.parametrize(
  "args,needles",
  [
    (["--program=train_step", "--mesh=cp:4,tp"], ["bad --mesh", "NAME:SIZE"]),
    (["--program=train_step", "--mesh=cp:4,tp:4"], ["16 devices", "has 8"]),
    (["--program=train_step", "--mesh=cp:4,dp:2"], ["cp and tp"]),
    (["--program=train_step", "--mesh=cp:2,cp:4"], ["given twice"]),
    (["--mesh=cp:4,tp:2"], ["ring-attention example has one mesh axis"]),
    (["--program=train_step", "--nocausal"], ["--causal does not apply"]),
    (["--program=train_step", "--num_layers=0"], ["--num_layers must be >= 1"]),
    (
      ["--program=train_step", "--mesh=cp:1,tp:8", "--num_kv_heads=4", "--num_heads=8"],
      ["num_kv_heads=4 does not split over tp=8", "cp:1,tp:8"],
    ),
    (
      ["tests.ops.dump_sources:tp_cp_block", "--arg=16,64:f32:cp,tp", "--mesh=cp:8"],
      ["mesh axis 'tp'", "cp:8"],
    ),
    (["tests.ops.dump_sources:tp_cp_block", "--arg=16,64:f32:cp,tp"], ["--mesh=cp:8,tp:1"]),
  ],
)
def test_mesh_errors_are_one_line(tmp_path, args, needles):
  proc = run_dump(*args, "--topology=1x1x8", "--quiet", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, *needles)
  assert os.listdir(tmp_path) == []


def test_mesh_does_not_apply_to_an_xla_dump(tmp_path):
  proc = run_dump(FIXTURES, "--mesh=cp:8", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, "--mesh does not apply")


# ---------------------------------------------------------------------------------------
# The source the arguments name, in-process (nothing compiled).


def source_of(*argv):
  return dump_command.source_from_args(
    dump_command._parser("hlo-tools dump").parse_args([*argv, "--out=o"])
  )


def test_no_source_is_the_ring_with_its_defaults():
  # ring attention: 8192 tokens, 8 heads of 128, 8 KV heads, bf16, causal, forward only.
  assert source_of() == {
    "kind": "ring",
    "config": {
      "seq_len": 8192,
      "num_heads": 8,
      "num_kv_heads": 8,
      "head_dim": 128,
      "dtype": "bf16",
      "causal": True,
      "backward": False,
      "batch": 1,
    },
  }
  assert source_of("--seq_len=512", "--nocausal", "--mesh=cp:8")["config"]["causal"] is False
  assert source_of("--mesh=cp:8")["mesh"] == "cp:8"


def test_the_train_step_keeps_only_the_shapes_given():
  assert source_of("--program=train_step", "--seq_len=1024", "--norotary") == {
    "kind": "program",
    "program": "train_step",
    "config": {"seq_len": 1024, "rotary": False},
  }


@pytest.mark.parametrize(
  "argv,message",
  [
    (["--num_layers=2"], "--num_layers does not apply to --program=ring"),
    (["--norotary"], "--norotary does not apply to --program=ring"),
    (["--seq_len=0"], "--seq_len must be >= 1, got 0"),
    (["m:f", "--program=ring"], "--program=ring and SOURCE 'm:f': give one"),
    (["no/such/dir"], "SOURCE 'no/such/dir' is neither a directory nor module:function"),
  ],
)
def test_a_source_the_options_contradict_is_refused(argv, message):
  with pytest.raises(DumpError) as e:
    source_of(*argv)
  assert str(e.value) == message


def test_a_directory_is_an_xla_dump_and_module_function_a_function(tmp_path):
  assert source_of(str(tmp_path)) == {"kind": "xla_dump", "dir": str(tmp_path)}
  source = source_of("pkg.mod:fn", "--arg=16:f32:cp")
  assert source["kind"] == "function" and source["function"] == "pkg.mod:fn"
  assert source["args"] == ["16:f32:cp"]


def test_topology_does_not_apply_to_an_xla_dump(tmp_path, capsys):
  rc = cli.main(["dump", FIXTURES, "--topology=1x1x8", f"--out={tmp_path / 'o'}"])
  assert rc == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert "--topology does not apply to an XLA dump directory" in line
  assert os.listdir(tmp_path) == []


def test_out_is_required(capsys):
  assert cli.main(["dump"]) == 2
  err = capsys.readouterr().err
  assert err.strip() == "hlo-tools dump: the following arguments are required: --out"
