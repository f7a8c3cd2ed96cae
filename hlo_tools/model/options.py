"""What every decision depends on, parsed once: the topology, the cost table and the
backend set a command was given, each read and checked by the selection core at the
command boundary and then passed down as objects, never as flags to parse again."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hlo_tools import selection
from hlo_tools.errors import SelectionError

# Which XLA a plan is for: one setting, with one default, for every command (hlo-tools'
# and nvshmem-opt's --per-op-modes). A stock XLA (the default) builds each permute's
# thunk with the program's one mode, xla_gpu_collective_permute_mode
# (program_mode.THUNK_READS_FLAG), so peer and symmetric memory are chosen per program;
# the series for jax v0.11.0's and openxla main's XLA runs each permute's own mode.
PER_OP_MODES_DEFAULT = False
PER_OP_MODES_HELP = (
  "the target XLA runs each permute in its own collectives_mode (the series for jax "
  "v0.11.0's and openxla main's XLA, which run no NVSHMEM); default: a stock XLA, whose "
  "permutes all run the program's one mode, as nvshmem-opt's --per-op-modes"
)


def check_target(backends: str, per_op_xla: bool) -> None:
  """SelectionError where no XLA runs the backend set `backends` (the core's spelling)
  with per-permute modes: NVSHMEM permutes run only at the pinned XLA."""
  if per_op_xla and "nvshmem" in backends.split(","):
    raise SelectionError(
      f"--per-op-modes and the backend set {backends}: no XLA runs both (per-permute "
      "modes are the series for jax v0.11.0's and openxla main's XLA, which run no "
      "NVSHMEM permute; NVSHMEM is the pinned XLA's): give --backends=nccl,peer[,symmetric], "
      "or drop --per-op-modes"
    )


@dataclasses.dataclass(frozen=True)
class Selection:
  """The parsed inputs of the core's decision. `spec`, `cost_table` and `backends` stay
  as given for messages, reports and nvshmem-opt's flags."""

  spec: str  # the topology spec, in the core's grammar
  topology: selection.Topology
  table: selection.CostTable  # planning over the backend set
  cost_table: str | None = None  # the table's file, None for the embedded default
  backends: str | None = None  # the set given (the core's spelling), None: the table's
  # Where the spec's device map came from (model.placement), None: no map known.
  placement: str | None = None
  # Whether the map was looked for (the driver's JSON, else model.placement's reader).
  settled: bool = False
  # The target XLA runs each permute's own mode (PER_OP_MODES_HELP); False: a stock XLA.
  per_op_xla: bool = PER_OP_MODES_DEFAULT

  def driver_table(self) -> selection.CostTable | None:
    """The table as nvshmem-opt is given it: the one read from the user's file (on
    stdin), None for the built-in one the driver has itself."""
    return self.table if self.cost_table else None


def load_table(
  cost_table: str | None = None,
  backends: str | Sequence[str] | None = None,
  max_bytes: int | None = None,
) -> tuple[selection.CostTable, str | None]:
  """(table, backends in the core's spelling or None): the file read once (within
  max_bytes, the command's --max-input-bytes, and a table's own limit), its set
  replaced by `backends` ("nccl,peer") when given, as `nvshmem-opt --backends` does."""
  table = selection.load_cost_table(cost_table, max_bytes)
  if not backends:
    return table, None
  try:
    table.backends = backends if isinstance(backends, str) else ",".join(backends)
  except ValueError as e:
    raise SelectionError(f"--backends: {e}") from None
  return table, table.backends


def load(
  spec: str,
  cost_table: str | None = None,
  backends: str | Sequence[str] | None = None,
  loaded: tuple[selection.CostTable, str | None] | None = None,
  per_op_xla: bool = PER_OP_MODES_DEFAULT,
  topology: selection.Topology | None = None,
) -> Selection:
  """A Selection: `spec`, the user's, parsed with the set's process layout, or the
  driver's with the `topology` it decided on (driver.placed_topology: no spec of
  the driver's is parsed here); the table read here, or `loaded`, what load_table
  already gave for the same file and set; per_op_xla, the target XLA (check_target
  refuses a set it cannot run)."""
  table, backends = loaded or load_table(cost_table, backends)
  check_target(table.backends, per_op_xla)
  return Selection(
    spec=spec,
    topology=topology if topology is not None else selection.parse_topology(spec, table.backends),
    table=table,
    cost_table=cost_table,
    backends=backends,
    per_op_xla=per_op_xla,
  )
