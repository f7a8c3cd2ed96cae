"""A ring whose direction a conditional picks: one decision path and per-branch trips.

The module is a deviceless H200 compile (jax 0.10.2) of a 32 MiB-per-device ring in a
`lax.fori_loop` of 7 trips whose body picks the direction with `lax.cond(i % 2 == 0,
...)`: each branch holds one permute (tests/fixtures/cond_ring_1x1x8.*, made by
scripts/gen_config_fixtures.py). The patched XLAs keep a permute under a branch on
NCCL, and every command must decide so in every input form: the report's check of the
pass's output decides through the binding, which must be told where the permute sits,
as nvshmem-opt's planner tells the core. Each branch runs on some of the 7 trips only,
so its runs per step are at most 7 and the two branches together are not 14 runs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.model import description, options
from hlo_tools.ops import explain as explain_op, report
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.text import _duration, step_line, step_saving

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
RING = FIXTURES / "cond_ring_1x1x8.after_optimizations.hlo"
TRIPS = 7  # the fori_loop's trips (ring size - 1)

# The fixture's per-shard function, for the module:function form.
_MODULE = """
from jax import lax

def ring(x):
  n = lax.axis_size("cp")
  forward = [(i, (i + 1) % n) for i in range(n)]
  backward = [(i, (i - 1) % n) for i in range(n)]
  def body(i, carry):
    block, acc = carry
    block = lax.cond(i % 2 == 0, lambda b: lax.ppermute(b, "cp", forward),
                     lambda b: lax.ppermute(b, "cp", backward), block)
    return block, acc + block
  return lax.fori_loop(0, n - 1, body, (x, x))[1]
