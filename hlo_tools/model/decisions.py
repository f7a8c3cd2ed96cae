"""Decisions: each collective-permute of a module with the selection core's choice,
as the pass would make it in that module.

The choice comes from the C++ selection core through its bindings
(hlo_tools.selection), the same code the pass runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core
from hlo_tools.errors import InputError
from hlo_tools.hlo.ir import HloInstruction
from hlo_tools.model import collectives, modes, sources
from hlo_tools.model.collectives import CollectivePermute, collective_permutes, data_element_types
from hlo_tools.model.driver_report import Report
from hlo_tools.model.sources import strict_pairs

# A permute's edge: (source device, target device, link class).
Edge = tuple[int, int, str]


def require_devices(source: sources.Source, topology: selection.Topology) -> None:
  """InputError, as explain's for its first permute, when the topology cannot hold
  the module's devices (partitions x replicas): bad input for every command, not a
  failed check. A module without permutes asks nothing of the topology."""
  first = next(iter(collective_permutes(source.module)), None)
  if first is None:
    return
  try:
    _selection_core.edge_ids_to_devices(
      topology, [], True, source.num_partitions, source.num_replicas
    )
  except ValueError as e:
    raise InputError(f"{source.label}:{first.start_line}: %{first.start}: {e}") from None


def device_edges(
  topology: selection.Topology,
  source: sources.Source,
  pairs: Sequence[Sequence[int]],
  cross_partition: bool,
) -> list[Edge]:
  edges = _selection_core.edge_ids_to_devices(
    topology,
    [(p[0], p[1]) for p in pairs],
    cross_partition,
    source.num_partitions,
    source.num_replicas,
  )
  return [(s, t, topology.classify(s, t)) for s, t in edges]


class Permute:
  """One collective-permute with its strict pairs and the core's decision."""

  def __init__(
    self, record: CollectivePermute, start: HloInstruction, pairs: list[tuple[int, int]]
  ) -> None:
    self.record = record
    self.start = start  # the -start / sync / async-start instruction
    self.pairs = pairs
    self.bytes, self.buffers = record.bytes_per_device, record.buffers
    # [(while, its computation, trip count)], innermost first
    self.loops: list[tuple[str, str, int | None]] = record.loops
    self.decision: dict[str, Any] | None = None
    self.edges: list[Edge] = []  # of pairs
    self.error: str | None = None
    # Who decided: "nvshmem-opt" (its JSON, on the module as XLA parsed it) or
    # "core binding" (this reader's facts, where the driver gave no answer).
    self.decided_by: str | None = None
    self.mark: str | None = None  # the user's _xla_collectives_mode, as written
    # Why the core refuses the backend the op carries where it sits, as the driver
    # said it (its JSON); None: it may, or the driver gave no answer.
    self.current_refused: str | None = None
    # The call or async-start marked _collectives_group that runs it (None: none):
    # the group runs as one thunk with NCCL communicators.
    self.group: str | None = None


def driver_decisions(report: Report | None) -> dict[tuple[str | None, str | None], dict]:
  """{(computation, instruction): decision entry} of a driver report, by the
  permute's name in its input and by the start and done the rewrite made of it
  (the module the driver wrote)."""
  entries: dict[tuple[str | None, str | None], dict] = {}
  for d in report["decisions"] if report is not None else []:
    entries[(d["computation"], d["instruction"])] = cast(dict, d)
    for name in d["new_instructions"]:
      entries.setdefault((d["computation"], name), cast(dict, d))
  return entries


def from_driver(entry: dict) -> dict[str, Any]:
  """The decision as nvshmem-opt's JSON gives it, in selection.decide's shape."""
  modeled = entry["modeled_us"]
  return {
    "plan": entry["plan"],
    "backend": entry["plan"],
    "reason": entry["reason"],
    "backend_us": {b: modeled.get(b) for b in selection.BACKENDS},
    "refused": dict(entry.get("refused") or {}),
    "chosen_us": modeled["chosen"],
    "edges_by_class": entry["edges_by_class"],
  }


