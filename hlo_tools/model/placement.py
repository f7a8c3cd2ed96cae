"""Where each logical device of a module runs: the partition->device map XLA wrote
beside the module (its config, hlo.module_config), merged into the topology the
command decides on, so that no verdict assumes the identity silently.

The map enters the core as the spec's `:map=`: the driver and the binding then
decide on the same placement. A spec that states its own map keeps it. Without
any map the core refuses the one-sided backends wherever the program spans more
than one host or process (the device order decides every edge's class there).

The driver reads the config and says in its JSON what it placed (settled). Only
where no driver answered (verify --no-hlo-verifier, a module the driver refused)
does this module read the config itself (placed_by_reader).
"""

from __future__ import annotations

import dataclasses
import os

from hlo_tools import bounded_input, selection
from hlo_tools.errors import InputError, SelectionError
from hlo_tools.hlo import module_config
from hlo_tools.model import driver, dumps
from hlo_tools.model.driver_report import Report
from hlo_tools.model.options import Selection

MAP_OPTION = ":map="


def spec_map(spec: str) -> str | None:
  """The `map=` list a spec states, or None."""
  for option in spec.split(":")[1:]:
    if option.startswith("map="):
      return option[len("map=") :]
  return None


def config_path(path: str | None) -> str | None:
  """The config that places the module at `path` (or the main module of the dump
  folder at `path`), found but not read: the driver reads it; None where XLA wrote
  none."""
  if path and os.path.isdir(path):
    return dumps.module_config_path(path) or None
  return module_config.find_config(path) if path else None


def module_map(
  path: str | None, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
) -> tuple[list[int], str] | None:
  """(partition->device map, the config file it came from) for the module at `path`
  (or the main module of the dump folder at `path`), or None where XLA wrote none."""
  found = config_path(path)
  config = module_config.read_config(found, max_bytes) if found else None
  if config is None or not config.partition_to_device:
    return None
  # XLA's flattened id is replica * partitions + partition; the core's map is
  # indexed as XLA places logical devices, replica + partition * replicas.
  replicas, partitions = config.replica_count, config.computation_count
  core_order = [
    config.partition_to_device[r * partitions + p]
    for p in range(partitions)
    for r in range(replicas)
  ]
  return core_order, config.path


def settled(
  selected: Selection,
  path: str | None,
  report: Report | None,
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
) -> Selection:
  """`selected` on the module's own device map: as the driver's JSON on the module
  (`report`) placed it, else, where no driver answered, as this reader places it.
  A selection already settled stays as it is."""
  if selected.settled:
    return selected
  if report is not None:
    return from_report(selected, report)
  return placed_by_reader(selected, path, max_bytes)


def from_report(selected: Selection, report: Report | None) -> Selection:
  """`selected` as the driver placed it: the topology it decided on (built from its
  JSON's facts, driver.placed_topology), the spec as given with :map= where the
  driver added the module's map to a spec that states none, and where the map came
  from; as given where the driver wrote no JSON."""
  if report is None:
    return dataclasses.replace(selected, placement=None, settled=True)
  spec = selected.spec
  added = report["partition_to_device"]
  if added and spec_map(spec) is None:
    spec += MAP_OPTION + ",".join(map(str, added))
  return dataclasses.replace(
    selected,
    spec=spec,
    topology=driver.placed_topology(report),
    placement=driver.placement(report),
    settled=True,
  )


def placed_by_reader(
  selected: Selection, path: str | None, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
) -> Selection:
  """`selected` on the module's own device map, where the spec states none and XLA
  wrote one beside the module, read here: for a path no driver answered for (the
  driver reads the config itself). `selected.placement` says where the map came
  from."""
  selected = dataclasses.replace(selected, settled=True)
  found = module_map(path, max_bytes)
  stated = spec_map(selected.spec)
  if stated is not None:
    ours = found is not None and stated == ",".join(map(str, found[0]))
    return dataclasses.replace(
      selected,
      placement=(
        f"the module's device assignment ({found[1]})"
        if found is not None and ours
        else "the topology's map"
      ),
    )
  if found is None:
    return dataclasses.replace(selected, placement=None)
  device_map, origin = found
  if len(device_map) > selected.topology.num_devices:
    raise InputError(
      f"{origin}: the module's device assignment places "
      f"{len(device_map)} devices, more than topology {selected.spec} "
      f"has ({selected.topology.num_devices})"
    )
  spec = selected.spec + MAP_OPTION + ",".join(map(str, device_map))
  try:
    topology = selection.parse_topology(spec, selected.table.backends)
  except SelectionError as e:
    raise InputError(
      f"{origin}: its device assignment does not fit topology {selected.spec}: {e}"
    ) from None
  return dataclasses.replace(
    selected, spec=spec, topology=topology, placement=f"the module's device assignment ({origin})"
  )


def placement_text(selected: Selection) -> str:
  """One line for the user: where each logical device runs, and where that came from."""
  if selected.placement:
    return f"device order: {selected.placement}"
  return (
    "device order: unknown (the module came without XLA's config beside it and "
    "the spec gives no :map=); NVSHMEM, peer and symmetric memory are refused "
    "where the program spans more than one host or process"
  )


def layout_text(selected: Selection) -> str:
  """The process layout the decisions assume, with why where it is the default."""
  return selection.process_layout_text(
    selected.topology, selection.states_processes(selected.spec), selected.table.backends
  )
