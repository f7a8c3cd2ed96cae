"""Which XLA a plan is for: one setting (--per-op-modes), one default (a stock XLA),
the same in nvshmem-opt, explain, verify and report.

A stock XLA's permute thunk runs the program's one mode, the flag
xla_gpu_collective_permute_mode (xla/service/gpu/thunk_emitter.cc:1948 at
131bf41a); the series for jax v0.11.0's XLA runs each permute's own. So on the
default target the driver writes no per-permute peer mode, and what it writes
passes verify on the same target; per-permute modes pass only where the target
says the series.
"""

import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, NVSHMEM_OPT

pytestmark = pytest.mark.skipif(not NVSHMEM_OPT.exists(), reason="nvshmem-opt is not built")

# Peer memory wins every permute of this train step (all 8 GPUs in one process,
# as its module config says; nvshmem_opt/lit/backends_peer.test).
MODULE = FIXTURES / "train_step_1x1x8.before_async.hlo"
PEER = "COLLECTIVES_PEER_MEMORY"


def _driver(*args):
  return subprocess.run(
    [str(NVSHMEM_OPT), *map(str, args)], capture_output=True, text=True, timeout=300, check=False
  )


def _tools(*args):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )


def _rewrite(tmp_path, name, *flags):
  out = tmp_path / f"{name}.hlo"
  # The module config beside the output: the placement the tools read again.
  proc = _driver(MODULE, "--topology=1x1x8", "--backends=nccl,peer", *flags, "-o", out)
  assert proc.returncode == 0, proc.stderr
  return out, proc.stderr


def _verify(path, *flags):
  proc = _tools("verify", path, "--topology=1x1x8", "--backends=nccl,peer", "--format=json", *flags)
  assert proc.returncode in (0, 1), proc.stderr
  return json.loads(proc.stdout)


def test_stock_default_writes_what_a_stock_xla_runs_and_says_so(tmp_path):
  # --annotate records the core's per-op choice (peer) beside the NCCL written.
  out, err = _rewrite(tmp_path, "stock", "--annotate")
  assert '_nvshmem_plan="peer"' in out.read_text()
  assert PEER not in out.read_text()
  assert "written as NCCL: the target is a stock XLA" in err
  assert "--per-op-modes" in err
  result = _verify(out)
  assert result["passed"], result["failed_checks"]
  [selection] = [c for c in result["checks"] if c["name"] == "selection"]
  assert any(
    "a stock XLA runs the program's one mode" in r["message"] for r in selection["results"]
  )


def test_per_op_modes_write_each_permute_and_pass_only_on_the_series(tmp_path):
  out, err = _rewrite(tmp_path, "series", "--per-op-modes")
  assert PEER in out.read_text() and "stock XLA" not in err
  assert _verify(out, "--per-op-modes")["passed"]
  # The same plan on a stock XLA: its thunks run the flag's mode, not the ops'.
  stock = _verify(out)
  assert not stock["passed"] and "permute-mode" in stock["failed_checks"]


@pytest.mark.parametrize("command", ["nvshmem-opt", "explain", "verify", "report"])
def test_per_op_modes_with_nvshmem_exits_2(command, tmp_path):
  # The default backend set is the pinned XLA's, nccl,nvshmem: no XLA runs both.
  args = [MODULE, "--topology=1x1x8", "--per-op-modes"]
  if command == "nvshmem-opt":
    proc = _driver(*args, "--mode=explain")
  else:
    proc = _tools(command, *args, *(["--out", tmp_path / "r"] if command == "report" else []))
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "--per-op-modes and the backend set nccl,nvshmem" in lines[0], lines
  assert "Traceback" not in proc.stderr


def test_one_setting_one_default_in_every_command():
  from hlo_tools.commands import common
  from hlo_tools.model import options

  assert options.PER_OP_MODES_DEFAULT is False
  for command in ("explain", "verify", "report"):
    proc = _tools(command, "--help")
    assert "--per-op-modes" in proc.stdout, command
    assert " ".join(options.PER_OP_MODES_HELP.split()[:6]) in " ".join(proc.stdout.split())
  assert "--per-op-modes" in _driver("--help").stdout
  assert callable(common.add_target_flag)
