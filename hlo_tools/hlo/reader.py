"""A tolerant reader of XLA HLO module text, as jax 0.9 - 0.11 print it. No jaxlib needed.

It reads the cheap structure: the module header, computations, and each instruction's
name, shape, opcode, operands and attributes (kept as text, split on first use). XLA
prints one statement a line; one compiled regex reads an instruction line, and a line
it does not take goes to a small scanner, which reads it or refuses it with one line,
`file:line:col: message`. Strictness is XLA's job (nvshmem-opt parses with XLA): the
checks here are those the tools stand on (operands and called computations defined,
shapes sized, permute pairs and channel ids well formed). Time and memory are linear.
"""

import codecs
import collections
import itertools
import json
import math
import os
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

from hlo_tools.cli_io import DEFAULT_MAX_INPUT_BYTES, InputReadError, read_input
from hlo_tools.errors import HloParseError

__all__ = [
  "HloParseError",
  "Shape",
  "HloInstruction",
  "HloComputation",
  "HloModule",
  "parse_shape",
  "is_known_opcode",
  "parse_hlo_text",
  "parse_hlo_file",
  "load_hlo_proto",
  "expand_mesh_groups",
  "OPCODES",
]


# Opcode spellings of XLA's HloOpcodeString() (jaxlib 0.10.2's enum): a word outside
# them is a typo or garbage, not an instruction.
OPCODES = frozenset(
  """
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start
all-reduce all-reduce-done all-reduce-start all-to-all and asin asinh async-done async-start
async-update atan2 atanh batch-norm-grad batch-norm-inference batch-norm-training bitcast
bitcast-convert broadcast call cbrt ceil cholesky clamp collective-broadcast
collective-permute collective-permute-done collective-permute-start compare complex
concatenate conditional constant convert convolution copy copy-done copy-start cosine cosh
count-leading-zeros custom-call divide domain dot dynamic-reshape dynamic-slice
dynamic-update-slice erf exponential exponential-minus-one fft floor fusion gather
get-dimension-size get-tuple-element imag infeed iota is-finite log log-plus-one logistic
map maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter
partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce
reduce-precision reduce-scatter reduce-window remainder replica-id reshape reverse rng
rng-bit-generator rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt
scaled-dot scan scatter select select-and-scatter send send-done set-dimension-size
shift-left shift-right-arithmetic shift-right-logical sign sine sinh slice sort sqrt
stochastic-convert subtract tan tanh topk transpose triangular-solve tuple while xor
""".split()
)


def is_known_opcode(opcode: str) -> bool:
  """XLA's opcodes, and `{op}-start/-update/-done`: XLA's printed sugar for an async
  start/update/done wrapping the single instruction `op`."""
  return opcode in OPCODES or any(
    opcode.endswith(s) and opcode[: -len(s)] in OPCODES for s in ("-start", "-update", "-done")
  )


# Bytes per element; sub-byte types count a byte each (XLA stores them unpacked).
_ELEMENT_BYTES = {
  "pred": 1,
  "s1": 1,
  "s2": 1,
  "s4": 1,
  "s8": 1,
  "u1": 1,
  "u2": 1,
  "u4": 1,
  "u8": 1,
  "f4e2m1fn": 1,
  "f8e3m4": 1,
  "f8e4m3": 1,
  "f8e4m3fn": 1,
  "f8e4m3b11fnuz": 1,
  "f8e4m3fnuz": 1,
  "f8e5m2": 1,
  "f8e5m2fnuz": 1,
  "f8e8m0fnu": 1,
  "bf16": 2,
  "f16": 2,
  "s16": 2,
  "u16": 2,
  "f32": 4,
  "s32": 4,
  "u32": 4,
  "f64": 8,
  "s64": 8,
  "u64": 8,
  "c64": 8,
  "c128": 16,
  "token": 0,
  "opaque": 0,
}

