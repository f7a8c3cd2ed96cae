"""The heuristics sweep's cases: the shapes, sizes and default topologies, and one case's row
(every plan's modeled time, the core's choice, the model's best, the oracle, upstream's plan)."""

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core
from hlo_tools._selection_core import CostTable, Topology
from hlo_tools.errors import HeuristicsError
from hlo_tools.model import driver
from hlo_tools.ops.sizes import format_bytes

# One case of the sweep (COLUMNS), and the core's decision dict (selection.decide).
Row = dict[str, Any]
Decision = dict[str, Any]
# (spec as given, its parsed Topology)
Topologies = Sequence[tuple[str, Topology]]

DEFAULT_TOPOLOGIES = ("1x1x8", "1x2x4", "2x2x4", "1x4x2", "1x9x8:nvl72")
# 1 KiB .. 1 GiB in factors of two: the grid a user reads off a log-log plot.
DEFAULT_SIZES = tuple(1 << e for e in range(10, 31))
# shape -> (buffers moved by one permute, cyclic). Combined K/V is one
# variadic permute of two equal buffers (XLA's combiner merges the K and V
# rotations), so it moves twice the bytes over the same pairs.
SHAPES = {"ring": (1, True), "kv": (2, True), "shift": (1, False)}
PLANS = ("nccl", "nvshmem")
# Shapes that count as rings in the "mixed multi-host rings" goal.
RING_SHAPES = ("ring", "kv")
# Relative slack when comparing modeled times: they are sums of doubles.
EPS = 1e-9

COLUMNS = (
  "topology",
  "shape",
  "buffer_bytes",
  "bytes",
  "num_devices",
  "num_edges",
  *(f"edges_{c}" for c in selection.LINK_CLASSES),  # the core's link classes
  "mixed",
  "multi_host",
  "nccl_us",
  "nvshmem_us",
  "chosen_plan",
  "chosen_us",
  "best_plan",
  "inside_margin",
  "oracle_plan",
  "oracle_us",
  "upstream_plan",
  "upstream_us",
  "upstream_over_heap",
  "upstream_hangs",
  "ratio_to_oracle",
  "ratio_to_upstream",
  "ratio_to_nccl",
  "reason",
)


def pairs_for(shape: str, num_devices: int) -> list[tuple[int, int]]:
  """Partition-id pairs of one permute: i -> i+1, wrapping around for rings."""
  _, cyclic = SHAPES[shape]
  if cyclic:
    return [(i, (i + 1) % num_devices) for i in range(num_devices)]
  return [(i, i + 1) for i in range(num_devices - 1)]


def _ratio(a: float, b: float) -> float:
  if b == 0:
    return 1.0 if a == 0 else math.inf
  return a / b


def _oracle(decision: Decision) -> tuple[str, float]:
  """Fastest eligible plan, margin ignored; ties go to the earlier of PLANS.

  NCCL first because it is the default: an equal-time alternative is no gain.
  """
  times = {plan: decision["backend_us"][plan] for plan in PLANS}
  best = "nccl"
  for plan in PLANS[1:]:
    if times[plan] is not None and times[plan] < times[best]:
      best = plan
  return best, times[best]


def _best(decision: Decision, margin: float) -> str:
  """The model's own best: the fastest eligible plan among those that beat NCCL by
  the margin (NCCL, the default, is given up only then), else NCCL."""
  times = decision["backend_us"]
  bar = times["nccl"] * (1 - margin)
  winners = [
    (times[p], p) for p in PLANS[1:] if times[p] is not None and times[p] <= bar * (1 + EPS)
  ]
  return min(winners)[1] if winners else "nccl"


# The module upstream's assigner is asked about: one permute per shape, named after it.
_UPSTREAM_MODULE = """HloModule sweep_upstream, num_partitions={n}

ENTRY main {{
  a = f32[64]{{0}} parameter(0)
  b = f32[64]{{0}} parameter(1)
  ring = f32[64]{{0}} collective-permute(a), channel_id=1, source_target_pairs={ring}
  kv = (f32[64]{{0}}, f32[64]{{0}}) collective-permute(a, b), channel_id=2, source_target_pairs={ring}
  shift = f32[64]{{0}} collective-permute(a), channel_id=3, source_target_pairs={shift}
  ROOT out = (f32[64]{{0}}, (f32[64]{{0}}, f32[64]{{0}}), f32[64]{{0}}) tuple(ring, kv, shift)
}}
"""  # noqa: E501  (HLO as XLA prints it)


def _pairs_text(pairs: Iterable[tuple[int, int]]) -> str:
  return "{" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}"


