"""What each backend's runtime really needs of a collective-permute, read from its code,
for the plans the tools are given (hand-edited, upstream's assigner, or ours).

The selection core holds the rules: where NVSHMEM would hang (a device of the
program without a source), put to other GPUs (pairs over several groups, a logical
device off its PE), overflow its heap, or put an element type the runtime has no put
for (selection.decide, selection.nvshmem_hang_reason, selection.nvshmem_pe_reason,
selection.nvshmem_heap_reason, selection.nvshmem_puts_type).
This module words them per permute for verify and explain alike, listing every
problem an op already carries rather than the core's first refusal.

Sources: the pinned XLA, openxla/xla 3cc8846c (jax v0.9.1), for NVSHMEM; the XLA of
jax 0.10.2, openxla/xla 5a9e73cbd92530cac2ac36f4736a774b2412afe2, for peer and
symmetric memory.
"""

import weakref

from hlo_tools import selection
from hlo_tools.model.collectives import data_element_types

# One line per backend: the rule its runtime applies, with the code that applies it
# (the core's backend records).
RULES = {name: info["rule"] for name, info in selection.BACKEND_INFO.items()}


def rule_lines(backends):
  """The RULES lines of a backend set ("nccl,peer" or a sequence), NCCL last."""
  names = backends.split(",") if isinstance(backends, str) else list(backends)
  return [RULES[b] for b in names if b != "nccl" and b in RULES] + [RULES["nccl"]]


def nvshmem_type_problem(start):
  """Why NVSHMEM cannot put the permute's buffers at the pin, or None."""
  bad = sorted({t for t in data_element_types(start) if not selection.nvshmem_puts_type(t)})
  if not bad:
    return None
  return (f"element type {', '.join(bad)} is not one NVSHMEM puts at the pinned XLA "
          "(F64, F32, F16, BF16, S32, S64, U32, U64; nvshmem_communicator.cc:367): it "
          "fails at run time with 'Invalid NVSHMEM send type'")


