"""One collectives mode for a whole program: what a stock XLA runs, and which to set.

Every XLA that jax ships (0.10.2's 5a9e73cb, 0.11.0's 131bf41a, and upstream as far
as 183fa00c) builds each CollectivePermuteThunk with the flag
`xla_gpu_collective_permute_mode` (thunk_emitter.cc:1824, :1948, :2188 there). A
permute's own `collective_backend_config.collectives_mode` is read for its buffers
only: memory space assignment puts a SYMMETRIC permute's buffers in the collective
memory (gpu_memory_space_assignment.cc:145 at 5a9e73cb, :130 at 131bf41a). Its
CollectiveBackendAssigner, which runs after the pre-scheduler transformations,
writes the flag's mode on every permute unless the flag is PRIVATE, when it writes
nothing (collective_backend_assigner.cc:51-53 and :63) and a mode already on an op
stays there. So a stock program runs one mode for all its permutes, set in
XLA_FLAGS or per compile through jax's compiler_options; the patch series for jax
v0.11.0's XLA makes the thunk read the op's own mode instead.

`choose` picks that one mode with the selection core: every mode of the backend
set that the flag can name, refused when one permute of the program cannot run it,
priced as the sum over permutes of modeled time x runs per step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from hlo_tools import selection
from hlo_tools.hlo import module_config
from hlo_tools.hlo.ir import HloInstruction
from hlo_tools.model import backend_tables, collectives, decisions, modes, refusals
from hlo_tools.model.decisions import Permute
from hlo_tools.model.driver_report import Report
from hlo_tools.model.sources import Source

FLAG = "xla_gpu_collective_permute_mode"
# The flag's value for each backend it can name; PRIVATE is XLA's default.
FLAG_VALUE = {
  "nccl": "COLLECTIVES_PRIVATE_MEMORY",
  "peer": "COLLECTIVES_PEER_MEMORY",
  "symmetric": "COLLECTIVES_SYMMETRIC_MEMORY",
}
DEFAULT = FLAG_VALUE["nccl"]
FLAG_BACKEND = {v: b for b, v in FLAG_VALUE.items()}
# Where each XLA's permute thunk takes its mode (the flag), by commit.
THUNK_READS_FLAG = (
  "thunk_emitter.cc:1824 at 5a9e73cb (jax 0.10.2), :1948 at 131bf41a "
  "(jax 0.11.0), :2188 at 183fa00c"
)


# XLA_FLAGS spells the mode private|symmetric|peer (debug_options_flags.cc:768-781 at
# 5a9e73cb, :862-875 at 131bf41a); compiler_options set the proto field by the enum's name.
FLAG_WORD = {
  "COLLECTIVES_PRIVATE_MEMORY": "private",
  "COLLECTIVES_PEER_MEMORY": "peer",
  "COLLECTIVES_SYMMETRIC_MEMORY": "symmetric",
}


def settings(mode: str) -> dict[str, Any]:
  """The two ways to apply `mode` to a program: XLA_FLAGS and jax's compiler_options."""
  return {"xla_flags": f"XLA_FLAGS=--{FLAG}={FLAG_WORD[mode]}", "compiler_options": {FLAG: mode}}


def runs_per_step(perm: Permute) -> tuple[int, bool]:
  """(runs of the permute per step, whether that is exact): the product of its loops'
  trip counts, at least that where one is unknown, at most under a conditional's
  branch (collectives.runs_per_step)."""
  runs, bound = collectives.runs_per_step(perm.loops, perm.record.branch is not None)
  return runs, bound == "exact"


def _per_step(perms: list[Permute], us_of: Callable[[Permute], float]) -> float:
  """Sum over permutes of us_of(perm) x runs per step, a conditional's branches by the
  largest (one branch runs per execution)."""
  return collectives.per_step_sum((us_of(p) * runs_per_step(p)[0], p.record.branch) for p in perms)


def _memory_spaces(instr: HloInstruction) -> set[int]:
  shapes = [instr.shape] + [o.shape for o in instr.operand_instructions()]
  return {
    s.memory_space
    for shape in shapes
    if shape is not None
    for s in shape.leaves()
    if s.memory_space
  }


