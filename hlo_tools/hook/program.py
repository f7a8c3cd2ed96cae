"""A stock XLA's one collectives mode per program: the core's choice, the caller's
explicit modes and marks, one compile, and the check of what XLA compiled."""

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlo_tools.errors import HookError
from hlo_tools.hlo import ir, reader
from hlo_tools.hook import decide, flags, text_edit
from hlo_tools.hook.decide import Record

if TYPE_CHECKING:  # jax and the binding are imported when first used
  import jax
  from jax.stages import Compiled, Lowered

  from hlo_tools._selection_core import CostTable, Topology


def program_choice(
  text: str,
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  label: str = "<module>",
  num_partitions: int | None = None,
  module: "ir.HloModule | None" = None,
) -> dict[str, Any]:
  """model.program_mode.choose on the module in HLO `text` (import_selection first:
  the model imports the binding). num_partitions: the program's device count where
  the text's header gives none (a lowered program's: jax knows it)."""
  from hlo_tools.model import decisions, program_mode, sources  # pylint: disable=import-outside-toplevel

  if module is None:
    source = sources.read_text(None, text, label)
  else:  # parsed already (the hook reads its marks from it)
    sources.require_entry(module, text, label)
    source = sources.Source(module, text, None, label)
  if "num_partitions" in source.module.attributes:
    num_partitions = None
  source = sources.resolve_partitions(source, topology, num_partitions)
  perms = decisions.analyze(source, topology, table)
  choice: dict[str, Any] = program_mode.choose(perms, source, topology, table, backends)
  return choice


def deviceless(device: "jax.Device") -> bool:
  """Whether jax compiles for `device` on a compile-only client with no live client
  of its platform to compile through (jax/_src/compiler.py
  _get_cross_compile_backend, jax 0.10.2): such a compile runs no registered
  transformation."""
  try:
    from jax._src import compiler  # pylint: disable=import-outside-toplevel
    from jax._src.lib import _jax  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  client = device.client
  if not isinstance(client, getattr(_jax, "CompileOnlyPyClient", ())):
    return False
  cross = getattr(compiler, "_get_cross_compile_backend", None)
  return cross is None or cross(client) is None


class HookWarning(UserWarning):
  """A mode the caller set that the hook keeps against the core's advice, or a
  second compile the optimized module asked for."""


# Where a compile's mode comes from when the caller set none.
CORE = "the core's choice"
MARKS = "the user's marks"


def _where(marks: list[Record]) -> str:
  return ", ".join(f"%{m['permute']} {m['value']}" for m in marks)


def _caller_mode(
  choice: dict[str, Any],
  mode: str,
  source: str,
  trust: bool,
  label: str,
  recheck: Callable[[str], dict[str, Any]],
  notes: list[str],
) -> str:
  """The why of keeping `mode`, which the caller set in `source`; a HookError where
  the core refuses it by a rule (a run that hangs or goes wrong), unless `trust`;
  a warning (in notes) where the core only models another mode faster."""
  setting = f"{source} sets {flags.FLAG}={mode}"
  if not choice["permutes"]:  # the mode changes nothing here: no advice, no warning
    return f"kept the caller's {setting}; the program has no collective-permute"
  backend = flags.MODE_BACKEND[mode]
  entry = choice["modes"].get(backend) or recheck(backend)["modes"][backend]
  if entry["refused"]:
    message = (
      f"{label}: {setting}, which the core refuses for this program: {entry['refused']}; "
      "remove that setting (the hook then chooses a safe mode), or pass "
      "trust_caller_mode=True to run it anyway"
    )
    if not trust:
      raise HookError(message)
    notes.append(f"{message}: kept, as trust_caller_mode=True asks")
    return (
      f"kept the caller's {setting} under trust_caller_mode, which the core refuses "
      f"({entry['refused']})"
    )
  if backend != choice["backend"]:
    notes.append(
      f"{label}: {setting}: kept, though the core models {choice['backend']} "
      f"faster for this program ({choice['why']})"
    )
    return f"kept the caller's {setting}; the modeled best is {choice['mode']} ({choice['why']})"
  return f"kept the caller's {setting}, the core's choice too: {choice['why']}"


