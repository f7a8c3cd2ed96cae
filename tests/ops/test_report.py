"""hlo_tools.ops.report (its __init__): the report directory built case by case,
report.json and index.html, published whole over an earlier report."""

import json
import os
import stat

import pytest

from hlo_tools.errors import InputError
from hlo_tools.ops import report
from hlo_tools.ops.report.cases import Case

from conftest import FIXTURES

SHIFT = FIXTURES / "shift_1x1x2.before_async.hlo"


def test_out_must_be_a_directory_new_empty_or_an_earlier_report(tmp_path):
  report._check_out(str(tmp_path / "new"))
  report._check_out(str(tmp_path))  # empty
  (tmp_path / "report.json").write_text("{}")
  report._check_out(str(tmp_path))  # an earlier report: replaced
  (tmp_path / "file").write_text("x")
  with pytest.raises(InputError, match="file: exists and is not a directory"):
    report._check_out(str(tmp_path / "file"))
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("keep")
  with pytest.raises(InputError, match="not empty and not an earlier report; refusing"):
    report._check_out(str(tmp_path / "mine"))


def test_files_list_a_dumps_manifest_not_its_contents(tmp_path):
  for name in ("c/json/explain.json", "c/hlo/input.hlo", "c/dump/xla_dump/module_1.txt"):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
  (tmp_path / "c" / "dump" / "manifest.json").write_text("{}")
  assert report._files(str(tmp_path)) == [
    os.path.join("c", "dump", "manifest.json"),
    os.path.join("c", "hlo", "input.hlo"),
    os.path.join("c", "json", "explain.json"),
  ]


def test_versions_come_from_a_cases_dump(tmp_path):
  manifest = tmp_path / "c" / "dump" / "manifest.json"
  manifest.parent.mkdir(parents=True)
  manifest.write_text(json.dumps({"versions": {"jax": "0.10.2"}}))
  results = [
    {"case": Case(id="none", title="t", topology=None)},
    {"case": Case(id="c", title="t", topology=None)},
  ]
  assert report._versions(str(tmp_path), results) == {"jax": "0.10.2"}


def test_a_bad_out_is_refused_before_anything_is_written(tmp_path):
  keep = tmp_path / "precious"
  keep.mkdir()
  (keep / "notes.txt").write_text("mine")
  case = Case(id="shift", title="t", topology="1x1x2", path=str(SHIFT))
  with pytest.raises(InputError, match="refusing to replace it"):
    report.build([case], str(keep), progress=False)
  assert os.listdir(keep) == ["notes.txt"] and sorted(os.listdir(tmp_path)) == ["precious"]


def test_report_of_a_file_lists_every_file_it_writes(tmp_path):
  out = tmp_path / "r"
  case = Case(id="shift", title="shift on 1x1x2", topology="1x1x2", path=str(SHIFT), label="shift")
  data = report.build([case], str(out), progress=False)
  assert data["out"] == str(out) and [c["id"] for c in data["cases"]] == ["shift"]
  assert data["files"][:2] == ["index.html", "report.json"]
  assert sorted(os.listdir(out)) == ["index.html", "report.json", "shift"]
  assert all((out / f).is_file() for f in data["files"])
  written = json.loads((out / "report.json").read_text())
  assert written["files"] == data["files"] and "out" not in written
  # One permute, 0 -> 1: NCCL (device 0 has no source), and the checks pass.
  [row] = data["summary"]["comparison"]
  assert (row["case"], row["plan"]) == ("shift", "nccl") and data["summary"]["verify_passed"]
  assert data["summary"]["failed_checks"] == []
  # A report is for reading: not the private mode of a temporary directory.
  assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~_umask()
  # A second run replaces the first whole.
  again = report.build(
    [Case(id="again", title="t", topology="1x1x2", path=str(SHIFT))], str(out), progress=False
  )
  assert (
    sorted(os.listdir(out)) == ["again", "index.html", "report.json"]
    and again["cases"][0]["id"] == "again"
  )


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask
