"""Input and output helpers shared by every `hlo-tools` command.

Small on purpose; the whole API:

    DEFAULT_MAX_INPUT_BYTES          1 GiB: the default of --max-input-bytes
    add_max_input_bytes(parser)      adds `--max-input-bytes N` (dest max_input_bytes)
    read_input(path, max_bytes, label=None) -> bytes
                                     reads a file, a device or FIFO, or stdin ("-"),
                                     never more than max_bytes + 1 bytes; raises
                                     InputReadError (one line) when unreadable or
                                     larger than max_bytes
    InputReadError                   an errors.InputError; str() is `LABEL: message`
    one_line(text, limit=MAX_MESSAGE_CHARS) -> str
                                     control characters escaped and the text cut to
                                     `limit` characters plus "... (N more characters)";
                                     idempotent
    print_error(text)                one_line(text) on stderr
    write_atomic(path, data)         writes str or bytes: a regular file atomically
                                     (readers see the old file or the new one), a
                                     device or FIFO in place, "-" to stdout; a symlink
                                     is followed, never replaced
    resolve_links(path) -> str       the path a symlink (chain) names

Why a bound on every read: /dev/zero, a FIFO or a pipe has no size to check
before reading, so a plain f.read() grows without end.
"""

import argparse
import errno
import os
import stat
import sys
import tempfile
from typing import BinaryIO

# What names a file here: a path, or "-" for stdin/stdout.
PathLike = str | os.PathLike[str]

from hlo_tools.errors import MAX_MESSAGE_CHARS, InputReadError, one_line

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "MAX_MESSAGE_CHARS", "InputReadError", "add_max_input_bytes",
           "read_input", "one_line", "print_error", "resolve_links", "write_atomic"]

# The reader holds about 8 bytes of memory per byte of text (docs/reliability.md).
DEFAULT_MAX_INPUT_BYTES = 1 << 30
_CHUNK = 1 << 20


def _byte_count(text: str) -> int:
  try:
    value = int(text, 0)
  except ValueError:
    raise argparse.ArgumentTypeError(f"not a byte count: {text[:40]!r}") from None
  if value < 0:
    raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
  return value


def add_max_input_bytes(parser: argparse.ArgumentParser,
                        default: int = DEFAULT_MAX_INPUT_BYTES) -> None:
  """Adds `--max-input-bytes N` (also `--max_input_bytes`) to an argparse parser."""
  parser.add_argument("--max-input-bytes", "--max_input_bytes", dest="max_input_bytes",
                      type=_byte_count, default=default, metavar="N",
                      help=f"refuse an input (file, device, pipe or stdin) larger than N "
                           f"bytes (default {default})")


def read_input(path: PathLike, max_bytes: int | None = DEFAULT_MAX_INPUT_BYTES,
               label: str | None = None) -> bytes:
  """The bytes of `path` ("-": stdin); at most max_bytes + 1 bytes are ever read.

  Raises InputReadError for a directory, an unreadable path, or more than max_bytes
  bytes (the message names the limit and the flag that sets it).
  """
  label = str(label or path)
  try:
    if str(path) == "-":
      return _read_bounded(sys.stdin.buffer, max_bytes, label)
    with open(path, "rb") as f:
      info = os.fstat(f.fileno())
      if stat.S_ISDIR(info.st_mode):
        raise InputReadError(label, "is a directory, not a file")
      if stat.S_ISREG(info.st_mode) and max_bytes is not None and info.st_size > max_bytes:
        raise _too_large(label, max_bytes, info.st_size)
      return _read_bounded(f, max_bytes, label)
  except IsADirectoryError:
    raise InputReadError(label, "is a directory, not a file") from None
  except OSError as e:
    raise InputReadError(label, f"cannot read: {e.strerror or e}") from None


def _too_large(label: str, max_bytes: int, size: int | None = None) -> InputReadError:
  what = f"{size} bytes" if size is not None else f"more than {max_bytes} bytes"
  return InputReadError(label, f"input is {what}, over the limit of {max_bytes} "
                               "(--max-input-bytes)", size)


def _read_bounded(f: BinaryIO, max_bytes: int | None, label: str) -> bytes:
  if max_bytes is None:
    return f.read()
  chunks: list[bytes] = []
  total = 0
  while total <= max_bytes:
    chunk = f.read(min(_CHUNK, max_bytes + 1 - total))
    if not chunk:
      return b"".join(chunks)
    chunks.append(chunk)
    total += len(chunk)
  raise _too_large(label, max_bytes)


def print_error(text: object) -> None:
  """Prints one_line(text) on stderr."""
  print(one_line(text), file=sys.stderr)


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
  raw = data.encode() if isinstance(data, str) else bytes(data)
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
    fd = os.open(real, os.O_WRONLY | os.O_CLOEXEC)
    try:
      _write_all(fd, raw)
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


def _write_all(fd: int, raw: bytes) -> None:
  view = memoryview(raw)
  while view:
    view = view[os.write(fd, view):]


def _replace(real: str, info: os.stat_result | None, raw: bytes) -> None:
  directory = os.path.dirname(os.path.abspath(real))
  fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(real) + ".",
                             suffix=".tmp", dir=directory)
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