def settle(
  choice: dict[str, Any],
  requested: str,
  requested_from: str,
  marks: list[Record],
  trust: bool,
  label: str,
  recheck: Callable[[str], dict[str, Any]],
) -> tuple[str, str, str, list[str], list[str]]:
  """(mode to apply, where it comes from, why, warnings, marked permutes that do not
  run as marked) for one program on a stock XLA. One policy for every mode the
  caller set (the compile's or jax.jit's compiler_options, XLA_FLAGS, a mark): kept,
  with a warning where the core models another mode faster; a HookError naming
  the permute and the rule where the core refuses it (a run that would hang or go
  wrong), unless trust_caller_mode. Marks that ask for two modes cannot all run on
  a stock XLA: the core's choice runs, with a warning. Without any, the core's
  choice."""
  notes: list[str] = []
  if requested_from != flags.XLA_DEFAULT:
    applied, mode_from = requested, requested_from
    why = _caller_mode(choice, requested, requested_from, trust, label, recheck, notes)
  elif marks and len({m["mode"] for m in marks}) > 1:
    applied, mode_from = choice["mode"], CORE
    wanted = sorted({m["mode"] for m in marks})
    why = (
      f"refused the marks' mode: the user's marks ask for {' and '.join(wanted)} "
      f"({_where(marks)}), and a stock XLA runs one mode for every permute of a "
      f"program; the program runs {applied}: {choice['why']}"
    )
  elif marks:
    applied, mode_from = marks[0]["mode"], MARKS
    source = f"the user's marks ({_where(marks)})"
    kept = _caller_mode(choice, applied, source, trust, label, recheck, notes)
    why = (
      f"kept the user's mark for the whole program: the user's marks ask for {applied} "
      f"({_where(marks)})"
      + (
        ""
        if applied == choice["mode"]
        else f"; the modeled best was {choice['mode']} ({choice['why']})"
      )
      + (
        " under trust_caller_mode, though the core refuses it"
        if "trust_caller_mode" in kept
        else ""
      )
    )
  else:
    applied, mode_from, why = choice["mode"], CORE, choice["why"]
  not_run = [m for m in marks if m["mode"] != applied]
  if not_run:
    where = ", ".join(f"%{m['permute']} ({m['value']})" for m in not_run)
    why += f"; not as marked: {where} run {applied}"
    notes.append(
      f"{label}: {where} marked for another mode run {applied}: a stock XLA runs "
      "one mode for the whole program"
    )
  return applied, mode_from, why, notes, [m["permute"] for m in not_run]


def permute_mode_list(text: str) -> list[tuple[str, str]]:
  """[(permute, the mode it runs)] of a compiled module, a permute without a mode
  running XLA's default (PRIVATE: NCCL)."""
  return [(n, m or flags.DEFAULT_MODE) for n, m in text_edit.permute_line_modes(text)]


def check_program_mode(
  text: str, applied: str, label: str, platform: str, kept: Mapping[str, str] | None = None
) -> dict[str, int]:
  """{mode: permutes} of the compiled module; a HookError where a permute does not
  carry `applied` (or, on the series' XLA, its own mark's mode: `kept`): what a
  record says ran must be what XLA compiled."""
  found = permute_mode_list(text)
  allowed = {applied, *(kept or {}).values()}
  bad = [(n, m) for n, m in found if m not in allowed]
  if bad:
    hint = (
      f"; the {platform} compiler writes no collectives mode, and runs none of them"
      if platform == "cpu"
      else ""
    )
    raise HookError(
      f"{label}: the record applies {applied} to the program's permutes, and XLA "
      f"compiled {', '.join(f'%{n} as {m}' for n, m in bad[:4])}"
      f"{' and more' if len(bad) > 4 else ''}{hint}"
    )
  counts: dict[str, int] = {}
  for _, m in found:
    counts[m] = counts.get(m, 0) + 1
  return counts


def _mode_counts(found: Mapping[str, int]) -> dict[str, int]:
  """{mode: count} of text_edit.permute_modes' {opcode:mode: count}, NCCL as PRIVATE
  (the form, sync or async, is XLA's later choice)."""
  out: dict[str, int] = {}
  for key, n in found.items():
    mode = key.split(":", 1)[1]
    mode = flags.DEFAULT_MODE if mode == "NCCL" else mode
    out[mode] = out.get(mode, 0) + n
  return out


