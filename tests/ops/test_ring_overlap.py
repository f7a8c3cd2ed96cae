"""hlo_tools.ops.ring_overlap: the attention work a compiled module schedules between
each collective-permute's start and done."""

import json

from hlo_tools.ops import ring_overlap

from conftest import FIXTURES

# XLA's compile of a ring-attention step on 1x1x8: the ring's loop body %region_0.5_spmd
# (the body of %while.71) starts its permute at line 358, runs the blocked kernel's
# loop %while.69 at line 376 and ends the permute at line 386.
RING = FIXTURES / "ring_1x1x8.after_optimizations.hlo"

# A scheduled module by hand: in the loop body a permute around a cuDNN attention call,
# a conditional and a plain custom-call (not attention); in the entry a sync permute.
SCHEDULED = """HloModule m, is_scheduled=true

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %fmha = f32[8]{0} custom-call(%x), custom_call_target="__cudnn$fmhaSoftmax"
  %other = f32[8]{0} custom-call(%x), custom_call_target="my_kernel"
  %c = f32[8]{0} conditional(%i, %x, %x), branch_computations={%b0, %b1}
  %cpd = f32[8]{0} collective-permute-done(%cps)
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %t = (s32[], f32[8]{0}) tuple(%i, %cpd)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
  ROOT %sync = f32[8]{0} collective-permute(%a), channel_id=2, source_target_pairs={{0,1},{1,0}}
}
"""


def test_a_permute_around_attention_in_the_loop_body():
  assert ring_overlap.permute_windows(SCHEDULED) == [
    {
      "computation": "body",
      "start": "cps",
      "done": "cpd",
      "attention_between": 2,  # the cuDNN call and the conditional
      "in_loop_body": True,
      "synchronous": False,
    },
    {
      "computation": "main",
      "start": "sync",
      "done": "sync",
      "attention_between": 0,
      "in_loop_body": False,
      "synchronous": True,
    },
  ]


def test_the_compiled_ring_overlaps_its_blocked_kernel_loop():
  assert ring_overlap.permute_windows(RING.read_text()) == [
    {
      "computation": "region_0.5_spmd",
      "start": "collective-permute-start",
      "done": "collective-permute-done",
      "attention_between": 1,
      "in_loop_body": True,
      "synchronous": False,
    }
  ]


def test_a_module_without_permutes_has_no_windows():
  assert ring_overlap.permute_windows("HloModule m\n\nENTRY %e () -> f32[] {\n}\n") == []


def test_main_prints_one_json_line_a_permute(capsys, tmp_path):
  path = tmp_path / "m.txt"
  path.write_text(SCHEDULED)
  assert ring_overlap.main([str(path)]) == 0
  rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [(r["start"], r["attention_between"]) for r in rows] == [("cps", 2), ("sync", 0)]


def test_main_refuses_bad_arguments_and_input_in_one_line(capsys, tmp_path):
  assert ring_overlap.main([]) == 2
  assert capsys.readouterr().err.startswith("usage: python -m hlo_tools.ops.ring_overlap")
  assert ring_overlap.main([str(tmp_path / "none.txt")]) == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert "none.txt" in line and "cannot read" in line
  binary = tmp_path / "bin.txt"
  binary.write_bytes(b"\xff\xfe HloModule")
  assert ring_overlap.main([str(binary)]) == 2
  assert capsys.readouterr().err.startswith(f"{binary}: not UTF-8 text: ")
