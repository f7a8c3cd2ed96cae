"""What each backend's runtime needs of a collective-permute beyond the core's rules:
the rule lines the core's backend records give (one per backend, with the code that
applies it), and what only XLA's buffer-assignment dump beside a module says of an
NVSHMEM permute's buffers, which neither the core nor nvshmem-opt reads.

The rules themselves (where NVSHMEM would hang, leave its host's team, put to other
GPUs, overflow its heap or meet a type it has no put for; peer and symmetric memory
across processes or hosts; a collectives group or a conditional's branch around the
permute) are the core's, worded once there: nvshmem-opt's JSON gives each permute's
refusal of the backend it already carries, and model.refusals asks the binding the
same where the driver gave no answer.

Source: the pinned XLA, openxla/xla 3cc8846c (jax v0.9.1), for NVSHMEM's heap.
"""

from __future__ import annotations

from collections.abc import Sequence

from hlo_tools import selection
from hlo_tools.hlo.buffer_assignment import Allocation
from hlo_tools.hlo.ir import HloInstruction

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


def colored_by_xla(
  start: HloInstruction, allocations: dict[str, dict[tuple[int, ...], Allocation]] | None
) -> bool:
  """Whether the buffer assignment shows XLA compiled `start` as an NVSHMEM permute:
  some buffer of it (an operand, or the start's own values) in the collective memory.
  With NVSHMEM on, the patched XLA's coloring puts the buffers an NVSHMEM collective
  uses there (gpu_memory_space_assignment.cc, AssignColors; the series keeps only a
  live-out one off the heap). A permute XLA compiled on NCCL, whose plan a tool wrote
  afterwards, has none there: the assignment is of another plan."""
  if not allocations:
    return False
  names = [start.name] + [op.name for op in start.operand_instructions()]
  return any(
    a.color == COLLECTIVE_COLOR for name in names for a in allocations.get(name, {}).values()
  )


def live_out_values(start: HloInstruction) -> set[tuple[str, tuple[int, ...]]]:
  """The values the module's entry returns, as (instruction, shape index): its root's
  leaves through tuples, get-tuple-elements and bitcasts, which define no buffer of
  their own (a copy does). A permute whose destination shares an allocation with one
  of them writes the buffer the program returns."""
  out: set[tuple[str, tuple[int, ...]]] = set()
  entry = start.computation.module.entry

  def walk(instr: HloInstruction, index: tuple[int, ...], depth: int) -> None:
    if depth > 64:
      return
    operands = instr.operand_instructions()
    if instr.opcode == "tuple" and not index:
      for k, op in enumerate(operands):
        walk(op, (), depth + 1) if op.opcode in (
          "tuple",
          "get-tuple-element",
          "bitcast",
        ) else out.add((op.name, ()))
        out.add((instr.name, (k,)))
      return
    if instr.opcode == "get-tuple-element" and operands:
      walk(operands[0], (int(instr.attributes.get("index", "0")),) + index, depth + 1)
      return
    if instr.opcode == "bitcast" and operands:
      walk(operands[0], index, depth + 1)
      return
    out.add((instr.name, index))

  walk(entry.root, (), 0)
  return out


# Values that hand a buffer on rather than define one: a loop's or branch's carry, the
# permute's own done. One of them returned from the allocation of the permute's
# destination returns that buffer; any other value there (a fusion's) is another
# buffer that reuses the allocation once the destination is dead.
_CARRIERS = ("while", "conditional", "call", "collective-permute-done", "collective-permute-start")


def _returned(
  start: HloInstruction,
  alloc: Allocation,
  allocations: dict[str, dict[tuple[int, ...], Allocation]],
) -> bool:
  entry = start.computation.module.entry
  for name, index in live_out_values(start):
    if name not in entry:
      continue
    instr = entry.instruction(name)
    if instr.opcode not in _CARRIERS:
      continue
    # A carrier returned whole (a loop as the root) returns each of its leaves: every
    # index under the returned one.
    held = [a for i, a in allocations.get(name, {}).items() if i[: len(index)] == index]
    operands = instr.operand_instructions()
    if not held and instr.opcode == "collective-permute-done" and operands:
      # A done defines no buffer: XLA's dump lists what it returns under its start's
      # {1}, the destination the done hands on.
      at_start = allocations.get(operands[0].name, {}).get((1, *index))
      held = [at_start] if at_start is not None else []
    if alloc in held:
      return True
  return False


