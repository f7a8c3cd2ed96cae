"""hlo_tools.ops.verify: the named checks' run on fixtures and on the pass's output,
the hlo-verifier check from nvshmem-opt's answer, and the text of a result."""

import json

import pytest

from hlo_tools.errors import InputError
from hlo_tools.model import driver, options
from hlo_tools.ops import verify

from conftest import FIXTURES, NVSHMEM_OPT as DRIVER
from verify_cli import checks, edited, pass_output, run

# A table where NVSHMEM wins on NVLink at every size (the pass then writes NVSHMEM).
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"


@pytest.mark.parametrize(
  "fixture,topology",
  [
    ("ring_1x2x4.before_async", "1x2x4"),
    ("ring_1x2x4.after_optimizations", "1x2x4"),
    ("ring_2x2x4.after_optimizations", "2x2x4"),
    ("ring_bwd_1x2x4.before_async", "1x2x4"),
    ("shift_1x2x4.after_optimizations", "1x2x4"),
    ("ring_1x1x8.after_optimizations", "1x1x8"),
  ],
)
def test_every_fixture_passes_its_checks(capsys, fixture, topology):
  rc, out, err = run(capsys, FIXTURES / f"{fixture}.hlo", f"--topology={topology}", "--format=json")
  assert rc == 0, out + err
  by_name = checks(out)
  assert list(by_name) == list(verify.CHECKS)
  assert by_name["permutation"]["status"] == "pass"
  assert by_name["memory-space"]["status"] == "not_applicable"
  if DRIVER.exists():
    assert by_name["hlo-verifier"]["status"] == "pass"


def test_pass_output_passes_for_its_topology(capsys, tmp_path):
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, _ = run(capsys, out_hlo, "--topology=1x1x8", f"--cost-table={FAST_NVSHMEM}")
  assert rc == 0
  assert "PASS nvshmem-heap" in out and "PASS selection" in out
  assert "PASS start-done" in out and "all checks pass" in out


def test_backend_contradicting_topology_fails_selection_and_runtime(capsys, tmp_path):
  # NVSHMEM chosen for one host of 8, then checked against 2 hosts of 4: every
  # device still has a source (no hang), but two edges now cross hosts, where the
  # pinned runtime's receiver does not wait for the put (NVSHMEM_TEAM_SHARED), and
  # the model picks NCCL there.
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, _ = run(
    capsys, out_hlo, "--topology=1x2x4", f"--cost-table={FAST_NVSHMEM}", "--format=json"
  )
  assert rc == 1
  result = json.loads(out)
  assert result["failed_checks"] == ["nvshmem-runtime", "selection"]
  assert checks(out)["nvshmem-team"]["status"] == "pass"
  rc, out, _ = run(capsys, out_hlo, "--topology=1x2x4", f"--cost-table={FAST_NVSHMEM}")
  assert rc == 1 and "PASS nvshmem-heap" in out
  assert "FAILED: nvshmem-runtime, selection" in out and "2 of 8 edges" in out


def test_hlo_verifier_rejection_fails_the_check(capsys, tmp_path):
  # A start whose done has the wrong shape: our reader accepts it, XLA's verifier not.
  path = edited(
    tmp_path,
    FIXTURES / "ring_1x2x4.after_optimizations.hlo",
    "%collective-permute-done = bf16[2,1,128,2,64]{4,3,2,1,0} collective-permute-done(",
    "%collective-permute-done = bf16[2,1,128,2,32]{4,3,2,1,0} collective-permute-done(",
  )
  rc, out, _ = run(capsys, path, "--topology=1x2x4", "--format=json")
  assert rc == 1
  hv = checks(out)["hlo-verifier"]
  assert hv["status"] == "fail" and "HloVerifier rejects" in hv["results"][0]["message"]


# ---------------------------------------------------------------------------------------
# check_hlo_verifier: nvshmem-opt's answer as a check.


def test_hlo_verifier_is_skipped_without_the_driver():
  check = verify.check_hlo_verifier(None)
  assert check.status == "skip" and check.results == []
  assert check.note.startswith("skip: nvshmem-opt is not built")


