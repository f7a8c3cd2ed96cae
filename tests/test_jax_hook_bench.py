"""`hlo-tools bench --only=HOOK`: the hook's compile cost next to a plain compile, on
small programs (--quick; its numbers say nothing of the goal)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
