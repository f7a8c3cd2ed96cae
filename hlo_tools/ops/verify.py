"""Named checks on a module's collective-permutes (the checks:
hlo_tools.commands.verify's help)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hlo_tools import cli_io, selection
from hlo_tools.errors import InputError
from hlo_tools.hlo import buffer_assignment
from hlo_tools.hlo.ir import HloInstruction, HloModule
from hlo_tools.model import (
  collectives,
  decisions,
  driver,
  modes,
  placement,
  program_mode,
  runtime_rules,
  sources,
)
from hlo_tools.model.decisions import Permute
from hlo_tools.model.driver_report import Report
from hlo_tools.model.options import Selection
from hlo_tools.model.topology import size_note

CHECKS = (
  "permutation",
  "start-done",
  "backend-config",
  "start-done-agree",
  "backend-set",
  "user-mark",
  "nvshmem-heap",
  "nvshmem-team",
  "nvshmem-runtime",
  "peer-safety",
  "selection",
  "memory-space",
  "hlo-verifier",
  "permute-mode",
)
# The checks of what a runtime can run at all (not of what the core would choose), and
# of what no tool may change (the user's mark).
SAFETY_CHECKS = (
  "permutation",
  "start-done",
  "start-done-agree",
  "backend-config",
  "user-mark",
  "nvshmem-heap",
  "nvshmem-team",
  "nvshmem-runtime",
  "peer-safety",
)
# collective_backend_config.backend values the core's backends write.
KNOWN_BACKENDS = tuple(dict.fromkeys(r["config_backend"] for r in selection.BACKEND_INFO.values()))
KNOWN_PLANS = selection.BACKENDS  # the core's names
COLLECTIVE_MEMORY_SPACE = 1  # XLA GPU's collective memory space color, printed S(1)
_START_OPS = {"collective-permute-start": "collective-permute-done", "async-start": "async-done"}
_UPDATE_OPS = ("collective-permute-update", "async-update")


class Check:
  """One named check: its per-instruction results and an overall status."""

  def __init__(self, name: str) -> None:
    self.name = name
    self.results: list[dict[str, Any]] = []
    self.note: str | None = None  # set when the whole check does not apply or was skipped

  def add(self, status: str, instr: HloInstruction | None, message: str) -> None:
    self.results.append(
      {
        "status": status,
        "instruction": instr.name if instr is not None else None,
        "computation": instr.computation.name if instr is not None else None,
        "line": instr.line if instr is not None else None,
        "message": message,
      }
    )

  @property
  def status(self) -> str:
    statuses = {r["status"] for r in self.results}
    if "fail" in statuses:
      return "fail"
    if "pass" in statuses:
      return "pass"
    if self.note is not None and self.note.startswith("skip"):
      return "skip"
    if "skip" in statuses:
      return "skip"
    return "not_applicable"

  def to_json(self) -> dict[str, Any]:
    return {"name": self.name, "status": self.status, "note": self.note, "results": self.results}


# ---------------------------------------------------------------------------------------
# The checks


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
  return cbc.get("backend", "DEFAULT"), cbc.get("collectives_mode", decisions.NO_MODE)


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


def _marks(source: sources.Source) -> dict[tuple[str, str], str]:
  """{(computation, start): the user's mark} of a module's marked permutes."""
  marks = {}
  for rec in collectives.collective_permutes(source.module):
    start = source.module.computation(rec.computation).instruction(rec.start)
    mark = decisions.user_mark(start)
    if mark is None and rec.wrapped_computation:
      mark = decisions.user_mark(source.module.computation(rec.wrapped_computation).root)
    if mark is not None:
      marks[(rec.computation, rec.start)] = mark
  return marks


def check_user_mark(
  perms: list,
  given: sources.Source | None = None,
  per_op_xla: bool = True,
  flag: tuple[str | None, str | None] = (None, None),
) -> Check:
  """A permute the user marked with _xla_collectives_mode runs the mark's mode: its
  backend_config chooses no other backend, (`given`: the module before a rewrite)
  the mark is the one it had, and, on a stock XLA (not per_op_xla), which reads no
  mark, the flag it was compiled with (`flag`: the mode and the config saying so,
  as program_mode.compiled_flag gives them) is the mark's mode."""
  check = Check("user-mark")
  flag_mode, flag_from = flag
  before = _marks(given) if given is not None else {}
  for perm in perms:
    key = (perm.record.computation, perm.record.start)
    was = before.get(key)
    if perm.mark is None and was is None:
      continue
    problems = []
    if was is not None and perm.mark != was:
      problems.append(
        f'the user marked it {modes.ATTRIBUTE}="{was}", and it now says '
        f"{perm.mark!r}: no tool may change a user's mark"
      )
    mark = perm.mark if perm.mark is not None else was
    assert mark is not None  # a permute without either is skipped above
    # Private memory is NCCL's path; a value that is no mode keeps NCCL too.
    wanted = decisions.MARK_PLAN.get(modes.mark_word(mark) or "", "nccl")
    have = {"private": "nccl"}.get(
      decisions.op_backend(perm.record), decisions.op_backend(perm.record)
    )
    chosen = perm.record.backend != "DEFAULT" or perm.record.collectives_mode not in (
      None,
      decisions.NO_MODE,
    )
    if chosen and have != wanted:
      problems.append(
        f"marked {mark!r}, but backend {decisions.written_backend(perm.record)} "
        f"runs {have}, not {wanted}"
      )
    runs = program_mode.what_runs(perm.record.collectives_mode, flag_mode, per_op_xla)["thunk"]
    if not per_op_xla and modes.mark_mode(mark) not in (None, runs):
      flag_text = (
        f"{flag_mode} ({flag_from})"
        if flag_mode
        else f"{program_mode.DEFAULT}, XLA's default (no module config beside the file)"
      )
      problems.append(
        f"marked {mark!r}, but a stock XLA reads no mark: it runs the flag's "
        f"mode, {flag_text}, not {modes.mark_mode(mark)}"
      )
    if problems:
      check.add("fail", perm.start, "; ".join(problems))
    else:
      check.add(
        "pass",
        perm.start,
        f"marked {mark!r}; backend {decisions.written_backend(perm.record)} keeps it",
      )
  if not check.results:
    check.note = "no collective-permute carries a user's mark"
  return check


def _mode_problems(cbc: dict[str, Any]) -> list[str]:
  mode = cbc.get("collectives_mode")
  if mode is None:
    return []
  if not isinstance(mode, str) or mode not in decisions.MODE_BACKEND:
    return [f"collectives_mode {mode!r} is not one of {', '.join(decisions.MODE_BACKEND)}"]
  if cbc.get("backend") == "NVSHMEM" and mode != decisions.NO_MODE:
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
        f"backend {decisions.written_backend(perm.record)}"
        + ("" if raw is not None else " (no backend_config)"),
      )
  return check


