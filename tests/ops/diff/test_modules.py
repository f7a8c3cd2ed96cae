"""hlo_tools.ops.diff.modules: computations and instructions matched by name, then by
structure, every changed attribute, and the collector paused around a diff."""

import time

import pytest

from hlo_tools.model import sources
from hlo_tools.ops import diff
from hlo_tools.ops.diff import modules

# B renames %add to %sum and %b to %bcast, changes %c's literal and %m's metadata, and
# puts a new %n between %m and the ROOT.
A = """HloModule a, num_partitions=2

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %c = f32[] constant(1)
  %b = f32[8]{0} broadcast(%c), dimensions={}
  %m = f32[8]{0} multiply(%p, %b), metadata={op_name="a/mul"}
  ROOT %r = f32[8]{0} all-reduce(%m), channel_id=1, replica_groups={{0,1}}, to_apply=%add
}
"""
B = """HloModule b, num_partitions=2

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %c = f32[] constant(2)
  %bcast = f32[8]{0} broadcast(%c), dimensions={}
  %m = f32[8]{0} multiply(%p, %bcast), metadata={op_name="b/mul"}
  %n = f32[8]{0} negate(%m)
  ROOT %r = f32[8]{0} all-reduce(%n), channel_id=1, replica_groups={{0,1}}, to_apply=%sum
}
"""


def _src(label, text):
  return sources.read_text(label, text)


def test_computations_match_by_name_then_by_structure():
  ma, mb = _src("a", A).module, _src("b", B).module
  pairs = [(ca and ca.name, cb and cb.name) for ca, cb in modules.match_computations(ma, mb)]
  assert pairs == [("add", "sum"), ("main", "main")]
  # A computation B does not have, nor anything shaped like it: removed, listed last.
  extra = A.replace(
    "ENTRY %main",
    "%neg (z: f32[2]) -> f32[2] {\n  %z = f32[2]{0} parameter(0)\n"
    "  ROOT %o = f32[2]{0} negate(%z)\n}\n\nENTRY %main",
  )
  pairs = modules.match_computations(_src("a", extra).module, mb)
  assert [(ca and ca.name, cb and cb.name) for ca, cb in pairs][-1] == ("neg", None)


def test_instructions_match_by_name_then_by_their_operands():
  ma, mb = _src("a", A).module, _src("b", B).module
  b_to_a = modules.match_instructions(ma.computation("main"), mb.computation("main"))
  # %bcast is a broadcast of the same %c: it is %b renamed; %n has no partner.
  assert b_to_a == {"p": "p", "c": "c", "m": "m", "r": "r", "bcast": "b"}


def test_diff_lists_each_changed_attribute():
  result = modules.diff_sources(_src("a.hlo", A), _src("b.hlo", B))
  s = result["summary"]
  assert (s["instructions_a"], s["instructions_b"]) == (8, 9)
  # Unchanged: %p and the three of %add/%sum; changed: %c, %bcast (renamed), %m, %r.
  assert (s["unchanged"], s["changed"], s["renamed"], s["added"], s["removed"]) == (4, 4, 1, 1, 0)
  add, main = result["computations"]
  assert (add["a"], add["b"], add["status"], add["changed"]) == ("add", "sum", "renamed", [])
  assert main["added"] == [{"name": "n", "line": 14, "opcode": "negate"}]
  changes = {c["b"]: c["changes"] for c in main["changed"]}
  assert changes == {
    "c": [{"attribute": "literal", "a": "1", "b": "2"}],
    "bcast": [],  # renamed only
    "m": [{"attribute": "metadata.op_name", "a": "a/mul", "b": "b/mul"}],
    # to_apply=%sum is %add under its new name: not a change.
    "r": [{"attribute": "operands", "a": "%m", "b": "%n"}],
  }
  assert result["collectives"] == []


