"""The C++ driver end to end on real fixtures: rewrite, report, errors."""

import json
import os
import stat

import pytest

from conftest import FIXTURES, SHARED_DATA, run_nvshmem_opt
from hlo_tools import collectives, hlo_text

BEFORE_ASYNC = sorted(FIXTURES.glob("*.before_async.hlo"))
AFTER_OPT = sorted(FIXTURES.glob("*.after_optimizations.hlo"))


def _topology_for(path):
  # ring_1x2x4.before_async.hlo -> 1x2x4 (the topology it was compiled for).
  return path.name.split(".")[0].split("_")[-1]


@pytest.mark.parametrize("path", BEFORE_ASYNC + AFTER_OPT, ids=lambda p: p.name)
def test_rewrites_every_fixture_and_output_verifies(path, tmp_path):
  out, report = tmp_path / "out.hlo", tmp_path / "report.json"
  result = run_nvshmem_opt(path, f"--topology={_topology_for(path)}", "-o", out,
                           f"--report={report}")
  assert result.returncode == 0, result.stderr
  assert result.stderr == ""
  decisions = json.loads(report.read_text())["decisions"]
  assert decisions, "every fixture has at least one collective-permute"
  module = hlo_text.parse_hlo_file(out)
  permutes = collectives.collective_permutes(module)
  # No sync permute survives; every async one carries the decided backend.
  assert all(p.form != "sync" for p in permutes)
  by_plan = {d["plan"] for d in decisions}
  backends = {p.backend for p in permutes}
  if by_plan == {"nvshmem"}:
    assert backends == {"NVSHMEM"}
  if by_plan == {"nccl"}:
    assert backends == {"DEFAULT"}
  # Output passes the driver (and so XLA's verifier) again, unchanged.
  again = run_nvshmem_opt(out, f"--topology={_topology_for(path)}", "--report=-",
                          "--mode=explain")
  assert again.returncode == 0, again.stderr
  assert json.loads(again.stdout)["changed"] is False


def test_one_host_ring_is_nvshmem_two_hosts_nccl():
  ring = FIXTURES / "ring_1x1x8.before_async.hlo"
  for topology, plan, backend in (("1x1x8", "nvshmem", "NVSHMEM"),
                                  ("1x2x4", "nccl", "DEFAULT"),
                                  ("1x2x4:nvl8", "nvshmem", "NVSHMEM")):
    result = run_nvshmem_opt(ring, f"--topology={topology}", "--report=-",
                             "--mode=explain", "--compare-upstream")
    assert result.returncode == 0, result.stderr
    decision, = json.loads(result.stdout)["decisions"]
    assert decision["plan"] == plan, decision
    assert decision["backend"] == backend
    assert decision["bytes"] == 65536  # K and V blocks: 2 x bf16[1,128,2,64]
    assert decision["upstream"] == backend  # upstream agrees on these three


def test_backward_fixture_has_permutes_in_both_loops():
  result = run_nvshmem_opt(FIXTURES / "ring_bwd_1x2x4.before_async.hlo",
                           "--topology=1x1x8", "--report=-", "--mode=explain")
  decisions = json.loads(result.stdout)["decisions"]
  assert len(decisions) >= 2
  assert len({d["computation"] for d in decisions}) >= 2
  assert {d["plan"] for d in decisions} == {"nvshmem"}


def test_explain_prints_one_block_per_permute():
  result = run_nvshmem_opt(FIXTURES / "ring_2x2x4.before_async.hlo", "--topology=2x2x4",
                           "--mode=explain")
  assert result.returncode == 0
  assert "collective-permute (sync, 32768 bytes, 16 pairs): nccl" in result.stdout
  assert "4 of 16 edges cross the network" in result.stdout


def test_cost_table_changes_the_decision(tmp_path):
  table = tmp_path / "fast_fabric.txt"
  table.write_text("link nccl network 1 900\nsm_interference nccl 4\nsplit_overhead_us 0\n")
  out = tmp_path / "split.hlo"
  result = run_nvshmem_opt(FIXTURES / "ring_1x2x4.before_async.hlo", "--topology=1x2x4",
                           f"--cost-table={table}", "-o", out)
  assert result.returncode == 0, result.stderr
  text = out.read_text()
  assert "collective-permute.nvshmem-start" in text
  assert "collective-permute.nccl-start" in text


def test_reads_serialized_proto(tmp_path):
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel
  text = (FIXTURES / "shift_1x2x4.before_async.hlo").read_text()
  module = _hlo.hlo_module_from_text(text)
  proto = tmp_path / "shift.pb"
  proto.write_bytes(module.as_serialized_hlo_module_proto())
  result = run_nvshmem_opt(proto, "--topology=1x1x8", "--report=-", "--mode=explain")
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout)["decisions"][0]["plan"] == "nvshmem"


