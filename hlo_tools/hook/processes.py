"""The topology a program is decided on, from jax's view of the processes: the
process layout at install and each program's devices' processes at compile."""

import re
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools.errors import HookError

if TYPE_CHECKING:  # the binding is imported when first used
  from hlo_tools._selection_core import Topology


def topology_for_devices(
  selection: ModuleType, topology: "Topology", backends: Sequence[str], devices: Sequence[Any]
) -> "tuple[Topology, str | None]":
  """(the topology to decide with, why it differs from `topology`, or None) for a
  program on jax's `devices`. Each device's process is jax's (process_index): where
  the program's devices span processes of fewer GPUs than the topology's
  gpus_per_process, the process size is jax's; where their processes do not hold
  consecutive ids of one size, each GPU is taken as its own process (no permute
  between two of them then runs in peer or symmetric memory)."""
  procs: dict[int, list[int]] = {}
  for d in devices:
    procs.setdefault(int(getattr(d, "process_index", 0)), []).append(int(d.id))
  if len(procs) < 2:
    return topology, None
  sizes = {len(ids) for ids in procs.values()}
  size = sizes.pop() if len(sizes) == 1 else 1
  if size > 1 and any(len({i // size for i in ids}) != 1 for ids in procs.values()):
    size = 1
  stated = topology.gpus_per_process
  if size >= stated:
    return topology, None
  spec = re.sub(r":gpus_per_process=\d+", "", str(topology)) + f":gpus_per_process={size}"
  try:
    new = parse_topology(selection, spec, backends)
  except selection.SelectionError as e:
    raise HookError(f"the program's devices in jax's processes: {e}") from None
  where = "; ".join(f"process {p}: devices {ids}" for p, ids in sorted(procs.items()))
  return new, (
    f"jax puts the program's devices in {len(procs)} processes ({where}), where the "
    f"topology {topology} has {stated} GPUs per process: decided with {spec}"
  )


def with_process_layout(
  spec: str,
  local_devices: int,
  all_devices: int,
  processes: Sequence[int] | None = None,
  parses: Callable[[str], bool] | None = None,
) -> str:
  """`spec` with jax's view of the processes where there are several: each device's
  own process (`:processes=`, `processes` indexed by device id, from each jax
  device's process_index) where the spec has exactly those devices (`parses` says
  whether the core takes it), else `:gpus_per_process=N`, N the devices this
  process drives (len(jax.local_devices())). Device i need not live in process
  i, so the map is the fact; the count is the fallback. Peer and symmetric memory
  need every device of the permute's clique in one process, NVSHMEM one GPU a
  process."""
  if "gpus_per_process" in spec or ":processes=" in spec:
    return spec
  if local_devices >= all_devices or local_devices < 1:
    return spec
  if processes and len(set(processes)) > 1:
    stated = f"{spec}:processes={','.join(map(str, processes))}"
    if parses is None or parses(stated):
      return stated
  return f"{spec}:gpus_per_process={local_devices}"


def parse_topology(selection: ModuleType, spec: str, backends: Sequence[str]) -> "Topology":
  """The core's Topology of `spec`, an unstated process layout taken as the backend
  set's default."""
  topology: Topology = selection.parse_topology(spec, ",".join(backends))
  return topology
