"""report's page: a permute's verdict on a stock XLA names the mode that runs it."""

from hlo_tools.ops.report import page


def _entry(plan):
  return {"choice": {"plan": plan}}


def test_stock_xla_line_names_the_programs_one_mode_where_it_differs():
  program = {"per_op_xla": False, "backend": "nccl"}
  note = page._stock_note(_entry("peer"), program)
  assert note == "; a stock XLA runs NCCL here, the program's one mode"


def test_no_note_where_the_permute_runs_its_own_choice():
  assert page._stock_note(_entry("peer"), {"per_op_xla": False, "backend": "peer"}) == ""
  # The series runs each permute's own mode; no program mode: nothing to add.
  assert page._stock_note(_entry("peer"), {"per_op_xla": True, "backend": "nccl"}) == ""
  assert page._stock_note(_entry("peer"), None) == ""
