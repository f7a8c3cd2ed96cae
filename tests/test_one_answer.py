"""One answer per permute, whatever asks: a program on part of its hosts, a ring into a
donated or returned buffer, on real XLA dumps (scripts/gen_fixtures_part_of_host.py).

Every command (explain, report, verify, nvshmem-opt) prints the core's answer; none
plans what its own verify fails.
"""

import json
import shutil
import subprocess

import pytest

from hlo_tools import cli
from hlo_tools.model import driver

from conftest import FIXTURES, NVSHMEM_OPT

PART = FIXTURES / "part_host_matmul_1x1x8.after_optimizations.hlo"
PARTS = FIXTURES / "part_hosts_matmul_1x2x8.after_optimizations.hlo"
DONATED = FIXTURES / "donated_ring_1x1x8.after_optimizations.hlo"
RETURNED = FIXTURES / "returned_ring_1x1x8.after_optimizations.hlo"
IDLE_0 = "NVSHMEM's barrier spans NVSHMEM_TEAM_SHARED, all 8 GPUs of host 0; GPUs 4-7 are not"
DONATED_WHY = "parameter 1's buffer (a donated input)"
RETURNED_WHY = "which the program returns (maybe-live-out)"


def explain(capsys, path, *flags):
  rc = cli.main(["explain", str(path), "--format=json", *flags])
  out, err = capsys.readouterr()
  assert rc == 0, err
  return json.loads(out), err


def plans(path, *flags):
  """nvshmem-opt's own answer: {instruction: (plan, reason)} of its JSON report."""
  proc = subprocess.run(
    [str(NVSHMEM_OPT), str(path), "--mode=explain", "--report=-", *flags],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  report = json.loads(proc.stdout)
  return {d["instruction"]: (d["plan"], d["reason"]) for d in report["decisions"]}, proc.stderr


def report(tmp_path, path, *flags):
  out = tmp_path / "r"
  rc = cli.main(["report", str(path), f"--out={out}", "--quiet", *flags])
  [case] = json.loads((out / "report.json").read_text())["cases"]
  return rc, case, out / case["id"]


def verify(capsys, path, *flags):
  rc = cli.main(["verify", str(path), "--format=json", *flags])
  out, err = capsys.readouterr()
  return rc, json.loads(out) if out.strip() else None, err


def with_backend(tmp_path, path, backend):
  """The module written by hand with every permute's backend set to `backend`, its
  config and buffer assignment beside it."""
  stem = path.name[: -len(".hlo")]
  out = tmp_path / path.name
  out.write_text(path.read_text().replace('"backend":"DEFAULT"', f'"backend":"{backend}"'))
  for suffix in (".config.pbtxt", "-buffer-assignment.txt"):
    if (FIXTURES / (stem + suffix)).is_file():
      shutil.copyfile(FIXTURES / (stem + suffix), tmp_path / (stem + suffix))
  return out


@pytest.mark.parametrize("flags", [["--topology=1x1x8"], []], ids=["stated", "derived"])
def test_part_of_a_host_is_nccl_everywhere_naming_the_idle_gpus(capsys, tmp_path, flags):
  ex, err = explain(capsys, PART, *flags)
  assert {e["choice"]["plan"] for e in ex["collectives"]} == {"nccl"}
  assert all(IDLE_0 in e["reason"] for e in ex["collectives"])
  if not flags:  # the derived hosts are the default host of 8, and the user is told
    assert ex["topology"].startswith("1x1x8")
    assert "--topology=1x1x4 or --devices-per-host=N" in err
  decided, _ = plans(PART, *flags)
  assert {p for p, _ in decided.values()} == {"nccl"}
  assert all(IDLE_0 in why for _, why in decided.values())
  rc, case, _ = report(tmp_path, PART, *flags)
  assert rc == 0
  assert {p["choice"]["plan"] for p in case["collective_permutes"]} == {"nccl"}
  assert all(IDLE_0 in p["reason"] for p in case["collective_permutes"])


def test_a_host_of_only_the_programs_gpus_is_the_users_answer(capsys):
  ex, _ = explain(capsys, PART, "--topology=1x1x4")
  assert {e["choice"]["plan"] for e in ex["collectives"]} == {"nvshmem"}
  decided, _ = plans(PART, "--devices-per-host=4")
  assert {p for p, _ in decided.values()} == {"nvshmem"}


def test_part_of_two_hosts_names_the_first_hosts_idle_gpus(capsys):
  ex, _ = explain(capsys, PARTS, "--topology=1x2x8")
  assert {e["choice"]["plan"] for e in ex["collectives"]} == {"nccl"}
  assert all(IDLE_0 in e["reason"] for e in ex["collectives"])
  # Hosts of only the program's GPUs, placed as the program's ids are their PEs.
  ex, _ = explain(capsys, PARTS, "--topology=1x2x4:map=0,1,2,3,4,5,6,7")
  assert {e["choice"]["plan"] for e in ex["collectives"]} == {"nvshmem"}


@pytest.mark.parametrize("path", [PART, PARTS], ids=["1x1x8", "1x2x8"])
def test_verify_fails_a_hand_written_nvshmem_plan_on_part_of_a_host(capsys, tmp_path, path):
  spec = "1x1x8" if path == PART else "1x2x8"
  rc, result, err = verify(capsys, with_backend(tmp_path, path, "NVSHMEM"), f"--topology={spec}")
  assert rc == 1, err
  failed = [c for c in result["checks"] if c["status"] == "fail"]
  assert any(IDLE_0 in r["message"] for c in failed for r in c["results"]), failed


@pytest.mark.parametrize(
  "path, why", [(DONATED, DONATED_WHY), (RETURNED, RETURNED_WHY)], ids=["donated", "returned"]
)
def test_a_destination_off_the_heap_is_nccl_and_reports_verify(capsys, tmp_path, path, why):
  ex, _ = explain(capsys, path, "--topology=1x1x8")
  [e] = ex["collectives"]
  assert (
    e["choice"]["plan"] == "nccl"
    and why in e["reason"]
    and "CheckNvshmemDestination" in e["reason"]
  )
  decided, _ = plans(path, "--topology=1x1x8")
  assert [p for p, _ in decided.values()] == ["nccl"]
  assert why in next(iter(decided.values()))[1]
  rc, case, _ = report(tmp_path, path, "--topology=1x1x8")
  assert rc == 0, case  # its own verify passes
  [p] = case["collective_permutes"]
  assert p["choice"]["plan"] == "nccl" and why in p["reason"]


def test_without_the_buffer_assignment_the_same_ring_is_nvshmem(capsys, tmp_path):
  # The rule reads XLA's buffer assignment: without it the ring is priced alone, and
  # a hand-written NVSHMEM plan beside the assignment fails verify.
  bare = tmp_path / "bare" / DONATED.name
  bare.parent.mkdir()
  shutil.copyfile(DONATED, bare)
  config = DONATED.name[: -len(".hlo")] + ".config.pbtxt"
  shutil.copyfile(FIXTURES / config, bare.parent / config)
  ex, _ = explain(capsys, bare, "--topology=1x1x8")
  assert [e["choice"]["plan"] for e in ex["collectives"]] == ["nvshmem"]
  rc, result, _ = verify(capsys, with_backend(tmp_path, DONATED, "NVSHMEM"), "--topology=1x1x8")
  assert rc == 1
  failed = [c["name"] for c in result["checks"] if c["status"] == "fail"]
  assert "nvshmem-runtime" in failed
