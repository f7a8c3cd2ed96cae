"""hlo_tools.model.options: a command's topology, cost table and backend set, parsed
once at the command boundary."""

import dataclasses

import pytest

from hlo_tools import selection
from hlo_tools.errors import SelectionError
from hlo_tools.model import options

from conftest import FIXTURES

FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"


def test_per_op_modes_refuse_nvshmem():
  with pytest.raises(SelectionError, match=r"^--per-op-modes and the backend set nccl,nvshmem"):
    options.check_target("nccl,nvshmem", per_op_xla=True)
  assert options.check_target("nccl,peer,symmetric", per_op_xla=True) is None
  assert options.check_target("nccl,nvshmem", per_op_xla=False) is None


def test_load_table_replaces_the_tables_set():
  table, backends = options.load_table()
  assert backends is None and table.backends == selection.DEFAULT_BACKENDS
  table, backends = options.load_table(None, ["nccl", "peer"])
  assert backends == table.backends == "nccl,peer"
  table, backends = options.load_table(str(FAST_NVSHMEM), "nccl,nvshmem")
  assert backends == "nccl,nvshmem"
  assert table.link("nvshmem", "nvlink") == (2.0, 450.0)  # the file's row


def test_a_set_no_xla_offers_is_a_selection_error():
  with pytest.raises(SelectionError, match=r"^--backends: .*no XLA offers both"):
    options.load_table(None, "nccl,nvshmem,peer")


def test_load_parses_the_spec_once():
  selected = options.load("1x2x4", str(FAST_NVSHMEM), "nccl,nvshmem")
  assert selected.spec == "1x2x4" and selected.cost_table == str(FAST_NVSHMEM)
  assert selected.backends == "nccl,nvshmem" and selected.table.backends == "nccl,nvshmem"
  assert (selected.topology.hosts_per_slice, selected.topology.gpus_per_host) == (2, 4)
  assert selected.placement is None and not selected.settled and not selected.per_op_xla
  # The driver is given the user's table, not the built-in one.
  assert selected.driver_table() is selected.table
  assert options.load("1x1x8").driver_table() is None
  with pytest.raises(dataclasses.FrozenInstanceError):
    selected.spec = "1x1x8"


def test_load_takes_a_table_already_read_and_a_topology_already_placed():
  loaded = options.load_table(None, "nccl,peer")
  topology = selection.parse_topology("1x1x4:map=3,2,1,0", "nccl,peer")
  selected = options.load("1x1x4", loaded=loaded, topology=topology, per_op_xla=True)
  assert selected.table is loaded[0] and selected.topology is topology
  assert selected.backends == "nccl,peer" and selected.per_op_xla
  with pytest.raises(SelectionError, match="--per-op-modes"):
    options.load("1x1x4", backends="nccl,nvshmem", per_op_xla=True)