# Attributes whose value names computations.
_CALL_ATTRS = frozenset(
  (
    "calls",
    "to_apply",
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
  )
)
_PERMUTE_OPCODES = frozenset(("collective-permute", "collective-permute-start"))
_GOOD_PAIRS: set[str] = set()  # pair lists already checked
_TABLES = {
  "FileNames": "file_names",
  "FunctionNames": "function_names",
  "FileLocations": "file_locations",
  "StackFrames": "stack_frames",
}
_CLOSERS = {"(": ")", "{": "}", "[": "]"}

# Deepest tuple shape taken. XLA's parser recurses per level and overflows its stack
# near 10,000, so nvshmem-opt refuses text nested deeper than 512 brackets; an
# instruction's array shape sits in its computation's braces and has its own '[', so
# 510 tuple levels make both tools draw the line at the same module.
MAX_SHAPE_DEPTH = 510
# Bracket nesting the scanner follows in a value before refusing the line: a hostile
# line of a million '{' fails at once instead of building a stack that deep.
MAX_NESTING = 1024
# Larger inputs are refused before reading (docs/reliability.md: ~8 bytes per byte).
MAX_INPUT_BYTES = DEFAULT_MAX_INPUT_BYTES

# Regexes, compiled once; possessive quantifiers (Python 3.11+) keep them linear.

_STR = r'"(?:[^"\\\n]++|\\.)*+"'


def _nested(open_: str, close: str, depth: int) -> str:
  """A regex for text balanced in open_/close (strings minded) up to `depth` levels."""
  inner = r"[^%s%s\"\n]++|%s" % (open_, close, _STR)
  pat = r"\%s(?:%s)*+\%s" % (open_, inner, close)
  for _ in range(depth):
    pat = r"\%s(?:%s|%s)*+\%s" % (open_, inner, pat, close)
  return pat


_NAME = r"[A-Za-z_][\w.\-]*"
_ARRAY_SHAPE = r"[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\})?"
_TUPLE_SHAPE = _nested("(", ")", 8)
# jaxlib 0.10 prints replica groups as `mesh['a'=8,'b'=1] {'a'}`, maybe with
# `, device_ids=([4,2]T(1,0))` before the braces: a space and a comma inside a value.
_MESH = r"mesh\[[^\]\n]*\](?:, device_ids=\((?:[^()\n]++|\([^()\n]*\))*+\))?[ \t]*\{[^{}\n]*\}"
_BARE = r"(?:[^\s,{}\"()\[\]]++|\[[^\[\]\n]*+\]|\([^()\n]*+\))++"
_VALUE = r"(?:%s|%s|%s|%s)" % (_nested("{", "}", 10), _STR, _MESH, _BARE)
_ATTR_RE = re.compile(r",[ \t]*(%s)=(%s)" % (_NAME, _VALUE))
# Groups: ROOT, name, shape, opcode, operands as `%a, %b` or else their text, attributes.
_INSTR_RE = re.compile(
  r"[ \t]*(ROOT[ \t]+)?%%?(%s):?[ \t]*=[ \t]*(%s|%s)[ \t]+([a-z][a-z0-9\-]*)"
  r"\((?:(%%[\w.\-]++(?:, %%[\w.\-]++)*+)|([^()\"]*+))\)"
  r"((?:[ \t]*,[ \t]*%s=%s)*+)[ \t]*\Z" % (_NAME, _ARRAY_SHAPE, _TUPLE_SHAPE, _NAME, _VALUE)
)
_HEAD_RE = re.compile(r"[ \t]*(ROOT[ \t]+)?(%%?)(%s)?:?[ \t]*(=?)[ \t]*" % _NAME)
# An operand may end in '#K' indices: a tuple element of the instruction named
# (XLA's compact get-tuple-element, which newer XLA prints: hlo_parser.cc:5706-5817
# at 183fa00c; jax 0.11.2's dumps carry it). The name keeps its '#K' suffixes.
_OPERAND_RE = re.compile(
  r"[ \t]*(?:(?:%s|\([^%%]*\))[ \t]*)?%%?(%s(?:#\d+)*)[ \t]*\Z" % (_ARRAY_SHAPE, _NAME)
)
_COMP_HEAD_RE = re.compile(
  r"[ \t]*(ENTRY[ \t]+)?%%?(%s)[ \t]*(\(.*\)[ \t]*->.*?)?[ \t]*\{[ \t]*\Z" % _NAME
)
_MODULE_RE = re.compile(r"[ \t]*HloModule[ \t]+([\w.\-]+):?(.*)\Z")
_CALL_RE = re.compile(r",[ \t]*(?:%s)=(\{[^{}\n]*\}|%%?[\w.\-]+)" % "|".join(sorted(_CALL_ATTRS)))
_TABLE_ROW_RE = re.compile(r"[ \t]*(\d+)[ \t]*(%s|\{[^{}\"]*\})[ \t]*\Z" % _STR)
_CLOSE_RE = re.compile(r"[ \t]*\}[ \t]*(,.*)?\Z")
_KV_RE = re.compile(r"([\w.\-]+)=\s*(" + _STR + r"|[^\s,\"]+)")
_STR_OR_COMMENT_RE = re.compile(r"%s|/\*.*?\*/" % _STR)
_WS_RE = re.compile(r"[ \t]*")
_WS_COMMENTS_RE = re.compile(r"(?:\s++|/\*.*?\*/)*+")
_SPECIAL_RE = re.compile(r'[(){}\[\]"]')
_STR_RE = re.compile(_STR)
_KEY_EQ_RE = re.compile(_NAME + "=")
_OPCODE_RE = re.compile(r"[a-z][a-z0-9\-]*")
_INT_RE = re.compile(r"-?\d+")
_PAIRS_RE = re.compile(r"\{\s*(?:\{\s*\d+\s*,\s*\d+\s*\}(?:\s*,\s*\{\s*\d+\s*,\s*\d+\s*\})*)?\s*\}")
_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^{}]*\})?")
_DIM_RE = re.compile(r"\s*(?:(\d+)|<=\s*(\d+)|(\?))\s*\Z")
_NOT_UTF8_RE = re.compile("[\udc80-\udcff]")
_ESCAPE_RE = re.compile(r"\\(.)", re.S)
_IOTA_RE = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH_RE = re.compile(
  r"mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\))?"
  r"\s*\{([^}]*)\}"
)


