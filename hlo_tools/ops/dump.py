"""Compiles a JAX program (or reads an XLA dump) into a stage directory: the module
before and after XLA's passes, a manifest of what produced it; the JAX compile runs
in a child process."""

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from typing import Any

from hlo_tools import bounded_input
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
from hlo_tools.ops.dump_compile import LOWERED_FILE, _local_versions, compile_in_child
from hlo_tools.ops.dump_target import DEFAULT_TARGET_CONFIG, Target, resolve_mesh
from hlo_tools.ops.outdir import make_work_dir, publish

PROGRAMS = ("ring", "train_step")  # the built-in programs (--program)


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
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
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


def copy_dump_folder(
  folder: str, to: str, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
) -> None:
  """XLA's --xla_dump_to `folder` copied to `to`, each file read as every input is
  (bounded_input.read_input: within max_bytes and the input timeout; a link followed, a
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
        f"{entry.path}: {bounded_input.kind_of(entry.path)} in the dump folder, not a regular file"
      )
    with open(target, "wb") as f:
      f.write(bounded_input.read_input(entry.path, max_bytes))


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
