"""The backend-selection core, as the XLA pass runs it, for Python callers.

A thin layer over the C++ bindings (`_selection_core`, built by CMake from the
same sources as the pass): one implementation of the heuristic, not two.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

# bounded_input imports the binding first, and says how to build it where it is missing.
from hlo_tools import _selection_core, bounded_input
from hlo_tools.errors import SelectionError, escape_name

Topology = _selection_core.Topology
CostTable = _selection_core.CostTable
LINK_CLASSES = tuple(_selection_core.link_classes())
BACKENDS = tuple(_selection_core.backend_names())
# Each backend's record, from the core (core/tool_layer/backends.h BackendInfo): name,
# label, config_backend and collectives_mode (what choosing it writes into
# collective_backend_config; "" for none), mode_attribute, runtime.
BACKEND_INFO = {r["name"]: r for r in _selection_core.backend_info()}

# Where a permute sits, as far as the patched XLAs' rules go (the core's Place):
# anywhere, inside a collectives group (_collectives_group), under a conditional's
# branch.
PLACES = ("anywhere", "group", "branch")


def place_of(under_conditional_branch: bool, in_collectives_group: bool) -> str:
  """Where a permute sits for the core's rules (PLACES), by the core's one rule:
  under a conditional's branch wins over a collectives group, which refuses less."""
  return _selection_core.place_of(under_conditional_branch, in_collectives_group)


def parse_topology(spec: str, backends: str | None = None) -> Topology:
  """The core's Topology of `spec`. A layout the spec leaves unstated is the default
  of `backends`, the target XLA's set ("nccl,peer"; default: the default table's,
  nccl,nvshmem): one GPU per process where NVSHMEM is offered, else one process per
  host. Decide with a table of the same set."""
  try:
    return _selection_core.Topology.parse(spec, backends or DEFAULT_BACKENDS)
  except ValueError as e:
    raise SelectionError(str(e)) from None


# The set of the default table, whose process layout a spec without a set takes.
DEFAULT_BACKENDS = _selection_core.CostTable.default().backends


def load_cost_table(
  path: str | os.PathLike[str] | None = None, max_bytes: int | None = None
) -> CostTable:
  """The default table, or the defaults overridden by the file at `path` ("-":
  stdin), read as every input is (bounded_input.read_side_input: bounded in size by
  max_bytes and a table's own limit, in time by the input timeout); InputError,
  one line naming the file, when it cannot be read or parsed."""
  if path is None:
    return _selection_core.CostTable.default()
  label = os.fspath(path)
  data = bounded_input.read_side_input(path, "a cost table", max_bytes, label)
  if not data.strip():  # a cut or failed write, not a table: nothing overrides
    raise SelectionError(f"{label}: empty file, no cost table (without --cost-table: the default)")
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise SelectionError(f"{label}:{line}: not UTF-8 text (byte {e.start})") from None
  return parse_cost_table(text, escape_name(label))  # the core takes UTF-8 names


def parse_cost_table(text: str, source: str = "<string>") -> CostTable:
  """The defaults overridden by the text-format table `text` (`source` names it in
  errors)."""
  try:
    return _selection_core.CostTable.parse(text, source)
  except ValueError as e:
    raise SelectionError(str(e)) from None


def decide(
  topology: Topology,
  table: CostTable,
  bytes_per_device: int,
  pairs: Sequence[Sequence[int]],
  cross_partition: bool = True,
  num_partitions: int | None = None,
  num_replicas: int = 1,
  buffers: int = 1,
  backends: str | Sequence[str] | None = None,
  element_types: Sequence[str] = (),
  place: str = "anywhere",
  mark: str | None = None,
  destinations: Sequence[tuple[int, int, bool]] = (),
) -> dict[str, Any]:
  """Decision for one collective-permute given its id pairs, as the pass sees it.

  The backends considered are the table's set (`table.backends`, e.g.
  "nccl,nvshmem" or "nccl,peer"), or `backends` ("nccl,peer" or a sequence) when
  given; `buffers` is the permute's number of operands and `bytes_per_device`
  all of them together; `element_types` those of its buffers ("f32"), which the
  NVSHMEM rule reads; `place` where the permute sits, as the patched XLAs' rules
  see it (PLACES): "group" (inside a collectives group: no NVSHMEM) or "branch"
  (under a conditional's branch: no one-sided backend), as nvshmem-opt's planner
  asks the core; `destinations` what XLA's buffer assignment says of each
  destination, (allocation, entry parameter or -1, returned), as nvshmem-opt reads
  it beside a module (none: unknown).

  Returns the core's dict: plan and backend (the same name: 'nccl'|'nvshmem'|
  'peer'|'symmetric'), backend_us ({backend: modeled us, None when not offered
  or refused; NCCL's always set}), refused ({backend: one-line reason}),
  chosen_us, edges_by_class, reason. The NVSHMEM team is taken to be every
  device of the program (num_partitions x num_replicas).
  """
  if num_partitions is None:
    num_partitions = topology.num_devices // max(num_replicas, 1)
  if place not in PLACES:
    raise SelectionError(f"place {place!r} is not one of {', '.join(PLACES)}")
  if backends is not None:
    table = with_backends(table, backends)
  try:
    edges = _selection_core.edge_ids_to_devices(
      topology, [(p[0], p[1]) for p in pairs], cross_partition, num_partitions, num_replicas
    )
    # The program's devices, in groups of the pairs' ids (NVSHMEM takes ids as PEs).
    return _selection_core.decide(
      topology,
      table,
      int(bytes_per_device),
      edges,
      team_size=num_partitions * num_replicas,
      buffers=int(buffers),
      element_types=list(element_types),
      groups=_groups(cross_partition, num_partitions, num_replicas),
      place=place,
      mark=mark,
      destinations=[(int(a), int(p), bool(r)) for a, p, r in destinations],
    )
  except ValueError as e:
    raise SelectionError(str(e)) from None