def test_hlo_verifier_passes_on_exit_0_and_fails_on_a_rejection():
  ok = verify.check_hlo_verifier(driver.Answer(0, None, ""))
  assert ok.status == "pass" and ok.results[0]["message"] == "HloVerifier accepts the module"
  message = "m.hlo: HloVerifier rejects the module: bad shape"
  for rc in (1, 2):  # exit 2 with the verifier's rejection is a verdict, not bad input
    bad = verify.check_hlo_verifier(driver.Answer(rc, None, message))
    assert bad.status == "fail"
    assert bad.results[0]["message"] == f"nvshmem-opt exit {rc}: {message}"


def test_hlo_verifier_on_a_module_xla_cannot_load_is_bad_input():
  # Exit 2 for another reason: no check stands on a module XLA cannot load.
  with pytest.raises(InputError, match="m.hlo:3: expected '}'"):
    verify.check_hlo_verifier(driver.Answer(2, None, "m.hlo:3: expected '}'"))


def test_hlo_verifier_that_could_not_run_is_skipped():
  check = verify.check_hlo_verifier(driver.Answer(-1, None, "timed out"))
  assert check.status == "skip" and check.note == "skip: could not run nvshmem-opt: timed out"


# ---------------------------------------------------------------------------------------
# verify() in-process, without the driver.

SAFETY_ORDER = [
  "permutation",
  "start-done",
  "backend-config",
  "start-done-agree",
  "user-mark",
  "nvshmem-heap",
  "nvshmem-team",
  "nvshmem-runtime",
  "peer-safety",
]


def test_only_the_safety_checks_run_in_their_order():
  path = str(FIXTURES / "ring_1x2x4.before_async.hlo")
  result = verify.verify(path, options.load("1x2x4"), run_driver=False, only=verify.SAFETY_CHECKS)
  assert [c["name"] for c in result["checks"]] == SAFETY_ORDER
  assert result["passed"] and result["failed_checks"] == []
  assert result["collective_permutes"] == 1 and result["num_partitions"] == 8


def test_hlo_verifier_not_requested_or_already_accepted():
  path = str(FIXTURES / "ring_1x2x4.before_async.hlo")
  skipped = verify.verify(path, options.load("1x2x4"), run_driver=False)
  assert [c["name"] for c in skipped["checks"]][-2:] == ["hlo-verifier", "permute-mode"]
  [hv] = [c for c in skipped["checks"] if c["name"] == "hlo-verifier"]
  assert hv["status"] == "skip" and hv["note"] == "skip: not requested"
  accepted = verify.verify(path, options.load("1x2x4"), verified_by="nvshmem-opt wrote it")
  [hv] = [c for c in accepted["checks"] if c["name"] == "hlo-verifier"]
  assert hv["status"] == "pass" and hv["results"][0]["message"] == "nvshmem-opt wrote it"


def test_format_text_marks_each_check_and_ends_with_the_verdict():
  result = {
    "file": "m.hlo",
    "topology": "1x1x2",
    "backends": "nccl,nvshmem",
    "collective_permutes": 1,
    "num_partitions": 2,
    "num_partitions_from": "inferred from the topology's 2 devices",
    "topology_note": None,
    "passed": False,
    "failed_checks": ["permutation"],
    "checks": [
      {
        "name": "permutation",
        "status": "fail",
        "note": None,
        "results": [
          {
            "status": "fail",
            "instruction": "cp",
            "computation": "main",
            "line": 4,
            "message": "target 9 outside 0..1 (2 partitions)",
          }
        ],
      },
      {"name": "memory-space", "status": "not_applicable", "note": "no NVSHMEM", "results": []},
    ],
  }
  assert verify.format_text(result).split("\n") == [
    "m.hlo: num_partitions 2 (inferred from the topology's 2 devices; the module header does not say)",
    "FAIL permutation",
    "  fail %cp (main) line 4: target 9 outside 0..1 (2 partitions)",
    "N/A  memory-space: no NVSHMEM",
    "m.hlo: FAILED: permutation (topology 1x1x2, backends nccl,nvshmem, 1 collective-permute(s))",
  ]
