"""hlo_tools.ops.report.text: the report's summary in words, per configuration its
saving per step and per permute its choice."""

import re

import pytest

from hlo_tools.ops import report
from hlo_tools.ops.report import text
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.text import _others_text, step_line, summary_text

from conftest import FIXTURES

ROW = {
  "case": "c2",
  "title": "t2",
  "instruction": "cp",
  "bytes": 4096,
  "trips": "x8 trips",
  "edges_by_class": {"same_device": 0, "nvlink": 6, "network": 2},
  "plan": "nccl",
  "collectives_mode": None,
  "nccl_us": 12.0,
  "nvshmem_us": None,
  "chosen_us": 12.0,
  "backend_us": {"nccl": 12.0, "nvshmem": None},
  "upstream": "NVSHMEM",
  "verdict": "NCCL only: NVSHMEM cannot run here (two edges leave their host)",
  "saved_us_per_step": 0.0,
  "nccl_us_per_step": 96.0,
  "runs_bound": "exact",
}


def _report(backends=None):
  return {
    "backends": backends,
    "cost_table": None,
    "cases": [
      {"title": "t1", "collective_permutes": [], "note": None},
      {
        "title": "t2",
        "collective_permutes": [{"instruction": "cp"}],
        "note": "note: from before XLA's optimizations",
        "processes": "one process per GPU",
        "placement": "logical device i on device i",
      },
    ],
    "summary": {"comparison": [ROW], "verify_passed": False, "failed_checks": ["pairs"]},
    "out": "/reports/r",
  }


def test_summary_has_a_line_per_configuration_and_permute():
  assert summary_text(_report()).splitlines() == [
    "NVSHMEM collective-permute report: 2 configuration(s), cost table default",
    "  t1: no collective-permutes, nothing for the pass to decide",
    "  t2: note: from before XLA's optimizations",
    "  t2: one process per GPU; logical device i on device i",
    "  t2: per step the choices save 0.00 us of modeled permute time, 0.0% of 96.00 us on "
    "NCCL, time that may overlap attention: the step's own time is not modeled here, so its "
    "share of a step is not known; %cp nccl saves 0.00 us x8 trips",
    "  t2: %cp (4.0 KiB/device x8 trips; nvlink 6, network 2): nccl, nccl 12.00 us, "
    "nvshmem refused; upstream NVSHMEM; NCCL only: NVSHMEM cannot run here (two edges "
    "leave their host)",
    "verify: FAILED pairs",
    "report: /reports/r/index.html",
  ]


def test_a_set_without_nvshmem_has_no_upstream_to_compare():
  lines = summary_text(_report("nccl,peer")).splitlines()
  assert lines[0].startswith("Collective-permute report: NCCL or peer memory: 2 configuration(s)")
  assert lines[0].endswith(", backends nccl,peer")
  assert not [l for l in lines if "upstream" in l]


def test_overlap_says_what_the_schedule_shows():
  assert text.overlap_text([{"synchronous": True}]).startswith(
    "the module is not scheduled with async permutes"
  )
  windows = [
    {"synchronous": False, "attention_between": True},
    {"synchronous": False, "attention_between": False},
  ]
  assert text.overlap_text(windows).startswith(
    "1 of 2 async permutes have attention (a fused-attention call, a conditional or a loop) "
    "scheduled between start and done, so the step gains only"
  )
  assert text.overlap_text(windows[1:] * 2) == (
    "none of the 2 async permutes has attention (a fused-attention call, a conditional or a "
    "loop) scheduled between start and done"
  )


def test_durations_switch_to_milliseconds_at_one():
  assert text._duration(999.5) == "999.50 us"
  assert text._duration(1500.0) == "1.50 ms" and text._duration(-2000.0) == "-2.00 ms"


def test_bounds_of_the_step_figures():
  exact = {"runs_bound": "exact"}
  assert text._bound([exact, {}]) == ("", "")
  assert text._bound([exact, {"runs_bound": "at least"}]) == ("at least ", "")
  # Bounds both ways, or an unknown one: neither bound holds.
  for bounds in (["at least", "at most"], ["unknown"]):
    prefix, note = text._bound([{"runs_bound": b} for b in bounds])
    assert prefix == "" and note.startswith(" (neither a lower nor an upper bound")


def test_step_saving_counts_a_conditionals_largest_branch():
  def row(saved, nccl, branch=None):
    return {"saved_us_per_step": saved, "nccl_us_per_step": nccl, "branch": branch}

  rows = [
    row(10.0, 30.0),
    # One conditional: branch 0 holds two permutes (5 + 4 us), branch 1 one (8 us).
    row(5.0, 15.0, ["cond", "b0", 0]),
    row(4.0, 15.0, ["cond", "b0", 0]),
    row(8.0, 20.0, ["cond", "b1", 1]),
  ]
  assert text.step_saving(rows) == (10.0 + 9.0, 30.0 + 30.0)


