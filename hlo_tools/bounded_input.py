"""Reads never unbounded in size or time, for every input of `hlo-tools` and its
library: a module, a cost table, a module config, a manifest.

The whole API:

    DEFAULT_MAX_INPUT_BYTES          1 GiB: the default of --max-input-bytes
    add_max_input_bytes(parser)      adds `--max-input-bytes N` (dest max_input_bytes)
    add_input_timeout(parser)        adds `--input-timeout SECONDS` (add_max_input_bytes
                                     adds it too); set_input_timeout(seconds) sets it
    read_input(path, max_bytes, label=None, limit_name="--max-input-bytes") -> bytes
                                     reads a file, a device or FIFO, or stdin ("-"),
                                     never more than max_bytes + 1 bytes, and from
                                     what is not a regular file never waiting longer
                                     than the input timeout for its next bytes;
                                     raises InputReadError (one line) when unreadable,
                                     a socket, a symlink loop, silent past the
                                     timeout or larger than max_bytes (naming
                                     limit_name, what sets the limit)
    SIDE_MAX_BYTES                   64 MiB: the bound of a side input (a cost
                                     table, a module config, a manifest), which is
                                     small whatever the module's bound
    side_limit(what, max_bytes) -> (limit, limit_name)
                                     the smaller of --max-input-bytes and
                                     SIDE_MAX_BYTES, and what sets it
    read_side_input(path, what, max_bytes=None, label=None) -> bytes
                                     read_input within side_limit(what, max_bytes)
    found_beside(path, what, max_bytes=None, side=True) -> str | None
                                     a file looked for beside a module (its config,
                                     its buffer assignment): None where nothing is
                                     there, the path where a regular file within
                                     the limit is; InputReadError for anything else
                                     (a FIFO, device, directory, socket, dangling
                                     link or loop), never skipped without a word
    is_regular_file(path) -> bool    a regular file (symlinks followed), not stdin
    errors.InputReadError            what they raise: an errors.InputError; str() is
                                     `LABEL: message`

Why a bound on every read: /dev/zero, a FIFO or a pipe has no size to check
before reading, so a plain f.read() grows without end. Why a time bound: a FIFO
nobody writes to (`mkfifo f.hlo`), or a terminal, never ends either; opened without
blocking and polled, it is an error after the timeout instead of a hang.
"""

import argparse
import errno
import os
import select
import stat
import sys
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

from hlo_tools.errors import InputReadError

try:
  from hlo_tools import _selection_core
except ImportError as e:  # pragma: no cover - only without the C++ build
  raise ImportError(f"hlo_tools._selection_core is not built; run scripts/setup.sh ({e})") from e

# What names a file here: a path, or "-" for stdin/stdout.
PathLike = str | os.PathLike[str]

__all__ = [
  "DEFAULT_INPUT_TIMEOUT",
  "DEFAULT_MAX_INPUT_BYTES",
  "SIDE_MAX_BYTES",
  "add_input_timeout",
  "add_max_input_bytes",
  "found_beside",
  "is_regular_file",
  "read_input",
  "read_side_input",
  "side_limit",
  "set_input_timeout",
]

# The bounds are the driver's (core/tool_layer/input_limits.h), through the binding:
# the reader holds about 8 bytes of memory per byte of text (docs/reliability.md);
# a cost table or a module config is kilobytes, its own bound whatever the module's;
# a FIFO, pipe or device may stay silent that many seconds before its read is given up.
DEFAULT_MAX_INPUT_BYTES: int = _selection_core.DEFAULT_MAX_INPUT_BYTES
SIDE_MAX_BYTES: int = _selection_core.SIDE_MAX_BYTES
DEFAULT_INPUT_TIMEOUT: float = _selection_core.DEFAULT_INPUT_TIMEOUT_S
_CHUNK = 1 << 20
_timeout = [DEFAULT_INPUT_TIMEOUT]  # this command's --input-timeout


def _byte_count(text: str) -> int:
  try:
    value = int(text, 0)
  except ValueError:
    raise argparse.ArgumentTypeError(f"not a byte count: {text[:40]!r}") from None
  if value < 0:
    raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
  return value


def add_max_input_bytes(
  parser: argparse.ArgumentParser, default: int = DEFAULT_MAX_INPUT_BYTES
) -> None:
  """Adds `--max-input-bytes N` (also `--max_input_bytes`) to an argparse parser,
  and `--input-timeout SECONDS` beside it (add_input_timeout)."""
  parser.add_argument(
    "--max-input-bytes",
    "--max_input_bytes",
    dest="max_input_bytes",
    type=_byte_count,
    default=default,
    metavar="N",
    help=f"refuse an input (file, device, pipe or stdin) larger than N bytes (default {default})",
  )
  add_input_timeout(parser)