def test_metadata_can_be_ignored():
  s = modules.diff_sources(_src("a", A), _src("b", B), ignore_metadata=True)["summary"]
  assert (s["unchanged"], s["changed"]) == (5, 3)


PERMUTE = """HloModule p, num_partitions=2

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %cp = f32[8]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}, frontend_attributes={_xla_stream="1"}, backend_config={"collective_backend_config":{"backend":"DEFAULT","is_sync":true}}
}
"""  # noqa: E501  (HLO as XLA prints it)


def test_backend_config_and_frontend_attributes_change_key_by_key():
  a = _src("a", PERMUTE).module
  b = _src(
    "b",
    PERMUTE.replace('"DEFAULT"', '"NVSHMEM"').replace('_xla_stream="1"', '_xla_stream="2"'),
  ).module
  ia, ib = a.computation("main").instruction("cp"), b.computation("main").instruction("cp")
  assert modules.attribute_changes(ia, ib, {}, {"p": "p", "cp": "cp"}) == [
    {"attribute": "frontend_attributes._xla_stream", "a": "1", "b": "2"},
    # JSON values, as the module spells them.
    {
      "attribute": "backend_config.collective_backend_config.backend",
      "a": '"DEFAULT"',
      "b": '"NVSHMEM"',
    },
  ]
  same = a.computation("main").instruction("p")
  assert modules.attribute_changes(same, same, {}, {}) == []


def test_json_leaves_out_matching_tables_and_unchanged_computations():
  src = _src("a", A)
  same = modules.to_json(modules.diff_sources(src, src))
  assert same["computations"] == [] and same["summary"]["unchanged"] == 8
  changed = modules.to_json(modules.diff_sources(src, _src("b", B)))
  assert [c["b"] for c in changed["computations"]] == ["sum", "main"]
  assert not [c for c in changed["computations"] if "b_to_a" in c or "order" in c]


def synthetic(n, rename=False):
  """A module with n instructions in a chain (every 4th renamed in B)."""
  lines = [
    "HloModule big, num_partitions=2",
    "",
    "ENTRY %main (p: f32[8]) -> f32[8] {",
    "  %p = f32[8]{0} parameter(0)",
  ]
  prev = "p"
  for i in range(n):
    name = f"r{i}" if rename and i % 4 == 0 else f"a{i}"
    lines.append(f"  %{name} = f32[8]{{0}} add(%{prev}, %p)")
    prev = name
  lines.append(
    f"  ROOT %out = f32[8]{{0}} collective-permute(%{prev}), channel_id=1, "
    "source_target_pairs={{0,1},{1,0}}"
  )
  lines.append("}")
  return "\n".join(lines) + "\n"


def test_scales_near_linearly(tmp_path):
  times = {}
  for n in (5000, 40000):
    a = sources.read_text("a", synthetic(n))
    b = sources.read_text("b", synthetic(n, rename=True))
    t = time.perf_counter()
    result = diff.diff_sources(a, b)
    times[n] = time.perf_counter() - t
    assert result["summary"]["renamed"] == n // 4
    assert result["summary"]["added"] == 0 and result["summary"]["removed"] == 0
  # 8x the instructions: linear is ~8x; quadratic would be ~64x.
  assert times[40000] < 20 * times[5000] + 0.5, times


def test_collector_paused_leaves_the_collector_as_found():
  import gc  # pylint: disable=import-outside-toplevel

  assert gc.isenabled() and gc.get_freeze_count() == 0
  with diff.collector_paused():
    assert not gc.isenabled() and gc.get_freeze_count() > 0
  assert gc.isenabled() and gc.get_freeze_count() == 0
  keep = [object() for _ in range(3)]  # noqa: F841  (a caller's heap, frozen by the caller)
  gc.freeze()
  try:
    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError), diff.collector_paused():
      raise RuntimeError("the diff failed")
    assert gc.isenabled() and gc.get_freeze_count() >= frozen  # the caller's stay frozen
  finally:
    gc.unfreeze()
