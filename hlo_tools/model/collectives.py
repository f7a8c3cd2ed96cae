"""One query over a parsed HloModule: every collective-permute, whatever form it was printed in.

Forms:
  'sync'          `collective-permute(...)`
  'start-done'    `collective-permute-start` / `collective-permute-done`. XLA's printer
                  also spells an async-start wrapping a collective-permute this way
                  ("syntax sugar", maybe with `collective-permute-update`s between); its
                  start shape is then `((operands), results...)`, flagged `sugared_async`.
  'async-wrapped' `async-start(...), calls=%wrapped` whose called computation's root is a
                  `collective-permute`, ended by `async-done` (maybe via `async-update`s).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from hlo_tools.hlo.ir import HloComputation, HloInstruction, HloModule

__all__ = ["CollectivePermute", "collective_permutes"]

# computation name -> [(an instruction calling it, that instruction's computation)]
Callers = dict[str, list[tuple[HloInstruction, HloComputation]]]
# (while, the computation holding it, its trip count or None)
Loop = tuple[str, str, int | None]


@dataclass
class CollectivePermute:
  computation: str
  form: str  # 'sync' | 'start-done' | 'async-wrapped'
  start: str  # the collective-permute / -start / async-start instruction
  done: str | None  # the matching -done / async-done, None for 'sync' or if unused
  pairs: list  # [(source, target), ...]
  bytes_per_device: int  # operand bytes sent by each device
  backend: str  # collective_backend_config.backend, 'DEFAULT' when absent
  is_async: bool
  channel_id: int | None
  while_loop: str | None  # innermost `while` whose body (transitively) holds it
  while_computation: str | None  # computation holding that while
  # Runs per execution of the module: the trip counts of every enclosing while
  # multiplied (a ring inside a 7-step pipeline loop runs 7 x 4 times); None
  # when a count is unknown or outside any loop.
  trip_count: int | None
  start_line: int
  done_line: int | None
  buffers: int = 1  # data operands: NVSHMEM pays a put and a barrier per buffer
  sugared_async: bool = False
  # collective_backend_config.collectives_mode (XLA of jax >= 0.10.2), None when absent
  collectives_mode: str | None = None
  wrapped_computation: str | None = None  # 'async-wrapped' only
  extra: dict = field(default_factory=dict)
  # [(while, its computation, its own trip count or None)], innermost first.
  loops: list = field(default_factory=list)
  # The product of the known counts: what trip_count is at least when one is unknown.
  trips_at_least: int = 1
  # (conditional, its computation, the branch computation) of the innermost
  # conditional whose branch runs the permute, None outside any: it then runs on
  # some executions only, so its loops' counts bound its runs from above.
  branch: tuple | None = None


def collective_permutes(module: HloModule) -> list[CollectivePermute]:
  """All collective-permutes of `module` (an hlo.ir.HloModule), in text order."""
  callers = module_callers(module)
  wrapped = _async_wrapped_bodies(module)
  out = []
  for comp in module.computations:
    users: dict[str, list[HloInstruction]] | None = None
    for instr in comp.instructions:
      op = instr.opcode
      if op == "collective-permute":
        if comp.name in wrapped:
          continue  # reported through its async-start
        out.append(_record(module, callers, comp, "sync", instr, None, instr))
      elif op == "collective-permute-start":
        if users is None:
          users = operand_users(comp, _DONE_PATH)
        done = _find_done(users, instr, "collective-permute-done")
        rec = _record(module, callers, comp, "start-done", instr, done, instr)
        first = (
          instr.shape.tuple_shapes[0] if instr.shape.is_tuple and instr.shape.tuple_shapes else None
        )
        rec.sugared_async = bool(first is not None and first.is_tuple)
        out.append(rec)
      elif op == "async-start":
        inner = _wrapped_permute(module, instr)
        if inner is None:
          continue
        if users is None:
          users = operand_users(comp, _DONE_PATH)
        done = _find_done(users, instr, "async-done")
        rec = _record(module, callers, comp, "async-wrapped", instr, done, inner)
        rec.wrapped_computation = inner.computation.name
        out.append(rec)
  return out


def _record(
  module: HloModule,
  callers: Callers,
  comp: HloComputation,
  form: str,
  start: HloInstruction,
  done: HloInstruction | None,
  permute: HloInstruction,
) -> CollectivePermute:
  config = start.backend_config_json() or {}
  if "collective_backend_config" not in config and permute is not start:
    config = permute.backend_config_json() or config
  collective = config.get("collective_backend_config")
  collective = collective if isinstance(collective, dict) else {}
  backend = collective.get("backend") or "DEFAULT"
  mode = collective.get("collectives_mode")
  channel = start.channel_id if start.channel_id is not None else permute.channel_id
  loops = loop_nest(module, callers, comp.name)
  loop, loop_comp, trips, at_least = loop_summary(loops)
  return CollectivePermute(
    computation=comp.name,
    form=form,
    start=start.name,
    done=done.name if done is not None else None,
    pairs=permute.source_target_pairs or [],
    bytes_per_device=sum(op.shape.byte_size() for op in data_operands(start)),
    buffers=max(1, len(data_operands(start))),
    backend=backend,
    collectives_mode=mode if isinstance(mode, str) else None,
    is_async=form != "sync",
    channel_id=channel,
    while_loop=loop,
    while_computation=loop_comp,
    trip_count=trips,
    start_line=start.line,
    done_line=done.line if done is not None else None,
    loops=loops,
    trips_at_least=at_least,
    branch=enclosing_conditional(callers, comp.name),
  )


def _product(values: Iterable[int]) -> int:
  out = 1
  for v in values:
    out *= v
  return out


def data_operands(instr: HloInstruction) -> list[HloInstruction]:
  """The operands sent. The in-place form's 4 operands (input, output buffer, 2 index
  tuples) send only the first."""
  ops = instr.operand_instructions()
  if instr.opcode != "async-start" and len(ops) == 4 and ops[2].shape.is_tuple:
    ops = ops[:1]
  return ops


def data_element_types(start: HloInstruction) -> list[str]:
  """Element types of the buffers a permute sends (every leaf of a tuple operand)."""
  return [
    leaf.element_type
    for op in data_operands(start)
    for leaf in op.shape.leaves()
    if leaf.element_type is not None and leaf.element_type != "token"
  ]


# Between a start and its done: updates (plain or sugared) and tuple unpacking.
_PASS_THROUGH = frozenset(("async-update", "collective-permute-update", "get-tuple-element"))


# What _find_done walks: a start's done, and what lies between the two.
_DONE_PATH = _PASS_THROUGH | {"collective-permute-done", "async-done"}


def operand_users(
  comp: HloComputation, opcodes: frozenset[str] | None = None
) -> dict[str, list[HloInstruction]]:
  """Instruction name -> the instructions of `comp` that use it (those of `opcodes`
  only, when given: a map of a few entries instead of one per instruction)."""
  users: dict[str, list[HloInstruction]] = {}
  for instr in comp.instructions:
    if opcodes is None or instr.opcode in opcodes:
      for op in instr.operands:
        users.setdefault(op, []).append(instr)
  return users


def _find_done(
  users: dict[str, list[HloInstruction]], start: HloInstruction, done_opcode: str
) -> HloInstruction | None:
  """Follows the start through async-updates (and get-tuple-elements) to its done."""
  seen = set()
  todo = deque([start.name])
  while todo:
    name = todo.popleft()
    for user in users.get(name, ()):
      if user.name in seen:
        continue
      seen.add(user.name)
      if user.opcode == done_opcode:
        return user
      if user.opcode in _PASS_THROUGH:
        todo.append(user.name)
  return None


def _wrapped_permute(module: HloModule, instr: HloInstruction) -> HloInstruction | None:
  for name in instr.called_computations:
    if name in module:
      root = module.computation(name).root
      if root.opcode == "collective-permute":
        return root
  return None


def _async_wrapped_bodies(module: HloModule) -> set[str]:
  out: set[str] = set()
  for instr in module.instructions():
    if instr.opcode == "async-start":
      out.update(instr.called_computations)
  return out


def module_callers(module: HloModule) -> Callers:
  """computation name -> [(caller instruction, its computation)]."""
  callers: Callers = {}
  for comp in module.computations:
    for instr in comp.instructions:
      for callee in instr.called_computations:
        callers.setdefault(callee, []).append((instr, comp))
  return callers


def _enclosing_while(
  module: HloModule, callers: Callers, comp_name: str
) -> tuple[str | None, str | None, int | None]:
  """Innermost while whose body reaches comp_name, breadth-first up the call graph."""
  seen = {comp_name}
  todo = deque([comp_name])
  while todo:
    name = todo.popleft()
    for instr, comp in callers.get(name, ()):
      if instr.opcode == "while" and _strip(instr.attributes.get("body")) == name:
        return instr.name, comp.name, trip_count(module, instr)
      if comp.name not in seen:
        seen.add(comp.name)
        todo.append(comp.name)
  return None, None, None


def enclosing_conditional(callers: Callers, comp_name: str) -> tuple[str, str, str] | None:
  """(conditional, its computation, branch computation) of the innermost conditional
  whose branch reaches comp_name, breadth-first up the call graph; None if none."""
  seen = {comp_name}
  todo = deque([comp_name])
  while todo:
    name = todo.popleft()
    for instr, comp in callers.get(name, ()):
      if instr.opcode == "conditional":
        return instr.name, comp.name, name
      if comp.name not in seen:
        seen.add(comp.name)
        todo.append(comp.name)
  return None


def enclosing_group(callers: Callers, comp_name: str) -> str | None:
  """The call or async-start marked _collectives_group that reaches comp_name, up
  the call graph; None if none."""
  seen = {comp_name}
  todo = deque([comp_name])
  while todo:
    name = todo.popleft()
    for instr, comp in callers.get(name, ()):
      if (
        instr.opcode in ("call", "async-start")
        and "_collectives_group" in instr.frontend_attributes
      ):
        return instr.name
      if comp.name not in seen:
        seen.add(comp.name)
        todo.append(comp.name)
  return None


def runs_per_step(loops: list, under_branch: bool = False) -> tuple:
  """(runs, bound) of a permute per execution of the module, from its loops'
  counts (innermost first, None unknown): bound is "exact"; "at least" where a
  count is unknown (runs is then the product of the known ones); "at most" under a
  conditional's branch, which runs on only some of the trips and whose share XLA's
  trip counts do not tell; "unknown" for both (runs: the known counts' product)."""
  known = _product(n for _, _, n in loops if n is not None)
  complete = all(n is not None for _, _, n in loops)
  if under_branch:
    return known, "at most" if complete else "unknown"
  return known, "exact" if complete else "at least"


def per_step_sum(items: Iterable[tuple[float, tuple | None]]) -> float:
  """Sum of (us per step, branch) over permutes, branch a record's `branch` (None
  outside any conditional): the permutes under one conditional count only its largest
  branch, since one branch runs per execution; summing every branch would count
  trips that none of them ran."""
  total, conditionals = 0.0, {}  # type: float, dict[str, dict[str, float]]
  for us, branch in items:
    if branch is None:
      total += us
      continue
    conditional, _, name = branch
    sums = conditionals.setdefault(conditional, {})
    sums[name] = sums.get(name, 0.0) + us
  return total + sum(max(sums.values()) for sums in conditionals.values())


def loop_summary(loops: list[Loop]) -> tuple[str | None, str | None, int | None, int]:
  """(innermost while, its computation, runs per execution or None when a count
  is unknown, the product of the known counts) of a loop nest, innermost first."""
  loop, loop_comp = loops[0][:2] if loops else (None, None)
  known = [n for _, _, n in loops if n is not None]
  at_least = _product(known)
  return loop, loop_comp, at_least if len(known) == len(loops) and loops else None, at_least


def trips_text(counts: list, under_branch: bool = False) -> str:
  """How often a permute runs, from its loops' trip counts (innermost first, None
  unknown): 'x28 trips (7 x 4)', 'at least x4 trips (? x 4; ...)', '' outside loops;
  under a conditional's branch 'at most x6 trips (...)', as runs_per_step bounds it."""
  if not counts:
    return ""
  known = _product(c for c in counts if c is not None)
  nest = " x ".join("?" if c is None else str(c) for c in reversed(counts))
  if under_branch:
    why = "under a conditional's branch, which runs on only some of them"
    if None in counts:
      return f"trips unknown ({nest}; ? = a loop whose count is unknown; {why})"
    return f"at most x{known} trips ({nest + '; ' if len(counts) > 1 else ''}{why})"
  if None in counts:
    if all(c is None for c in counts):
      return "trips unknown" + (f" ({nest})" if len(counts) > 1 else "")
    return f"at least x{known} trips ({nest}; ? = a loop whose count is unknown)"
  return f"x{known} trips" + (f" ({nest})" if len(counts) > 1 else "")


def loop_nest(module: HloModule, callers: Callers, comp_name: str) -> list[Loop]:
  """Every while enclosing comp_name, innermost first: [(while, computation, trips)]."""
  loops: list[Loop] = []
  seen: set[tuple[str, str]] = set()
  loop, loop_comp, trips = _enclosing_while(module, callers, comp_name)
  while loop is not None and loop_comp is not None and (loop_comp, loop) not in seen:
    seen.add((loop_comp, loop))
    loops.append((loop, loop_comp, trips))
    loop, loop_comp, trips = _enclosing_while(module, callers, loop_comp)
  return loops


def trip_count(module: HloModule, while_instr: HloInstruction) -> int | None:
  """Iterations of a while: XLA's known_trip_count, else read off a counted loop."""
  config = while_instr.backend_config_json() or {}
  n = (config.get("known_trip_count") or {}).get("n")
  try:
    if n is not None:
      return int(n)
  except (TypeError, ValueError):
    return None
  try:
    return _counted_loop_trips(module, while_instr)
  except (KeyError, ValueError, IndexError, AttributeError):
    return None  # not the counted-loop shape; the count stays unknown


# A loop jax lowers before XLA's optimizations record known_trip_count: the condition
# compares a tuple element i with a constant (`lt(i, 8)`), the init tuple sets i to a
# constant and the body adds a positive constant to it.
_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}


