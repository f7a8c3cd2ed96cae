"""hlo_tools.ops.bench.hook: the hook's compile cost next to a plain compile
(`hlo-tools bench --only=HOOK`), on small programs (--quick; its numbers say nothing
of the goal), and the figure from each side's compile times."""

import json
import subprocess
import sys

import pytest

from hlo_tools.ops.bench import hook

from conftest import ROOT


@pytest.mark.long
def test_hook_bench_quick(tmp_path):
  out = tmp_path / "bench.json"
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "bench", "--only=HOOK", "--quick", f"--json={out}"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())["HOOK"]
  assert result["goal"] == 1.15 and result["met"] == (result["ratio"] <= 1.15)
  for tag in ("hook_small", "hook_large"):
    r = result[tag]
    # The mode changes (the hook moves the ring to peer memory) in one compile.
    assert r["applied"] == "COLLECTIVES_PEER_MEMORY" and r["compiles"] == 1
    assert r["permutes"] == r["layers"]
    for side in ("plain_s", "plain_peer_s", "hook_s"):
      assert r[side]["median"] > 0
  assert "HOOK compile ratio" in proc.stdout


# Per (kind, layers): the compile seconds one child process reports (runs=2).
SECONDS = {
  ("plain", 2): [1.0, 3.0],  # median 2.0 over the rounds
  ("hook", 2): [2.0, 2.4],  # median 2.2
  ("plain_peer", 2): [2.0, 2.0],
  ("plain", 4): [4.0, 4.0],
  ("hook", 4): [5.0, 5.0],
  ("plain_peer", 4): [5.0, 5.0],
}


def test_figure_is_the_larger_ratio_of_medians(monkeypatch):
  calls = []

  def child(kind, layers, repeats, table, tmp):
    calls.append((kind, layers, repeats))
    with open(table) as f:
      assert f.read() == hook.FAST_PEER_TABLE  # the table under which the hook moves the ring
    out = {"compile_s": SECONDS[(kind, layers)]}
    if kind == "hook":
      out.update(applied=hook.PEER, compiles=1, permutes=layers, mode_from="table")
    return out

  monkeypatch.setattr(hook, "_run", child)
  r = hook.bench_hook({"hook_small": 2, "hook_large": 4}, runs=2)
  # The sides take turns, one process each a round; two rounds (fewer than ROUNDS runs).
  turn = ["plain", "hook", "plain_peer"]
  assert calls == [(k, 2, 2) for k in turn * 2] + [(k, 4, 2) for k in turn * 2]
  small, large = r["hook_small"], r["hook_large"]
  assert small["rounds"] == 2 and small["hook_s"]["n"] == 4
  assert small["ratio"] == pytest.approx(1.1) and small["same_mode_ratio"] == pytest.approx(1.1)
  assert large["ratio"] == pytest.approx(1.25) and large["same_mode_ratio"] == pytest.approx(1.0)
  assert (large["applied"], large["compiles"], large["permutes"]) == (hook.PEER, 1, 4)
  assert r["ratio"] == pytest.approx(1.25) and r["goal"] == 1.15 and r["met"] is False
  assert r["topology"] == "1x1x8"


def test_a_failed_child_is_one_line_with_its_last_words(monkeypatch):
  def failing(cmd, **kwargs):
    return subprocess.CompletedProcess(cmd, 1, "", "Traceback ...\nRuntimeError: no backend\n")

  monkeypatch.setattr(hook.subprocess, "run", failing)
  with pytest.raises(RuntimeError, match=r"child \(hook\) failed \(exit 1\): RuntimeError: no"):
    hook._run("hook", 2, 1, "table.txt", "/tmp")
