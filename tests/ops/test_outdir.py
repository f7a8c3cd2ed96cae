"""hlo_tools.ops.outdir: output directories written whole (a work directory beside DIR,
swapped in at the end) and the leftovers of runs that died."""

import os
import re

import pytest

from hlo_tools.ops import outdir

# Above Linux's largest pid (2**22): no process has it, so its leftovers are stale.
DEAD_PID = 2**22 + 5


def test_the_work_directory_lies_beside_out_named_after_it(tmp_path):
  out = tmp_path / "reports" / "r"
  work = outdir.make_work_dir(str(out))
  try:
    assert os.path.dirname(work) == str(tmp_path / "reports")
    assert re.fullmatch(rf"\.r\.tmp-{os.getpid()}-\w+", os.path.basename(work))
    assert os.path.isdir(work) and not out.exists()
  finally:
    outdir.discard_work_dirs()


def test_publish_moves_the_work_in_as_out(tmp_path):
  out = tmp_path / "r"
  work = outdir.make_work_dir(str(out))
  with open(os.path.join(work, "index.html"), "w") as f:
    f.write("new")
  outdir.publish(work, str(out))
  assert (out / "index.html").read_text() == "new"
  assert os.listdir(tmp_path) == ["r"]


def test_publish_replaces_an_old_out_whole(tmp_path):
  out = tmp_path / "r"
  out.mkdir()
  (out / "old.txt").write_text("old")
  work = outdir.make_work_dir(str(out))
  with open(os.path.join(work, "new.txt"), "w") as f:
    f.write("new")
  outdir.publish(work, str(out))
  assert os.listdir(out) == ["new.txt"]
  assert os.listdir(tmp_path) == ["r"]  # the old content is gone, not moved aside


def test_out_that_is_a_file_is_refused(tmp_path):
  (tmp_path / "r").write_text("x")
  with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
    outdir.make_work_dir(str(tmp_path / "r"))


def test_discard_removes_the_work_not_published(tmp_path):
  first = outdir.make_work_dir(str(tmp_path / "a"))
  second = outdir.make_work_dir(str(tmp_path / "b"))
  with open(os.path.join(first, "partial.json"), "w") as f:
    f.write("{")
  outdir.discard_work_dirs()
  assert not os.path.exists(first) and not os.path.exists(second)
  assert os.listdir(tmp_path) == []


def test_leftovers_of_dead_runs_are_cleared_and_an_old_out_put_back(tmp_path):
  out = tmp_path / "r"
  # A run that died after moving DIR aside, before moving the new one in.
  aside = tmp_path / f".r.old-{DEAD_PID}-abc"
  (aside / "old").mkdir(parents=True)
  (aside / "old" / "index.html").write_text("the old report")
  (tmp_path / f".r.tmp-{DEAD_PID}-def").mkdir()
  # A live run's work directory, and another DIR's leftovers: kept.
  live = tmp_path / f".r.tmp-{os.getpid()}-ghi"
  live.mkdir()
  other = tmp_path / f".s.tmp-{DEAD_PID}-jkl"
  other.mkdir()
  outdir.clean_stale(str(out))
  assert (out / "index.html").read_text() == "the old report"
  assert sorted(os.listdir(tmp_path)) == sorted(["r", live.name, other.name])