def refusal(
  perm: Permute,
  source: Source,
  topology: selection.Topology,
  table: selection.CostTable,
  backend: str,
) -> str | None:
  """Why the program cannot run `perm` in `backend`'s mode, or None. NCCL runs any.

  The core's refusal in the permute's decision (its rules only: offered, signals,
  process layout, placement, a conditional's branch, never its cost), else, for a
  backend outside the decision's set, the core asked with {nccl, backend};
  symmetric memory for a buffer in another memory space, which the core cannot see;
  and a one-sided mode other than the one a user's mark asks for."""
  if backend == "nccl":
    return None
  if perm.decision is None:
    return f"its edges cannot be placed on the topology: {perm.error}"
  word = modes.mark_word(perm.mark) if perm.mark else None
  wanted = backend_tables.MARK_PLAN.get(word) if word else None
  if wanted is not None and wanted != backend:
    # The program's mode would run it against the user's mark.
    return f"marked by the user: {perm.mark}"
  spaces = _memory_spaces(perm.start) if backend == "symmetric" else set()
  if spaces:
    return (
      f"a buffer in memory space {', '.join(f'S({s})' for s in sorted(spaces))}: "
      "symmetric memory needs the collective color, and memory space assignment "
      "fails on a buffer with two"
    )
  if backend in backend_tables.backend_set(table):
    return perm.decision["refused"].get(backend)
  return refusals.refusal_of(perm, source, topology, table, backend)


def _modeled(
  perm: Permute,
  source: Source,
  topology: selection.Topology,
  table: selection.CostTable,
  backend: str,
) -> float:
  """The core's modeled time of one run of `perm` (a decided one) on `backend`."""
  assert perm.decision is not None
  us = perm.decision["backend_us"].get(backend)
  if us is None:
    d = selection.decide(
      topology,
      table,
      perm.record.bytes_per_device,
      perm.pairs,
      perm.record.channel_id is not None,
      source.num_partitions,
      source.num_replicas,
      buffers=perm.record.buffers,
      backends=("nccl", backend),
    )
    us = d["backend_us"].get(backend)
  return us


def candidates(backends: str | Sequence[str]) -> list[str]:
  """The backends of the set the flag can name, NCCL first (the default wins ties)."""
  names = backends.split(",") if isinstance(backends, str) else list(backends)
  return ["nccl"] + [b for b in names if b in FLAG_VALUE and b != "nccl"]


def choose(
  perms: list[Permute],
  source: Source,
  topology: selection.Topology,
  table: selection.CostTable,
  backends: str | Sequence[str],
) -> dict[str, Any]:
  """The program's one mode (see the module docstring) and what a per-op choice,
  which only the series' XLA runs, would add. `perms`: model.decisions.analyze's
  (a permute it could not place refuses every mode but NCCL and is not priced)."""
  unpriced = [p.record.start for p in perms if p.decision is None]
  modes: dict[str, dict[str, Any]] = {}
  for backend in candidates(backends):
    refused = next(
      (
        f"%{p.record.start}: {why}"
        for p in perms
        for why in [refusal(p, source, topology, table, backend)]
        if why
      ),
      None,
    )
    total = (
      None
      if refused
      else _per_step(
        [p for p in perms if p.decision is not None],
        functools.partial(_modeled, source=source, topology=topology, table=table, backend=backend),
      )
    )
    modes[backend] = {"mode": FLAG_VALUE[backend], "total_us": total, "refused": refused}
  offered = [b for b, m in modes.items() if m["total_us"] is not None]
  best = min(offered, key=lambda b: modes[b]["total_us"])  # NCCL is never refused
  nccl_us, best_us = modes["nccl"]["total_us"], modes[best]["total_us"]
  per_op_us = _per_op_total(perms, source, modes)
  known = all(runs_per_step(p)[1] for p in perms)
  return {
    "flag": FLAG,
    "backend": best,
    "mode": FLAG_VALUE[best],
    **settings(FLAG_VALUE[best]),
    "modes": modes,
    "nccl_us": nccl_us,
    "best_us": best_us,
    "saving_us": nccl_us - best_us,
    "per_op_us": per_op_us,
    "per_op_adds_us": None if per_op_us is None else best_us - per_op_us,
    "runs_known": known,
    "permutes": len(perms),
    "unpriced": unpriced,
    "why": _why(best, modes, nccl_us, best_us, known),
  }


