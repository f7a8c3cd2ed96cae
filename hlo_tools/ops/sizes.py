"""Byte sizes in and out: the one size parser and the one byte formatter of hlo_tools."""

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
  """'4096', '4K', '64M', '1G' (powers of 1024; also '4KB', '4KiB', '4096B') -> bytes;
  ValueError when malformed or below 1 byte."""
  text = text.strip()
  upper = text.upper()
  if upper.endswith("B"):  # 4KiB, 4KB and 4096B mean what 4K and 4096 do
    upper = upper[:-1]
    if upper.endswith("I") and upper[-2:-1] in ("K", "M", "G"):
      upper = upper[:-1]
  unit = upper[-1:] if upper[-1:] in ("K", "M", "G") else ""
  digits = upper[:-1] if unit else upper
  if not digits.isdigit():
    raise ValueError(f"bad size {text!r}: expected N, NK, NM or NG")
  value = int(digits) * _UNITS[unit]
  if value < 1:
    raise ValueError(f"bad size {text!r}: must be at least 1 byte")
  return value


def format_bytes(n: float | None, precise: bool = False) -> str:
  """1536 -> '1.5 KiB', 1024 -> '1.0 KiB', None -> '-'. precise: up to 4 significant
  digits and no trailing zeros ('1 KiB', '1.5 KiB'), as the sweep names its sizes."""
  if n is None:
    return "-"
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(n) < 1024 or unit == "TiB":
      break
    n /= 1024
  if unit == "B":
    return f"{n:g} B" if precise else f"{n:.0f} B"
  return f"{n:.4g} {unit}" if precise else f"{n:.1f} {unit}"
