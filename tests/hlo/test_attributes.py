"""hlo_tools.hlo.attributes: attribute values read from their text (quoted strings,
key=value and name lists, integer lists) and replica groups in their explicit, iota and
jaxlib 0.10 mesh forms, alone and as the reader hands them to instructions."""

import os
import subprocess
import sys

import pytest

from hlo_tools.hlo.attributes import (
  expand_iota,
  expand_mesh_groups,
  parse_int_lists,
  parse_kv,
  parse_name_list,
  split_attributes,
  unquote,
)
from hlo_tools.hlo.reader import parse_hlo_file, parse_hlo_text

from conftest import FIXTURES as FIXTURES_DIR, ROOT
from generated_hlo import _MESH_ALL_REDUCE


def _module(body, extra=""):
  return f"HloModule m\n\n{extra}ENTRY %e (p: f32[8]) -> f32[8] {{\n{body}\n}}\n"


def test_attribute_values_survive_quotes_braces_and_groups():
  text = _module(
    "  %p = f32[8]{0} parameter(0), sharding={devices=[8]<=[8]}\n"
    "  %cp = f32[8]{0} collective-permute(%p), channel_id=7, "
    'source_target_pairs={{0,1},{1,0}}, frontend_attributes={_xla_send="a,b}\\"c"}, '
    'metadata={op_name="x \\"q\\" {y}" source_line=3}, backend_config="{\\"a\\":1}"\n'
    "  %ag = f32[64]{0} all-gather(%cp), replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}\n"
    "  ROOT %r = f32[8]{0} copy(%p), control-predecessors={%cp, %ag}"
  )
  m = parse_hlo_text(text)
  cp = m.entry.instruction("cp")
  assert cp.channel_id == 7 and cp.source_target_pairs == [(0, 1), (1, 0)]
  assert cp.frontend_attributes == {"_xla_send": 'a,b}"c'}
  assert cp.metadata == {"op_name": 'x "q" {y}', "source_line": "3"}
  assert cp.backend_config_json() == {"a": 1}
  ag = m.entry.instruction("ag")
  assert ag.replica_groups_text == "[2,4]<=[4,2]T(1,0)"
  assert ag.replica_groups == [[0, 2, 4, 6], [1, 3, 5, 7]]
  assert m.entry.root.control_predecessors == ["cp", "ag"]
  assert m.entry.instruction("p").sharding == "{devices=[8]<=[8]}"


