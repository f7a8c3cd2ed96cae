"""hlo_tools.ops.dump: the stage directory (stages, manifest, XLA's files) of a compile
and of an indexed XLA dump folder.

Every compile runs in a child process (as the command itself does), so these tests
never initialize jax's backend in pytest's process.
"""

import json
import os
import subprocess
import sys

import pytest

from hlo_tools.errors import DumpError
from hlo_tools.hlo import buffer_assignment
from hlo_tools.ops import dump

from conftest import FIXTURES as FIXTURES_DIR, ROOT as ROOT_DIR
from dump_cli import dump_env, run_dump, while_bodies

ROOT = str(ROOT_DIR)
FIXTURES = str(FIXTURES_DIR)
SMALL = ["--seq_len=512", "--num_heads=4", "--num_kv_heads=2", "--head_dim=32"]
# A training script's --xla_dump_to folder: four programs, two with ring permutes.
TEXT_DUMP = FIXTURES_DIR / "training_script_1x1x8.xla_dump"
PROGRAMS = [
  "module_0001.jit_init",
  "module_0669.jit_train_step",
  "module_1383.jit_eval_step",
  "module_2066.jit__lambda",
]
TRAIN, EVAL = PROGRAMS[1], PROGRAMS[2]


@pytest.fixture(scope="module")
def gpu_dumps(tmp_path_factory):
  base = tmp_path_factory.mktemp("gpu")
  outs = {}
  for topo, extra in (("1x1x8", []), ("1x2x4", ["--all_passes"])):
    out = base / topo
    proc = run_dump(f"--topology={topo}", f"--out={out}", *SMALL, *extra)
    assert proc.returncode == 0, proc.stderr
    outs[topo] = out
  return outs


@pytest.mark.long
@pytest.mark.parametrize("topo", ["1x1x8", "1x2x4"])
def test_gpu_dump_has_async_permutes_in_while_body(gpu_dumps, topo):
  out = gpu_dumps[topo]
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["target"]["topology"] == topo
  assert manifest["target"]["num_devices"] == 8
  assert manifest["versions"]["jax"] and manifest["versions"]["jaxlib"]
  for stage, fname in (
    ("stablehlo", "stablehlo.mlir"),
    ("before_optimizations", "before_optimizations.hlo"),
    ("after_optimizations", "after_optimizations.hlo"),
  ):
    assert manifest["stages"][stage] == fname
    assert (out / fname).stat().st_size > 0
  text = (out / "after_optimizations.hlo").read_text()
  bodies = while_bodies(text)
  assert any("collective-permute-start(" in b and "collective-permute-done(" in b for b in bodies)
  assert '"backend":"DEFAULT"' in text
  # Its buffer assignment lies beside it, where verify and explain look for it.
  placed = buffer_assignment.parse(
    (out / "after_optimizations-buffer-assignment.txt").read_text(), "placed"
  )
  assert any(name.startswith("collective-permute-start") for name in placed)


@pytest.mark.long
def test_manifest_lists_passes_in_xla_order(gpu_dumps):
  out = gpu_dumps["1x2x4"]
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["options"]["all_passes"] is True
  passes = manifest["modules"][manifest["main_module"]]["passes"]
  seqs = [p["seq"] for p in passes]
  assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
  # The sequence number in each file name is XLA's own dump counter.
  for p in passes:
    assert f".{p['seq']:04d}.{p['pipeline']}.after_{p['pass']}." in p["file"]
    assert (out / manifest["xla_dump_dir"] / p["file"]).exists()
  names = [p["pass"] for p in passes]
  assert "async-collective-creator" in names
  # Before the creator the loop holds sync permutes; the creator made them async.
  from hlo_tools.model import dumps  # pylint: disable=import-outside-toplevel

  text = dumps.pass_snapshot_text(
    str(out / manifest["xla_dump_dir"]),
    "async-collective-creator",
    manifest["main_module"],
    when="before",
  )
  assert any(" collective-permute(" in b for b in while_bodies(text))
  assert "collective-permute-start" not in text
  after = dumps.pass_snapshot_text(
    str(out / manifest["xla_dump_dir"]), "async-collective-creator", manifest["main_module"]
  )
  assert any("collective-permute-start(" in b for b in while_bodies(after))


@pytest.mark.long
def test_cpu_dump_writes_manifest_and_stages(tmp_path):
  out = tmp_path / "cpu"
  proc = run_dump(
    "--cpu_devices=4",
    f"--out={out}",
    "--seq_len=128",
    "--num_heads=2",
    "--num_kv_heads=1",
    "--head_dim=16",
    "--dtype=f32",
    "--nocausal",
  )
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["target"] == {"platform": "cpu", "num_devices": 4}
  assert manifest["source"]["config"]["causal"] is False
  assert "collective-permute" in (out / "after_optimizations.hlo").read_text()
  assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # temp dir renamed


def test_index_existing_xla_dump(tmp_path):
  xla_dir = tmp_path / "raw"
  code = (
    "import jax, jax.numpy as jnp\njax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones(8)).compile()\n"
  )
  env = dict(
    dump_env(),
    JAX_PLATFORMS="cpu",
    XLA_FLAGS=f"--xla_dump_to={xla_dir} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=.*",
  )
  subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
  out = tmp_path / "indexed"
  proc = run_dump(str(xla_dir), f"--out={out}")
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["source"] == {"kind": "xla_dump", "dir": str(xla_dir)}
  assert set(manifest["stages"]) == {"before_optimizations", "after_optimizations"}
  module = manifest["modules"][manifest["main_module"]]
  assert module["name"].startswith("jit_")
  seqs = [p["seq"] for p in module["passes"]]
  assert seqs and seqs == sorted(seqs)
  assert "HloModule" in (out / "after_optimizations.hlo").read_text()


