"""Why the core refuses a backend for a permute: the backend the op already carries,
where it sits, and every reason NVSHMEM cannot run it (what explain marks, verify fails)."""

from __future__ import annotations

import hlo_tools.selection as selection
from hlo_tools.model import runtime_rules, sources
from hlo_tools.model.backend_tables import op_backend
from hlo_tools.model.collectives import data_element_types
from hlo_tools.model.decisions import Permute, device_edges, place_of


def carried_refusal(
  perm: Permute, source: sources.Source, topology: selection.Topology, table: selection.CostTable
) -> str | None:
  """Why the core refuses the backend the op already carries where it sits, or None
  (it may run it, or the op runs NCCL or a mode no backend of the core writes).

  The driver's answer where it decided the permute; else the core through the
  binding, asked with the set {nccl, that backend} so that only its rules refuse
  it, never its cost or the set offered: nvshmem-opt asks the same."""
  have = op_backend(perm.record)
  if have == "nccl" or have not in selection.BACKENDS:
    return None
  if perm.decided_by == "nvshmem-opt":
    return perm.current_refused
  return refusal_of(perm, source, topology, table, have, place_of(perm))


def refusal_of(
  perm: Permute,
  source: sources.Source,
  topology: selection.Topology,
  table: selection.CostTable,
  backend: str,
  place: str = "anywhere",
) -> str | None:
  """Why the core's rules refuse `backend` for the permute (`place`: where it sits,
  selection.PLACES), or None: asked with the set {nccl, backend}, so that only the
  backend's own rules can refuse it, never its cost."""
  rec = perm.record
  decision = selection.decide(
    topology,
    table,
    rec.bytes_per_device,
    perm.pairs,
    rec.channel_id is not None,
    source.num_partitions,
    source.num_replicas,
    buffers=rec.buffers,
    backends=("nccl", backend),
    element_types=data_element_types(perm.start),
    place=place,
  )
  return decision["refused"].get(backend)


def unsafe_reasons(
  perm: Permute, source: sources.Source, topology: selection.Topology, table: selection.CostTable
) -> list[str]:
  """Why the backend the op already carries cannot run it, every reason the core's
  records give: its refusal where the op sits (the first rule that fails) and, for
  NVSHMEM, its rules that the first can hide (a device without a source, the heap,
  the program's layout, ids that are not the devices' PEs) and what the
  buffer-assignment dump beside the module says of its heap; [] when it can run it
  or the op runs NCCL. What explain marks and verify fails."""
  have = op_backend(perm.record)
  try:
    reasons = [carried_refusal(perm, source, topology, table)]
    if have == "nvshmem":
      reasons = (
        _nvshmem_records(perm, source, topology, table)
        + reasons
        + [
          selection.nvshmem_pe_reason(
            topology, perm.record.channel_id is not None, source.num_partitions, source.num_replicas
          ),
          runtime_rules.nvshmem_heap_problem(perm.start, source.allocations),
        ]
      )
  except (selection.SelectionError, ValueError) as e:
    return [f"{have}, but its edges cannot be placed on the topology: {e}"]
  return list(dict.fromkeys(r for r in reasons if r))


def _nvshmem_records(
  perm: Permute, source: sources.Source, topology: selection.Topology, table: selection.CostTable
) -> list[str | None]:
  """The core's hang, heap and layout refusals of NVSHMEM for the permute."""
  team = source.num_partitions * source.num_replicas
  try:
    edges = perm.edges or device_edges(
      topology, source, perm.pairs, perm.record.channel_id is not None
    )
  except ValueError:
    edges = []  # the team's rule then names every device without a source
  return [
    selection.nvshmem_hang_reason([(s, t) for s, t, _ in edges], team),
    selection.nvshmem_host_reason(topology, [(s, t) for s, t, _ in edges], team),
    selection.nvshmem_heap_reason(table, perm.record.bytes_per_device),
    selection.layout_refusal(topology, team, "nvshmem"),
  ]
