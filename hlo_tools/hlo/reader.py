"""A tolerant reader of XLA HLO module text, as jax 0.9 - 0.11 print it. No jaxlib needed.

It reads the cheap structure: the module header, computations, and each instruction's
name, shape, opcode, operands and attributes (kept as text, split on first use). XLA
prints one statement a line; one compiled regex reads an instruction line, and a line
it does not take goes to a small scanner, which reads it or refuses it with one line,
`file:line:col: message`. Strictness is XLA's job (nvshmem-opt parses with XLA): the
checks here are those the tools stand on (operands and called computations defined,
shapes sized, permute pairs and channel ids well formed). Time and memory are linear.
"""

import collections
import os
import weakref
from typing import NoReturn

from hlo_tools.bounded_input import DEFAULT_MAX_INPUT_BYTES, read_input
from hlo_tools.errors import HloParseError, InputReadError, ShapeError
from hlo_tools.hlo.attributes import parse_kv, parse_name_list, unquote
from hlo_tools.hlo.grammar import (
  CALL_RE,
  CLOSE_RE,
  COMP_HEAD_RE,
  HEAD_RE,
  INSTR_RE,
  INT_RE,
  MODULE_RE,
  NOT_UTF8_RE,
  OPCODE_RE,
  OPCODES,
  OPERAND_RE,
  PAIRS_RE,
  STR_OR_COMMENT_RE,
  STR_RE,
  TABLE_ROW_RE,
  is_known_opcode,
)
from hlo_tools.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_tools.hlo.scanner import Scanner
from hlo_tools.hlo.shape import SHAPE_CACHE, Shape, parse_shape, parse_shape_at

__all__ = ["parse_hlo_text", "parse_hlo_file", "load_hlo_proto"]


_PERMUTE_OPCODES = frozenset(("collective-permute", "collective-permute-start"))
_GOOD_PAIRS: set[str] = set()  # pair lists already checked
_TABLES = {
  "FileNames": "file_names",
  "FunctionNames": "function_names",
  "FileLocations": "file_locations",
  "StackFrames": "stack_frames",
}
# Larger inputs are refused before reading (docs/reliability.md: ~8 bytes per byte).
MAX_INPUT_BYTES = DEFAULT_MAX_INPUT_BYTES


def parse_hlo_text(text: str | bytes | bytearray, path: str = "<string>") -> HloModule:
  """Parses HLO module text (str or bytes) into an HloModule."""
  if isinstance(text, (bytes, bytearray)):
    text = _decode(bytes(text), path)
  return _Reader(text, path).read()


def parse_hlo_file(path: "str | os.PathLike[str]", max_bytes: int = MAX_INPUT_BYTES) -> HloModule:
  """Parses an HLO text file ("-": stdin); HloParseError for bad content or more
  than max_bytes bytes (files, devices and pipes alike), OSError if unreadable."""
  try:
    data = read_input(path, max_bytes)
  except InputReadError as e:
    if e.message.startswith("input is"):
      raise HloParseError(str(path), 1, 1, e.message.replace(" (--max-input-bytes)", "")) from None
    raise OSError(e.message.replace("cannot read: ", "")) from None
  return _Reader(_decode(data, str(path)), str(path)).read()


def load_hlo_proto(
  path: "str | os.PathLike[str]", max_bytes: int = DEFAULT_MAX_INPUT_BYTES
) -> HloModule:
  """Loads a serialized HloModuleProto through jaxlib (which prints it) and parses it;
  the file is read as every input is (read_input: within max_bytes and the input
  timeout)."""
  try:
    from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise RuntimeError(f"load_hlo_proto needs jaxlib, which is not importable: {e}") from e
  data = read_input(path, max_bytes)
  try:
    text = xla_client.XlaComputation(data).as_hlo_text()
  except Exception as e:  # jaxlib raises its own error types
    raise HloParseError(str(path), 1, 1, f"not a serialized HloModuleProto: {e}") from e
  return parse_hlo_text(text, str(path))


