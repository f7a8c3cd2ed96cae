"""Decisions: each collective-permute of a module with the selection core's choice,
as the pass would make it in that module.

The choice comes from the C++ selection core through its bindings
(hlo_tools.selection), the same code the pass runs.
"""

from hlo_tools import cli_io
from hlo_tools import selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core
from hlo_tools.model import driver, modes, options, runtime_rules, sources
from hlo_tools.model.collectives import collective_permutes
from hlo_tools.model.topology import size_note
from hlo_tools.errors import InputError
from hlo_tools.model.sources import strict_pairs

# What choosing each backend writes, from the core's records.
PLAN_BACKEND = {n: r["config_backend"] for n, r in selection.BACKEND_INFO.items()}
# XLA of jax >= 0.10.2 runs peer and symmetric memory through collectives_mode.
PLAN_MODE = {n: r["collectives_mode"] for n, r in selection.BACKEND_INFO.items()
             if r["collectives_mode"]}
NO_MODE = "COLLECTIVES_MODE_INVALID"  # what XLA writes when no mode is chosen: NCCL
# Every value of XLA's CollectivesMode enum (jax 0.10.2); private memory is no
# backend of any set the core plans over.
MODE_BACKEND = {NO_MODE: "nccl", **{mode: n for n, mode in PLAN_MODE.items()},
                "COLLECTIVES_PRIVATE_MEMORY": "private"}


def load_selection(topology_spec, cost_table_path, backends=None, selected=None):
  """`selected` (an options.Selection the caller parsed once), else one parsed from
  the spec, the table's file and the backend set ("nccl,peer"; else the table's)."""
  return selected or options.load(topology_spec, cost_table_path, backends)


def backend_set(table):
  """The backends `table` plans over, e.g. ('nccl', 'peer')."""
  return tuple(table.backends.split(","))


def op_backend(record):
  """The backend an op's backend_config selects: nccl, nvshmem, peer, symmetric,
  or 'private' / the unknown collectives_mode itself (no set contains those)."""
  if record.backend == "NVSHMEM":
    return "nvshmem"
  mode = record.collectives_mode
  if mode is None:
    return "nccl"
  return MODE_BACKEND.get(mode, mode)


def written_backend(record):
  """How the op's backend reads in its backend_config: 'DEFAULT', 'NVSHMEM', or
  'DEFAULT, COLLECTIVES_PEER_MEMORY' where a collectives_mode picks one."""
  mode = record.collectives_mode
  return record.backend if mode in (None, NO_MODE) else f"{record.backend}, {mode}"


def device_edges(topology, source, pairs, cross_partition):
  edges = _selection_core.edge_ids_to_devices(
      topology, [tuple(p) for p in pairs], cross_partition, source.num_partitions,
      source.num_replicas)
  return [(s, t, topology.classify(s, t)) for s, t in edges]


class Permute:
  """One collective-permute with its strict pairs and the core's decision."""

  def __init__(self, record, start, pairs):
    self.record = record
    self.start = start  # the -start / sync / async-start instruction
    self.pairs = pairs
    self.decision = None
    self.edges = []  # [(src device, dst device, link class)] of pairs
    self.error = None


def analyze(source, topology, table, tolerant=False):
  """Permute objects for every collective-permute, decided by the selection core.

  Raises InputError for broken pair lists, and for pairs the topology cannot place
  unless `tolerant` (verify reports those as failed checks): then perm.error says
  why and perm.decision is None.
  """
  module = source.module
  perms = []
  for rec in collective_permutes(module):
    comp = module.computation(rec.computation)
    start = comp.instruction(rec.start)
    permute = start
    if rec.form == "async-wrapped":
      permute = module.computation(rec.wrapped_computation).root
    perm = Permute(rec, start, strict_pairs(source, permute))
    perms.append(perm)
    cross = rec.channel_id is not None
    try:
      perm.edges = device_edges(topology, source, perm.pairs, cross)
      perm.decision = selection.decide(
          topology, table, rec.bytes_per_device, perm.pairs, cross,
          source.num_partitions, source.num_replicas, buffers=rec.buffers)
    except (selection.SelectionError, ValueError) as e:
      if not tolerant:
        raise InputError(f"{source.label}:{start.line}: %{start.name}: {e}") from None
      perm.error, perm.edges = str(e), []
  return perms


def safety_refusal(perm, source, topology, table, backend):
  """Why the core's safety rule refuses `backend` for the permute, or None.

  Asked of the core with the set {nccl, backend}, so that only the backend's own
  rule (hosts, NVLink domain, team, signals) can refuse it, never its cost."""
  decision = selection.decide(
      topology, table, perm.record.bytes_per_device, perm.pairs,
      perm.record.channel_id is not None, source.num_partitions, source.num_replicas,
      buffers=perm.record.buffers, backends=("nccl", backend))
  return decision["refused"].get(backend)


# Where the caller has upstream's answers but none for this permute.
_NO_UPSTREAM = {"backend": None, "source": "unavailable: nvshmem-opt gave no answer for it"}


def _recorded(start):
  """What the pass wrote on the op (frontend attributes), if it ran."""
  attrs = start.frontend_attributes
  if "_nvshmem_plan" not in attrs:
    return None
  modeled = {}
  for item in attrs.get("_nvshmem_modeled_us", "").split(","):
    key, _, value = item.partition("=")
    if key:
      try:
        modeled[key] = float(value)
      except ValueError:
        modeled[key] = None
  return {"plan": attrs.get("_nvshmem_plan"), "reason": attrs.get("_nvshmem_reason"),
          "modeled_us": modeled}



