"""What the tools say about a topology the core has parsed: the SxHxG jax compiles
for, size warnings, and where a command's topology came from (options.Selection
parses the user's spec once; the one derived from a module is nvshmem-opt's, in its
report's "spec")."""

from __future__ import annotations

from hlo_tools import selection


def jax_topology(topology: selection.Topology) -> str:
  """The SxHxG that jax compiles a parsed Topology for: its :nvlN, :gpus_per_process
  and :map= shape pricing and placement, not the devices jax lays out."""
  return f"{topology.slices}x{topology.hosts_per_slice}x{topology.gpus_per_host}"


def size_note(spec: str, topology: selection.Topology, devices: int) -> str | None:
  """A warning when the topology holds more GPUs than the module runs on (the extra
  ones hold none of it, hosts the module does not fill change edge classes, and
  NVSHMEM, whose team is every GPU of a host, is refused on a host they share with
  it), or None."""
  if devices and topology.num_devices > devices:
    spec = ":".join(o for o in spec.split(":") if not o.startswith("map="))  # shorter
    return (
      f"warning: topology {spec} has {topology.num_devices} GPUs but the module "
      f"runs on {devices}: the rest stay idle, and NVSHMEM is refused on a host "
      "whose GPUs it leaves idle; is this the module's topology?"
    )
  return None


def manifest_note(prog: str, label: str, spec: str) -> str:
  """What a command says when it takes a dump's topology from its manifest."""
  return (
    f"{prog}: {label}: no --topology; using {spec}, the topology the dump was "
    "compiled for (manifest.json; --topology=SPEC overrides)"
  )


def derived_notes(
  prog: str,
  label: str,
  spec: str,
  topology: selection.Topology,
  others: list[str],
  devices_per_host: int | None,
  devices: int | None = None,
) -> tuple[str, str | None]:
  """What a command says when it takes the topology nvshmem-opt derived from the
  module of `devices` devices: the topology, and a warning when the module leaves
  GPUs of its derived hosts idle (a host of only its GPUs is the user's to state) or
  its devices fit other host shapes too (`others`, the driver's other_host_shapes;
  None with --devices-per-host, which chose the shape)."""
  note = (
    f"{prog}: {label}: no --topology; using {spec} (derived from the module, as "
    "nvshmem-opt and the pass do; --topology=SPEC or --devices-per-host=N "
    "overrides)"
  )
  if devices_per_host is not None:
    return note, None
  if devices and devices < topology.num_devices:
    shown = f"1x1x{devices}" if devices < topology.gpus_per_host else "SPEC"
    return note, (
      f"{prog}: warning: {label}: hosts of {topology.gpus_per_host} GPUs assumed "
      f"(the default host); the module's {devices} devices leave "
      f"{topology.num_devices - devices} of their GPUs idle, which NVSHMEM's team "
      f"would wait for, so NVSHMEM is refused there: --topology={shown} or "
      f"--devices-per-host=N states hosts of only the program's GPUs"
    )
  warning = (
    (
      f"{prog}: warning: {label}: the module's devices fit other host shapes too "
      f"({', '.join(others)}), which can change every choice; "
      f"{jax_topology(topology)} is only the pass's default (hosts of "
      f"{topology.gpus_per_host} GPUs): give --topology for the job's real one"
    )
    if others
    else None
  )
  return note, warning
