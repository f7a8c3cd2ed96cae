"""`hlo-tools bench --quick`: the JSON has the three figures and their raw times.

No timing assertions: the quick sizes are too small to say anything about the
goals, and a loaded test machine would make such assertions flaky.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import NVSHMEM_OPT, ROOT


def _positive(value):
  return isinstance(value, (int, float)) and value > 0


def _check_stats(st):
  assert st["n"] == len(st["samples"]) >= 1
  assert all(_positive(x) for x in st["samples"])
  assert st["min"] <= st["median"] <= st["max"]


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
  if not NVSHMEM_OPT.exists():
    pytest.fail(f"{NVSHMEM_OPT} is not built: run scripts/setup.sh")
  out = tmp_path_factory.mktemp("bench") / "bench.json"
  env = dict(os.environ, NVSHMEM_OPT=str(NVSHMEM_OPT))
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "bench", "--quick", f"--json={out}"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  with open(out) as f:
    return json.load(f), proc.stdout


@pytest.mark.long
def test_ratios_are_positive(quick_result):
  result, _ = quick_result
  for key in ("P1", "P2", "P3"):
    assert key in result, key
    fig = result[key]
    assert _positive(fig["ratio"]), (key, fig)
    assert fig["ratio_min"] <= fig["ratio_max"]
    assert isinstance(fig["met"], bool)


@pytest.mark.long
def test_every_timing_is_positive_with_spread(quick_result):
  result, _ = quick_result
  p1, p2, p3 = result["P1"], result["P2"], result["P3"]
  for st in (
    p1["pass_s"],
    p1["process_s"],
    p1["compile_s"],
    p2["ours_s"],
    p2["jaxlib_s"],
    p3["large"]["parse_s"],
    p3["large"]["diff_s"],
    p3["small"]["parse_s"],
    p3["small"]["diff_s"],
  ):
    _check_stats(st)
  assert _positive(p1["module"]["instructions"])
  assert p1["module"]["collective_permutes"] >= 1
  assert _positive(p2["memory"]["ours_rss_peak_mb"] + p2["memory"]["ours_tracemalloc_peak_mb"])
  assert _positive(p2["memory"]["jaxlib_rss_peak_mb"])
  assert _positive(p3["growth"])
  assert p3["growth_met"] == (p3["growth"] <= p3["growth_goal"])
  assert p3["large"]["instructions"] > p3["small"]["instructions"]


@pytest.mark.long
def test_result_names_machine_and_versions(quick_result):
  result, table = quick_result
  assert result["quick"] is True
  assert result["machine"]["cpu_count"] >= 1
  assert result["machine"]["mem_total_gb"] > 0
  assert result["versions"]["jax"] and result["versions"]["jaxlib"]
  for name in ("P1 pass overhead", "P2 reader speed", "P3 diff / parse", "machine:"):
    assert name in table


def test_bad_only_is_rejected():
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "bench", "--only=P9"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert proc.returncode == 2
  assert "--only" in proc.stderr


@pytest.mark.parametrize("where", ["missing/dir/bench.json", "."])
def test_bad_json_path_is_refused_before_the_run(tmp_path, where):
  # The full run takes minutes: a path that cannot be written fails at once.
  path = tmp_path / where
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "bench", "--quick", f"--json={path}"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert "--json" in proc.stderr and proc.stdout == ""
  assert "P1 pass overhead" not in proc.stdout
