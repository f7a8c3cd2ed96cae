"""hlo_tools.model.collectives.collective_permutes on the three ways XLA prints a
collective-permute."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools.hlo.reader import parse_hlo_file, parse_hlo_text
from hlo_tools.model.collectives import collective_permutes

from test_hlo_text import generated_dir, hlo_dump_files  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "jax0112"
H200_HLO = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
FIXTURES_DIR = REPO / "tests" / "fixtures"
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
