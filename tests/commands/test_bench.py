"""hlo_tools.commands.bench: `hlo-tools bench`'s arguments (--only, --runs, --quick and
the sizes), the figures it runs and what it prints and writes; the benchmarks
themselves are stood in for (hlo_tools.ops.bench's tests time the real ones)."""

import argparse
import json

import pytest

from hlo_tools import cli
from hlo_tools.commands import bench as bench_command
from hlo_tools.errors import InputError
from hlo_tools.ops import bench
from hlo_tools.ops.bench import env, hook


def args(**given):
  defaults = dict(only="P1,P2,P3", runs=None, quick=False, layers=None, ring_layers=None)
  return argparse.Namespace(**dict(defaults, **given))


def test_the_default_figures_and_sizes():
  only, sizes, runs = bench_command._sizes("b", args())
  assert only == ["P1", "P2", "P3"]  # HOOK only when asked for
  assert sizes == bench.FULL and runs == 5


def test_quick_sizes_run_once_and_flags_override_them():
  only, sizes, runs = bench_command._sizes(
    "b", args(only=" p2 , hook ", quick=True, layers=3, ring_layers=7)
  )
  assert only == ["P2", "HOOK"] and runs == 1
  assert sizes == dict(bench.QUICK, layers=3, ring_layers=7)
  assert bench_command._sizes("b", args(quick=True, runs=4))[2] == 4


@pytest.mark.parametrize(
  "given,message",
  [
    ({"only": "P1,P9"}, "b: --only takes P1, P2, P3, HOOK; got 'P1,P9'"),
    ({"only": " , "}, "b: --only takes P1, P2, P3, HOOK; got ' , '"),
    ({"runs": -1}, "b: --runs must be >= 1"),
  ],
)
def test_bad_figures_or_runs_are_refused(given, message):
  with pytest.raises(InputError) as e:
    bench_command._sizes("b", args(**given))
  assert str(e.value) == message


@pytest.fixture
def stand_ins(monkeypatch):
  """The benchmarks, machine and table replaced: each figure records what it was given."""
  calls = []

  def figure(name):
    def run(sizes, runs, keep):
      calls.append(name)
      return {"figure": name, "runs": runs, "keep": keep}

    return run

  for name, module, attr in (
    ("P1", bench, "bench_p1"),
    ("P2", bench, "bench_p2"),
    ("P3", bench, "bench_p3"),
    ("HOOK", hook, "bench_hook"),
  ):
    monkeypatch.setattr(module, attr, figure(name))
  monkeypatch.setattr(env, "machine", lambda: {"cpu": "test"})
  monkeypatch.setattr(env, "versions", lambda: {"jax": "0"})
  monkeypatch.setattr(bench, "table", lambda result: "TABLE " + ",".join(calls))
  return calls


def test_only_the_figures_asked_for_run_in_order(stand_ins, capsys, tmp_path):
  out = tmp_path / "bench.json"
  rc = cli.main(["bench", "--only=HOOK,P1", "--quick", f"--json={out}", "--keep=k"])
  assert rc == 0
  assert stand_ins == ["P1", "HOOK"]
  assert capsys.readouterr().out == "TABLE P1,HOOK\n"
  result = json.loads(out.read_text())
  assert result["quick"] is True and result["runs"] == 1 and result["sizes"] == bench.QUICK
  assert result["machine"] == {"cpu": "test"} and result["versions"] == {"jax": "0"}
  assert result["P1"] == {"figure": "P1", "runs": 1, "keep": "k"}
  assert result["HOOK"]["figure"] == "HOOK" and "P2" not in result
  assert result["bench_s"] >= 0


def test_a_failed_figure_is_one_line(stand_ins, monkeypatch, capsys):
  def broken(sizes, runs, keep):
    raise RuntimeError("nvshmem-opt is not built")

  monkeypatch.setattr(bench, "bench_p2", broken)
  assert cli.main(["bench", "--only=P2", "--quick"]) == 2
  out, err = capsys.readouterr()
  assert out == "" and err.strip() == "hlo-tools bench: nvshmem-opt is not built"


def test_a_json_path_in_no_directory_is_refused_before_any_figure(stand_ins, capsys, tmp_path):
  rc = cli.main(["bench", "--quick", f"--json={tmp_path / 'no' / 'b.json'}"])
  assert rc == 2 and stand_ins == []
  assert "no such directory" in capsys.readouterr().err


def test_zero_runs_are_refused():
  with pytest.raises(InputError, match="--runs must be >= 1"):
    bench_command._sizes("b", args(runs=0))


@pytest.mark.parametrize("flag", ["layers", "ring_layers"])
def test_zero_sizes_are_refused(flag):
  with pytest.raises(InputError, match=f"--{flag.replace('_', '-')} must be >= 1"):
    bench_command._sizes("b", args(**{flag: 0}))
