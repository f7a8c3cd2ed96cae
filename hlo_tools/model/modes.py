"""The collectives mode a collective-permute asks for by its frontend attribute.

`_xla_collectives_mode` = private | symmetric | peer (case-insensitive, as XLA's
flag xla_gpu_collective_permute_mode spells them) on a collective-permute: what
jax writes for `jax.experimental.xla_metadata.set_xla_metadata(
_xla_collectives_mode="peer")` around `lax.ppermute`, what the JAX hook (on an
XLA with the series) and `nvshmem-opt --backends` write with their choice, and what
the patch series for jax v0.11.0's and openxla main's XLA reads; a stock XLA reads
none of it. The series' CollectiveBackendAssigner writes the attribute's mode into
the permute's collectives_mode, over the flag, with these exceptions (the rule
here, 0001 of xla_patches/xla-131bf41a_jax-0.11.0/):
  * a value that is not one mode (a combiner of an unpatched XLA joins the
    values of the permutes it merges, "peer,symmetric"), or one that conflicts
    with a mode already in the config, fails the compile (InvalidArgument);
  * symmetric memory for a buffer in another memory space (an S(n) layout):
    memory space assignment cannot give it the collective color too, so the
    permute gets private memory;
  * a permute whose clique spans processes, or under a conditional's branch,
    gets private memory too (the core's layout and place rules say where).
"""

from __future__ import annotations

from typing import Any

from hlo_tools.hlo.ir import HloInstruction
from hlo_tools.hlo.shape import Shape

ATTRIBUTE = "_xla_collectives_mode"
# Written beside ATTRIBUTE, with its value, where the mode is the tools' own choice
# (nvshmem-opt, the JAX hook): such a mode is decided again, a user's never.
TOOLS_ATTRIBUTE = "_nvshmem_opt_mode"
# Attribute value -> collective_backend_config.collectives_mode.
MODES = {
  "private": "COLLECTIVES_PRIVATE_MEMORY",
  "symmetric": "COLLECTIVES_SYMMETRIC_MEMORY",
  "peer": "COLLECTIVES_PEER_MEMORY",
}


def _spaces(shape: Shape | None) -> set[int]:
  """The non-default memory spaces of a shape's arrays."""
  if shape is None:
    return set()
  if shape.is_tuple:
    return set[int]().union(*(_spaces(s) for s in shape.tuple_shapes or ()))
  return {shape.memory_space} - {0}


def mark_word(value: str) -> str | None:
  """The mode word (private, symmetric, peer) a mark's value names, as the series'
  assigner parses it: comma-joined parts (a combiner joins the values of the
  permutes it merges), each a mode's word in any case, all the same one; None
  where the value names no mode, or two."""
  word = None
  for part in value.split(","):
    one = part.lower() if part.isascii() else None
    if one not in MODES or (word is not None and one != word):
      return None
    word = one
  return word


def mark_mode(value: str) -> str | None:
  """The collectives mode a mark's value names (mark_word), None where none."""
  word = mark_word(value)
  return MODES[word] if word is not None else None


def requested(instr: HloInstruction) -> dict[str, Any] | None:
  """None without the attribute, else {"attribute", "mode", "why"}: the value, the
  mode the series' assigner gives (None: none, the compile fails) and why."""
  value = instr.frontend_attributes.get(ATTRIBUTE)
  if value is None:
    return None
  mode = mark_mode(value)
  if mode is None:
    return {
      "attribute": value,
      "mode": None,
      "why": f"not one mode ({', '.join(MODES)}): the series' assigner fails the "
      "compile (InvalidArgument)",
    }
  if mode == MODES["symmetric"]:
    spaces = _spaces(instr.shape).union(*(_spaces(o.shape) for o in instr.operand_instructions()))
    if spaces:
      return {
        "attribute": value,
        "mode": MODES["private"],
        "why": f"no symmetric memory for a buffer in memory space "
        f"{', '.join(f'S({s})' for s in sorted(spaces))}: private memory",
      }
  return {"attribute": value, "mode": mode, "why": "taken over the flag's mode"}


def user_mark(instr: HloInstruction) -> str | None:
  """The user's _xla_collectives_mode on the instruction, as written; None without
  one, or where it is the tools' own choice (TOOLS_ATTRIBUTE says the same value)."""
  value = instr.frontend_attributes.get(ATTRIBUTE)
  if value is None or instr.frontend_attributes.get(TOOLS_ATTRIBUTE) == value:
    return None
  return value
