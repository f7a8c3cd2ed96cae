"""verify's checks of what a runtime needs of a collective-permute's backend: NVSHMEM's
heap, team, runtime rules and memory space, and peer and symmetric memory's safety rule."""

from __future__ import annotations

import os

from hlo_tools import selection
from hlo_tools.hlo import buffer_assignment
from hlo_tools.hlo.ir import HloModule
from hlo_tools.model import backend_tables, collectives, decisions, refusals, runtime_rules, sources
from hlo_tools.model.decisions import Permute
from hlo_tools.ops.verify_check import Check

COLLECTIVE_MEMORY_SPACE = 1  # XLA GPU's collective memory space color, printed S(1)


def _edges_text(edges: list[decisions.Edge]) -> str:
  return ", ".join(f"{s}->{t} ({c})" for s, t, c in edges[:8]) + (
    f" and {len(edges) - 8} more" if len(edges) > 8 else ""
  )


def _own_edges(
  perm: Permute, topology: selection.Topology, source: sources.Source
) -> list[decisions.Edge]:
  return decisions.device_edges(topology, source, perm.pairs, perm.record.channel_id is not None)


def check_nvshmem_heap(perms: list[Permute], table: selection.CostTable) -> Check:
  # The permute's operand and result both live in NVSHMEM's symmetric heap.
  check = Check("nvshmem-heap")
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    size = perm.record.bytes_per_device
    problem = selection.nvshmem_heap_reason(table, size)
    if problem:
      check.add("fail", perm.start, f"NVSHMEM: {problem}")
    else:
      check.add("pass", perm.start, f"NVSHMEM; {size} bytes fit the symmetric heap")
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def check_nvshmem_team(
  perms: list[Permute], topology: selection.Topology, source: sources.Source
) -> Check:
  check = Check("nvshmem-team")
  team = source.num_partitions * source.num_replicas
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    try:
      edges = _own_edges(perm, topology, source)
    except ValueError as e:
      check.add("fail", perm.start, f"NVSHMEM, but its edges cannot be placed on the topology: {e}")
      continue
    reason = selection.nvshmem_hang_reason([(s, t) for s, t, _ in edges], team)
    if reason:
      check.add("fail", perm.start, f"NVSHMEM: {reason}")
    else:
      check.add(
        "pass",
        perm.start,
        f"NVSHMEM; all {team} devices of the program have a "
        "source, so every device reaches the barrier",
      )
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def check_nvshmem_runtime(
  perms: list, topology: selection.Topology, source: sources.Source, table: selection.CostTable
) -> Check:
  """What the pinned runtime's NVSHMEM permute needs beside a source for every device
  and room in its heap (nvshmem-team and nvshmem-heap): the core's other rules
  (element types it puts, every edge inside one shared-memory domain, one group of
  ids that are the devices' PEs, neither a collectives group nor a conditional's
  branch around it) and, where XLA's buffer-assignment dump lies beside the module,
  destinations in its heap and no heap buffer live out."""
  check = Check("nvshmem-runtime")
  team = source.num_partitions * source.num_replicas
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    problems = refusals.unsafe_reasons(perm, source, topology, table)
    # The team and heap rules have checks of their own.
    try:
      own = {
        selection.nvshmem_heap_reason(table, perm.record.bytes_per_device),
        selection.nvshmem_hang_reason(
          [(s, t) for s, t, _ in _own_edges(perm, topology, source)], team
        ),
      }
    except ValueError:
      own = set()
    problems = [p for p in problems if p not in own]
    if problems:
      check.add("fail", perm.start, "NVSHMEM: " + "; ".join(problems))
    else:
      note = runtime_rules.heap_assignment_note(perm.start, source.allocations)
      check.add(
        "pass",
        perm.start,
        "NVSHMEM; element types "
        f"{', '.join(sorted(set(collectives.data_element_types(perm.start))))} "
        "and every edge inside one host; its ids are its devices' PEs"
        + (f"; {note}" if note else ""),
      )
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def check_peer_safety(
  perms: list, source: sources.Source, topology: selection.Topology, table: selection.CostTable
) -> Check:
  """Peer and symmetric memory only where the core's rules for them allow."""
  check = Check("peer-safety")
  for perm in perms:
    have = backend_tables.op_backend(perm.record)
    if have not in backend_tables.PLAN_MODE:
      continue
    try:
      reason = refusals.carried_refusal(perm, source, topology, table)
    except (selection.SelectionError, ValueError) as e:
      check.add("fail", perm.start, f"{have}, but its edges cannot be placed: {e}")
      continue
    if reason:
      check.add("fail", perm.start, reason)
    else:
      check.add(
        "pass",
        perm.start,
        f"{have}: the core's safety rule allows it ({_edges_text(perm.edges) or 'no edges'})",
      )
  if not check.results:
    check.note = "no collective-permute uses peer or symmetric memory"
  return check


def _has_memory_spaces(module: HloModule) -> bool:
  for instr in module.instructions():
    for leaf in instr.shape.leaves():
      if leaf.layout and "S(" in leaf.layout:
        return True
  return False


def check_memory_space(perms: list[Permute], source: sources.Source) -> Check:
  check = Check("memory-space")
  module = source.module
  if not any(perm.record.backend == "NVSHMEM" for perm in perms):
    check.note = "no collective-permute uses NVSHMEM"
    return check
  if not _has_memory_spaces(module):
    beside = source.path and buffer_assignment.sibling_path(source.path)
    check.note = (
      "no layout in the module names a memory space S(n), so its text does "
      "not say where the NVSHMEM buffers live; "
      + (
        "the buffer-assignment dump beside it does, and nvshmem-runtime "
        "checks their destinations there"
        if source.allocations
        else f"no buffer-assignment dump lies beside it "
        f"({os.path.basename(str(beside)) if beside else 'none for stdin'})"
      )
    )
    return check
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    comp = perm.start.computation
    shapes = [
      (f"operand %{op.name}", leaf)
      for op in perm.start.operand_instructions()
      for leaf in op.shape.leaves()
    ]
    result = comp.instruction(perm.record.done) if perm.record.done else perm.start
    shapes += [(f"result %{result.name}", leaf) for leaf in result.shape.leaves()]
    # Scalar u32/s32 leaves are async context (sync flags), not data buffers.
    data = [
      (what, leaf)
      for what, leaf in shapes
      if leaf.element_type != "token" and (leaf.dims or leaf.element_type not in ("u32", "s32"))
    ]
    wrong = [
      f"{what} {leaf}" for what, leaf in data if leaf.memory_space != COLLECTIVE_MEMORY_SPACE
    ]
    if wrong:
      check.add(
        "fail",
        perm.start,
        "NVSHMEM buffers outside the collective memory space "
        f"S({COLLECTIVE_MEMORY_SPACE}): " + "; ".join(wrong[:4]),
      )
    else:
      check.add("pass", perm.start, f"{len(shapes)} buffers in S({COLLECTIVE_MEMORY_SPACE})")
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check