def test_summary_says_refused_rather_than_a_dash():
  # A backend the core refused has no modeled time: the summary line says so.
  pinned = {"nccl_us": 59.5, "nvshmem_us": None, "backend_us": {"nccl": 59.5, "nvshmem": None}}
  assert _others_text(pinned) == "nvshmem refused"
  today = {
    "nccl_us": 20.0,
    "nvshmem_us": None,
    "backend_us": {"nccl": 20.0, "peer": 31.5, "symmetric": None},
  }
  assert _others_text(today) == "peer 31.50 us, symmetric refused"


def _oracle(case):
  """The step's (saved, NCCL) us from the report's entries, by hand."""
  saved = nccl = 0.0
  for p in case["collective_permutes"]:
    runs = p["trip_count"] or 1
    saved += (p["modeled_us"]["nccl"] - p["modeled_us"]["chosen"]) * runs
    nccl += p["modeled_us"]["nccl"] * runs
  return saved, nccl


def _ms(text):
  value, unit = text.split()
  return float(value) * (1000 if unit == "ms" else 1)


def test_summary_line_has_each_choice_and_the_step_saving(tmp_path):
  # The train step compiled for one host (cp 4 x tp 2): NVSHMEM wins every permute.
  path = FIXTURES / "train_step_1x1x8.after_optimizations.hlo"
  case = Case(id="ts", title="train step", topology="1x1x8", path=str(path), label=str(path))
  data = report.build([case], tmp_path / "r", progress=False)
  [entry] = data["cases"]
  text = summary_text(data)
  [line] = [l for l in text.splitlines() if "per step" in l]
  m = re.fullmatch(
    r"  train step: per step the choices save ([\d.]+ m?s|[\d.]+ us) of "
    r"modeled permute time, ([\d.]+)% of ([\d.]+ m?s|[\d.]+ us) on NCCL, "
    r"time that may overlap attention: the step's own time is not modeled "
    r"here, so its share of a step is not known; "
    r"(?:none of the \d+|\d+ of (\d+)) async permutes ha(?:s|ve) attention "
    r"\(a fused-attention call, a conditional or a loop\) scheduled between "
    r"start and done[^;]*; (.*)",
    line,
  )
  assert m, line
  # The compiled ring starts each permute before its step's attention.
  assert m.group(4) == "6"
  saved, nccl = _oracle(entry)
  assert saved > 0 and _ms(m.group(1)) == pytest.approx(saved, abs=6)
  assert _ms(m.group(3)) == pytest.approx(nccl, abs=6)
  assert float(m.group(2)) == pytest.approx(saved / nccl * 100, abs=0.06)
  # Per permute, in the report's order: its name, choice, saving per run and trips.
  each = m.group(5).split(", ")
  assert len(each) == len(entry["collective_permutes"]) == 6
  for part, p in zip(each, entry["collective_permutes"]):
    save = p["modeled_us"]["nccl"] - p["modeled_us"]["chosen"]
    trips = f" x{p['trip_count']} trips" if p["trip_count"] else ""
    assert part == f"%{p['instruction']} {p['choice']['plan']} saves {save:.2f} us{trips}"
  assert all(p["choice"]["plan"] == "nvshmem" for p in entry["collective_permutes"])
  # The line heads its configuration's permute lines.
  lines = text.splitlines()
  assert lines[lines.index(line) + 1].startswith(f"  train step: %{each[0].split()[0][1:]} (")


def test_unknown_trips_make_the_step_a_lower_bound():
  # Runs per step as the model gives them: a ring in a loop of unknown count inside a
  # 4-step loop runs at least 4 times.
  row = lambda name, runs, trips, count: {
    "case": "c",
    "title": "t",
    "instruction": name,
    "plan": "nvshmem",
    "nccl_us": 30.0,
    "chosen_us": 20.0,
    "runs": runs,
    "saved_us_per_run": 10.0,
    "saved_us_per_step": 10.0 * runs,
    "trips": trips,
    "trip_count": count,
    "nccl_us_per_step": 30.0 * runs,
    "runs_bound": "exact" if count or not trips else "at least",
  }
  rows = [
    row("a", 8, "x8 trips", 8),
    row("b", 1, "", None),
    row("c", 4, "at least x4 trips (4 x ?; ? = a loop whose count is unknown)", None),
  ]
  assert step_line(rows) == (
    "  t: per step the choices save at least 130.00 us of modeled permute time, 33.3% of "
    "390.00 us on NCCL, time that may overlap attention: the step's own time is not "
    "modeled here, so its share of a step is not known; %a nvshmem saves 10.00 us x8 "
    "trips, %b nvshmem saves 10.00 us, "
    "%c nvshmem saves 10.00 us at least x4 trips (4 x ?; ? = a loop whose count is unknown)"
  )
  assert "at least" not in step_line(rows[:2])
