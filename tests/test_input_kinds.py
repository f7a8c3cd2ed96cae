"""Inputs that are not regular files: a FIFO (with and without a writer), a socket, a
character device, a symbolic link loop, a dangling link, and an output FIFO nobody
reads. Each gets one line naming the file and exit status 2 at once or within the
time bound (--input-timeout), or is read; no test waits on a hang (every process
runs under a timeout).

Each command that reads a module (hlo-tools parse, explain, verify, diff, report; and
nvshmem-opt) is run on each kind."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import FIXTURES, NVSHMEM_OPT, ROOT

MODULE = FIXTURES / "shift_1x1x2.before_async.hlo"
# command -> arguments after the input, for each reader of a module file.
READERS = {
  "parse": ["parse", "{}"],
  "explain": ["explain", "{}", "--topology=1x1x2"],
  "verify": ["verify", "{}", "--topology=1x1x2", "--no-hlo-verifier"],
  "diff": ["diff", "{}", str(MODULE)],
  "report": ["report", "{}", "--topology=1x1x2", "--quiet", "--out={out}"],
  "nvshmem-opt": ["{}", "--topology=1x1x2", "--mode=explain"],
}
LIMIT = 60  # seconds any one process may take before the test fails as a hang


def _command(name, path, tmp_path, *extra):
  args = [a.format(path, out=tmp_path / "report") for a in READERS[name]]
  head = [str(NVSHMEM_OPT)] if name == "nvshmem-opt" else [sys.executable, "-m", "hlo_tools.cli"]
  return head + args + list(extra)


def _run(name, path, tmp_path, *extra, **kwargs):
  start = time.monotonic()
  proc = subprocess.run(
    _command(name, path, tmp_path, *extra),
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=LIMIT,
    **kwargs,
  )
  return proc, time.monotonic() - start


def _one_error_line(proc, path, fragment):
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert len(lines) == 1 and str(path) in lines[0] and fragment in lines[0], proc.stderr


@pytest.mark.parametrize("name", sorted(READERS))
def test_fifo_without_writer_is_an_error_within_the_timeout(name, tmp_path):
  fifo = tmp_path / "f.hlo"
  os.mkfifo(fifo)
  proc, took = _run(name, fifo, tmp_path, "--input-timeout=1")
  _one_error_line(proc, fifo, "silent for 1 s")
  assert took < 30, took


@pytest.mark.parametrize("name", sorted(READERS))
def test_fifo_with_a_writer_is_read(name, tmp_path):
  fifo = tmp_path / "f.hlo"
  os.mkfifo(fifo)
  data = MODULE.read_bytes()

  def write():
    with open(fifo, "wb") as f:  # waits for the command's reader
      time.sleep(0.5)  # a writer that is slow to start is still read
      f.write(data)

  writer = threading.Thread(target=write, daemon=True)
  writer.start()
  proc, _ = _run(name, fifo, tmp_path, "--input-timeout=20")
  writer.join(timeout=5)
  assert proc.returncode in (0, 1), proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(READERS))
def test_socket_is_refused_at_once(name, tmp_path):
  path = tmp_path / "s.hlo"
  server = socket.socket(socket.AF_UNIX)
  try:
    server.bind(str(path))
    proc, took = _run(name, path, tmp_path)
  finally:
    server.close()
  _one_error_line(proc, path, "is a socket, not a file")
  assert took < 30, took


@pytest.mark.parametrize("name", sorted(READERS))
def test_symlink_loop_says_loop(name, tmp_path):
  loop = tmp_path / "a.hlo"
  os.symlink(tmp_path / "b.hlo", loop)
  os.symlink(loop, tmp_path / "b.hlo")
  proc, _ = _run(name, loop, tmp_path)
  _one_error_line(proc, loop, "symbolic link loop")
  assert "No such file" not in proc.stderr


@pytest.mark.parametrize("name", sorted(READERS))
def test_dangling_symlink_says_where_it_points(name, tmp_path):
  link = tmp_path / "a.hlo"
  os.symlink(tmp_path / "gone.hlo", link)
  proc, _ = _run(name, link, tmp_path)
  _one_error_line(proc, link, "symbolic link to")


@pytest.mark.parametrize("name", sorted(READERS))
def test_character_devices(name, tmp_path):
  # /dev/null ends at once (empty); /dev/zero never ends but is cut at the limit.
  proc, _ = _run(name, "/dev/null", tmp_path)
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert "/dev/null" in proc.stderr and "empty" in proc.stderr, proc.stderr
  proc, _ = _run(name, "/dev/zero", tmp_path, "--max-input-bytes=100000")
  _one_error_line(proc, "/dev/zero", "over the limit of 100000")


def test_a_terminal_like_device_that_stays_silent_times_out(tmp_path):
  # A pseudo-terminal with nothing typed: a device that never ends and never speaks.
  leader, follower = os.openpty()
  try:
    name = os.ttyname(follower)
    for reader in ("parse", "nvshmem-opt"):
      proc, took = _run(reader, name, tmp_path, "--input-timeout=1")
      _one_error_line(proc, name, "silent for 1 s")
      assert took < 30, took
  finally:
    os.close(leader)
    os.close(follower)


@pytest.mark.parametrize("name", ["explain", "nvshmem-opt"])
def test_stdin_pipe_left_open_times_out(name, tmp_path):
  # stdin a pipe whose writer never writes nor closes it.
  read_end, write_end = os.pipe()
  try:
    proc, took = _run(name, "-", tmp_path, "--input-timeout=1", stdin=read_end)
  finally:
    os.close(read_end)
    os.close(write_end)
  assert proc.returncode == 2 and "silent for 1 s" in proc.stderr, proc.stderr
  assert took < 30, took


@pytest.mark.parametrize("writer", ["nvshmem-opt", "hlo-tools"])
def test_output_fifo_nobody_reads_is_refused_not_waited_on(writer, tmp_path):
  fifo = tmp_path / "out.hlo"
  os.mkfifo(fifo)
  if writer == "nvshmem-opt":
    cmd = [str(NVSHMEM_OPT), str(MODULE), "--topology=1x1x2", "-o", str(fifo), "--input-timeout=1"]
  else:
    cmd = [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "explain",
      str(MODULE),
      "--topology=1x1x2",
      f"--out={fifo}",
      "--input-timeout=1",
    ]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=LIMIT)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "nothing reads this FIFO" in proc.stderr and str(fifo) in proc.stderr, proc.stderr


def test_input_timeout_flag_is_checked():
  for bad in ("0", "-1", "soon"):
    proc = subprocess.run(
      [sys.executable, "-m", "hlo_tools.cli", "parse", str(MODULE), f"--input-timeout={bad}"],
      capture_output=True,
      text=True,
      cwd=ROOT,
      timeout=LIMIT,
    )
    assert proc.returncode == 2 and "--input-timeout" in proc.stderr, proc.stderr
    proc = subprocess.run(
      [str(NVSHMEM_OPT), str(MODULE), f"--input-timeout={bad}"],
      capture_output=True,
      text=True,
      timeout=LIMIT,
    )
    assert proc.returncode == 2 and "--input-timeout" in proc.stderr, proc.stderr
