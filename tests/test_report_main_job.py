"""The main job's embedded default: the seed's layout among its configurations, and a
summary line per configuration with each permute's choice and saving and the step's."""

import json
import re
from pathlib import Path

import pytest

import hlo_tools.commands.report
from hlo_tools.ops import report
from hlo_tools.ops.report.cases import Case, plan_cases, train_step_case
from hlo_tools.ops.report.text import step_line, summary_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROG = "hlo-tools report"


def _default_cases():
  args = hlo_tools.commands.report._parser(PROG).parse_args([])
  config, explicit = hlo_tools.commands.report._config(PROG, args)
  return plan_cases(hlo_tools.commands.report.request_for(args, config, explicit))


def test_default_grid_holds_the_seed_layout():
  cases = [c for c in _default_cases() if c.source.get("program") == "train_step"]
  seed = [c for c in cases if c.source.get("mesh") == "tp:2,cp:8"]
  # tp across the two hosts, the ring over the 8 GPUs of each, at 64K to 256K tokens.
  assert [(c.topology, c.source["config"]["seq_len"]) for c in seed] == [
    ("1x2x8", 65536),
    ("1x2x8", 131072),
    ("1x2x8", 262144),
  ]
  assert [c.title for c in seed] == [
    f"Llama train step (tp 2 x cp 8), {n} tokens, on 1x2x8" for n in ("64K", "128K", "256K")
  ]
  # Beside it, the layouts that were there: one host, and the ring across hosts.
  assert [c.title for c in cases if c not in seed] == [
    "Llama train step (cp 4 x tp 2), 64K tokens, on 1x1x8",
    "Llama train step (cp 2 x tp 8), 64K tokens, on 1x2x8",
  ]
  assert len({c.id for c in _default_cases()}) == len(_default_cases())


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


def test_seed_layout_keeps_the_ring_inside_each_host(tmp_path):
  # The seed's mesh order (tp slowest, cp over consecutive ids) on 2 hosts x 4, small
  # shapes: every edge of every permute stays on one host's NVLink.
  case = train_step_case("1x2x4", "tp:2,cp:4", 4096)
  case.source["config"].update(
    num_layers=1, hidden=256, mlp=512, vocab=256, num_heads=4, num_kv_heads=2, head_dim=64
  )
  data = report.build([case], tmp_path / "r", progress=False)
  [entry] = data["cases"]
  assert entry["verify_passed"] and entry["collective_permutes"]
  assert all(
    {k: v for k, v in p["edges_by_class"].items() if v} == {"nvlink": 8}
    for p in entry["collective_permutes"]
  )
  manifest = json.loads((tmp_path / "r" / case.id / "dump" / "manifest.json").read_text())
  assert list(manifest["mesh"].items()) == [("tp", 2), ("cp", 4)]
  assert "Llama train step (tp 2 x cp 4), 4K tokens, on 1x2x4: per step" in summary_text(data)
