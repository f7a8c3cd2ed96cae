"""hlo_tools.ops.dump_target: the Target a dump compiles for and the mesh a source runs
on (--mesh parsed and checked, the defaults), in-process and through real compiles.

Every compile runs in a child process (as the command itself does), so these tests
never initialize jax's backend in pytest's process.
"""

import json
import os
import re

import pytest

from hlo_tools.errors import DumpError
from hlo_tools.ops import dump_target
from hlo_tools.ops.dump_target import Target

from conftest import ROOT as ROOT_DIR
from dump_cli import run_dump, while_bodies

ROOT = str(ROOT_DIR)


def test_parse_mesh_keeps_order_and_sizes():
  from hlo_tools.errors import DumpError  # pylint: disable=import-outside-toplevel
  from hlo_tools.ops import dump_target  # pylint: disable=import-outside-toplevel

  assert dump_target.parse_mesh("cp:4,tp:2") == [["cp", 4], ["tp", 2]]
  assert dump_target.parse_mesh("tp:8, dp:1") == [["tp", 8], ["dp", 1]]
  for bad in ("cp", "cp:0", "cp:-2", "cp:x", "4:cp", "cp:4,", "c-p:4", "cp:4,cp:2", ""):
    with pytest.raises(DumpError, match="--mesh"):
      dump_target.parse_mesh(bad)


def test_user_function_dumps_with_one_mesh_axis(tmp_path):
  out = tmp_path / "shift"
  proc = run_dump(
    "hlo_tools.programs.ring_attention:neighbour_shift",
    "--topology=1x2x4",
    "--arg=1,256,2,16:bf16:None,cp",
    "--out_spec=None,cp",
    f"--out={out}",
  )
  assert proc.returncode == 0, proc.stderr
  text = (out / "after_optimizations.hlo").read_text()
  assert "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7}}" in text
  # No --mesh: one axis over all devices, named by the partition specs.
  assert json.loads((out / "manifest.json").read_text())["mesh"] == {"cp": 8}


@pytest.mark.long
def test_train_step_dump_across_hosts(tmp_path):
  # Two hosts of two GPUs: the default mesh puts tp inside a host, the ring across.
  out = tmp_path / "train"
  proc = run_dump(
    "--program=train_step",
    "--topology=1x2x2",
    "--num_layers=1",
    "--hidden=256",
    "--mlp=512",
    "--vocab=256",
    "--seq_len=1024",
    "--num_heads=4",
    "--num_kv_heads=2",
    "--head_dim=64",
    "--quiet",
    f"--out={out}",
  )
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["mesh"] == {"cp": 2, "tp": 2}
  assert manifest["target"]["topology"] == "1x2x2"
  assert manifest["source"] == {
    "kind": "program",
    "program": "train_step",
    "config": {
      "seq_len": 1024,
      "num_heads": 4,
      "num_kv_heads": 2,
      "head_dim": 64,
      "num_layers": 1,
      "hidden": 256,
      "mlp": 512,
      "vocab": 256,
    },
  }
  text = (out / "after_optimizations.hlo").read_text()
  # Forward K/V, backward K/V with gradients, then the gradients home: all on the
  # cp ring {0<->2, 1<->3}, which crosses the hosts.
  pairs = re.findall(r"collective-permute-start\(.*?source_target_pairs=(\{[^ ]*\}),", text)
  assert len(pairs) == 3, pairs
  assert set(pairs) == {"{{0,2},{2,0},{1,3},{3,1}}"}
  assert any("collective-permute-start" in b for b in while_bodies(text))
  # Megatron's all-reduces over tp (inside a host) and the gradient sum over cp.
  assert "replica_groups={{0,1},{2,3}}" in text
  assert "replica_groups={{0,2},{1,3}}" in text


# ---------------------------------------------------------------------------------------
# Target and the mesh, in-process (nothing compiled).


def test_a_cpu_target_is_its_host_devices():
  target = Target(cpu_devices=4)
  target.validate()
  assert target.num_devices() == 4 and target.devices_per_host() == 4
  assert target.describe() == {"platform": "cpu", "num_devices": 4}
  with pytest.raises(DumpError, match="--cpu_devices must be >= 1, got 0"):
    Target(cpu_devices=0).validate()


def test_a_gpu_target_is_its_topologys_devices():
  # 1x2x4: one slice of two hosts of four GPUs.
  target = Target(topology="1x2x4")
  target.validate()
  assert target.num_devices() == 8 and target.devices_per_host() == 4
  described = target.describe()
  assert described["platform"] == "cuda" and described["topology"] == "1x2x4"
  assert described["num_devices"] == 8 and os.path.isabs(described["target_config"])
  # The child rebuilds it from plain fields, and parses the spec itself.
  assert target.for_child() == {
    "topology": "1x2x4",
    "cpu_devices": 8,
    "target_config": dump_target.DEFAULT_TARGET_CONFIG,
  }


def test_a_missing_target_config_is_refused(tmp_path):
  target = Target(topology="1x1x8", target_config=str(tmp_path / "none.pbtxt"))
  with pytest.raises(DumpError, match="--target_config .*none.pbtxt' is not a file"):
    target.validate()


def test_format_mesh_and_out_specs():
  assert dump_target.format_mesh([["cp", 4], ["tp", 2]]) == "cp:4,tp:2"
  assert dump_target.out_specs({}) == ["cp"]
  assert dump_target.out_specs({"out_spec": "None,cp"}) == ["None,cp"]
  assert dump_target.out_specs({"out_spec": ["cp", None]}) == ["cp", ""]


def function(*args, out_spec=None, **extra):
  return dict(kind="function", function="m:f", args=list(args), out_spec=out_spec, **extra)


def test_default_mesh_is_one_axis_named_by_the_specs():
  target = Target(cpu_devices=8)
  assert dump_target.resolve_mesh({"kind": "ring", "config": {}}, target) == [["cp", 8]]
  source = function("16:f32:sp", out_spec="sp")
  assert dump_target.resolve_mesh(source, target) == [["sp", 8]]
  # Specs that name no axis: cp.
  assert dump_target.resolve_mesh(function("16:f32", out_spec=""), target) == [["cp", 8]]


def test_two_axes_need_a_mesh():
  with pytest.raises(DumpError, match="give their sizes with --mesh, e.g. --mesh=cp:8,tp:1"):
    dump_target.resolve_mesh(function("16,4:f32:cp,tp"), Target(cpu_devices=8))


def test_a_given_mesh_must_fit_the_target_and_the_source():
  target = Target(cpu_devices=8)
  with pytest.raises(DumpError, match="--mesh cp:4 has 4 devices, but the target has 8"):
    dump_target.resolve_mesh({"kind": "ring", "config": {}}, target, "cp:4")
  with pytest.raises(DumpError, match="the ring-attention example has one mesh axis, cp"):
    dump_target.resolve_mesh({"kind": "ring", "config": {}}, target, "cp:4,tp:2")
  with pytest.raises(DumpError, match="mesh axis 'tp', which the mesh cp:8 does not have"):
    dump_target.resolve_mesh(function("16,4:f32:cp,tp"), target, "cp:8")
  assert dump_target.resolve_mesh(function("16,4:f32:cp,tp"), target, "cp:4,tp:2") == [
    ["cp", 4],
    ["tp", 2],
  ]
