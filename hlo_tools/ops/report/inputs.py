"""A case's input modules under hlo/: a user's file as text, a dump's stages, or a compile."""

from __future__ import annotations

import os
from collections.abc import Callable

from hlo_tools import bounded_input
from hlo_tools.errors import ESCAPE_ERRORS, DumpError, InputError
from hlo_tools.hlo import buffer_assignment, module_config, proto
from hlo_tools.model import dumps, placement
from hlo_tools.ops import dump, dump_target
from hlo_tools.ops.report.cases import Case


def write_text(path: str, text: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  # A file name that is not UTF-8 is shown with its bytes escaped (\xff).
  with open(path, "w", encoding="utf-8", errors=ESCAPE_ERRORS) as f:
    f.write(text)


def _compiled_inputs(case: Case, case_dir: str, say: Callable[[str], None]) -> str:
  """Compiles the case's program with every pass dumped; returns its dump directory."""
  dump_dir = os.path.join(case_dir, "dump")
  assert case.source is not None, "a case without a path compiles its source"
  say(f"{case.id}: compiling for {case.compile_topology} (deviceless, all passes)")
  try:
    # The whole spec for the manifest, its SxHxG (already parsed) for jax.
    target = dump_target.Target(
      topology=case.topology,
      parsed=case.parsed,
      target_config=case.target_config or dump_target.DEFAULT_TARGET_CONFIG,
    )
    dump.dump(
      case.source,
      dump_dir,
      target=target,
      all_passes=True,
      options=dict(case.config or {}),
      progress=False,
    )
  except DumpError as e:
    raise InputError(f"hlo-tools report: compile failed: {e}") from None
  return dump_dir


def _file_text(path: str, max_bytes: int, label: str | None = None) -> tuple[str, str | None]:
  """(HLO text of FILE, a module config placing it or None): text as is; a serialized
  module (XLA's X.hlo.pb, an HloProto, or a bare HloModuleProto) printed by jaxlib,
  with the device assignment it carries as a config.
  label: how errors name the file (the user's spelling of it)."""
  label = label or path
  data = bounded_input.read_input(path, max_bytes, label)
  if proto.looks_like_text(data) or b"\0" not in data[:4096] and proto.module_bytes(data) is None:
    return data.decode("utf-8", errors="replace"), None
  module = proto.module_bytes(data)
  if module is None:
    raise InputError(f"{label}: neither HLO text nor a serialized HloModuleProto")
  assignment = proto.device_assignment(module, label)
  return (
    proto.to_text(module, label, assignment),
    proto.config_text(assignment) if assignment is not None else None,
  )


def prepare_inputs(
  case: Case, case_dir: str, say: Callable[[str], None], max_bytes: int
) -> tuple[dict[str, str], str | None, str]:
  """Writes the case's input modules under hlo/; returns ({stage: path}, dump dir,
  the module file whose XLA config places its devices)."""
  hlo_dir = os.path.join(case_dir, "hlo")
  os.makedirs(hlo_dir, exist_ok=True)
  dump_dir = None
  if case.path is not None and os.path.isfile(case.path):
    text, config = _file_text(case.path, max_bytes, case.label)
    copy = os.path.join(hlo_dir, "input.hlo")
    write_text(copy, text)
    # XLA's buffer assignment beside the user's file goes with the copy, as a dump's.
    placed = buffer_assignment.sibling_path(case.path)
    if buffer_assignment.found(placed, max_bytes):
      buffer_assignment.copy(placed, buffer_assignment.sibling_path(copy), max_bytes)
    # The config beside the user's file places it; else the proto's own assignment.
    if config is not None and placement.config_path(case.path) is None:
      write_text(module_config.sidecar_path(copy), config)
      return {"input": copy}, None, copy
    return {"input": copy}, None, case.path
  dump_dir = case.path if case.path is not None else _compiled_inputs(case, case_dir, say)
  stages = {}
  for stage in ("before_async", "after_optimizations"):
    try:
      src = dumps.read_stage(dump_dir, stage, max_bytes, case.program)
    except InputError:
      continue  # a dump without every pass has no before_async
    stages[stage] = os.path.join(hlo_dir, f"{stage}.hlo")
    write_text(stages[stage], src.text)
    # XLA's buffer assignment of the module, where it dumped one, goes with the copy
    # (and the pass's output): report's verify then judges what verify would.
    beside = buffer_assignment.sibling_path(src.path) if src.path else None
    if beside and buffer_assignment.found(beside, max_bytes):
      buffer_assignment.copy(beside, buffer_assignment.sibling_path(stages[stage]), max_bytes)
  if not stages:
    raise InputError(
      f"{dump_dir}: no after_optimizations module and no per-pass snapshots in this dump directory"
    )
  if case.program is None:
    return stages, dump_dir, dump_dir
  # One program of several: any of its files in the dump leads to its own config.
  return stages, dump_dir, dumps.program_file(dump_dir, case.program)
