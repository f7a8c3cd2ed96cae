"""Output written whole or not at all: every `hlo-tools` command's --out and --json.

The whole API:

    write_atomic(path, data)         writes str (UTF-8; a non-UTF-8 name's bytes
                                     escaped, errors.escape_name) or bytes: a regular
                                     file atomically (readers see the old file or
                                     the new one), a device or FIFO in place, "-"
                                     to stdout; a symlink is followed, never replaced
    resolve_links(path) -> str       the path a symlink (chain) names

Why a time bound here too: a FIFO nobody reads from never takes the bytes; opened
without blocking and polled, it is an error after the input timeout
(bounded_input.set_input_timeout) instead of a hang.
"""

import errno
import os
import select
import stat
import sys
import tempfile
import time

# The input timeout is bounded_input's one setting (--input-timeout), shared here.
from hlo_tools.bounded_input import PathLike, _timeout
from hlo_tools.errors import ESCAPE_ERRORS

__all__ = [
  "resolve_links",
  "write_atomic",
]


def write_atomic(path: PathLike, data: str | bytes | bytearray | memoryview) -> None:
  """Writes `data` (str or bytes) to `path`; never replaces what is not a regular file.

  "-": stdout. A symlink is followed (a dangling one creates the file it names); the
  link stays a link. What it ends at decides:
  * a device, FIFO or socket: written in place (opened without O_CREAT/O_TRUNC), so
    `--out /dev/null` stays the device and a FIFO's reader gets the bytes;
  * a regular file or nothing: a temporary file beside it (os.replace is atomic only
    within one file system), fsync, os.replace: readers see the old file or the new
    one, never a part. An existing file keeps its mode (and owner where we may set
    it); a new one gets the permissions a plain open() would give.
  Raises OSError (IsADirectoryError for a directory).
  """
  raw = data.encode("utf-8", ESCAPE_ERRORS) if isinstance(data, str) else bytes(data)
  if str(path) == "-":
    sys.stdout.flush()
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()
    return
  real = resolve_links(path)
  try:
    info = os.stat(real)
  except FileNotFoundError:
    info = None
  if info is not None and stat.S_ISDIR(info.st_mode):
    raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
  if info is not None and not stat.S_ISREG(info.st_mode):
    fd = _open_in_place(real, str(path))
    try:
      _write_polled(fd, raw, str(path))
    finally:
      os.close(fd)
    return
  _replace(real, info, raw)


def resolve_links(path: PathLike) -> str:
  """`path` with the symlinks of its last component followed (relative targets from
  the link's directory); the path itself when it is none. OSError on a loop."""
  current = os.fspath(path)
  for _ in range(40):
    if not os.path.islink(current):
      return current
    target = os.readlink(current)
    current = os.path.join(os.path.dirname(current), target)
  raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))


def _open_in_place(real: str, label: str) -> int:
  """A device or FIFO opened for writing without blocking: a FIFO with no reader
  (ENXIO) is tried again until the input timeout, then refused, never waited on
  for ever."""
  deadline = time.monotonic() + _timeout[0]
  while True:
    try:
      return os.open(real, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
      if e.errno != errno.ENXIO or time.monotonic() >= deadline:
        if e.errno == errno.ENXIO:
          raise OSError(
            errno.ENXIO, f"nothing reads this FIFO (waited {_timeout[0]:g} s)", label
          ) from None
        raise
    time.sleep(0.05)


def _write_polled(fd: int, raw: bytes, label: str) -> None:
  view = memoryview(raw)
  poller = select.poll()
  poller.register(fd, select.POLLOUT)
  while view:
    if not poller.poll(int(_timeout[0] * 1000)):
      raise OSError(
        errno.ETIMEDOUT, f"its reader stopped reading (waited {_timeout[0]:g} s)", label
      )
    try:
      view = view[os.write(fd, view) :]
    except BlockingIOError:
      continue


def _write_all(fd: int, raw: bytes) -> None:
  view = memoryview(raw)
  while view:
    view = view[os.write(fd, view) :]


def _replace(real: str, info: os.stat_result | None, raw: bytes) -> None:
  directory = os.path.dirname(os.path.abspath(real))
  if not os.path.isdir(directory):  # else mkstemp names its own temporary file
    raise FileNotFoundError(errno.ENOENT, f"no such directory {directory}", real)
  fd, tmp = tempfile.mkstemp(
    prefix="." + os.path.basename(real) + ".", suffix=".tmp", dir=directory
  )
  try:
    try:
      _write_all(fd, raw)
      if info is not None:
        if (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
          try:
            os.fchown(fd, info.st_uid, info.st_gid)
          except OSError:
            pass  # only root may give a file away
        os.fchmod(fd, stat.S_IMODE(info.st_mode))
      else:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
      os.fsync(fd)
    finally:
      os.close(fd)
    os.replace(tmp, real)
  except BaseException:
    try:
      os.unlink(tmp)
    except OSError:
      pass
    raise
