"""CPU-only tests of the GPU measurement scripts in gpu/: their pure parts.

What needs a GPU (the timed loops, NCCL, NVSHMEM) is not tested here; the
scripts' CSV and HLO handling, argument parsing and size lists are checked, and
the CSV they write is fed to `hlo-tools heuristics calibrate`'s reader.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT
from hlo_tools.ops.heuristics import calibrate

GPU = ROOT / "gpu"
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1",
                 "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def _load(name):
  spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


p2p = _load("p2p_bench")


# --- p2p_bench: sizes and arguments -------------------------------------------------

def test_default_sizes_are_1k_to_256m_in_powers_of_two():
  sizes = p2p.parse_sizes(p2p.DEFAULT_SIZES)
  assert sizes[0] == 1024 and sizes[-1] == 256 << 20
  assert len(sizes) == 19
  assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))


@pytest.mark.parametrize("text,expected", [
    ("4096", [4096]),
    ("1K,4K,1M", [1024, 4096, 1 << 20]),
    ("1k:8k", [1024, 2048, 4096, 8192]),
    ("1K:64K:4", [1024, 4096, 16384, 65536]),
    ("1M,1K:2K,1M", [1024, 2048, 1 << 20]),  # sorted, no repeats
    ("1G", [1 << 30]),
    ("2MiB", [2 << 20]),
])
def test_p2p_size_lists_parse(text, expected):
  assert p2p.parse_sizes(text) == expected


@pytest.mark.parametrize("text", ["", "1X", "0", "8K:1K", "1K:2K:1", "1K:2K:x",
                                  "1:2:3:4", "-1K"])
def test_p2p_size_lists_refuse_malformed_text(text):
  with pytest.raises(p2p.BenchError):
    p2p.parse_sizes(text)


def test_p2p_defaults_cover_three_backends_1k_to_256m():
  args = p2p.parse_args(["--out=/tmp/x/p2p.csv"])
  assert args.backend_list == ["nccl", "nvshmem", "copy"]
  assert args.copy_out == "/tmp/x/p2p_copy.csv"
  assert args.size_list == p2p.parse_sizes("1K:256M")
  assert args.nprocs is None and not args.no_graph and args.worker is None


def test_p2p_options_override_the_defaults():
  args = p2p.parse_args(["--backends=nvshmem", "--sizes=1K,2K", "--nprocs=4",
                         "--copy-out=c.csv", "--reps=3", "--no-graph"])
  assert args.backend_list == ["nvshmem"] and args.size_list == [1024, 2048]
  assert args.nprocs == 4 and args.copy_out == "c.csv" and args.reps == 3
  assert args.no_graph


@pytest.mark.parametrize("argv", [["--backends=mpi"], ["--backends=,"], ["--nprocs=0"],
                                  ["--reps=0"], ["--warmup=-1"], ["--sizes=1Q"]])
def test_p2p_refuses_bad_arguments(argv):
  with pytest.raises(p2p.BenchError):
    p2p.parse_args(argv)


def test_link_class_and_ring_peers():
  assert p2p.link_class_for(1) == "same_device"
  assert p2p.link_class_for(8) == "nvlink"
  assert p2p.ring_peers(0, 1) == (0, 0)  # the self-ring on one GPU
  assert p2p.ring_peers(0, 4) == (1, 3)
  assert p2p.ring_peers(3, 4) == (0, 2)
  for nbytes in p2p.parse_sizes("1K:1G"):
    assert 5 <= p2p.iterations_for(nbytes) <= 100


def test_merge_keeps_slowest_rank_and_common_sizes():
  per_rank = [{1024: (1e-6, 100, "graph"), 2048: (3e-6, 100, "graph"), 4096: (1, 5, "graph")},
              {1024: (2e-6, 100, "eager"), 2048: (1e-6, 100, "graph")}]
  merged = p2p.merge_rank_results(per_rank)
  assert merged == {1024: (2e-6, 100, "eager+graph"), 2048: (3e-6, 100, "graph")}
  assert p2p.merge_rank_results([]) == {}


def test_child_env_forces_multicast_off(monkeypatch):
  monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
  env = p2p.child_env({"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"})
  for key, value in MULTICAST_OFF.items():
    assert env[key] == value
  assert env["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo"
  # Importing the scripts also sets them for the process itself.
  assert p2p.MULTICAST_OFF == MULTICAST_OFF


# --- p2p_bench: the CSV is what calibrate reads -------------------------------------

def _synthetic_rows(latency_us, bandwidth_gbps, backend, link_class="nvlink"):
  merged = {n: ((latency_us + n / (bandwidth_gbps * 1e3)) * 1e-6, 10, "graph")
            for n in p2p.parse_sizes("1K:256M")}
  return p2p.csv_rows(backend, link_class, merged, 2)


def test_written_csv_calibrates_to_the_generating_line(tmp_path):
  path = tmp_path / "p2p.csv"
  rows = _synthetic_rows(6.0, 400.0, "nccl") + _synthetic_rows(3.0, 500.0, "nvshmem")
  p2p.write_csv(path, rows, ["a comment line"])
  text = path.read_text()
  assert text.startswith("# a comment line\nbackend,link_class,bytes,seconds,")
  groups = calibrate.read_measurements(str(path))
  assert set(groups) == {("nccl", "nvlink"), ("nvshmem", "nvlink")}
  table, fits = calibrate.calibrate(str(path))
  assert math.isclose(fits[("nccl", "nvlink")].latency_us, 6.0, rel_tol=1e-4)
  assert math.isclose(fits[("nccl", "nvlink")].bandwidth_gbps, 400.0, rel_tol=1e-4)
  assert math.isclose(fits[("nvshmem", "nvlink")].latency_us, 3.0, rel_tol=1e-4)
  assert math.isclose(fits[("nvshmem", "nvlink")].bandwidth_gbps, 500.0, rel_tol=1e-4)
  assert ("  backend: NVSHMEM\n  link_class: NVLINK\n  latency_us: 3\n"
          "  bandwidth_gbps: 500\n") in table
  # Extra columns are ignored by calibrate but carry the bandwidth for people.
  assert rows[-1]["gbps"] and rows[-1]["mode"] == "graph"


def test_empty_results_still_have_the_header(tmp_path):
  path = tmp_path / "p2p.csv"
  p2p.write_csv(path, [])
  assert path.read_text().splitlines()[0] == ",".join(p2p.CSV_COLUMNS)


def test_committed_h200_measurements_calibrate():
  path = GPU / "results" / "h200x1_p2p.csv"
  text, fits = calibrate.calibrate(str(path))
  assert set(fits) == {("nccl", "same_device"), ("nvshmem", "same_device")}
  for fit in fits.values():
    assert 0 < fit.latency_us < 20 and fit.bandwidth_gbps > 500


def test_p2p_help_runs_without_a_gpu():
  proc = subprocess.run([sys.executable, str(GPU / "p2p_bench.py"), "--help"],
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0 and "--sizes" in proc.stdout


# --- ring_e2e: ring attention end to end ------------------------------------------

e2e = _load("ring_e2e")
_TINY = ["--platform=cpu", "--num-heads=4", "--num-kv-heads=2", "--head-dim=16",
         "--q-chunk=64", "--k-chunk=64", "--iters=2", "--warmup=1", "--check-seq=128"]


def test_e2e_args_and_env():
  a = e2e.parse_args(["--modes=nccl,peer,pass", "--seq-lens=64K,32K", "--budget-s=100"])
  assert a.seq_len_list == [32768, 65536] and a.mode_list == ["nccl", "peer", "pass"]
  assert a.direction_list == ["fwd", "fwd_bwd"] and a.topology == "1x1x2"
  assert e2e.items_of(a)[:2] == [(32768, "fwd"), (32768, "fwd_bwd")]
  for bad in (["--modes=nvshmem_flag"], ["--directions=bwd"], ["--iters=3"],
              ["--seq-lens=1001"], ["--seq-lens=x"]):
    with pytest.raises(e2e.E2EError):
      e2e.parse_args(bad)
  base = {"XLA_FLAGS": "--xla_gpu_collective_permute_mode=symmetric --xla_foo=1",
          "NCCL_NVLS_ENABLE": "1"}
  env = e2e.mode_env("peer", base, "gpu", 2, 1)
  assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_gpu_collective_permute_mode=peer"
  assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF
  assert e2e.mode_env("pass", base, "gpu", 2, 1, route="nvshmem")["XLA_FLAGS"] == (
      "--xla_foo=1 --xla_gpu_experimental_enable_nvshmem=true")
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
  e2e.write_csv(a, e2e.csv_rows([
      {"seq_len": 65536, "direction": "fwd", "mode": "nccl", "step_s": 0.5},
      {"seq_len": 32768, "direction": "fwd", "mode": "nccl", "step_s": 0.25},
      {"seq_len": 32768, "direction": "fwd", "mode": "pass", "step_s": None}]))
  e2e.write_csv(b, e2e.csv_rows([
      {"seq_len": 65536, "direction": "fwd", "mode": "nccl", "step_s": 0.4}]))
  assert e2e.main(["merge", str(out), str(a), str(b)]) == 0
  assert out.read_text() == ("seq_len,direction,mode,step_s\n32768,fwd,nccl,0.25\n"
                             "65536,fwd,nccl,0.4\n")
  bad = tmp_path / "bad.csv"
  bad.write_text("mode,seq_len\nx,1\n")
  with pytest.raises(e2e.E2EError, match="bad.csv:1"):
    e2e.read_csv(bad)


def _e2e(tmp_path, *argv, timeout=500):
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  proc = subprocess.run([sys.executable, str(GPU / "ring_e2e.py"), f"--out-dir={tmp_path}",
                         *_TINY, *argv], capture_output=True, text=True, env=env,
                        timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  csv_text = (tmp_path / "ring_step.csv").read_text()
  assert csv_text.splitlines()[0] == "seq_len,direction,mode,step_s"
  return csv_text, json.loads((tmp_path / "ring_e2e.json").read_text())


def test_e2e_two_processes_nccl_and_hooked_pass(tmp_path):
  """Two jax.distributed CPU processes: plain XLA, and the hook's per-op choice."""
  csv_text, res = _e2e(tmp_path, "--num-procs=2", "--modes=nccl,pass", "--seq-lens=256")
  rows = csv_text.strip().splitlines()[1:]
  assert sorted(r.rsplit(",", 1)[0] for r in rows) == [
      "256,fwd,nccl", "256,fwd,pass", "256,fwd_bwd,nccl", "256,fwd_bwd,pass"]
  assert all(float(r.rsplit(",", 1)[1]) > 0 for r in rows)
  for mode in ("nccl", "pass"):
    m = res["modes"][mode]
    assert m["info"]["process_count"] == 2 and m["errors"] == []
    assert [c["ok"] for c in m["checks"]] == [True, True]
    for run in m["runs"]:
      assert run["status"] == "ok" and len(run["median_s_per_rank"]) == 2
      assert run["compile_s"] > 0 and len(run["times_s_rank0"]) == 2
  assert set(res["modes"]["nccl"]["runs"][0]["backends"]) == {"collective-permute:DEFAULT"}
  # The compiled module shows the hook's choice on every permute.
  hook = res["modes"]["pass"]["hook"]
  assert hook["decisions"] and all(d["backend"] in ("nccl", "peer") for d in hook["decisions"])
  for run in res["modes"]["pass"]["runs"]:
    want = {"peer": "collective-permute:DEFAULT/COLLECTIVES_PEER_MEMORY",
            "nccl": "collective-permute:DEFAULT"}
    assert set(run["backends"]) == {want[d["backend"]] for d in run["hook_decisions"]}
    # This run's own compile: one decision per permute of the compiled module.
    assert len(run["hook_decisions"]) == sum(run["backends"].values())
    assert all(sorted(d["pairs"]) == [[0, 1], [1, 0]] and d["bytes"] >= 128 * 2 * 16 * 2
               for d in run["hook_decisions"])


