"""benchmarks/ring_e2e.py on the CPU: its arguments, routes and CSV, and whole runs of
tiny ring attention in two processes (the hooked pass, a hung run killed by the
watchdog, the budget)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CPU_CODEGEN_O0, FIXTURES, GPU, MULTICAST_OFF, load_gpu_script

pytestmark = pytest.mark.long


e2e = load_gpu_script("ring_e2e")
_TINY = [
  "--platform=cpu",
  "--num-heads=4",
  "--num-kv-heads=2",
  "--head-dim=16",
  "--q-chunk=64",
  "--k-chunk=64",
  "--iters=2",
  "--warmup=1",
  "--check-seq=128",
]


def test_e2e_args_and_env():
  a = e2e.parse_args(["--modes=nccl,peer,pass", "--seq-lens=64K,32K", "--budget-s=100"])
  assert a.seq_len_list == [32768, 65536] and a.mode_list == ["nccl", "peer", "pass"]
  assert a.direction_list == ["fwd", "fwd_bwd"] and a.topology == "1x1x2"
  assert e2e.items_of(a)[:2] == [(32768, "fwd"), (32768, "fwd_bwd")]
  for bad in (
    ["--modes=nvshmem_flag"],
    ["--directions=bwd"],
    ["--iters=3"],
    ["--seq-lens=1001"],
    ["--seq-lens=x"],
  ):
    with pytest.raises(e2e.E2EError):
      e2e.parse_args(bad)
  base = {
    "XLA_FLAGS": "--xla_gpu_collective_permute_mode=symmetric --xla_foo=1",
    "NCCL_NVLS_ENABLE": "1",
  }
  env = e2e.mode_env("peer", base, "gpu", 2, 1)
  assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_gpu_collective_permute_mode=peer"
  assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF
  assert e2e.mode_env("pass", base, "gpu", 2, 1, route="nvshmem")["XLA_FLAGS"] == (
    "--xla_foo=1 --xla_gpu_experimental_enable_nvshmem=true"
  )
  assert "device_count=2" in e2e.mode_env("nccl", {}, "cpu", 1, 2)["XLA_FLAGS"]


def test_e2e_route_follows_the_loop_permute():
  loop = {"permute": "cp.1", "bytes": 1 << 24, "in_loop": True, "plan": "nvshmem"}
  tail = {"permute": "cp.2", "bytes": 1 << 26, "in_loop": False, "plan": "nccl"}
  route, why = e2e.route_for([tail, loop])
  assert route == "nvshmem" and "cp.1" in why and "cannot mix" in why
  assert e2e.route_for([dict(loop, plan="peer")])[0] == "nccl"
  assert e2e.route_for([])[0] == "nccl"


def test_e2e_csv_and_merge(tmp_path):
  a, b, out = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "out.csv"
  e2e.write_csv(
    a,
    e2e.csv_rows(
      [
        {"seq_len": 65536, "direction": "fwd", "mode": "nccl", "step_s": 0.5},
        {"seq_len": 32768, "direction": "fwd", "mode": "nccl", "step_s": 0.25},
        {"seq_len": 32768, "direction": "fwd", "mode": "pass", "step_s": None},
      ]
    ),
  )
  e2e.write_csv(
    b, e2e.csv_rows([{"seq_len": 65536, "direction": "fwd", "mode": "nccl", "step_s": 0.4}])
  )
  assert e2e.main(["merge", str(out), str(a), str(b)]) == 0
  assert out.read_text() == (
    "seq_len,direction,mode,step_s\n32768,fwd,nccl,0.25\n65536,fwd,nccl,0.4\n"
  )
  bad = tmp_path / "bad.csv"
  bad.write_text("mode,seq_len\nx,1\n")
  with pytest.raises(e2e.E2EError, match="bad.csv:1"):
    e2e.read_csv(bad)


def _e2e(tmp_path, *argv, timeout=500):
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  env["XLA_FLAGS"] = CPU_CODEGEN_O0  # each mode adds its own flags to it
  proc = subprocess.run(
    [sys.executable, str(GPU / "ring_e2e.py"), f"--out-dir={tmp_path}", *_TINY, *argv],
    capture_output=True,
    text=True,
    env=env,
    timeout=timeout,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  csv_text = (tmp_path / "ring_step.csv").read_text()
  assert csv_text.splitlines()[0] == "seq_len,direction,mode,step_s"
  return csv_text, json.loads((tmp_path / "ring_e2e.json").read_text())


def test_e2e_two_processes_nccl_and_hooked_pass(tmp_path):
  """Two jax.distributed CPU processes: plain XLA, and the hook's one mode per program."""
  csv_text, res = _e2e(tmp_path, "--num-procs=2", "--modes=nccl,pass", "--seq-lens=256")
  rows = csv_text.strip().splitlines()[1:]
  assert sorted(r.rsplit(",", 1)[0] for r in rows) == [
    "256,fwd,nccl",
    "256,fwd,pass",
    "256,fwd_bwd,nccl",
    "256,fwd_bwd,pass",
  ]
  assert all(float(r.rsplit(",", 1)[1]) > 0 for r in rows)
  for mode in ("nccl", "pass"):
    m = res["modes"][mode]
    assert m["info"]["process_count"] == 2 and m["errors"] == []
    assert [c["ok"] for c in m["checks"]] == [True, True]
    for run in m["runs"]:
      assert run["status"] == "ok" and len(run["median_s_per_rank"]) == 2
      assert run["compile_s"] > 0 and len(run["times_s_rank0"]) == 2
  assert set(res["modes"]["nccl"]["runs"][0]["backends"]) == {"collective-permute:DEFAULT"}
  # The CPU's XLA reads no per-op mode (the hook's probe), so the hook chose one mode
  # for each program and wrote none on an op: two processes of one device each run
  # no peer memory, so the program stays on the default.
  hook = res["modes"]["pass"]["hook"]
  assert hook["xla"]["per_op"] is False and hook["decisions"] == []
  for run in res["modes"]["pass"]["runs"]:
    program = run["hook_program"]
    assert program["applied"] == "COLLECTIVES_PRIVATE_MEMORY"
    assert program["program"]["modes"]["peer"]["refused"]
    assert program["program"]["permutes"] == sum(run["backends"].values())
    assert set(run["backends"]) == {"collective-permute:DEFAULT"}
    assert run["hook_decisions"] == []