def _take_driver_facts(perm: Permute, entry: dict) -> None:
  """The permute as the driver saw it: decision, bytes, buffers, edges, loops."""
  perm.decision, perm.decided_by = from_driver(entry), "nvshmem-opt"
  perm.edges = [tuple(e) for e in entry["edges"]]
  perm.bytes, perm.buffers = entry["bytes"], entry["buffers"]
  perm.loops = [
    (loop["while_loop"], loop["computation"], loop["trip_count"]) for loop in entry["loops"]
  ]
  perm.current_refused = entry.get("current_refused")


def _decide_here(
  perm: Permute, source: sources.Source, topology: selection.Topology, table: selection.CostTable
) -> None:
  """The core's decision from this reader's facts, through the binding."""
  rec = perm.record
  cross = rec.channel_id is not None
  perm.edges = device_edges(topology, source, perm.pairs, cross)
  perm.decision = selection.decide(
    topology,
    table,
    rec.bytes_per_device,
    perm.pairs,
    cross,
    source.num_partitions,
    source.num_replicas,
    buffers=rec.buffers,
    element_types=data_element_types(perm.start),
    place=place_of(perm),
    mark=perm.mark,
  )
  perm.decided_by = "core binding"


def place_of(perm: Permute) -> str:
  """Where the permute sits for the core's rules (selection.PLACES), as nvshmem-opt's
  planner tells the core: under a conditional's branch, inside a collectives group,
  or anywhere."""
  return selection.place_of(bool(perm.record.branch), perm.group is not None)


def analyze(
  source: sources.Source,
  topology: selection.Topology,
  table: selection.CostTable,
  tolerant: bool = False,
  report: Report | None = None,
) -> list[Permute]:
  """Permute objects for every collective-permute, decided by the selection core.

  report: nvshmem-opt's JSON on this module (one run of the driver): each permute
  it decided takes its decision, bytes and device edges from there, as the pass
  computed them on XLA's own parse; the rest (no report, a module XLA refuses)
  are decided here through the binding.

  Raises InputError for broken pair lists, and for pairs the topology cannot place
  unless `tolerant` (verify reports those as failed checks): then perm.error says
  why and perm.decision is None.
  """
  module = source.module
  decided = driver_decisions(report)
  callers = collectives.module_callers(module)
  perms = []
  for rec in collective_permutes(module):
    comp = module.computation(rec.computation)
    start = comp.instruction(rec.start)
    permute = start
    if rec.form == "async-wrapped" and rec.wrapped_computation:
      permute = module.computation(rec.wrapped_computation).root
    perm = Permute(rec, start, strict_pairs(source, permute))
    perm.mark = user_mark(start) or user_mark(permute)
    if perm.mark is not None and modes.mark_mode(perm.mark) is None:
      # No XLA runs it (the patched one fails the compile): bad input, never a verdict.
      raise InputError(
        f"{source.label}:{start.line}: %{start.name}: {modes.ATTRIBUTE}="
        f'"{perm.mark}" names no collectives mode '
        f"({', '.join(modes.MODES)}); the patched XLA fails such a "
        "compile, and no XLA runs it"
      )
    perm.group = collectives.enclosing_group(callers, rec.computation)
    perms.append(perm)
    entry = decided.get((rec.computation, rec.start)) or decided.get(
      (rec.wrapped_computation, permute.name)
    )
    if entry is not None:
      _take_driver_facts(perm, entry)
    else:
      try:
        _decide_here(perm, source, topology, table)
      except (selection.SelectionError, ValueError) as e:
        if not tolerant:
          raise InputError(f"{source.label}:{start.line}: %{start.name}: {e}") from None
        perm.error, perm.edges = str(e), []
  return perms


def user_mark(instr: HloInstruction) -> str | None:
  """The user's _xla_collectives_mode on the permute, as written; None without, or
  where a tool wrote it as its own choice (modes.user_mark)."""
  return modes.user_mark(instr)