def _seconds(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
  if not value > 0 or value == float("inf"):
    raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text[:40]!r}")
  return value


class _SetTimeout(argparse.Action):
  def __call__(
    self,
    parser: argparse.ArgumentParser,
    namespace: argparse.Namespace,
    values: str | Sequence[Any] | None,
    option_string: str | None = None,
  ) -> None:
    setattr(namespace, self.dest, values)
    set_input_timeout(float(values))  # type: ignore[arg-type]  # _seconds made it a float


def add_input_timeout(parser: argparse.ArgumentParser) -> None:
  """Adds `--input-timeout SECONDS` (also `--input_timeout`): how long a FIFO, pipe
  or device may stay silent before its read is an error."""
  parser.add_argument(
    "--input-timeout",
    "--input_timeout",
    dest="input_timeout",
    type=_seconds,
    default=DEFAULT_INPUT_TIMEOUT,
    metavar="SECONDS",
    action=_SetTimeout,
    help="give up on an input that is not a regular file (FIFO, "
    "pipe, device, stdin) when no bytes come for SECONDS "
    f"(default {DEFAULT_INPUT_TIMEOUT:g})",
  )


def set_input_timeout(seconds: float = DEFAULT_INPUT_TIMEOUT) -> None:
  """The time bound of every later read of a FIFO, pipe or device (the CLI root
  sets the default again before each command)."""
  _timeout[0] = seconds


def is_regular_file(path: PathLike) -> bool:
  """Whether `path` (symlinks followed) is a regular file; False for "-"."""
  if str(path) == "-":
    return False
  try:
    return stat.S_ISREG(os.stat(path).st_mode)
  except (OSError, ValueError):
    return False


def _not_found(path: PathLike) -> str:
  """Why a path that stat() cannot reach is missing: a dangling link says where it
  points."""
  try:
    target = os.readlink(path)
  except OSError:
    return "cannot read: No such file or directory"
  return f"cannot read: a symbolic link to {target}, which does not exist"


def read_input(
  path: PathLike,
  max_bytes: int | None = DEFAULT_MAX_INPUT_BYTES,
  label: str | None = None,
  limit_name: str = "--max-input-bytes",
) -> bytes:
  """The bytes of `path` ("-": stdin); at most max_bytes + 1 bytes are ever read.

  A regular file is read as it is. Anything else (a FIFO, pipe, character device,
  stdin) is opened without blocking and polled: silent for the input timeout, it is
  an error, so a FIFO nobody writes to never hangs the command. A socket is refused
  at once.

  Raises InputReadError for a directory, a socket, a symlink loop, an unreadable
  path, a silent input, or more than max_bytes bytes (the message names the limit
  and limit_name, the flag that sets it).
  """
  label = str(label or path)
  limit = (max_bytes, limit_name)
  try:
    if str(path) == "-":
      info = os.fstat(sys.stdin.fileno())
      if stat.S_ISREG(info.st_mode):
        return _read_bounded(sys.stdin.buffer, limit, label)
      return _read_polled(sys.stdin.fileno(), limit, label, "stdin")
    try:
      info = os.stat(path)
    except FileNotFoundError:
      raise InputReadError(label, _not_found(path)) from None
    if stat.S_ISDIR(info.st_mode):
      raise InputReadError(label, "is a directory, not a file")
    if stat.S_ISSOCK(info.st_mode):
      raise InputReadError(label, "is a socket, not a file")
    if stat.S_ISREG(info.st_mode):
      with open(path, "rb") as f:
        if max_bytes is not None and info.st_size > max_bytes:
          raise _too_large(label, limit, info.st_size)
        return _read_bounded(f, limit, label)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
      what = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device"
      return _read_polled(fd, limit, label, what)
    finally:
      os.close(fd)
  except IsADirectoryError:
    raise InputReadError(label, "is a directory, not a file") from None
  except OSError as e:
    if e.errno == errno.ELOOP:
      raise InputReadError(
        label, "cannot read: a symbolic link loop (too many levels of symbolic links)"
      ) from None
    raise InputReadError(label, f"cannot read: {e.strerror or e}") from None


_Limit = tuple[int | None, str]  # (max_bytes, what sets it)


