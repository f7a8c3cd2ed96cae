"""XLA's buffer-assignment dump, `<module>-buffer-assignment.txt` beside a module
after optimizations: which allocation holds each value an instruction defines.

Only what the runtime rules read: an allocation's number, its color (memory space;
XLA prints one only when it is not 0), the entry parameter it is, if any, and whether
it may be live out. Errors are InputError, `file:line: message`.
"""

import os
import re
from typing import NamedTuple

from hlo_tools import bounded_input
from hlo_tools.errors import InputError


class Allocation(NamedTuple):
  number: int
  color: int  # the memory space
  parameter: int | None  # the entry parameter it holds
  live_out: bool


_HEADER = "BufferAssignment:"
_ALLOCATION = re.compile(r"allocation (\d+): size \d+(?:, color (\d+))?(?:, parameter (\d+),)?")
_VALUE = re.compile(r" value: <\d+ ([\w.\-]+)(?:\{([\d,]*)\})?(?: \(phi\))? @\d+>")


def sibling_path(module_path: "str | os.PathLike[str]") -> str:
  """Where XLA dumps the buffer assignment of the module at `module_path`."""
  stem = str(module_path)
  for suffix in (".txt", ".hlo"):
    if stem.endswith(suffix):
      stem = stem[: -len(suffix)]
  return stem + "-buffer-assignment.txt"


WHAT = "the buffer assignment beside the module"


def found(path: str, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES) -> bool:
  """Whether XLA's buffer-assignment dump is at `path` (sibling_path): a regular file
  within max_bytes (it grows with the module). Anything else at its name (a FIFO,
  device, directory, dangling link) is an InputError, not skipped."""
  return bounded_input.found_beside(path, WHAT, max_bytes, side=False) is not None


def copy(path: str, to: str, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES) -> None:
  """The dump at `path` copied to `to`, read as every input is (bounded)."""
  data = bounded_input.read_input(path, max_bytes)
  with open(to, "wb") as f:
    f.write(data)


def parse(text: str, label: str) -> dict[str, dict[tuple[int, ...], Allocation]]:
  """{instruction: {shape index tuple: Allocation}} of the values the dump places."""
  lines = text.split("\n")
  if lines[0].strip() != _HEADER:
    raise InputError(f"{label}:1: not an XLA buffer-assignment dump (no '{_HEADER}' line)")
  holders: dict[str, dict[tuple[int, ...], Allocation]] = {}
  current: Allocation | None = None
  for lineno, line in enumerate(lines[1:], 2):
    if line.startswith("allocation "):
      m = _ALLOCATION.match(line)
      if not m:
        raise InputError(f"{label}:{lineno}: expected 'allocation N: size S, ...'")
      current = Allocation(
        int(m[1]), int(m[2] or 0), None if m[3] is None else int(m[3]), ", maybe-live-out" in line
      )
    elif line.startswith(" value: "):
      m = _VALUE.match(line)
      if not m or current is None:
        raise InputError(
          f"{label}:{lineno}: expected ' value: <id name{{index}} @n>' under an allocation line"
        )
      index = tuple(int(i) for i in (m[2] or "").split(",") if i)
      holders.setdefault(m[1], {}).setdefault(index, current)
    else:
      current = None  # later sections list values in other forms
  return holders
