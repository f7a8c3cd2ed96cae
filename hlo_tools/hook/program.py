"""A stock XLA's one collectives mode per program: the core's choice, the marks, the compile."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlo_tools.hlo import reader
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
) -> dict[str, Any]:
  """model.program_mode.choose on the module in HLO `text` (import_selection first:
  the model imports the binding)."""
  from hlo_tools.model import decisions, program_mode, sources  # pylint: disable=import-outside-toplevel

  source = sources.resolve_partitions(sources.read_text(None, text, label), topology)
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


def mark_policy(choice: dict[str, Any], marks: list[Record]) -> tuple[str | None, str]:
  """(the mode the users' marks ask of the whole program or None, why): a stock XLA
  runs one mode per program, so the marks are kept only where they all ask for one
  mode that no permute of the program refuses."""
  wanted = sorted({m["mode"] for m in marks})
  where = ", ".join(f"%{m['permute']} {m['value']}" for m in marks)
  if len(wanted) > 1:
    return None, (
      f"the user's marks ask for {' and '.join(wanted)} ({where}), and a stock "
      "XLA runs one mode for every permute of a program"
    )
  backend = flags.MODE_BACKEND[wanted[0]]
  entry = choice["modes"].get(backend)
  if entry is None and backend != "nccl":
    return None, (
      f"the user's marks ask for {wanted[0]} ({where}), which is not in the "
      f"hook's backend set ({', '.join(choice['modes'])})"
    )
  if entry is not None and entry["refused"]:
    return None, (
      f"the user's marks ask for {wanted[0]} ({where}), which the program "
      f"cannot run: {entry['refused']}"
    )
  return wanted[0], f"the user's marks ask for {wanted[0]} ({where})"


def compile_program(
  lowered: "Lowered",
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  compiler_options: Mapping[str, Any] | None = None,
  per_op: bool | None = None,
) -> tuple["Compiled", Record]:
  """(compiled, record): `lowered` compiled with the program's one mode applied.

  A first compile with the caller's options gives the program as XLA optimized it
  and the mode it ran: the compile's compiler_options over jax.jit's, XLA_FLAGS or
  XLA's default, checked against the compiled permutes on a stock XLA (whose
  assigner writes the flag's mode on each). On a stock XLA the core chooses the
  program's mode from that module, and a second compile applies it through
  compiler_options when it differs from the mode the first ran; a mode the caller
  set in compiler_options (the compile's or jax.jit's) is kept. The users' marks
  (set_xla_metadata's _xla_collectives_mode) are kept for the program where they
  agree and the program can run them; otherwise the record says which permutes
  run another mode than marked. On the series' XLA (per_op, else probed) the first
  compile stands, its registered transformation having decided per op, except in a
  deviceless compile, which runs none: there one mode for the program is applied
  as on a stock XLA, and the record says so. A mark that names no mode is a
  HookError."""
  decide.import_selection()
  options = dict(compiler_options or {})
  jit_options = flags.jit_compiler_options(lowered)
  compiled = lowered.compile(options or None)
  device = flags.a_device(compiled)
  xla = (
    {"per_op": per_op, "evidence": "given by the caller"}
    if per_op is not None
    else flags.probe(device)
  )
  text = flags.compiled_text(compiled)
  marks = decide.user_marks(reader.parse_hlo_text(text))
  choice = program_choice(text, topology, table, backends, label=f"<{flags.module_name(text)}>")
  ran, ran_from = flags.flag_in_effect(options, jit_options)
  if not xla["per_op"]:
    seen = flags.compiled_flag_mode(text)
    if seen is not None and seen != ran:  # what XLA ran beats what the options say
      ran_from = f"the compiled permutes' collectives_mode (the options read {ran} from {ran_from})"
      ran = seen
  record: Record = {
    "xla": xla,
    "program": choice,
    "first_compile_mode": ran,
    "first_compile_mode_from": ran_from,
    "marks": marks,
  }
  fallback = ""
  if xla["per_op"]:
    if not deviceless(device):
      record["applied"] = None
      record["why"] = (
        "this XLA runs each permute in its own mode: the per-op "
        "transformation decides, not one mode for the program"
      )
      return compiled, record
    fallback = (
      "a deviceless compile runs no registered transformation, so no permute "
      "gets its own mode: one mode for the whole program instead; "
    )
    record["per_op_fallback"] = True
  # The series' assigner runs each mark's own mode over the flag: only a stock XLA
  # needs the program's mode to be the marks'.
  stock_marks = marks if not xla["per_op"] else []
  mark_mode, mark_why = mark_policy(choice, stock_marks) if stock_marks else (None, "")
  if ran_from in ("compiler_options", "jax.jit's compiler_options"):
    record["applied"] = ran
    record["why"] = fallback + f"kept the caller's {ran_from} {flags.FLAG}={ran}"
    refused = next(
      (m["refused"] for m in choice["modes"].values() if m["mode"] == ran and m["refused"]), None
    )
    if refused:
      record["why"] += f", which the core refuses ({refused})"
  elif mark_mode is not None:
    record["applied"] = mark_mode
    record["why"] = (
      fallback
      + f"kept the user's mark for the whole program: {mark_why}"
      + (
        ""
        if mark_mode == choice["mode"]
        else f"; the modeled best was {choice['mode']} ({choice['why']})"
      )
    )
  elif stock_marks:
    record["applied"] = choice["mode"]
    record["why"] = (
      fallback + f"refused the marks' mode: {mark_why}; the program runs "
      f"{choice['mode']}: {choice['why']}"
    )
  else:
    record["applied"] = choice["mode"]
    record["why"] = fallback + choice["why"]
  applied = record["applied"]
  if not xla["per_op"]:  # the series' assigner keeps a mark over the flag
    for m in marks:
      m["runs"] = applied
    record["marks_not_run"] = [m["permute"] for m in marks if m["mode"] != applied]
    if record["marks_not_run"]:
      record["why"] += (
        "; not as marked: "
        + ", ".join(f"%{m['permute']} ({m['value']})" for m in marks if m["mode"] != applied)
        + f" run {applied}"
      )
  if applied != ran:
    compiled = lowered.compile({**options, flags.FLAG: applied})
    text = flags.compiled_text(compiled)
  record["compiled_permutes"] = text_edit.permute_modes(text)
  return compiled, record
