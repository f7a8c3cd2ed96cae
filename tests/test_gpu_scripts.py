"""CPU-only tests of the GPU measurement scripts in benchmarks/: their pure parts.

What needs a GPU (the timed loops, NCCL, NVSHMEM) is not tested here; the
scripts' CSV and HLO handling, argument parsing and size lists are checked, and
the CSV they write is fed to `hlo-tools heuristics calibrate`'s reader. The
ring end-to-end script and the attention kernel bench, which run on the CPU for
a minute each, have files of their own.
"""

import math
import os
import subprocess
import sys

import pytest

from hlo_tools.ops.heuristics import calibrate, measurements

from conftest import GPU, MULTICAST_OFF, ROOT, load_gpu_script

p2p = load_gpu_script("p2p_bench")


# --- p2p_bench: sizes and arguments -------------------------------------------------


def test_default_sizes_are_1k_to_256m_in_powers_of_two():
  sizes = p2p.parse_sizes(p2p.DEFAULT_SIZES)
  assert sizes[0] == 1024 and sizes[-1] == 256 << 20
  assert len(sizes) == 19
  assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))


@pytest.mark.parametrize(
  "text,expected",
  [
    ("4096", [4096]),
    ("1K,4K,1M", [1024, 4096, 1 << 20]),
    ("1k:8k", [1024, 2048, 4096, 8192]),
    ("1K:64K:4", [1024, 4096, 16384, 65536]),
    ("1M,1K:2K,1M", [1024, 2048, 1 << 20]),  # sorted, no repeats
    ("1G", [1 << 30]),
    ("2MiB", [2 << 20]),
  ],
)
def test_p2p_size_lists_parse(text, expected):
  assert p2p.parse_sizes(text) == expected


@pytest.mark.parametrize("text", ["", "1X", "0", "8K:1K", "1K:2K:1", "1K:2K:x", "1:2:3:4", "-1K"])
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
  args = p2p.parse_args(
    [
      "--backends=nvshmem",
      "--sizes=1K,2K",
      "--nprocs=4",
      "--copy-out=c.csv",
      "--reps=3",
      "--no-graph",
    ]
  )
  assert args.backend_list == ["nvshmem"] and args.size_list == [1024, 2048]
  assert args.nprocs == 4 and args.copy_out == "c.csv" and args.reps == 3
  assert args.no_graph


@pytest.mark.parametrize(
  "argv",
  [
    ["--backends=mpi"],
    ["--backends=,"],
    ["--nprocs=0"],
    ["--reps=0"],
    ["--warmup=-1"],
    ["--sizes=1Q"],
  ],
)
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
  per_rank = [
    {1024: (1e-6, 100, "graph"), 2048: (3e-6, 100, "graph"), 4096: (1, 5, "graph")},
    {1024: (2e-6, 100, "eager"), 2048: (1e-6, 100, "graph")},
  ]
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
  merged = {
    n: ((latency_us + n / (bandwidth_gbps * 1e3)) * 1e-6, 10, "graph")
    for n in p2p.parse_sizes("1K:256M")
  }
  return p2p.csv_rows(backend, link_class, merged, 2)


