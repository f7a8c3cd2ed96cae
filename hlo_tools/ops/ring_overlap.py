"""Whether a compiled ring's collective-permutes overlap the step's attention.

Reads the text of a scheduled (compiled) HLO module, where each computation
prints its instructions in schedule order. For every collective-permute-start
it finds the matching done and counts the attention work scheduled between
them: a cuDNN fused-attention custom-call, a conditional (the ring's causal
switch around the kernel) or a while loop (the blocked kernel's chunk loops).
A synchronous `collective-permute` overlaps nothing.

    python -m hlo_tools.ops.ring_overlap MODULE.txt     # one JSON line per permute
"""

import json
import re
import sys
from collections.abc import Sequence

from hlo_tools import bounded_input, messages
from hlo_tools.errors import InputError

# (instruction, opcode or None, line) in schedule order.
_Instr = tuple[str, str | None, str]

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%([\w.\-]+)\s*=\s")
_OPCODE = re.compile(
  r"\s(collective-permute-start|collective-permute-done|"
  r"collective-permute|conditional|while|custom-call)\("
)
_OPERAND = re.compile(r"collective-permute-done\(%([\w.\-]+)")
_BODY = re.compile(r"\bbody=%([\w.\-]+)")


def _attention(opcode: str | None, line: str) -> bool:
  if opcode == "custom-call":
    return "__cudnn$fmha" in line
  return opcode in ("conditional", "while")


def _computations(text: str) -> tuple[dict[str, list[_Instr]], set[str]]:
  """{name: [(instruction, opcode or None, line)]} in schedule order; while bodies."""
  comps: dict[str, list[_Instr]] = {}
  bodies: set[str] = set()
  current: list[_Instr] | None = None
  for line in text.splitlines():
    head = _COMPUTATION.match(line)
    if head:
      current = comps.setdefault(head.group(1), [])
      continue
    if current is None or line.startswith("}"):
      current = None if line.startswith("}") else current
      continue
    inst = _INSTRUCTION.match(line)
    if inst:
      op = _OPCODE.search(line[inst.end() - 1 :])
      opcode = op.group(1) if op else None
      current.append((inst.group(1), opcode, line))
      bodies.update(_BODY.findall(line) if opcode == "while" else [])
  return comps, bodies


def permute_windows(text: str) -> list[dict[str, str | int | bool]]:
  """One dict per permute: computation, start, done, attention ops between, loop body."""
  comps, bodies = _computations(text)
  rows: list[dict[str, str | int | bool]] = []
  for comp, insts in comps.items():
    order = {name: i for i, (name, _, _) in enumerate(insts)}
    for i, (name, opcode, line) in enumerate(insts):
      if opcode == "collective-permute":
        rows.append(
          dict(
            computation=comp,
            start=name,
            done=name,
            attention_between=0,
            in_loop_body=comp in bodies,
            synchronous=True,
          )
        )
      if opcode != "collective-permute-done":
        continue
      operand = _OPERAND.search(line)
      if operand is None:  # a done without a %name operand pairs with no start
        continue
      start = operand.group(1)
      lo = order.get(start, i)
      between = sum(_attention(op, ln) for _, op, ln in insts[lo + 1 : i])
      rows.append(
        dict(
          computation=comp,
          start=start,
          done=name,
          attention_between=between,
          in_loop_body=comp in bodies,
          synchronous=False,
        )
      )
  return rows


def main(argv: Sequence[str]) -> int:
  if len(argv) != 1:
    print("usage: python -m hlo_tools.ops.ring_overlap MODULE.txt", file=sys.stderr)
    return 2
  try:  # bounded as every input is: a FIFO or /dev/zero ends in one line
    data = bounded_input.read_input(argv[0], limit_name="the tools' default limit")
    text = data.decode("utf-8")
  except (InputError, UnicodeDecodeError) as e:
    messages.print_error(e if isinstance(e, InputError) else f"{argv[0]}: not UTF-8 text: {e}")
    return 2
  for row in permute_windows(text):
    print(json.dumps(row))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
