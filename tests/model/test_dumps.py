"""hlo_tools.model.dumps: XLA dump folders indexed by module and pass, and the module at
any stage or pass of one."""

import json
import shutil

import pytest

from hlo_tools.errors import DumpReadError, InputError
from hlo_tools.model import dumps

from conftest import FIXTURES

# `hlo-tools dump --all_passes` of one program (manifest.json, xla_dump/ of its passes).
PASSES = FIXTURES / "ring_product_grad_1x2x4.passes"
PASSES_XLA = PASSES / "xla_dump"
PASS_FILE = "module_0001.jit_ring_product_grad.{}.txt"
# XLA's own --xla_dump_to folder of four programs; ring permutes in the two steps only.
SCRIPT = FIXTURES / "training_script_1x1x8.xla_dump"
KEYS = [
  "module_0001.jit_init",
  "module_0669.jit_train_step",
  "module_1383.jit_eval_step",
  "module_2066.jit__lambda",
]


def test_index_groups_files_by_module_and_orders_passes():
  modules = dumps.index_xla_dump(str(SCRIPT))
  assert list(modules) == KEYS
  step = modules["module_0669.jit_train_step"]
  assert (step["id"], step["name"]) == (669, "jit_train_step")
  assert step["stages"] == {
    "before_optimizations": "module_0669.jit_train_step.before_optimizations.txt",
    "after_optimizations": "module_0669.jit_train_step.sm_9.0a_gpu_after_optimizations.txt",
  }
  assert step["passes"] == [
    {
      "seq": 0,
      "pipeline": "async-collective-conversion",
      "pass": "pipeline-start",
      "next": "async-collective-creator",
      "file": "module_0669.jit_train_step.0000.async-collective-conversion.after_pipeline-start"
      ".before_async-collective-creator.txt",
    }
  ]
  passes = dumps.index_xla_dump(str(PASSES_XLA))["module_0001.jit_ring_product_grad"]["passes"]
  assert [p["seq"] for p in passes] == sorted(p["seq"] for p in passes)
  assert len(passes) == 16


def test_main_module_is_the_jit_asked_for_else_the_most_passes():
  modules = dumps.index_xla_dump(str(SCRIPT))
  assert dumps.main_module(modules, "jit_train_step") == "module_0669.jit_train_step"
  # One pass each, all optimized: the last id.
  assert dumps.main_module(modules) == "module_2066.jit__lambda"
  modules["module_0001.jit_init"]["passes"].append({"seq": 1})
  assert dumps.main_module(modules) == "module_0001.jit_init"
  assert dumps.main_module({}) is None


@pytest.mark.parametrize(
  "when,pass_name,occurrence,seq_name",
  [
    ("after", "collective-permute-combiner", -1, "0047.post-fusion_optimization"),
    # The assigner changed nothing: its input, the file before it.
    ("after", "collective-backend-assigner", -1, "0047.post-fusion_optimization"),
    # No file names the creator as next: the last one before its own.
    ("before", "async-collective-creator", -1, "0047.post-fusion_optimization"),
    ("after", "call-inliner", -1, "0014.spmd-partitioner"),
    ("after", "call-inliner", 0, "0002.pre-spmd-partitioner"),
    ("before", "collective-permute-motion", -1, "0014.spmd-partitioner"),
  ],
)
def test_pass_snapshot_text(when, pass_name, occurrence, seq_name):
  [path] = PASSES_XLA.glob(PASS_FILE.format(seq_name + ".*"))
  got = dumps.pass_snapshot_text(str(PASSES_XLA), pass_name, occurrence=occurrence, when=when)
  assert got == path.read_text()


def test_a_pass_without_a_snapshot_is_a_dump_read_error():
  with pytest.raises(DumpReadError, match=r"no dump after pass 'no-such-pass' in module "):
    dumps.pass_snapshot_text(str(PASSES_XLA), "no-such-pass")
  with pytest.raises(DumpReadError, match=r"module 'module_9\.x' not in "):
    dumps.pass_snapshot_text(str(PASSES_XLA), "call-inliner", "module_9.x")
  with pytest.raises(ValueError, match="when must be 'after' or 'before'"):
    dumps.pass_snapshot_text(str(PASSES_XLA), "call-inliner", when="during")


def test_read_stage_by_name_pass_and_occurrence():
  source = dumps.read_stage(str(PASSES), "before_async")
  assert source.label == f"{PASSES}:before_async"
  [combined] = PASSES_XLA.glob(PASS_FILE.format("0047.*"))
  assert source.text == combined.read_text()
  first = dumps.read_stage(str(PASSES), "after:call-inliner#0")
  [inlined] = PASSES_XLA.glob(PASS_FILE.format("0002.*"))
  assert first.text == inlined.read_text()
  optimized = dumps.read_stage(str(PASSES), "after_optimizations")
  assert (
    optimized.text
    == (
      PASSES_XLA / "module_0001.jit_ring_product_grad.sm_9.0a_gpu_after_optimizations.txt"
    ).read_text()
  )


@pytest.mark.parametrize(
  "stage,message",
  [
    ("bogus", "unknown stage 'bogus'; expected before_optimizations"),
    ("after:call-inliner#x", "bad occurrence 'x': expected PASS#N, N an integer"),
    ("after:call-inliner#5", "pass 'call-inliner' has no run #5"),
    ("after:no-such-pass", "no dump after pass 'no-such-pass'"),
  ],
)
def test_read_stage_refuses_a_stage_it_cannot_find(stage, message):
  with pytest.raises(InputError, match=message):
    dumps.read_stage(str(PASSES), stage)


