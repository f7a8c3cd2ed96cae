"""hlo_tools.hlo.shape: the shape parser (layouts, tuples, dynamic dimensions, XLA's
limits) and Shape's sizes and printed forms."""

import pytest

from hlo_tools.errors import ShapeError
from hlo_tools.hlo.shape import MAX_SHAPE_DEPTH, Shape, parse_shape, parse_shape_at


def test_shapes_parse_layouts_tuples_and_byte_sizes():
  s = parse_shape("f32[8,128]{1,0:T(8,128)S(1)}")
  assert s.dims == (8, 128) and s.memory_space == 1 and s.minor_to_major == (1, 0)
  assert s.byte_size() == 4096
  t = parse_shape("((bf16[2]{0}, (s32[], token[])), /*index=1*/c128[3], pred[<=4])")
  assert [str(x) for x in t.leaves()] == ["bf16[2]{0}", "s32[]", "token[]", "c128[3]", "pred[<=4]"]
  assert t.byte_size() == 4 + 4 + 0 + 48 + 4
  for bad in ("f33[2]", "f32[2", "(f32[], f32[]", "f32[a]"):
    with pytest.raises(ValueError):
      parse_shape(bad)


def test_shape_prints_the_same_once_kept():
  shape = parse_shape("(f32[4,<=8]{1,0}, s32[])")
  assert shape.to_string(False) == "(f32[4,<=8], s32[])"
  assert shape.to_string() == "(f32[4,<=8]{1,0}, s32[])"
  assert shape.to_string(False) == "(f32[4,<=8], s32[])" and str(shape) == shape.to_string()


def test_byte_sizes_follow_xla_element_widths():
  # bf16 is 2 bytes: a 1024x1024 block is 2 MiB.
  assert parse_shape("bf16[1024,1024]{1,0}").byte_size() == 2 << 20
  assert parse_shape("c64[3]").byte_size() == 24 and parse_shape("f64[]").byte_size() == 8
  # Sub-byte types take a byte each (stored unpacked); a token has no bytes.
  assert parse_shape("s4[10]").byte_size() == 10 and parse_shape("token[]").byte_size() == 0
  assert parse_shape("f8e4m3fn[16]").byte_size() == 16
  assert parse_shape("(f32[2], (s8[3], u16[4]))").byte_size() == 8 + 3 + 8
  assert parse_shape("f32[]").num_elements() == 1


def test_dynamic_dimensions_keep_their_bounds():
  s = parse_shape("f32[<=8,?,3]")
  assert s.dims == (8, -1, 3) and s.dynamic == (True, True, False)
  assert str(s) == "f32[<=8,?,3]"
  assert s.num_elements() == 0  # an unbounded dimension counts no elements
  assert parse_shape("f32[8]").dynamic is None


def test_layouts_memory_space_and_minor_to_major():
  s = parse_shape("f32[2,3]{1, 0}")  # XLA prints no space: taken, and printed without
  assert s.layout == "{1,0}" and s.minor_to_major == (1, 0) and s.memory_space == 0
  assert str(s) == "f32[2,3]{1,0}"
  assert parse_shape("f32[2,3]{0,1:S(5)}").memory_space == 5
  assert parse_shape("f32[2,3]").minor_to_major is None


def test_equal_texts_give_equal_shapes():
  assert parse_shape("f32[2]{0}") == Shape("f32", [2], "{0}")
  assert hash(parse_shape("f32[2]{0}")) == hash(Shape("f32", (2,), "{0}"))
  assert parse_shape("f32[2]{0}") != parse_shape("f32[2]")
  assert parse_shape("()").is_tuple and parse_shape("()").tuple_shapes == ()
  assert list(parse_shape("()").leaves()) == []


def test_parse_shape_at_stops_after_the_shape():
  line = "  %p = (f32[2], s32[]) parameter(0)"
  shape, end = parse_shape_at(line, 7)
  assert str(shape) == "(f32[2], s32[])" and line[end:] == " parameter(0)"


@pytest.mark.parametrize(
  "text, message, offset",
  [
    ("f32[9223372036854775808]", "does not fit in 64 bits", 4),
    # 4 bytes x 2^62 elements = 2^64 bytes: past what XLA's verifier takes.
    ("f32[4611686018427387904]", "past 64 bits", 0),
    ("f32[2] junk", "unexpected 'junk' after shape", 7),
    ("(f32[], /* x", "unterminated /* comment", 8),
    ("(f32[] s32[])", "expected ',' or ')' in tuple shape", 7),
    ("q32[2]", "unknown element type 'q32'", 0),
    ("f32[2,x]", "bad dimension 'x'", 4),
  ],
)
def test_bad_shapes_say_what_and_where(text, message, offset):
  with pytest.raises(ShapeError) as info:
    parse_shape(text)
  assert message in str(info.value) and info.value.offset == offset


def test_tuple_nesting_stops_at_the_limit():
  def nested(depth):
    return "(" * depth + "f32[]" + ")" * depth

  deep = parse_shape(nested(MAX_SHAPE_DEPTH))
  assert [str(s) for s in deep.leaves()] == ["f32[]"]
  assert str(deep) == nested(MAX_SHAPE_DEPTH)  # printed without recursion too
  with pytest.raises(ShapeError, match=f"nests deeper than {MAX_SHAPE_DEPTH} levels"):
    parse_shape(nested(MAX_SHAPE_DEPTH + 1))
