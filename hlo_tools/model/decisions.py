"""Decisions: each collective-permute of a module with the selection core's choice,
as the pass would make it in that module.

The choice comes from the C++ selection core through its bindings
(hlo_tools.selection), the same code the pass runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core, cli_io
from hlo_tools.errors import InputError
from hlo_tools.hlo.ir import HloInstruction
from hlo_tools.model import collectives, driver, modes, options, placement, runtime_rules, sources
from hlo_tools.model.collectives import (
  CollectivePermute,
  collective_permutes,
  data_element_types,
  loop_summary,
  runs_per_step,
)
from hlo_tools.model.driver_report import Report
from hlo_tools.model.sources import strict_pairs
from hlo_tools.model.topology import size_note

# A permute's edge: (source device, target device, link class).
Edge = tuple[int, int, str]

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
  rec = perm.record
  return "branch" if rec.branch else "group" if perm.group else "anywhere"


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


# Where the caller has upstream's answers but none for this permute.
_NO_UPSTREAM = {"backend": None, "source": "unavailable: nvshmem-opt gave no answer for it"}


def _recorded(start: HloInstruction) -> dict[str, Any] | None:
  """What the pass wrote on the op (frontend attributes), if it ran."""
  attrs = start.frontend_attributes
  if "_nvshmem_plan" not in attrs:
    return None
  modeled: dict[str, float | None] = {}
  for item in attrs.get("_nvshmem_modeled_us", "").split(","):
    key, _, value = item.partition("=")
    if key:
      try:
        modeled[key] = float(value)
      except ValueError:
        modeled[key] = None
  return {
    "plan": attrs.get("_nvshmem_plan"),
    "reason": attrs.get("_nvshmem_reason"),
    "modeled_us": modeled,
  }


def backend_entries(decision: dict[str, Any], backends: Sequence[str]) -> dict[str, dict[str, Any]]:
  """{backend: {"us": modeled us or None, "refused": reason or None}} over the set."""
  return {
    b: {"us": decision["backend_us"].get(b), "refused": decision["refused"].get(b)}
    for b in backends
  }


def pricing(
  table: selection.CostTable, decision: dict[str, Any], nbytes: int, buffers: int
) -> dict[str, dict[str, str]]:
  """{backend: {"link_class", "model"}}: the edge class whose time prices each
  backend that can run the permute (its slowest edge) and whether the table has a
  measured curve there or estimates it (parametric: latency + size / bandwidth)."""
  out = {}
  classes = [c for c, n in decision["edges_by_class"].items() if n]
  for backend, us in decision["backend_us"].items():
    if us is None or not classes:
      continue
    slowest = max(classes, key=lambda c: selection.edge_time_us(table, backend, c, nbytes, buffers))
    out[backend] = {
      "link_class": slowest,
      "model": ("measured curve" if table.has_measured_curve(backend, slowest) else "parametric"),
    }
  return out


def describe_permute(
  perm: Permute,
  upstream: dict | None = None,
  backends: Sequence[str] = ("nccl", "nvshmem"),
  upstream_why: str | None = None,
  unsafe: Sequence[str] = (),
  table: selection.CostTable | None = None,
) -> dict[str, Any]:
  """The JSON entry of one collective-permute; `backends` is the set planned over;
  `upstream_why`: why upstream's answers are missing (the driver's message);
  `unsafe`: why the backend the op carries cannot run it (runtime_rules)."""
  rec, d = perm.record, perm.decision
  assert d is not None, "describe_permute of an undecided permute"
  # Every backend of the core by name (None where refused or not offered), as in
  # the driver's JSON, then the chosen one's.
  modeled = {**{b: d["backend_us"].get(b) for b in selection.BACKENDS}, "chosen": d["chosen_us"]}
  loop, loop_comp, trip_count, least = loop_summary(perm.loops)
  at_least: int | None = least
  known = any(n is not None for _, _, n in perm.loops)
  runs, bound = runs_per_step(perm.loops, rec.branch is not None)
  # Runs the loop figure multiplies by: exact, at least or at most (runs_bound).
  trips = runs if known and bound != "unknown" else None
  if rec.branch is not None:
    trip_count, at_least = None, None  # a branch runs on some trips only
  up_key = (rec.computation, rec.start)
  up = (
    {"backend": upstream[up_key], "source": "nvshmem-opt --compare-upstream"}
    if upstream is not None and up_key in upstream
    else {"backend": None, "source": f"unavailable: {upstream_why}"}
    if upstream_why
    else dict(_NO_UPSTREAM)
  )
  return {
    "computation": rec.computation,
    "instruction": rec.start,
    "done": rec.done,
    "form": rec.form,
    "line": rec.start_line,
    "done_line": rec.done_line,
    "while_loop": loop,
    "while_computation": loop_comp,
    # Runs per step: every enclosing loop's count multiplied; None when one is
    # unknown (trips_at_least then says how many at least) or under a
    # conditional's branch (trips_at_most then bounds it).
    "trip_count": trip_count,
    "trips_at_least": at_least,
    "trips_at_most": runs if bound == "at most" else None,
    # What the per-step figures multiply by, and whether it is exact or a bound.
    "runs_per_step": runs,
    "runs_bound": bound,
    "under_branch": (
      {"conditional": rec.branch[0], "computation": rec.branch[1], "branch": rec.branch[2]}
      if rec.branch
      else None
    ),
    "loops": [{"while": w, "computation": c, "trip_count": n} for w, c, n in perm.loops],
    "channel_id": rec.channel_id,
    "bytes": perm.bytes,
    "buffers": perm.buffers,
    "decided_by": perm.decided_by,
    "pairs": [list(p) for p in perm.pairs],
    "current_backend": rec.backend,
    "current_collectives_mode": rec.collectives_mode,
    "current_plan": op_backend(rec),
    "current_unsafe": list(unsafe),
    "priced_by": pricing(table, d, perm.bytes, perm.buffers) if table else {},
    "edges_by_class": d["edges_by_class"],
    "edges": [{"source": s, "target": t, "link_class": c} for s, t, c in perm.edges],
    "modeled_us": modeled,
    "modeled_loop_us": (d["chosen_us"] * trips if trips and d["chosen_us"] is not None else None),
    "choice": {"plan": d["plan"], "backend": PLAN_BACKEND.get(d["plan"], d["plan"])},
    "choice_collectives_mode": PLAN_MODE.get(d["plan"]),
    "backends": backend_entries(d, backends),
    "reason": d["reason"],
    "recorded": _recorded(perm.start),
    # The mode its _xla_collectives_mode attribute asks for (None: none).
    "requested_mode": modes.requested(perm.start),
    # The user's mark, which no tool overrides: the choice is the mark's backend.
    "user_mark": perm.mark,
    "upstream": up,
  }


def module_report(
  path: str,
  selected: options.Selection,
  source: sources.Source,
  use_driver: bool = True,
  num_partitions: int | None = None,
) -> tuple[Report | None, str | None]:
  """(nvshmem-opt's JSON on the module with upstream's answers, None) from its one
  run on `selected` as given (the driver places it on the module's own map), or
  (None, why there is none). No run for a module without permutes."""
  if not use_driver:
    return None, "not asked of nvshmem-opt"
  if not collective_permutes(source.module):
    return None, None
  return driver.explain_report(
    path,
    selected.spec,
    selected.driver_table(),
    num_partitions,
    selected.backends and selected.table.backends,
    module_config=placement.config_path(path),
  )


def describe(
  path: str,
  selected: options.Selection,
  use_driver: bool = True,
  source: sources.Source | None = None,
  num_partitions: int | None = None,
  max_bytes: int = cli_io.DEFAULT_MAX_INPUT_BYTES,
  report: Report | None = None,
  upstream_why: str | None = None,
) -> dict:
  """What `hlo-tools explain` prints as JSON, for the module at `path` (InputError).

  selected: the topology, cost table and backend set, parsed once by the caller
  (options.load), placed on the module's own device map as the driver's JSON says
  (placement.settled).
  report: nvshmem-opt's JSON on this module with upstream's answers, when the
  caller already ran it (or upstream_why, why it has none); else the driver is
  asked once (use_driver). Its decisions and partition count are the module's
  facts; without it (or for a module the driver refuses) this reader's facts are
  decided through the binding.
  num_partitions: the user's --num-partitions, else the module's own count."""
  source = source or sources.read_source(path, max_bytes=max_bytes)
  if report is None and upstream_why is None:
    report, upstream_why = module_report(path, selected, source, use_driver, num_partitions)
  selected = placement.settled(selected, path, report, max_bytes)
  topology, table, topology_spec = selected.topology, selected.table, selected.spec
  cost_table = selected.cost_table
  source = sources.resolve_partitions(source, topology, num_partitions)
  sources.adopt_driver_partitions(source, report)
  perms = analyze(source, topology, table, report=report)
  upstream = driver.upstream_from_report(report) if report is not None else None
  module = source.module
  return {
    "file": source.label,
    "module": module.name,
    "topology": topology_spec,
    "processes": placement.layout_text(selected),
    "placement": placement.placement_text(selected),
    "topology_note": size_note(
      topology_spec, topology, source.num_partitions * source.num_replicas
    ),
    "cost_table": cost_table,
    "backends": table.backends,
    "num_partitions": source.num_partitions,
    "num_partitions_from": source.partitions_from,
    "num_replicas": source.num_replicas,
    "collectives": [
      describe_permute(
        p,
        upstream,
        backend_set(table),
        upstream_why,
        unsafe_reasons(p, source, topology, table),
        table,
      )
      for p in perms
    ],
  }
