"""Small shared pieces of the `hlo-tools heuristics` commands: errors and atomic writes."""

import os
import tempfile

from hlo_tools.model.source import InputError


class HeuristicsError(InputError):
  """A user-facing failure: printed as one line, exit status 2."""


def write_atomic(path, data):
  """Writes `data` (str or bytes) to `path` so readers never see a partial file.

  The temporary file lives in the target's directory: os.replace is atomic only
  within one file system.
  """
  directory = os.path.dirname(os.path.abspath(path))
  mode = "wb" if isinstance(data, bytes) else "w"
  fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                             suffix=".tmp", dir=directory)
  try:
    with os.fdopen(fd, mode) as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    try:
      os.unlink(tmp)
    except OSError:
      pass
    raise


def format_bytes(n):
  """1024 -> '1 KiB'; sizes in the sweep are powers of two, so this stays exact."""
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if n < 1024 or unit == "TiB":
      return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
    n /= 1024
  raise AssertionError("unreachable")


def parse_size(text):
  """'4096', '4K', '64M', '1G' (powers of 1024) -> bytes; ValueError when malformed."""
  text = text.strip()
  scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
  digits = text[:-1] if scale > 1 else text
  if not digits.isdigit():
    raise ValueError(f"bad size {text!r}: expected N, NK, NM or NG")
  value = int(digits) * scale
  if value < 1:
    raise ValueError(f"bad size {text!r}: must be at least 1 byte")
  return value
