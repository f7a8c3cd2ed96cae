"""hlo_tools.hlo.ir: HloModule, HloComputation and HloInstruction, the parsed module:
attributes split on first use, the typed views of attribute values, and back
references that never keep a dropped module alive."""

import gc
import weakref

import pytest

from hlo_tools.hlo.reader import parse_hlo_file, parse_hlo_text

from conftest import FIXTURES as FIXTURES_DIR, SHARED_DATA

H200_HLO = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"


def test_attributes_are_split_on_first_use():
  module = parse_hlo_file(H200_HLO)
  body = module.computation("region_0.1")
  fusion, loop = body.instruction("loop_add_fusion"), module.entry.instruction("while.5")
  assert isinstance(fusion._attributes, str) and isinstance(loop._attributes, str)
  # A permute's pairs and channel id are checked as it is read.
  assert isinstance(body.instruction("collective-permute-start")._attributes, dict)
  assert loop.called_computations == ["region_1.2", "region_0.1"]  # read off the text
  assert isinstance(loop._attributes, str)
  assert fusion.attributes["kind"] == "kLoop" and isinstance(fusion._attributes, dict)
  assert loop.attributes["body"] == "%region_0.1"
  assert loop.called_computations == ["region_1.2", "region_0.1"]  # and off the dict


def test_attributes_match_as_text_then_as_dicts():
  text = H200_HLO.read_text()
  a, b = parse_hlo_text(text), parse_hlo_text(text.replace("kind=kLoop", "kind=kInput", 1))
  comp_a, comp_b = a.computation("region_0.1"), b.computation("region_0.1")
  fusion_a, fusion_b = comp_a.instruction("loop_add_fusion"), comp_b.instruction("loop_add_fusion")
  assert not fusion_a.attributes_match(fusion_b)  # texts unsplit, and different
  twin = parse_hlo_text(text).computation("region_0.1").instruction("loop_add_fusion")
  assert fusion_a.attributes_match(twin)
  assert fusion_b.attributes["kind"] == "kInput"  # one side split: compared as dicts
  assert not fusion_b.attributes_match(fusion_a) and not fusion_a.attributes_match(fusion_b)
  assert twin.attributes and fusion_a.attributes_match(twin)


def test_dropped_module_is_freed_without_the_collector():
  # No reference cycles (instructions and computations point up through weak
  # references): a module goes when its last reference does, not at a collection.
  gc.collect()
  gc.disable()
  try:
    module = parse_hlo_file(FIXTURES_DIR / "ring_bwd_1x2x4.before_async.hlo")
    ref, entry = weakref.ref(module), weakref.ref(module.entry)
    assert module.entry.root.computation is module.entry
    assert module.entry.module is module
    del module
    assert ref() is None and entry() is None
  finally:
    gc.enable()


SMALL = r"""HloModule m, is_scheduled=true, replica_count=2, num_partitions=4, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p1 = f32[8]{0} parameter(1)
  %p0 = f32[8]{0} parameter(0), frontend_attributes={_xla_mark="x"}
  %c = f32[] constant(1.5)
  %ar = f32[8]{0} all-reduce(%p0), channel_id=3, replica_groups={{0,1},{2,3}}, to_apply=%add, backend_config="{\"k\":[1,2]}"
  %ag = f32[8]{0} all-reduce(%p1), replica_groups=[2,2]<=[4], to_apply=%add, backend_config={not json}
  %none = f32[8]{0} all-reduce(%p1), replica_groups={}, to_apply=%add
  ROOT %r = f32[8]{0} add(%ar, %ag), control-predecessors={%c}
}
"""


@pytest.fixture
def small():
  return parse_hlo_text(SMALL)


def test_module_header_properties(small):
  assert small.name == "m" and small.is_scheduled
  assert small.num_replicas == 2 and small.num_partitions == 4
  assert small.entry_computation_layout == "(f32[8]{0}, f32[8]{0})->f32[8]{0}"
  assert small.frontend_attributes == {}
  plain = parse_hlo_text("HloModule p\nENTRY %e {\n  ROOT %c = f32[] constant(0)\n}\n")
  assert (plain.num_replicas, plain.num_partitions, plain.is_scheduled) == (1, 1, False)
  assert plain.entry_computation_layout is None


def test_module_and_computation_lookups(small):
  main = small.entry
  assert main.name == "main" and small.computation("%main") is main
  assert "main" in small and "%add" in small and "nope" not in small
  assert "%ar" in main and "s" not in main  # `s` is add's, not main's
  assert [i.name for i in small.instructions()] == [
    "a",
    "b",
    "s",
    "p1",
    "p0",
    "c",
    "ar",
    "ag",
    "none",
    "r",
  ]
  assert small.instruction_count == 10 and list(main) == main.instructions
  # By parameter number, not by the order printed.
  assert [p.name for p in main.parameters] == ["p0", "p1"]
  assert [p.parameter_number for p in main.parameters] == [0, 1]


def test_instruction_values(small):
  main = small.entry
  c, ar, ag, r = (main.instruction(n) for n in ("c", "ar", "ag", "r"))
  assert c.literal == "1.5" and c.parameter_number is None and ar.literal is None
  assert ar.channel_id == 3 and ag.channel_id is None
  assert ar.replica_groups == [[0, 1], [2, 3]]
  assert ag.replica_groups_text == "[2,2]<=[4]" and ag.replica_groups == [[0, 1], [2, 3]]
  assert main.instruction("none").replica_groups == [] and r.replica_groups is None
  assert ar.called_computations == ["add"] and r.called_computations == []
  assert main.instruction("p0").frontend_attributes == {"_xla_mark": "x"}
  assert r.frontend_attributes == {} and r.metadata == {}
  assert r.control_predecessors == ["c"] and ar.control_predecessors == []


def test_backend_config_json_in_each_printed_form(small):
  main = small.entry
  assert main.instruction("ar").backend_config == '"{\\"k\\":[1,2]}"'
  assert main.instruction("ar").backend_config_json() == {"k": [1, 2]}  # a quoted string
  assert main.instruction("ag").backend_config_json() is None  # not JSON
  assert main.instruction("r").backend_config_json() is None  # none
  deep = parse_hlo_text(
    "HloModule d\nENTRY %e {\n  ROOT %c = f32[] constant(0), backend_config="
    + "[" * 1020
    + "]" * 1020
    + "\n}\n"
  )
  assert deep.entry.root.backend_config_json() is None  # too deep for json: no config


def test_operands_are_a_new_list_each_time(small):
  r = small.entry.root
  ops = r.operands
  assert ops == ["ar", "ag"]
  ops.append("x")
  assert r.operands == ["ar", "ag"]
  assert r.operand_instructions() == [small.entry.instruction("ar"), small.entry.instruction("ag")]


def test_a_kept_instruction_of_a_dropped_module_says_so():
  module = parse_hlo_text(SMALL)
  root = module.entry.root
  del module
  gc.collect()
  with pytest.raises(ReferenceError, match="keep the HloModule"):
    root.computation  # noqa: B018
