"""hlo_tools.model.refusals: why the core refuses a backend for a permute, and every
reason the backend an op already carries cannot run it."""

import shutil

from hlo_tools.model import decisions, options, placement, refusals, sources

from conftest import FIXTURES

# A ring of four with the backend CONFIG already written on it.
RING4 = """HloModule ring, num_partitions=PARTITIONS

ENTRY e {
  p = TYPE[1024] parameter(0)
  ROOT cp = TYPE[1024] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, backend_config={"collective_backend_config":{CONFIG}}
}
"""
NVSHMEM = '"backend":"NVSHMEM"'
PEER = '"backend":"DEFAULT","collectives_mode":"COLLECTIVES_PEER_MEMORY"'
NCCL = '"backend":"DEFAULT"'


def _decided(spec, config, backends=None, partitions=4, element="f32"):
  selected = options.load(spec, None, backends)
  text = RING4.replace("CONFIG", config).replace("PARTITIONS", str(partitions))
  source = sources.read_text("ring.hlo", text.replace("TYPE", element))
  [perm] = decisions.analyze(source, selected.topology, selected.table, tolerant=True)
  return perm, source, selected


def _carried(perm, source, selected):
  return refusals.carried_refusal(perm, source, selected.topology, selected.table)


def _unsafe(perm, source, selected):
  return refusals.unsafe_reasons(perm, source, selected.topology, selected.table)


def test_an_op_on_nccl_is_never_refused():
  args = _decided("1x2x2:map=0,1,2,3", NCCL)
  assert _carried(*args) is None and _unsafe(*args) == []


def test_one_sided_backends_across_hosts_are_refused():
  # Two hosts of two GPUs, identity map: 1->2 and 3->0 leave their host.
  args = _decided("1x2x2:map=0,1,2,3", NVSHMEM)
  why = _carried(*args)
  assert why.startswith("nvshmem refused: 2 of 4 edges leave their host")
  assert _unsafe(*args) == [why]
  args = _decided("1x2x2:map=0,1,2,3", PEER, backends="nccl,peer")
  assert _carried(*args).startswith("peer refused: 2 of 4 edges leave their host")
  # Inside one host, with the map known, both may run it.
  assert _carried(*_decided("1x1x4:map=0,1,2,3", NVSHMEM)) is None
  assert _carried(*_decided("1x1x4:map=0,1,2,3", PEER, backends="nccl,peer")) is None


def test_the_driver_s_answer_stands_where_it_decided():
  perm, source, selected = _decided("1x2x2:map=0,1,2,3", NVSHMEM)
  perm.decided_by, perm.current_refused = "nvshmem-opt", "the driver's reason"
  assert _carried(perm, source, selected) == "the driver's reason"
  perm.current_refused = None
  assert _carried(perm, source, selected) is None


def test_refusal_of_any_backend_at_a_place():
  perm, source, selected = _decided("1x1x4:map=0,1,2,3", NCCL, element="f8e4m3fn")
  # NVSHMEM has no put for an fp8 type.
  why = refusals.refusal_of(perm, source, selected.topology, selected.table, "nvshmem")
  assert "f8e4m3fn" in why
  perm, source, selected = _decided("1x1x4:map=0,1,2,3", NCCL, backends="nccl,peer")
  assert refusals.refusal_of(perm, source, selected.topology, selected.table, "peer") is None
  branch = refusals.refusal_of(perm, source, selected.topology, selected.table, "peer", "branch")
  assert "conditional's branch" in branch


def test_every_reason_nvshmem_cannot_run_is_given():
  # Four devices of a host of eight: the placement is unknown (the core's first
  # refusal) and GPUs 4-7 would never enter NVSHMEM's barrier (a rule it hides).
  reasons = _unsafe(*_decided("1x1x8", NVSHMEM))
  assert len(reasons) == 2 and len(set(reasons)) == 2
  assert any("GPUs 4-7 are not in the program" in r for r in reasons)
  assert any("does not say which device runs each of its ids" in r for r in reasons)


def test_edges_the_topology_cannot_place():
  perm, source, selected = _decided("1x1x8", NVSHMEM, partitions=16)
  assert perm.decision is None
  assert _unsafe(perm, source, selected) == [
    "nvshmem, but its edges cannot be placed on the topology: the module needs 16 "
    "devices (16 partitions x 1 replicas) but the topology has 8"
  ]


def test_the_buffer_assignment_beside_the_module_refuses_a_donated_destination(tmp_path):
  # The donated ring with NVSHMEM written by hand, its config and assignment beside it.
  stem = "donated_ring_1x1x8.after_optimizations"
  for suffix in (".config.pbtxt", "-buffer-assignment.txt"):
    shutil.copyfile(FIXTURES / (stem + suffix), tmp_path / (stem + suffix))
  path = tmp_path / (stem + ".hlo")
  path.write_text(
    (FIXTURES / (stem + ".hlo")).read_text().replace('"backend":"DEFAULT"', f"{NVSHMEM}")
  )
  source = sources.read_source(str(path))
  selected = placement.placed_by_reader(options.load("1x1x8"), str(path))
  [perm] = decisions.analyze(source, selected.topology, selected.table)
  reasons = refusals.unsafe_reasons(perm, source, selected.topology, selected.table)
  assert any("is parameter 1's buffer" in r and "(a donated input)" in r for r in reasons)
