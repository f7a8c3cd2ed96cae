"""verify's checks of each collective-permute's backend and mode: in the backend set, the
user's mark kept, the core's decision, and a mode the target XLA runs."""

from __future__ import annotations

from collections.abc import Sequence

from hlo_tools.model import backend_tables, collectives, decisions, modes, program_mode, sources
from hlo_tools.model.decisions import Permute
from hlo_tools.model.driver_report import Report
from hlo_tools.ops.verify_check import Check


def check_backend_set(perms: list[Permute], backends: Sequence[str]) -> Check:
  """Each op's backend is in the set; NCCL is in every set, so only others are listed."""
  check = Check("backend-set")
  for perm in perms:
    have = backend_tables.op_backend(perm.record)
    if have == "nccl":
      continue
    written = backend_tables.written_backend(perm.record)
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
    wanted = backend_tables.MARK_PLAN.get(modes.mark_word(mark) or "", "nccl")
    have = {"private": "nccl"}.get(
      backend_tables.op_backend(perm.record), backend_tables.op_backend(perm.record)
    )
    chosen = perm.record.backend != "DEFAULT" or perm.record.collectives_mode not in (
      None,
      backend_tables.NO_MODE,
    )
    if chosen and have != wanted:
      problems.append(
        f"marked {mark!r}, but backend {backend_tables.written_backend(perm.record)} "
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
        f"marked {mark!r}; backend {backend_tables.written_backend(perm.record)} keeps it",
      )
  if not check.results:
    check.note = "no collective-permute carries a user's mark"
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
    backend = backend_tables.written_backend(perm.record)
    have = backend_tables.op_backend(perm.record)
    if recorded is None and have == "nccl":
      check.add(
        "skip",
        perm.start,
        f"no decision recorded (no _nvshmem_plan: the pass "
        f"did not run, or ran without --annotate); the core would choose "
        f"{d['plan']}",
      )
      continue
    want = backend_tables.PLAN_BACKEND[d["plan"]]
    if d["plan"] in backend_tables.PLAN_MODE:
      want += f", {backend_tables.PLAN_MODE[d['plan']]}"
    problems = []
    who = "the user's mark keeps" if perm.mark is not None else "the core decides"
    per_program = not per_op_xla and have == "nccl" and d["plan"] in backend_tables.PLAN_MODE
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
    if op in (None, backend_tables.NO_MODE):
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
