"""hlo_tools.model.sources: HLO text to a parsed module, strict pair lists, and the
program's partition count where the module header does not say it."""

import pytest

from hlo_tools import selection
from hlo_tools.errors import InputError
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model import driver, sources

from conftest import FIXTURES

LOWERED = FIXTURES / "ring_1x2x4.lowered.hlo"  # no num_partitions; a mesh of cp=8


# ---------------------------------------------------------------------------------------
# Reading input


def test_empty_text_is_no_module():
  with pytest.raises(InputError, match=r"^m.hlo: empty file, no HLO module$"):
    sources.read_text("m.hlo", " \n\n")


def test_a_module_without_entry_is_refused_where_it_ends():
  text = "HloModule m\n\nc {\n  ROOT p = f32[2] parameter(0)\n}\n"
  with pytest.raises(InputError) as e:
    sources.read_text("m.hlo", text)
  assert str(e.value) == (
    "m.hlo:5: no ENTRY computation: the module ends after %c (line 3); is the file "
    "cut at a computation boundary?"
  )


def test_read_source_keeps_the_text_and_its_lines():
  source = sources.read_source(str(FIXTURES / "shift_1x1x2.before_async.hlo"))
  assert source.label == source.path == str(FIXTURES / "shift_1x1x2.before_async.hlo")
  assert source.line(1).startswith("HloModule ")
  assert source.line(0) == "" and source.line(len(source.lines) + 1) == ""
  assert (source.num_partitions, source.num_replicas) == (2, 1)
  assert source.partitions_from == "module header"


def test_bytes_that_are_not_utf8_are_refused_outside_comments(tmp_path):
  assert sources.decode_text(b"a\xffb") == "a\udcffb"
  text = (FIXTURES / "shift_1x1x2.before_async.hlo").read_bytes()
  commented = tmp_path / "commented.hlo"
  commented.write_bytes(text.replace(b"\n", b" /* \xff */\n", 1))
  assert sources.read_source(str(commented)).module.entry is not None
  bad = tmp_path / "bad.hlo"
  at = text.index(b"ENTRY")
  bad.write_bytes(text[:at] + b"\xff" + text[at:])
  with pytest.raises(InputError, match=rf"not UTF-8 text from byte {at}, nor a serialized"):
    sources.read_source(str(bad))


def test_allocations_are_the_buffer_assignment_beside_the_module():
  donated = sources.read_source(str(FIXTURES / "donated_ring_1x1x8.after_optimizations.hlo"))
  assert donated.allocations  # donated_ring_...-buffer-assignment.txt lies beside it
  alone = sources.read_source(str(FIXTURES / "ring_1x1x8.after_optimizations.hlo"))
  assert alone.allocations == {}


# ---------------------------------------------------------------------------------------
# Pair lists, checked where they are

PAIRS = """HloModule m, num_partitions=4

ENTRY e {
  p = f32[8] parameter(0)
  ROOT cp = f32[8] collective-permute(p), channel_id=1, source_target_pairs=PAIRS
}
"""


def _permute(pairs):
  text = PAIRS.replace("PAIRS", pairs)
  source = sources.read_text("m.hlo", text)
  return source, source.module.entry.instruction("cp")


def _broken(pairs):
  """A Source whose permute reads `pairs` verbatim: the reader refuses such a list
  itself, so the module is parsed with a good one and given the broken text after."""
  module = parse_hlo_text(PAIRS.replace("PAIRS", "{{0,1}}"), "m.hlo")
  permute = module.entry.instruction("cp")
  permute.attributes["source_target_pairs"] = pairs
  return sources.Source(module, PAIRS.replace("PAIRS", pairs), "m.hlo"), permute


@pytest.mark.parametrize(
  "pairs,want",
  [
    ("{{0,1},{1,2},{2,3},{3,0}}", [(0, 1), (1, 2), (2, 3), (3, 0)]),
    ("{ {0, 1} , {1,0} }", [(0, 1), (1, 0)]),
    ("{}", []),
  ],
)
def test_strict_pairs_of_good_lists(pairs, want):
  assert sources.strict_pairs(*_permute(pairs)) == want


@pytest.mark.parametrize(
  "pairs,bad,why",
  [
    ("{{0,1},{2}}", "{2}", "expected {source,target} with two integer ids"),
    ("{{0,1}{1,0}}", "{1,0}}", "expected ',' or '}', found '{'"),
    ("{{0,1},{1,x}}", "{1,x}", "expected {source,target} with two integer ids"),
    ("[0,1]", "[0,1]", "expected {{source,target},...}"),
  ],
)
def test_strict_pairs_point_at_the_broken_pair(pairs, bad, why):
  source, permute = _broken(pairs)
  line = source.line(permute.line)
  column = line.index(bad, line.index("source_target_pairs=")) + 1
  with pytest.raises(InputError) as e:
    sources.strict_pairs(source, permute)
  assert str(e.value) == (
    f"m.hlo:{permute.line}:{column}: broken source_target_pairs of %cp: {why}"
  )


