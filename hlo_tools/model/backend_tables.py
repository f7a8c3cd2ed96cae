"""The backend tables from the core's records (what choosing a plan writes, what each
collectives_mode names) and the backend an op's backend_config selects."""

from __future__ import annotations

import hlo_tools.selection as selection
from hlo_tools.model.collectives import CollectivePermute

# What choosing each backend writes, from the core's records.
PLAN_BACKEND = {n: r["config_backend"] for n, r in selection.BACKEND_INFO.items()}
# XLA of jax >= 0.10.2 runs peer and symmetric memory through collectives_mode.
PLAN_MODE = {
  n: r["collectives_mode"] for n, r in selection.BACKEND_INFO.items() if r["collectives_mode"]
}
NO_MODE = "COLLECTIVES_MODE_INVALID"  # what XLA writes when no mode is chosen: NCCL
# The _xla_collectives_mode value that asks for each backend (NCCL: private).
MODE_ATTRIBUTE = {
  n: r["mode_attribute"] for n, r in selection.BACKEND_INFO.items() if r["mode_attribute"]
}
MARK_PLAN = {value: n for n, value in MODE_ATTRIBUTE.items()}
# Every value of XLA's CollectivesMode enum (jax 0.10.2); private memory is no
# backend of any set the core plans over.
MODE_BACKEND = {
  NO_MODE: "nccl",
  **{mode: n for n, mode in PLAN_MODE.items()},
  "COLLECTIVES_PRIVATE_MEMORY": "private",
}


def backend_set(table: selection.CostTable) -> tuple[str, ...]:
  """The backends `table` plans over, e.g. ('nccl', 'peer')."""
  return tuple(table.backends.split(","))


def op_backend(record: CollectivePermute) -> str:
  """The backend an op's backend_config selects: nccl, nvshmem, peer, symmetric,
  or 'private' / the unknown collectives_mode itself (no set contains those)."""
  if record.backend == "NVSHMEM":
    return "nvshmem"
  mode = record.collectives_mode
  if mode is None:
    return "nccl"
  return MODE_BACKEND.get(mode, mode)


def written_backend(record: CollectivePermute) -> str:
  """How the op's backend reads in its backend_config: 'DEFAULT', 'NVSHMEM', or
  'DEFAULT, COLLECTIVES_PEER_MEMORY' where a collectives_mode picks one."""
  mode = record.collectives_mode
  return record.backend if mode in (None, NO_MODE) else f"{record.backend}, {mode}"