class Shape:
  """An array shape (element type, dims, layout text) or a tuple of shapes."""

  __slots__ = ("element_type", "dims", "dynamic", "layout", "tuple_shapes")

  def __init__(
    self,
    element_type: str | None = None,
    dims: Iterable[int] = (),
    layout: str | None = None,
    tuple_shapes: "tuple[Shape, ...] | None" = None,
    dynamic: tuple[bool, ...] | None = None,
  ) -> None:
    self.element_type = element_type  # None for tuples
    self.dims = tuple(dims)  # a `?` (unbounded) dim is -1; `<=N` is N, flagged in dynamic
    self.dynamic = dynamic  # None when all dims are static
    self.layout, self.tuple_shapes = layout, tuple_shapes  # "{1,0:S(1)}"

  @property
  def is_tuple(self) -> bool:
    return self.tuple_shapes is not None

  @property
  def memory_space(self) -> int:
    """The layout's S(n) memory space (0 = default device memory)."""
    m = re.search(r"S\((\d+)\)", self.layout or "")
    return int(m.group(1)) if m else 0

  @property
  def minor_to_major(self) -> tuple[int, ...] | None:
    if not self.layout or len(self.layout) < 2:
      return None
    body = self.layout[1:-1].split(":", 1)[0]
    return tuple(int(d) for d in body.split(",") if d.strip().lstrip("-").isdigit())

  def leaves(self) -> "Iterator[Shape]":
    """Array shapes in order, nested tuples flattened (no recursion: MAX_SHAPE_DEPTH)."""
    stack = [self]
    while stack:
      shape = stack.pop()
      if shape.tuple_shapes is None:
        yield shape
      else:
        stack.extend(reversed(shape.tuple_shapes))

  def num_elements(self) -> int:
    return math.prod(max(d, 0) for d in self.dims)

  def byte_size(self) -> int:
    if self.tuple_shapes is not None:
      return sum(s.byte_size() for s in self.leaves())
    return _ELEMENT_BYTES[str(self.element_type)] * self.num_elements()

  def to_string(self, layout: bool = True) -> str:
    if self.tuple_shapes is None:
      return self._array_string(layout)
    out: list[str] = []
    stack: list[Shape | str] = [self]  # shapes still to print, and the punctuation between
    while stack:
      item = stack.pop()
      if isinstance(item, str):
        out.append(item)
      elif item.tuple_shapes is None:
        out.append(item._array_string(layout))
      else:
        parts = [x for shape in item.tuple_shapes for x in (", ", shape)][1:]
        stack += [")"] + parts[::-1] + ["("]
    return "".join(out)

  def _array_string(self, layout: bool) -> str:
    dims = [
      "?" if d < 0 else f"<={d}" if self.dynamic and self.dynamic[i] else str(d)
      for i, d in enumerate(self.dims)
    ]
    text = f"{self.element_type}[{','.join(dims)}]"
    return text + (self.layout or "") if layout else text

  __str__ = to_string

  def __repr__(self) -> str:
    return f"Shape({self.to_string()!r})"

  def __eq__(self, other: object) -> bool:
    return isinstance(other, Shape) and self.to_string() == other.to_string()

  def __hash__(self) -> int:
    return hash(self.to_string())


