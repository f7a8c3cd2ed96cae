"""Decisions: each collective-permute of a module with the selection core's choice,
as the pass would make it in that module.

The choice comes from the C++ selection core through its bindings
(hlo_tools.selection), the same code the pass runs.
"""

from hlo_tools import cli_io
from hlo_tools import selection
from hlo_tools.model import driver, source as source_mod
from hlo_tools.model.collectives import collective_permutes
from hlo_tools.model.source import InputError, strict_pairs

# Link classes whose edges stay inside one NVLink domain: what NVSHMEM may use.
NVLINK_CLASSES = ("same_device", "nvlink", "nvlink_domain")
PLAN_BACKEND = {"nvshmem": "NVSHMEM", "nccl": "DEFAULT", "split": "SPLIT",
                "peer": "DEFAULT", "symmetric": "DEFAULT"}
# XLA of jax >= 0.10.2 runs peer and symmetric memory through collectives_mode.
PLAN_MODE = {"peer": "COLLECTIVES_PEER_MEMORY", "symmetric": "COLLECTIVES_SYMMETRIC_MEMORY"}
NO_MODE = "COLLECTIVES_MODE_INVALID"  # what XLA writes when no mode is chosen: NCCL
# Every value of XLA's CollectivesMode enum (jax 0.10.2); private memory is no
# backend of any set the core plans over.
MODE_BACKEND = {NO_MODE: "nccl", "COLLECTIVES_PEER_MEMORY": "peer",
                "COLLECTIVES_SYMMETRIC_MEMORY": "symmetric",
                "COLLECTIVES_PRIVATE_MEMORY": "private"}
SPLIT_SUFFIXES = (".nvshmem-start", ".nccl-start")


def load_selection(topology_spec, cost_table_path, backends=None):
  """(topology, cost table); the table plans over `backends` ("nccl,peer") when
  given, else over its own set, as `nvshmem-opt --backends` does."""
  try:
    topology = selection.parse_topology(topology_spec)
    table = selection.load_cost_table(cost_table_path)
  except selection.SelectionError as e:
    raise InputError(str(e)) from None
  if backends:
    try:
      table = selection.with_backends(table, backends)
    except selection.SelectionError as e:
      raise InputError(f"--backends: {e}") from None
  return topology, table


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


def split_group(record, instr):
  """(computation, original name) of a split part, else None."""
  part = instr.frontend_attributes.get("_nvshmem_split_part")
  if part is None:
    return None
  base = record.start
  for suffix in SPLIT_SUFFIXES:
    if base.endswith(suffix):
      base = base[:-len(suffix)]
  return record.computation, base


def device_edges(topology, source, pairs, cross_partition):
  edges = selection.core.edge_ids_to_devices(
      topology, [tuple(p) for p in pairs], cross_partition, source.num_partitions,
      source.num_replicas)
  return [(s, t, topology.classify(s, t)) for s, t in edges]


def what_the_pass_does(module, decision):
  """The core's decision as the pass applies it in `module`.

  In a module that is already scheduled the pass does not split (new instructions
  would lose the start/done overlap the schedule built) and keeps NCCL; the model's
  preference stays in decision["model_plan"].
  """
  decision["model_plan"] = decision["plan"]
  if decision["plan"] == "split" and module.is_scheduled:
    decision.update(
        plan="nccl", chosen_us=decision["nccl_us"], nvshmem_edge=[],
        reason=(f"NCCL: the model prefers a split ({decision['split_us']:.2f} us vs NCCL "
                f"{decision['nccl_us']:.2f} us) but the module is already scheduled, and "
                "splitting would lose the start/done overlap"))
  return decision


class Permute:
  """One collective-permute with its strict pairs and the core's decision."""

  def __init__(self, record, start, pairs):
    self.record = record
    self.start = start  # the -start / sync / async-start instruction
    self.pairs = pairs
    self.split_part = start.frontend_attributes.get("_nvshmem_split_part")
    self.group = None  # split parts: all parts of the original permute
    self.decision = None
    self.decided_pairs = pairs
    self.edges = []  # [(src device, dst device, link class)] of decided_pairs
    self.error = None


def analyze(source, topology, table, tolerant=False):
  """Permute objects for every collective-permute, decided by the selection core.

  Raises InputError for broken pair lists, and for pairs the topology cannot place
  unless `tolerant` (verify reports those as failed checks): then perm.error says
  why and perm.decision is None.
  """
  module = source.module
  perms = []
  groups = {}
  for rec in collective_permutes(module):
    comp = module.computation(rec.computation)
    start = comp.instruction(rec.start)
    permute = start
    if rec.form == "async-wrapped":
      permute = module.computation(rec.wrapped_computation).root
    perm = Permute(rec, start, strict_pairs(source, permute))
    key = split_group(rec, start)
    if key is not None:
      groups.setdefault(key, []).append(perm)
      perm.group = groups[key]
    perms.append(perm)
  for perm in perms:
    if perm.group is not None:
      perm.decided_pairs = [p for part in perm.group for p in part.pairs]
    cross = perm.record.channel_id is not None
    try:
      perm.edges = device_edges(topology, source, perm.decided_pairs, cross)
      perm.decision = what_the_pass_does(module, selection.decide(
          topology, table, perm.record.bytes_per_device, perm.decided_pairs, cross,
          source.num_partitions, source.num_replicas, buffers=perm.record.buffers))
    except (selection.SelectionError, ValueError) as e:
      if tolerant:
        perm.error, perm.edges = str(e), []
        continue
      raise InputError(f"{source.label}:{perm.start.line}: %{perm.start.name}: "
                       f"{e}") from None
  return perms