def layout_refusal(topology: Topology, team_size: int, backend: str) -> str | None:
  """Why the program's layout refuses `backend` (several GPUs per process for
  NVSHMEM; no device map on a program over several hosts or processes), or None."""
  return _selection_core.layout_refusal(topology, team_size, backend)


def process_layout_text(topology: Topology, stated: bool, backends: str) -> str:
  """The process layout in words, with why where it is the backend set's default."""
  return _selection_core.process_layout_text(topology, stated, backends)


def states_processes(spec: str) -> bool:
  """Whether a topology spec states its process layout (:gpus_per_process=N, or
  :processes=P0,P1,... of each device)."""
  return ":gpus_per_process=" in spec or ":processes=" in spec


def with_backends(table: CostTable, backends: str | Sequence[str]) -> CostTable:
  """A copy of `table` planning over `backends` ("nccl,peer" or a sequence)."""
  if not isinstance(backends, str):
    backends = ",".join(backends)
  copy = parse_cost_table(str(table), "<table>")
  try:
    copy.backends = backends
  except ValueError as e:
    raise SelectionError(str(e)) from None
  return copy


def edge_time_us(
  table: CostTable, backend: str, link_class: str, nbytes: int, buffers: int = 1
) -> float:
  return _selection_core.edge_time_us(table, backend, link_class, int(nbytes), int(buffers))


def nvshmem_puts_type(element_type: str) -> bool:
  """Whether the pinned XLA's NVSHMEM put exists for an HLO element type ('bf16')."""
  return _selection_core.nvshmem_puts_type(element_type)


def _groups(cross_partition: bool, num_partitions: int, num_replicas: int) -> int:
  """Copies of a permute's pairs: one per replica with a channel id, else per partition."""
  return int(num_replicas if cross_partition else num_partitions)


def nvshmem_pe_reason(
  topology: Topology, cross_partition: bool, num_partitions: int, num_replicas: int
) -> str | None:
  """Why XLA's NVSHMEM permute would put to other GPUs than the permute's, or None:
  it takes a group's ids as PEs (processes, one GPU each), so the pairs must form one
  group and logical device i must be device i of `topology`."""
  try:
    return (
      _selection_core.nvshmem_pe_reason(
        topology,
        int(num_partitions * num_replicas),
        _groups(cross_partition, num_partitions, num_replicas),
      )
      or None
    )
  except ValueError as e:
    raise SelectionError(str(e)) from None


def nvshmem_heap_reason(table: CostTable, nbytes: int) -> str | None:
  """Why an NVSHMEM permute moving `nbytes` per device overflows the symmetric heap
  (the table's nvshmem_max_bytes), or None: its operand and result both live there."""
  return _selection_core.nvshmem_heap_reason(table, int(nbytes)) or None


def nvshmem_host_reason(
  topology: Topology, device_edges: Sequence[Sequence[int]], team_size: int
) -> str | None:
  """Why NVSHMEM's barrier over NVSHMEM_TEAM_SHARED would wait for a GPU outside
  the program of `team_size` logical devices (placed by `topology`'s map), or None:
  with one process per GPU, a host's team is every GPU of the host."""
  edges = [(int(s), int(t)) for s, t in device_edges]
  team = _selection_core.team_devices(topology, int(team_size))
  return _selection_core.nvshmem_host_reason(topology, edges, team) or None


def nvshmem_hang_reason(device_edges: Sequence[Sequence[int]], team_size: int | None) -> str | None:
  """Why an NVSHMEM permute over `device_edges` would hang the pinned XLA, or None.

  XLA's NVSHMEM permute ends each buffer with a barrier over NVSHMEM_TEAM_SHARED
  (a host's devices) that only devices with a source call, and the thunk emitter,
  which cannot see hosts, runs NVSHMEM only when every device of the program is
  the target of some edge. `team_size` is the number of devices of the
  program (devices 0..team_size-1); when it is None or 0 the team is taken to
  be devices 0..max device named by the edges, which is what the edges alone
  can tell (a caller that knows the program's size should pass it).
  """
  edges = [(int(s), int(t)) for s, t in device_edges]
  if not team_size:
    team_size = 1 + max((max(s, t) for s, t in edges), default=-1)
  if team_size < 0:
    raise SelectionError(f"team_size must be >= 0, got {team_size}")
  reason = _selection_core.nvshmem_hang_reason(edges, list(range(team_size)))
  return reason or None
