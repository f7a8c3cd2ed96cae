"""hlo_tools.model.decisions: each collective-permute with the selection core's choice,
taken from nvshmem-opt's JSON where it decided the permute, else asked of the binding."""

import pytest

from hlo_tools import selection
from hlo_tools.errors import InputError
from hlo_tools.model import decisions, options, sources

from conftest import FIXTURES

# A ring of four across two hosts of two GPUs (1x2x2): 1->2 and 3->0 leave their host.
RING4 = """HloModule ring, num_partitions=4

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}ATTRS
}
"""


def _source(attrs="", partitions=4):
  text = RING4.replace("ATTRS", attrs).replace("num_partitions=4", f"num_partitions={partitions}")
  return sources.read_text("ring.hlo", text)


def test_the_binding_decides_where_the_driver_gave_no_answer():
  selected = options.load("1x2x2:map=0,1,2,3")
  [perm] = decisions.analyze(_source(), selected.topology, selected.table)
  assert perm.decided_by == "core binding"
  assert perm.pairs == [(0, 1), (1, 2), (2, 3), (3, 0)]
  assert perm.edges == [(0, 1, "nvlink"), (1, 2, "network"), (2, 3, "nvlink"), (3, 0, "network")]
  assert (perm.bytes, perm.buffers) == (4096, 1)
  assert perm.decision["edges_by_class"]["network"] == 2
  assert perm.decision["edges_by_class"]["nvlink"] == 2
  assert perm.decision["plan"] in selection.BACKENDS
  assert perm.mark is None and perm.group is None and perm.error is None


# The driver's JSON entry of that permute, as it prints one.
ENTRY = {
  "computation": "e",
  "instruction": "cp",
  "plan": "nvshmem",
  "reason": "NVSHMEM beats NCCL",
  "modeled_us": {"nccl": 9.0, "nvshmem": 4.0, "chosen": 4.0},
  "refused": {"peer": "not offered by the target XLA"},
  "edges_by_class": {"same_device": 0, "nvlink": 4, "nvlink_domain": 0, "network": 0},
  "edges": [[0, 1, "nvlink"], [1, 2, "nvlink"], [2, 3, "nvlink"], [3, 0, "nvlink"]],
  "bytes": 4096,
  "buffers": 1,
  "loops": [{"while_loop": "w", "computation": "main", "trip_count": 6}],
  "current_refused": None,
  "new_instructions": ["cp.start", "cp.done"],
}


def test_a_permute_the_driver_decided_takes_its_facts():
  selected = options.load("1x1x4")
  [perm] = decisions.analyze(
    _source(), selected.topology, selected.table, report={"decisions": [ENTRY]}
  )
  assert perm.decided_by == "nvshmem-opt"
  assert perm.decision == {
    "plan": "nvshmem",
    "backend": "nvshmem",
    "reason": "NVSHMEM beats NCCL",
    "backend_us": {"nccl": 9.0, "nvshmem": 4.0, "peer": None, "symmetric": None},
    "refused": {"peer": "not offered by the target XLA"},
    "chosen_us": 4.0,
    "edges_by_class": ENTRY["edges_by_class"],
  }
  assert perm.edges == [(0, 1, "nvlink"), (1, 2, "nvlink"), (2, 3, "nvlink"), (3, 0, "nvlink")]
  assert perm.loops == [("w", "main", 6)]


def test_driver_decisions_by_input_name_and_by_the_rewrites_names():
  other = dict(ENTRY, instruction="cp.start", plan="nccl", new_instructions=[])
  entries = decisions.driver_decisions({"decisions": [ENTRY, other]})
  assert entries[("e", "cp")] is ENTRY and entries[("e", "cp.done")] is ENTRY
  # An entry of its own name is not overwritten by another's rewrite.
  assert entries[("e", "cp.start")] is other
  assert decisions.driver_decisions(None) == {}


def test_a_user_mark_is_kept_but_the_tools_own_is_not():
  selected = options.load("1x1x4")
  [perm] = decisions.analyze(
    _source(', frontend_attributes={_xla_collectives_mode="peer"}'),
    selected.topology,
    selected.table,
  )
  assert perm.mark == "peer"
  own = _source(', frontend_attributes={_nvshmem_opt_mode="peer",_xla_collectives_mode="peer"}')
  assert decisions.user_mark(own.module.entry.instruction("cp")) is None


def test_a_mark_that_names_no_mode_is_bad_input():
  selected = options.load("1x1x4")
  source = _source(', frontend_attributes={_xla_collectives_mode="peer,symmetric"}')
  with pytest.raises(InputError) as e:
    decisions.analyze(source, selected.topology, selected.table)
  assert str(e.value).startswith(
    'ring.hlo:5: %cp: _xla_collectives_mode="peer,symmetric" names no collectives mode '
    "(private, symmetric, peer)"
  )


def test_devices_the_topology_cannot_hold():
  selected = options.load("1x1x8")
  wide = _source(partitions=16)
  with pytest.raises(InputError, match=r"^ring.hlo:5: %cp: the module needs 16 devices"):
    decisions.require_devices(wide, selected.topology)
  with pytest.raises(InputError, match=r"^ring.hlo:5: %cp: "):
    decisions.analyze(wide, selected.topology, selected.table)
  # Tolerant (verify): the permute says why, undecided.
  [perm] = decisions.analyze(wide, selected.topology, selected.table, tolerant=True)
  assert perm.decision is None and perm.edges == []
  assert "needs 16 devices" in perm.error
  # A module without permutes asks nothing of the topology.
  bare = sources.read_text(
    "m.hlo", "HloModule m, num_partitions=16\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"
  )
  assert decisions.require_devices(bare, selected.topology) is None


def test_place_of_a_branch_and_a_group():
  selected = options.load("1x1x8")
  source = sources.read_source(str(FIXTURES / "cond_ring_1x1x8.before_async.hlo"))
  perms = decisions.analyze(source, selected.topology, selected.table)
  assert {decisions.place_of(p) for p in perms} == {"branch"}
  [perm] = decisions.analyze(_source(), options.load("1x1x4").topology, selected.table)
  assert decisions.place_of(perm) == "anywhere"
  perm.group = "call.1"
  assert decisions.place_of(perm) == "group"
