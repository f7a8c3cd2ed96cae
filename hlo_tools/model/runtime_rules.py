"""What each backend's runtime needs of a collective-permute beyond the core's rules:
the rule lines the core's backend records give (one per backend, with the code that
applies it), and what only XLA's buffer-assignment dump beside a module says of an
NVSHMEM permute's buffers, which neither the core nor nvshmem-opt reads.

The rules themselves (where NVSHMEM would hang, leave its host's team, put to other
GPUs, overflow its heap or meet a type it has no put for; peer and symmetric memory
across processes or hosts; a collectives group or a conditional's branch around the
permute) are the core's, worded once there: nvshmem-opt's JSON gives each permute's
refusal of the backend it already carries, and model.decisions asks the binding the
same where the driver gave no answer.

Source: the pinned XLA, openxla/xla 3cc8846c (jax v0.9.1), for NVSHMEM's heap.
"""

from __future__ import annotations

from collections.abc import Sequence

from hlo_tools import selection
from hlo_tools.hlo.buffer_assignment import Allocation
from hlo_tools.hlo.reader import HloInstruction

# One line per backend: the rule its runtime applies, with the code that applies it
# (the core's backend records).
RULES = {name: info["rule"] for name, info in selection.BACKEND_INFO.items()}


def rule_lines(backends: str | Sequence[str]) -> list[str]:
  """The RULES lines of a backend set ("nccl,peer" or a sequence), NCCL last."""
  names = backends.split(",") if isinstance(backends, str) else list(backends)
  return [RULES[b] for b in names if b != "nccl" and b in RULES] + [RULES["nccl"]]


# MemorySpaceColor::kCollective (gpu_memory_space_assignment.h:33 at the pin): the
# buffers XLA allocates through the collective allocator, NVSHMEM's heap.
COLLECTIVE_COLOR = 1


def nvshmem_heap_problem(start: HloInstruction,
                         allocations: dict[str, dict[tuple[int, ...], Allocation]] | None
                         ) -> str | None:
  """Why the NVSHMEM permute `start` cannot put into the NVSHMEM heap by the module's
  buffer assignment (`allocations`, hlo.buffer_assignment): a buffer of the heap
  outlives the run, or a destination lies outside the heap; None when neither."""
  if not allocations or start.opcode != "collective-permute-start":
    return None
  escaping = sorted({a.number for placed in allocations.values() for a in placed.values()
                     if a.color == COLLECTIVE_COLOR and a.live_out})
  if escaping:
    return (f"allocation {escaping[0]} of the collective memory ({COLLECTIVE_COLOR}) may be "
            "live out: each process frees it when its caller does, so later NVSHMEM heap "
            "offsets need not agree across processes and a put lands in another buffer; "
            "the patched XLA keeps live-out buffers off the heap (its NVSHMEM coloring "
            "asks BufferLivesOut)")
  held = {i: a for i, a in allocations.get(start.name, {}).items() if i[:1] == (1,)}
  for index, alloc in sorted(held.items()):
    if index + (0,) in held:
      continue  # a combined permute's tuple: its buffers are {1,i}
    where = f"its destination {{{','.join(map(str, index))}}} (allocation {alloc.number})"
    if alloc.parameter is not None:
      return (f"{where} is parameter {alloc.parameter}'s buffer, which the caller "
              "allocated outside the NVSHMEM heap (a donated input): a put there lands "
              "elsewhere; the patched emitter runs it on NCCL (CheckNvshmemDestination)")
    if alloc.color != COLLECTIVE_COLOR:
      return (f"{where} is in memory space {alloc.color}, not the collective memory "
              f"({COLLECTIVE_COLOR}) that NVSHMEM's heap serves: the patched emitter runs "
              "it on NCCL (CheckNvshmemDestination)")
  return None
