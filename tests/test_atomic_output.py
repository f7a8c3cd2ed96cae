"""hlo_tools.atomic_output: output written whole or not at all; devices, FIFOs and
symbolic links written through, never replaced."""

import errno
import os
import stat
import threading

import pytest

from hlo_tools import bounded_input
from hlo_tools.atomic_output import resolve_links, write_atomic


def test_writes_text_as_utf8_and_bytes_as_they_are(tmp_path):
  path = tmp_path / "out.txt"
  write_atomic(path, "caf\u00e9\n")
  assert path.read_bytes() == b"caf\xc3\xa9\n"
  write_atomic(str(path), b"\x00\xff")
  assert path.read_bytes() == b"\x00\xff"
  write_atomic(path, bytearray(b"ab"))
  assert path.read_bytes() == b"ab"
  # A non-UTF-8 file name's byte (a lone surrogate in Python) is written escaped.
  write_atomic(path, "m\udcff.hlo")
  assert path.read_bytes() == b"m\\xff.hlo"
  assert os.listdir(tmp_path) == ["out.txt"]  # no temporary file left beside it


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path):
  path = tmp_path / "kept.txt"
  path.write_text("old")
  os.chmod(path, 0o640)
  write_atomic(path, "new")
  assert path.read_text() == "new" and stat.S_IMODE(os.stat(path).st_mode) == 0o640
  umask = os.umask(0o027)
  try:
    write_atomic(tmp_path / "fresh.txt", "x")
  finally:
    os.umask(umask)
  assert stat.S_IMODE(os.stat(tmp_path / "fresh.txt").st_mode) == 0o640  # 0o666 & ~0o027


def test_a_reader_holding_the_old_file_keeps_reading_it(tmp_path):
  path = tmp_path / "report.json"
  path.write_text("old")
  with open(path) as held:
    write_atomic(path, "new")
    assert held.read() == "old"  # replaced, not written into
  assert path.read_text() == "new"


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
  target = tmp_path / "target.txt"
  target.write_text("old")
  link = tmp_path / "link.txt"
  os.symlink("target.txt", link)  # relative: from the link's folder
  write_atomic(link, "new")
  assert os.path.islink(link) and target.read_text() == "new"
  dangling = tmp_path / "dangling.txt"
  os.symlink(tmp_path / "made.txt", dangling)
  write_atomic(dangling, "made")
  assert os.path.islink(dangling) and (tmp_path / "made.txt").read_text() == "made"


def test_resolve_links_follows_a_chain_and_refuses_a_loop(tmp_path):
  (tmp_path / "sub").mkdir()
  os.symlink("sub/b", tmp_path / "a")
  os.symlink("c", tmp_path / "sub" / "b")  # relative to sub/
  assert resolve_links(tmp_path / "a") == str(tmp_path / "sub" / "c")
  assert resolve_links(tmp_path / "plain") == str(tmp_path / "plain")
  os.symlink("y", tmp_path / "x")
  os.symlink("x", tmp_path / "y")
  with pytest.raises(OSError) as info:
    resolve_links(tmp_path / "x")
  assert info.value.errno == errno.ELOOP


def test_a_directory_or_a_missing_folder_is_refused(tmp_path):
  with pytest.raises(IsADirectoryError):
    write_atomic(tmp_path, "x")
  missing = tmp_path / "missing" / "x.txt"
  with pytest.raises(FileNotFoundError, match=f"no such directory {tmp_path / 'missing'}"):
    write_atomic(missing, "x")
  assert not (tmp_path / "missing").exists()


def test_dash_is_stdout(capsys):
  write_atomic("-", "to stdout\n")
  assert capsys.readouterr().out == "to stdout\n"


def test_devices_are_written_in_place():
  write_atomic("/dev/null", "gone")
  assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # still the device


def test_a_fifo_with_a_reader_gets_the_bytes(tmp_path):
  fifo = tmp_path / "out"
  os.mkfifo(fifo)
  got = []

  def read():
    with open(fifo, "rb") as f:
      got.append(f.read())

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  data = b"x" * (1 << 20)  # more than a pipe holds: written as it is read
  write_atomic(fifo, data)
  reader.join(timeout=10)
  assert got == [data] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_nobody_reads_is_an_error_after_the_timeout(tmp_path):
  fifo = tmp_path / "out"
  os.mkfifo(fifo)
  bounded_input.set_input_timeout(0.3)
  try:
    with pytest.raises(OSError, match=r"nothing reads this FIFO \(waited 0.3 s\)") as info:
      write_atomic(fifo, "x")
  finally:
    bounded_input.set_input_timeout()
  assert info.value.errno == errno.ENXIO and info.value.filename == str(fifo)
