"""hlo_tools.ops.report.analyze: one case analysed (nvshmem-opt on each stage, explain,
verify, diff, trace) and its entry in report.json."""

import json
import os

from hlo_tools import selection
from hlo_tools.model import options
from hlo_tools.ops.report import analyze
from hlo_tools.ops.report.analyze import Loaded
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.inputs import prepare_inputs

from conftest import FIXTURES

SHIFT = FIXTURES / "shift_1x1x2.before_async.hlo"


def test_input_label_names_what_the_user_gave():
  copy = "r/c/hlo/before_async.hlo"
  compiled = Case(id="c", title="t", topology="1x1x8")
  assert analyze.input_label(compiled, "before_async", copy) == copy
  given = Case(id="c", title="t", topology="1x1x8", path="/abs/m.hlo", label="m.hlo")
  assert analyze.input_label(given, "input", copy) == "m.hlo"
  dump = Case(id="c", title="t", topology="1x1x8", path="/abs/d", label="d", program="module_2.f")
  assert analyze.input_label(dump, "before_async", copy) == "d:module_2.f:before_async"


def test_the_driver_gets_a_table_only_where_the_user_gave_one():
  table = selection.load_cost_table()
  builtin = Loaded(None, table, None)
  assert builtin.driver_table() is None and builtin.table_and_set == (table, None)
  given = Loaded("t.txtpb", table, "nccl,nvshmem")
  assert given.driver_table() is table and given.table_and_set == (table, "nccl,nvshmem")


def test_no_trace_without_per_pass_snapshots(tmp_path):
  assert analyze._trace(None) is None
  assert analyze._trace(str(tmp_path)) is None  # no dumps at all: nothing to trace


def test_a_shift_on_two_gpus_stays_on_nccl_and_verifies(tmp_path):
  # 0 -> 1 only: device 0 has no source, so NVSHMEM is refused and the pass keeps NCCL.
  case = Case(id="shift", title="shift", topology="1x1x2", path=str(SHIFT), label="shift.hlo")
  case_dir = str(tmp_path / "shift")
  stages, dump_dir, origin = prepare_inputs(case, case_dir, lambda m: None, 1 << 30)
  selected = options.load("1x1x2")
  result = analyze.analyze_case(
    case, case_dir, stages, dump_dir, selected, None, lambda m: None, origin=origin
  )
  assert result["stages"] == ["input"] and result["trace"] is None
  [perm] = result["explain"]["collectives"]
  assert perm["instruction"] == "ppermute.3.0" and perm["bytes"] == 1 * 128 * 2 * 64 * 2
  assert perm["choice"]["plan"] == "nccl" and "has no source" in perm["reason"]
  assert all(v["passed"] for v in result["verify"].values())
  assert sorted(os.listdir(os.path.join(case_dir, "json"))) == [
    "chart.json",
    "diff_input.json",
    "explain.json",
    "pass_input.json",
    "trace.json",
    "verify_input.json",
  ]
  assert json.loads((tmp_path / "shift" / "json" / "trace.json").read_text()) is None
  entry = analyze.case_summary(result, "shift")
  assert (entry["id"], entry["input"], entry["stages"]) == ("shift", "shift.hlo", ["input"])
  assert entry["verify_passed"] and entry["failed_checks"] == []
  [summary] = entry["collective_permutes"]
  assert summary["upstream"] == perm["upstream"]["backend"] and "upstream" in summary
  assert summary["edges_by_class"] == perm["edges_by_class"]


def test_case_summary_lists_the_failed_checks_once():
  case = Case(id="c", title="t", topology="1x1x8", path="/abs/m.hlo", label="m.hlo")
  permute = {
    "instruction": "cp",
    "computation": "main",
    "bytes": 64,
    "modeled_us": {"nccl": 1.0},
    "choice": {"plan": "nccl"},
    "upstream": {"backend": "NVSHMEM", "source": "assigner"},
    "line": 7,  # not in the summary
  }
  result = {
    "case": case,
    "stages": ["input"],
    "explain": {"collectives": [permute], "program": {"permutes": 1, "runs": [1]}},
    "verify": {
      "input": {"passed": False, "failed_checks": ["pairs", "backend"]},
      "input_as_given": {"passed": False, "failed_checks": ["pairs"]},
    },
  }
  entry = analyze.case_summary(result, "c")
  assert not entry["verify_passed"] and entry["failed_checks"] == ["backend", "pairs"]
  assert entry["collective_permutes"] == [
    {
      "instruction": "cp",
      "computation": "main",
      "bytes": 64,
      "modeled_us": {"nccl": 1.0},
      "choice": {"plan": "nccl"},
      "upstream": "NVSHMEM",
    }
  ]
  assert entry["program"] == {"permutes": 1} and entry["note"] is None
