"""Decisions: each collective-permute of a module with the selection core's choice,
as the pass would make it in that module.

The choice comes from the C++ selection core through its bindings
(hlo_tools.selection), the same code the pass runs.
"""

from hlo_tools import selection
from hlo_tools.model.collectives import collective_permutes
from hlo_tools.model.source import InputError, strict_pairs

# Link classes whose edges stay inside one NVLink domain: what NVSHMEM may use.
NVLINK_CLASSES = ("same_device", "nvlink", "nvlink_domain")
PLAN_BACKEND = {"nvshmem": "NVSHMEM", "nccl": "DEFAULT", "split": "SPLIT"}
SPLIT_SUFFIXES = (".nvshmem-start", ".nccl-start")


def load_selection(topology_spec, cost_table_path):
  try:
    return selection.parse_topology(topology_spec), selection.load_cost_table(cost_table_path)
  except selection.SelectionError as e:
    raise InputError(str(e)) from None


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