def nvshmem_domain_problem(device_edges, topology):
  """Why an NVSHMEM permute over `device_edges` [(src, dst, link class)] leaves one
  shared-memory domain, or None. A host is the domain: whether NVSHMEM_TEAM_SHARED
  spans a multi-host NVLink domain (:nvlN) is not established, so those edges are
  refused too."""
  per_host = topology.gpus_per_host
  crossing = [(s, t) for s, t, _ in device_edges if s // per_host != t // per_host]
  if not crossing:
    return None
  listed = ", ".join(f"{s}->{t}" for s, t in crossing[:4]) + (
      ", ..." if len(crossing) > 4 else "")
  return (f"{len(crossing)} of {len(device_edges)} edges ({listed}) cross hosts: the "
          "pinned XLA's receiver waits only on NVSHMEM_TEAM_SHARED, the PEs of its own "
          "shared-memory domain (nvshmem_communicator.cc:179), so it can read the "
          "buffer before the remote put lands")


def nvshmem_local_copy_problem(device_edges):
  """Why an NVSHMEM permute whose every pair is a device to itself should not carry
  NVSHMEM, or None (the core's kLocalCopy)."""
  if not device_edges or any(s != t for s, t, _ in device_edges):
    return None
  return ("every pair is a device to itself: the pinned XLA copies it locally "
          "(thunk_emitter.cc:1529-1541), and the NVSHMEM config only places its buffers "
          "on the symmetric heap, whose set-up and allocations every process of the job "
          "must join")


_NCCL_ONLY = weakref.WeakKeyDictionary()  # module -> nccl_only_computations(module)


def nccl_only_computations(module):
  """{computation name: "group" or "branch"} for the computations whose permutes the
  patched XLA keeps on NCCL, with all they call: those a call or async-start marked
  `_collectives_group` runs, and a conditional's branches (read once per module)."""
  if module not in _NCCL_ONLY:
    calls = {c.name: [n for i in c.instructions for n in i.called_computations]
             for c in module.computations}
    found = {}
    for instr in module.instructions():
      grouped = (instr.opcode in ("call", "async-start")
                 and "_collectives_group" in instr.frontend_attributes)
      if grouped or instr.opcode == "conditional":
        pending = list(instr.called_computations)
        while pending:
          name = pending.pop()
          if found.setdefault(name, "group" if grouped else "branch") and name in calls:
            pending.extend(n for n in calls.pop(name) if n not in found)
    _NCCL_ONLY[module] = found
  return _NCCL_ONLY[module]


def nvshmem_control_problem(perm, nccl_only):
  """Why NVSHMEM cannot run `perm` where it sits (`nccl_only`, from
  nccl_only_computations), or None."""
  where = nccl_only.get(perm.record.computation)
  if where == "group":
    return ("inside a collectives group (_collectives_group): the group runs as one "
            "thunk that needs NCCL communicators, which the NVSHMEM thunk has not "
            "(collective_group_thunk.cc:81); the patched emitter runs it on NCCL")
  if where == "branch":
    return ("under a conditional's branch: devices may take different branches, and the "
            "thunk puts to the address of the sender's own destination, so the data "
            "lands in another buffer; the patched emitter runs it on NCCL")
  return None


# MemorySpaceColor::kCollective (gpu_memory_space_assignment.h:33 at the pin): the
# buffers XLA allocates through the collective allocator, NVSHMEM's heap.
COLLECTIVE_COLOR = 1


def nvshmem_heap_problem(perm, allocations):
  """Why the NVSHMEM permute-start `perm` cannot put into the NVSHMEM heap by the
  module's buffer assignment (`allocations`, hlo.buffer_assignment): a buffer of the
  heap outlives the run, or a destination lies outside the heap; None when neither."""
  start = perm.start
  if not allocations or start.opcode != "collective-permute-start":
    return None
  escaping = sorted({a.number for placed in allocations.values() for a in placed.values()
                     if a.color == COLLECTIVE_COLOR and a.live_out})
  if escaping:
    return (f"allocation {escaping[0]} of the collective memory ({COLLECTIVE_COLOR}) may be "
            "live out: each process frees it when its caller does, so later NVSHMEM heap "
            "offsets need not agree across processes and a put lands in another buffer; "
            "the patched emitter runs it on NCCL (CheckCollectiveMemoryFreedEachRun)")
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


def nvshmem_problems(perm, topology, source):
  """Every reason in this module why the pinned runtime cannot run `perm`
  (a model.decisions.Permute) on NVSHMEM; [] when none does. Edges the topology
  cannot place are left to the team check, which reports them."""
  from hlo_tools.model import decisions  # pylint: disable=import-outside-toplevel
  team = source.num_partitions * source.num_replicas
  problems = [selection.layout_refusal(topology, team, "nvshmem"), nvshmem_type_problem(perm.start)]
  try:
    edges = perm.edges or decisions.device_edges(topology, source, perm.pairs,
                                                 perm.record.channel_id is not None)
  except ValueError:
    edges = []
  problems.append(nvshmem_local_copy_problem(edges))
  problems.append(nvshmem_domain_problem(edges, topology))
  problems.append(selection.nvshmem_pe_reason(
      topology, perm.record.channel_id is not None, source.num_partitions,
      source.num_replicas))
  problems.append(nvshmem_control_problem(perm, nccl_only_computations(source.module)))
  problems.append(nvshmem_heap_problem(perm, source.allocations))
  return [p for p in problems if p]


def unsafe_reasons(perm, source, topology, table):
  """Why the backend the op already carries cannot run it, by its runtime's rules
  (those above, and the core's hang, heap and peer/symmetric rules); [] when it can
  or the op runs NCCL. What explain marks and verify fails."""
  from hlo_tools.model import decisions  # pylint: disable=import-outside-toplevel
  have = decisions.op_backend(perm.record)
  try:
    if have == "nvshmem":
      reasons = nvshmem_problems(perm, topology, source)
      team = source.num_partitions * source.num_replicas
      hang = selection.nvshmem_hang_reason([(s, t) for s, t, _ in perm.edges], team)
      heap = selection.nvshmem_heap_reason(table, perm.record.bytes_per_device)
      return [r for r in (hang, heap) if r] + reasons
    if have in decisions.PLAN_MODE:
      reason = decisions.safety_refusal(perm, source, topology, table, have)
      return [reason] if reason else []
  except (selection.SelectionError, ValueError) as e:
    return [f"{have}, but its edges cannot be placed on the topology: {e}"]
  return []