def safety_refusal(perm, source, topology, table, backend):
  """Why the core's safety rule refuses `backend` for the permute, or None.

  Asked of the core with the set {nccl, backend}, so that only the backend's own
  rule (hosts, NVLink domain, team, signals) can refuse it, never its cost."""
  decision = selection.decide(
      topology, table, perm.record.bytes_per_device, perm.decided_pairs,
      perm.record.channel_id is not None, source.num_partitions, source.num_replicas,
      buffers=perm.record.buffers, backends=("nccl", backend))
  return decision["refused"].get(backend)


_NO_UPSTREAM = {"backend": None, "source": "unavailable: nvshmem-opt is not built or "
                "could not load the module"}


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
          "modeled_us": modeled, "split_part": attrs.get("_nvshmem_split_part")}



def backend_entries(decision, backends):
  """{backend: {"us": modeled us or None, "refused": reason or None}} over the set."""
  return {b: {"us": decision["backend_us"].get(b), "refused": decision["refused"].get(b)}
          for b in backends}


def describe_permute(perm, upstream=None, backends=("nccl", "nvshmem")):
  """The JSON entry of one collective-permute; `backends` is the set planned over."""
  rec, d = perm.record, perm.decision
  modeled = {"nccl": d["nccl_us"], "nvshmem": d["nvshmem_us"], "split": d["split_us"],
             "chosen": d["chosen_us"]}
  trips = rec.trip_count
  up_key = (rec.computation, rec.start)
  up = ({"backend": upstream[up_key], "source": "nvshmem-opt --compare-upstream"}
        if upstream is not None and up_key in upstream else dict(_NO_UPSTREAM))
  return {
      "computation": rec.computation, "instruction": rec.start, "done": rec.done,
      "form": rec.form, "line": rec.start_line, "done_line": rec.done_line,
      "while_loop": rec.while_loop, "while_computation": rec.while_computation,
      "trip_count": trips, "channel_id": rec.channel_id,
      "bytes": rec.bytes_per_device, "buffers": rec.buffers,
      "pairs": [list(p) for p in perm.pairs],
      "current_backend": rec.backend, "current_collectives_mode": rec.collectives_mode,
      "current_plan": op_backend(rec), "split_part": perm.split_part,
      "decided_on": "union of split parts" if perm.group else "own pairs",
      "edges_by_class": d["edges_by_class"],
      "edges": [{"source": s, "target": t, "link_class": c} for s, t, c in perm.edges],
      "modeled_us": modeled,
      "modeled_loop_us": d["chosen_us"] * trips if trips else None,
      "choice": {"plan": d["plan"],
                 "backend": PLAN_BACKEND.get(d["plan"], d["plan"])},
      "choice_collectives_mode": PLAN_MODE.get(d["plan"]),
      "backends": backend_entries(d, backends),
      "model_plan": d.get("model_plan", d["plan"]),
      "reason": d["reason"],
      "recorded": _recorded(perm.start),
      "upstream": up,
  }


def describe(path, topology_spec, cost_table=None, use_driver=True, source=None,
             num_partitions=None, max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES, upstream=None,
             backends=None):
  """What `hlo-tools explain` prints as JSON, for the module at `path` (InputError).

  upstream: upstream's answers when the caller already has them
  (driver.upstream_from_report); else the driver is asked once (use_driver).
  backends: the set to plan over ("nccl,peer"), else the cost table's."""
  topology, table = load_selection(topology_spec, cost_table, backends)
  source = source or source_mod.read_source(path, max_bytes=max_bytes)
  source = source_mod.resolve_partitions(source, topology, num_partitions)
  perms = analyze(source, topology, table)
  if upstream is None and use_driver and perms:
    upstream = driver.upstream_answers(path, topology_spec, cost_table,
                                       source_mod.driver_partitions(source),
                                       backends and table.backends)
  module = source.module
  return {
      "file": source.label, "module": module.name, "topology": topology_spec,
      "cost_table": cost_table, "backends": table.backends,
      "num_partitions": source.num_partitions,
      "num_partitions_from": source.partitions_from,
      "num_replicas": source.num_replicas,
      "collectives": [describe_permute(p, upstream, backend_set(table)) for p in perms],
  }