def _per_op_total(
  perms: list[Permute], source: Source, modes: dict[str, dict[str, Any]]
) -> float | None:
  """Sum of each permute's own best of the flag's modes (the core's choice over the
  set), NCCL under a branch, as the series' assigner keeps it; None if one is
  undecided."""
  if any(p.decision is None for p in perms):
    return None
  names = [b for b in modes if b != "nccl"]

  def best(perm: Permute) -> float:
    decision = perm.decision
    assert decision is not None
    if perm.mark:  # kept as marked (decisions.KeepUserMark's plan)
      return decision["chosen_us"]
    us = [decision["backend_us"]["nccl"]]
    if perm.record.branch is None:
      us += [decision["backend_us"][b] for b in names if decision["backend_us"].get(b) is not None]
    return min(us)

  return _per_step(perms, best)


def _why(
  best: str, modes: dict[str, dict[str, Any]], nccl_us: float, best_us: float, known: bool
) -> str:
  bound = (
    ""
    if known
    else (
      " (runs per step a bound: at least where a loop count is "
      "unknown, at most under a conditional's branch)"
    )
  )
  others = "; ".join(f"{b} refused: {m['refused']}" for b, m in modes.items() if m["refused"])
  head = (
    f"{best} is modeled fastest for the whole program: {best_us:.2f} us per step "
    f"against {nccl_us:.2f} us on NCCL{bound}"
    if best != "nccl"
    else f"nccl: no other mode of the set is modeled faster for the whole program "
    f"({nccl_us:.2f} us per step{bound})"
  )
  return head + (f"; {others}" if others else "")


def what_runs(op_mode: str | None, flag_mode: str | None, per_op_xla: bool) -> dict[str, Any]:
  """What a compiled permute runs: `thunk`, the mode its thunk runs; `config`, the
  mode its backend_config carries after the assigner (None: none), which places its
  buffers (SYMMETRIC: in the collective memory); `agree`, whether the two match.
  op_mode: the config's collectives_mode as the module has it; flag_mode: the flag
  the module was compiled with (None: unknown, XLA's default taken)."""
  flag = flag_mode or DEFAULT
  op = None if op_mode in (None, backend_tables.NO_MODE) else op_mode
  if per_op_xla:  # the series' thunk: the config's mode, else the flag's
    return {"thunk": op or flag, "config": op, "agree": True}
  # A stock assigner writes a non-default flag's mode over every permute's.
  config = flag if flag != DEFAULT else op
  return {"thunk": flag, "config": config, "agree": (config or DEFAULT) == flag}


def compiled_flag(source: Source, report: Report | None = None) -> tuple[str | None, str | None]:
  """(the flag the module was compiled with, the config file saying so), from XLA's
  module config beside it, as the driver's JSON on the module (`report`) says; where
  no driver ran, read here (hlo.module_config). (None, None) where there is none."""
  if report is not None:
    return (report.get("collective_permute_mode") or None, report.get("module_config") or None)
  path = source.path if source.path and str(source.path) != "-" else None
  config = module_config.for_module(str(path)) if path else None
  if config is None:
    return None, None
  return config.collective_permute_mode, config.path


def for_source(
  source: Source,
  topology: selection.Topology,
  table: selection.CostTable,
  backends: str | Sequence[str],
  per_op_xla: bool = False,
  report: Report | None = None,
) -> dict[str, Any]:
  """choose() on a module read by the tools, with the flag it was compiled with
  (compiled_flag, from the driver's JSON `report` where it ran) and, per permute
  ({(computation, start): what_runs}), what it runs on this XLA."""
  perms = decisions.analyze(source, topology, table, tolerant=True, report=report)
  result = choose(perms, source, topology, table, backends)
  flag, path = compiled_flag(source, report)
  result["compiled_with"], result["compiled_with_from"] = flag, path
  result["per_op_xla"] = per_op_xla
  result["runs"] = {
    (p.record.computation, p.record.start): what_runs(_op_mode(p, per_op_xla), flag, per_op_xla)
    for p in perms
  }
  return result


def _op_mode(perm: Permute, per_op_xla: bool) -> str | None:
  """The permute's own mode as the target XLA's thunk sees it: its config's, or, on
  the series' XLA, whose assigner writes a user's mark into the config, the mark's
  (modes.requested: its rules too)."""
  mode = perm.record.collectives_mode
  if per_op_xla and mode in (None, backend_tables.NO_MODE):
    asked = modes.requested(perm.start)
    if asked and asked["mode"]:
      return str(asked["mode"])
  return mode
