"""Reading HLO for the commands: a parsed module with its text, strict pair lists,
and the program's partition count where the module header does not say it.

Errors are InputError: one line, `file:line:col: message`, exit status 2.
"""

from __future__ import annotations

import re
from typing import NoReturn

import hlo_tools.selection as selection  # noqa: F401 (first: it says how to build a missing binding)
from hlo_tools import _selection_core, bounded_input
from hlo_tools.errors import InputError
from hlo_tools.hlo import buffer_assignment, proto
from hlo_tools.hlo.buffer_assignment import Allocation
from hlo_tools.hlo.ir import HloInstruction, HloModule
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model.driver_report import Report

# ---------------------------------------------------------------------------------------
# Reading input


class Source:
  """A parsed module plus the text it came from (for columns and side-by-side views)."""

  def __init__(
    self, module: HloModule, text: str, path: str | None, label: str | None = None
  ) -> None:
    self.module = module
    self.text = text
    self.path = path
    self.label = label or path
    self._lines: list[str] | None = None
    self._allocations: dict[str, dict[tuple[int, ...], Allocation]] | None = None
    # The program's partition count: the header's, else inferred (resolve_partitions).
    self.num_partitions = module.num_partitions
    self.num_replicas = module.num_replicas
    self.partitions_from = "module header" if "num_partitions" in module.attributes else "default"

  @property
  def allocations(self) -> dict[str, dict[tuple[int, ...], Allocation]]:
    """The buffer-assignment dump beside the module (hlo.buffer_assignment.parse),
    read once; {} where there is none."""
    if self._allocations is None:
      self._allocations = {}
      path = self.path and str(self.path) != "-" and buffer_assignment.sibling_path(self.path)
      if path and buffer_assignment.found(path):
        data = bounded_input.read_input(path)
        self._allocations = buffer_assignment.parse(data.decode("utf-8", "surrogateescape"), path)
    return self._allocations

  @property
  def lines(self) -> list[str]:
    if self._lines is None:
      self._lines = self.text.split("\n")
    return self._lines

  def line(self, lineno: int) -> str:
    return self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""


def decode_text(data: bytes) -> str:
  """HLO text from bytes as read_source takes it: UTF-8, any other bytes kept as lone
  surrogates, which the reader accepts inside comments only (as XLA's lexer does)."""
  return data.decode("utf-8", "surrogateescape")


def read_text(path: str | None, text: str, label: str | None = None) -> Source:
  """Parses HLO text; InputError carries the reader's `file:line:col: message`."""
  label = label or path
  if not text.strip():
    raise InputError(f"{label}: empty file, no HLO module")
  module = parse_hlo_text(text, str(label))  # label is None only if path is too
  require_entry(module, text, label)
  return Source(module, text, path, label)


def require_entry(module: HloModule, text: str, label: str | None) -> None:
  """InputError unless a computation is marked ENTRY.

  XLA's parser takes the last computation as the entry when none is marked, so a
  module cut at a computation boundary still parses there; XLA's verifier (and so
  nvshmem-opt) then rejects it. The tools refuse it up front, alike."""
  if any(c.is_entry for c in module.computations):
    return
  last = module.computations[-1] if module.computations else None
  ends = f" after %{last.name} (line {last.line})" if last else ""
  lines = text.count("\n") + (0 if text.endswith("\n") else 1)
  raise InputError(
    f"{label}:{lines}: no ENTRY computation: the module ends{ends}; is "
    "the file cut at a computation boundary?"
  )


def read_source(
  path: str, label: str | None = None, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
) -> Source:
  """Reads and parses an HLO module file (any file, device or pipe; "-" is stdin),
  never more than max_bytes of it: HLO text, or a serialized module as XLA dumps it
  (X.hlo.pb), printed as text by jaxlib."""
  data = bounded_input.read_input(path, max_bytes, label)
  text = proto_text(data, label or path)
  if text is not None:
    return read_text(path, text, label)
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    # XLA's lexer takes any bytes inside comments: so does the reader, which
    # sees them as lone surrogates and rejects them anywhere else.
    first_bad = e.start
  else:
    return read_text(path, text, label)
  try:
    return read_text(path, data.decode("utf-8", "surrogateescape"), label)
  except InputError as err:
    raise InputError(
      f"{err} (the input is not UTF-8 text from byte {first_bad}, nor a serialized HloModuleProto)"
    ) from None


def proto_text(data: bytes, label: str) -> str | None:
  """The HLO text of a serialized module (an HloProto as XLA dumps it, or an
  HloModuleProto), its header stating the partition count the proto's device
  assignment gives; None where `data` is HLO text or no such proto."""
  if proto.looks_like_text(data):
    return None
  module = proto.module_bytes(data)
  if module is None:
    return None
  return proto.to_text(module, label, proto.device_assignment(module, label))


