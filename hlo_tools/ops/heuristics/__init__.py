"""Test and tune the backend-selection heuristic: sweep (modeled times of every plan),
check (the C++ pass against the core on real compiles), calibrate (a cost table from
measurements)."""

from hlo_tools.model.sources import InputError


class HeuristicsError(InputError):
  """A user-facing failure: printed as one line, exit status 2."""