def check_backend_set(perms: list[Permute], backends: Sequence[str]) -> Check:
  """Each op's backend is in the set; NCCL is in every set, so only others are listed."""
  check = Check("backend-set")
  for perm in perms:
    have = decisions.op_backend(perm.record)
    if have == "nccl":
      continue
    written = decisions.written_backend(perm.record)
    if have in backends:
      check.add("pass", perm.start, f"{written}: {have}, in the set {','.join(backends)}")
    else:
      check.add(
        "fail",
        perm.start,
        f"{written} selects {have}, which the backend set {','.join(backends)} does not contain",
      )
  if not check.results:
    check.note = "every collective-permute runs NCCL, which every set contains"
  return check


def check_peer_safety(
  perms: list, source: sources.Source, topology: selection.Topology, table: selection.CostTable
) -> Check:
  """Peer and symmetric memory only where the core's rules for them allow."""
  check = Check("peer-safety")
  for perm in perms:
    have = decisions.op_backend(perm.record)
    if have not in decisions.PLAN_MODE:
      continue
    try:
      reason = decisions.carried_refusal(perm, source, topology, table)
    except (selection.SelectionError, ValueError) as e:
      check.add("fail", perm.start, f"{have}, but its edges cannot be placed: {e}")
      continue
    if reason:
      check.add("fail", perm.start, reason)
    else:
      check.add(
        "pass",
        perm.start,
        f"{have}: the core's safety rule allows it ({_edges_text(perm.edges) or 'no edges'})",
      )
  if not check.results:
    check.note = "no collective-permute uses peer or symmetric memory"
  return check