def _counted_loop_trips(module: HloModule, while_instr: HloInstruction) -> int | None:
  cond = module.computation(_strip(while_instr.attributes["condition"]))
  body = module.computation(_strip(while_instr.attributes["body"]))
  root = cond.root
  if root.opcode != "compare" or len(root.operands) != 2:
    return None
  direction = root.attributes.get("direction")
  lhs, rhs = root.operand_instructions()
  index, limit = _param_element(lhs), _int_constant(rhs)
  if index is None:  # `gt(8, i)`: the counter on the right
    index, limit, direction = _param_element(rhs), _int_constant(lhs), _FLIP.get(direction or "")
  if index is None or limit is None or direction not in ("LT", "LE"):
    return None
  [init_tuple] = while_instr.operand_instructions()
  if init_tuple.opcode != "tuple":
    return None
  start = _int_constant(init_tuple.operand_instructions()[index])
  step = _increment(body.root, index)
  if start is None or not step or step < 1:
    return None
  span = limit - start + (1 if direction == "LE" else 0)
  return max(0, -(-span // step))


def _param_element(instr: HloInstruction) -> int | None:
  """k when instr is get-tuple-element(parameter(0)), index=k."""
  if instr.opcode != "get-tuple-element":
    return None
  [tup] = instr.operand_instructions()
  if tup.opcode != "parameter":
    return None
  return int(instr.attributes["index"])


def _int_constant(instr: HloInstruction) -> int | None:
  if (
    instr.opcode != "constant"
    or instr.shape.dims
    or not instr.shape.element_type
    or instr.shape.element_type[0] not in "su"
  ):
    return None
  try:
    return int((instr.literal or "").strip())
  except ValueError:
    return None


def _increment(body_root: HloInstruction, index: int) -> int | None:
  """The constant the body adds to tuple element `index`, else None."""
  if body_root.opcode != "tuple":
    return None
  update = body_root.operand_instructions()[index]
  if update.opcode != "add":
    return None
  a, b = update.operand_instructions()
  if _param_element(a) == index:
    return _int_constant(b)
  if _param_element(b) == index:
    return _int_constant(a)
  return None


def _strip(name: str | None) -> str:
  return name.strip().lstrip("%") if name else ""