def test_e2e_route_watchdog_and_budget(tmp_path):
  """pass without the hook runs the decided mode; a hung run is killed, the rest runs;
  the budget ends the call with every run accounted for."""
  csv_text, res = _e2e(
    tmp_path,
    "--single-process",
    "--num-procs=2",
    "--modes=pass,nccl",
    "--pass-via=route",
    "--seq-lens=128,256,512",
    "--directions=fwd",
    "--hang-at=256",
    "--run-timeout=8",
    "--budget-s=150",
    "--check-seq=0",
    # A table under which NVSHMEM wins these tiny permutes: the
    # test is about the route, not the measured calibration.
    f"--cost-table={FIXTURES}/fast_nvshmem.cost",
  )
  runs = {r["seq_len"]: r for r in res["modes"]["pass"]["runs"]}
  assert runs[128]["status"] == "ok" and runs[128]["pass_route"].startswith("nvshmem: core plan")
  assert runs[256]["status"] == "timeout" and runs[256]["step_s"] is None
  assert runs[512]["status"] == "ok"  # a fresh launch after the kill
  assert set(res["modes"]["pass"]["probe"]["routes"]) == {"128,fwd", "256,fwd", "512,fwd"}
  assert "128,fwd,pass," in csv_text and "256,fwd,pass" not in csv_text
  # nccl has 3 runs too, each done, timed out or skipped for the budget.
  statuses = [r["status"] for r in res["modes"]["nccl"]["runs"]]
  assert len(statuses) == 3 and set(statuses) <= {"ok", "timeout", "skipped"}
