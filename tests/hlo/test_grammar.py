"""hlo_tools.hlo.grammar: XLA's opcode names and the regexes that read HLO lines, on
lines of a real jax 0.11.2 dump (tests/fixtures/jax0112/)."""

import subprocess
import sys

from hlo_tools.hlo.grammar import (
  CALL_RE,
  COMP_HEAD_RE,
  INSTR_RE,
  IOTA_RE,
  KV_RE,
  MESH_RE,
  MODULE_RE,
  OPCODES,
  OPERAND_RE,
  PAIRS_RE,
  WS_RE,
  is_known_opcode,
  match_end,
)

from conftest import SHARED_DATA
from generated_hlo import _env

H200_LINES = (
  (SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo").read_text().split("\n")
)


def test_opcode_set_matches_jaxlib_enum():
  view = subprocess.run(
    [sys.executable, "-c", "from jaxlib import _hlo; print(len(_hlo.HloOpcode.__members__))"],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert view.returncode == 0
  assert len(OPCODES) == int(view.stdout)


def test_known_opcodes_include_the_async_sugar_of_each():
  for opcode in ("add", "collective-permute", "collective-permute-start", "get-tuple-element"):
    assert is_known_opcode(opcode), opcode
  # XLA prints an async wrapping of one op as `{op}-start/-update/-done`.
  for opcode in ("fusion-start", "custom-call-update", "all-to-all-done"):
    assert opcode not in OPCODES and is_known_opcode(opcode), opcode
  # A typo, a bare suffix, and the sugar of a word that is no opcode.
  for opcode in ("kopy", "start", "-done", "kopy-start", "Add"):
    assert not is_known_opcode(opcode), opcode


def test_instruction_regex_reads_a_real_line_into_its_parts():
  # Line 33: the permute start (tuple shape, one operand, attributes with braces).
  m = INSTR_RE.match(H200_LINES[32])
  root, name, shape, opcode, simple, other, rest = m.groups()
  assert root is None and name == "collective-permute-start"
  assert shape == "((bf16[1024,1024]{1,0}), bf16[1024,1024]{1,0})"
  assert opcode == "collective-permute-start"
  assert simple == "%get-tuple-element.5" and other is None
  assert rest.startswith(", channel_id=1, source_target_pairs={{0,0}}, metadata={")
  # Line 38: the root tuple of two operands.
  m = INSTR_RE.match(H200_LINES[37])
  assert m.group(1) == "ROOT " and m.group(2) == "tuple.3"
  assert m.group(5) == "%loop_add_fusion, %copy.5"
  # A constant's literal is not a `%name` list: it is the other operand group.
  m = INSTR_RE.match(H200_LINES[25])
  assert (m.group(4), m.group(5), m.group(6)) == ("constant", None, "1")
  # A statement cut in the middle of its attributes is not an instruction line.
  assert INSTR_RE.match(H200_LINES[32][:200]) is None


def test_module_and_computation_heads():
  m = MODULE_RE.match(H200_LINES[0])
  assert m.group(1) == "jit_ring" and m.group(2).startswith(", is_scheduled=true,")
  m = COMP_HEAD_RE.match(H200_LINES[52])
  assert m.group(1) == "ENTRY " and m.group(2) == "main.3"
  assert m.group(3) == "(x.1: bf16[1024,1024]) -> bf16[1024,1024]"
  m = COMP_HEAD_RE.match(H200_LINES[29])
  assert m.group(1) is None and m.group(2) == "region_0.1"
  assert COMP_HEAD_RE.match("%region_0.1 {") is not None  # no signature: older dumps
  assert COMP_HEAD_RE.match(H200_LINES[30]) is None  # an instruction line


def test_operand_regex_takes_shapes_and_compact_tuple_elements():
  assert OPERAND_RE.match("%p").group(1) == "p"
  assert OPERAND_RE.match(" f32[8]{0} %p.1").group(1) == "p.1"
  assert OPERAND_RE.match(" (f32[], s32[]) %t").group(1) == "t"
  # XLA's compact get-tuple-element: the name keeps its '#K' indices.
  assert OPERAND_RE.match(" %while.5#1#0").group(1) == "while.5#1#0"
  assert OPERAND_RE.match(" %a %b") is None


def test_call_attributes_and_key_values():
  # Line 59: while(%tuple), condition=%region_1.2, body=%region_0.1
  assert CALL_RE.findall(H200_LINES[58]) == ["%region_1.2", "%region_0.1"]
  assert CALL_RE.findall(", branch_computations={%a, %b}, index=1") == ["{%a, %b}"]
  assert CALL_RE.findall(', kind=kLoop, metadata={op_name="calls=%x"}') == []
  assert KV_RE.findall('op_name="a b" source_line=3') == [
    ("op_name", '"a b"'),
    ("source_line", "3"),
  ]


def test_pairs_iota_and_mesh_forms():
  assert PAIRS_RE.fullmatch("{{0,1},{1,0}}") and PAIRS_RE.fullmatch("{}")
  assert PAIRS_RE.fullmatch("{ {0, 1} , {1,2} }")
  for bad in ("{{0,1,2}}", "{{-1,0}}", "{{0,1}", "{0,1}"):
    assert not PAIRS_RE.fullmatch(bad), bad
  assert IOTA_RE.fullmatch("[2,4]<=[4,2]T(1,0)").groups() == ("2,4", "4,2", "1,0")
  assert IOTA_RE.fullmatch("[1,8]<=[8]").groups() == ("1,8", "8", None)
  m = MESH_RE.fullmatch("mesh['a'=1,'b'=2,'c'=4], device_ids=([4,2]T(1,0)) {'b'}")
  assert m.groups() == ("'a'=1,'b'=2,'c'=4", "4,2", "1,0", "'b'")


def test_match_end_is_the_end_of_an_empty_or_longer_match():
  assert match_end(WS_RE, "a  b", 1) == 3
  assert match_end(WS_RE, "ab", 1) == 1  # matches the empty text: stays
