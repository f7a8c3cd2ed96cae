"""What every decision depends on, parsed once: the topology, the cost table and the
backend set a command was given, each read and checked by the selection core at the
command boundary and then passed down as objects, never as flags to parse again."""

import dataclasses

from hlo_tools import selection
from hlo_tools.errors import SelectionError


@dataclasses.dataclass(frozen=True)
class Selection:
  """The parsed inputs of the core's decision. `spec`, `cost_table` and `backends` stay
  as given for messages, reports and nvshmem-opt's flags."""
  spec: str  # the topology spec, in the core's grammar
  topology: object  # selection.Topology
  table: object  # selection.CostTable, planning over the backend set
  cost_table: str = None  # the table's file, None for the embedded default
  backends: str = None  # the set given (the core's spelling), None: the table's own
  # Where the spec's device map came from (model.placement), None: no map known.
  placement: str = None

  def with_topology(self, spec, topology=None):
    """The same table and backends on another topology (parsed here unless given)."""
    return dataclasses.replace(
        self, spec=spec,
        topology=topology or selection.parse_topology(spec, self.table.backends))


def load_table(cost_table=None, backends=None):
  """(table, backends in the core's spelling or None): the file read once, its set
  replaced by `backends` ("nccl,peer") when given, as `nvshmem-opt --backends` does."""
  table = selection.load_cost_table(cost_table)
  if not backends:
    return table, None
  try:
    table.backends = backends if isinstance(backends, str) else ",".join(backends)
  except ValueError as e:
    raise SelectionError(f"--backends: {e}") from None
  return table, table.backends


def load(spec, cost_table=None, backends=None, topology=None):
  """A Selection; `topology` when the caller has already parsed `spec` (with the
  set's process layout: selection.parse_topology(spec, table.backends))."""
  table, backends = load_table(cost_table, backends)
  return Selection(spec=spec,
                   topology=topology or selection.parse_topology(spec, table.backends),
                   table=table, cost_table=cost_table, backends=backends)
