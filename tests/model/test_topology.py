"""hlo_tools.model.topology: what the tools say of a parsed topology (the SxHxG jax
compiles for, size warnings, where a command's topology came from)."""

from hlo_tools import selection
from hlo_tools.model import topology


def test_jax_topology_is_slices_hosts_gpus_only():
  assert topology.jax_topology(selection.parse_topology("2x2x4:nvl8")) == "2x2x4"
  assert topology.jax_topology(selection.parse_topology("1x2x4:map=0,4,1,5,2,6,3,7")) == "1x2x4"


def test_size_note_warns_where_gpus_stay_idle():
  parsed = selection.parse_topology("1x2x4:map=0,1,2,3,4,5,6,7")
  assert topology.size_note("1x2x4:map=0,1,2,3,4,5,6,7", parsed, 8) is None
  assert topology.size_note("1x2x4", parsed, 0) is None  # no devices known
  note = topology.size_note("1x2x4:map=0,1,2,3,4,5,6,7", parsed, 4)
  assert note.startswith(
    "warning: topology 1x2x4 has 8 GPUs but the module runs on 4: the rest stay idle"
  )  # without its map, which is long


def test_manifest_note():
  assert topology.manifest_note("hlo-tools explain", "d:after_optimizations", "1x2x4") == (
    "hlo-tools explain: d:after_optimizations: no --topology; using 1x2x4, the topology "
    "the dump was compiled for (manifest.json; --topology=SPEC overrides)"
  )


def test_derived_notes():
  host8 = selection.parse_topology("1x1x8")
  note, warning = topology.derived_notes("p", "m.hlo", "1x1x8", host8, [], None, 8)
  assert note.startswith("p: m.hlo: no --topology; using 1x1x8 (derived from the module")
  assert warning is None
  # Hosts of a shape the user chose: no warning.
  assert topology.derived_notes("p", "m.hlo", "1x1x8", host8, ["1x2x4"], 8, 4)[1] is None
  # Four devices on a default host of eight: four idle GPUs NVSHMEM would wait for.
  _, warning = topology.derived_notes("p", "m.hlo", "1x1x8", host8, [], None, 4)
  assert warning.startswith("p: warning: m.hlo: hosts of 8 GPUs assumed (the default host);")
  assert "leave 4 of their GPUs idle" in warning and "--topology=1x1x4" in warning
  # Sixteen devices fit other host shapes.
  two = selection.parse_topology("1x2x8")
  _, warning = topology.derived_notes("p", "m.hlo", "1x2x8", two, ["1x4x4", "1x8x2"], None, 16)
  assert warning.startswith(
    "p: warning: m.hlo: the module's devices fit other host shapes too (1x4x4, 1x8x2)"
  )
  assert "1x2x8 is only the pass's default (hosts of 8 GPUs)" in warning