def side_limit(what: str, max_bytes: int | None = None) -> _Limit:
  """(bytes, what sets them) a side input `what` ("a cost table") may have: the
  smaller of --max-input-bytes (max_bytes, None: not given) and SIDE_MAX_BYTES."""
  if max_bytes is not None and max_bytes <= SIDE_MAX_BYTES:
    return max_bytes, "--max-input-bytes"
  return SIDE_MAX_BYTES, f"{what}'s own limit"


def read_side_input(
  path: PathLike, what: str, max_bytes: int | None = None, label: str | None = None
) -> bytes:
  """read_input within side_limit(what, max_bytes): a cost table, a module config or
  a manifest, which are small, refused past 64 MiB whatever --max-input-bytes allows."""
  limit, name = side_limit(what, max_bytes)
  return read_input(path, limit, label, name)


def found_beside(
  path: PathLike, what: str, max_bytes: int | None = None, side: bool = True
) -> str | None:
  """`path`, a file looked for beside a module (`what`: "the module config beside
  it"), where a regular file within side_limit is; None where nothing is there.

  Anything else at that name is refused (InputReadError, one line), not skipped:
  a FIFO, device, socket or directory, a dangling link, a link loop, a file over
  the limit (side_limit; side=False: max_bytes, for a file that grows with the
  module, its buffer assignment). The driver reads these files by path, so each is
  checked here first.
  """
  path = os.fspath(path)
  if not os.path.lexists(path):
    return None
  try:
    info = os.stat(path)
  except FileNotFoundError:
    raise InputReadError(path, f"{what}: {_not_found(path)[len('cannot read: ') :]}") from None
  except OSError as e:
    if e.errno == errno.ELOOP:
      raise InputReadError(path, f"{what}: a symbolic link loop") from None
    raise InputReadError(path, f"{what}: cannot read: {e.strerror or e}") from None
  if not stat.S_ISREG(info.st_mode):
    raise InputReadError(path, f"{what} is {_kind(info.st_mode)}, not a regular file")
  limit, name = side_limit(what, max_bytes) if side else (max_bytes, "--max-input-bytes")
  if limit is not None and info.st_size > limit:
    raise _too_large(path, (limit, name), info.st_size)
  if not os.access(path, os.R_OK):
    raise InputReadError(path, f"{what}: cannot read: Permission denied")
  return path


def kind_of(path: PathLike) -> str:
  """What `path` is, in words ("a FIFO", "a directory"), for a message."""
  try:
    return _kind(os.stat(path).st_mode)
  except OSError:
    return "not a file"


def _kind(mode: int) -> str:
  for test, name in (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
  ):
    if test(mode):
      return name
  return "a regular file" if stat.S_ISREG(mode) else "not a file"


def _read_polled(fd: int, limit: _Limit, label: str, what: str) -> bytes:
  """What `fd` gives until its end, each wait for more bytes bounded by the input
  timeout. A FIFO no writer has opened yet polls as silent (not as ended), so the
  command waits for one, but not forever."""
  max_bytes = limit[0]
  timeout = _timeout[0]
  poller = select.poll()
  poller.register(fd, select.POLLIN | select.POLLPRI)
  chunks: list[bytes] = []
  total = 0
  cap = None if max_bytes is None else max_bytes + 1
  deadline = time.monotonic() + timeout
  while True:
    left = deadline - time.monotonic()
    if left <= 0 or not poller.poll(max(1, int(left * 1000))):
      if time.monotonic() < deadline:
        continue
      got = f" after {total} bytes" if total else ""
      writer = "; nothing wrote to it" if what == "a FIFO" and not total else ""
      raise InputReadError(label, f"{what} silent for {timeout:g} s{got}{writer} (--input-timeout)")
    try:
      chunk = os.read(fd, _CHUNK if cap is None else min(_CHUNK, cap - total))
    except BlockingIOError:
      continue
    if not chunk:
      return b"".join(chunks)
    chunks.append(chunk)
    total += len(chunk)
    if max_bytes is not None and total > max_bytes:
      raise _too_large(label, limit)
    deadline = time.monotonic() + timeout


def _too_large(label: str, limit: _Limit, size: int | None = None) -> InputReadError:
  max_bytes, name = limit
  what = f"{size} bytes" if size is not None else f"more than {max_bytes} bytes"
  return InputReadError(label, f"input is {what}, over the limit of {max_bytes} ({name})", size)


def _read_bounded(f: BinaryIO, limit: _Limit, label: str) -> bytes:
  max_bytes = limit[0]
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
  raise _too_large(label, limit)
