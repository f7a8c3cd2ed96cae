"""hlo_tools.model.collectives: every collective-permute of a module in the three ways
XLA prints one, with the loops, conditionals and groups around it."""

import os
import subprocess
import sys

import pytest

from hlo_tools.hlo import reader
from hlo_tools.hlo.reader import parse_hlo_file, parse_hlo_text
from hlo_tools.model import collectives
from hlo_tools.model.collectives import collective_permutes

from conftest import FIXTURES as FIXTURES_DIR, SHARED_DATA
from generated_hlo import generated_dir, hlo_dump_files  # noqa: F401  (session fixture)

H200_HLO = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
# jax 0.11.2's optimized ring with a permute under a conditional's branch, its operands
# written `%t#K` (XLA's compact get-tuple-element).
RING = FIXTURES_DIR / "jax0112" / "cond_ring_1x1x1.after_optimizations.hlo"
# jax 0.10.2 fixtures, plus the same ring compiled by jax 0.9.1 (tests/fixtures/jax091/);
# not Ulysses attention, whose all-to-alls are its only collectives.
FIXTURES = sorted(
  p for p in FIXTURES_DIR.glob("*.hlo") if not p.name.startswith("ulysses")
) + sorted((FIXTURES_DIR / "jax091").glob("*.hlo"))
FIXTURE_IDS = [str(p.relative_to(FIXTURES_DIR)) for p in FIXTURES]

# The un-sugared async form: async-start calls a computation whose root is the permute.
# (jaxlib 0.10.2 accepts it; its printer re-spells it collective-permute-start/update/done.)
ASYNC_WRAPPED = """HloModule jit_ring, is_scheduled=true, num_partitions=2

%wrapped_collective_permute (param_0: bf16[1024,1024]) -> bf16[1024,1024] {
  %param_0 = bf16[1024,1024]{1,0} parameter(0)
  ROOT %collective-permute.1 = bf16[1024,1024]{1,0} collective-permute(%param_0), channel_id=3, source_target_pairs={{0,1},{1,0}}
}, execution_thread="main"

%body (arg: (s32[], bf16[1024,1024])) -> (s32[], bf16[1024,1024]) {
  %arg = (s32[], bf16[1024,1024]{1,0}) parameter(0)
  %x = bf16[1024,1024]{1,0} get-tuple-element(%arg), index=1
  %start = ((bf16[1024,1024]{1,0}), bf16[1024,1024]{1,0}, u32[]) async-start(%x), calls=%wrapped_collective_permute, backend_config={"collective_backend_config":{"backend":"NVSHMEM","is_sync":false}}
  %update = ((bf16[1024,1024]{1,0}), bf16[1024,1024]{1,0}, u32[]) async-update(%start)
  %done = bf16[1024,1024]{1,0} async-done(%update)
  %i = s32[] get-tuple-element(%arg), index=0
  ROOT %t = (s32[], bf16[1024,1024]{1,0}) tuple(%i, %done)
}

%cond (arg.1: (s32[], bf16[1024,1024])) -> pred[] {
  %arg.1 = (s32[], bf16[1024,1024]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%arg.1), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i.1, %n), direction=LT
}

ENTRY %main (x.1: bf16[1024,1024]) -> bf16[1024,1024] {
  %x.1 = bf16[1024,1024]{1,0} parameter(0)
  %zero = s32[] constant(0)
  %tuple = (s32[], bf16[1024,1024]{1,0}) tuple(%zero, %x.1)
  %while = (s32[], bf16[1024,1024]{1,0}) while(%tuple), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = bf16[1024,1024]{1,0} get-tuple-element(%while), index=1
}
"""

MIB2 = 2 * 1024 * 1024  # bf16[1024,1024]


def test_h200_sugared_start_done():
  [rec] = collective_permutes(parse_hlo_file(H200_HLO))
  assert (rec.form, rec.start, rec.done) == (
    "start-done",
    "collective-permute-start",
    "collective-permute-done",
  )
  assert rec.sugared_async  # ((operands), result) start shape of jax 0.11
  assert rec.computation == "region_0.1"
  assert rec.pairs == [(0, 0)] and rec.channel_id == 1
  assert rec.bytes_per_device == MIB2  # operand bytes, not the start's tuple
  assert rec.backend == "DEFAULT" and rec.is_async
  assert (rec.while_loop, rec.while_computation, rec.trip_count) == ("while.5", "main.3", 4)
  assert (rec.start_line, rec.done_line) == (33, 36)