_PAIR_RE = re.compile(r"\s*\{\s*(-?\d+)\s*,\s*(-?\d+)\s*\}\s*")


def strict_pairs(source: Source, instr: HloInstruction) -> list[tuple[int, int]]:
  """The source_target_pairs of `instr`, each exactly two ids, or InputError.

  The reader keeps attribute values verbatim, so `{{0,1},{2}}` reads as a pair of
  one id; every command must reject it where it is, not decide on it.
  """
  raw = instr.attributes.get("source_target_pairs")
  if raw is None:
    return []

  def fail(offset: int, what: str) -> NoReturn:
    # The column only on failure: the first look at a line splits the whole text.
    line = source.line(instr.line)
    base = line.find("source_target_pairs=")
    base = base + len("source_target_pairs=") if base >= 0 else instr.col - 1
    raise InputError(
      f"{source.label}:{instr.line}:{base + offset + 1}: broken "
      f"source_target_pairs of %{instr.name}: {what}"
    )

  body = raw.strip()
  if not (body.startswith("{") and body.endswith("}")):
    fail(0, "expected {{source,target},...}")
  pos, end = 1, len(body) - 1
  pairs: list[tuple[int, int]] = []
  if body[1:-1].strip():
    while True:
      m = _PAIR_RE.match(body, pos, end)
      if not m:
        fail(pos, "expected {source,target} with two integer ids")
      pairs.append((int(m.group(1)), int(m.group(2))))
      pos = m.end()
      if pos == end:
        break
      if body[pos] != ",":
        fail(pos, f"expected ',' or '}}', found {body[pos]!r}")
      pos += 1
  return pairs


# ---------------------------------------------------------------------------------------
# How many devices the program runs on

_MESH_RE = re.compile(r"#sdy\.mesh<\[([^\]]*)\]")
_AXIS_SIZE_RE = re.compile(r"=\s*(\d+)")


def mesh_devices(module: HloModule) -> int | None:
  """Devices of the largest Shardy mesh in the module's frontend attributes, or None."""
  raw = module.attributes.get("frontend_attributes") or ""
  sizes = []
  for axes in _MESH_RE.findall(raw):
    n = 1
    for size in _AXIS_SIZE_RE.findall(axes):
      n *= int(size)
    sizes.append(n)
  return max(sizes) if sizes else None


def largest_partition_id(module: HloModule) -> int:
  """The largest id in cross-partition pairs and groups (those with a channel_id)."""
  top = -1
  for instr in module.instructions():
    if instr.channel_id is None:
      continue
    try:
      ids = [i for p in instr.source_target_pairs or () for i in p]
      ids += [i for g in instr.replica_groups or () for i in g]
    except ValueError:
      continue  # broken lists are reported where they are decided on
    top = max([top] + ids)
  return top


def resolve_partitions(
  source: Source, topology: selection.Topology | None = None, override: int | None = None
) -> Source:
  """Sets source.num_partitions for a module whose header does not say it.

  jax's lowered modules (`jax.jit(f).lower(...).as_text(dialect="hlo")`) carry no
  num_partitions; the count is then the --num-partitions override, else the rule
  nvshmem-opt applies too (the core's infer_partitions) over what this reader
  sees: the Shardy mesh, the topology's devices, the largest id used.
  source.partitions_from says which.
  """
  module = source.module
  if override is not None:
    if override < 1:
      raise InputError(f"--num-partitions must be >= 1, got {override}")
    if "num_partitions" in module.attributes and module.num_partitions != override:
      raise InputError(
        f"{source.label}: --num-partitions={override} contradicts the "
        f"module's header (num_partitions={module.num_partitions}); the "
        "flag is for a module whose header gives no count"
      )
    source.num_partitions, source.partitions_from = override, "--num-partitions"
    return source
  if "num_partitions" in module.attributes:
    return source
  count, inferred_from = _selection_core.infer_partitions(
    largest_partition_id(module) + 1,
    mesh_devices(module) or 0,
    topology.num_devices if topology is not None else 0,
    source.num_replicas,
  )
  if inferred_from:
    source.num_partitions, source.partitions_from = count, f"inferred from {inferred_from}"
  return source


def partitions_note(source: Source) -> str | None:
  """One line for the user when the count did not come from the module header."""
  if source.partitions_from in ("module header", "default"):
    return None
  return (
    f"{source.label}: num_partitions {source.num_partitions} "
    f"({source.partitions_from}; the module header does not say)"
  )


def adopt_driver_partitions(source: Source, report: Report | None) -> Source:
  """Takes the partition count nvshmem-opt settled for this module (its report),
  so that the reader and the driver describe one module alike."""
  if not report or "num_partitions" not in report:
    return source
  if report["num_partitions"] != source.num_partitions:
    source.num_partitions = report["num_partitions"]
    source.partitions_from = (
      f"inferred from {report['partitions_from']}"
      if report.get("partitions_from")
      else "nvshmem-opt"
    )
  return source
