"""Shapes: the Shape class, the shape parser, and bytes per element type."""

import math
import re
from collections.abc import Iterable, Iterator

from hlo_tools.errors import ShapeError
from hlo_tools.hlo.grammar import ARRAY_RE, DIM_RE, WS_COMMENTS_RE, match_end

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
# Deepest tuple shape taken. XLA's parser recurses per level and overflows its stack
# near 10,000, so nvshmem-opt refuses text nested deeper than 512 brackets; an
# instruction's array shape sits in its computation's braces and has its own '[', so
# 510 tuple levels make both tools draw the line at the same module.
MAX_SHAPE_DEPTH = 510
# A shape XLA cannot load: a dimension its lexer cannot read as an int64
# (xla/hlo/parser/hlo_lexer.cc:498-545 at 3cc8846c), or an array whose byte size
# overflows int64, which its verifier refuses (xla/shape_util.cc:1054-1068).
_INT64_MAX = (1 << 63) - 1


class Shape:
  """An array shape (element type, dims, layout text) or a tuple of shapes."""

  # Never changed once made (the parser shares one Shape per text), so its two
  # printed forms are kept once asked for: the diff prints every instruction's shape.
  __slots__ = ("element_type", "dims", "dynamic", "layout", "tuple_shapes", "_text", "_bare")

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
    self._text: str | None = None  # to_string(True), once asked for
    self._bare: str | None = None  # to_string(False)

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
    text = self._text if layout else self._bare
    if text is None:
      text = self._print(layout)
      if layout:
        self._text = text
      else:
        self._bare = text
    return text

  def _print(self, layout: bool) -> str:
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


SHAPE_CACHE: dict[str, Shape] = {}


def parse_shape(text: str) -> Shape:
  """Parses a shape's text; ValueError on bad syntax. Results are shared."""
  shape = SHAPE_CACHE.get(text)
  if shape is None:
    shape, end = parse_shape_at(text, _skip_ws(text, 0))
    end = _skip_ws(text, end)
    if end != len(text):
      raise ShapeError(f"unexpected {text[end : end + 10]!r} after shape", end)
    if len(SHAPE_CACHE) < 100000:
      SHAPE_CACHE[text] = shape
  return shape


def _skip_ws(text: str, i: int) -> int:
  """Past white space and /* comments */ (XLA prints /*index=N*/ in tuple shapes)."""
  i = match_end(WS_COMMENTS_RE, text, i)
  if text.startswith("/*", i):
    raise ShapeError("unterminated /* comment", i)
  return i


def parse_shape_at(text: str, i: int) -> tuple[Shape, int]:
  """One shape at text[i:], without recursion (tuples may nest MAX_SHAPE_DEPTH deep)."""
  open_tuples: list[list[Shape]] = []  # elements read so far, one list per unclosed '('
  while True:
    i = _skip_ws(text, i)
    if text.startswith("(", i):
      if len(open_tuples) >= MAX_SHAPE_DEPTH:
        raise ShapeError(f"tuple shape nests deeper than {MAX_SHAPE_DEPTH} levels", i)
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
        raise ShapeError("expected ',' or ')' in tuple shape", i)
      shape, i = Shape(tuple_shapes=tuple(open_tuples.pop())), i + 1
    else:
      return shape, i


def _parse_array_shape_at(text: str, i: int) -> tuple[Shape, int]:
  m = ARRAY_RE.match(text, i)
  if m is None:
    raise ShapeError(f"unknown shape syntax {text[i : i + 20]!r}", i)
  etype, dims_text, layout = m.groups()
  if etype not in _ELEMENT_BYTES:
    raise ShapeError(f"unknown element type {etype!r}", i)
  dims: list[int] = []
  dynamic: list[bool] = []
  for d in dims_text.split(",") if dims_text.strip() else ():
    dm = DIM_RE.match(d)
    if dm is None:
      raise ShapeError(f"bad dimension {d.strip()[:20]!r}", m.start(2))
    exact, bound, unbounded = dm.groups()
    dims.append(-1 if unbounded else int(exact or bound))
    dynamic.append(exact is None)
    if dims[-1] > _INT64_MAX:  # XLA's lexer: "expects integer" (hlo_lexer.cc LexInt64Impl)
      raise ShapeError(f"dimension {dims[-1]} does not fit in 64 bits", m.start(2))
  size = _ELEMENT_BYTES[etype]
  for d in dims:
    size *= max(d, 1)
  if size > _INT64_MAX:  # XLA's verifier: ShapeUtil::ValidateShapeSize
    raise ShapeError(f"{etype}[{dims_text.strip()}] is {size} bytes, past 64 bits", i)
  if layout is not None and " " in layout:  # as XLA prints it: {1,0}, not {1, 0}
    layout = "".join(layout.split())
  return (Shape(etype, dims, layout, None, tuple(dynamic) if any(dynamic) else None), m.end())