def program_devices(lowered: "Lowered") -> list["jax.Device"]:
  """The program's devices in partition order, as jax assigned them."""
  lowering = getattr(lowered, "_lowering", None)
  devices = getattr(lowering, "_device_list", None)
  if devices:
    return list(devices)
  raise HookError(
    "hook.compile needs a program lowered for its devices (jax.jit(f).lower(...) "
    "with sharded arguments or a mesh); this one names none"
  )


def compile_program(
  lowered: "Lowered",
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  compiler_options: Mapping[str, Any] | None = None,
  per_op: bool | None = None,
  trust_caller_mode: bool = False,
  transformation: Callable[[], list[Record]] | None = None,
  decide_per_op: Callable[[str], str | None] | None = None,
) -> tuple["Compiled", Record]:
  """(compiled, record): `lowered` compiled once with the program's mode.

  The mode is decided before compiling, from the lowered program (a shard_map's
  permutes, with their shapes, pairs, loops and conditionals, are there before
  XLA's passes), by `settle`'s policy over the mode the caller set (the compile's
  compiler_options over jax.jit's, else XLA_FLAGS as XLA reads it) and the users'
  marks, and passed in compiler_options. The optimized module is then read again:
  where it contradicts the decision (a permute XLA's partitioner made, a loop's
  count) the program is compiled again, and the record says why; and every
  permute's compiled mode must be the one recorded (check_program_mode).

  On the series' XLA (per_op, else probed) the registered transformation decides
  each permute inside the one compile; `transformation()` returns the records of
  its calls during that compile, whose written modes must be those compiled; a
  compile that reached none (an executable from jax's persistent cache) is checked
  against the hook's decision for each permute of it (`decide_per_op`: the
  compiled text with the hook's modes, None where it would change nothing). A
  deviceless compile runs no registered transformation: there the series gets one
  mode for the program, as a stock XLA, and the record says so."""
  decide.import_selection()
  options = dict(compiler_options or {})
  requested, requested_from = flags.flag_in_effect(options, flags.jit_compiler_options(lowered))
  devices = program_devices(lowered)
  device = min(devices, key=lambda d: d.id)
  xla = (
    {"per_op": per_op, "evidence": "given by the caller"}
    if per_op is not None
    else flags.probe(device)
  )
  record: Record = {
    "xla": xla,
    "mode_requested": requested,
    "mode_requested_from": requested_from,
    "devices": [d.id for d in devices],
    "compiles": 1,
  }
  if xla["per_op"] and not deviceless(device):
    return _compile_per_op(lowered, options, requested, record, transformation, decide_per_op)
  fallback = ""
  if xla["per_op"]:
    fallback = (
      "a deviceless compile runs no registered transformation, so no permute "
      "gets its own mode: one mode for the whole program instead; "
    )
    record["per_op_fallback"] = True
  lowered_text = lowered.as_text(dialect="hlo")
  label = f"<{flags.module_name(lowered_text)}>"
  lowered_module = reader.parse_hlo_text(lowered_text)
  decide.check_collective_marks(lowered_module)
  marks = decide.user_marks(lowered_module)
  # The series' assigner runs each mark's own mode over the flag: only a stock XLA
  # needs the program's mode to be the marks'.
  stock_marks = [] if xla["per_op"] else marks

  def choose(
    text: str, names: Sequence[str], parts: int | None, module: "ir.HloModule"
  ) -> dict[str, Any]:
    return program_choice(
      text, topology, table, tuple(names), label=label, num_partitions=parts, module=module
    )

  first = choose(lowered_text, backends, len(devices), lowered_module)
  trust = trust_caller_mode
  if first["permutes"] or stock_marks:
    applied, _, _, _, _ = settle(
      first,
      requested,
      requested_from,
      stock_marks,
      trust,
      label,
      lambda b: choose(lowered_text, (*backends, b), len(devices), lowered_module),
    )
  else:  # no permute yet: what the caller's settings run, until the optimized module says
    applied = requested
  compiled = lowered.compile({**options, flags.FLAG: applied})
  text = flags.compiled_text(compiled)
  # The optimized module has the last word: the partitioner's permutes, their loops.
  module = reader.parse_hlo_text(text)
  decide.check_collective_marks(module)
  final_marks = [] if xla["per_op"] else decide.user_marks(module)
  choice = choose(text, backends, None, module)
  final, mode_from, why, notes, not_run = settle(
    choice,
    requested,
    requested_from,
    final_marks,
    trust,
    label,
    lambda b: choose(text, (*backends, b), None, module),
  )
  if final != applied:
    record["recompiled"] = (
      f"decided {applied} on the lowered program, and the optimized module "
      f"contradicts it ({why}): compiled again with {final}"
    )
    notes.append(f"{label}: {record['recompiled']}")
    record["compiles"] = 2
    compiled = lowered.compile({**options, flags.FLAG: final})
    text = flags.compiled_text(compiled)
  kept = {m["permute"]: m["mode"] for m in marks} if xla["per_op"] else None
  record["compiled_modes"] = check_program_mode(text, final, label, device.platform, kept)
  for note in dict.fromkeys(notes):  # each once, in order
    warnings.warn(note, HookWarning, stacklevel=3)
  record.update(
    {
      "program": choice,
      "decided_on": "the lowered program"
      + (", then the optimized module" if record["compiles"] > 1 else ""),
      "applied": final,
      "mode_from": mode_from,
      "why": fallback + why,
      "marks": final_marks if not xla["per_op"] else marks,
      "marks_not_run": not_run,
      "compiled_permutes": text_edit.permute_modes(text),
      "verified": True,
      "module": flags.module_name(text),
    }
  )
  for m in final_marks:
    m["runs"] = final
  return compiled, record