def nvshmem_heap_problem(
  start: HloInstruction, allocations: dict[str, dict[tuple[int, ...], Allocation]] | None
) -> str | None:
  """Why the NVSHMEM permute `start` cannot put into the NVSHMEM heap by the module's
  buffer assignment (`allocations`, hlo.buffer_assignment): a buffer of the heap
  outlives the run, or a destination lies outside the heap; None when neither.

  Memory spaces are judged only where the assignment is of this plan (colored_by_xla):
  XLA colors buffers by the plan it compiles, so the assignment of a compile where the
  permute ran on NCCL says nothing of where its buffers go once XLA compiles the
  NVSHMEM plan. What holds under any plan is judged always: a destination that is an
  entry parameter (the caller's buffer) or that lives out of the program (left off
  the heap by the series' coloring)."""
  if not allocations or start.opcode != "collective-permute-start":
    return None
  escaping = sorted(
    {
      a.number
      for placed in allocations.values()
      for a in placed.values()
      if a.color == COLLECTIVE_COLOR and a.live_out
    }
  )
  if escaping:
    return (
      f"allocation {escaping[0]} of the collective memory ({COLLECTIVE_COLOR}) may be "
      "live out: each process frees it when its caller does, so later NVSHMEM heap "
      "offsets need not agree across processes and a put lands in another buffer; "
      "the patched XLA keeps live-out buffers off the heap (its NVSHMEM coloring "
      "asks BufferLivesOut)"
    )
  compiled = colored_by_xla(start, allocations)
  held = {i: a for i, a in allocations.get(start.name, {}).items() if i[:1] == (1,)}
  for index, alloc in sorted(held.items()):
    if index + (0,) in held:
      continue  # a combined permute's tuple: its buffers are {1,i}
    where = f"its destination {{{','.join(map(str, index))}}} (allocation {alloc.number})"
    if alloc.parameter is not None:
      return (
        f"{where} is parameter {alloc.parameter}'s buffer, which the caller "
        "allocated outside the NVSHMEM heap (a donated input): a put there lands "
        "elsewhere; the patched emitter runs it on NCCL (CheckNvshmemDestination)"
      )
    if not compiled:
      # An allocation holds several buffers in turn: maybe-live-out says one of them
      # is returned; the destination's is where a carrier of it is (_returned).
      if alloc.live_out and _returned(start, alloc, allocations):
        return (
          f"{where} lives out of the program: the patched XLA's coloring leaves "
          "such a buffer in default memory (it asks BufferLivesOut), off NVSHMEM's "
          "heap, and its emitter then runs the permute on NCCL "
          "(CheckNvshmemDestination)"
        )
      continue  # memory spaces of another plan's compile: not this plan's
    if alloc.color != COLLECTIVE_COLOR:
      return (
        f"{where} is in memory space {alloc.color}, not the collective memory "
        f"({COLLECTIVE_COLOR}) that NVSHMEM's heap serves: the patched emitter runs "
        "it on NCCL (CheckNvshmemDestination)"
      )
  return None


def heap_assignment_note(
  start: HloInstruction, allocations: dict[str, dict[tuple[int, ...], Allocation]] | None
) -> str | None:
  """What the buffer assignment beside the module can say of the NVSHMEM permute
  `start`: None where it is of this plan (or there is none), else why only its
  destinations' parameters and live-out buffers were judged."""
  if (
    not allocations
    or start.opcode != "collective-permute-start"
    or colored_by_xla(start, allocations)
  ):
    return None
  return (
    "the buffer assignment beside the module is of a compile where this permute "
    "was not NVSHMEM (none of its buffers in the collective memory), so its memory "
    "spaces are not this plan's: XLA colors an NVSHMEM permute's buffers when it "
    "compiles the plan; judged there: destinations that are parameters or live out"
  )
