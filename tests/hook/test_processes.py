"""hlo_tools/hook/processes.py: the topology a program is decided on, from jax's view
of the processes (the layout at install, each program's devices' processes)."""

from types import SimpleNamespace

import pytest

from hlo_tools.hook import decide, processes
from hlo_tools.hook.processes import with_process_layout

_BACKENDS = ("nccl", "peer")


def test_process_layout_comes_from_jax_local_devices():
  # One process per GPU (8 processes of 1 device): peer would run as NCCL.
  assert with_process_layout("1x1x8", 1, 8) == "1x1x8:gpus_per_process=1"
  # One process drives every GPU (JAX's default on one host): unchanged.
  assert with_process_layout("1x1x8", 8, 8) == "1x1x8"
  # A spec that says it already wins.
  assert with_process_layout("1x2x4:gpus_per_process=4", 1, 8) == "1x2x4:gpus_per_process=4"
  from hlo_tools import selection

  t = selection.parse_topology(with_process_layout("1x2x4", 4, 8))
  assert t.gpus_per_process == 4

  def parses(spec):
    try:
      selection.parse_topology(spec)
    except selection.SelectionError:
      return False
    return True

  # Each device's own process where jax says it, device i not in process i: the
  # map, not a count, reaches the core.
  reordered = [1, 1, 1, 1, 0, 0, 0, 0]
  spec = with_process_layout("1x2x4", 4, 8, reordered, parses)
  assert spec == "1x2x4:processes=1,1,1,1,0,0,0,0"
  assert list(selection.parse_topology(spec).device_to_process) == reordered
  # A map that does not fit the spec's devices: the count instead.
  assert with_process_layout("1x1x8", 2, 4, [0, 0, 1, 1], parses) == "1x1x8:gpus_per_process=2"


@pytest.fixture(scope="module")
def sel():
  return decide.import_selection()


def _devices(process_of):
  """jax-like devices: device i in process process_of[i]."""
  return [SimpleNamespace(id=i, process_index=p) for i, p in enumerate(process_of)]


def test_devices_of_one_process_keep_the_topology(sel):
  topology = sel.parse_topology("1x1x8", "nccl,peer")
  got, why = processes.topology_for_devices(sel, topology, _BACKENDS, _devices([0] * 8))
  assert got is topology and why is None
  # Devices without a process_index (a deviceless compile's) are in process 0.
  plain = [SimpleNamespace(id=i) for i in range(8)]
  assert processes.topology_for_devices(sel, topology, _BACKENDS, plain) == (topology, None)


def test_two_processes_of_four_split_a_topology_of_one_process(sel):
  topology = sel.parse_topology("1x1x8", "nccl,peer")
  assert topology.gpus_per_process == 8
  got, why = processes.topology_for_devices(
    sel, topology, _BACKENDS, _devices([0, 0, 0, 0, 1, 1, 1, 1])
  )
  assert str(got) == "1x1x8:gpus_per_process=4" and got.gpus_per_process == 4
  assert why == (
    "jax puts the program's devices in 2 processes (process 0: devices [0, 1, 2, 3]; "
    "process 1: devices [4, 5, 6, 7]), where the topology 1x1x8 has 8 GPUs per "
    "process: decided with 1x1x8:gpus_per_process=4"
  )


@pytest.mark.parametrize(
  "process_of",
  [
    [0, 1, 0, 1, 0, 1, 0, 1],  # four each, but not consecutive ids
    [0, 0, 0, 0, 0, 0, 1, 1],  # processes of two sizes
  ],
)
def test_processes_of_no_one_consecutive_size_make_each_gpu_its_own(sel, process_of):
  topology = sel.parse_topology("1x1x8", "nccl,peer")
  got, why = processes.topology_for_devices(sel, topology, _BACKENDS, _devices(process_of))
  assert got.gpus_per_process == 1 and why.endswith("decided with 1x1x8:gpus_per_process=1")


def test_processes_as_large_as_the_topologys_change_nothing(sel):
  topology = sel.parse_topology("1x2x4", "nccl,peer")
  assert topology.gpus_per_process == 4
  devices = _devices([0, 0, 0, 0, 1, 1, 1, 1])
  assert processes.topology_for_devices(sel, topology, _BACKENDS, devices) == (topology, None)


def test_parse_topology_takes_the_backend_sets_default_layout(sel):
  # NVSHMEM runs one GPU per process; peer memory one process per host.
  assert processes.parse_topology(sel, "1x1x8", ("nccl", "nvshmem")).gpus_per_process == 1
  assert processes.parse_topology(sel, "1x1x8", _BACKENDS).gpus_per_process == 8