def test_a_dump_without_passes_names_the_flags_that_make_them(tmp_path):
  shutil.copyfile(
    SCRIPT / "module_0669.jit_train_step.sm_9.0a_gpu_after_optimizations.txt",
    tmp_path / "module_0669.jit_train_step.sm_9.0a_gpu_after_optimizations.txt",
  )
  with pytest.raises(InputError) as e:
    dumps.read_stage(str(tmp_path), "before_async")
  assert "no per-pass snapshots" in str(e.value)
  assert "--all_passes" in str(e.value) and "--xla_dump_hlo_pass_re=.*" in str(e.value)
  with pytest.raises(InputError, match="no before_optimizations module in this dump"):
    dumps.read_stage(str(tmp_path), "before_optimizations")


def test_programs_of_a_folder_of_several():
  assert dumps.program_keys(str(SCRIPT)) == KEYS
  counts = {k: dumps.program_permutes(str(SCRIPT), k) for k in KEYS}
  assert counts["module_0001.jit_init"] == 0 and counts["module_2066.jit__lambda"] == 0
  assert counts["module_0669.jit_train_step"] > 0 and counts["module_1383.jit_eval_step"] > 0
  assert dumps.program_permutes(str(SCRIPT), "module_9999.none") is None
  kept, skipped = dumps.select_programs(str(SCRIPT))
  assert kept == ["module_0669.jit_train_step", "module_1383.jit_eval_step"]
  assert skipped == [
    ("module_0001.jit_init", "no collective-permutes"),
    ("module_2066.jit__lambda", "no collective-permutes"),
  ]
  assert dumps.programs_note("D", kept, skipped) == (
    "D: 4 programs; deciding 2 with collective-permutes (module_0669.jit_train_step, "
    "module_1383.jit_eval_step); skipped module_0001.jit_init (no collective-permutes); "
    "module_2066.jit__lambda (no collective-permutes)"
  )


@pytest.mark.parametrize(
  "name",
  ["module_0669.jit_train_step", "jit_train_step", "train_step", "669", "0669", "module_0669"],
)
def test_resolve_program_by_key_name_or_id(name):
  assert dumps.resolve_program(str(SCRIPT), name) == "module_0669.jit_train_step"


def test_resolve_program_lists_the_programs_when_none_or_several_match(tmp_path):
  with pytest.raises(InputError, match=r"no program 'predict' in this dump folder; its programs: "):
    dumps.resolve_program(str(SCRIPT), "predict")
  for key in ("module_0001.jit_f", "module_0002.jit_f"):
    shutil.copyfile(
      SCRIPT / "module_0001.jit_init.before_optimizations.txt",
      tmp_path / f"{key}.before_optimizations.txt",
    )
  with pytest.raises(InputError, match=r"'f' names 2 programs \(module_0001.jit_f, module_0002"):
    dumps.resolve_program(str(tmp_path), "f")


def test_split_spec_and_program():
  assert dumps.split_spec(f"{SCRIPT}:train_step:after_optimizations") == (
    str(SCRIPT),
    "train_step:after_optimizations",
  )
  assert dumps.split_spec(str(SCRIPT / "module_0001.jit_init.before_optimizations.txt")) is None
  assert dumps.split_spec("-") is None
  assert dumps.split_spec("/no/such/dir:after_optimizations") is None
  assert dumps.split_program(str(SCRIPT), "train_step:after_optimizations") == (
    "module_0669.jit_train_step",
    "after_optimizations",
  )
  assert dumps.split_program(str(SCRIPT), "after:call-inliner") == (None, "after:call-inliner")
  with pytest.raises(InputError, match="name a stage of program module_0669.jit_train_step"):
    dumps.split_program(str(SCRIPT), "train_step")
  assert dumps.is_stage("before_async") and dumps.is_stage("before:x")
  assert not dumps.is_stage("train_step")


def test_read_input_of_a_program_a_file_and_what_is_neither(tmp_path):
  source = dumps.read_input(f"{SCRIPT}:train_step:after_optimizations")
  assert source.label == f"{SCRIPT}:module_0669.jit_train_step:after_optimizations"
  assert source.module.name == "jit_train_step"
  with pytest.raises(InputError, match=r"the folder holds 4 programs; diff reads one"):
    dumps.read_input(f"{SCRIPT}:after_optimizations", what="diff")
  with pytest.raises(InputError, match=r"is a directory; name a stage"):
    dumps.read_input(str(SCRIPT))
  with pytest.raises(InputError, match=r"cannot read: No such file or directory"):
    dumps.read_input(str(tmp_path / "missing.hlo"))


def test_config_and_manifest_of_a_dump(tmp_path):
  assert dumps.module_config_path(str(SCRIPT), "module_0669.jit_train_step") == str(
    SCRIPT / "module_0669.jit_train_step.config.pbtxt"
  )
  assert dumps.manifest_topology(str(PASSES)) == "1x2x4"
  assert dumps.manifest_topology(str(SCRIPT)) is None
  (tmp_path / "manifest.json").write_text(
    json.dumps({"stages": {"after_optimizations": "after_optimizations.hlo"}})
  )
  assert dumps.manifest_stage(str(tmp_path / "after_optimizations.hlo")) == "after_optimizations"
  assert dumps.manifest_stage(str(tmp_path / "other.hlo")) is None
