"""CPU tests of benchmarks/runtime_rules_check.py: the runs it plans for 1 and 2 GPUs, the
children's environment, the expected values, how a run's outcome and the runtime's
error are read from its processes, argument errors, the files it writes, and one
real child (jax on the CPU) compiling, running and checking a permute."""

import csv
import json
import os
import subprocess
import sys

import pytest

from conftest import GPU, MULTICAST_OFF, ROOT, load_gpu_script

rrc = load_gpu_script("runtime_rules_check")
SCRIPT = str(GPU / "runtime_rules_check.py")


def _plan(gpus, parts=("types", "shift"), types=("s8", "f8e4m3fn", "bf16")):
  return rrc.plan_runs(list(parts), list(types), gpus)


def test_two_gpus_plan_rings_on_nvshmem_the_pass_plan_and_the_peer_shift():
  runs = _plan(2)
  types = [r for r in runs if r["part"] == "types"]
  assert [(r["variant"], r["dtype"]) for r in types] == [
    ("nvshmem", "s8"),
    ("nvshmem", "f8e4m3fn"),
    ("nvshmem", "bf16"),
    ("pass", "s8"),
  ]
  for r in types:
    assert r["pairs"] == [(0, 1), (1, 0)] and r["processes"] == 2 and r["pinned"]
    assert r["flags"] == ([rrc.NVSHMEM_FLAG] if r["variant"] == "nvshmem" else [])
  (shift,) = [r for r in runs if r["part"] == "shift"]
  assert shift["pairs"] == [(0, 1)] and shift["processes"] == 1
  assert shift["flags"] == [rrc.PEER_FLAG] and not shift["pinned"] and "skip" not in shift


def test_one_gpu_plans_the_self_pair_and_no_pairs_and_skips_the_shift():
  runs = _plan(1)
  assert {rrc.pairs_text(r["pairs"]) for r in runs if r["part"] == "types"} == {"{0->0}", "{}"}
  assert all(r["processes"] == 1 for r in runs)
  (shift,) = [r for r in runs if r["part"] == "shift"]
  assert shift["skip"] == "needs 2 GPUs, 1 visible"


def test_the_pass_plan_runs_only_when_s8_is_asked_for():
  assert all(r["variant"] == "nvshmem" for r in _plan(2, ["types"], ["bf16"]))


@pytest.mark.parametrize(
  "text,pairs", [("0-1,1-0", [(0, 1), (1, 0)]), ("none", []), ("0-0", [(0, 0)])]
)
def test_pairs_round_trip_through_the_child_argument(text, pairs):
  assert rrc.parse_pairs(text) == pairs and rrc.pairs_arg(pairs) == text


def test_bad_pairs_are_a_bench_error():
  with pytest.raises(rrc.BenchError):
    rrc.parse_pairs("0->1")


def test_expected_values_ring_swaps_on_odd_trips_and_a_shift_zeroes_device_0():
  np = pytest.importorskip("numpy")
  a, b = (rrc.initial_shard(d, 8, np.int8) for d in (0, 1))
  got = rrc.expected_shards([(0, 1), (1, 0)], 2, 3, 8, np.int8)
  assert np.array_equal(got[0], b) and np.array_equal(got[1], a)
  got = rrc.expected_shards([(0, 1)], 2, 1, 8, np.int8)
  assert not got[0].any() and np.array_equal(got[1], a)
  assert not rrc.expected_shards([], 1, 1, 8, np.int8)[0].any()


def test_children_get_multicast_off_their_flags_and_the_pinned_jax_first(tmp_path):
  args = rrc.build_parser().parse_args(["--out-dir", str(tmp_path), "--pinned-path", str(tmp_path)])
  types_run, pass_run, shift_run = (_plan(2)[i] for i in (0, 3, 4))
  env = rrc.child_env(types_run, args, "/d")
  for k, v in MULTICAST_OFF.items():
    assert env[k] == v
  assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
  assert rrc.NVSHMEM_FLAG in env["XLA_FLAGS"] and "--xla_dump_to=/d" in env["XLA_FLAGS"]
  assert "nvshmem" not in rrc.child_env(pass_run, args, "/d")["XLA_FLAGS"]
  shift_env = rrc.child_env(shift_run, args, "/d")
  assert str(tmp_path) not in shift_env["PYTHONPATH"].split(os.pathsep)
  assert rrc.PEER_FLAG in shift_env["XLA_FLAGS"]


def _run(processes=2, **over):
  run = dict(_plan(2)[0], gpus=2)
  run.update(over)
  return run


