"""`hlo-tools heuristics check-pass`: does the real pass decide what the core predicts?

    hlo-tools heuristics check-pass [--topology=SPEC ...] [--cost-table=F]
                                    [--nvshmem-opt=PATH] [--out=DIR] [--jobs=N]

For a sample of the sweep's cases, compiles a real JAX program per topology
(deviceless GPU compile on the CPU; one program carries one permute per
sampled case, see hlo_tools.programs.heuristics), takes the module XLA's
async-collective-creator receives, runs nvshmem-opt --mode=explain on it and
compares every decision with the sweep's row for that case: plan and every
modeled time. It also compares upstream's CollectiveBackendAssigner (run by
nvshmem-opt --compare-upstream) on the program with its answer on the small module
the sweep asks it about.
Exit status: 0 all match, 1 a mismatch, 2 unusable input or a failed compile.
"""

import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from hlo_tools import atomic_output, selection
from hlo_tools._selection_core import CostTable, Topology
from hlo_tools.errors import DumpError, HeuristicsError
from hlo_tools.model.topology import jax_topology
from hlo_tools.ops.heuristics import sweep, sweep_cases

# (case name, the sweep's row or None for a permute the sample did not plan, problems)
Result = tuple[str, sweep_cases.Row | None, list[str]]

# Buffer sizes per entry of heuristics.SAMPLE_SHAPES: latency-bound,
# bandwidth-bound, a combined K/V pair, a shift. On 1x1x8 the second ring is
# 2 GiB, above the 1 GiB symmetric heap, where the core must fall back to NCCL
# while upstream's rule still says NVSHMEM.
DEFAULT_SIZES = (4 << 10, 64 << 20, 1 << 20, 256 << 10)
SIZES_BY_TOPOLOGY = {"1x1x8": (4 << 10, 2 << 30, 1 << 20, 256 << 10)}
DEFAULT_TOPOLOGIES = ("1x1x8", "1x2x4", "2x2x4", "1x9x8:nvl72")
# nvshmem-opt prints modeled times with 6 significant digits (%.6g).
REL_TOL = 2e-5
# Upstream's assigner writes a backend_config backend, never a collectives_mode.
_UPSTREAM = {
  r["config_backend"]: n
  for n, r in reversed(selection.BACKEND_INFO.items())
  if not r["collectives_mode"]
}


def sample_cases(spec: str, topology: Topology) -> list[tuple[str, int]]:
  """[(shape, buffer_bytes)] in the program's argument order."""
  from hlo_tools.programs import heuristics  # imports jax: only once the inputs are read

  sizes = SIZES_BY_TOPOLOGY.get(spec, DEFAULT_SIZES)
  return list(zip(heuristics.SAMPLE_SHAPES, sizes))


def _program_args(cases: Sequence[tuple[str, int]], num_devices: int) -> list[str]:
  """dump's --arg strings: global 1-D arrays sharded over cp, f32 per shard."""
  args = []
  for shape, buffer_bytes in cases:
    if buffer_bytes % 4:
      raise HeuristicsError(f"buffer size {buffer_bytes} is not a multiple of 4 bytes")
    arg = f"{buffer_bytes // 4 * num_devices}:f32:cp"
    args += [arg, arg] if shape == "kv" else [arg]
  return args


def _nvshmem_opt_path(given: str | None) -> str | None:
  if given:
    return given
  beside = os.path.join(os.path.dirname(sys.executable), "nvshmem-opt")
  return beside if os.path.exists(beside) else shutil.which("nvshmem-opt")


def compile_module(topology: Topology, cases: Sequence[tuple[str, int]]) -> str:
  """HLO text entering async-collective-creator for the sample program, compiled for
  the SxHxG of `topology` (the core's parse): NVLink domains and maps only matter to
  the pass."""
  from hlo_tools.ops import dump  # jax only when actually compiling

  base, n = jax_topology(topology), topology.num_devices
  source = {
    "kind": "function",
    "function": "hlo_tools.programs.heuristics:sample",
    "args": _program_args(cases, n),
    "out_spec": "cp",
  }
  try:
    return dump.dump_pass_snapshot(source, base, "async-collective-creator", when="before")
  except DumpError as e:
    raise HeuristicsError(f"compiling the sample for {base}: {e}") from None


