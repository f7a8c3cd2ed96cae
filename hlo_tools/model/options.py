"""What every decision depends on, parsed once: the topology, the cost table and the
backend set a command was given, each read and checked by the selection core at the
command boundary and then passed down as objects, never as flags to parse again."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hlo_tools import selection
from hlo_tools.errors import SelectionError


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
) -> Selection:
  """A Selection: `spec` parsed with the set's process layout; the table read here,
  or `loaded`, what load_table already gave for the same file and set."""
  table, backends = loaded or load_table(cost_table, backends)
  return Selection(
    spec=spec,
    topology=selection.parse_topology(spec, table.backends),
    table=table,
    cost_table=cost_table,
    backends=backends,
  )
