"""benchmarks/attention_kernel_bench.py: its FLOP count, a run of the blocked kernel on
the CPU, and the committed H200 kernel table."""

import csv
import os
import subprocess
import sys

import pytest

from conftest import GPU, MULTICAST_OFF, ROOT, load_gpu_script


def test_attention_flops_count_half_under_the_causal_mask():
  kb = load_gpu_script("attention_kernel_bench")
  full = kb.flops(16384, False, "fwd")
  assert full == 4.0 * 16384**2 * 32 * 128
  assert kb.flops(16384, True, "fwd") == full / 2
  assert kb.flops(16384, False, "fwd_bwd") == 3.5 * full


@pytest.mark.long
def test_attention_bench_times_the_blocked_kernel_on_the_cpu(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", **MULTICAST_OFF)
  proc = subprocess.run(
    [
      sys.executable,
      str(GPU / "attention_kernel_bench.py"),
      f"--out-dir={tmp_path}",
      "--kernels=blocked",
      "--lengths=256",
      "--skip=check,overlap",
    ],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = (tmp_path / "kernel.csv").read_text().splitlines()
  assert lines[0] == "jax,s_block,causal,direction,kernel,ms,tflops"
  rows = [l.split(",") for l in lines[1:]]
  assert {(r[2], r[3]) for r in rows} == {
    ("0", "fwd"),
    ("0", "fwd_bwd"),
    ("1", "fwd"),
    ("1", "fwd_bwd"),
  }
  assert all(r[1] == "256" and r[4] == "blocked" and float(r[5]) > 0 for r in rows)
  # The ring program takes --lengths too (on the CPU it stops at cuDNN), not its 1K-64K.
  tried = {
    l.split("ring_program_n1 ")[1].split()[0]
    for l in proc.stdout.splitlines()
    if "ring_program_n1 " in l
  }
  assert tried == {"256"}, proc.stdout[-2000:]


def test_committed_kernel_table_has_the_ring_kernel_at_16k_in_both_versions():
  with open(ROOT / "benchmarks" / "results" / "h200_attention_kernel.csv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  ring = {
    r["jax"]: float(r["tflops"])
    for r in rows
    if r["kernel"] == "ring"
    and r["s_block"] == "16384"
    and r["causal"] == "0"
    and r["direction"] == "fwd"
  }
  assert set(ring) == {"0.9.1", "0.11.2"}
  assert min(ring.values()) >= 400, ring