def upstream_plans(topologies: Topologies) -> dict[tuple[str, str], str]:
  """{(spec, shape): 'nvshmem' | 'nccl'}: upstream XLA's CollectiveBackendAssigner.

  Its answer comes from the real assigner, run by `nvshmem-opt --compare-upstream`
  on a small module per topology with one permute per shape; the assigner has no
  size threshold for collective-permutes, so one module stands for every size.
  """
  exe = driver.find_nvshmem_opt()
  if exe is None:
    raise HeuristicsError(
      f"upstream's answer comes from its assigner, run by the driver: {driver.NOT_INSTALLED}"
    )
  plans: dict[tuple[str, str], str] = {}
  with tempfile.TemporaryDirectory(prefix="heuristics-upstream-") as tmp:
    for spec, topology in topologies:
      n = topology.num_devices
      path = os.path.join(tmp, "module.hlo")
      with open(path, "w") as f:
        f.write(
          _UPSTREAM_MODULE.format(
            n=n, ring=_pairs_text(pairs_for("ring", n)), shift=_pairs_text(pairs_for("shift", n))
          )
        )
      rc, report, message = driver.run_nvshmem_opt(
        path, spec, mode="explain", compare_upstream=True, tmp_dir=tmp
      )
      if rc != 0 or not report:
        raise HeuristicsError(f"nvshmem-opt --compare-upstream failed on {spec}: {message}")
      for d in report["decisions"]:
        plans[(spec, d["instruction"])] = "nvshmem" if d.get("upstream") == "NVSHMEM" else "nccl"
  return plans


def _upstream(
  decision: Decision, table: CostTable, nbytes: int, buffers: int, plan: str
) -> tuple[str, float, bool]:
  """Upstream's plan priced with our model: (plan, us, over_heap).

  Upstream does not look at the symmetric heap, so its NVSHMEM plan is priced even
  where operand and result overflow nvshmem_max_bytes (flagged)."""
  edges = decision["edges_by_class"]
  if plan != "nvshmem" or sum(edges.values()) == 0:
    return "nccl", decision["backend_us"]["nccl"], False
  us = max(
    selection.edge_time_us(table, "nvshmem", link_class, nbytes, buffers)
    for link_class, count in edges.items()
    if count > 0
  )
  return "nvshmem", us, selection.nvshmem_heap_reason(table, nbytes) is not None


def evaluate(
  spec: str, topology: Topology, table: CostTable, shape: str, buffer_bytes: int, upstream_plan: str
) -> Row:
  """One row of the sweep: every plan's modeled time and every rule's choice."""
  n = topology.num_devices
  buffers = SHAPES[shape][0]
  nbytes = buffer_bytes * buffers
  decision = selection.decide(
    topology,
    table,
    nbytes,
    pairs_for(shape, n),
    cross_partition=True,
    num_partitions=n,
    num_replicas=1,
    buffers=buffers,
  )
  edges = decision["edges_by_class"]
  oracle_plan, oracle_us = _oracle(decision)
  best_plan = _best(decision, table.margin)
  upstream_plan, upstream_us, over_heap = _upstream(decision, table, nbytes, buffers, upstream_plan)
  # Upstream picks NVSHMEM for permutes that leave a device without a source, which
  # hang XLA's NVSHMEM barrier: priced as if they ran, but flagged.
  hangs = (
    upstream_plan == "nvshmem"
    and selection.nvshmem_hang_reason(
      _selection_core.edge_ids_to_devices(topology, pairs_for(shape, n), True, n, 1), n
    )
    is not None
  )
  in_domain = edges["same_device"] + edges["nvlink"] + edges["nvlink_domain"]
  return {
    "topology": spec,
    "shape": shape,
    "buffer_bytes": buffer_bytes,
    "bytes": nbytes,
    "num_devices": n,
    "num_edges": sum(edges.values()),
    **{f"edges_{c}": edges[c] for c in selection.LINK_CLASSES},
    "mixed": edges["network"] > 0 and in_domain > 0,
    "multi_host": edges["network"] + edges["nvlink_domain"] > 0,
    "nccl_us": decision["backend_us"]["nccl"],
    "nvshmem_us": decision["backend_us"]["nvshmem"],
    "chosen_plan": decision["plan"],
    "chosen_us": decision["chosen_us"],
    "best_plan": best_plan,
    "inside_margin": best_plan != oracle_plan,
    "oracle_plan": oracle_plan,
    "oracle_us": oracle_us,
    "upstream_plan": upstream_plan,
    "upstream_us": upstream_us,
    "upstream_over_heap": over_heap,
    "upstream_hangs": hangs,
    "ratio_to_oracle": _ratio(decision["chosen_us"], oracle_us),
    "ratio_to_upstream": _ratio(decision["chosen_us"], upstream_us),
    "ratio_to_nccl": _ratio(decision["chosen_us"], decision["backend_us"]["nccl"]),
    "reason": decision["reason"],
  }


def sweep(
  topologies: Topologies,
  table: CostTable,
  sizes: Sequence[int] = DEFAULT_SIZES,
  shapes: Sequence[str] = tuple(SHAPES),
  upstream: dict[tuple[str, str], str] | None = None,
) -> list[Row]:
  """topologies: [(spec, Topology)]. Rows in topology, shape, size order.

  upstream: upstream_plans(topologies), when the caller already asked the driver."""
  upstream = upstream if upstream is not None else upstream_plans(topologies)
  return [
    evaluate(spec, topology, table, shape, size, upstream[(spec, shape)])
    for spec, topology in topologies
    for shape in shapes
    for size in sizes
  ]


def case_name(row: Row) -> str:
  return f"{row['topology']} {row['shape']} {format_bytes(row['buffer_bytes'], precise=True)}"