def test_a_failed_run_records_the_runtimes_error_line():
  result = {
    "jax_version": "0.9.1",
    "error": "INTERNAL: Invalid NVSHMEM send type.",
    "permutes": [{"backend": "NVSHMEM", "collectives_mode": None, "pairs": "{}"}],
  }
  row = rrc.summarize(_run(), "finished", [result, result], ["", ""], 3.0)
  assert row["status"] == "failed" and row["error"] == "INTERNAL: Invalid NVSHMEM send type."
  assert row["backend"] == "NVSHMEM" and row["values"] == "none"


def test_a_crashed_process_without_a_result_is_read_from_its_log():
  log = "noise\nE1202 x] INTERNAL: Invalid NVSHMEM send type.\nmore\n"
  row = rrc.summarize(_run(), "failed (exit [-6, 0])", [None, None], [log, ""], 2.0)
  assert row["status"] == "failed" and row["error"] == "Invalid NVSHMEM send type."


def test_a_killed_run_is_a_hang_and_right_values_need_every_device():
  row = rrc.summarize(_run(), "timed out", [None, None], ["", ""], 60.2)
  assert row["status"] == "hang (killed)" and row["error"] == "timed out"
  ok = {"jax_version": "0.9.1", "values": {"0": True}}
  bad = {"jax_version": "0.9.1", "values": {"1": False}}
  row = rrc.summarize(_run(), "finished", [ok, bad], ["", ""], 4.0)
  assert row["status"] == "ran" and row["values"] == "wrong"


def test_permute_backends_are_read_from_compiled_hlo():
  text = (
    "  %cp = (s8[4]{0}, s8[4]{0}) collective-permute-start(s8[4]{0} %p), channel_id=1, "
    'source_target_pairs={{0,1},{1,0}}, backend_config={"collective_backend_config":'
    '{"backend":"NVSHMEM"}}\n  %d = s8[4]{0} collective-permute-done(%cp)\n'
  )
  assert rrc.permute_backends(text) == [
    {"backend": "NVSHMEM", "collectives_mode": None, "pairs": "{{0,1},{1,0}}"}
  ]


def _main(*argv):
  return subprocess.run(
    [sys.executable, SCRIPT, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
  )


@pytest.mark.parametrize(
  "argv,message",
  [
    ([], "--out-dir is required"),
    (["--out-dir=D", "--gpus=1"], "the types part needs --pinned-path"),
    (
      ["--out-dir=D", "--gpus=1", "--parts=types", "--pinned-path=/nonexistent"],
      "--pinned-path /nonexistent: no such directory",
    ),
    (["--out-dir=D", "--gpus=1", "--parts=shift,bogus"], "unknown part ['bogus']"),
    (
      ["--out-dir=D", "--gpus=1", "--types=s4", "--parts=types", "--pinned-path=."],
      "unknown type ['s4']",
    ),
    (["--out-dir=D", "--trips=0"], "--trips must be >= 1"),
    (["--out-dir=D", "--shift-timeout=0"], "must be positive"),
  ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, message, tmp_path):
  proc = _main(*[a.replace("=D", f"={tmp_path / 'o'}") for a in argv])
  assert proc.returncode == 2
  assert proc.stderr.startswith("runtime_rules_check: ") and message in proc.stderr
  assert proc.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def test_one_gpu_shift_writes_a_not_run_row_in_csv_and_json(tmp_path):
  proc = _main(f"--out-dir={tmp_path}", "--gpus=1", "--parts=shift")
  assert proc.returncode == 0, proc.stderr
  with open(tmp_path / "runtime_rules.csv") as f:
    (row,) = list(csv.DictReader(f))
  assert tuple(row) == rrc.CSV_HEADER
  assert (row["part"], row["status"], row["pairs"]) == ("shift", "not run", "{0->1}")
  data = json.loads((tmp_path / "runtime_rules.json").read_text())
  assert data["gpus"] == 1 and data["multicast_off"] == MULTICAST_OFF
  assert data["rows"] == [dict(row, gpus=1, processes=1, wall_s=0)]


@pytest.mark.parametrize("pairs", ["none", "0-0"])
def test_a_child_compiles_runs_and_checks_a_permute_on_the_cpu(pairs, tmp_path):
  pytest.importorskip("jax")
  env = dict(
    os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text"
  )
  proc = subprocess.run(
    [
      sys.executable,
      SCRIPT,
      "--child",
      "--dtype=s8",
      f"--pairs={pairs}",
      "--trips=2",
      "--elems=64",
      f"--dump-dir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=120,
    cwd=ROOT,
  )
  result = rrc.parse_result(proc.stdout)
  assert result["stage"] == "done", result
  assert result["values"] == {"0": True}
  assert result["permutes"][0]["pairs"] == ("{}" if pairs == "none" else "{{0,0}}")