def backend_entries(decision, backends):
  """{backend: {"us": modeled us or None, "refused": reason or None}} over the set."""
  return {b: {"us": decision["backend_us"].get(b), "refused": decision["refused"].get(b)}
          for b in backends}


def pricing(table, decision, nbytes, buffers):
  """{backend: {"link_class", "model"}}: the edge class whose time prices each
  backend that can run the permute (its slowest edge) and whether the table has a
  measured curve there or estimates it (parametric: latency + size / bandwidth)."""
  out = {}
  classes = [c for c, n in decision["edges_by_class"].items() if n]
  for backend, us in decision["backend_us"].items():
    if us is None or not classes:
      continue
    slowest = max(classes, key=lambda c: selection.edge_time_us(table, backend, c, nbytes,
                                                                buffers))
    out[backend] = {"link_class": slowest,
                    "model": ("measured curve" if table.has_measured_curve(backend, slowest)
                              else "parametric")}
  return out


def describe_permute(perm, upstream=None, backends=("nccl", "nvshmem"), upstream_why=None,
                     unsafe=(), table=None):
  """The JSON entry of one collective-permute; `backends` is the set planned over;
  `upstream_why`: why upstream's answers are missing (the driver's message);
  `unsafe`: why the backend the op carries cannot run it (runtime_rules)."""
  rec, d = perm.record, perm.decision
  modeled = {"nccl": d["backend_us"]["nccl"], "nvshmem": d["backend_us"]["nvshmem"],
             "chosen": d["chosen_us"]}
  known = any(n is not None for _, _, n in rec.loops)
  trips = rec.trip_count if rec.trip_count is not None else (
      rec.trips_at_least if known else None)  # at least, where a count is unknown
  up_key = (rec.computation, rec.start)
  up = ({"backend": upstream[up_key], "source": "nvshmem-opt --compare-upstream"}
        if upstream is not None and up_key in upstream
        else {"backend": None, "source": f"unavailable: {upstream_why}"} if upstream_why
        else dict(_NO_UPSTREAM))
  return {
      "computation": rec.computation, "instruction": rec.start, "done": rec.done,
      "form": rec.form, "line": rec.start_line, "done_line": rec.done_line,
      "while_loop": rec.while_loop, "while_computation": rec.while_computation,
      # Runs per step: every enclosing loop's count multiplied; None when one is
      # unknown (trips_at_least then says how many at least).
      "trip_count": rec.trip_count, "trips_at_least": rec.trips_at_least,
      "loops": [{"while": w, "computation": c, "trip_count": n} for w, c, n in rec.loops],
      "channel_id": rec.channel_id,
      "bytes": rec.bytes_per_device, "buffers": rec.buffers,
      "pairs": [list(p) for p in perm.pairs],
      "current_backend": rec.backend, "current_collectives_mode": rec.collectives_mode,
      "current_plan": op_backend(rec),
      "current_unsafe": list(unsafe),
      "priced_by": pricing(table, d, rec.bytes_per_device, rec.buffers) if table else {},
      "edges_by_class": d["edges_by_class"],
      "edges": [{"source": s, "target": t, "link_class": c} for s, t, c in perm.edges],
      "modeled_us": modeled,
      "modeled_loop_us": d["chosen_us"] * trips if trips else None,
      "choice": {"plan": d["plan"],
                 "backend": PLAN_BACKEND.get(d["plan"], d["plan"])},
      "choice_collectives_mode": PLAN_MODE.get(d["plan"]),
      "backends": backend_entries(d, backends),
      "reason": d["reason"],
      "recorded": _recorded(perm.start),
      # The mode its _xla_collectives_mode attribute asks for (None: none).
      "requested_mode": modes.requested(perm.start),
      "upstream": up,
  }


def describe(path, topology_spec, cost_table=None, use_driver=True, source=None,
             num_partitions=None, max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES, upstream=None,
             backends=None, selected=None):
  """What `hlo-tools explain` prints as JSON, for the module at `path` (InputError).

  upstream: upstream's answers when the caller already has them
  (driver.upstream_from_report); else the driver is asked once (use_driver).
  backends: the set to plan over ("nccl,peer"), else the cost table's.
  selected: an options.Selection parsed once by the caller, in place of
  topology_spec, cost_table and backends."""
  selected = load_selection(topology_spec, cost_table, backends, selected)
  topology, table, topology_spec = selected.topology, selected.table, selected.spec
  cost_table, backends = selected.cost_table, selected.backends
  source = source or sources.read_source(path, max_bytes=max_bytes)
  source = sources.resolve_partitions(source, topology, num_partitions)
  perms = analyze(source, topology, table)
  upstream_why = None if upstream is not None or use_driver else "not asked of nvshmem-opt"
  if upstream is None and use_driver and perms:
    upstream, upstream_why = driver.upstream_answers(path, topology_spec, cost_table,
                                                     sources.driver_partitions(source),
                                                     backends and table.backends)
  module = source.module
  return {
      "file": source.label, "module": module.name, "topology": topology_spec,
      "topology_note": size_note(topology_spec, topology,
                                 source.num_partitions * source.num_replicas),
      "cost_table": cost_table, "backends": table.backends,
      "num_partitions": source.num_partitions,
      "num_partitions_from": source.partitions_from,
      "num_replicas": source.num_replicas,
      "collectives": [describe_permute(
          p, upstream, backend_set(table), upstream_why,
          runtime_rules.unsafe_reasons(p, source, topology, table), table)
                      for p in perms],
  }