def check_permute_mode(
  perms: list[Permute],
  source: sources.Source,
  per_op_xla: bool = False,
  report: Report | None = None,
) -> Check:
  """A mode written on a permute runs only where the XLA honours it: a stock XLA's
  thunk runs the flag's mode (program_mode.THUNK_READS_FLAG), so a mode on the op
  that differs from it is not run, and a SYMMETRIC one has moved its buffers.
  report: the driver's JSON saying the flag the module was compiled with."""
  check = Check("permute-mode")
  flag, config = program_mode.compiled_flag(source, report)
  flag_text = (
    f"{flag} ({config})"
    if flag
    else f"{program_mode.DEFAULT}, XLA's default (no module config beside the file)"
  )
  for perm in perms:
    op = perm.record.collectives_mode
    if op in (None, decisions.NO_MODE):
      continue
    run = program_mode.what_runs(op, flag, per_op_xla)
    if run["agree"]:
      check.add(
        "pass",
        perm.start,
        f"collectives_mode {op}: its thunk runs "
        f"{run['thunk']}" + ("" if per_op_xla else f", the flag's {flag_text}"),
      )
      continue
    check.add(
      "fail",
      perm.start,
      (
        f"collectives_mode {op} on the op, but a stock XLA's thunk runs the flag's mode, "
        f"{flag_text} ({program_mode.THUNK_READS_FLAG})"
        + (
          "; the op's buffers were placed in the collective memory for it"
          if op == program_mode.FLAG_VALUE["symmetric"]
          else ""
        )
        + ": set the mode for the program (explain's `program`), or compile with an XLA "
        "carrying the series for jax v0.11.0 (--per-op-modes)"
      ),
    )
  if not check.results:
    check.note = "no collective-permute carries its own collectives_mode"
  return check


def _edges_text(edges: list[decisions.Edge]) -> str:
  return ", ".join(f"{s}->{t} ({c})" for s, t, c in edges[:8]) + (
    f" and {len(edges) - 8} more" if len(edges) > 8 else ""
  )


def _own_edges(
  perm: Permute, topology: selection.Topology, source: sources.Source
) -> list[decisions.Edge]:
  return decisions.device_edges(topology, source, perm.pairs, perm.record.channel_id is not None)


