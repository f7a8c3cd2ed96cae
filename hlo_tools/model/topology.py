"""A topology spec the user gives, checked against the selection core's limit before
the core sees it (the spec's grammar stays the core's; the one derived from a module
is nvshmem-opt's: model.driver.derived_topology)."""

from hlo_tools.model.sources import InputError

# The selection core's limit on a topology's devices (and so on each dimension).
MAX_DEVICES = 1 << 20


def check_topology_size(spec):
  """InputError for a dimension over the core's limit, which the core reports as
  "not a positive whole number"; every other check stays the core's."""
  dims = (spec or "").split(":", 1)[0].split("x")
  for dim in dims:
    if dim.isdigit() and int(dim) > MAX_DEVICES:
      raise InputError(f"topology spec {spec!r}: '{dim}' is too large (max "
                       f"{MAX_DEVICES} devices)")
  return spec

