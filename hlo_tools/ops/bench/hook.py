"""The JAX hook's compile cost: hook.compile / plain compile of one program.

Both sides compile the same program, deviceless for 1x1x8 H200s on jax's own XLA,
each in a process of its own (`python -m hlo_tools.ops.bench.hook SPEC_JSON`): an
unrolled ring of `layers` ppermute + matmul steps, under a cost table in which the
core moves it to peer memory, so that the hook's compile sets a mode the plain one
does not (the mode change). Each process first compiles a small program of its kind
(backend start-up; on the hook's side also the probe of the XLA and the imports of
the tools) and the same program plainly and with the mode, then clears jax's
caches, lowers and times only the compile, `repeats` times; the kinds of process
take turns, ROUNDS times. The figure is the larger of the two sizes' ratios of
medians; beside it, the ratio to a plain compile given the hook's mode by hand
(XLA's own cost of the mode apart, what the hook adds)."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

GOAL = 1.15
# Rounds of one process a side: the figure pools each side's compiles over them.
ROUNDS = 3
PEER = "COLLECTIVES_PEER_MEMORY"
TOPOLOGY = "1x1x8"
# Peer memory priced far below NCCL on NVLink: the core chooses it for the ring.
FAST_PEER_TABLE = (
  "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 1 }\n"
)


def _child(spec: dict[str, Any]) -> int:
  import jax  # pylint: disable=import-outside-toplevel

  from hlo_tools.ops import dump_target  # pylint: disable=import-outside-toplevel
  from hlo_tools.programs import bench, ring_attention  # pylint: disable=import-outside-toplevel

  devices = dump_target._devices(dump_target.Target(topology=TOPOLOGY))  # pylint: disable=protected-access
  mesh = ring_attention.make_mesh(devices)
  args = bench.ring_args(mesh)
  hook = None
  if spec["kind"] == "hook":
    from hlo_tools import jax_hook  # pylint: disable=import-outside-toplevel

    hook = jax_hook.install(TOPOLOGY, backends=("nccl", "peer"), cost_table=spec["table"])

  def compile_once(fn: Any) -> Any:
    lowered = jax.jit(fn).lower(*args)
    t0 = time.perf_counter()
    if hook is not None:
      compiled = hook.compile(lowered)
    elif spec["kind"] == "plain_peer":  # the mode the hook applies, set by hand
      compiled = lowered.compile({"xla_gpu_collective_permute_mode": PEER})
    else:
      compiled = lowered.compile()
    return compiled, time.perf_counter() - t0

  small = bench.ring_function(1, mesh)
  compile_once(small)  # start-up, probe and imports: not timed
  # Every side's process warms up alike: a plain compile and one with the mode.
  jax.jit(small).lower(*args).compile()
  jax.jit(small).lower(*args).compile({"xla_gpu_collective_permute_mode": PEER})
  fn = bench.ring_function(spec["layers"], mesh)
  seconds: list[float] = []
  for _ in range(spec["repeats"]):
    jax.clear_caches()  # each repeat a real compile
    _, s = compile_once(fn)
    seconds.append(s)
  result: dict[str, Any] = {"compile_s": seconds}
  if hook is not None:
    record = hook.programs[-1]
    result.update(
      applied=record["applied"],
      compiles=record["compiles"],
      permutes=record["program"]["permutes"],
      mode_from=record["mode_from"],
    )
  with open(spec["result"], "w") as f:
    json.dump(result, f)
  return 0


def _run(kind: str, layers: int, repeats: int, table: str, tmp: str) -> dict[str, Any]:
  from hlo_tools.ops.bench import programs  # pylint: disable=import-outside-toplevel

  spec: dict[str, Any] = {
    "kind": kind,
    "layers": layers,
    "repeats": repeats,
    "table": table,
    "result": os.path.join(tmp, f"{kind}_{layers}.json"),
  }
  env = programs._env()  # pylint: disable=protected-access
  env.pop("XLA_FLAGS", None)  # the plain side runs XLA's default mode
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.ops.bench.hook", json.dumps(spec)],
    env=env,
    capture_output=True,
    text=True,
    timeout=3600,
    check=False,
  )
  if proc.returncode != 0:
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    raise RuntimeError(f"bench hook child ({kind}) failed (exit {proc.returncode}): {tail}")
  with open(spec["result"]) as f:
    out: dict[str, Any] = json.load(f)
    return out


def bench_hook(sizes: Mapping[str, int], runs: int, keep_dir: str | None = None) -> dict[str, Any]:
  """{"ratio", "goal", "met", per size: the two sides' compile seconds and what the
  hook applied}; `sizes` gives "hook_small" and "hook_large" (ring layers)."""
  from hlo_tools.ops.bench import stats  # pylint: disable=import-outside-toplevel

  del keep_dir  # nothing to keep: both sides compile the same program
  result: dict[str, Any] = {"topology": TOPOLOGY, "goal": GOAL}
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-hook-") as tmp:
    table = os.path.join(tmp, "table.txt")
    with open(table, "w") as f:
      f.write(FAST_PEER_TABLE)
    for tag in ("hook_small", "hook_large"):
      layers = sizes[tag]
      rounds = min(ROUNDS, runs)
      print(
        f"hlo-tools bench: HOOK: {layers}-step ring, {rounds} rounds of {runs} compiles a side",
        file=sys.stderr,
      )
      # The sides take turns, a process each a round: a drift of the machine's speed
      # (another job, the clock) falls on all three alike.
      seconds: dict[str, list[float]] = {"plain": [], "hook": [], "plain_peer": []}
      for _ in range(rounds):
        for kind, samples in seconds.items():
          out = _run(kind, layers, runs, table, tmp)
          samples.extend(out["compile_s"])
          if kind == "hook":
            hooked = out
      hook_s = statistics.median(seconds["hook"])
      result[tag] = {
        "layers": layers,
        "rounds": rounds,
        "ratio": hook_s / statistics.median(seconds["plain"]),
        # The hook's own cost: against a plain compile with the mode it applies.
        "same_mode_ratio": hook_s / statistics.median(seconds["plain_peer"]),
        "plain_s": stats(seconds["plain"]),
        "plain_peer_s": stats(seconds["plain_peer"]),
        "hook_s": stats(seconds["hook"]),
        **{k: hooked[k] for k in ("applied", "compiles", "permutes", "mode_from")},
      }
  result["ratio"] = max(result["hook_small"]["ratio"], result["hook_large"]["ratio"])
  result["met"] = result["ratio"] <= GOAL
  return result


if __name__ == "__main__":
  sys.exit(_child(json.loads(sys.argv[1])))