def test_reads_jax_010_mesh_replica_groups():
  """jaxlib 0.10 prints GSPMD all-reduce groups as `mesh['axis_0'=1,'axis_1'=8] {'axis_1'}`."""
  from hlo_tools.hlo import reader  # pylint: disable=import-outside-toplevel

  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  text = subprocess.run(
    [
      sys.executable,
      "-c",
      _MESH_ALL_REDUCE,
      str(ROOT / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt"),
    ],
    capture_output=True,
    text=True,
    env=env,
    check=True,
    timeout=300,
  ).stdout
  assert "replica_groups=mesh[" in text
  module = reader.parse_hlo_text(text, "mesh.hlo")
  reducers = [i for i in module.instructions() if i.opcode in ("all-reduce", "all-reduce-start")]
  assert reducers
  for instr in reducers:
    assert instr.replica_groups == [list(range(8))]
  assert expand_mesh_groups("mesh['a'=2,'b'=4] {'a'}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
  assert expand_mesh_groups("mesh['a'=2,'b'=4] {'b','a'}") == [[0, 4, 1, 5, 2, 6, 3, 7]]


def test_device_ids_mesh_groups_are_the_modules_explicit_tp_groups():
  # jaxlib 0.10.2 prints one all-reduce of the train step as
  # `mesh[...], device_ids=([4,2]T(1,0)) {'axis_1'}`; the module's other all-reduces over
  # the same (tp) axis are printed with explicit groups.
  for name, tp in (("train_step_1x1x8", 2), ("train_step_1x2x8", 8), ("train_step_1x4x4", 4)):
    module = parse_hlo_file(FIXTURES_DIR / f"{name}.after_optimizations.hlo")
    groups = {}
    for instr in module.instructions():
      if instr.replica_groups_text:
        groups.setdefault(instr.replica_groups_text.startswith("mesh"), []).append(
          instr.replica_groups
        )
    explicit = [g for g in groups[False] if len(g[0]) == tp and g[0][1] == 1]
    assert groups[True] and explicit
    assert all(g == explicit[0] for g in groups[True]), name
  assert expand_mesh_groups("mesh['a'=1,'b'=2,'c'=4], device_ids=([4,2]T(1,0)) {'b'}") == [
    [0, 1],
    [2, 3],
    [4, 5],
    [6, 7],
  ]


@pytest.mark.parametrize(
  "text, value",
  [
    ('"a\\nb"', "a\nb"),
    ('"x \\"q\\""', 'x "q"'),
    ('"\\101\\x42"', "AB"),  # C's octal and hex escapes
    ('"\\q"', "q"),  # an unknown escape is its character, as C compilers take it
    ('"\\x"', "\\x"),  # `\x` without digits: the text kept
    ('"caf\u00e9"', "caf\u00e9"),
    ("plain", "plain"),
    ('"', '"'),  # one quote is not a quoted string
  ],
)
def test_unquote_reads_c_escapes(text, value):
  assert unquote(text) == value


def test_key_value_and_name_lists():
  assert parse_kv('{a="x y" b=1, c=2}') == {"a": "x y", "b": "1", "c": "2"}
  assert parse_kv('op_name="jit(f)/add" source_line=3') == {
    "op_name": "jit(f)/add",
    "source_line": "3",
  }
  assert parse_kv("") == {}
  assert parse_name_list("%a") == ["a"]
  assert parse_name_list("{%a, %b.1}") == ["a", "b.1"]
  assert parse_name_list("{}") == []
  assert parse_int_lists("{{0,1},{1,0}}") == [[0, 1], [1, 0]]
  assert parse_int_lists("{{0, -1}, {2,3,4}}") == [[0, -1], [2, 3, 4]]


@pytest.mark.parametrize(
  "text, groups",
  [
    ("[4,2]<=[8]", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("[1,4]<=[4]", [[0, 1, 2, 3]]),
    # iota(4) as 2x2, transposed: [[0, 2], [1, 3]].
    ("[2,2]<=[2,2]T(1,0)", [[0, 2], [1, 3]]),
    # iota(8) as 2x2x2, axes reversed: element (k, j, i) is 4i + 2j + k.
    ("[2,4]<=[2,2,2]T(2,1,0)", [[0, 4, 2, 6], [1, 5, 3, 7]]),
    ("[2, 4] <= [8]", [[0, 1, 2, 3], [4, 5, 6, 7]]),  # spaces taken
  ],
)
def test_iota_replica_groups_expand_as_xla_lays_them_out(text, groups):
  assert expand_iota(text) == groups


def test_iota_that_is_not_one_is_none():
  assert expand_iota("[2,2]<=[2,2]T(0,0)") is None  # not a permutation
  assert expand_iota("{{0,1}}") is None
  assert expand_iota("mesh['a'=2] {'a'}") is None


def test_mesh_groups_gather_the_chosen_axes():
  # A 2x2 mesh, row-major: position (x, y) is device 2x + y.
  assert expand_mesh_groups("mesh['x'=2,'y'=2] {'y'}") == [[0, 1], [2, 3]]
  assert expand_mesh_groups("mesh['x'=2,'y'=2] {'x'}") == [[0, 2], [1, 3]]
  assert expand_mesh_groups("mesh['x'=2,'y'=2] {'x','y'}") == [[0, 1, 2, 3]]
  assert expand_mesh_groups("mesh['x'=2,'y'=2] {'z'}") is None  # no such axis
  assert expand_mesh_groups("mesh['x'=two] {'x'}") is None
  assert expand_mesh_groups("[2,4]<=[8]") is None


def test_split_attributes_keeps_each_raw_value():
  text = ", a=1, b={x, y}, c=\"s,t}\", replica_groups=mesh['a'=8] {'a'}, to_apply=%add"
  assert split_attributes(text) == {
    "a": "1",
    "b": "{x, y}",
    "c": '"s,t}"',
    "replica_groups": "mesh['a'=8] {'a'}",
    "to_apply": "%add",
  }
  assert split_attributes("") == {} and split_attributes("  ") == {}


def test_split_attributes_past_the_regex_depth_takes_the_scanner():
  # Braces nested deeper than the regex follows: the exact scanner splits them.
  deep = "{" * 15 + "1" + "}" * 15
  assert split_attributes(f", x={deep}, y=2") == {"x": deep, "y": "2"}
