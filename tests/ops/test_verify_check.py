"""hlo_tools.ops.verify_check: one named check, its per-instruction results and status."""

from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.ops.verify_check import Check

MODULE = """HloModule m

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}
"""


def test_a_check_without_results_is_not_applicable():
  check = Check("memory-space")
  assert check.status == "not_applicable"
  check.note = "no collective-permute uses NVSHMEM"
  assert check.status == "not_applicable"
  assert check.to_json() == {
    "name": "memory-space",
    "status": "not_applicable",
    "note": "no collective-permute uses NVSHMEM",
    "results": [],
  }


def test_a_skip_note_makes_the_whole_check_skipped():
  check = Check("hlo-verifier")
  check.note = "skip: nvshmem-opt is not built"
  assert check.status == "skip"


def test_fail_outranks_pass_and_pass_outranks_skip():
  check = Check("selection")
  check.add("skip", None, "no decision recorded")
  assert check.status == "skip"
  check.add("pass", None, "nccl -> DEFAULT")
  assert check.status == "pass"
  check.add("fail", None, "backend NVSHMEM (nvshmem), the core decides nccl")
  assert check.status == "fail"
  # A skip note does not hide a result that failed or passed.
  check.note = "skip: not requested"
  assert check.status == "fail"


def test_a_result_names_its_instruction_computation_and_line():
  module = parse_hlo_text(MODULE, "m.hlo")
  negate = module.entry.instruction("n")
  check = Check("permutation")
  check.add("pass", negate, "fine")
  check.add("fail", None, "module-wide")
  assert check.results == [
    {"status": "pass", "instruction": "n", "computation": "main", "line": 5, "message": "fine"},
    {
      "status": "fail",
      "instruction": None,
      "computation": None,
      "line": None,
      "message": "module-wide",
    },
  ]
