"""hlo_tools.ops.bench.programs: the bench's compile child, its environment, and the
mesh replica groups spelled out for the pinned XLA."""

import json
import os
import subprocess

import pytest

from hlo_tools.ops.bench import programs

from conftest import ROOT


def test_mesh_replica_groups_are_spelled_out():
  # As jaxlib 0.10 prints a data-parallel all-reduce (tests/fixtures/train_step_*):
  # positions 0..7 of a 4x1x2 mesh, row-major; a group varies axis_0 only.
  line = (
    "  %ar = f32[8]{0} all-reduce(%p), channel_id=3, "
    "replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=2] {'axis_0'}, to_apply=%add"
  )
  assert programs.legacy_replica_groups(line) == (
    "  %ar = f32[8]{0} all-reduce(%p), channel_id=3, "
    "replica_groups={{0,2,4,6},{1,3,5,7}}, to_apply=%add"
  )


def test_other_replica_groups_are_left_as_they_are():
  explicit = "all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add"
  assert programs.legacy_replica_groups(explicit) == explicit
  # A chosen axis the mesh does not have: not a form the reader expands.
  unknown = "all-reduce(%p), replica_groups=mesh['a'=2] {'b'}, to_apply=%add"
  assert programs.legacy_replica_groups(unknown) == unknown


def test_child_env_is_cpu_uncached_and_dumps_only_when_asked(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=true")
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/cache")
  env = programs._env("/tmp/dump", "async-collective-creator")
  assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] == "1"
  # A cache would make the timed repeats cache hits.
  assert env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
  assert "JAX_COMPILATION_CACHE_DIR" not in env
  assert env["XLA_FLAGS"].split() == [
    "--xla_cpu_use_thunk_runtime=true",
    "--xla_dump_to=/tmp/dump",
    "--xla_dump_hlo_as_text",
    "--xla_dump_hlo_pass_re=async-collective-creator",
  ]
  monkeypatch.delenv("XLA_FLAGS")
  assert programs._env()["XLA_FLAGS"] == ""


def test_child_env_imports_this_checkouts_hlo_tools():
  # The child must import hlo_tools even when it is not installed: the directory
  # that holds the package goes first on its path.
  assert programs._env()["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_run_child_passes_the_spec_and_returns_its_result(monkeypatch):
  seen = {}

  def child(cmd, **kwargs):
    spec = json.loads(cmd[-1])
    seen.update(spec)
    with open(spec["result"], "w") as f:
      json.dump({"lower_s": [0.5], "compile_s": [1.5, 2.5]}, f)
    return subprocess.CompletedProcess(cmd, 0, "", "")

  monkeypatch.setattr(programs.subprocess, "run", child)
  program = {"name": "ring", "layers": 4}
  assert programs.compile_times(program, 2) == [1.5, 2.5]
  assert seen["program"] == program and seen["repeats"] == 2 and seen["text_out"] is None


def test_run_child_failure_names_the_childs_last_line(monkeypatch):
  def failing(cmd, **kwargs):
    return subprocess.CompletedProcess(cmd, 3, "", "Traceback ...\nValueError: bad layers\n")

  monkeypatch.setattr(programs.subprocess, "run", failing)
  with pytest.raises(RuntimeError, match=r"^bench compile child failed \(exit 3\): ValueError"):
    programs.run_child({"name": "ring", "layers": 0})
