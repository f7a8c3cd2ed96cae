"""Output directories written whole (`hlo-tools dump --out`, `hlo-tools report --out`).

The work directory lives next to DIR (same file system) and is named
`.DIR.tmp-PID-XXXX`; a finished one replaces DIR by one atomic exchange
(renameat2 RENAME_EXCHANGE) and the old content, now in the work directory's
place, is deleted. Where the file system cannot exchange, DIR moves aside to
`.DIR.old-PID-XXXX/old` first; a run killed between those two renames leaves
the old report there, and the next run puts it back. Leftovers of dead
processes are removed when the next run starts.

A DIR that is a symlink stays one: the directory it names is the one replaced (the
work directory lives beside that one). A DIR that exists and is not a directory is
refused (NotADirectoryError).
"""

import os
import re
import shutil
import tempfile
import time

from hlo_tools import atomic_output, bounded_input

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
  """Atomically swaps two paths; False where the kernel or file system cannot."""
  import ctypes  # pylint: disable=import-outside-toplevel

  try:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = libc.renameat2
  except (OSError, AttributeError):
    return False
  renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
  if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
    return True
  errno = ctypes.get_errno()
  if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no exchange here
    return False
  raise OSError(errno, os.strerror(errno), b)


# Work directories this process made and has not published: what Ctrl-C removes.
_OPEN: set[str] = set()


def make_work_dir(out: bounded_input.PathLike) -> str:
  """A fresh `.DIR.tmp-PID-XXXX` next to `out`, after clearing dead runs' leftovers."""
  out = atomic_output.resolve_links(out)
  if os.path.exists(out) and not os.path.isdir(out):
    raise NotADirectoryError(f"{out}: exists and is not a directory")
  parent, base = os.path.dirname(out), os.path.basename(out)
  os.makedirs(parent, exist_ok=True)
  clean_stale(out)
  work = tempfile.mkdtemp(prefix=f".{base}.tmp-{os.getpid()}-", dir=parent)
  _OPEN.add(work)
  return work


def discard_work_dirs(attempts: int = 20, pause_s: float = 0.1) -> None:
  """Removes every work directory this process made and did not publish.

  A compile child interrupted with us may still be writing into one for a moment,
  so removal is retried until the directory is gone."""
  for work in sorted(_OPEN, key=len, reverse=True):
    for _ in range(attempts):
      shutil.rmtree(work, ignore_errors=True)
      if not os.path.lexists(work):
        break
      time.sleep(pause_s)
  _OPEN.clear()


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


_STALE_RE = re.compile(r"^\.(?P<base>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-[\w]+$")


def clean_stale(out: str) -> None:
  """Removes work and trash directories of `out` left by processes that died; if a run
  died between moving DIR aside and moving the new one in, DIR gets its old self back."""
  parent, base = os.path.dirname(out), os.path.basename(out)
  try:
    names = os.listdir(parent)
  except OSError:
    return
  for name in names:
    m = _STALE_RE.match(name)
    if not m or m["base"] != base or _pid_alive(int(m["pid"])):
      continue
    path = os.path.join(parent, name)
    old = os.path.join(path, "old")
    if m["kind"] == "old" and os.path.isdir(old) and not os.path.lexists(out):
      os.rename(old, out)
    shutil.rmtree(path, ignore_errors=True)


def publish(work_dir: str, out: bounded_input.PathLike) -> None:
  """Moves the finished work directory into place as `out` (see above)."""
  _OPEN.discard(work_dir)
  out = atomic_output.resolve_links(out)
  if not os.path.lexists(out):
    os.rename(work_dir, out)
    return
  if _exchange(work_dir, out):
    shutil.rmtree(work_dir, ignore_errors=True)  # the old content, now here
    return
  trash = tempfile.mkdtemp(
    prefix=f".{os.path.basename(out)}.old-{os.getpid()}-", dir=os.path.dirname(out)
  )
  os.rename(out, os.path.join(trash, "old"))
  os.rename(work_dir, out)
  shutil.rmtree(trash, ignore_errors=True)
