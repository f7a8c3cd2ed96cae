"""hlo_tools.bounded_input: every read bounded in size and time, on regular files,
FIFOs, devices, sockets and links, and the flags that set the bounds."""

import argparse
import os
import socket
import threading
import time

import pytest

from hlo_tools import bounded_input
from hlo_tools.bounded_input import (
  DEFAULT_INPUT_TIMEOUT,
  SIDE_MAX_BYTES,
  found_beside,
  is_regular_file,
  kind_of,
  read_input,
  read_side_input,
  side_limit,
)
from hlo_tools.errors import InputError, InputReadError


@pytest.fixture
def short_timeout():
  """A 0.3 s input timeout for the test, the default again after it."""
  bounded_input.set_input_timeout(0.3)
  yield 0.3
  bounded_input.set_input_timeout()


def _refused(path, *args, **kwargs):
  with pytest.raises(InputReadError) as info:
    read_input(path, *args, **kwargs)
  assert isinstance(info.value, InputError) and "\n" not in str(info.value)
  return str(info.value)


def test_regular_file_is_read_within_its_limit(tmp_path):
  path = tmp_path / "m.hlo"
  path.write_bytes(b"x" * 100)
  assert read_input(path) == b"x" * 100
  assert read_input(path, 100) == b"x" * 100  # the limit itself is allowed
  assert read_input(path, None) == b"x" * 100  # no limit
  assert (
    _refused(path, 99) == f"{path}: input is 100 bytes, over the limit of 99 (--max-input-bytes)"
  )
  assert _refused(path, 10, "mine", "--cap") == (
    "mine: input is 100 bytes, over the limit of 10 (--cap)"
  )


def test_what_is_not_a_file_is_refused_with_one_line(tmp_path):
  assert _refused(tmp_path) == f"{tmp_path}: is a directory, not a file"
  assert _refused(tmp_path / "gone.hlo") == (
    f"{tmp_path / 'gone.hlo'}: cannot read: No such file or directory"
  )
  link = tmp_path / "link.hlo"
  os.symlink(tmp_path / "nowhere.hlo", link)
  assert _refused(link) == (
    f"{link}: cannot read: a symbolic link to {tmp_path / 'nowhere.hlo'}, which does not exist"
  )
  loop = tmp_path / "a.hlo"
  os.symlink(tmp_path / "b.hlo", loop)
  os.symlink(loop, tmp_path / "b.hlo")
  assert "a symbolic link loop" in _refused(loop)
  sock = tmp_path / "s.hlo"
  server = socket.socket(socket.AF_UNIX)
  try:
    server.bind(str(sock))
    assert _refused(sock) == f"{sock}: is a socket, not a file"
  finally:
    server.close()


def test_devices_are_read_to_their_end_or_their_limit():
  assert read_input("/dev/null") == b""
  # /dev/zero never ends: cut one byte past the limit.
  assert _refused("/dev/zero", 1000) == (
    "/dev/zero: input is more than 1000 bytes, over the limit of 1000 (--max-input-bytes)"
  )


def test_fifo_nobody_writes_to_is_an_error_after_the_timeout(tmp_path, short_timeout):
  fifo = tmp_path / "f.hlo"
  os.mkfifo(fifo)
  start = time.monotonic()
  message = _refused(fifo)
  assert message == f"{fifo}: a FIFO silent for 0.3 s; nothing wrote to it (--input-timeout)"
  assert time.monotonic() - start < 5


def test_fifo_with_a_writer_is_read(tmp_path):
  fifo = tmp_path / "f.hlo"
  os.mkfifo(fifo)

  def write():
    with open(fifo, "wb") as f:  # waits for the reader
      time.sleep(0.1)  # a writer slow to start is still read
      f.write(b"HloModule m\n")

  writer = threading.Thread(target=write, daemon=True)
  writer.start()
  assert read_input(fifo, 1000) == b"HloModule m\n"
  writer.join(timeout=5)


def test_stdin_that_is_a_file(tmp_path, monkeypatch):
  path = tmp_path / "in.hlo"
  path.write_bytes(b"HloModule m\n")
  with open(path) as f:
    monkeypatch.setattr("sys.stdin", f)
    assert read_input("-") == b"HloModule m\n"
  assert not is_regular_file("-")


