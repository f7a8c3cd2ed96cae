"""Small shared pieces of the `hlo-tools heuristics` commands: errors and sizes."""

from hlo_tools.model.source import InputError


class HeuristicsError(InputError):
  """A user-facing failure: printed as one line, exit status 2."""


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
