"""hlo_tools.model.runtime_rules: each backend's runtime rule line, and what XLA's
buffer-assignment dump beside a module says of an NVSHMEM permute's buffers."""

from hlo_tools import selection
from hlo_tools.hlo.buffer_assignment import Allocation
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model import runtime_rules, sources

from conftest import FIXTURES

# Rings of 8 compiled on NCCL (no buffer in the collective memory), their buffer
# assignment beside them: DONATED writes into parameter 1's buffer (allocation 0),
# RETURNED's destination {1} is the program's output (allocation 0, maybe-live-out).
DONATED = FIXTURES / "donated_ring_1x1x8.after_optimizations.hlo"
RETURNED = FIXTURES / "returned_ring_1x1x8.after_optimizations.hlo"


def _start(path):
  """(source, its permute-start, its buffer assignment): the source holds the module."""
  source = sources.read_source(str(path))
  return source, source.module.entry.instruction("collective-permute-start"), source.allocations


def test_rule_lines_of_a_set_end_with_nccls():
  rules = runtime_rules.RULES
  assert set(rules) == set(selection.BACKENDS)
  assert runtime_rules.rule_lines("nccl,peer") == [rules["peer"], rules["nccl"]]
  assert runtime_rules.rule_lines(["nccl", "peer", "symmetric"]) == [
    rules["peer"],
    rules["symmetric"],
    rules["nccl"],
  ]
  assert runtime_rules.rule_lines("nccl") == [rules["nccl"]]


def test_a_donated_destination_is_off_the_heap():
  _source, start, allocations = _start(DONATED)
  assert not runtime_rules.colored_by_xla(start, allocations)
  assert runtime_rules.nvshmem_heap_problem(start, allocations) == (
    "its destination {1} (allocation 0) is parameter 1's buffer, which the caller "
    "allocated outside the NVSHMEM heap (a donated input): a put there lands "
    "elsewhere; the patched emitter runs it on NCCL (CheckNvshmemDestination)"
  )
  # The assignment is of the NCCL compile: only parameters and live-out are judged.
  assert runtime_rules.heap_assignment_note(start, allocations).startswith(
    "the buffer assignment beside the module is of a compile where this permute was not NVSHMEM"
  )


def test_a_destination_the_program_returns_is_off_the_heap():
  _source, start, allocations = _start(RETURNED)
  assert runtime_rules.live_out_values(start) == {("collective-permute-done", ())}
  problem = runtime_rules.nvshmem_heap_problem(start, allocations)
  assert problem is not None and problem.startswith(
    "its destination {1} (allocation 0) lives out of the program"
  )


def test_no_assignment_or_no_start_says_nothing():
  _source, start, allocations = _start(DONATED)
  assert runtime_rules.nvshmem_heap_problem(start, None) is None
  assert runtime_rules.nvshmem_heap_problem(start, {}) is None
  assert runtime_rules.heap_assignment_note(start, None) is None
  done = start.computation.instruction("collective-permute-done")
  assert runtime_rules.nvshmem_heap_problem(done, allocations) is None


# An NVSHMEM compile: XLA colors the permute's buffers 1 (the collective memory).
def _alloc(number, color=0, parameter=None, live_out=False):
  return Allocation(number, color, parameter, live_out)


def test_a_colored_assignment_judges_the_destinations_memory_space():
  _source, start, _ = _start(DONATED)
  operand = start.operand_instructions()[0].name  # param.2
  colored = {operand: {(): _alloc(1, color=1)}, start.name: {(1,): _alloc(3, color=1)}}
  assert runtime_rules.colored_by_xla(start, colored)
  assert runtime_rules.nvshmem_heap_problem(start, colored) is None
  assert runtime_rules.heap_assignment_note(start, colored) is None
  # The destination left in memory space 0 while the operand is colored.
  default = {operand: {(): _alloc(1, color=1)}, start.name: {(1,): _alloc(3)}}
  assert runtime_rules.nvshmem_heap_problem(start, default) == (
    "its destination {1} (allocation 3) is in memory space 0, not the collective memory "
    "(1) that NVSHMEM's heap serves: the patched emitter runs it on NCCL "
    "(CheckNvshmemDestination)"
  )


def test_a_collective_buffer_that_lives_out_is_named_first():
  _source, start, _ = _start(DONATED)
  escaping = {
    "x": {(): _alloc(5, color=1, live_out=True)},
    "y": {(): _alloc(2, color=1, live_out=True)},
    start.name: {(1,): _alloc(2, color=1, live_out=True)},
  }
  problem = runtime_rules.nvshmem_heap_problem(start, escaping)
  assert problem.startswith("allocation 2 of the collective memory (1) may be live out")


LIVE_OUT = """HloModule m

ENTRY e {
  p = (f32[2], f32[2]) parameter(0)
  a = f32[2] get-tuple-element(p), index=1
  b = f32[2] negate(a)
  c = f32[2] bitcast(b)
  d = f32[2] copy(b)
  ROOT r = (f32[2], f32[2], f32[2]) tuple(a, c, d)
}
"""


def test_live_out_values_follow_tuples_elements_and_bitcasts():
  module = parse_hlo_text(LIVE_OUT)
  got = runtime_rules.live_out_values(module.entry.instruction("b"))
  # a is p{1}; a bitcast defines no buffer (c is b's); a copy does (d).
  assert got == {("p", (1,)), ("b", ()), ("d", ()), ("r", (0,)), ("r", (1,)), ("r", (2,))}


# A ring in a loop that is itself the entry's root: returning the loop returns each
# of its elements, the permute's destination (w{1}, allocation 0) among them.
LOOP_ROOT = """HloModule m, num_partitions=2

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %limit = s32[] constant(4)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%b), index=0
  %x = f32[8]{0} get-tuple-element(%b), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %cpd = f32[8]{0} collective-permute-done(%cps)
  ROOT %r = (s32[], f32[8]{0}) tuple(%next, %cpd)
}

ENTRY %e (p: f32[8]) -> (s32[], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %p)
  ROOT %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
}
"""


def test_a_destination_returned_by_a_loop_that_is_the_root_is_off_the_heap():
  module = parse_hlo_text(LOOP_ROOT, "loop.hlo")
  start = next(c for c in module.computations if c.name == "body").instruction("cps")
  assert runtime_rules.live_out_values(start) == {("w", ())}
  destination = Allocation(0, 0, None, True)
  allocations = {
    "cps": {(1,): destination},
    "w": {(): Allocation(3, 0, None, True), (0,): Allocation(2, 0, None, True), (1,): destination},
  }
  problem = runtime_rules.nvshmem_heap_problem(start, allocations)
  assert problem is not None and problem.startswith(
    "its destination {1} (allocation 0) lives out of the program"
  )
  # The loop's other element in that allocation instead: nothing returned there.
  allocations["w"][(1,)] = Allocation(4, 0, None, True)
  assert runtime_rules.nvshmem_heap_problem(start, allocations) is None
