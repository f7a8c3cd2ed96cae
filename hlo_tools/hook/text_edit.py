"""Editing HLO text: a permute line's collectives mode and mark, and one module's per-op rewrite."""

import json
import re
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools.hlo import ir, reader
from hlo_tools.hook import decide
from hlo_tools.hook.decide import Record
from hlo_tools.model import collectives, modes

if TYPE_CHECKING:  # the binding is imported when first used
  from hlo_tools._selection_core import CostTable, Topology

_PERMUTE_RE = re.compile(r"\s(collective-permute(?:-start)?)\(")


def _match_brace(text: str, start: int) -> int:
  """Index just past the JSON object that starts at text[start] == '{'."""
  depth, i, in_str = 0, start, False
  while i < len(text):
    c = text[i]
    if in_str:
      if c == "\\":
        i += 1
      elif c == '"':
        in_str = False
    elif c == '"':
      in_str = True
    elif c == "{":
      depth += 1
    elif c == "}":
      depth -= 1
      if depth == 0:
        return i + 1
    i += 1
  raise ValueError("unbalanced backend_config")


def set_line_mode(line: str, mode: str | None) -> str:
  """One instruction line with collectives_mode = mode (None: field removed).

  The rest of the backend_config JSON is kept as it was (key order included).
  """
  key = "backend_config="
  at = line.find(key + "{")
  begin: int | None
  end: int | None
  config: dict[str, Any]
  if at >= 0:
    begin = at + len(key)
    end = _match_brace(line, begin)
    config = json.loads(line[begin:end])
  elif mode is None:
    return line
  else:
    begin = end = None
    config = {}
  cbc = config.setdefault("collective_backend_config", {})
  if mode is None:
    cbc.pop("collectives_mode", None)
  else:
    cbc["collectives_mode"] = mode
  blob = json.dumps(config, separators=(",", ":"))
  if begin is None:
    return line.rstrip() + ", " + key + blob
  return line[:begin] + blob + line[end:]


def line_mode(line: str) -> str | None:
  """collectives_mode of one instruction line, None when unset."""
  at = line.find("backend_config={")
  if at < 0:
    return None
  begin = at + len("backend_config=")
  config = json.loads(line[begin : _match_brace(line, begin)])
  mode = (config.get("collective_backend_config") or {}).get("collectives_mode")
  return None if mode in (None, "COLLECTIVES_MODE_INVALID") else str(mode)


_ATTRS_RE = re.compile(r"frontend_attributes=\{")


def set_line_attribute(line: str, value: str) -> str:
  """One instruction line with frontend attribute _xla_collectives_mode=value, the
  language of the patched XLA's assigner, and the tools' attribute saying the same
  (the choice is the hook's, not a user's mark); the other attributes are kept."""
  item = f'{modes.ATTRIBUTE}="{value}",{modes.TOOLS_ATTRIBUTE}="{value}"'
  m = _ATTRS_RE.search(line)
  if m is None:
    at = line.find(", backend_config=")
    at = at if at >= 0 else len(line.rstrip())
    return line[:at] + ", frontend_attributes={" + item + "}" + line[at:]
  begin, end = m.end() - 1, _match_brace(line, m.end() - 1)
  old = re.sub(rf'(?<![\w]){modes.ATTRIBUTE}="[^"]*",?', "", line[begin + 1 : end - 1])
  old = re.sub(rf'(?<![\w]){modes.TOOLS_ATTRIBUTE}="[^"]*",?', "", old).rstrip(",")
  return line[:begin] + "{" + ",".join(x for x in (item, old) if x) + "}" + line[end:]


def permute_modes(text: str) -> dict[str, int]:
  """{backend/mode summary: count} of the collective-permutes in HLO text."""
  found: dict[str, int] = {}
  for line in text.split("\n"):
    m = _PERMUTE_RE.search(line)
    if not m:
      continue
    try:
      mode = line_mode(line) or "NCCL"
    except ValueError:
      mode = "UNPARSED"
    key = f"{m.group(1)}:{mode}"
    found[key] = found.get(key, 0) + 1
  return found


