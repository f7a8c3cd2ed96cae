"""Compiles a JAX program (or reads an XLA dump) into a stage directory: the module
before and after XLA's passes, a manifest of what produced it; the JAX compile runs
in a child process."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from hlo_tools import cli_io, selection
from hlo_tools.errors import DumpError
from hlo_tools.hlo import buffer_assignment, module_config
from hlo_tools.model import sources
from hlo_tools.model.dumps import (
  BEFORE_ASYNC_PASS,
  XLA_DUMP_SUBDIR,
  DumpReadError,
  index_xla_dump,
  main_module,
  pass_snapshot_text,
  program_permutes,
)
from hlo_tools.model.topology import jax_topology
from hlo_tools.ops.outdir import make_work_dir, publish

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hlo_tools/
DEFAULT_TARGET_CONFIG = os.path.join(_PACKAGE, "data", "h200_gpu_target_config.pbtxt")
_ERROR_FILE = "child_error.txt"
_INFO_FILE = "child_info.json"
_LOG_FILE = "child.log"
LOWERED_FILE = "lowered.hlo"
_AXIS_RE = re.compile(r"^[A-Za-z_]\w*$")
PROGRAMS = ("ring", "train_step")  # the built-in programs (--program)
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
      data = cli_io.read_side_input(path, "a GPU target config")
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


# ----------------------------------------------------------------------------
# Child side: runs with XLA_FLAGS already in its environment.


def out_specs(source: dict[str, Any]) -> list[str]:
  """A function source's out_specs as texts: one per output of a function that
  returns a tuple (repeated --out_spec), else the one spec (default cp)."""
  spec = source.get("out_spec")
  if spec is None:
    return ["cp"]
  return [spec] if isinstance(spec, str) else [s or "" for s in spec]


def _parse_spec(text: str) -> Any:
  """'cp' -> P('cp'); 'None,cp' or ',cp' -> P(None, 'cp'); '' -> P() (replicated)."""
  from jax.sharding import PartitionSpec as P

  if not text:
    return P()
  return P(*[None if part in ("", "None", "none") else part for part in text.split(",")])


def _parse_arg(text: str) -> tuple[tuple[int, ...], str, Any]:
  """'8192,8,128:bf16:cp' -> (shape, dtype name, PartitionSpec)."""
  parts = text.split(":")
  if len(parts) not in (2, 3):
    raise DumpError(f"bad --arg {text!r}: expected SHAPE:DTYPE[:PARTITIONSPEC]")
  try:
    shape = tuple(int(x) for x in parts[0].split(",") if x)
  except ValueError:
    raise DumpError(f"bad shape in --arg {text!r}") from None
  return shape, parts[1], _parse_spec(parts[2] if len(parts) == 3 else "")


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


def _user_function(source: dict[str, Any], mesh: Any) -> tuple[Any, list[Any]]:
  """Imports module:function and wraps it in shard_map with the --arg specs (with
  --global: as it is; it runs its own shard_map or jit sharding on the mesh)."""
  import importlib

  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding

  from hlo_tools.programs import ring_attention

  module_name, _, fn_name = source["function"].partition(":")
  try:
    fn = getattr(importlib.import_module(module_name), fn_name)
  except (ImportError, AttributeError) as e:
    raise DumpError(f"cannot import {source['function']!r}: {e}") from None
  if not source["args"]:
    raise DumpError("a module:function source needs at least one --arg")
  parsed = [_parse_arg(a) for a in source["args"]]
  args = []
  for shape, dtype, spec in parsed:
    dt = ring_attention.DTYPES.get(dtype) or jnp.dtype(dtype)
    args.append(jax.ShapeDtypeStruct(shape, dt, sharding=NamedSharding(mesh, spec)))
  if source.get("global"):
    return fn, args
  specs = [_parse_spec(s) for s in out_specs(source)]
  out_spec = specs[0] if len(specs) == 1 else tuple(specs)
  wrapped = jax.shard_map(
    fn,
    mesh=mesh,
    in_specs=tuple(s for _, _, s in parsed),
    out_specs=out_spec,
    check_vma=source.get("check_vma", True),
  )
  return wrapped, args


def _program(source: dict[str, Any], mesh: Any) -> tuple[Any, Any]:
  """The function and abstract arguments of a built-in program or module:function."""
  from hlo_tools.programs import ring_attention

  if source["kind"] == "ring":
    ring = ring_attention.RingConfig(**source["config"])
    ring.validate(mesh.size)
    return (ring_attention.example_function(ring, mesh), ring_attention.example_args(ring, mesh))
  if source["kind"] == "program":
    from hlo_tools.programs import train_step

    config = train_step.TrainConfig(**source["config"])
    config.validate(dict(mesh.shape))
    return (train_step.train_step_function(config, mesh), train_step.example_args(config, mesh))
  return _user_function(source, mesh)


def _child_compile(spec: dict[str, Any]) -> None:
  """Lowers and compiles once; XLA writes its dump files as a side effect."""
  import jax
  import jaxlib
  import numpy as np
  from jax.sharding import Mesh

  target = Target(**spec["target"])
  out_dir = spec["out_dir"]
  devices = _devices(target)
  source = spec["source"]
  names = [name for name, _ in spec["mesh"]]
  mesh = Mesh(np.asarray(devices).reshape([size for _, size in spec["mesh"]]), names)
  if source["kind"] == "script":
    _child_script(source, mesh, out_dir, devices)
    return
  fn, args = _program(source, mesh)
  print("hlo-tools dump: lowering", file=sys.stderr, flush=True)
  with jax.set_mesh(mesh):  # the mesh of shard_maps and shardings that name none
    lowered = jax.jit(fn).lower(*args)
  with open(os.path.join(out_dir, "stablehlo.mlir"), "w") as f:
    f.write(lowered.as_text())
  try:  # the HLO a user gets from jax.jit(f).lower(...) (no num_partitions in it)
    hlo = lowered.as_text(dialect="hlo")
  except Exception:  # pylint: disable=broad-except  # older jax: no such dialect
    hlo = None
  if hlo:
    with open(os.path.join(out_dir, LOWERED_FILE), "w") as f:
      f.write(hlo)
  print("hlo-tools dump: compiling", file=sys.stderr, flush=True)
  compiled = lowered.compile()
  text = compiled.as_text() or ""
  module_name = text.split(None, 2)[1].rstrip(",") if text.startswith("HloModule") else None
  versions = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
  try:
    from importlib import metadata

    for dist in metadata.distributions():
      name = dist.metadata["Name"] or ""
      if name.startswith("jax-cuda") or name.startswith("jax_cuda"):
        versions[name] = dist.version
  except Exception:  # versions are informative only
    pass
  with open(os.path.join(out_dir, _INFO_FILE), "w") as f:
    json.dump(
      {"module_name": module_name, "versions": versions, "devices": [str(d) for d in devices]},
      f,
      indent=1,
    )


def _child_script(source: dict[str, Any], mesh: Any, out_dir: str, devices: Any) -> None:
  """A script of several jitted functions (module:run(mesh, config)): XLA dumps each
  as a program of its own; the one run() names is the main module."""
  import importlib

  module_name, _, fn_name = source["script"].partition(":")
  try:
    fn = getattr(importlib.import_module(module_name), fn_name or "run")
  except (ImportError, AttributeError) as e:
    raise DumpError(f"cannot import {source['script']!r}: {e}") from None
  print("hlo-tools dump: running the script", file=sys.stderr, flush=True)
  main = fn(mesh, source.get("config") or {})
  with open(os.path.join(out_dir, _INFO_FILE), "w") as f:
    json.dump(
      {"module_name": main, "versions": _local_versions(), "devices": [str(d) for d in devices]},
      f,
      indent=1,
    )


def _is_vma_error(message: str) -> bool:
  """jax's shard_map type error for a carry or branch whose manual axes differ."""
  return (
    "manual axis types" in message
    or "check_vma" in message
    or "varying manual axes" in message
    or "{V:" in message
  )


