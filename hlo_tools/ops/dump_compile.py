"""The compile of a dump's source in a child process: the parent side starts it with XLA's
dump flags and reads its report; the child side lowers and compiles the JAX program."""

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from hlo_tools.errors import DumpError
from hlo_tools.model.dumps import XLA_DUMP_SUBDIR
from hlo_tools.ops.dump_target import (
  _PACKAGE,
  MeshAxes,
  Target,
  _devices,
  out_specs,
  resolve_mesh,
)

_ERROR_FILE = "child_error.txt"
_INFO_FILE = "child_info.json"
_LOG_FILE = "child.log"
LOWERED_FILE = "lowered.hlo"


# ----------------------------------------------------------------------------
# Child side: runs with XLA_FLAGS already in its environment.


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
        "import sys; from hlo_tools.ops import dump_compile; "
        "sys.exit(dump_compile._child_main(sys.argv[1:]))",
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
