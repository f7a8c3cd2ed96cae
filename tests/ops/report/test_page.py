"""hlo_tools.ops.report.page: the report's page, its side-by-side rows and each
permute's verdict (on a stock XLA, naming the mode that runs it)."""

from hlo_tools.ops.report import page
from hlo_tools.ops.report.cases import Case


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


def _explained(nccl, other, plan, reason="", **kw):
  return dict(
    {
      "instruction": "cp",
      "modeled_us": {"nccl": nccl, "nvshmem": other, "chosen": other if plan != "nccl" else nccl},
      "choice": {"plan": plan},
      "reason": reason,
    },
    **kw,
  )


def test_verdict_says_who_wins_and_by_how_much():
  assert page.verdict(_explained(20.0, 15.0, "nvshmem")) == "NVSHMEM wins: 25.0% faster than NCCL"
  assert page.verdict(_explained(10.0, 12.0, "nccl")) == "NCCL wins: NVSHMEM would be 20.0% slower"
  inside = _explained(100.0, 97.0, "nccl", "NCCL: nvshmem 3.0% faster, inside the margin")
  assert page.verdict(inside) == "NCCL kept: NVSHMEM only 3.0% faster, inside the core's margin"
  over = _explained(100.0, 90.0, "nccl", "NCCL: over the symmetric heap")
  assert page.verdict(over) == "NCCL: over the symmetric heap"


def test_verdict_of_a_refused_backend_gives_the_reason():
  refused = _explained(10.0, None, "nccl", "NCCL: nvshmem refused: two edges leave their host")
  assert page.verdict(refused) == "NCCL only: NVSHMEM cannot run here (two edges leave their host)"


def test_a_permute_the_user_marked_saves_nothing():
  marked = _explained(20.0, 15.0, "nvshmem", user_mark="nvshmem")
  assert page.verdict(marked) == (
    "marked by the user: nvshmem; kept as marked (NVSHMEM), no saving counted"
  )


def test_alternative_is_the_chosen_else_the_fastest_other_backend():
  backends = {"nccl": {"us": 10.0}, "peer": {"us": 8.0}, "symmetric": {"us": 7.0}}
  assert page.alternative(_explained(10.0, None, "peer", backends=backends)) == ("peer", 8.0)
  assert page.alternative(_explained(10.0, None, "nccl", backends=backends)) == ("symmetric", 7.0)
  refused = {"nccl": {"us": 10.0}, "peer": {"us": None}, "symmetric": {"us": None}}
  assert page.alternative(_explained(10.0, None, "nccl", backends=refused)) == ("peer", None)
  # The pinned XLA's set: NVSHMEM, from the modeled times.
  assert page.alternative(_explained(10.0, 6.0, "nvshmem")) == ("nvshmem", 6.0)


def test_backend_set_names_and_title():
  assert page.set_names(None) == "NVSHMEM"
  assert page.set_names("nccl,peer,symmetric") == "peer memory or symmetric memory"
  assert page.set_names("nccl") == "NCCL only"
  assert page.page_title(None) == "NVSHMEM collective-permute report"
  assert page.page_title("nccl,peer") == "Collective-permute report: NCCL or peer memory"
  assert page.fmt_us(None) == "-" and page.fmt_us(1.234) == "1.23"


def test_upstream_is_compared_only_where_the_set_offers_nvshmem():
  assert page._upstream_cell("NVSHMEM", None) == "NVSHMEM"
  assert page._upstream_cell(None, "nccl,nvshmem") == "-"
  assert page._upstream_cell("NVSHMEM", "nccl,peer").startswith("not compared")


def test_other_backends_column():
  assert page._others_us({"nvshmem_us": None, "backend_us": {}}) == "refused"
  assert page._others_us({"nvshmem_us": 6.0, "backend_us": {"nccl": 9.0, "nvshmem": 6.0}}) == "6.00"
  row = {"nvshmem_us": None, "backend_us": {"nccl": 1.0, "peer": 2.5, "symmetric": None}}
  assert page._others_us(row) == "peer 2.50<br>symmetric refused"


def _collective(name, nccl, chosen, plan, runs, **kw):
  return dict(
    {
      "instruction": name,
      "bytes": 4096,
      "trip_count": runs if runs > 1 else None,
      "while_loop": "while" if runs > 1 else None,
      "edges_by_class": {"nvlink": 8},
      "modeled_us": {"nccl": nccl, "nvshmem": chosen, "chosen": chosen},
      "choice": {"plan": plan},
      "runs_per_step": runs,
      "runs_bound": "exact",
      "upstream": {"backend": "NVSHMEM"},
      "reason": "",
    },
    **kw,
  )


def test_comparison_rows_save_per_run_and_per_step():
  case = Case(id="c", title="ring on 1x1x8", topology="1x1x8")
  result = {
    "case": case,
    "explain": {
      "collectives": [
        _collective("loop", 30.0, 20.0, "nvshmem", 8),
        _collective("marked", 30.0, 20.0, "nvshmem", 1, user_mark="nvshmem"),
        _collective(
          "branch",
          30.0,
          25.0,
          "nvshmem",
          1,
          under_branch={"conditional": "cond", "computation": "b1", "branch": 1},
        ),
      ]
    },
  }
  loop, marked, branch = page.comparison_rows([result])
  assert (loop["case"], loop["title"], loop["topology"]) == ("c", "ring on 1x1x8", "1x1x8")
  # 10 us saved a run, 8 runs a step.
  assert (loop["saved_us_per_run"], loop["saved_us_per_step"], loop["nccl_us_per_step"]) == (
    10.0,
    80.0,
    240.0,
  )
  assert loop["verdict"] == "NVSHMEM wins: 33.3% faster than NCCL" and loop["branch"] is None
  # The user's mark is no saving of the pass's.
  assert marked["saved_us_per_run"] == 0.0 and marked["user_mark"] == "nvshmem"
  assert branch["branch"] == ["cond", "b1", 1] and branch["saved_us_per_step"] == 5.0