def _decode(data: bytes, path: str) -> str:
  """The text; bytes that are not UTF-8 become lone surrogates (taken in comments only)."""
  if b"\0" in data[:4096]:
    raise HloParseError(path, 1, 1, "binary data, not HLO text")
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError:
    return data.decode("utf-8", "surrogateescape")


def _line_breaks(text: str) -> str:
  """Text with "\n" line ends only: CR-only files are read as lines, CR LF as LF, a
  stray CR elsewhere as a space (XLA takes CR as white space)."""
  if "\r" not in text or "\n" not in text:
    return text.replace("\r", "\n")
  return text.replace("\r\n", "\n").replace("\r", " ")


def _blank_comments(line: str) -> str:
  """The line with each /* comment */ as spaces (columns kept), strings untouched."""
  return STR_OR_COMMENT_RE.sub(
    lambda m: m.group() if m.group()[0] == '"' else " " * len(m.group()), line
  )


class _Reader:
  """One statement a line: the module header, then computations (header line,
  instruction lines, a closing '}') and stack-frame tables, in any order."""

  def __init__(self, text: str, path: str) -> None:
    self.path, self.text = path, _line_breaks(text)
    self.entry: HloComputation | None = None  # the ENTRY computation once read
    text, self.lines = self.text, self.text.split("\n")
    if len(self.lines) > 1 and not self.lines[-1]:
      self.lines.pop()  # the final newline does not start a line
    self.comments = "/*" in text
    if not text.isascii() and NOT_UTF8_RE.search(text):
      for i, line in enumerate(self.lines):
        bad = NOT_UTF8_RE.search(line) and NOT_UTF8_RE.search(self.line(i))
        if bad:
          self.error(
            i,
            bad.start() + 1,
            f"byte {ord(bad.group()) - 0xDC00:#04x} is not "
            "UTF-8 (XLA takes such bytes inside /* comments */ only)",
          )

  def error(self, i: int, col: int, message: str) -> NoReturn:
    raise HloParseError(self.path, i + 1, col, message)

  def line(self, i: int) -> str:
    """Line i as the reader sees it: comments blanked, other bytes checked."""
    line = self.lines[i]
    if "/*" in line:
      line = _blank_comments(line)
      if "/*" in line and "/*" in STR_RE.sub("", line):
        self.error(
          i,
          line.index("/*") + 1,
          "unterminated /* comment (a comment ends on its "
          "line: the reader takes one statement a line, as XLA prints it)",
        )
    return line

  def _skip_blank(self, i: int) -> int:
    """The first line from i with a statement: not blank, not a `//` or `/* */` comment."""
    while i < len(self.lines) and (
      self.lines[i].lstrip().startswith("//") or not self.line(i).strip()
    ):
      i += 1
    return i

  def read(self) -> HloModule:
    lines = self.lines
    i = self._skip_blank(0)
    if i >= len(lines):
      self.error(max(len(lines) - 1, 0), 1, "empty input: expected 'HloModule NAME'")
    head = self.line(i)
    m = MODULE_RE.match(head)
    if m is None:
      self.error(i, 1, "expected 'HloModule NAME' header; this is not HLO text")
    attrs = Scanner(self, m.group(2), i, m.start(2)).attributes()
    for key in ("num_partitions", "replica_count", "num_replicas"):
      if key in attrs and not INT_RE.fullmatch(attrs[key]):
        self._attr_error(
          i, head, key, f"attribute {key!r} needs an integer, got {attrs[key][:40]!r}"
        )
    module = HloModule(m.group(1), attrs, self.path)
    i = self._skip_blank(i + 1)
    while i < len(lines):
      word = lines[i].strip()
      if word in _TABLES:
        i = self._table(module, word, i + 1)
      else:
        i = self._computation(module, i)
      i = self._skip_blank(i)
    if not module.computations:
      self.error(len(lines) - 1, 1, "module has no computations")
    # XLA takes the last computation as the entry when none is marked.
    module.entry = self.entry or module.computations[-1]
    self._check_calls(module)
    return module

  def _table(self, module: HloModule, name: str, i: int) -> int:
    """Rows `N "text"` or `N {key=value ...}`, one a line, up to a line of another kind."""
    lines, raw = self.lines, []
    parsed: dict[int, str | dict[str, int | str]] = getattr(module, _TABLES[name])
    while i < len(lines):
      m = TABLE_ROW_RE.match(lines[i])
      if m is None:
        break
      raw.append(lines[i])
      number, value = m.groups()
      parsed[int(number)] = (
        unquote(value)
        if value.startswith('"')
        else {
          k: (int(v) if v.lstrip("-").isdigit() else unquote(v)) for k, v in parse_kv(value).items()
        }
      )
      i += 1
    module.tables[name] = raw
    return i

  def _computation_head(self, module: HloModule, i: int) -> HloComputation:
    head = self.line(i)
    m = COMP_HEAD_RE.match(head)
    if m is None:
      self.error(
        i,
        1,
        f"expected a computation '[ENTRY] %name (params) -> shape {{', got {head.strip()[:40]!r}",
      )
    comp = HloComputation(m.group(2), bool(m.group(1)), i + 1, m.group(3) or "")
    if comp.name in module._by_name:
      self.error(i, 1, f"duplicate computation %{comp.name}")
    if comp.is_entry:
      if self.entry is not None:
        self.error(i, 1, "more than one ENTRY computation")
      self.entry = comp
    comp._module = weakref.ref(module)
    module.computations.append(comp)
    module._by_name[comp.name] = comp
    return comp

  def _computation(self, module: HloModule, i: int) -> int:
    """Reads the computation whose header is line i; returns the line after its '}'."""
    comp = self._computation_head(module, i)
    by_name, instrs, comp_ref = comp._by_name, comp.instructions, weakref.ref(comp)
    late: list[tuple[str | tuple[str, ...], int, int]] = []
    root_instr: HloInstruction | None = None
    operands: str | tuple[str, ...]
    match, shapes, lines, opcodes = INSTR_RE.match, SHAPE_CACHE, self.lines, OPCODES
    clean, defined, permutes = not self.comments, by_name.__contains__, _PERMUTE_OPCODES
    for i in range(i + 1, len(lines)):  # noqa: B020  (i: the header, then each line)
      line = lines[i] if clean else self.line(i)
      m = match(line)
      if m is not None:
        root, name, shape_text, opcode, simple, ops, rest = m.groups()
        col = m.start(2) + 1
        if opcode not in opcodes and not is_known_opcode(opcode):
          self.error(i, m.start(4) + 1, f"unknown opcode {opcode!r}")
        if simple is not None and opcode != "parameter":  # `%a, %b`, the usual
          ops, operands = simple, simple[1:]  # `a, %b`: split when asked for
        else:
          ops = simple or ops
          operands = self._operands(opcode, ops, line, i, col)
      else:
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
          continue
        if stripped[0] == "}":
          self._close(comp, root_instr, line, i, late)
          return i + 1
        root, name, shape_text, opcode, ops, rest, col = self._slow_instruction(line, i)
        operands = self._operands(opcode, ops, line, i, col)
      shape = shapes.get(shape_text)
      if shape is None:
        shape = self._shape(shape_text, i, line.find(shape_text, col - 1))
      instr = HloInstruction(
        name, shape, opcode, operands, rest, bool(root), i + 1, col, ops, comp_ref
      )
      if not (
        all(map(defined, operands.split(", %")))
        if isinstance(operands, str)
        else all(map(defined, operands))
      ):
        if not isinstance(operands, str) and any("#" in op for op in operands):
          self._compact_tuple_elements(comp, operands, i, col)
        late.append((operands, i, col))
      if opcode in permutes or "channel_id=" in rest:
        self._check_collective(instr, line, i)
      if name in by_name:
        self.error(i, col, f"duplicate instruction name %{name}")
      by_name[name] = instr
      instrs.append(instr)
      if root:
        if root_instr is not None:
          self.error(i, col, f"second ROOT in computation %{comp.name}")
        root_instr = instr
    self.error(
      len(lines) - 1,
      len(lines[-1]) + 1,
      f"unexpected end of input: computation %{comp.name} (line {comp.line}) is not closed by '}}'",
    )

  def _compact_tuple_elements(
    self, comp: HloComputation, operands: tuple[str, ...], i: int, col: int
  ) -> None:
    """The get-tuple-elements that operands `%t#K#L` stand for, added before their user
    under the names `t#K` and `t#K#L` (once each), as XLA's parser adds them."""
    for op in operands:
      base, *indices = op.split("#")
      if not indices or op in comp._by_name:
        continue
      if base not in comp._by_name:
        self.error(i, col, f"%{op}: tuple element of %{base}, which is not defined above")
      current = comp._by_name[base]
      for index in indices:
        element = f"{current.name}#{index}"
        if element not in comp._by_name:
          tuple_shapes = current.shape.tuple_shapes
          if tuple_shapes is None or int(index) >= len(tuple_shapes):
            self.error(
              i, col, f"%{op}: %{current.name} has no tuple element {index} (shape {current.shape})"
            )
          gte = HloInstruction(
            element,
            tuple_shapes[int(index)],
            "get-tuple-element",
            (current.name,),
            f", index={int(index)}",
            False,
            i + 1,
            col,
            f"%{current.name}",
            weakref.ref(comp),
          )
          comp._by_name[element] = gte
          comp.instructions.append(gte)
        current = comp._by_name[element]

  def _close(
    self,
    comp: HloComputation,
    root: HloInstruction | None,
    line: str,
    i: int,
    late: list[tuple[str | tuple[str, ...], int, int]],
  ) -> None:
    """The closing line `}`, maybe with `, execution_thread="..."`."""
    close = CLOSE_RE.match(line)
    if close is None:
      self.error(i, line.index("}") + 2, "unexpected text after '}'")
    thread = (
      Scanner(self, close.group(1) or "", i, close.start(1)).attributes().get("execution_thread")
    )
    comp.execution_thread = unquote(thread) if thread else None
    for operands, k, col in late:  # operands may be defined below their use
      for op in operands.split(", %") if isinstance(operands, str) else operands:
        if op not in comp._by_name:
          self.error(k, col, f"use of undefined instruction %{op}")
    if not comp.instructions:
      self.error(comp.line - 1, 1, f"computation %{comp.name} has no instructions")
    if root is None:  # XLA makes the last instruction the root
      root = comp.instructions[-1]
      root.is_root = True
    comp.root = root

  def _operands(self, opcode: str, ops: str, line: str, i: int, col: int) -> tuple[str, ...]:
    """Operand names from the text between the parentheses: `%a, %b`, bare names,
    names after their shapes; a constant's literal and a parameter's number are none."""
    if opcode == "constant":
      return ()
    if opcode == "parameter":
      if not ops.strip().isdigit():
        self.error(i, col, "parameter needs a number: parameter(N)")
      return ()
    names, at = [], line.find("(" + ops + ")", col) + 2
    for part in ops.split(","):
      m = OPERAND_RE.match(part)
      if m is None and part.strip():  # XLA takes `(%a,, %b,)` too
        self.error(i, at, f"expected an operand name, got {part.strip()[:30]!r}")
      names += [m.group(1)] if m else []
      at += len(part) + 1
    return tuple(names)

  def _check_collective(self, instr: HloInstruction, line: str, i: int) -> None:
    """Pairs and channel ids, which the tools decide on: well formed, and the pairs as XLA's
    verifier takes them (ids >= 0, none twice on a side but for in-place slices)."""
    attrs = instr.attributes
    raw = attrs.get("channel_id")
    if raw is not None and not INT_RE.fullmatch(raw):
      self._attr_error(
        i, line, "channel_id", f"attribute 'channel_id' needs an integer, got {raw[:40]!r}"
      )
    raw = attrs.get("source_target_pairs")
    if instr.opcode not in _PERMUTE_OPCODES or raw in _GOOD_PAIRS:
      return
    if raw is None or not PAIRS_RE.fullmatch(raw):
      self._attr_error(
        i,
        line,
        "source_target_pairs",
        f"%{instr.name} needs source_target_pairs={{{{source,target}},...}}",
      )
    pairs = instr.source_target_pairs or []  # read: the regex took them
    seen: tuple[collections.Counter[int], collections.Counter[int]] = (
      collections.Counter(),
      collections.Counter(),
    )
    permutation = all(len(set(side)) == len(pairs) for side in zip(*pairs))
    allowed = 1 if permutation else _slices(instr)
    for pair in [] if permutation else pairs:  # the first id seen once too often
      for side, what in enumerate(("source", "target")):
        seen[side][pair[side]] += 1
        if seen[side][pair[side]] > allowed:
          times = "once" if allowed == 1 else f"{allowed} times"
          self._attr_error(
            i,
            line,
            "source_target_pairs",
            f"%{instr.name}: {what} {pair[side]} appears more than {times} in "
            "source_target_pairs (XLA's verifier rejects this permute)",
          )
    if permutation and len(_GOOD_PAIRS) < 10000:
      _GOOD_PAIRS.add(raw)  # pair lists repeat

  def _attr_error(self, i: int, line: str, key: str, message: str) -> NoReturn:
    # At the value, or the line's start.
    at = line.find(key + "=")
    self.error(i, at + len(key) + 2 if at >= 0 else 1, message)

  def _check_calls(self, module: HloModule) -> None:
    """Every computation named by a call attribute exists: one pass over the text."""
    names, text = module._by_name, self.text
    for m in CALL_RE.finditer(text):
      for callee in parse_name_list(m.group(1)):
        if callee not in names:
          at = m.start(1)
          line_start = text.rfind("\n", 0, at) + 1
          self.error(
            text.count("\n", 0, at), at - line_start + 1, f"call of undefined computation %{callee}"
          )

  def _shape(self, text: str, i: int, col0: int) -> Shape:
    try:
      return parse_shape(text)
    except ShapeError as e:
      self.error(i, col0 + e.offset + 1, str(e))

  def _slow_instruction(self, line: str, i: int) -> tuple[str | None, str, str, str, str, str, int]:
    """A line the regex did not take: read exactly, or refused at the offending column."""
    m = HEAD_RE.match(line)
    if m is None:  # every part of the pattern is optional: it always matches
      self.error(i, 1, "expected an instruction name or '}'")
    root, name, sc = m.group(1), m.group(3), Scanner(self, line, i, 0)
    if name is None or not m.group(4):
      self.error(
        i,
        m.end() + 1,
        f"expected '=' after instruction name %{name}"
        if name
        else "expected an instruction name or '}'",
      )
    try:
      sc.i = parse_shape_at(line, m.end())[1]
    except ShapeError as e:
      self.error(i, e.offset + 1, str(e))
    shape_text = line[m.end() : sc.i]
    sc.ws()
    opcode = sc.regex(OPCODE_RE, "expected an opcode")
    if not is_known_opcode(opcode):
      sc.fail(f"unknown opcode {opcode!r}", sc.i - len(opcode))
    sc.ws()
    if not line.startswith("(", sc.i):
      sc.fail(f"expected '(' after opcode {opcode!r}")
    start = sc.i + 1
    sc.balanced()
    Scanner(self, line[sc.i :], i, sc.i).attributes()  # refuses bad text at its column
    return root, name, shape_text, opcode, line[start : sc.i - 1], line[sc.i :], m.start(2) + 1


def _slices(instr: HloInstruction) -> int:
  """How often an id may repeat in a permute's pairs: the slice count of the in-place
  form (4 operands, the third a tuple of index tuples), else 1."""
  if len(instr.operands) != 4:
    return 1
  try:
    ops = instr.operand_instructions()
    offsets = ops[2].shape.tuple_shapes
    if offsets is None:
      return 1
    slices = offsets[0].tuple_shapes if ops[0].shape.is_tuple else offsets
  except (KeyError, IndexError):  # not that form
    return 1
  return 1 if slices is None else len(slices)
