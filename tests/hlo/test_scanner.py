"""hlo_tools.hlo.scanner: the exact one-line scanner, the reader's slow path: the values
it takes whole, and the column of each error it gives."""

import re

import pytest

from hlo_tools.hlo.scanner import MAX_NESTING, Scanner


class _Refused(Exception):
  pass


class _Reader:
  """Stands in for the reader: records where the scanner refused the line."""

  def error(self, lineno, col, message):
    raise _Refused(lineno, col, message)


def _refusal(text, col0=0):
  with pytest.raises(_Refused) as info:
    Scanner(_Reader(), text, 4, col0).attributes()
  return info.value.args


def test_attributes_are_split_at_top_level_commas():
  text = ', a=1, b={x, {y}}, c="s,t}", d=[2,4]<=[4,2]T(1,0),e=%f'
  assert Scanner(None, text, 0, 0).attributes() == {
    "a": "1",
    "b": "{x, {y}}",
    "c": '"s,t}"',
    "d": "[2,4]<=[4,2]T(1,0)",
    "e": "%f",
  }
  assert Scanner(None, "", 0, 0).attributes() == {}
  assert Scanner(None, " \t", 0, 0).attributes() == {}


@pytest.mark.parametrize(
  "text, value",
  [
    ("[2,4]<=[4,2]T(1,0), x=1", "[2,4]<=[4,2]T(1,0)"),
    ("{a, {b}} , x=1", "{a, {b}}"),
    ('"a\\"b}" x', '"a\\"b}"'),
    # jaxlib 0.10's mesh groups: a comma and a space inside the one value.
    (
      "mesh['a'=1,'b'=2,'c'=4], device_ids=([4,2]T(1,0)) {'b'}, y=2",
      "mesh['a'=1,'b'=2,'c'=4], device_ids=([4,2]T(1,0)) {'b'}",
    ),
    ("mesh['a'=8] {'a'}, y=2", "mesh['a'=8] {'a'}"),
    ("kLoop)", "kLoop"),
  ],
)
def test_value_takes_one_whole_value(text, value):
  scanner = Scanner(None, text, 0, 0)
  assert scanner.value() == value
  assert scanner.i == len(value)


@pytest.mark.parametrize(
  "text, col, message",
  [
    (", a={1, 2", 5, "unbalanced '{': no matching '}' on this line"),
    (", a=[1,2", 5, "unbalanced '[': no matching ']' on this line"),
    (', a="x', 5, "unterminated string"),
    (", a=1 b=2", 7, "expected ',', got 'b=2'"),
    (", =1", 3, "expected an attribute, `name=value`"),
    (", a=,", 5, "expected an attribute value"),
    ("a=1", 1, "expected ',', got 'a=1'"),
  ],
)
def test_errors_name_the_column_of_the_offending_text(text, col, message):
  lineno, got_col, got = _refusal(text)
  assert lineno == 4 and got_col == col and got.startswith(message), got


def test_columns_count_from_where_the_text_sits_on_its_line():
  assert _refusal(', a="x', col0=30)[1] == 35


def test_nesting_is_refused_past_the_limit_at_the_bracket():
  # 4 characters before the value; the (MAX_NESTING + 1)th '{' is the one refused.
  lineno, col, message = _refusal(", a=" + "{" * (MAX_NESTING + 1) + "}" * (MAX_NESTING + 1))
  assert col == 4 + MAX_NESTING + 1
  assert message == f"brackets nest deeper than {MAX_NESTING} levels"
  deep = "{" * MAX_NESTING + "}" * MAX_NESTING
  assert Scanner(None, ", a=" + deep, 0, 0).attributes() == {"a": deep}


def test_expect_and_regex_move_past_what_they_match():
  scanner = Scanner(_Reader(), "  (x", 0, 0)
  scanner.ws()
  assert scanner.i == 2
  scanner.expect("(")
  assert scanner.regex(re.compile("x"), "expected x") == "x" and scanner.i == 4
  with pytest.raises(_Refused) as info:
    scanner.expect(")")
  assert info.value.args == (0, 5, "expected ')', got 'end of line'")