def _cli(*args, **kwargs):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
    **kwargs,
  )


def test_dump_of_the_folder_keeps_every_program(tmp_path):
  copy = tmp_path / "copy"
  result = _cli("dump", TEXT_DUMP, f"--out={copy}", "--quiet")
  assert result.returncode == 0, result.stderr[-2000:]
  manifest = json.loads((copy / "manifest.json").read_text())
  # The main module is the step, not the last program compiled (the metrics lambda).
  assert manifest["main_module"] == TRAIN
  assert {p["module"]: p["collective_permutes"] for p in manifest["programs"]} == {
    PROGRAMS[0]: 0,
    TRAIN: 2,
    EVAL: 1,
    PROGRAMS[3]: 0,
  }
  result = _cli("verify", f"{copy}:after_optimizations", "--format=json")
  assert result.returncode == 0, result.stderr[-2000:]
  assert [p["program"] for p in json.loads(result.stdout)["programs"]] == [TRAIN, EVAL]


# ---------------------------------------------------------------------------------------
# Indexing an XLA dump folder, in-process (nothing compiled).

# A `hlo-tools dump --all_passes` of a ring's gradient on 1x2x4, its snapshots pruned to
# those that change a collective-permute line.
PASSES = FIXTURES_DIR / "ring_product_grad_1x2x4.passes" / "xla_dump"
PASSES_KEY = "module_0001.jit_ring_product_grad"


def test_indexing_copies_each_stage_with_its_config_beside(tmp_path):
  out = tmp_path / "indexed"
  manifest = dump.dump({"kind": "xla_dump", "dir": str(PASSES)}, str(out), progress=False)
  assert manifest["main_module"] == PASSES_KEY
  assert manifest["stages"] == {
    "after_optimizations": "after_optimizations.hlo",
    "before_async": "before_async.hlo",
    "before_optimizations": "before_optimizations.hlo",
  }
  xla = {
    "after_optimizations": f"{PASSES_KEY}.sm_9.0a_gpu_after_optimizations.txt",
    "before_optimizations": f"{PASSES_KEY}.before_optimizations.txt",
    # The last snapshot before async-collective-creator: after the combiner.
    "before_async": f"{PASSES_KEY}.0047.post-fusion_optimization.after_collective-permute-"
    "combiner.before_collective-backend-assigner.txt",
  }
  config = (PASSES / f"{PASSES_KEY}.config.pbtxt").read_text()
  for stage, fname in xla.items():
    assert (out / f"{stage}.hlo").read_text() == (PASSES / fname).read_text(), stage
    assert (out / f"{stage}.config.pbtxt").read_text() == config, stage
  # XLA's file names say a GPU compile; its config, 8 devices; no topology recorded.
  assert manifest["target"]["platform"] == "cuda" and manifest["target"]["topology"] is None
  assert manifest["target"]["num_devices"] == 8
  assert manifest["partition_to_device"] == list(range(8))
  assert manifest["programs"] == [{"module": PASSES_KEY, "collective_permutes": 2}]
  assert json.loads((out / "manifest.json").read_text()) == manifest
  assert sorted(os.listdir(out / "xla_dump")) == sorted(os.listdir(PASSES))


def test_out_inside_the_dump_folder_is_refused(tmp_path):
  folder = tmp_path / "xla"
  folder.mkdir()
  (folder / "keep.txt").write_text("x")
  with pytest.raises(DumpError, match="is the XLA dump folder .* holds it or lies in it"):
    dump.dump({"kind": "xla_dump", "dir": str(folder)}, str(folder / "index"), progress=False)
  assert os.listdir(folder) == ["keep.txt"]


def test_a_second_dump_replaces_the_first_only_with_overwrite(tmp_path):
  out = tmp_path / "indexed"
  source = {"kind": "xla_dump", "dir": str(PASSES)}
  dump.dump(source, str(out), progress=False)
  (out / "stale.txt").write_text("from before")
  with pytest.raises(DumpError, match=r"exists and is not empty \(use --overwrite\)"):
    dump.dump(source, str(out), progress=False)
  assert (out / "stale.txt").exists()
  dump.dump(source, str(out), overwrite=True, progress=False)
  assert not (out / "stale.txt").exists() and (out / "manifest.json").exists()
  # No work directory left beside it.
  assert os.listdir(tmp_path) == ["indexed"]


def test_copy_dump_folder_copies_subfolders_and_refuses_a_fifo(tmp_path):
  folder = tmp_path / "xla"
  (folder / "sub").mkdir(parents=True)
  (folder / "a.txt").write_text("a")
  (folder / "sub" / "b.txt").write_text("b")
  dump.copy_dump_folder(str(folder), str(tmp_path / "copy"))
  assert (tmp_path / "copy" / "a.txt").read_text() == "a"
  assert (tmp_path / "copy" / "sub" / "b.txt").read_text() == "b"
  os.mkfifo(folder / "z.pipe")
  with pytest.raises(DumpError, match=r"z\.pipe: a FIFO in the dump folder, not a regular file"):
    dump.copy_dump_folder(str(folder), str(tmp_path / "copy2"))