def test_side_inputs_have_their_own_limit(tmp_path):
  assert side_limit("a cost table") == (SIDE_MAX_BYTES, "a cost table's own limit")
  assert side_limit("a cost table", 1000) == (1000, "--max-input-bytes")
  assert side_limit("a cost table", 1 << 30) == (SIDE_MAX_BYTES, "a cost table's own limit")
  assert SIDE_MAX_BYTES == 64 << 20
  big = tmp_path / "t.txtpb"
  with open(big, "wb") as f:
    f.truncate(SIDE_MAX_BYTES + 1)  # sparse: refused on its size, nothing read
  with pytest.raises(InputReadError) as info:
    read_side_input(big, "a cost table", 1 << 30)
  assert str(info.value) == (
    f"{big}: input is {SIDE_MAX_BYTES + 1} bytes, over the limit of "
    f"{SIDE_MAX_BYTES} (a cost table's own limit)"
  )


def test_found_beside_refuses_what_is_not_a_regular_file(tmp_path):
  what = "the module config beside it"
  assert found_beside(tmp_path / "none.pbtxt", what) is None
  regular = tmp_path / "c.pbtxt"
  regular.write_text("x")
  assert found_beside(regular, what) == str(regular)
  fifo = tmp_path / "f.pbtxt"
  os.mkfifo(fifo)
  with pytest.raises(InputReadError, match=f"{what} is a FIFO, not a regular file"):
    found_beside(fifo, what)
  link = tmp_path / "l.pbtxt"
  os.symlink(tmp_path / "gone", link)
  with pytest.raises(InputReadError, match=f"{what}: a symbolic link to .*gone, which does not"):
    found_beside(link, what)
  with pytest.raises(InputReadError, match="over the limit of 0"):
    found_beside(regular, what, 0)
  # A file that grows with the module: max_bytes alone bounds it.
  assert found_beside(regular, what, None, side=False) == str(regular)


def test_kinds_in_words(tmp_path):
  assert kind_of(tmp_path) == "a directory"
  assert kind_of("/dev/null") == "a character device"
  assert kind_of(tmp_path / "gone") == "not a file"
  (tmp_path / "f").write_text("")
  assert kind_of(tmp_path / "f") == "a regular file" and is_regular_file(tmp_path / "f")
  assert not is_regular_file(tmp_path) and not is_regular_file(tmp_path / "gone")


def test_flags_parse_and_set_the_bounds():
  parser = argparse.ArgumentParser()
  bounded_input.add_max_input_bytes(parser)
  try:
    args = parser.parse_args(["--max-input-bytes=0x100", "--input_timeout=2.5"])
    assert args.max_input_bytes == 256 and args.input_timeout == 2.5
    assert bounded_input._timeout[0] == 2.5  # set as the flag is read
    assert parser.parse_args([]).max_input_bytes == bounded_input.DEFAULT_MAX_INPUT_BYTES
    for bad in (["--max-input-bytes=-1"], ["--max-input-bytes=lots"], ["--input-timeout=0"]):
      with pytest.raises(SystemExit):
        parser.parse_args(bad)
    with pytest.raises(SystemExit):
      parser.parse_args(["--input-timeout=inf"])
  finally:
    bounded_input.set_input_timeout()
  assert bounded_input._timeout[0] == DEFAULT_INPUT_TIMEOUT


def test_the_bounds_are_the_drivers_defaults():
  # One source (core/tool_layer/input_limits.h): the driver's --help shows the same.
  from conftest import run_nvshmem_opt

  help_text = run_nvshmem_opt("--help").stdout + run_nvshmem_opt("--help").stderr
  assert f'--max-input-bytes="{bounded_input.DEFAULT_MAX_INPUT_BYTES}"' in help_text
  assert f'--input-timeout="{bounded_input.DEFAULT_INPUT_TIMEOUT:g}"' in help_text
  assert (bounded_input.DEFAULT_MAX_INPUT_BYTES, bounded_input.SIDE_MAX_BYTES) == (
    1 << 30,
    64 << 20,
  )
