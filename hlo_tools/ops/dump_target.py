"""Where a dump compiles for: the Target (a deviceless GPU topology or N host devices) and
its jax devices, and the mesh a source runs on over them."""

import dataclasses
import os
import re
from typing import Any

from hlo_tools import bounded_input, selection
from hlo_tools.errors import DumpError
from hlo_tools.model.topology import jax_topology

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hlo_tools/
DEFAULT_TARGET_CONFIG = os.path.join(_PACKAGE, "data", "h200_gpu_target_config.pbtxt")
_AXIS_RE = re.compile(r"^[A-Za-z_]\w*$")
# A mesh: [[axis name, size], ...], slowest-varying axis first.
MeshAxes = list[list[Any]]


@dataclasses.dataclass
class Target:
  """Where to compile for: a deviceless GPU topology, or N host (CPU) devices."""

  # The selection core's spec, SxHxG[:nvlN][:gpus_per_process=N][:map=...]: jax
  # compiles for its SxHxG; the rest shapes pricing, so the manifest keeps it all.
  topology: str | None = None
  cpu_devices: int = 8
  target_config: str = DEFAULT_TARGET_CONFIG
  # The core's parse of `topology`, when the caller has it; else parsed here once.
  parsed: selection.Topology | None = dataclasses.field(default=None, compare=False)
  # target_config's text, read once (config_text).
  _config_text: str | None = dataclasses.field(default=None, compare=False, repr=False)

  def core_topology(self) -> selection.Topology:
    """The spec parsed by the core, once; its one-line error (a SelectionError) when
    bad."""
    if self.parsed is None:
      assert self.topology is not None, "a CPU target has no topology"
      self.parsed = selection.parse_topology(self.topology)
    return self.parsed

  def config_text(self) -> str:
    """target_config's text, read once as every side input is (bounded in size and
    time, one line naming the file when it cannot be); the compile child is given a
    copy, so a FIFO's bytes are read once."""
    if self._config_text is None:
      path = self.target_config
      if not os.path.lexists(path):
        raise DumpError(f"--target_config {path!r} is not a file")
      data = bounded_input.read_side_input(path, "a GPU target config")
      try:
        self._config_text = data.decode("utf-8")
      except UnicodeDecodeError as e:
        raise DumpError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return self._config_text

  def validate(self) -> None:
    if self.topology is not None:
      self.core_topology()
      self.config_text()
    elif self.cpu_devices < 1:
      raise DumpError(f"--cpu_devices must be >= 1, got {self.cpu_devices}")

  def num_devices(self) -> int:
    if self.topology is None:
      return self.cpu_devices
    return self.core_topology().num_devices

  def devices_per_host(self) -> int:
    """GPUs per host of the topology; all devices for the CPU (one host)."""
    if self.topology is None:
      return self.num_devices()
    return self.core_topology().gpus_per_host

  def for_child(self) -> dict:
    """The fields a compile child rebuilds the Target from (it parses the spec
    again in its own process)."""
    return {
      "topology": self.topology,
      "cpu_devices": self.cpu_devices,
      "target_config": self.target_config,
    }

  def describe(self) -> dict[str, Any]:
    if self.topology is None:
      return {"platform": "cpu", "num_devices": self.cpu_devices}
    return {
      "platform": "cuda",
      "topology": self.topology,
      "num_devices": self.num_devices(),
      "target_config": os.path.abspath(self.target_config),
    }


# ----------------------------------------------------------------------------
# The mesh: [[axis name, size], ...], slowest-varying axis first.


def parse_mesh(text: str) -> MeshAxes:
  """'cp:4,tp:2' -> [['cp', 4], ['tp', 2]]. Raises DumpError on bad syntax."""
  axes: MeshAxes = []
  for part in text.split(","):
    name, sep, size = part.strip().partition(":")
    if not sep or not _AXIS_RE.match(name) or not size.isdigit() or int(size) < 1:
      raise DumpError(
        f"bad --mesh {text!r}: expected NAME:SIZE[,NAME:SIZE...] with "
        "positive sizes, e.g. cp:4,tp:2"
      )
    if name in (a for a, _ in axes):
      raise DumpError(f"bad --mesh {text!r}: axis {name!r} given twice")
    axes.append([name, int(size)])
  return axes