def test_e2e_route_watchdog_and_budget(tmp_path):
  """pass without the hook runs the decided mode; a hung run is killed, the rest runs;
  the budget ends the call with every run accounted for."""
  csv_text, res = _e2e(tmp_path, "--single-process", "--num-procs=2", "--modes=pass,nccl",
                       "--pass-via=route", "--seq-lens=128,256,512", "--directions=fwd",
                       "--hang-at=256", "--run-timeout=20", "--budget-s=150",
                       "--check-seq=0",
                       # A table under which NVSHMEM wins these tiny permutes: the
                       # test is about the route, not the measured calibration.
                       f"--cost-table={FIXTURES}/fast_nvshmem.cost")
  runs = {r["seq_len"]: r for r in res["modes"]["pass"]["runs"]}
  assert runs[128]["status"] == "ok" and runs[128]["pass_route"].startswith("nvshmem: core plan")
  assert runs[256]["status"] == "timeout" and runs[256]["step_s"] is None
  assert runs[512]["status"] == "ok"  # a fresh launch after the kill
  assert set(res["modes"]["pass"]["probe"]["routes"]) == {"128,fwd", "256,fwd", "512,fwd"}
  assert "128,fwd,pass," in csv_text and "256,fwd,pass" not in csv_text
  # nccl has 3 runs too, each done, timed out or skipped for the budget.
  statuses = [r["status"] for r in res["modes"]["nccl"]["runs"]]
  assert len(statuses) == 3 and set(statuses) <= {"ok", "timeout", "skipped"}


