"""What `hlo-tools explain` prints as JSON: each permute's entry (decision, loops,
pricing, upstream's answer) and the module's, from one run of nvshmem-opt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hlo_tools.selection as selection
from hlo_tools import bounded_input
from hlo_tools.hlo.ir import HloInstruction
from hlo_tools.model import driver, modes, options, placement, sources
from hlo_tools.model.backend_tables import PLAN_BACKEND, PLAN_MODE, backend_set, op_backend
from hlo_tools.model.collectives import collective_permutes, loop_summary, runs_per_step
from hlo_tools.model.decisions import Permute, analyze
from hlo_tools.model.driver_report import Report
from hlo_tools.model.refusals import unsafe_reasons
from hlo_tools.model.topology import size_note

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
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
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