def check_nvshmem_heap(perms: list[Permute], table: selection.CostTable) -> Check:
  # The permute's operand and result both live in NVSHMEM's symmetric heap.
  check = Check("nvshmem-heap")
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    size = perm.record.bytes_per_device
    problem = selection.nvshmem_heap_reason(table, size)
    if problem:
      check.add("fail", perm.start, f"NVSHMEM: {problem}")
    else:
      check.add("pass", perm.start, f"NVSHMEM; {size} bytes fit the symmetric heap")
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def check_nvshmem_team(
  perms: list[Permute], topology: selection.Topology, source: sources.Source
) -> Check:
  check = Check("nvshmem-team")
  team = source.num_partitions * source.num_replicas
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    try:
      edges = _own_edges(perm, topology, source)
    except ValueError as e:
      check.add("fail", perm.start, f"NVSHMEM, but its edges cannot be placed on the topology: {e}")
      continue
    reason = selection.nvshmem_hang_reason([(s, t) for s, t, _ in edges], team)
    if reason:
      check.add("fail", perm.start, f"NVSHMEM: {reason}")
    else:
      check.add(
        "pass",
        perm.start,
        f"NVSHMEM; all {team} devices of the program have a "
        "source, so every device reaches the barrier",
      )
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def check_nvshmem_runtime(
  perms: list, topology: selection.Topology, source: sources.Source, table: selection.CostTable
) -> Check:
  """What the pinned runtime's NVSHMEM permute needs beside a source for every device
  and room in its heap (nvshmem-team and nvshmem-heap): the core's other rules
  (element types it puts, every edge inside one shared-memory domain, one group of
  ids that are the devices' PEs, neither a collectives group nor a conditional's
  branch around it) and, where XLA's buffer-assignment dump lies beside the module,
  destinations in its heap and no heap buffer live out."""
  check = Check("nvshmem-runtime")
  team = source.num_partitions * source.num_replicas
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    problems = decisions.unsafe_reasons(perm, source, topology, table)
    # The team and heap rules have checks of their own.
    try:
      own = {
        selection.nvshmem_heap_reason(table, perm.record.bytes_per_device),
        selection.nvshmem_hang_reason(
          [(s, t) for s, t, _ in _own_edges(perm, topology, source)], team
        ),
      }
    except ValueError:
      own = set()
    problems = [p for p in problems if p not in own]
    if problems:
      check.add("fail", perm.start, "NVSHMEM: " + "; ".join(problems))
    else:
      note = runtime_rules.heap_assignment_note(perm.start, source.allocations)
      check.add(
        "pass",
        perm.start,
        "NVSHMEM; element types "
        f"{', '.join(sorted(set(collectives.data_element_types(perm.start))))} "
        "and every edge inside one host; its ids are its devices' PEs"
        + (f"; {note}" if note else ""),
      )
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def check_selection(perms: list[Permute], topology_spec: str, per_op_xla: bool = True) -> Check:
  """The backend each op carries is the core's decision. On a stock XLA (not
  per_op_xla), whose thunk runs the program's one mode, a permute the core puts on
  peer or symmetric memory is written as NCCL (nvshmem-opt does so): its mode is the
  program's to set (explain's `program`)."""
  check = Check("selection")
  for perm in perms:
    d = perm.decision
    if d is None:
      check.add("fail", perm.start, f"the core cannot decide on {topology_spec}: {perm.error}")
      continue
    recorded = perm.start.frontend_attributes.get("_nvshmem_plan")
    backend = decisions.written_backend(perm.record)
    have = decisions.op_backend(perm.record)
    if recorded is None and have == "nccl":
      check.add(
        "skip",
        perm.start,
        f"no decision recorded (no _nvshmem_plan: the pass "
        f"did not run, or ran without --annotate); the core would choose "
        f"{d['plan']}",
      )
      continue
    want = decisions.PLAN_BACKEND[d["plan"]]
    if d["plan"] in decisions.PLAN_MODE:
      want += f", {decisions.PLAN_MODE[d['plan']]}"
    problems = []
    who = "the user's mark keeps" if perm.mark is not None else "the core decides"
    per_program = not per_op_xla and have == "nccl" and d["plan"] in decisions.PLAN_MODE
    if have != d["plan"] and not per_program:
      problems.append(
        f"backend {backend} ({have}), {who} {d['plan']} -> {want} on {topology_spec}: {d['reason']}"
      )
    if recorded is not None and recorded != d["plan"]:
      problems.append(f"_nvshmem_plan says {recorded}, {who} {d['plan']}")
    if problems:
      check.add("fail", perm.start, "; ".join(problems))
    elif per_program:
      check.add(
        "pass",
        perm.start,
        f"{d['plan']} -> {backend}: a stock XLA runs the program's one mode, not an "
        f"op's, so the core's {d['plan']} is the program's to set: {d['reason']}",
      )
    else:
      check.add("pass", perm.start, f"{d['plan']} -> {backend}: {d['reason']}")
  return check


def _has_memory_spaces(module: HloModule) -> bool:
  for instr in module.instructions():
    for leaf in instr.shape.leaves():
      if leaf.layout and "S(" in leaf.layout:
        return True
  return False