def test_read_text_refuses_a_broken_pair_list_with_the_pairs_form():
  with pytest.raises(InputError) as e:
    sources.read_text("m.hlo", PAIRS.replace("PAIRS", "{{0,1},{2}}"))
  assert str(e.value).startswith("m.hlo:5:")
  assert str(e.value).endswith("%cp needs source_target_pairs={{source,target},...}")


def test_an_instruction_without_pairs_has_none():
  source, _ = _permute("{{0,1}}")
  assert sources.strict_pairs(source, source.module.entry.instruction("p")) == []


# ---------------------------------------------------------------------------------------
# How many devices the program runs on

MESHES = """HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["dp"=2, "cp"=4]>, small = #sdy.mesh<["x"=2]>}}

ENTRY e {
  p = f32[8] parameter(0)
  a = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,5},{5,0}}
  ROOT b = f32[8] collective-permute(a), source_target_pairs={{0,9},{9,0}}
}
"""


def test_mesh_devices_is_the_largest_mesh():
  module = parse_hlo_text(MESHES)
  assert sources.mesh_devices(module) == 8
  assert sources.mesh_devices(parse_hlo_text(PAIRS.replace("PAIRS", "{}"))) is None


def test_largest_partition_id_counts_cross_partition_ids_only():
  # %b has no channel_id: its ids are replicas, not partitions.
  assert sources.largest_partition_id(parse_hlo_text(MESHES)) == 5


def test_a_lowered_module_takes_its_count_from_its_mesh():
  source = sources.resolve_partitions(sources.read_source(str(LOWERED)))
  assert source.num_partitions == 8
  assert source.partitions_from.startswith("inferred from ")
  assert sources.partitions_note(source) == (
    f"{LOWERED}: num_partitions 8 ({source.partitions_from}; the module header does not say)"
  )


def test_num_partitions_override():
  source = sources.resolve_partitions(sources.read_source(str(LOWERED)), override=4)
  assert (source.num_partitions, source.partitions_from) == (4, "--num-partitions")
  assert sources.partitions_note(source) == (
    f"{LOWERED}: num_partitions 4 (--num-partitions; the module header does not say)"
  )
  with pytest.raises(InputError, match="--num-partitions must be >= 1, got 0"):
    sources.resolve_partitions(sources.read_source(str(LOWERED)), override=0)
  headed = sources.read_source(str(FIXTURES / "shift_1x1x2.before_async.hlo"))
  with pytest.raises(InputError, match=r"contradicts the module's header \(num_partitions=2\)"):
    sources.resolve_partitions(headed, override=4)
  # The same count as the header's is no contradiction.
  assert sources.resolve_partitions(headed, override=2).num_partitions == 2
  assert (
    sources.partitions_note(sources.read_source(str(FIXTURES / "shift_1x1x2.before_async.hlo")))
    is None
  )


def test_the_drivers_count_is_adopted():
  source = sources.read_source(str(LOWERED))
  sources.adopt_driver_partitions(source, {"num_partitions": 16, "partitions_from": "the topology"})
  assert (source.num_partitions, source.partitions_from) == (16, "inferred from the topology")
  sources.adopt_driver_partitions(source, {"num_partitions": 4, "partitions_from": ""})
  assert (source.num_partitions, source.partitions_from) == (4, "nvshmem-opt")
  sources.adopt_driver_partitions(source, None)
  assert source.num_partitions == 4


# The driver applies the same rule to the same module: a cross-check on real HLO.


def _bare(tmp_path):
  """The lowered ring without its Shardy mesh: no num_partitions, no mesh."""
  header, rest = (FIXTURES / "ring_1x2x4.lowered.hlo").read_text().split("\n", 1)
  bare = tmp_path / "no_mesh.hlo"
  bare.write_text(header.split(", frontend_attributes=")[0] + "\n" + rest)
  return bare


@pytest.mark.parametrize(
  "mesh,spec", [(True, "1x2x4"), (True, None), (False, "2x2x4"), (False, None)]
)
def test_reader_and_driver_settle_partitions_alike(tmp_path, mesh, spec):
  path = FIXTURES / "ring_1x2x4.lowered.hlo" if mesh else _bare(tmp_path)
  topology = selection.parse_topology(spec) if spec else None
  source = sources.resolve_partitions(sources.read_source(path), topology)
  rc, report, message = driver.run_nvshmem_opt(path, spec, devices_per_host=4)
  assert rc == 0, message
  assert source.num_partitions == report["num_partitions"]
  assert source.partitions_from == f"inferred from {report['partitions_from']}"
  expected = 8 if mesh or spec is None else 16
  assert report["num_partitions"] == expected
