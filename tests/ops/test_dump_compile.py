"""hlo_tools.ops.dump_compile: the compile child (a module:function under shard_map, on a
2-D mesh, as a global program, without shard_map's type check) and the environment
and arguments the parent gives it.

Every compile runs in a child process (as the command itself does), so these tests
never initialize jax's backend in pytest's process.
"""

import json
import os
import re

import pytest

from hlo_tools.errors import DumpError
from hlo_tools.ops import dump_compile
from hlo_tools.ops.dump_target import Target

from conftest import ROOT as ROOT_DIR
from dump_cli import run_dump

ROOT = str(ROOT_DIR)


@pytest.mark.long
def test_nocheck_vma_lets_a_fresh_carry_compile(tmp_path):
  # A real per-shard function whose scan carry starts from fresh (non-varying)
  # zeros: shard_map's default type check rejects it, and the error says what to do.
  fn = "hlo_tools.programs.pass_tests:ring_sum_fresh_carry"
  args = [fn, "--arg=1024,64:f32:cp", "--topology=1x1x8", "--quiet"]
  proc = run_dump(*args, f"--out={tmp_path / 'checked'}")
  assert proc.returncode == 2
  [line] = proc.stderr.strip().splitlines()
  assert "--nocheck_vma" in line and "carry" in line and len(line) < 1000
  assert not (tmp_path / "checked").exists()
  out = tmp_path / "unchecked"
  proc = run_dump(*args, "--nocheck_vma", f"--out={out}")
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["source"]["check_vma"] is False
  assert "lowered" in manifest["stages"]
  text = (out / "after_optimizations.hlo").read_text()
  assert "collective-permute-start" in text
  lowered = (out / "lowered.hlo").read_text()
  assert lowered.startswith("HloModule") and "collective-permute(" in lowered


def test_function_on_a_2d_mesh(tmp_path):
  out = tmp_path / "tp_cp"
  proc = run_dump(
    "tests.ops.dump_sources:tp_cp_block",
    "--mesh=cp:4,tp:2",
    "--topology=1x1x8",
    "--arg=16,64:f32:cp,tp",
    "--out_spec=cp",
    "--quiet",
    f"--out={out}",
  )
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["mesh"] == {"cp": 4, "tp": 2}
  assert manifest["target"]["topology"] == "1x1x8"
  text = (out / "after_optimizations.hlo").read_text()
  # tp is the fast axis: device c*2+t; the ring steps along cp at each tp rank.
  pairs = re.search(r"collective-permute-start\(.*?source_target_pairs=(\{[^ ]*\}),", text)
  assert pairs, text
  assert set(re.findall(r"\{(\d+),(\d+)\}", pairs.group(1))) == {
    (str(c * 2 + t), str(((c + 1) % 4) * 2 + t)) for c in range(4) for t in range(2)
  }
  assert "replica_groups={{0,1},{2,3},{4,5},{6,7}}" in text


def test_global_function_uses_the_mesh(tmp_path):
  out = tmp_path / "global"
  proc = run_dump(
    "tests.ops.dump_sources:global_tp_cp",
    "--global",
    "--mesh=cp:4,tp:2",
    "--topology=1x1x8",
    "--arg=16,64:f32:cp,tp",
    "--quiet",
    f"--out={out}",
  )
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["source"]["global"] is True and manifest["mesh"] == {"cp": 4, "tp": 2}
  text = (out / "after_optimizations.hlo").read_text()
  assert "source_target_pairs={{0,2},{2,4},{4,6},{6,0},{1,3},{3,5},{5,7},{7,1}}" in text
  assert "all-reduce" in text  # the shard_map's psum and the global sum


# ---------------------------------------------------------------------------------------
# The parent's side, in-process.


@pytest.mark.parametrize(
  "text,message",
  [
    ("8192", "bad --arg '8192': expected SHAPE:DTYPE[:PARTITIONSPEC]"),
    ("8:f32:cp:x", "bad --arg '8:f32:cp:x': expected SHAPE:DTYPE[:PARTITIONSPEC]"),
    ("8,x:f32:cp", "bad shape in --arg '8,x:f32:cp'"),
  ],
)
def test_a_bad_arg_is_refused_before_jax(text, message):
  with pytest.raises(DumpError) as e:
    dump_compile._parse_arg(text)
  assert str(e.value) == message


def test_shard_maps_type_errors_are_recognised():
  # jax's messages for a carry or branch whose varying manual axes differ.
  assert dump_compile._is_vma_error("scan body carry input and output types differ: {V:cp}")
  assert dump_compile._is_vma_error("... pass check_vma=False to shard_map")
  assert not dump_compile._is_vma_error("ValueError: seq_len 100 is not divisible by 8")


def test_the_child_dumps_for_a_gpu_topology_deviceless(tmp_path, monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_foo=1")
  env = dump_compile._child_env(Target(topology="1x2x4"), str(tmp_path), ".*", as_proto=True)
  assert env["XLA_FLAGS"].split() == [
    "--xla_foo=1",
    f"--xla_dump_to={tmp_path}",
    "--xla_dump_hlo_as_text",
    "--xla_dump_hlo_as_proto",
    "--xla_dump_hlo_pass_re=.*",
  ]
  assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] == "1"
  # The child imports this checkout's hlo_tools, and the caller's modules.
  assert env["PYTHONPATH"].split(os.pathsep)[:2] == [ROOT, os.getcwd()]


def test_the_child_dumps_for_host_devices(tmp_path, monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  monkeypatch.delenv("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", raising=False)
  env = dump_compile._child_env(Target(cpu_devices=4), str(tmp_path), None)
  assert env["XLA_FLAGS"].split() == [
    f"--xla_dump_to={tmp_path}",
    "--xla_dump_hlo_as_text",
    "--xla_force_host_platform_device_count=4",
  ]
  assert "JAX_SKIP_CUDA_CONSTRAINTS_CHECK" not in env