class _ShapeError(ValueError):
  def __init__(self, message: str, offset: int) -> None:
    super().__init__(message)
    self.offset = offset  # where in the text


_SHAPE_CACHE: dict[str, Shape] = {}


def _end(rx: "re.Pattern[str]", text: str, i: int) -> int:
  """Where a pattern that matches the empty text too ends its match at text[i:]."""
  m = rx.match(text, i)
  return i if m is None else m.end()


def parse_shape(text: str) -> Shape:
  """Parses a shape's text; ValueError on bad syntax. Results are shared."""
  shape = _SHAPE_CACHE.get(text)
  if shape is None:
    shape, end = _parse_shape_at(text, _skip_ws(text, 0))
    end = _skip_ws(text, end)
    if end != len(text):
      raise _ShapeError(f"unexpected {text[end : end + 10]!r} after shape", end)
    if len(_SHAPE_CACHE) < 100000:
      _SHAPE_CACHE[text] = shape
  return shape


def _skip_ws(text: str, i: int) -> int:
  """Past white space and /* comments */ (XLA prints /*index=N*/ in tuple shapes)."""
  i = _end(_WS_COMMENTS_RE, text, i)
  if text.startswith("/*", i):
    raise _ShapeError("unterminated /* comment", i)
  return i


def _parse_shape_at(text: str, i: int) -> tuple[Shape, int]:
  """One shape at text[i:], without recursion (tuples may nest MAX_SHAPE_DEPTH deep)."""
  open_tuples: list[list[Shape]] = []  # elements read so far, one list per unclosed '('
  while True:
    i = _skip_ws(text, i)
    if text.startswith("(", i):
      if len(open_tuples) >= MAX_SHAPE_DEPTH:
        raise _ShapeError(f"tuple shape nests deeper than {MAX_SHAPE_DEPTH} levels", i)
      i = _skip_ws(text, i + 1)
      if not text.startswith(")", i):
        open_tuples.append([])
        continue
      shape, i = Shape(tuple_shapes=()), i + 1
    else:
      shape, i = _parse_array_shape_at(text, i)
    while open_tuples:  # attach the shape just read; close finished tuples
      open_tuples[-1].append(shape)
      i = _skip_ws(text, i)
      if text.startswith(",", i):
        i += 1
        break
      if not text.startswith(")", i):
        raise _ShapeError("expected ',' or ')' in tuple shape", i)
      shape, i = Shape(tuple_shapes=tuple(open_tuples.pop())), i + 1
    else:
      return shape, i