def test_async_wrapped_permute_reads_its_wrapped_computation():
  [rec] = collective_permutes(parse_hlo_text(ASYNC_WRAPPED))
  assert rec.form == "async-wrapped" and rec.is_async
  assert (rec.start, rec.done, rec.wrapped_computation) == (
    "start",
    "done",
    "wrapped_collective_permute",
  )
  assert rec.pairs == [(0, 1), (1, 0)] and rec.channel_id == 3
  assert rec.backend == "NVSHMEM" and rec.bytes_per_device == MIB2
  assert (rec.while_loop, rec.trip_count) == ("while", 3)
  assert (rec.start_line, rec.done_line) == (11, 13)


def test_async_wrapped_as_reprinted_by_jaxlib():
  """jaxlib prints the same module with collective-permute-start/-update/-done sugar."""
  code = (
    "import sys; from jaxlib import _hlo; "
    "print(_hlo.hlo_module_from_text(sys.stdin.read()).to_string())"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    input=ASYNC_WRAPPED,
    text=True,
    capture_output=True,
    timeout=120,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "collective-permute-update(" in proc.stdout
  [rec] = collective_permutes(parse_hlo_text(proc.stdout))
  assert (rec.form, rec.start, rec.done, rec.sugared_async) == ("start-done", "start", "done", True)
  assert rec.pairs == [(0, 1), (1, 0)] and rec.backend == "NVSHMEM"
  assert rec.bytes_per_device == MIB2 and rec.trip_count == 3


def test_generated_ring_has_one_async_permute_in_a_6_trip_loop(generated_dir):  # noqa: F811
  [rec] = collective_permutes(parse_hlo_file(generated_dir / "ring_compiled.hlo"))
  assert rec.form == "start-done" and rec.is_async
  assert rec.pairs == [(j, (j + 1) % 8) for j in range(8)]
  assert rec.bytes_per_device == 128 * 256 * 2
  assert rec.backend == "DEFAULT"
  assert rec.trip_count == 6 and rec.while_loop is not None


def test_generated_pass_dumps_sync_then_async(generated_dir):  # noqa: F811
  forms = {}
  for path in hlo_dump_files(generated_dir):
    for rec in collective_permutes(parse_hlo_file(path)):
      forms.setdefault(rec.form, []).append(rec)
      assert rec.pairs == [(j, (j + 1) % 8) for j in range(8)], path
      assert rec.bytes_per_device == 128 * 256 * 2, path
      assert rec.while_loop is not None, path
  assert forms.keys() == {"sync", "start-done"}
  assert all(not r.is_async and r.done is None for r in forms["sync"])
  assert any(r.trip_count == 6 for r in forms["start-done"])


@pytest.mark.parametrize("path", FIXTURES, ids=FIXTURE_IDS)
def test_every_fixture_has_permutes_of_its_stage_form(path):
  records = collective_permutes(parse_hlo_file(path))
  assert records, path
  for rec in records:
    assert rec.pairs and rec.bytes_per_device > 0
    if "before_async" in path.name:
      assert rec.form == "sync" and rec.done is None
    if "after_optimizations" in path.name:
      assert rec.form in ("start-done", "async-wrapped") and rec.done is not None
  if path.name.startswith("ring"):
    # Every ring permute runs in its loop, except the backward's one hand-off of
    # the f32 gradient sums to their owners after the loop (f32[2,1,128,2,64], 128 KiB).
    outside = [r for r in records if r.while_loop is None]
    in_loops = [r for r in records if r.while_loop is not None]
    assert all(r.trip_count for r in in_loops)
    if path.name.startswith("ring_bwd"):
      assert len(in_loops) == 2
      [handoff] = outside
      assert handoff.bytes_per_device == 131072 and handoff.start_line > max(
        r.start_line for r in in_loops
      )
    else:
      assert not outside


def test_the_loop_count_is_read_through_a_compact_element():
  # The counter is compared as %arg_tuple.7#0: the trip count needs the element.
  permutes = collectives.collective_permutes(reader.parse_hlo_file(RING))
  assert len(permutes) == 2
  assert all(p.trip_count == 4 for p in permutes), [(p.start, p.trip_count) for p in permutes]
  branch = [p for p in permutes if p.branch]
  assert len(branch) == 1 and branch[0].start == "ppermute.4.2"


# ---------------------------------------------------------------------------------------
# The loop nest, conditionals and groups around a permute; how often it runs


def test_a_permute_under_a_branch_names_its_conditional_and_loop():
  # cond_ring: a 7-trip while whose body's conditional.1.clone runs region_1.1_spmd
  # (true) or region_2.2_spmd (false), each holding one permute.
  records = collective_permutes(parse_hlo_file(FIXTURES_DIR / "cond_ring_1x1x8.before_async.hlo"))
  assert {r.start: r.branch for r in records} == {
    "ppermute.4.0": ("conditional.1.clone", "region_0.3_spmd", "region_1.1_spmd"),
    "ppermute.5.0": ("conditional.1.clone", "region_0.3_spmd", "region_2.2_spmd"),
  }
  for r in records:
    assert r.loops == [("while.16", "main.6_spmd", 7)] and r.trip_count == 7
    assert r.bytes_per_device == 2048 * 4096 * 4 and r.form == "sync"


GROUPED = """HloModule group, num_partitions=4

group {
  p = f32[4096] parameter(0)
  ROOT cp = f32[4096] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

ENTRY e {
  p = f32[4096] parameter(0)
  ROOT c = f32[4096] call(p), to_apply=group, frontend_attributes={ATTRS}
}
"""


@pytest.mark.parametrize("attrs,group", [('_collectives_group=""', "c"), ('x=""', None)])
def test_enclosing_group_is_the_call_marked_collectives_group(attrs, group):
  module = parse_hlo_text(GROUPED.replace("ATTRS", attrs))
  callers = collectives.module_callers(module)
  assert [(i.name, c.name) for i, c in callers["group"]] == [("c", "e")]
  assert collectives.enclosing_group(callers, "group") == group
  # A call is no conditional, nor a loop.
  assert collectives.enclosing_conditional(callers, "group") is None
  [rec] = collective_permutes(module)
  assert rec.loops == [] and rec.trip_count is None and rec.branch is None


# A loop as jax lowers it before XLA annotates known_trip_count: i from START, while
# `CMP`, adding STEP per trip.
COUNTED = """HloModule counted, num_partitions=2

body {
  arg = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(arg), index=0
  x = f32[8] get-tuple-element(arg), index=1
  cp = f32[8] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  step = s32[] constant(STEP)
  next = s32[] add(i, step)
  ROOT t = (s32[], f32[8]) tuple(next, cp)
}

cond {
  arg.1 = (s32[], f32[8]) parameter(0)
  i.1 = s32[] get-tuple-element(arg.1), index=0
  limit = s32[] constant(10)
  ROOT c = pred[] CMP
}

ENTRY main {
  x.1 = f32[8] parameter(0)
  start = s32[] constant(START)
  init = (s32[], f32[8]) tuple(start, x.1)
  ROOT w = (s32[], f32[8]) while(init), condition=cond, body=body
}
"""


@pytest.mark.parametrize(
  "start,step,cmp,trips",
  [
    (0, 1, "compare(i.1, limit), direction=LT", 10),
    (2, 3, "compare(i.1, limit), direction=LT", 3),  # 2, 5, 8
    (2, 3, "compare(i.1, limit), direction=LE", 3),  # 2, 5, 8 (11 > 10)
    (1, 3, "compare(i.1, limit), direction=LE", 4),  # 1, 4, 7, 10
    (0, 4, "compare(limit, i.1), direction=GT", 3),  # 10 > i: 0, 4, 8
    (12, 1, "compare(i.1, limit), direction=LT", 0),  # starts past the limit
    (0, 1, "compare(i.1, limit), direction=NE", None),  # not a counted loop
    (0, 0, "compare(i.1, limit), direction=LT", None),  # never advances
  ],
)
def test_trip_count_read_off_a_counted_loop(start, step, cmp, trips):
  text = COUNTED.replace("START", str(start)).replace("STEP", str(step)).replace("CMP", cmp)
  module = parse_hlo_text(text)
  assert collectives.trip_count(module, module.entry.instruction("w")) == trips
  [rec] = collective_permutes(module)
  assert rec.loops == [("w", "main", trips)]


def test_known_trip_count_wins_over_the_loop_shape():
  text = COUNTED.replace("START", "0").replace("STEP", "1")
  text = text.replace("CMP", "compare(i.1, limit), direction=LT")
  text = text.replace("body=body", 'body=body, backend_config={"known_trip_count":{"n":"5"}}')
  module = parse_hlo_text(text)
  assert collectives.trip_count(module, module.entry.instruction("w")) == 5


def test_runs_per_step_multiplies_the_nest_and_says_how_sure():
  nest = [("inner", "body", 4), ("outer", "main", 7)]
  assert collectives.runs_per_step(nest) == (28, "exact")
  assert collectives.runs_per_step([("inner", "body", None), ("outer", "main", 7)]) == (
    7,
    "at least",
  )
  assert collectives.runs_per_step(nest, under_branch=True) == (28, "at most")
  assert collectives.runs_per_step([("w", "main", None)], under_branch=True) == (1, "unknown")
  assert collectives.runs_per_step([]) == (1, "exact")


def test_loop_summary_innermost_loop_and_product():
  assert collectives.loop_summary([]) == (None, None, None, 1)
  nest = [("inner", "body", 4), ("outer", "main", 7)]
  assert collectives.loop_summary(nest) == ("inner", "body", 28, 28)
  assert collectives.loop_summary([("inner", "body", None), ("outer", "main", 7)]) == (
    "inner",
    "body",
    None,
    7,
  )


def test_trips_text_reads_outermost_first():
  assert collectives.trips_text([]) == ""
  assert collectives.trips_text([6]) == "x6 trips"
  assert collectives.trips_text([4, 7]) == "x28 trips (7 x 4)"
  assert collectives.trips_text([None, 4]) == (
    "at least x4 trips (4 x ?; ? = a loop whose count is unknown)"
  )
  assert collectives.trips_text([None]) == "trips unknown"
  assert collectives.trips_text([None, None]) == "trips unknown (? x ?)"
  assert collectives.trips_text([6], under_branch=True) == (
    "at most x6 trips (under a conditional's branch, which runs on only some of them)"
  )
  assert collectives.trips_text([2, 3], under_branch=True) == (
    "at most x6 trips (3 x 2; under a conditional's branch, which runs on only some of them)"
  )


def test_per_step_sum_counts_one_branch_per_conditional():
  items = [
    (1.0, None),
    (2.0, ("cond", "body", "true_branch")),
    (1.5, ("cond", "body", "true_branch")),
    (5.0, ("cond", "body", "false_branch")),
    (0.5, ("other", "body", "b")),
  ]
  # 1 outside + max(3.5, 5) for cond + 0.5 for the other conditional.
  assert collectives.per_step_sum(items) == pytest.approx(6.5)
  assert collectives.per_step_sum([]) == 0.0


# The in-place form: input, output buffer and two index tuples; only the input is sent.
IN_PLACE = """HloModule inplace, num_partitions=2

ENTRY e {
  x = f32[16] parameter(0)
  out = f32[32] parameter(1)
  c0 = s32[] constant(0)
  c16 = s32[] constant(16)
  src = (s32[]) tuple(c0)
  dst = (s32[]) tuple(c16)
  cps = (f32[16], f32[32], u32[], u32[]) collective-permute-start(x, out, src, dst), channel_id=1, source_target_pairs={{0,1},{1,0}}, slice_sizes={{16}}
  ROOT cpd = f32[32] collective-permute-done(cps)
}
"""

TUPLE_SEND = """HloModule combined, num_partitions=2

ENTRY e {
  a = bf16[8,8] parameter(0)
  b = f8e4m3fn[64] parameter(1)
  ROOT cp = (bf16[8,8], f8e4m3fn[64]) collective-permute(a, b), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
"""


def test_the_in_place_form_sends_only_its_input():
  module = parse_hlo_text(IN_PLACE)
  start = module.entry.instruction("cps")
  assert [op.name for op in collectives.data_operands(start)] == ["x"]
  [rec] = collective_permutes(module)
  assert (rec.form, rec.done, rec.buffers) == ("start-done", "cpd", 1)
  assert rec.bytes_per_device == 16 * 4


def test_a_combined_permute_sends_each_operand_with_its_type():
  module = parse_hlo_text(TUPLE_SEND)
  permute = module.entry.instruction("cp")
  assert collectives.data_element_types(permute) == ["bf16", "f8e4m3fn"]
  [rec] = collective_permutes(module)
  assert rec.buffers == 2 and rec.bytes_per_device == 8 * 8 * 2 + 64
