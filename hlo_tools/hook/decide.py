"""Loading the selection core's binding, and deciding one collective-permute's mode."""

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import hlo_tools
from hlo_tools.errors import HookError
from hlo_tools.hlo import ir
from hlo_tools.model import collectives, modes

if TYPE_CHECKING:  # the binding is imported when first used
  from hlo_tools._selection_core import CostTable, Topology

# The core's decision for one permute, a record of the hook's (JSON-friendly).
Decision = dict[str, Any]
Record = dict[str, Any]


def import_selection() -> ModuleType:
  """hlo_tools.selection, looking also in carried binding folders."""
  try:
    from hlo_tools import selection

    return selection
  except ImportError:
    pass
  # $NVSHMEM_OPT_CORE_DIR may have been set after the package's import.
  hlo_tools.add_core_dirs()
  from hlo_tools import selection  # raises ImportError naming what is missing

  return selection


def hook_modes(selection: ModuleType) -> dict[str, tuple[str | None, str]]:
  """{backend: (collectives_mode or None for NCCL, _xla_collectives_mode value)} for
  the backends the hook writes (those with a mode attribute: the XLA of jax >=
  0.10.2), from the core's records."""
  return {
    n: (r["collectives_mode"] or None, r["mode_attribute"])
    for n, r in selection.BACKEND_INFO.items()
    if r["mode_attribute"]
  }


def operand_count(module: ir.HloModule, permute: collectives.CollectivePermute) -> int:
  """Buffers the permute sends: its data operands (the in-place form sends one)."""
  comp = module.computation(permute.computation)
  instr = next(i for i in comp.instructions if i.name == permute.start)
  ops = instr.operand_instructions()
  if instr.opcode != "async-start" and len(ops) == 4 and ops[2].shape.is_tuple:
    return 1
  return max(len(ops), 1)


def decide_mode(
  selection: ModuleType,
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  permute: collectives.CollectivePermute,
  buffers: int = 1,
  num_partitions: int | None = None,
  num_replicas: int = 1,
) -> tuple[str, Decision]:
  """(backend name, the core's decision dict) for one CollectivePermute of a module
  of `num_partitions` x `num_replicas` devices (its header's counts: the core maps
  the pairs' ids to devices with them, and a permute without a channel id pairs
  replicas): the core's plan over the backend set names the backend; one the hook
  writes no mode for runs as NCCL."""
  pairs = [tuple(p) for p in permute.pairs]
  # Under a conditional's branch, as the tools' pass tells the core (a collectives
  # group refuses NVSHMEM only, which no XLA the hook targets runs).
  place = selection.place_of(bool(permute.branch), False)
  d: Decision = selection.decide(
    topology,
    table,
    permute.bytes_per_device,
    pairs,
    permute.channel_id is not None,
    num_partitions,
    num_replicas,
    backends=tuple(backends),
    buffers=buffers,
    place=place,
  )
  backend = d.get("backend") or d.get("plan")
  return (backend if backend in hook_modes(selection) else "nccl"), d


def mark_error(module_name: str, instr_name: str, value: str) -> str:
  """The one line for a mark that names no collectives mode."""
  return (
    f'module {module_name}: %{instr_name} is marked {modes.ATTRIBUTE}="{value}", '
    f"which names no collectives mode ({', '.join(modes.MODES)}); the patched XLA "
    "fails such a compile, and no XLA runs it"
  )


# The collectives other than a permute (XLA's IsCollectiveCommunicationOp), whose
# mark the series' assigner refuses (InvalidArgument: "Frontend attribute
# _xla_collectives_mode is not supported on ...").
OTHER_COLLECTIVES = frozenset(
  op + suffix
  for op in (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-broadcast",
  )
  for suffix in ("", "-start")
)


def check_collective_marks(module: ir.HloModule) -> None:
  """HookError for a mark (_xla_collectives_mode) on a collective that is not a
  permute, as the series' compile fails on it: such a mark reaches an all-reduce
  when set_xla_metadata wraps sharded code that XLA's partitioner turns into one."""
  for comp in module.computations:
    for instr in comp.instructions:
      if instr.opcode not in OTHER_COLLECTIVES:
        continue
      value = modes.user_mark(instr)
      if value is not None:
        raise HookError(
          f'module {module.name}: %{instr.name} ({instr.opcode}) is marked {modes.ATTRIBUTE}="'
          f"{value}\", and only a collective-permute takes a mode (the series' XLA fails "
          "such a compile); put set_xla_metadata around the lax.ppermute alone"
        )


def user_marks(module: ir.HloModule) -> list[Record]:
  """[{"permute", "value", "mode"}] of the module's permutes that the user marked
  with _xla_collectives_mode (the mark's own mode, by its word); HookError, naming
  the permute and the value, for a mark that names no mode."""
  found: list[Record] = []
  for permute in collectives.collective_permutes(module):
    comp = module.computation(permute.computation)
    instrs = [next(i for i in comp.instructions if i.name == permute.start)]
    if permute.form == "async-wrapped" and permute.wrapped_computation:
      instrs.append(module.computation(permute.wrapped_computation).root)
    value = next((v for i in instrs for v in [modes.user_mark(i)] if v is not None), None)
    if value is None:
      continue
    mode = modes.mark_mode(value)
    if mode is None:
      raise HookError(mark_error(module.name, permute.start, value))
    found.append({"permute": permute.start, "value": value, "mode": mode})
  return found