@pytest.mark.parametrize("args, message", [
    (["{missing}", "--topology=1x1x8"], "{missing}: no such file"),
    (["{ring}", "--topology=1x2"], "topology spec '1x2': expected SLICESxHOSTSxGPUS"),
    (["{ring}", "--topology=1x2x4:nvl3"], "whole number of hosts"),
    (["{ring}", "--topology=1x1x4"], "needs 8 devices"),
    (["{ring}", "--topology=1x1x8", "--mode=fast"], "unknown --mode 'fast'"),
    (["{ring}", "--topology=1x1x8", "--frobnicate"], "unknown flag '--frobnicate'"),
    (["{ring}"], "--topology=SPEC is required"),
    (["{bad_pairs}", "--topology=1x1x2"], "{bad_pairs}:5:"),
    (["{truncated}", "--topology=1x1x8"], "{truncated}:"),
    (["{garbage}", "--topology=1x1x8"], "neither HLO text"),
    (["{ring}", "--topology=1x1x8", "--cost-table={bad_table}"], "{bad_table}:2: unknown link class"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
  paths = {
      "missing": tmp_path / "nope.hlo",
      "ring": FIXTURES / "ring_1x1x8.before_async.hlo",
      "bad_pairs": tmp_path / "bad_pairs.hlo",
      "truncated": tmp_path / "truncated.hlo",
      "garbage": tmp_path / "garbage.bin",
      "bad_table": tmp_path / "table.txt",
  }
  shift = (FIXTURES / "shift_1x2x4.before_async.hlo").read_text()
  paths["bad_pairs"].write_text(
      "HloModule m, num_partitions=2\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
      "  ROOT c = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,}}\n}\n")
  paths["truncated"].write_text(shift[: len(shift) * 2 // 3])
  paths["garbage"].write_bytes(bytes(range(256)) * 8)
  paths["bad_table"].write_text("margin 0.1\nlink nccl warp 1 2\n")
  formatted = [a.format(**paths) for a in args]
  result = run_nvshmem_opt(*formatted)
  assert result.returncode == 2, (result.stdout, result.stderr)
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert message.format(**paths) in lines[0]


def test_newer_xla_module_is_refused_cleanly():
  newer = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
  if not newer.exists():
    pytest.skip("shared data not present")
  result = run_nvshmem_opt(newer, "--topology=1x1x1")
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1
  assert "HloVerifier rejects the input" in result.stderr


def test_input_is_never_written(tmp_path):
  source = tmp_path / "in.hlo"
  source.write_text((FIXTURES / "ring_1x1x8.before_async.hlo").read_text())
  source.chmod(stat.S_IRUSR)
  before = source.read_bytes()
  result = run_nvshmem_opt(source, "--topology=1x1x8", "-o", source)
  assert result.returncode == 2 and "refusing to overwrite the input" in result.stderr
  result = run_nvshmem_opt(source, "--topology=1x1x8", f"--report={source}")
  assert result.returncode == 2
  link = tmp_path / "alias.hlo"
  os.symlink(source, link)
  result = run_nvshmem_opt(source, "--topology=1x1x8", "-o", link)
  assert result.returncode == 2
  assert source.read_bytes() == before


def test_output_is_atomic_and_deterministic(tmp_path):
  ring = FIXTURES / "ring_2x2x4.after_optimizations.hlo"
  outputs = []
  for i in range(2):
    out = tmp_path / f"out{i}.hlo"
    assert run_nvshmem_opt(ring, "--topology=2x2x4",
                           "-o", out).returncode == 0
    outputs.append(out.read_bytes())
  assert outputs[0] == outputs[1]
  assert not list(tmp_path.glob("*.tmp.*")), "no temp file left behind"


def test_jax_010_mesh_groups_get_a_hint(tmp_path):
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from test_hlo_text import _MESH_ALL_REDUCE  # pylint: disable=import-outside-toplevel
  root = FIXTURES.parents[1]
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  text = subprocess.run(
      [sys.executable, "-c", _MESH_ALL_REDUCE,
       str(root / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt")],
      capture_output=True, text=True, env=env, check=True, timeout=300).stdout
  path = tmp_path / "mesh.hlo"
  path.write_text(text)
  result = run_nvshmem_opt(path, "--topology=1x2x4")
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1
  assert f"{path}:" in result.stderr and "replica_groups=mesh[" in result.stderr


# The same small ring compiled by jax 0.9.1 (tests/fixtures/jax091/README.md): the oldest
# XLA the tools must read. Its text differs from jax 0.10.2's (the combined permute has no
# metadata, a shorter collective_backend_config, nested Triton gemm fusions).
JAX091 = FIXTURES / "jax091"


@pytest.mark.parametrize("stage", ["before_async", "after_optimizations"])
@pytest.mark.parametrize("topology, plan, backend", [("1x2x4", "nccl", "DEFAULT"),
                                                     ("1x2x4:nvl8", "nvshmem", "NVSHMEM")])
def test_jax091_fixtures_rewrite_and_verify(stage, topology, plan, backend, tmp_path,
                                            capsys):
  from hlo_tools import verify  # pylint: disable=import-outside-toplevel
  path = JAX091 / f"ring_1x2x4.{stage}.hlo"
  out, report = tmp_path / "out.hlo", tmp_path / "report.json"
  result = run_nvshmem_opt(path, f"--topology={topology}", "-o", out,
                           f"--report={report}")
  assert result.returncode == 0, result.stderr
  assert result.stderr == ""
  decision, = json.loads(report.read_text())["decisions"]
  assert decision["plan"] == plan, decision
  assert decision["backend"] == backend
  assert decision["bytes"] == 65536  # K and V blocks: 2 x bf16[1,128,2,64]
  permute, = collectives.collective_permutes(hlo_text.parse_hlo_file(out))
  assert permute.form == "start-done" and permute.backend == backend
  assert permute.while_loop is not None
  capsys.readouterr()
  rc = verify.main(["hlo-tools verify", str(out), f"--topology={topology}"])
  captured = capsys.readouterr()
  assert rc == 0, captured.out + captured.err
  assert "all checks pass" in captured.out