# --- attention_kernel_bench: per-block kernels ----------------------------------------

def test_attention_flops_count_half_under_the_causal_mask():
  kb = _load("attention_kernel_bench")
  full = kb.flops(16384, False, "fwd")
  assert full == 4.0 * 16384 ** 2 * 32 * 128
  assert kb.flops(16384, True, "fwd") == full / 2
  assert kb.flops(16384, False, "fwd_bwd") == 3.5 * full


def test_attention_bench_times_the_blocked_kernel_on_the_cpu(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", **MULTICAST_OFF)
  proc = subprocess.run([sys.executable, str(GPU / "attention_kernel_bench.py"),
                         f"--out-dir={tmp_path}", "--kernels=blocked", "--lengths=256",
                         "--skip=check,overlap"], env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = (tmp_path / "kernel.csv").read_text().splitlines()
  assert lines[0] == "jax,s_block,causal,direction,kernel,ms,tflops"
  rows = [l.split(",") for l in lines[1:]]
  assert {(r[2], r[3]) for r in rows} == {("0", "fwd"), ("0", "fwd_bwd"), ("1", "fwd"),
                                          ("1", "fwd_bwd")}
  assert all(r[1] == "256" and r[4] == "blocked" and float(r[5]) > 0 for r in rows)


def test_committed_kernel_table_has_the_ring_kernel_at_16k_in_both_versions():
  import csv
  with open(ROOT / "gpu" / "results" / "h200_attention_kernel.csv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  ring = {r["jax"]: float(r["tflops"]) for r in rows
          if r["kernel"] == "ring" and r["s_block"] == "16384" and r["causal"] == "0"
          and r["direction"] == "fwd"}
  assert set(ring) == {"0.9.1", "0.11.2"}
  assert min(ring.values()) >= 400, ring


# --- scale_model: ring attention past two GPUs ----------------------------------------

def test_scale_model_topologies_put_8_gpus_on_a_host():
  sm = _load("scale_model")
  assert sm.topology_spec(8, "nvlink") == "1x1x8"
  assert sm.topology_spec(72, "nvl72") == "1x9x8:nvl72"
  assert sm.topology_spec(16, "nvl72") == "1x2x8:nvl16"
  assert sm.topology_spec(64, "infiniband") == "1x8x8"


def test_scale_model_curve_interpolates_in_log_log():
  sm = _load("scale_model")
  curve = sm.Curve([(1024, 1.0), (4096, 16.0)])  # slope 2
  assert math.isclose(curve(2048), 4.0) and math.isclose(curve(8192), 64.0)
  clamped = sm.Curve([(1024, 1.0), (4096, 16.0)], clamp=True)
  assert clamped(8192) == 16.0 and clamped(10) == 1.0


def test_scale_model_ring_time_hides_a_permute_shorter_than_the_step():
  sm = _load("scale_model")
  # causal: diagonal step 1 s, full steps 2 s; a permute of 1.5 s hides under full steps
  assert sm.ring_time(3, True, (1.0, 2.0), 1.5) == (5.5, 0.5)
  assert sm.ring_time(3, False, (1.0, 2.0), 3.0) == (9.0, 3.0)


def test_scale_model_reproduces_its_committed_table_and_the_2gpu_check(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out, check = tmp_path / "model.csv", tmp_path / "check.csv"
  proc = subprocess.run([sys.executable, str(GPU / "scale_model.py"), f"--out={out}",
                         f"--check={check}", "--plot="], env=env, capture_output=True,
                        text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = out.read_text().splitlines()
  assert lines[0] == "gpus,interconnect,seq_len,direction,mode,step_s,exposed_s"
  # The one-host NVLink rows rest on measured curves only; the rows across hosts
  # follow the core's network and NVLink-domain estimates as they change.
  committed = (ROOT / "gpu" / "results" / "scale_model.csv").read_text().splitlines()
  nvlink = lambda rows: [r for r in rows if r.split(",")[1] == "nvlink"]
  assert nvlink(lines) == nvlink(committed) and len(nvlink(lines)) == 6 * 2 * 6
  rows = check.read_text().splitlines()[1:]
  assert len(rows) == 48 and max(abs(float(r.split(",")[-1])) for r in rows) <= 10.0


# --- benchlib: what the scripts share -------------------------------------------------

benchlib = _load("benchlib")


def test_benchlib_size_ranges_double_unless_a_factor_is_given():
  assert benchlib.parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
  assert benchlib.parse_sizes("1K:64K:4") == [1024, 4096, 16384, 65536]
  # Every script reads one syntax: the pinned sweeps' powers of 4 are spelled out.
  xb = _load("xla_permute_bench")
  assert xb.parse_sizes("1K:256M") == p2p.parse_sizes("1K:256M")
  assert xb.build_parser().parse_args([]).sizes == "1K:256M:4"


def test_benchlib_child_env_replaces_only_the_named_xla_flags():
  env = benchlib.child_env({"XLA_FLAGS": "--xla_a=1 --xla_mode=x", "NCCL_NVLS_ENABLE": "1"},
                           drop_flags=("--xla_mode",), xla_flags=["--xla_mode=y"])
  assert env["XLA_FLAGS"] == "--xla_a=1 --xla_mode=y"
  assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF


def test_benchlib_wait_all_kills_workers_past_the_deadline():
  import time
  procs = [benchlib.spawn([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ))
           for _ in range(2)]
  t0 = time.time()
  assert benchlib.wait_all(procs, timeout=1) == "timed out"
  assert time.time() - t0 < 20 and all(p.returncode is not None for p in procs)
  ok = [benchlib.spawn([sys.executable, "-c", "pass"], dict(os.environ))]
  assert benchlib.wait_all(ok, timeout=60) == "finished"


def test_benchlib_csv_takes_dicts_or_rows_after_comments(tmp_path):
  path = tmp_path / "x.csv"
  benchlib.write_csv(path, ("a", "b"), [{"a": 1}, (2, 3)], comments=["made here"])
  assert path.read_text() == "# made here\na,b\n1,\n2,3\n"