def format_mesh(axes: MeshAxes) -> str:
  return ",".join(f"{name}:{size}" for name, size in axes)


def _spec_axes(source: dict[str, Any]) -> list[str]:
  """Mesh axis names the partition specs of --arg and --out_spec use, in order."""
  specs = [a.split(":")[2] for a in source["args"] if a.count(":") == 2]
  names: list[str] = []
  outs = [] if source.get("global") else out_specs(source)
  for spec in specs + outs:
    for part in spec.split(","):
      if part not in ("", "None", "none") and part not in names:
        names.append(part)
  return names


def _default_mesh(source: dict[str, Any], target: Target) -> MeshAxes:
  n = target.num_devices()
  if source["kind"] == "program" and source["program"] == "train_step":
    from hlo_tools.programs import train_step  # pylint: disable=import-outside-toplevel

    return [list(axis) for axis in train_step.default_mesh(n, target.devices_per_host())]
  if source["kind"] == "script":
    return [["cp", n]]
  if source["kind"] == "function":
    names = _spec_axes(source)
    if len(names) > 1:
      raise DumpError(
        f"the partition specs name mesh axes {', '.join(names)}: give "
        f"their sizes with --mesh, e.g. --mesh={names[0]}:{n},"
        + ",".join(f"{x}:1" for x in names[1:])
      )
    return [[names[0] if names else "cp", n]]
  return [["cp", n]]


def resolve_mesh(source: dict[str, Any], target: Target, mesh_text: str | None = None) -> MeshAxes:
  """The mesh of a compiled source: --mesh checked against the target and the
  program, else the default (see the module docstring)."""
  axes = parse_mesh(mesh_text) if mesh_text else _default_mesh(source, target)
  product = 1
  for _, size in axes:
    product *= size
  if product != target.num_devices():
    raise DumpError(
      f"--mesh {format_mesh(axes)} has {product} devices, but the target has {target.num_devices()}"
    )
  names = [a for a, _ in axes]
  if source["kind"] == "ring" and names != ["cp"]:
    raise DumpError(f"--mesh {format_mesh(axes)}: the ring-attention example has one mesh axis, cp")
  if source["kind"] == "program" and source["program"] == "train_step":
    if sorted(names) != ["cp", "tp"]:
      raise DumpError(
        f"--mesh {format_mesh(axes)}: the train step's mesh axes are cp "
        "and tp (either may have size 1)"
      )
    from hlo_tools.programs import train_step  # pylint: disable=import-outside-toplevel

    try:  # shapes that do not split over the mesh fail here, before any compile
      train_step.TrainConfig(**source["config"]).validate(
        {str(name): int(size) for name, size in axes}
      )
    except (TypeError, ValueError) as e:
      raise DumpError(f"--program=train_step on mesh {format_mesh(axes)}: {e}") from None
  if source["kind"] == "function":
    unknown = [a for a in _spec_axes(source) if a not in names]
    if unknown:
      raise DumpError(
        f"--arg/--out_spec name mesh axis {unknown[0]!r}, which the mesh "
        f"{format_mesh(axes)} does not have"
      )
  return axes


def out_specs(source: dict[str, Any]) -> list[str]:
  """A function source's out_specs as texts: one per output of a function that
  returns a tuple (repeated --out_spec), else the one spec (default cp)."""
  spec = source.get("out_spec")
  if spec is None:
    return ["cp"]
  return [spec] if isinstance(spec, str) else [s or "" for s in spec]


def _devices(target: Target) -> Any:
  import jax

  if target.topology is None:
    return jax.devices("cpu")
  from jax.experimental import topologies

  with open(target.target_config) as f:
    config = f.read()
  return topologies.get_topology_desc(
    platform="cuda", topology=jax_topology(target.core_topology()), target_config=config
  ).devices
