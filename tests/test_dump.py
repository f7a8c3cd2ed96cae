"""`hlo-tools dump`: stage directories, manifests, error handling, fixture regeneration.

Every compile runs in a child process (as the command itself does), so these tests
never initialize jax's backend in pytest's process.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from hlo_tools.hlo import buffer_assignment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SMALL = ["--seq_len=512", "--num_heads=4", "--num_kv_heads=2", "--head_dim=32"]


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


def computations(text):
  """HLO computation name -> body text (a line-based split; enough for these checks)."""
  result, name, lines = {}, None, []
  for line in text.splitlines():
    m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{\s*$", line)
    if m:
      name, lines = m.group(1), []
    elif line.startswith("}") and name:
      result[name] = "\n".join(lines)
      name = None
    elif name:
      lines.append(line)
  return result


def while_bodies(text):
  comps = computations(text)
  names = re.findall(r"\bwhile\(.*?body=%?([\w.\-]+)", text)
  assert names, "no while loop in module"
  return [comps[n] for n in names]


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


def test_index_existing_xla_dump(tmp_path):
  xla_dir = tmp_path / "raw"
  code = (
    "import jax, jax.numpy as jnp\njax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones(8)).compile()\n"
  )
  env = dict(
    _env(),
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


def test_fixtures_are_reproducible(tmp_path):
  names = ["ring_1x2x4", "shift_1x2x4"]
  proc = subprocess.run(
    [sys.executable, os.path.join(ROOT, "scripts", "gen_fixtures.py"), f"--out_dir={tmp_path}"]
    + [f"--only={n}" for n in names],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  made = sorted(os.listdir(tmp_path))
  assert made == sorted(f for f in os.listdir(FIXTURES) if f.split(".")[0] in names)
  for fname in made:
    assert (tmp_path / fname).read_text() == open(os.path.join(FIXTURES, fname)).read(), (
      f"{fname} differs from tests/fixtures: rerun scripts/gen_fixtures.py"
    )


def test_fixtures_are_small():
  # The train step's modules are real programs (two decoder layers, forward,
  # backward, update): about 1 MB after optimization; the rest stay small.
  for fname in os.listdir(FIXTURES):
    limit = 2 * 1024 * 1024 if fname.startswith("train_step_") else 200 * 1024
    assert os.path.getsize(os.path.join(FIXTURES, fname)) < limit, fname


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


# ---------------------------------------------------------------------------------------
# Meshes: --mesh, the defaults, the built-in train step


def tp_cp_block(x):
  """Per-shard function over a (cp, tp) mesh: a cp ring step, then a sum over tp."""
  from jax import lax  # pylint: disable=import-outside-toplevel

  n = lax.axis_size("cp")
  return lax.psum(lax.ppermute(x, "cp", [(i, (i + 1) % n) for i in range(n)]), "tp")


def global_tp_cp(x):
  """A whole program: its own shard_map on the context mesh, then a global sum."""
  import jax  # pylint: disable=import-outside-toplevel
  from jax.sharding import PartitionSpec as P  # pylint: disable=import-outside-toplevel

  step = jax.shard_map(tp_cp_block, in_specs=P("cp", "tp"), out_specs=P("cp"))
  return step(x).sum()


def test_parse_mesh_keeps_order_and_sizes():
  from hlo_tools.errors import DumpError  # pylint: disable=import-outside-toplevel
  from hlo_tools.ops import dump_target  # pylint: disable=import-outside-toplevel

  assert dump_target.parse_mesh("cp:4,tp:2") == [["cp", 4], ["tp", 2]]
  assert dump_target.parse_mesh("tp:8, dp:1") == [["tp", 8], ["dp", 1]]
  for bad in ("cp", "cp:0", "cp:-2", "cp:x", "4:cp", "cp:4,", "c-p:4", "cp:4,cp:2", ""):
    with pytest.raises(DumpError, match="--mesh"):
      dump_target.parse_mesh(bad)


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
      ["tests.test_dump:tp_cp_block", "--arg=16,64:f32:cp,tp", "--mesh=cp:8"],
      ["mesh axis 'tp'", "cp:8"],
    ),
    (["tests.test_dump:tp_cp_block", "--arg=16,64:f32:cp,tp"], ["--mesh=cp:8,tp:1"]),
  ],
)
def test_mesh_errors_are_one_line(tmp_path, args, needles):
  proc = run_dump(*args, "--topology=1x1x8", "--quiet", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, *needles)
  assert os.listdir(tmp_path) == []


def test_mesh_does_not_apply_to_an_xla_dump(tmp_path):
  proc = run_dump(FIXTURES, "--mesh=cp:8", f"--out={tmp_path / 'o'}")
  _one_line_error(proc, "--mesh does not apply")


def test_function_on_a_2d_mesh(tmp_path):
  out = tmp_path / "tp_cp"
  proc = run_dump(
    "tests.test_dump:tp_cp_block",
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


def test_global_function_uses_the_mesh(tmp_path):
  out = tmp_path / "global"
  proc = run_dump(
    "tests.test_dump:global_tp_cp",
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