def check_memory_space(perms: list[Permute], source: sources.Source) -> Check:
  check = Check("memory-space")
  module = source.module
  if not any(perm.record.backend == "NVSHMEM" for perm in perms):
    check.note = "no collective-permute uses NVSHMEM"
    return check
  if not _has_memory_spaces(module):
    beside = source.path and buffer_assignment.sibling_path(source.path)
    check.note = (
      "no layout in the module names a memory space S(n), so its text does "
      "not say where the NVSHMEM buffers live; "
      + (
        "the buffer-assignment dump beside it does, and nvshmem-runtime "
        "checks their destinations there"
        if source.allocations
        else f"no buffer-assignment dump lies beside it "
        f"({os.path.basename(str(beside)) if beside else 'none for stdin'})"
      )
    )
    return check
  for perm in perms:
    if perm.record.backend != "NVSHMEM":
      continue
    comp = perm.start.computation
    shapes = [
      (f"operand %{op.name}", leaf)
      for op in perm.start.operand_instructions()
      for leaf in op.shape.leaves()
    ]
    result = comp.instruction(perm.record.done) if perm.record.done else perm.start
    shapes += [(f"result %{result.name}", leaf) for leaf in result.shape.leaves()]
    # Scalar u32/s32 leaves are async context (sync flags), not data buffers.
    data = [
      (what, leaf)
      for what, leaf in shapes
      if leaf.element_type != "token" and (leaf.dims or leaf.element_type not in ("u32", "s32"))
    ]
    wrong = [
      f"{what} {leaf}" for what, leaf in data if leaf.memory_space != COLLECTIVE_MEMORY_SPACE
    ]
    if wrong:
      check.add(
        "fail",
        perm.start,
        "NVSHMEM buffers outside the collective memory space "
        f"S({COLLECTIVE_MEMORY_SPACE}): " + "; ".join(wrong[:4]),
      )
    else:
      check.add("pass", perm.start, f"{len(shapes)} buffers in S({COLLECTIVE_MEMORY_SPACE})")
  if not check.results:
    check.note = "no collective-permute uses NVSHMEM"
  return check


def ask_driver(
  path: str, selected: Selection, num_partitions: int | None = None
) -> driver.Answer | None:
  """nvshmem-opt's one run on the module, which both verifies it and decides each
  permute on XLA's parse; None when the driver is not built."""
  if driver.find_nvshmem_opt() is None:
    return None
  return driver.ask(
    path,
    selected.spec,
    selected.driver_table(),
    compare_upstream=False,
    num_partitions=num_partitions,
    backends=selected.backends and selected.table.backends,
    module_config=placement.config_path(path),
  )


def check_hlo_verifier(answer: driver.Answer | None) -> Check:
  """The check, from the driver's answer (ask_driver)."""
  check = Check("hlo-verifier")
  if answer is None:
    check.note = "skip: nvshmem-opt is not built (run scripts/setup.sh)"
    return check
  rc, _, message = answer
  if rc == -1:
    check.note = f"skip: could not run nvshmem-opt: {message}"
  elif rc == 0:
    check.results.append(
      {
        "status": "pass",
        "instruction": None,
        "computation": None,
        "line": None,
        "message": "HloVerifier accepts the module",
      }
    )
  elif rc == 2 and "HloVerifier rejects" not in message:
    # XLA could not load the module (or the driver refused an input beside it): no
    # check stands on a module XLA cannot load, so verify passes nothing (exit 2).
    raise InputError(message or "nvshmem-opt could not load the module (no message)")
  else:
    check.results.append(
      {
        "status": "fail",
        "instruction": None,
        "computation": None,
        "line": None,
        "message": f"nvshmem-opt exit {rc}: {message or '(no message)'}",
      }
    )
  return check


# ---------------------------------------------------------------------------------------