def _parse_array_shape_at(text: str, i: int) -> tuple[Shape, int]:
  m = _ARRAY_RE.match(text, i)
  if m is None:
    raise _ShapeError(f"unknown shape syntax {text[i : i + 20]!r}", i)
  etype, dims_text, layout = m.groups()
  if etype not in _ELEMENT_BYTES:
    raise _ShapeError(f"unknown element type {etype!r}", i)
  dims: list[int] = []
  dynamic: list[bool] = []
  for d in dims_text.split(",") if dims_text.strip() else ():
    dm = _DIM_RE.match(d)
    if dm is None:
      raise _ShapeError(f"bad dimension {d.strip()[:20]!r}", m.start(2))
    exact, bound, unbounded = dm.groups()
    dims.append(-1 if unbounded else int(exact or bound))
    dynamic.append(exact is None)
  if layout is not None and " " in layout:  # as XLA prints it: {1,0}, not {1, 0}
    layout = "".join(layout.split())
  return (Shape(etype, dims, layout, None, tuple(dynamic) if any(dynamic) else None), m.end())


def _unquote(text: str) -> str:
  """The value of a quoted HLO string (C escapes), or the text itself if not quoted."""
  if len(text) < 2 or text[0] != '"' or text[-1] != '"':
    return text
  body = text[1:-1]
  if "\\" not in body:
    return body
  body = _ESCAPE_RE.sub(  # an unknown escape is its character, as C compilers take it
    lambda m: m.group() if m.group(1) in "\\'\"abfnrtvx01234567" else m.group(1), body
  )
  try:  # C escapes (\n, \", \ooo, \xhh), as Python's bytes literals take them
    return codecs.escape_decode(body.encode("utf-8", "surrogateescape"))[0].decode(
      "utf-8", "replace"
    )
  except ValueError:  # `\x` without digits: keep the text
    return body


def _parse_kv(text: str) -> dict[str, str]:
  """`{a="x" b=1, c=2}` -> {'a': 'x', 'b': '1', 'c': '2'} (values unquoted)."""
  if text.startswith("{") and text.endswith("}"):
    text = text[1:-1]
  return {k: _unquote(v) for k, v in _KV_RE.findall(text)}


def _parse_name_list(text: str) -> list[str]:
  """`%a` or `{%a, %b}` -> ['a', 'b']."""
  text = text.strip()
  if text.startswith("{"):
    text = text[1:-1]
  return [n.strip().lstrip("%") for n in text.split(",") if n.strip()]


def _parse_int_lists(text: str) -> list[list[int]]:
  """`{{0,1},{1,0}}` -> [[0, 1], [1, 0]]."""
  return [[int(x) for x in _INT_RE.findall(g)] for g in re.findall(r"\{([^{}]*)\}", text)]


def _ints(text: str | None) -> list[int] | None:
  return [int(x) for x in text.split(",")] if text else None


def _iota_ids(dims: list[int] | None, perm: list[int] | None = None) -> list[int] | None:
  """The ids 0..N-1 laid out row-major in `dims`, transposed by `perm`, read row-major;
  None for a perm that is not one."""
  if dims is None:
    return None
  perm = perm or list(range(len(dims)))
  if sorted(perm) != list(range(len(dims))):
    return None
  strides = [1] * len(dims)
  for k in range(len(dims) - 2, -1, -1):
    strides[k] = strides[k + 1] * dims[k + 1]
  return [
    sum(idx[k] * strides[perm[k]] for k in range(len(perm)))
    for idx in itertools.product(*(range(dims[p]) for p in perm))
  ]


def _expand_iota(text: str) -> list[list[int]] | None:
  """Expands `[G,S]<=[d0,d1,...]T(perm)` replica groups; None if not in that form."""
  m = _IOTA_RE.fullmatch(re.sub(r"\s+", "", text))
  if m is None:
    return None
  ids = _iota_ids(_ints(m.group(2)), _ints(m.group(3)))
  if ids is None:
    return None
  size = (_ints(m.group(1)) or [0])[-1]  # the group matched digits: never the default
  return [ids[i : i + size] for i in range(0, len(ids) * (size > 0), size or 1)]


