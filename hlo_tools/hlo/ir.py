"""The parsed module: HloModule, its HloComputations and their HloInstructions."""

import json
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from hlo_tools.hlo.attributes import (
  expand_iota,
  expand_mesh_groups,
  parse_int_lists,
  parse_kv,
  parse_name_list,
  split_attributes,
  unquote,
)
from hlo_tools.hlo.grammar import CALL_ATTRS, CALL_RE
from hlo_tools.hlo.shape import Shape


class HloInstruction:
  """One HLO instruction. `attributes` holds every `key=value` as raw text, in order."""

  # Few objects for the cyclic collector to rescan: operands and attributes stay text
  # until asked for (or are a tuple of strings, which it stops watching), and the
  # computation is a weak reference (no cycle: a dropped module is freed at once).
  __slots__ = (
    "name",
    "shape",
    "opcode",
    "_operands",
    "_attributes",
    "is_root",
    "line",
    "col",
    "operand_text",
    "_computation",
  )

  def __init__(
    self,
    name: str,
    shape: Shape,
    opcode: str,
    operands: str | tuple[str, ...],
    attr_text: str,
    is_root: bool,
    line: int,
    col: int,
    operand_text: str,
    computation: "weakref.ref[HloComputation]",
  ) -> None:
    self.name, self.shape, self.opcode = name, shape, opcode
    self._operands = operands  # `a, %b, %c` as printed, or a tuple of names
    # `, key=value, ...` as read: a dict once asked for
    self._attributes: str | dict[str, str] = attr_text
    self.is_root, self.line, self.col = is_root, line, col
    self.operand_text = operand_text  # raw text between the parentheses
    self._computation = computation

  def __repr__(self) -> str:
    return f"<HloInstruction %{self.name} = {self.shape} {self.opcode} line {self.line}>"

  @property
  def computation(self) -> "HloComputation":
    return _alive(self._computation)

  @property
  def operands(self) -> list[str]:
    """Operand instruction names, without '%' (a new list each time)."""
    ops = self._operands
    return ops.split(", %") if isinstance(ops, str) else list(ops)

  @property
  def attributes(self) -> dict[str, str]:
    """dict name -> raw text, in order."""
    attrs = self._attributes
    if isinstance(attrs, str):
      attrs = self._attributes = split_attributes(attrs) if attrs else {}
    return attrs

  def attributes_match(self, other: "HloInstruction") -> bool:
    """A cheap test a diff asks of every matched pair: True means `other` has the same
    attributes; False does not prove they differ. While neither is split, the texts are
    compared as read, so texts that differ in spacing alone give False until both are
    split."""
    a, b = self._attributes, other._attributes
    if isinstance(a, str) and isinstance(b, str):
      return a == b
    return self.attributes == other.attributes

  @property
  def literal(self) -> str | None:
    return self.operand_text if self.opcode == "constant" else None

  @property
  def parameter_number(self) -> int | None:  # the reader checked it is a number
    return int(self.operand_text) if self.opcode == "parameter" else None

  @property
  def called_computations(self) -> list[str]:
    """Names of the computations this instruction calls, in attribute order (read off
    the text while the attributes are not split: every instruction is asked)."""
    attrs = self._attributes
    raws = (
      CALL_RE.findall(attrs)
      if isinstance(attrs, str)
      else [raw for key, raw in attrs.items() if key in CALL_ATTRS]
    )
    return [n for raw in raws for n in parse_name_list(raw)]

  def _read(self, key: str, read: "Callable[[str], _T]") -> "_T | None":
    """Attribute `key` read by `read`, or None when absent."""
    raw = self.attributes.get(key)
    return None if raw is None else read(raw)

  @property
  def async_execution_thread(self) -> str | None:
    return self._read("async_execution_thread", unquote)

  @property
  def source_target_pairs(self) -> list[tuple[int, ...]] | None:
    return self._read("source_target_pairs", lambda raw: [tuple(p) for p in parse_int_lists(raw)])

  @property
  def channel_id(self) -> int | None:
    return self._read("channel_id", int)

  @property
  def replica_groups_text(self) -> str | None:
    return self.attributes.get("replica_groups")

  @property
  def backend_config(self) -> str | None:
    return self.attributes.get("backend_config")

  @property
  def sharding(self) -> str | None:
    return self.attributes.get("sharding")

  @property
  def frontend_attributes(self) -> dict[str, str]:
    return self._read("frontend_attributes", parse_kv) or {}

  @property
  def metadata(self) -> dict[str, str]:
    return self._read("metadata", parse_kv) or {}

  @property
  def control_predecessors(self) -> list[str]:
    return self._read("control-predecessors", parse_name_list) or []

  @property
  def replica_groups(self) -> list[list[int]] | None:
    """List of groups; the iota (`[2,4]<=[8]`) and mesh forms are expanded."""
    raw = self.attributes.get("replica_groups")
    if raw is None:
      return None
    if raw.startswith("{"):
      return parse_int_lists(raw) if raw.strip("{} ") else []
    if raw.startswith("mesh["):
      return expand_mesh_groups(raw)
    return expand_iota(raw)

  def backend_config_json(self) -> Any:
    """backend_config parsed as JSON (also when printed as a quoted string), else None."""
    raw = self.attributes.get("backend_config")
    if raw is None:
      return None
    try:
      return json.loads(unquote(raw) if raw.startswith('"') else raw)
    except (ValueError, RecursionError):  # deeply nested JSON too: not a config we read
      return None

  def operand_instructions(self) -> "list[HloInstruction]":
    comp = self.computation
    return [comp.instruction(n) for n in self.operands]


