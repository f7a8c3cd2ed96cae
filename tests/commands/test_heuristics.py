"""hlo_tools.commands.heuristics: `hlo-tools heuristics SUBCOMMAND`'s dispatch, its
one-line errors (prefixed by the subcommand) and the sweep's output."""

import csv

import pytest

from hlo_tools import cli


def run(capsys, *argv):
  rc = cli.main(["heuristics", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def test_a_missing_or_unknown_subcommand_is_one_line(capsys):
  rc, out, err = run(capsys)
  assert rc == 2 and out == ""
  assert err.strip() == (
    "hlo-tools heuristics: the following arguments are required: subcommand, args"
  )
  rc, _, err = run(capsys, "warp")
  assert rc == 2
  assert err.strip() == (
    "hlo-tools heuristics: argument subcommand: invalid choice: 'warp' "
    "(choose from 'calibrate', 'check-pass', 'sweep')"
  )


def test_help_lists_each_subcommand(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["heuristics", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  tail = out[out.index("subcommands (SUBCOMMAND --help for their options):") :]
  for name in ("sweep", "check-pass", "calibrate"):
    assert f"\n  {name:<11} " in tail, name


def test_a_subcommands_errors_name_it(capsys, tmp_path):
  rc, _, err = run(capsys, "sweep", "--bogus")
  assert rc == 2 and err.strip() == "hlo-tools heuristics sweep: unrecognized arguments: --bogus"
  # A CSV without the columns calibrate needs: its HeuristicsError, under the subcommand.
  bad = tmp_path / "bad.csv"
  bad.write_text("a,b\n1,2\n")
  rc, _, err = run(capsys, "calibrate", bad)
  assert rc == 2
  assert err.startswith(f"hlo-tools heuristics calibrate: {bad}:1: missing column(s) backend")


def test_sweep_writes_one_row_a_case(capsys, tmp_path):
  out_dir = tmp_path / "sweep"
  rc, out, err = run(
    capsys,
    "sweep",
    "--only-given",
    "--topology=1x1x2",
    "--sizes=1K,1M",
    "--shapes=ring",
    "--no-plots",
    f"--out={out_dir}",
  )
  assert rc == 0
  # One topology x one shape x two sizes.
  assert out.startswith("cases: 2; ")
  assert err.splitlines() == [f"wrote {out_dir / 'sweep.csv'}", f"wrote {out_dir / 'sweep.json'}"]
  with open(out_dir / "sweep.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["topology"], r["shape"], r["bytes"]) for r in rows] == [
    ("1x1x2", "ring", "1024"),
    ("1x1x2", "ring", str(1 << 20)),
  ]
