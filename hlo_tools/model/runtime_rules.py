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


_GROUPS = weakref.WeakKeyDictionary()  # module -> collectives_groups(module)


def collectives_groups(module):
  """Names of the computations that a call or async-start marked
  `_collectives_group` runs as one collectives group (read once per module)."""
  if module not in _GROUPS:
    _GROUPS[module] = frozenset(
        name for instr in module.instructions()
        if instr.opcode in ("call", "async-start")
        and "_collectives_group" in instr.frontend_attributes
        for name in instr.called_computations)
  return _GROUPS[module]


def nvshmem_group_problem(perm, groups):
  """Why NVSHMEM cannot run `perm` because it is inside one of `groups`, or None."""
  if perm.record.computation not in groups:
    return None
  return ("inside a collectives group (_collectives_group): the group runs as one "
          "thunk that needs NCCL communicators, which the NVSHMEM thunk has not "
          "(collective_group_thunk.cc:81); the patched emitter runs it on NCCL")


# MemorySpaceColor::kCollective (gpu_memory_space_assignment.h:33 at the pin): the
# buffers XLA allocates through the collective allocator, NVSHMEM's heap.
COLLECTIVE_COLOR = 1


def nvshmem_destination_problem(perm, allocations):
  """Why a destination of the NVSHMEM permute-start `perm` is outside the NVSHMEM heap
  by the module's buffer assignment (`allocations`, hlo.buffer_assignment), or None."""
  start = perm.start
  if not allocations or start.opcode != "collective-permute-start":
    return None
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
  problems = [nvshmem_type_problem(perm.start)]
  try:
    edges = perm.edges or decisions.device_edges(topology, source, perm.pairs,
                                                 perm.record.channel_id is not None)
  except ValueError:
    edges = []
  problems.append(nvshmem_domain_problem(edges, topology))
  problems.append(selection.nvshmem_pe_reason(
      topology, perm.record.channel_id is not None, source.num_partitions,
      source.num_replicas))
  problems.append(nvshmem_group_problem(perm, collectives_groups(source.module)))
  problems.append(nvshmem_destination_problem(perm, source.allocations))
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