def _child_main(argv: list[str]) -> int:
  spec = json.loads(argv[0])
  try:
    _child_compile(spec)
  except Exception as e:  # pylint: disable=broad-except
    # The parent reports this line; the full traceback stays in child.log.
    import traceback

    traceback.print_exc()
    message = " ".join(str(e).split()) or type(e).__name__
    if not isinstance(e, DumpError):
      message = f"{type(e).__name__}: {message}"
    if _is_vma_error(message) and spec["source"].get("check_vma", True):
      message = (
        f"shard_map's varying-type check (check_vma) rejects {spec['source'].get('function')}"
        ": rerun with --nocheck_vma to compile it without the check, or make the "
        "loop carry / cond branches varying (jax.lax.pcast) as jax says: " + message
      )
    with open(os.path.join(spec["out_dir"], _ERROR_FILE), "w") as f:
      f.write(message[:2000])
    return 3
  return 0


# ----------------------------------------------------------------------------
# Parent side.


def _child_env(
  target: Target, xla_dump_dir: str, pass_re: str | None, as_proto: bool = False
) -> dict[str, str]:
  env = dict(os.environ)
  flags = [env.get("XLA_FLAGS", ""), f"--xla_dump_to={xla_dump_dir}", "--xla_dump_hlo_as_text"] + (
    ["--xla_dump_hlo_as_proto"] if as_proto else []
  )
  if pass_re:
    flags.append(f"--xla_dump_hlo_pass_re={pass_re}")
  if target.topology is None:
    flags.append(f"--xla_force_host_platform_device_count={target.cpu_devices}")
  else:
    # Deviceless: compile for the GPU topology on the CPU, no GPU needed.
    env["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
  env["JAX_PLATFORMS"] = "cpu"
  env["XLA_FLAGS"] = " ".join(f for f in flags if f)
  # The child must import hlo_tools even when it is not installed, and user
  # modules relative to the caller's working directory.
  package_root = os.path.dirname(_PACKAGE)
  paths = [package_root, os.getcwd()] + [
    p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p
  ]
  env["PYTHONPATH"] = os.pathsep.join(paths)
  return env


def _die_with_parent() -> None:
  """In the child: end when the parent does (a killed command leaves no compile
  writing into a directory the next run cleans up)."""
  import ctypes  # pylint: disable=import-outside-toplevel
  import signal  # pylint: disable=import-outside-toplevel

  try:
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


def compile_in_child(
  work_dir: str,
  source: dict[str, Any],
  target: Target,
  pass_re: str | None = None,
  progress: bool = True,
  mesh: MeshAxes | None = None,
  as_proto: bool = False,
) -> dict[str, Any]:
  """Compiles `source` for `target` in a child; XLA's files land in work_dir/xla_dump.

  mesh: [[axis, size], ...] (resolve_mesh's answer), else source["mesh"] (the
  --mesh text) or the source's default.
  Returns the child's info dict (module name, versions, mesh). Raises DumpError.
  """
  xla_dir = os.path.join(work_dir, XLA_DUMP_SUBDIR)
  os.makedirs(xla_dir, exist_ok=True)
  mesh = mesh or resolve_mesh(source, target, source.get("mesh"))
  child_target = target.for_child()
  if target.topology is not None:  # the child reads a copy of the text read here
    config_copy = tempfile.NamedTemporaryFile(
      "w", prefix="hlo-tools-target-", suffix=".pbtxt", delete=False
    )
    with config_copy:
      config_copy.write(target.config_text())
    child_target["target_config"] = config_copy.name
  try:
    return _run_child(
      work_dir, source, child_target, mesh, xla_dir, target, pass_re, as_proto, progress
    )
  finally:
    if target.topology is not None:
      os.unlink(child_target["target_config"])


def _run_child(
  work_dir: str,
  source: dict[str, Any],
  child_target: dict[str, Any],
  mesh: MeshAxes,
  xla_dir: str,
  target: Target,
  pass_re: str | None,
  as_proto: bool,
  progress: bool,
) -> dict[str, Any]:
  spec = {"source": source, "target": child_target, "out_dir": work_dir, "mesh": mesh}
  log_path = os.path.join(work_dir, _LOG_FILE)
  start = time.monotonic()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(
      [
        sys.executable,
        "-c",
        "import sys; from hlo_tools.ops import dump; sys.exit(dump._child_main(sys.argv[1:]))",
        json.dumps(spec),
      ],
      env=_child_env(target, xla_dir, pass_re, as_proto),
      stdout=log,
      stderr=log,
      preexec_fn=_die_with_parent,
    )
    last_report = start
    while proc.poll() is None:
      time.sleep(0.2)
      now = time.monotonic()
      if progress and now - last_report >= 10:
        print(
          f"hlo-tools dump: still compiling ({now - start:.0f}s, "
          f"{len(os.listdir(xla_dir))} XLA files so far)",
          file=sys.stderr,
          flush=True,
        )
        last_report = now
  error_path = os.path.join(work_dir, _ERROR_FILE)
  if os.path.exists(error_path):
    with open(error_path) as f:
      raise DumpError(f.read().strip())
  if proc.returncode != 0:
    with open(log_path) as f:
      tail = [l for l in f.read().splitlines() if l.strip()][-1:] or ["(no output)"]
    raise DumpError(f"compile process failed (exit {proc.returncode}): {tail[0]}")
  with open(os.path.join(work_dir, _INFO_FILE)) as f:
    return dict(json.load(f), mesh=mesh)


def write_stages(work_dir: str, modules: dict[str, Any], main_key: str | None) -> dict[str, str]:
  """Copies the main module's stage files to fixed names, each with XLA's module config
  beside it (module_config.sidecar_path); returns stage -> file."""
  stages = _write_module_stages(work_dir, modules, main_key)
  if os.path.exists(os.path.join(work_dir, LOWERED_FILE)):
    stages["lowered"] = LOWERED_FILE  # jax's lowering of the same compile: same devices
  config = main_key and module_config.xla_dump_config(
    os.path.join(work_dir, XLA_DUMP_SUBDIR), main_key
  )
  if config:
    for fname in stages.values():
      shutil.copyfile(config, module_config.sidecar_path(os.path.join(work_dir, fname)))
  if os.path.exists(os.path.join(work_dir, "stablehlo.mlir")):
    stages["stablehlo"] = "stablehlo.mlir"
  return dict(sorted(stages.items()))


def _write_module_stages(
  work_dir: str, modules: dict[str, Any], main_key: str | None
) -> dict[str, str]:
  stages: dict[str, str] = {}
  if main_key is not None:
    for stage, fname in sorted(modules[main_key]["stages"].items()):
      shutil.copyfile(
        os.path.join(work_dir, XLA_DUMP_SUBDIR, fname), os.path.join(work_dir, stage + ".hlo")
      )
      stages[stage] = stage + ".hlo"
      # Its buffer assignment beside it, where the runtime rules look for it.
      placed = buffer_assignment.sibling_path(os.path.join(work_dir, XLA_DUMP_SUBDIR, fname))
      if os.path.isfile(placed):
        shutil.copyfile(
          placed, buffer_assignment.sibling_path(os.path.join(work_dir, stage + ".hlo"))
        )
    if modules[main_key]["passes"]:  # every pass dumped: what the assigner sees
      try:
        text = pass_snapshot_text(
          os.path.join(work_dir, XLA_DUMP_SUBDIR), BEFORE_ASYNC_PASS, main_key, when="before"
        )
      except DumpReadError:
        return stages  # no async-collective-creator in this pipeline
      with open(os.path.join(work_dir, "before_async.hlo"), "w") as f:
        f.write(text)
      stages["before_async"] = "before_async.hlo"
  return stages


def _check_not_inside(xla_dir: str, out: str) -> None:
  """Refuses an --out that is the indexed XLA folder, holds it or lies in it: the
  new directory replaces --out, and the user's files with it."""
  src, dest = os.path.realpath(xla_dir), os.path.realpath(out)
  if src == dest or src.startswith(dest + os.sep) or dest.startswith(src + os.sep):
    raise DumpError(
      f"--out {out!r} is the XLA dump folder {xla_dir!r}, holds it or lies "
      "in it: writing the index there would move XLA's files; give --out "
      "a directory outside it"
    )


def _target_of_xla_dump(
  xla_dir: str,
  modules: dict[str, Any],
  main_key: str | None,
  config: module_config.ModuleConfig | None,
) -> dict[str, Any]:
  """What an indexed folder says of its target: the platform its file names give
  (XLA's GPU compiler prefixes its stage files with the architecture) and the devices
  of the main module's config; the job's topology is not in XLA's files."""
  gpu = any("_gpu_after_optimizations" in f for m in modules.values() for f in m["stages"].values())
  devices = (config.replica_count * config.computation_count) if config else None
  return {
    "platform": "cuda" if gpu else None,
    "topology": None,
    "num_devices": devices,
    "note": "indexed as XLA dumped it: XLA records no topology; give --topology "
    "to the commands that decide",
  }


def _check_out(out: str, overwrite: bool) -> None:
  if os.path.isdir(out) and os.listdir(out) and not overwrite:
    raise DumpError(f"--out {out!r} exists and is not empty (use --overwrite)")
  if os.path.exists(out) and not os.path.isdir(out):
    raise DumpError(f"--out {out!r} exists and is not a directory")


def dump(
  source: dict[str, Any],
  out: str,
  target: Target | None = None,
  all_passes: bool = False,
  overwrite: bool = False,
  options: dict[str, Any] | None = None,
  progress: bool = True,
  max_bytes: int = cli_io.DEFAULT_MAX_INPUT_BYTES,
) -> dict[str, Any]:
  """Library entry point behind `hlo-tools dump`. Returns the manifest dict.
  max_bytes: the bound of each file read from an --xla_dump_to folder.

  source: {"kind": "ring", "config": {...}}, {"kind": "program", "program":
  "train_step", "config": {...}}, {"kind": "function", "function": "mod:fn", "args":
  [...], "out_spec": "cp"} (each with an optional "mesh": "cp:4,tp:2") or {"kind":
  "xla_dump", "dir": DIR}. The manifest's keys are described in model/dumps.py.
  """
  target = target or Target()
  out = os.path.abspath(out)
  mesh = None
  if source["kind"] != "xla_dump":
    target.validate()
    mesh = resolve_mesh(source, target, source.get("mesh"))
  else:
    _check_not_inside(source["dir"], out)
  _check_out(out, overwrite)
  work_dir = make_work_dir(out)
  try:
    info = {}
    if source["kind"] == "xla_dump":
      if progress:
        print(f"hlo-tools dump: indexing {source['dir']}", file=sys.stderr)
      copy_dump_folder(source["dir"], os.path.join(work_dir, XLA_DUMP_SUBDIR), max_bytes)
    else:
      if progress:
        print(f"hlo-tools dump: compiling for {target.describe()}", file=sys.stderr)
      info = compile_in_child(
        work_dir, source, target, pass_re=".*" if all_passes else None, progress=progress, mesh=mesh
      )
    modules = index_xla_dump(os.path.join(work_dir, XLA_DUMP_SUBDIR))
    if not modules:
      raise DumpError(f"no XLA module dumps found in {source.get('dir', work_dir)}")
    permutes = {key: program_permutes(work_dir, key) for key in modules}
    main_key = main_module(modules, info.get("module_name"))
    if not info.get("module_name") and main_key is not None and permutes.get(main_key) == 0:
      # An indexed folder of several programs: the one the pass has most to decide
      # in, not the last one XLA compiled (a script's metrics function).
      with_permutes = [k for k, n in permutes.items() if n]
      if with_permutes:
        main_key = max(with_permutes, key=lambda k: (permutes[k] or 0, modules[k]["id"]))
    config = _main_config(work_dir, main_key, source)
    if source["kind"] == "xla_dump" and main_key is not None:
      # The stages the dump names are read as every command will read them: a file
      # no reader takes is refused here, under its name in the user's folder.
      for fname in modules[main_key]["stages"].values():
        xla_copy = os.path.join(work_dir, XLA_DUMP_SUBDIR, fname)
        sources.read_source(xla_copy, os.path.join(source["dir"], fname), max_bytes)
    stages = write_stages(work_dir, modules, main_key)
    manifest = {
      "source": source,
      "target": (
        _target_of_xla_dump(os.path.join(work_dir, XLA_DUMP_SUBDIR), modules, main_key, config)
        if source["kind"] == "xla_dump"
        else target.describe()
      ),
      "mesh": None if mesh is None else dict(mesh),
      "versions": info.get("versions") or _local_versions(),
      "options": dict(options or {}, all_passes=all_passes),
      "stages": stages,
      "partition_to_device": list(config.partition_to_device)
      if config and config.partition_to_device
      else None,
      "main_module": main_key,
      # Every program of the folder: the commands decide each one that has
      # collective-permutes (DIR:PROGRAM:STAGE picks one).
      "programs": [
        {"module": k, "collective_permutes": permutes[k]}
        for k in sorted(modules, key=lambda k: modules[k]["id"])
      ],
      "xla_dump_dir": XLA_DUMP_SUBDIR,
      "modules": modules,
    }
    with open(os.path.join(work_dir, "manifest.json"), "w") as f:
      json.dump(manifest, f, indent=1)
    publish(work_dir, out)
    if progress:
      n = sum(len(m["passes"]) for m in modules.values())
      print(
        f"hlo-tools dump: wrote {out} ({len(stages)} stages, {n} pass snapshots)", file=sys.stderr
      )
    return manifest
  except BaseException:
    shutil.rmtree(work_dir, ignore_errors=True)
    raise


def copy_dump_folder(folder: str, to: str, max_bytes: int = cli_io.DEFAULT_MAX_INPUT_BYTES) -> None:
  """XLA's --xla_dump_to `folder` copied to `to`, each file read as every input is
  (cli_io.read_input: within max_bytes and the input timeout; a link followed, a
  loop refused): a FIFO, device or socket among XLA's files is refused with its
  name, never copied without end (/dev/zero) or waited on."""
  os.makedirs(to)
  for entry in sorted(os.scandir(folder), key=lambda e: e.name):
    target = os.path.join(to, entry.name)
    if entry.is_dir():  # follows a link, as copytree's copy of the content does
      copy_dump_folder(entry.path, target, max_bytes)
      continue
    if not entry.is_file() and os.path.exists(entry.path):
      raise DumpError(
        f"{entry.path}: {cli_io.kind_of(entry.path)} in the dump folder, not a regular file"
      )
    with open(target, "wb") as f:
      f.write(cli_io.read_input(entry.path, max_bytes))


def _main_config(
  work_dir: str, main_key: str | None, source: dict[str, Any]
) -> module_config.ModuleConfig | None:
  """The main module's config (module_config.ModuleConfig), None where XLA wrote none;
  a bad one is refused under the name the user gave it."""
  path = main_key and module_config.xla_dump_config(
    os.path.join(work_dir, XLA_DUMP_SUBDIR), main_key
  )
  if not path:
    return None
  label = path
  if source["kind"] == "xla_dump":
    label = os.path.join(source["dir"], os.path.basename(path))
  return module_config.read_config(path, label=label)


def _local_versions() -> dict[str, str]:
  """Versions without importing jax (indexing never needs it)."""
  from importlib import metadata

  versions: dict[str, str] = {}
  for name in ("jax", "jaxlib"):
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      pass
  return versions


def dump_pass_snapshot(
  config: Any,
  topology: str,
  pass_name: str,
  target_config: str = DEFAULT_TARGET_CONFIG,
  occurrence: int = -1,
  when: str = "after",
  progress: bool = False,
) -> str:
  """Compiles the ring example for a GPU topology; returns the HLO after `pass_name`.

  E.g. pass_name="collective-permute-combiner" gives the module XLA's own
  collective-backend-assigner sees: sync collective-permutes, final message sizes.
  when="before" gives the module a pass starts from instead (see pass_snapshot_text).
  config is a RingConfig, or a source dict as taken by dump().
  """
  if isinstance(config, dict):
    source = config
  else:
    source = {"kind": "ring", "config": dataclasses.asdict(config)}
  target = Target(topology=topology, target_config=target_config)
  target.validate()
  with tempfile.TemporaryDirectory(prefix="hlo-tools-snapshot-") as work_dir:
    info = compile_in_child(work_dir, source, target, pass_re=".*", progress=progress)
    xla_dir = os.path.join(work_dir, XLA_DUMP_SUBDIR)
    modules = index_xla_dump(xla_dir)
    return pass_snapshot_text(
      xla_dir, pass_name, main_module(modules, info.get("module_name")), occurrence, when
    )


# ----------------------------------------------------------------------------
# Command line.
