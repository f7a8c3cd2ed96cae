"""The property behind every command: for a fixture and a backend set, explain, report,
nvshmem-opt, verify and the hook's decide path give each permute the same plan, and
verify passes what nvshmem-opt plans.

Every fixture meets nvshmem-opt and the hook's decide path (one driver run each) with
NVSHMEM's and peer memory's sets, and the sample below with symmetric memory's too; the
commands that start the driver again (explain, verify of the plan) run on a fixed
sample that covers each rule the plans differ by (a ring inside a host and across
hosts, a branch, a user's mark, a type NVSHMEM has no put for, part of a host, a
destination off the heap), and report, the slowest, on two of them: the suite stays
within its time on two cores. ONE_ANSWER_ALL=1 runs every command on every fixture.
"""

import json
import os
import re
import subprocess

import pytest

from hlo_tools import cli, selection
from hlo_tools.hlo import reader
from hlo_tools.hook import decide as hook_decide
from hlo_tools.model import collectives, driver

from conftest import FIXTURES, NVSHMEM_OPT

EVERY = os.environ.get("ONE_ANSWER_ALL") == "1"
BACKEND_SETS = ("nccl,nvshmem", "nccl,peer", "nccl,peer,symmetric")
# The SxHxG a fixture was compiled for, in its name.
_SPEC = re.compile(r"_(\d+x\d+x\d+)\.")
# Every module fixture that names its topology, those of older and newer jax too.
ALL = sorted(
  p
  for p in [*FIXTURES.glob("*.hlo"), *FIXTURES.glob("jax*/*.hlo")]
  if _SPEC.search(p.name) and ".lowered." not in p.name and "before_optimizations" not in p.name
)
SAMPLE = [
  "ring_1x1x8.after_optimizations.hlo",
  "ring_1x2x4.before_async.hlo",
  "cond_ring_1x1x8.after_optimizations.hlo",
  "marked_ring_1x1x8.after_optimizations.hlo",
  "fp8_kv_ring_1x1x8.before_async.hlo",
  "part_host_matmul_1x1x8.after_optimizations.hlo",
  "donated_ring_1x1x8.after_optimizations.hlo",
]
REPORTED = ["ring_1x1x8.after_optimizations.hlo", "donated_ring_1x1x8.after_optimizations.hlo"]


def spec_of(path):
  return _SPEC.search(path.name).group(1)


def per_op(backends):
  """The target of a peer set: the series' XLA, which runs each permute's own mode
  (a stock XLA runs one mode per program, which explain reports apart)."""
  return ["--per-op-modes"] if "peer" in backends else []


def run_driver(path, backends, tmp_path):
  """nvshmem-opt's rewrite with its JSON: ({instruction: plan}, report, output)."""
  out = tmp_path / f"plan.{path.name}"
  rep = tmp_path / f"plan.{path.name}.json"
  proc = subprocess.run(
    [
      str(NVSHMEM_OPT),
      str(path),
      f"--topology={spec_of(path)}",
      f"--backends={backends}",
      "--annotate",
      *per_op(backends),
      f"--report={rep}",
      "-o",
      str(out),
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  report = json.loads(rep.read_text())
  # The output beside the input's buffer assignment, as report copies it.
  placed = path.with_name(path.name[: -len(".hlo")] + "-buffer-assignment.txt")
  if placed.is_file():
    (tmp_path / f"plan.{path.name[: -len('.hlo')]}-buffer-assignment.txt").write_bytes(
      placed.read_bytes()
    )
  return {d["instruction"]: d["plan"] for d in report["decisions"]}, report, out


def hook_plans(path, backends, report):
  """The hook's decide path on the module (the core through the binding, as the hook
  asks it inside jax's compile), on the topology the driver placed."""
  module = reader.parse_hlo_file(str(path))
  topology = driver.placed_topology(report)
  table = selection.with_backends(selection.load_cost_table(), backends)
  plans = {}
  for permute in collectives.collective_permutes(module):
    _, d = hook_decide.decide_mode(
      selection,
      topology,
      table,
      backends.split(","),
      permute,
      buffers=hook_decide.operand_count(module, permute),
      num_partitions=report["num_partitions"],
      num_replicas=report["num_replicas"],
    )
    # An async-wrapped permute is decided by the driver by its wrapped instruction.
    name = permute.start
    if permute.form == "async-wrapped" and permute.wrapped_computation:
      name = module.computation(permute.wrapped_computation).root.name
    plans[name] = d["plan"]
  return plans


# Symmetric memory (refused without NCCL signals) beside peer memory on the sample;
# every set on every fixture with ONE_ANSWER_ALL=1.
CASES = [
  (path, backends)
  for path in ALL
  for backends in BACKEND_SETS
  if EVERY or path.name in SAMPLE or backends != "nccl,peer,symmetric"
]


@pytest.mark.long
@pytest.mark.parametrize(
  "path, backends",
  CASES,
  ids=[f"{str(p.relative_to(FIXTURES))[: -len('.hlo')]}-{b}" for p, b in CASES],
)
def test_every_command_gives_one_answer(capsys, tmp_path, path, backends):
  planned, report, out = run_driver(path, backends, tmp_path)
  if "peer" in backends:  # the hook serves the XLAs with collectives modes
    marked = {d["instruction"] for d in report["decisions"] if d.get("user_mark")}
    hooked = hook_plans(path, backends, report)
    assert {k: v for k, v in hooked.items() if k not in marked} == {
      k: v for k, v in planned.items() if k not in marked and k in hooked
    }
  if not (EVERY or path.name in SAMPLE):
    return
  spec = f"--topology={spec_of(path)}"
  assert cli.main(["explain", str(path), spec, f"--backends={backends}", "--format=json"]) == 0
  explained = json.loads(capsys.readouterr()[0])
  assert {e["instruction"]: e["choice"]["plan"] for e in explained["collectives"]} == planned
  # verify of the plan: passes, and its selection check holds the same plans.
  rc = cli.main(
    ["verify", str(out), spec, f"--backends={backends}", "--format=json", *per_op(backends)]
  )
  verified = json.loads(capsys.readouterr()[0])
  assert rc == 0, [c for c in verified["checks"] if c["status"] == "fail"]
  [selection_check] = [c for c in verified["checks"] if c["name"] == "selection"]
  said = {r["instruction"]: r["message"].split(" ", 1)[0] for r in selection_check["results"]}
  assert set(said.values()) <= set(selection.BACKENDS)
  # The rewrite makes a start and a done of a sync permute: found by their names.
  written = dict(planned)
  for d in report["decisions"]:
    written.update(dict.fromkeys(d["new_instructions"], d["plan"]))
  assert said and said == {k: v for k, v in written.items() if k in said}
  if not (EVERY or path.name in REPORTED):
    return
  rep = tmp_path / "report"
  assert (
    cli.main(["report", str(path), spec, f"--backends={backends}", f"--out={rep}", "--quiet"]) == 0
  )
  [case] = json.loads((rep / "report.json").read_text())["cases"]
  assert {p["instruction"]: p["choice"]["plan"] for p in case["collective_permutes"]} == planned
