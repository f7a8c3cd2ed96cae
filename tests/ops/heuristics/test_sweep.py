"""hlo_tools.ops.heuristics.sweep: `hlo-tools heuristics sweep`, its arguments and its
outputs (sweep.csv, sweep.json, one PNG per topology)."""

import csv
import json
import math

import pytest

from hlo_tools import cli
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import sweep, sweep_cases, sweep_summary


def run_cli(argv, capsys):
  rc = cli.main(["heuristics"] + argv)
  out, err = capsys.readouterr()
  return rc, out, err


def test_csv_keeps_every_double_exact():
  row = dict.fromkeys(sweep_cases.COLUMNS)
  row.update(topology="1x2x4", shape="ring", buffer_bytes=1024, mixed=True, nccl_us=0.1 + 0.2)
  header, line = sweep.rows_to_csv([row]).splitlines()
  assert header == ",".join(sweep_cases.COLUMNS)
  values = dict(zip(sweep_cases.COLUMNS, line.split(",")))
  assert values["nccl_us"] == "0.30000000000000004" and float(values["nccl_us"]) == 0.1 + 0.2
  assert (values["topology"], values["buffer_bytes"], values["mixed"]) == ("1x2x4", "1024", "True")
  assert values["nvshmem_us"] == ""  # None: no time


def test_json_has_no_infinities():
  doc = {"a": [math.inf, 1.5], "b": {"c": -math.inf}, "d": "x"}
  assert sweep._json_safe(doc) == {"a": [None, 1.5], "b": {"c": None}, "d": "x"}


def test_topologies_are_parsed_by_the_core():
  [(spec, topology)] = sweep.parse_topologies(["2x2x2:nvl4"])
  assert spec == "2x2x2:nvl4" and topology.num_devices == 8
  with pytest.raises(HeuristicsError, match=r"^--topology: .*'2x4'"):
    sweep.parse_topologies(["2x4"])


def test_sweep_of_the_given_topology_only(tmp_path):
  paths, summary = sweep.run_sweep(
    str(tmp_path), ["1x1x2"], only_given=True, sizes="4K,1K,1K", plots=False
  )
  assert paths == [str(tmp_path / "sweep.csv"), str(tmp_path / "sweep.json")]
  doc = json.loads((tmp_path / "sweep.json").read_text())
  # Sizes sorted, each once; every shape at each.
  assert doc["sizes"] == [1024, 4096] and doc["topologies"] == ["1x1x2"]
  assert [(r["shape"], r["buffer_bytes"]) for r in doc["rows"]] == [
    (shape, size) for shape in ("ring", "kv", "shift") for size in (1024, 4096)
  ]
  assert summary["cases"] == 6 and doc["summary"] == summary


def _from_csv(value, like):
  if value == "":
    return None
  if isinstance(like, bool):
    return value == "True"
  if isinstance(like, int):
    return int(value)
  if isinstance(like, float):
    return float(value)
  return value


@pytest.mark.long
def test_sweep_reduced_grid_outputs_are_consistent(tmp_path, capsys):
  out = tmp_path / "sweep"
  rc, stdout, err = run_cli(
    [
      "sweep",
      f"--out={out}",
      "--only-given",
      "--topology=1x2x4",
      "--topology=1x1x4",
      "--topology=2x2x2:nvl4",
      "--sizes=1K,1M,1G",
    ],
    capsys,
  )
  assert rc == 0, err
  doc = json.loads((out / "sweep.json").read_text())
  rows = doc["rows"]
  assert len(rows) == 3 * 3 * 3  # topologies x shapes x sizes
  with open(out / "sweep.csv", newline="") as f:
    csv_rows = list(csv.DictReader(f))
  assert len(csv_rows) == len(rows)
  for row, csv_row in zip(rows, csv_rows):
    assert list(csv_row) == doc["columns"]
    for key, value in row.items():
      assert _from_csv(csv_row[key], value) == value, key
  # The summary is a function of the rows alone, and the printed one is it.
  assert sweep_summary.summarize(rows) == doc["summary"]
  lines = stdout.strip().splitlines()
  fraction = doc["summary"]["choice_equals_best_fraction"]
  assert lines[-1].startswith(f"choice == model's best: {100 * fraction:.1f}%")
  assert any(l.startswith("worst ratio to oracle (margin ignored):") for l in lines)
  assert any("ratio to NCCL-only" in l for l in lines)
  # Per-row invariants: the oracle is the fastest eligible plan, ratios agree.
  for row in rows:
    times = [row[f"{p}_us"] for p in sweep_cases.PLANS if row[f"{p}_us"] is not None]
    assert row["oracle_us"] == min(times)
    assert row["chosen_us"] >= row["oracle_us"]
    assert row["ratio_to_nccl"] == pytest.approx(row["chosen_us"] / row["nccl_us"])
    assert row["bytes"] == row["buffer_bytes"] * (2 if row["shape"] == "kv" else 1)
    assert row["mixed"] == (row["topology"] != "1x1x4")
  for spec in ("1x2x4", "1x1x4", "2x2x2_nvl4"):
    png = out / f"sweep_{spec}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
  "argv, message",
  [
    (["--topology=1x2", "--only-given"], "topology spec '1x2'"),
    (["--only-given"], "needs at least one --topology"),
    (["--sizes=1K,zz"], "--sizes: bad size 'zz'"),
    (["--shapes=ring,torus"], "unknown ['torus']"),
  ],
)
def test_sweep_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, message):
  rc, _, err = run_cli(["sweep", f"--out={tmp_path}", "--no-plots"] + argv, capsys)
  assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_sweep_bad_cost_table_names_line(tmp_path, capsys):
  table = tmp_path / "t.txtpb"
  table.write_text("margin: 0.1\nlinks { backend: NCCL link_class: NVLINK bandwidth_gbps: -5 }\n")
  rc, _, err = run_cli(
    ["sweep", f"--out={tmp_path}", "--no-plots", f"--cost-table={table}"], capsys
  )
  assert rc == 2 and f"{table}:2:" in err