"""


@pytest.fixture(scope="module")
def xla_dump(tmp_path_factory):
  """XLA's own dump folder (--xla_dump_to) of the fixture's compile."""
  work = tmp_path_factory.mktemp("cond_dump")
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / "scripts" / "gen_config_fixtures.py"),
      "--only=cond_ring_1x1x8",
      f"--out_dir={work}",
      f"--xla_dump_dir={work / 'xla'}",
    ],
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  return work / "xla" / "cond_ring_1x1x8"


def _report(tmp_path, monkeypatch, form, *flags):
  out = tmp_path / "r"
  if form == "function":
    (tmp_path / "cond_ring_program.py").write_text(_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    source = ["cond_ring_program:ring", "--arg=16384,4096:f32:cp", "--out_spec=cp"]
  else:
    source = [str(form)]
  rc = cli.main(["report", *source, "--topology=1x1x8", f"--out={out}", "--quiet", *flags])
  return rc, json.loads((out / "report.json").read_text())


@pytest.mark.parametrize(
  "form,flags",
  [("file", ()), ("dir", ()), ("function", ()), ("file", ("--backends=nccl,peer",))],
  ids=["FILE", "DIR", "module:function", "backends=nccl,peer"],
)
def test_report_decides_under_a_branch_as_explain_does(
  tmp_path, monkeypatch, capsys, xla_dump, form, flags
):
  source = {"file": RING, "dir": xla_dump, "function": "function"}[form]
  rc, data = _report(tmp_path, monkeypatch, source, *flags)
  out = capsys.readouterr().out
  assert rc == 0 and data["summary"]["verify_passed"], (data["summary"], out)
  assert "verify: all checks pass" in out
  [case] = data["cases"]
  perms = case["collective_permutes"]
  assert len(perms) == 2 and all(p["choice"]["plan"] == "nccl" for p in perms)
  if flags:  # peer memory is refused for the branch alone (NVSHMEM maybe sooner)
    assert all("peer refused: under a conditional's branch" in p["reason"] for p in perms)
  # Every stage's rewrite was checked by a re-decision that knew the branch.
  for stage in case["stages"]:
    verified = json.loads(
      (tmp_path / "r" / case["id"] / "json" / f"verify_{stage}.json").read_text()
    )
    [selection] = [c for c in verified["checks"] if c["name"] == "selection"]
    assert selection["status"] != "fail", selection


@pytest.mark.parametrize("backends", ["nccl,nvshmem", "nccl,peer"])
def test_binding_and_driver_decide_alike_under_a_branch(backends):
  # The binding path (a module the driver does not answer for) is told the place.
  with_driver = description.describe(str(RING), options.load("1x1x8", backends=backends))
  binding = description.describe(
    str(RING), options.load("1x1x8", backends=backends), use_driver=False
  )
  assert [e["decided_by"] for e in with_driver["collectives"]] == ["nvshmem-opt"] * 2
  assert [e["decided_by"] for e in binding["collectives"]] == ["core binding"] * 2
  for a, b in zip(with_driver["collectives"], binding["collectives"]):
    assert a["choice"] == b["choice"] == {"plan": "nccl", "backend": "DEFAULT"}
    assert a["reason"] == b["reason"]
    assert "under a conditional's branch" in b["reason"]


def test_branch_trips_are_at_most_the_loops():
  result = description.describe(str(RING), options.load("1x1x8", backends="nccl,peer"))
  for e in result["collectives"]:
    assert e["under_branch"] and e["under_branch"]["conditional"].startswith("conditional")
    assert e["trip_count"] is None and e["trips_at_least"] is None
    assert e["trips_at_most"] == TRIPS
    assert (e["runs_per_step"], e["runs_bound"]) == (TRIPS, "at most")
    assert e["modeled_loop_us"] == pytest.approx(e["modeled_us"]["chosen"] * TRIPS)
  # The two permutes sit in the two branches of one conditional.
  branches = {
    (e["under_branch"]["conditional"], e["under_branch"]["branch"]) for e in result["collectives"]
  }
  assert len(branches) == 2 and len({c for c, _ in branches}) == 1
  text = explain_op.format_text(result)
  assert text.count(f"at most x{TRIPS} trips (under a conditional's branch") == 2
  assert f"x{TRIPS} trips =" not in text.replace(f"at most x{TRIPS} trips", "")
  assert text.count("a branch of conditional %conditional") == 2


def test_per_step_totals_count_one_branch_per_trip(tmp_path, capsys):
  case = Case(id="cond", title="cond ring", topology="1x1x8", path=str(RING), label=str(RING))
  data = report.build([case], tmp_path / "r", progress=False, backends="nccl,peer")
  rows = data["summary"]["comparison"]
  assert len(rows) == 2 and all(r["runs"] == TRIPS and r["runs_bound"] == "at most" for r in rows)
  nccl = rows[0]["nccl_us"]
  assert rows[1]["nccl_us"] == pytest.approx(nccl)
  saved, on_nccl = step_saving(rows)
  # One branch runs per trip: 7 runs of one 32 MiB permute, not 14.
  assert saved == 0 and on_nccl == pytest.approx(TRIPS * nccl)
  line = step_line(rows, data["summary"]["overlap"]["cond"])
  assert line.startswith(
    "  cond ring: per step the choices save at most 0.00 us of "
    f"modeled permute time, 0.0% of {_duration(TRIPS * nccl)} on NCCL"
  )
  # A permute outside any branch still counts every trip.
  free = dict(rows[0], branch=None, runs_bound="exact", nccl_us_per_step=nccl * TRIPS)
  assert step_saving([free, rows[1]])[1] == pytest.approx(2 * TRIPS * nccl)
  assert os.path.isfile(tmp_path / "r" / "index.html")


def test_program_mode_counts_one_branch_per_trip():
  # The whole program's modeled permute time per step, as explain's program mode
  # sums it: one 32 MiB permute per trip, at most 7 trips.
  result = explain_op.explain(str(RING), options.load("1x1x8", backends="nccl,peer"))
  program = result["program"]
  nccl = result["collectives"][0]["modeled_us"]["nccl"]
  assert program["nccl_us"] == pytest.approx(TRIPS * nccl)
  assert program["per_op_us"] == pytest.approx(TRIPS * nccl)
  assert not program["runs_known"] and "at most under a conditional's branch" in program["why"]


def test_parse_says_a_branch_runs_at_most_the_loops_trips(capsys):
  assert cli.main(["parse", str(RING)]) == 0
  lines = [l for l in capsys.readouterr().out.splitlines() if "start-done %" in l]
  assert len(lines) == 2
  assert all(
    f"(trip count {TRIPS}; at most x{TRIPS} trips (under a conditional's branch" in l
    and l.endswith(", a branch of conditional %conditional.1.clone")
    for l in lines
  ), lines