def expand_mesh_groups(text: str) -> list[list[int]] | None:
  """Expands jaxlib 0.10's `mesh['a'=8,'b'=1] {'a'}` replica groups; None if not that form.

  A group is every position of the mesh (row-major) that differs only along the chosen
  axes, in the chosen order; `device_ids=([4,2]T(1,0))` names the device at each position.
  """
  m = _MESH_RE.fullmatch(text.strip())
  if m is None:
    return None
  try:
    axes = {
      a.strip().strip("'"): int(n)
      for a, n in (x.split("=") for x in m.group(1).split(",") if x.strip())
    }
  except ValueError:  # not that form
    return None
  names = list(axes)
  chosen = [a.strip().strip("'") for a in m.group(4).split(",") if a.strip()]
  if any(c not in axes for c in chosen):
    return None
  order = _iota_ids(
    list(axes.values()),
    [names.index(n) for n in names if n not in chosen] + [names.index(c) for c in chosen],
  )
  if order is None:
    return None
  ids: Sequence[int] | None = (
    _iota_ids(_ints(m.group(2)), _ints(m.group(3))) if m.group(2) else range(len(order))
  )
  if ids is None or len(ids) != len(order):
    return None
  size = math.prod(axes[c] for c in chosen)
  return [[ids[p] for p in order[i : i + size]] for i in range(0, len(order), max(size, 1))]


def _split_attributes(text: str) -> dict[str, str]:
  """`, key=value, ...` (checked when read) -> {key: raw value}, by the regex the reader
  matched, else by the scanner that took it."""
  attrs: dict[str, str] = {}
  pos, end = 0, len(text)
  while True:
    pos = _end(_WS_RE, text, pos)
    if pos >= end:
      return attrs
    m = _ATTR_RE.match(text, pos)
    if m is None:
      return _Scanner(None, text, 0, 0).attributes()
    attrs[m.group(1)] = m.group(2)
    pos = m.end()


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
      attrs = self._attributes = _split_attributes(attrs) if attrs else {}
    return attrs

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
      _CALL_RE.findall(attrs)
      if isinstance(attrs, str)
      else [raw for key, raw in attrs.items() if key in _CALL_ATTRS]
    )
    return [n for raw in raws for n in _parse_name_list(raw)]

  def _read(self, key: str, read: "Callable[[str], _T]") -> "_T | None":
    """Attribute `key` read by `read`, or None when absent."""
    raw = self.attributes.get(key)
    return None if raw is None else read(raw)

  @property
  def async_execution_thread(self) -> str | None:
    return self._read("async_execution_thread", _unquote)

  @property
  def source_target_pairs(self) -> list[tuple[int, ...]] | None:
    return self._read("source_target_pairs", lambda raw: [tuple(p) for p in _parse_int_lists(raw)])

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
    return self._read("frontend_attributes", _parse_kv) or {}

  @property
  def metadata(self) -> dict[str, str]:
    return self._read("metadata", _parse_kv) or {}

  @property
  def control_predecessors(self) -> list[str]:
    return self._read("control-predecessors", _parse_name_list) or []

  @property
  def replica_groups(self) -> list[list[int]] | None:
    """List of groups; the iota (`[2,4]<=[8]`) and mesh forms are expanded."""
    raw = self.attributes.get("replica_groups")
    if raw is None:
      return None
    if raw.startswith("{"):
      return _parse_int_lists(raw) if raw.strip("{} ") else []
    if raw.startswith("mesh["):
      return expand_mesh_groups(raw)
    return _expand_iota(raw)

  def backend_config_json(self) -> Any:
    """backend_config parsed as JSON (also when printed as a quoted string), else None."""
    raw = self.attributes.get("backend_config")
    if raw is None:
      return None
    try:
      return json.loads(_unquote(raw) if raw.startswith('"') else raw)
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
    return _parse_kv(self.attributes.get("frontend_attributes", ""))

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