def test_written_csv_calibrates_to_the_generating_line(tmp_path):
  path = tmp_path / "p2p.csv"
  rows = _synthetic_rows(6.0, 400.0, "nccl") + _synthetic_rows(3.0, 500.0, "nvshmem")
  p2p.write_csv(path, rows, ["a comment line"])
  text = path.read_text()
  assert text.startswith("# a comment line\nbackend,link_class,bytes,seconds,")
  groups = measurements.read_measurements(str(path))
  assert set(groups) == {("nccl", "nvlink"), ("nvshmem", "nvlink")}
  table, fits = calibrate.calibrate(str(path))
  assert math.isclose(fits[("nccl", "nvlink")].latency_us, 6.0, rel_tol=1e-4)
  assert math.isclose(fits[("nccl", "nvlink")].bandwidth_gbps, 400.0, rel_tol=1e-4)
  assert math.isclose(fits[("nvshmem", "nvlink")].latency_us, 3.0, rel_tol=1e-4)
  assert math.isclose(fits[("nvshmem", "nvlink")].bandwidth_gbps, 500.0, rel_tol=1e-4)
  assert (
    "  backend: NVSHMEM\n  link_class: NVLINK\n  latency_us: 3\n  bandwidth_gbps: 500\n"
  ) in table
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
  proc = subprocess.run(
    [sys.executable, str(GPU / "p2p_bench.py"), "--help"],
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert proc.returncode == 0 and "--sizes" in proc.stdout


# --- scale_model: ring attention past two GPUs ----------------------------------------


def test_scale_model_topologies_put_8_gpus_on_a_host():
  sm = load_gpu_script("scale_model")
  assert sm.topology_spec(8, "nvlink") == "1x1x8"
  assert sm.topology_spec(72, "nvl72") == "1x9x8:nvl72"
  assert sm.topology_spec(16, "nvl72") == "1x2x8:nvl16"
  assert sm.topology_spec(64, "infiniband") == "1x8x8"


def test_scale_model_curve_interpolates_in_log_log():
  sm = load_gpu_script("scale_model")
  curve = sm.Curve([(1024, 1.0), (4096, 16.0)])  # slope 2
  assert math.isclose(curve(2048), 4.0) and math.isclose(curve(8192), 64.0)
  clamped = sm.Curve([(1024, 1.0), (4096, 16.0)], clamp=True)
  assert clamped(8192) == 16.0 and clamped(10) == 1.0


def test_scale_model_ring_time_hides_a_permute_shorter_than_the_step():
  sm = load_gpu_script("scale_model")
  # causal: diagonal step 1 s, full steps 2 s; a permute of 1.5 s hides under full steps
  assert sm.ring_time(3, True, (1.0, 2.0), 1.5) == (5.5, 0.5)
  assert sm.ring_time(3, False, (1.0, 2.0), 3.0) == (9.0, 3.0)


def test_scale_model_reproduces_its_committed_table_and_the_2gpu_check(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out, check = tmp_path / "model.csv", tmp_path / "check.csv"
  proc = subprocess.run(
    [sys.executable, str(GPU / "scale_model.py"), f"--out={out}", f"--check={check}", "--plot="],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = out.read_text().splitlines()
  assert lines[0] == "gpus,interconnect,seq_len,direction,mode,step_s,exposed_s"
  # The one-host NVLink rows rest on measured curves only; the rows across hosts
  # follow the core's network and NVLink-domain estimates as they change.
  committed = (ROOT / "benchmarks" / "results" / "scale_model.csv").read_text().splitlines()
  nvlink = lambda rows: [r for r in rows if r.split(",")[1] == "nvlink"]
  assert nvlink(lines) == nvlink(committed) and len(nvlink(lines)) == 6 * 2 * 6
  rows = check.read_text().splitlines()[1:]
  assert len(rows) == 48 and max(abs(float(r.split(",")[-1])) for r in rows) <= 10.0


# --- benchlib: what the scripts share -------------------------------------------------

benchlib = load_gpu_script("benchlib")


def test_benchlib_size_ranges_double_unless_a_factor_is_given():
  assert benchlib.parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
  assert benchlib.parse_sizes("1K:64K:4") == [1024, 4096, 16384, 65536]
  # Every script reads one syntax: the pinned sweeps' powers of 4 are spelled out.
  xb = load_gpu_script("xla_permute_bench")
  assert xb.parse_sizes("1K:256M") == p2p.parse_sizes("1K:256M")
  assert xb.build_parser().parse_args([]).sizes == "1K:256M:4"


def test_benchlib_child_env_replaces_only_the_named_xla_flags():
  env = benchlib.child_env(
    {"XLA_FLAGS": "--xla_a=1 --xla_mode=x", "NCCL_NVLS_ENABLE": "1"},
    drop_flags=("--xla_mode",),
    xla_flags=["--xla_mode=y"],
  )
  assert env["XLA_FLAGS"] == "--xla_a=1 --xla_mode=y"
  assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF


def test_benchlib_wait_all_kills_workers_past_the_deadline():
  import time

  procs = [
    benchlib.spawn([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ))
    for _ in range(2)
  ]
  t0 = time.time()
  assert benchlib.wait_all(procs, timeout=1) == "timed out"
  assert time.time() - t0 < 20 and all(p.returncode is not None for p in procs)
  ok = [benchlib.spawn([sys.executable, "-c", "pass"], dict(os.environ))]
  assert benchlib.wait_all(ok, timeout=60) == "finished"


def test_benchlib_csv_takes_dicts_or_rows_after_comments(tmp_path):
  path = tmp_path / "x.csv"
  benchlib.write_csv(path, ("a", "b"), [{"a": 1}, (2, 3)], comments=["made here"])
  assert path.read_text() == "# made here\na,b\n1,\n2,3\n"