_NAME_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=")


def permute_line_modes(text: str) -> list[tuple[str, str | None]]:
  """[(instruction name, collectives_mode or None)] of the collective-permutes (or
  their -start) in HLO text, in order."""
  found: list[tuple[str, str | None]] = []
  for line in text.split("\n"):
    if not _PERMUTE_RE.search(line):
      continue
    m = _NAME_RE.match(line)
    try:
      mode = line_mode(line)
    except ValueError:
      mode = "UNPARSED"
    found.append((m.group(1) if m else "?", mode))
  return found


def _permute_line(module: ir.HloModule, permute: collectives.CollectivePermute) -> int:
  """1-based line of the instruction that carries the permute's backend_config."""
  if permute.form == "async-wrapped" and permute.wrapped_computation:
    return module.computation(permute.wrapped_computation).root.line
  return permute.start_line


def header_counts(text: str) -> tuple[int | None, int]:
  """(num_partitions, replica count) that the module's header states: the compiled
  module's text states them; the module a registered transformation gets states
  neither (jaxlib builds it from the proto alone, whose config is the default),
  and then the program is taken to be the topology's devices (None), in one
  replica unless stated."""
  head = text.split("\n", 1)[0]
  partitions = re.search(r"\bnum_partitions=(\d+)", head)
  replicas = re.search(r"\breplica_count=(\d+)", head)
  return (
    int(partitions.group(1)) if partitions else None,
    int(replicas.group(1)) if replicas else 1,
  )


def transform_text(
  text: str,
  selection: ModuleType,
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
) -> tuple[str | None, list[Record]]:
  """(new text or None when unchanged, [decision records]) for one module.

  A permute the user marked keeps its mark and its mode, as the patched assigner
  keeps them; a mark that names no mode is a HookError (the patched XLA fails that
  compile), and the module is then left as it was."""
  module = reader.parse_hlo_text(text)
  decide.user_marks(module)  # a mark no mode names: refused before anything is written
  decide.check_collective_marks(module)  # a mark off a permute: the series fails the compile
  partitions, replicas = header_counts(text)
  lines = text.split("\n")
  records: list[Record] = []
  changed = False
  written = decide.hook_modes(selection)
  for permute in collectives.collective_permutes(module):
    buffers = decide.operand_count(module, permute)
    backend, decision = decide.decide_mode(
      selection, topology, table, backends, permute, buffers, partitions, replicas
    )
    start = next(
      i for i in module.computation(permute.computation).instructions if i.name == permute.start
    )
    asked = modes.requested(start) if modes.user_mark(start) is not None else None
    if asked and asked["mode"]:
      backend = {m: b for b, (m, _) in written.items() if m}.get(asked["mode"], "nccl")
      decision = {
        **decision,
        "reason": f'{modes.ATTRIBUTE}="{asked["attribute"]}" '
        f"on the permute ({decision.get('reason')})",
      }
    at = _permute_line(module, permute) - 1
    mode, value = written[backend]
    new = set_line_mode(lines[at], mode)
    if not asked:  # the user's own mark stays as the user wrote it
      new = set_line_attribute(new, value)
    changed |= new != lines[at]
    lines[at] = new
    records.append(
      {
        "module": module.name,
        "permute": permute.start,
        "bytes": permute.bytes_per_device,
        "buffers": buffers,
        "pairs": [list(p) for p in permute.pairs],
        "in_loop": permute.while_loop is not None,
        "backend": backend,
        "mode": mode,
        "plan": decision.get("plan"),
        "reason": decision.get("reason"),
        "modeled_us": decision.get("backend_us"),
        "refused": decision.get("refused"),
        "user_mark": asked["attribute"] if asked else None,
      }
    )
  return ("\n".join(lines) if changed else None), records
