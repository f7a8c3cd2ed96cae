"""What the tools say about a topology the core has parsed (options.Selection parses
the user's spec once; the one derived from a module is nvshmem-opt's:
model.driver.derived_topology)."""


def jax_topology(topology):
  """The SxHxG that jax compiles a parsed Topology for: its :nvlN, :gpus_per_process
  and :map= shape pricing and placement, not the devices jax lays out."""
  return f"{topology.slices}x{topology.hosts_per_slice}x{topology.gpus_per_host}"


def size_note(spec, topology, devices):
  """A warning when the topology holds more GPUs than the module runs on (the extra
  ones hold none of it, and hosts the module does not fill change edge classes), or
  None."""
  if devices and topology.num_devices > devices:
    spec = ":".join(o for o in spec.split(":") if not o.startswith("map="))  # shorter
    return (f"warning: topology {spec} has {topology.num_devices} GPUs but the module "
            f"runs on {devices}: its devices are placed on the first "
            f"{devices} GPUs and the rest stay idle; is this the module's topology?")
  return None


def other_host_shapes(spec):
  """For a derived SxHxG spec: the other shapes of hosts of 2, 4 or 8 GPUs that hold
  as many devices (8: 1x2x4 and 1x4x2 beside 1x1x8), each of which can change the
  choices."""
  try:
    dims = [int(x) for x in spec.split(":")[0].split("x")]
  except ValueError:
    return []
  total = 1
  for d in dims:
    total *= d
  return [f"1x{total // g}x{g}" for g in (8, 4, 2)
          if total % g == 0 and total > g and f"1x{total // g}x{g}" != spec.split(":")[0]]
