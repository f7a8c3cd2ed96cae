"""Each backend is described once, in the core (core/tool_layer/backends.h BackendInfo):
the tools' tables of what a backend writes and how it is named come from there."""

from hlo_tools import selection
from hlo_tools.model import backend_tables, runtime_rules
from hlo_tools.ops import verify_structure
from hlo_tools.ops.heuristics import check
from hlo_tools.ops.report import page


def test_records_cover_every_backend_in_core_order():
  assert tuple(selection.BACKEND_INFO) == selection.BACKENDS
  for name, record in selection.BACKEND_INFO.items():
    assert record["name"] == name
    assert set(record) == {
      "name",
      "label",
      "config_backend",
      "collectives_mode",
      "mode_attribute",
      "runtime",
      "rule",
      "curve",
    }
    assert record["label"] and record["runtime"] and record["rule"] and record["curve"]


def test_what_each_backend_writes():
  info = selection.BACKEND_INFO
  written = {
    n: (r["config_backend"], r["collectives_mode"], r["mode_attribute"]) for n, r in info.items()
  }
  assert written == {
    "nccl": ("DEFAULT", "", "private"),
    "nvshmem": ("NVSHMEM", "", ""),
    "peer": ("DEFAULT", "COLLECTIVES_PEER_MEMORY", "peer"),
    "symmetric": ("DEFAULT", "COLLECTIVES_SYMMETRIC_MEMORY", "symmetric"),
  }


def test_tools_tables_are_derived_from_the_records():
  info = selection.BACKEND_INFO
  assert backend_tables.PLAN_BACKEND == {n: r["config_backend"] for n, r in info.items()}
  assert backend_tables.PLAN_MODE == {
    "peer": "COLLECTIVES_PEER_MEMORY",
    "symmetric": "COLLECTIVES_SYMMETRIC_MEMORY",
  }
  assert backend_tables.MODE_BACKEND["COLLECTIVES_PEER_MEMORY"] == "peer"
  assert backend_tables.MODE_BACKEND[backend_tables.NO_MODE] == "nccl"
  assert verify_structure.KNOWN_BACKENDS == ("DEFAULT", "NVSHMEM")
  assert check._UPSTREAM == {"NVSHMEM": "nvshmem", "DEFAULT": "nccl"}
  assert page.NAMES["peer"] == "peer memory" and page.NAMES["nvshmem"] == "NVSHMEM"
  assert page.set_names("nccl,peer,symmetric") == "peer memory or symmetric memory"
  # The runtime rule lines the report and verify print are the records'.
  assert runtime_rules.RULES == {n: r["rule"] for n, r in info.items()}
  assert "nvshmem_communicator.cc:367" in info["nvshmem"]["rule"]
  # The patched emitter's rules beyond the HLO: the process's flags, the destination.
  assert "XLA_FLAGS" in info["nvshmem"]["rule"] and "donated" in info["nvshmem"]["rule"]
  assert "jax 0.11.2" in info["peer"]["curve"] and "NCCL's numbers" in info["symmetric"]["curve"]


def test_jax_hook_writes_what_the_records_say():
  from hlo_tools.hook import decide

  assert decide.hook_modes(selection) == {
    "nccl": (None, "private"),
    "peer": ("COLLECTIVES_PEER_MEMORY", "peer"),
    "symmetric": ("COLLECTIVES_SYMMETRIC_MEMORY", "symmetric"),
  }


def test_tables_are_built_through_the_core():
  table = selection.CostTable.default()
  copy = table.copy()
  copy.set_link("peer", "nvlink", 5, 400, 3, [(1, 1 << 20, 30.0), (1, 1024, 10.0)])
  assert copy.points("peer", "nvlink") == [(1, 1024, 10.0), (1, 1 << 20, 30.0)]
  assert copy.link("peer", "nvlink") == (5.0, 400.0)
  assert table.link("peer", "nvlink") != (5.0, 400.0)  # the copy alone changed
  # Checked as a table's text is; the table is left as it was.
  import pytest

  with pytest.raises(ValueError, match="latency_us must be a number >= 0"):
    copy.set_link("nccl", "nvlink", -1, 400, 3)
  with pytest.raises(ValueError, match="a second point"):
    copy.set_link("nccl", "nvlink", 1, 400, 3, [(1, 1024, 1.0), (1, 1024, 2.0)])
  assert copy.link("nccl", "nvlink") == table.link("nccl", "nvlink")
  copy.set_sm_interference("nvshmem", 0.25)
  assert copy.sm_interference("nvshmem") == 0.25
  assert selection.parse_cost_table(str(copy)).points("peer", "nvlink") == copy.points(
    "peer", "nvlink"
  )
