"""hlo_tools.ops.bench.reader: hlo_text's parse time against jaxlib's, in turns."""

import re
import sys
import types

import pytest

from hlo_tools.ops.bench import reader

from conftest import FIXTURES

SHIFT = FIXTURES / "shift_1x1x2.before_async.hlo"


def _recording(monkeypatch, calls):
  """Ours and jaxlib's parsers replaced by ones that note their turn."""
  monkeypatch.setattr(reader, "parse_hlo_text", lambda text: calls.append("ours"))
  fake = types.ModuleType("jaxlib._hlo")
  fake.hlo_module_from_text = lambda text: calls.append("jaxlib")
  monkeypatch.setitem(sys.modules, "jaxlib._hlo", fake)


def test_parsers_take_turns_and_the_first_rotates(monkeypatch):
  calls = []
  _recording(monkeypatch, calls)
  r = reader.bench_parse("HloModule m\n", runs=3, others={"previous": calls.append})
  # Run r starts with the parser r places on: drift falls on each alike.
  assert calls == [
    "ours",
    "jaxlib",
    "HloModule m\n",
    "jaxlib",
    "HloModule m\n",
    "ours",
    "HloModule m\n",
    "ours",
    "jaxlib",
  ]
  assert len(r["ours_samples"]) == len(r["jaxlib_samples"]) == 3
  assert len(r["others"]["previous"]["samples"]) == 3


def test_result_is_medians_of_the_samples_and_their_ratio():
  text = SHIFT.read_text()
  r = reader.bench_parse(text, runs=3)
  assert r["bytes"] == len(text.encode()) and r["lines"] == text.count("\n") and r["runs"] == 3
  ours, theirs = sorted(r["ours_samples"]), sorted(r["jaxlib_samples"])
  assert r["ours_s"] == ours[1] and r["jaxlib_s"] == theirs[1]
  assert r["ratio"] == pytest.approx(ours[1] / theirs[1])
  assert all(s > 0 for s in ours + theirs) and r["others"] == {}


def test_without_jaxlib_only_ours_is_timed(monkeypatch):
  monkeypatch.setitem(sys.modules, "jaxlib._hlo", None)  # import fails
  r = reader.bench_parse(
    "HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\n", 2
  )
  assert len(r["ours_samples"]) == 2
  assert r["jaxlib_samples"] == [] and r["jaxlib_s"] is None and r["ratio"] is None


def test_previous_reader_is_loaded_from_its_file(tmp_path):
  previous = tmp_path / "hlo_text_old.py"
  previous.write_text("def parse_hlo_text(text):\n  return ('old', len(text))\n")
  assert reader._load_reader(str(previous))("abc") == ("old", 3)
  with pytest.raises(OSError, match="not a Python module"):
    reader._load_reader(str(tmp_path / "notes.txt"))


def test_main_prints_each_parser_and_the_ratio(capsys):
  assert reader.main(["reader", str(SHIFT), "--runs=1"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0].endswith("lines, median [min, max] of 1:")
  assert re.fullmatch(r"  ours +[\d.]+ ms \[[\d.]+, [\d.]+\]", out[1]), out
  assert re.fullmatch(r"  jaxlib +[\d.]+ ms \[[\d.]+, [\d.]+\]", out[2]), out
  assert re.fullmatch(r"  ours / jaxlib [\d.]+ \(per run [\d.]+-[\d.]+\)", out[3]), out