def run_pass(
  tool: str, hlo_path: str, spec: str, cost_table: str | None, report_path: str
) -> dict[str, Any]:
  cmd = [
    tool,
    hlo_path,
    f"--topology={spec}",
    f"--report={report_path}",
    "--mode=explain",
    "--compare-upstream",
  ]
  if cost_table:
    cmd.append(f"--cost-table={cost_table}")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    last = [l for l in proc.stderr.splitlines() if l.strip()][-1:] or ["(no output)"]
    raise HeuristicsError(f"nvshmem-opt failed on {hlo_path} (exit {proc.returncode}): {last[0]}")
  with open(report_path) as f:
    report: dict[str, Any] = json.load(f)
  return report


def _close(a: float | None, b: float | None) -> bool:
  if a is None or b is None:
    return a is None and b is None
  return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-6)


def compare(row: sweep_cases.Row, decision: dict[str, Any]) -> list[str]:
  """Differences between the core's row and the pass's decision (empty: match)."""
  problems = []
  if decision["plan"] != row["chosen_plan"]:
    problems.append(f"plan {decision['plan']} != core {row['chosen_plan']}")
  modeled = decision["modeled_us"]
  for key, column in (("nccl", "nccl_us"), ("nvshmem", "nvshmem_us"), ("chosen", "chosen_us")):
    if not _close(modeled.get(key), row[column]):
      problems.append(f"{key} {modeled.get(key)} us != core {row[column]}")
  said = decision.get("upstream")
  upstream = None if said is None else _UPSTREAM.get(said, said)
  if upstream != row["upstream_plan"]:
    problems.append(
      f"upstream assigner {decision.get('upstream')} on the program != "
      f"{row['upstream_plan']} on the sweep's module"
    )
  return problems


def check_topology(
  spec: str,
  topology: Topology,
  table: CostTable,
  cost_table_path: str | None,
  tool: str,
  work_dir: str,
) -> list[Result]:
  """[(case name, problems)] for one topology's sample."""
  cases = sample_cases(spec, topology)
  hlo = compile_module(topology, cases)
  stem = os.path.join(work_dir, spec.replace(":", "_"))
  atomic_output.write_atomic(stem + ".hlo", hlo)
  report = run_pass(tool, stem + ".hlo", spec, cost_table_path, stem + ".json")
  decisions = list(report["decisions"])
  results: list[Result] = []
  n = topology.num_devices
  upstream = sweep_cases.upstream_plans([(spec, topology)])
  for shape, size in cases:
    row = sweep_cases.evaluate(spec, topology, table, shape, size, upstream[(spec, shape)])
    pairs = [list(p) for p in sweep_cases.pairs_for(shape, n)]
    found = [d for d in decisions if d["bytes"] == row["bytes"] and d["pairs"] == pairs]
    name = sweep_cases.case_name(row)
    if len(found) != 1:
      results.append(
        (
          name,
          row,
          [
            f"{len(found)} decisions in the pass report have "
            f"{row['bytes']} bytes and the {shape} pairs; "
            "expected 1"
          ],
        )
      )
      continue
    decisions.remove(found[0])
    results.append((name, row, compare(row, found[0])))
  for d in decisions:  # XLA made a permute we did not plan for
    results.append(
      (
        f"{spec} {d['instruction']}",
        None,
        [f"unexpected permute of {d['bytes']} bytes in the module"],
      )
    )
  return results


def run_check(
  specs: Sequence[str] = (),
  cost_table: str | None = None,
  nvshmem_opt: str | None = None,
  out: str | None = None,
  jobs: int = 1,
  table: CostTable | None = None,
) -> list[Result]:
  """[(case name, sweep row, problems)] for every sampled case of every topology
  (default: DEFAULT_TOPOLOGIES); the compiled HLO and reports stay in `out` if given.
  table: cost_table as the command already read it, else read here; the pass is
  given its text (a file read once: a FIFO gives its bytes once)."""
  topologies = sweep.parse_topologies(list(specs) or list(DEFAULT_TOPOLOGIES))
  table = table or sweep.load_table(cost_table)
  tool = _nvshmem_opt_path(nvshmem_opt)
  if not tool or not os.path.exists(tool):
    raise HeuristicsError(
      "nvshmem-opt not found; build it (scripts/setup.sh) or pass --nvshmem-opt=PATH"
    )
  if jobs < 1:
    raise HeuristicsError("--jobs must be at least 1")
  if out:
    os.makedirs(out, exist_ok=True)
  with tempfile.TemporaryDirectory(prefix="heuristics-check-") as tmp:
    work_dir = out or tmp
    if cost_table:
      cost_table = os.path.join(tmp, "cost_table.txt")
      atomic_output.write_atomic(cost_table, str(table))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
      futures = [
        pool.submit(check_topology, spec, topology, table, cost_table, tool, work_dir)
        for spec, topology in topologies
      ]
      return [r for f in futures for r in f.result()]