_T = TypeVar("_T")


def _alive(ref: "weakref.ref[_T] | None") -> _T:
  """The object of a back reference (computation, module) while its owner lives."""
  obj = ref() if ref is not None else None
  if obj is None:
    raise ReferenceError("the module this was read from is gone (keep the HloModule)")
  return obj


class HloComputation:
  """A computation: instructions in order, root, parameters (by parameter number)."""

  __slots__ = (
    "name",
    "is_entry",
    "line",
    "signature",
    "execution_thread",
    "instructions",
    "root",
    "_module",
    "_by_name",
    "__weakref__",
  )
  root: HloInstruction  # set by the reader when it closes the computation

  def __init__(self, name: str, is_entry: bool, line: int, signature: str) -> None:
    self.name, self.is_entry, self.line = name, is_entry, line
    self.signature = signature  # "(p: f32[]) -> f32[]" as printed, or ""
    self.execution_thread: str | None = None
    self.instructions: list[HloInstruction] = []
    self._by_name: dict[str, HloInstruction] = {}
    # A weak reference, as HloInstruction.computation; set by the reader.
    self._module: weakref.ref[HloModule] | None = None

  @property
  def module(self) -> "HloModule":
    return _alive(self._module)

  def __repr__(self) -> str:
    return f"<HloComputation %{self.name}: {len(self.instructions)} instructions>"

  @property
  def parameters(self) -> list[HloInstruction]:
    return sorted(
      (i for i in self.instructions if i.opcode == "parameter"),
      key=lambda i: i.parameter_number or 0,
    )

  def instruction(self, name: str) -> HloInstruction:
    return self._by_name[name.lstrip("%")]

  def __contains__(self, name: str) -> bool:
    return name.lstrip("%") in self._by_name

  def __iter__(self) -> Iterator[HloInstruction]:
    return iter(self.instructions)


class HloModule:
  """A parsed HLO module."""

  entry: HloComputation  # set by the reader

  def __init__(self, name: str, attributes: dict[str, str], path: str) -> None:
    self.name, self.path = name, path
    self.attributes = attributes  # every header attribute, raw text, in order
    self.computations: list[HloComputation] = []
    self._by_name: dict[str, HloComputation] = {}
    self.tables: dict[str, list[str]] = {}  # "FileNames" etc. -> list of raw lines
    # id -> str (file and function names), id -> {field: int} (locations, frames)
    self.file_names: dict[int, str] = {}
    self.function_names: dict[int, str] = {}
    self.file_locations: dict[int, dict[str, int | str]] = {}
    self.stack_frames: dict[int, dict[str, int | str]] = {}

  def __repr__(self) -> str:
    return f"<HloModule {self.name}: {len(self.computations)} computations>"

  def _int(self, key: str, default: int) -> int:  # the reader checked these are integers
    return int(self.attributes.get(key, default))

  @property
  def num_partitions(self) -> int:
    return self._int("num_partitions", 1)

  @property
  def num_replicas(self) -> int:
    return self._int("replica_count", self._int("num_replicas", 1))

  @property
  def is_scheduled(self) -> bool:
    return self.attributes.get("is_scheduled") == "true"

  @property
  def frontend_attributes(self) -> dict[str, str]:
    return parse_kv(self.attributes.get("frontend_attributes", ""))

  @property
  def entry_computation_layout(self) -> str | None:
    raw = self.attributes.get("entry_computation_layout")
    return raw[1:-1] if raw and raw.startswith("{") else raw

  def computation(self, name: str) -> HloComputation:
    return self._by_name[name.lstrip("%")]

  def __contains__(self, name: str) -> bool:
    return name.lstrip("%") in self._by_name

  def instructions(self) -> Iterator[HloInstruction]:
    for comp in self.computations:
      yield from comp.instructions

  @property
  def instruction_count(self) -> int:
    return sum(len(c.instructions) for c in self.computations)
