"""A topology spec the user gives, checked by the selection core before any work
that depends on it (a compile, a driver run), so a bad spec is one line up front.
The topology derived from a module is nvshmem-opt's: model.driver.derived_topology."""

from hlo_tools import selection
from hlo_tools.model.sources import InputError


def check_topology(spec):
  """The spec, or InputError with the core's one-line reason (grammar, a dimension
  over the core's device limit, a bad map)."""
  try:
    selection.parse_topology(spec)
  except selection.SelectionError as e:
    raise InputError(str(e)) from None
  return spec
