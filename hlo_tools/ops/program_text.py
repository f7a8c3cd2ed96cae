"""The program's one collectives mode in words, for explain and report: which mode
to set, how, what it saves, what a per-op choice would add, and what each permute of
a compiled module runs (model.program_mode)."""

import json
from typing import Any

from hlo_tools.model import program_mode


def _us(value: float | None) -> str:
  return "-" if value is None else f"{value:.2f} us"


def json_ready(program: dict[str, Any]) -> dict[str, Any]:
  """program_mode.for_source's dict with its per-permute table keyed by name."""
  out = dict(program)
  out["runs"] = {f"{c}/{s}": r for (c, s), r in program.get("runs", {}).items()}
  return out


def setting_text(program: dict[str, Any]) -> str:
  options = json.dumps(program["compiler_options"])
  return (
    f"{program['xla_flags']}, or per compile jax.jit(f, compiler_options={options})"
    if program["backend"] != "nccl"
    else f"nothing (XLA's default {program_mode.DEFAULT}); explicitly {program['xla_flags']}"
  )


def lines(program: dict[str, Any]) -> list[str]:
  """The program's block of text lines ([] without permutes)."""
  if not program or not program.get("permutes"):
    return []
  bound = "" if program["runs_known"] else " (at least: a loop count is unknown)"
  out = [
    f"program: one mode for every permute (what a stock XLA runs): "
    f"{program['backend']} ({program['mode']}), modeled {_us(program['best_us'])} "
    f"per step against {_us(program['nccl_us'])} on NCCL, saving "
    f"{_us(program['saving_us'])}{bound}",
    f"  set           {setting_text(program)}",
  ]
  if program.get("per_op_adds_us") is not None:
    adds = program["per_op_adds_us"]
    # Negative where a user's mark, which a mode per permute keeps, costs more.
    out.append(
      f"  per op        {_us(program['per_op_us'])} per step, "
      + (
        f"{_us(adds)} less than one mode"
        if adds >= 0
        else f"{_us(-adds)} more than one mode (the users' marks kept)"
      )
      + ": only an XLA with the series for jax v0.11.0 runs a mode per permute"
    )
  out += [
    f"  refused       {b}: {m['refused']}" for b, m in program["modes"].items() if m["refused"]
  ]
  if "compiled_with" in program:
    out.append(
      "  compiled with "
      + (
        f"{program['compiled_with']} ({program['compiled_with_from']})"
        if program["compiled_with"]
        else "unknown: no module config beside the file; XLA's default "
        f"{program_mode.DEFAULT} taken"
      )
    )
  return out


def runs_text(run: dict[str, Any], per_op_xla: bool) -> str:
  """What one compiled permute runs, in words."""
  who = "its own mode (the series)" if per_op_xla else "the flag's mode (stock XLA)"
  text = f"{run['thunk']}, {who}"
  if not run["agree"]:
    text += f"; its backend_config says {run['config']}, which this XLA's thunk does not run" + (
      " (its buffers sit in the collective memory)"
      if run["config"] == "COLLECTIVES_SYMMETRIC_MEMORY"
      else ""
    )
  return text


def summary(program: dict[str, Any]) -> str:
  """One line: the program's mode, its setting and saving, and the per-op addition."""
  text = (
    f"one mode for the program (stock XLA): {program['backend']}, "
    f"{setting_text(program)}; saves {_us(program['saving_us'])} a step against "
    "NCCL"
  )
  if program.get("per_op_adds_us") is not None:
    text += f"; per op (the series' XLA only) {_us(program['per_op_adds_us'])} more"
  return text