def verify(
  path: str,
  selected: Selection,
  run_driver: bool = True,
  source: sources.Source | None = None,
  num_partitions: int | None = None,
  max_bytes: int = cli_io.DEFAULT_MAX_INPUT_BYTES,
  only: tuple | None = None,
  verified_by: str | None = None,
  per_op_xla: bool = False,
  given: sources.Source | None = None,
  answer: driver.Answer | None = None,
  config_report: Report | None = None,
) -> dict:
  """The verify JSON object; raises InputError for unreadable input.

  selected: the topology, cost table and backend set, parsed once by the caller
  (options.load), placed on the module's own device map as the driver's JSON says
  (placement.settled; without a driver run, as placement's reader reads it).
  only: the names of the checks to run (e.g. SAFETY_CHECKS), else every one.
  verified_by: how XLA's verifier already accepted this module (nvshmem-opt's
  rewrite verifies the text it writes), in place of another driver run.
  per_op_xla: the target XLA runs each permute's own mode (the series for jax
  v0.11.0's XLA), else the flag's (every stock XLA).
  given: the Source this module was rewritten from, whose users' marks it must keep.
  answer: nvshmem-opt's run on this module when the caller already made it (the one
  that derived its topology), in place of another.
  config_report: the driver's JSON of the run that wrote this module (and its config
  beside it), whose facts of XLA's config are this module's, where none runs here."""
  source = source or sources.read_source(path, max_bytes=max_bytes)
  verifier = None
  if run_driver and not verified_by:  # the driver's one run places the module too
    answer = answer or ask_driver(path, selected, num_partitions)
    verifier = check_hlo_verifier(answer)
  report = answer.report if answer is not None else None
  selected = placement.settled(selected, path, report or config_report, max_bytes)
  topology, table, topology_spec = selected.topology, selected.table, selected.spec
  cost_table = selected.cost_table
  backend_set = decisions.backend_set(table)
  source = sources.resolve_partitions(source, topology, num_partitions)
  module = source.module
  decisions.require_devices(source, topology)
  sources.adopt_driver_partitions(source, report)
  # The driver's decisions: this run's, else those of the run that wrote the module.
  perms = decisions.analyze(source, topology, table, tolerant=True, report=report or config_report)
  checks = [
    check_permutation(perms, source),
    check_start_done(module),
    check_backend_config(perms),
    check_start_done_agree(perms, module),
    check_backend_set(perms, backend_set),
    check_user_mark(
      perms, given, per_op_xla, program_mode.compiled_flag(source, config_report or report)
    ),
    check_nvshmem_heap(perms, table),
    check_nvshmem_team(perms, topology, source),
    check_nvshmem_runtime(perms, topology, source, table),
    check_peer_safety(perms, source, topology, table),
    check_selection(perms, topology_spec, per_op_xla),
    check_memory_space(perms, source),
  ]
  if verified_by:
    accepted = Check("hlo-verifier")
    accepted.results.append(
      {
        "status": "pass",
        "instruction": None,
        "computation": None,
        "line": None,
        "message": verified_by,
      }
    )
    checks.append(accepted)
  elif verifier is not None:
    checks.append(verifier)
  else:
    skipped = Check("hlo-verifier")
    skipped.note = "skip: not requested"
    checks.append(skipped)
  checks.append(check_permute_mode(perms, source, per_op_xla, config_report or report))
  if only is not None:
    checks = [c for c in checks if c.name in only]
  for check in checks:
    if not check.results and check.note is None:
      check.note = "no collective-permutes" if not perms else "nothing to check"
  failed = [c.name for c in checks if c.status == "fail"]
  return {
    "file": source.label,
    "module": module.name,
    "topology": topology_spec,
    "cost_table": cost_table,
    "backends": table.backends,
    "collective_permutes": len(perms),
    "num_partitions": source.num_partitions,
    "num_partitions_from": source.partitions_from,
    "passed": not failed,
    "failed_checks": failed,
    "topology_note": size_note(
      topology_spec, topology, source.num_partitions * source.num_replicas
    ),
    "checks": [c.to_json() for c in checks],
  }


_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "not_applicable": "N/A "}


def format_text(result: dict[str, Any]) -> str:
  lines = []
  inferred = result.get("num_partitions_from", "module header")
  if inferred not in ("module header", "default"):
    lines.append(
      f"{result['file']}: num_partitions {result['num_partitions']} ({inferred}; "
      "the module header does not say)"
    )
  if result.get("topology_note"):
    lines.append(result["topology_note"])
  for check in result["checks"]:
    head = f"{_MARK[check['status']]} {check['name']}"
    if check["note"]:
      head += f": {check['note']}"
    lines.append(head)
    for r in check["results"]:
      where = (
        f"%{r['instruction']} ({r['computation']}) line {r['line']}: " if r["instruction"] else ""
      )
      lines.append(f"  {r['status']:<4} {where}{r['message']}")
  verdict = (
    "all checks pass" if result["passed"] else "FAILED: " + ", ".join(result["failed_checks"])
  )
  lines.append(
    f"{result['file']}: {verdict} (topology {result['topology']}, "
    f"backends {result['backends']}, "
    f"{result['collective_permutes']} collective-permute(s))"
  )
  return "\n".join(lines)