def load_hlo_proto(path: "str | os.PathLike[str]") -> HloModule:
  """Loads a serialized HloModuleProto through jaxlib (which prints it) and parses it."""
  try:
    from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise RuntimeError(f"load_hlo_proto needs jaxlib, which is not importable: {e}") from e
  with open(path, "rb") as f:
    data = f.read()
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
  return _STR_OR_COMMENT_RE.sub(
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
    if not text.isascii() and _NOT_UTF8_RE.search(text):
      for i, line in enumerate(self.lines):
        bad = _NOT_UTF8_RE.search(line) and _NOT_UTF8_RE.search(self.line(i))
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
      if "/*" in line and "/*" in _STR_RE.sub("", line):
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
    m = _MODULE_RE.match(head)
    if m is None:
      self.error(i, 1, "expected 'HloModule NAME' header; this is not HLO text")
    attrs = _Scanner(self, m.group(2), i, m.start(2)).attributes()
    for key in ("num_partitions", "replica_count", "num_replicas"):
      if key in attrs and not _INT_RE.fullmatch(attrs[key]):
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
      m = _TABLE_ROW_RE.match(lines[i])
      if m is None:
        break
      raw.append(lines[i])
      number, value = m.groups()
      parsed[int(number)] = (
        _unquote(value)
        if value.startswith('"')
        else {
          k: (int(v) if v.lstrip("-").isdigit() else _unquote(v))
          for k, v in _parse_kv(value).items()
        }
      )
      i += 1
    module.tables[name] = raw
    return i

  def _computation_head(self, module: HloModule, i: int) -> HloComputation:
    head = self.line(i)
    m = _COMP_HEAD_RE.match(head)
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
    match, shapes, lines, opcodes = _INSTR_RE.match, _SHAPE_CACHE, self.lines, OPCODES
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
    close = _CLOSE_RE.match(line)
    if close is None:
      self.error(i, line.index("}") + 2, "unexpected text after '}'")
    thread = (
      _Scanner(self, close.group(1) or "", i, close.start(1)).attributes().get("execution_thread")
    )
    comp.execution_thread = _unquote(thread) if thread else None
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
      m = _OPERAND_RE.match(part)
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
    if raw is not None and not _INT_RE.fullmatch(raw):
      self._attr_error(
        i, line, "channel_id", f"attribute 'channel_id' needs an integer, got {raw[:40]!r}"
      )
    raw = attrs.get("source_target_pairs")
    if instr.opcode not in _PERMUTE_OPCODES or raw in _GOOD_PAIRS:
      return
    if raw is None or not _PAIRS_RE.fullmatch(raw):
      self._attr_error(
        i,
        line,
        "source_target_pairs",
        f"%{instr.name} needs source_target_pairs={{{{{{{{source,target}}}},...}}}}",
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
    for m in _CALL_RE.finditer(text):
      for callee in _parse_name_list(m.group(1)):
        if callee not in names:
          at = m.start(1)
          line_start = text.rfind("\n", 0, at) + 1
          self.error(
            text.count("\n", 0, at), at - line_start + 1, f"call of undefined computation %{callee}"
          )

  def _shape(self, text: str, i: int, col0: int) -> Shape:
    try:
      return parse_shape(text)
    except _ShapeError as e:
      self.error(i, col0 + e.offset + 1, str(e))

  def _slow_instruction(self, line: str, i: int) -> tuple[str | None, str, str, str, str, str, int]:
    """A line the regex did not take: read exactly, or refused at the offending column."""
    m = _HEAD_RE.match(line)
    if m is None:  # every part of the pattern is optional: it always matches
      self.error(i, 1, "expected an instruction name or '}'")
    root, name, sc = m.group(1), m.group(3), _Scanner(self, line, i, 0)
    if name is None or not m.group(4):
      self.error(
        i,
        m.end() + 1,
        f"expected '=' after instruction name %{name}"
        if name
        else "expected an instruction name or '}'",
      )
    try:
      sc.i = _parse_shape_at(line, m.end())[1]
    except _ShapeError as e:
      self.error(i, e.offset + 1, str(e))
    shape_text = line[m.end() : sc.i]
    sc.ws()
    opcode = sc.regex(_OPCODE_RE, "expected an opcode")
    if not is_known_opcode(opcode):
      sc.fail(f"unknown opcode {opcode!r}", sc.i - len(opcode))
    sc.ws()
    if not line.startswith("(", sc.i):
      sc.fail(f"expected '(' after opcode {opcode!r}")
    start = sc.i + 1
    sc.balanced()
    _Scanner(self, line[sc.i :], i, sc.i).attributes()  # refuses bad text at its column
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


class _Scanner:
  """Exact scanner over one line: the slow path, and where errors get their column."""

  def __init__(self, reader: _Reader | None, s: str, lineno: int, col0: int) -> None:
    self.reader, self.s, self.lineno, self.col0, self.i = reader, s, lineno, col0, 0

  def fail(self, message: str, at: int | None = None) -> NoReturn:
    # No reader: splitting text the reader took, which cannot fail.
    assert self.reader is not None, message
    self.reader.error(self.lineno, self.col0 + (self.i if at is None else at) + 1, message)

  def ws(self) -> None:
    self.i = _end(_WS_RE, self.s, self.i)

  def expect(self, ch: str, message: str | None = None) -> None:
    if not self.s.startswith(ch, self.i):
      got = self.s[self.i : self.i + 12] or "end of line"
      self.fail(message or f"expected {ch!r}, got {got!r}")
    self.i += len(ch)

  def regex(self, rx: "re.Pattern[str]", message: str) -> str:
    m = rx.match(self.s, self.i)
    if m is None:
      self.fail(message)
    self.i = m.end()
    return m.group(0)

  def attributes(self) -> dict[str, str]:
    """`, key=value, ...` up to the end of the text."""
    attrs: dict[str, str] = {}
    while True:
      self.ws()
      if self.i >= len(self.s):
        return attrs
      self.expect(",")
      self.ws()
      key = self.regex(_KEY_EQ_RE, "expected an attribute, `name=value`")[:-1]
      self.ws()
      attrs[key] = self.value()

  def balanced(self) -> None:
    """Skips the string or bracketed group at self.i, minding strings (any closer closes
    a bracket)."""
    s, depth, j = self.s, 0, self.i
    while True:
      m = _SPECIAL_RE.search(s, j)
      if m is None:
        self.fail(
          f"unbalanced {s[self.i]!r}: no matching {_CLOSERS[s[self.i]]!r} on this "
          "line (the reader takes one statement a line, as XLA prints it)",
          self.i,
        )
      ch, j = m.group(), m.end()
      if ch == '"':
        sm = _STR_RE.match(s, m.start())
        if sm is None:
          self.fail("unterminated string", m.start())
        j = sm.end()
        if not depth:  # the value was the string
          self.i = j
          return
      elif ch in _CLOSERS:
        depth += 1
        if depth > MAX_NESTING:
          self.fail(f"brackets nest deeper than {MAX_NESTING} levels", m.start())
      else:
        depth -= 1
        if not depth:
          self.i = j
          return

  def value(self) -> str:
    """One attribute value: a string, a bracketed group, or a bare word with bracketed
    parts (`[2,4]<=[4,2]T(1,0)`, jaxlib 0.10's `mesh['a'=8] {'a'}`)."""
    s, start = self.s, self.i
    if s.startswith(('"', "{"), start):
      self.balanced()
    else:
      while self.i < len(s) and s[self.i] not in ',)]}{" \t':
        if s[self.i] in "([":
          self.balanced()
        else:
          self.i += 1
      if self.i == start:
        self.fail("expected an attribute value")
      if s.startswith("mesh[", start) and s[self.i - 1] == "]":
        if s.startswith(", device_ids=(", self.i):
          self.i += len(", device_ids=")
          self.balanced()
        after = _end(_WS_RE, s, self.i)
        if s.startswith("{", after):
          self.i = after
          self.balanced()
    return s[start : self.i]