def check_written_modes(call: Record, text: str, label: str) -> None:
  """A HookError where the per-op transformation's call in a compile failed, or the
  modes it wrote (call["modes_out"]) are not those of the compiled module `text`."""
  if call.get("error"):
    raise HookError(f"{label}: the per-op transformation failed in this compile: {call['error']}")
  written = _mode_counts(call.get("modes_out") or {})
  compiled = _mode_counts(text_edit.permute_modes(text))
  if written != compiled:
    raise HookError(
      f"{label}: the per-op transformation wrote {written} and XLA compiled {compiled}"
    )


def _compile_per_op(
  lowered: "Lowered",
  options: dict[str, Any],
  requested: str,
  record: Record,
  transformation: Callable[[], list[Record]] | None,
  decide_per_op: Callable[[str], str | None] | None,
) -> tuple["Compiled", Record]:
  """The series' XLA on a live client: one compile, in which the registered
  transformation writes each permute's mode; checked as compile_program says."""
  # The flag named, as it runs anyway: the options in jax's in-process cache key then
  # differ from a compile that left them out (an executable compiled before install).
  compiled = lowered.compile({**options, flags.FLAG: requested})
  text = flags.compiled_text(compiled)
  name = flags.module_name(text)
  label = f"<{name}>"
  calls = [c for c in (transformation() if transformation else []) if c.get("module") == name]
  compiled_modes = _mode_counts(text_edit.permute_modes(text))
  record["compiled_modes"] = compiled_modes
  record["compiled_permutes"] = text_edit.permute_modes(text)
  record["applied"] = None
  record["module"] = name
  if calls:
    check_written_modes(calls[-1], text, label)
    record["why"] = (
      "this XLA runs each permute in its own mode: the per-op transformation "
      "decided each in this compile, and the compiled modes are the ones it wrote"
    )
  else:
    again = decide_per_op(text) if decide_per_op else None
    if again is not None:
      want = _mode_counts(text_edit.permute_modes(again))
      if want != compiled_modes:
        raise HookError(
          f"{label}: no registered transformation ran in this compile (an executable "
          f"from a cache), and its permutes run {compiled_modes} where the hook "
          f"decides {want}"
        )
    record["why"] = (
      "no registered transformation ran in this compile (jax served the executable "
      "from its persistent cache, whose key holds the hook's settings); its "
      "permutes' modes are the hook's decision for each"
    )
  record["verified"] = True
  return compiled, record
