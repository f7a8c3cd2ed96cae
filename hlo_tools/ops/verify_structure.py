"""verify's checks of each collective-permute's form in the text: a permutation of its
ids, one done op, a start and done that agree, a backend_config the runtime reads."""

from __future__ import annotations

from typing import Any

from hlo_tools import selection
from hlo_tools.hlo.ir import HloInstruction, HloModule
from hlo_tools.model import backend_tables, collectives, decisions, modes, sources
from hlo_tools.model.decisions import Permute
from hlo_tools.ops.verify_check import Check

# collective_backend_config.backend values the core's backends write.
KNOWN_BACKENDS = tuple(dict.fromkeys(r["config_backend"] for r in selection.BACKEND_INFO.values()))
KNOWN_PLANS = selection.BACKENDS  # the core's names
_START_OPS = {"collective-permute-start": "collective-permute-done", "async-start": "async-done"}
_UPDATE_OPS = ("collective-permute-update", "async-update")


def check_permutation(perms: list[Permute], source: sources.Source) -> Check:
  check = Check("permutation")
  for perm in perms:
    cross = perm.record.channel_id is not None
    bound = source.num_partitions if cross else source.num_replicas
    kind = "partitions" if cross else "replicas"
    problems = []
    for ids, what in (
      (([s for s, _ in perm.pairs]), "source"),
      ([t for _, t in perm.pairs], "target"),
    ):
      seen = set()
      for i in ids:
        if i in seen:
          problems.append(f"{what} {i} repeated")
        seen.add(i)
        if not 0 <= i < bound:
          problems.append(f"{what} {i} outside 0..{bound - 1} ({bound} {kind})")
    if problems:
      check.add("fail", perm.start, "; ".join(dict.fromkeys(problems)))
    else:
      check.add("pass", perm.start, f"{len(perm.pairs)} pairs, a permutation of {bound} {kind}")
  return check


def _is_permute_start(module: HloModule, instr: HloInstruction) -> bool:
  if instr.opcode == "collective-permute-start":
    return True
  if instr.opcode == "async-start":
    for name in instr.called_computations:
      if name in module and module.computation(name).root.opcode == "collective-permute":
        return True
  return False


def check_start_done(module: HloModule) -> Check:
  check = Check("start-done")
  for comp in module.computations:
    users = None
    for instr in comp.instructions:
      if not _is_permute_start(module, instr):
        continue
      users = users or collectives.operand_users(comp)
      done_op = _START_OPS[instr.opcode]
      dones, others = [], []
      todo, seen = [instr.name], set()
      while todo:  # follow async-updates; they chain start -> update -> done
        for user in users.get(todo.pop(), ()):
          if user.name in seen:
            continue
          seen.add(user.name)
          if user.opcode == done_op:
            dones.append(user)
          elif user.opcode in _UPDATE_OPS:
            todo.append(user.name)
          else:
            others.append(user)
      problems = []
      if len(dones) != 1:
        problems.append(
          f"{len(dones)} {done_op}s"
          + (" (" + ", ".join(f"%{d.name} line {d.line}" for d in dones) + ")" if dones else "")
        )
      if others:
        problems.append(
          "also used by " + ", ".join(f"%{u.name} ({u.opcode}, line {u.line})" for u in others[:5])
        )
      if problems:
        check.add("fail", instr, "; ".join(problems))
      else:
        check.add("pass", instr, f"one {done_op} %{dones[0].name} (line {dones[0].line})")
  return check


def _collective_config(instr: HloInstruction) -> tuple[Any, Any] | None:
  """(backend, collectives_mode) of the op's collective_backend_config, None without."""
  config = instr.backend_config_json() if "backend_config" in instr.attributes else None
  cbc = config.get("collective_backend_config") if isinstance(config, dict) else None
  if not isinstance(cbc, dict):
    return None
  return cbc.get("backend", "DEFAULT"), cbc.get("collectives_mode", backend_tables.NO_MODE)


def check_start_done_agree(perms: list[Permute], module: HloModule) -> Check:
  """A permute's start and done say the same: the done's collective_backend_config,
  where it has one, and its _xla_collectives_mode, where it has one, are the start's
  (a tool that rewrites one op of the pair leaves the runtime two answers)."""
  check = Check("start-done-agree")
  for perm in perms:
    if perm.record.done is None:
      continue
    done = module.computation(perm.record.computation).instruction(perm.record.done)
    problems = []
    start_config, done_config = _collective_config(perm.start), _collective_config(done)
    if done_config is not None and done_config != start_config:
      problems.append(
        f"backend_config: the start says {start_config}, the done "
        f"%{done.name} (line {done.line}) {done_config}"
      )
    start_mark, done_mark = decisions.user_mark(perm.start), decisions.user_mark(done)
    if done_mark is not None and done_mark != start_mark:
      problems.append(
        f"{modes.ATTRIBUTE}: the start says {start_mark!r}, the done "
        f"%{done.name} (line {done.line}) {done_mark!r}"
      )
    if problems:
      check.add("fail", perm.start, "; ".join(problems))
    else:
      check.add("pass", perm.start, f"the done %{done.name} agrees")
  if not check.results:
    check.note = "no collective-permute with a done op"
  return check


def _mode_problems(cbc: dict[str, Any]) -> list[str]:
  mode = cbc.get("collectives_mode")
  if mode is None:
    return []
  if not isinstance(mode, str) or mode not in backend_tables.MODE_BACKEND:
    return [f"collectives_mode {mode!r} is not one of {', '.join(backend_tables.MODE_BACKEND)}"]
  if cbc.get("backend") == "NVSHMEM" and mode != backend_tables.NO_MODE:
    return [f"backend NVSHMEM with collectives_mode {mode}: two backends at once"]
  return []


def check_backend_config(perms: list[Permute]) -> Check:
  check = Check("backend-config")
  for perm in perms:
    instr = perm.start
    raw = instr.attributes.get("backend_config")
    problems = []
    if raw is not None:
      config = instr.backend_config_json()
      if not isinstance(config, dict):
        problems.append("backend_config is not a JSON object")
      else:
        cbc = config.get("collective_backend_config")
        if cbc is not None and not isinstance(cbc, dict):
          problems.append("collective_backend_config is not an object")
        elif cbc is not None:
          backend = cbc.get("backend")
          if backend is not None and backend not in KNOWN_BACKENDS:
            problems.append(f"backend {backend!r} is not one of {', '.join(KNOWN_BACKENDS)}")
          problems += _mode_problems(cbc)
          for key in ("is_sync", "is_pipelined"):
            if key in cbc and not isinstance(cbc[key], bool):
              problems.append(f"{key} is {cbc[key]!r}, not a boolean")
    attrs = instr.frontend_attributes
    plan = attrs.get("_nvshmem_plan")
    if plan is not None and plan not in KNOWN_PLANS:
      problems.append(f"_nvshmem_plan {plan!r} is not one of {', '.join(KNOWN_PLANS)}")
    if problems:
      check.add("fail", instr, "; ".join(problems))
    else:
      check.add(
        "pass",
        instr,
        f"backend {backend_tables.written_backend(perm.record)}"
        + ("" if raw is not None else " (no backend_config)"),
      )
  return check
