"""hlo_tools.ops.verify_runtime: what a runtime needs of a permute's backend (NVSHMEM's
heap, team, runtime rules and memory space; peer and symmetric memory's safety rule),
on the pass's output, hand-edited fixtures and small modules."""

import json
import shutil
import subprocess
import sys

import pytest

from hlo_tools import cli, selection
from hlo_tools.model import decisions, options, sources
from hlo_tools.ops import verify_runtime

from conftest import FIXTURES, ROOT, placed
from verify_cli import checks, edited, messages, pass_output, run

H200_HLO = FIXTURES / "jax0112" / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
# A table where NVSHMEM wins on NVLink at every size (the pass then writes NVSHMEM).
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"
RING = "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}"
RING_MODULE = FIXTURES / "ring_1x1x8.after_optimizations.hlo"  # ring attention, 8 devices


def test_nvshmem_on_devices_other_than_its_pes_fails(capsys, tmp_path):
  # NVSHMEM chosen for one host of 8, then checked where the device assignment
  # swaps devices 0 and 1: every edge stays on the host and every device has a
  # source, but the pinned thunk puts to partition id i as PE i, the process of
  # device i, so the data would land on other GPUs.
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, _ = run(
    capsys,
    out_hlo,
    "--topology=1x1x8:map=1,0,2,3,4,5,6,7",
    f"--cost-table={FAST_NVSHMEM}",
    "--format=json",
  )
  assert rc == 1
  assert "nvshmem-runtime" in json.loads(out)["failed_checks"]
  [r] = checks(out)["nvshmem-runtime"]["results"]
  assert "logical device 0 runs on device 1" in r["message"], r["message"]
  assert checks(out)["nvshmem-team"]["status"] == "pass"


# A ring of four, in a collectives group as a user marks one (a call with
# _collectives_group), its permute already set to NVSHMEM.
GROUPED_RING = """HloModule group, num_partitions=4

group {
  p = f32[4096] parameter(0)
  ROOT cp = f32[4096] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}
}

ENTRY e {
  p = f32[4096] parameter(0)
  ROOT c = f32[4096] call(p), to_apply=group, frontend_attributes={ATTRS}
}
"""


@pytest.mark.parametrize("attrs,fails", [('_collectives_group=""', True), ('x=""', False)])
def test_nvshmem_inside_a_collectives_group_fails(capsys, tmp_path, attrs, fails):
  # The group runs as one thunk that needs NCCL communicators: the patched emitter
  # falls back to NCCL, so the plan is not what would run.
  hlo = tmp_path / "group.hlo"
  hlo.write_text(GROUPED_RING.replace("ATTRS", attrs))
  rc, out, _ = run(
    capsys, hlo, f"--topology={placed('1x1x4')}", f"--cost-table={FAST_NVSHMEM}", "--format=json"
  )
  [r] = checks(out)["nvshmem-runtime"]["results"]
  assert (r["status"] == "fail") == fails and ("collectives group" in r["message"]) == fails
  assert (rc == 1) == fails, out


def test_nvshmem_over_the_heap_limit_fails(capsys, tmp_path):
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  small_heap = tmp_path / "small_heap.cost"
  small_heap.write_text(FAST_NVSHMEM.read_text() + "nvshmem_max_bytes: 1024\n")
  rc, out, _ = run(
    capsys, out_hlo, "--topology=1x1x8", f"--cost-table={small_heap}", "--format=json"
  )
  assert rc == 1
  assert "nvshmem-heap" in json.loads(out)["failed_checks"]
  [r] = checks(out)["nvshmem-heap"]["results"]
  assert r["status"] == "fail" and "exceed the NVSHMEM symmetric heap" in r["message"]


MEMSPACE = """HloModule m, num_partitions=2

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0:S(1)} parameter(0)
  %start = (f32[16]{0:S(1)}, f32[16]{0:S(1)}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}, backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}, frontend_attributes={_nvshmem_plan="nvshmem"}
  ROOT %done = f32[16]{0RESULT} collective-permute-done(%start)
}
"""


@pytest.mark.parametrize("result_layout,status", [(":S(1)", "pass"), ("", "fail")])
def test_memory_space_check_follows_result_layout(capsys, tmp_path, result_layout, status):
  path = tmp_path / "memspace.hlo"
  path.write_text(MEMSPACE.replace("RESULT", result_layout))
  rc, out, _ = run(
    capsys,
    path,
    f"--topology={placed('1x1x2')}",
    f"--cost-table={FAST_NVSHMEM}",
    "--format=json",
    "--no-hlo-verifier",
  )
  ms = checks(out)["memory-space"]
  assert ms["status"] == status
  assert rc == (0 if status == "pass" else 1)
  if status == "fail":
    assert "result %done f32[16]{0}" in ms["results"][0]["message"]


def test_memory_space_note_fits_an_optimized_module_without_nvshmem(capsys):
  # An after-optimizations module whose permutes all run NCCL: nothing to check, and
  # the note says why (it said "from before buffer assignment").
  rc, out, _ = run(
    capsys,
    FIXTURES / "ring_1x2x4.after_optimizations.hlo",
    "--topology=1x2x4",
    "--format=json",
    "--no-hlo-verifier",
  )
  assert rc == 0
  ms = checks(out)["memory-space"]
  assert ms["status"] == "not_applicable"
  assert ms["note"] == "no collective-permute uses NVSHMEM"


def test_nvshmem_on_a_local_copy_fails(capsys, tmp_path):
  # A one-device program's permute, every pair a device to itself, set to NVSHMEM by
  # hand: XLA copies it locally, and the config would only put its buffers on the heap.
  text = H200_HLO.read_text()
  assert text.count('"backend":"DEFAULT"') == 1
  path = tmp_path / "self.hlo"
  path.write_text(text.replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"'))
  rc, out, _ = run(capsys, path, "--topology=1x1x1", "--format=json", "--no-hlo-verifier")
  [result] = checks(out)["nvshmem-runtime"]["results"]
  assert rc == 1 and "every pair is a device to itself" in result["message"], result


def test_nvshmem_shift_that_would_hang_fails(capsys, tmp_path):
  # A real non-cyclic shift (i -> i+1, nothing reaches device 0) with NVSHMEM written
  # into it: XLA's NVSHMEM barrier would wait for device 0 forever.
  path = edited(
    tmp_path,
    FIXTURES / "shift_1x2x4.after_optimizations.hlo",
    '"backend":"DEFAULT"',
    '"backend":"NVSHMEM"',
  )
  rc, out, _ = run(capsys, path, "--topology=1x1x8", "--format=json", "--no-hlo-verifier")
  assert rc == 1
  team = checks(out)["nvshmem-team"]
  [r] = team["results"]
  assert team["status"] == "fail" and r["line"] == 14
  assert "device 0" in r["message"] and "hang" in r["message"]
  assert "nvshmem-team" in json.loads(out)["failed_checks"]
  # The same shift as a ring (every device a target) is fine.
  ring = edited(
    tmp_path,
    path,
    "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7}}",
    RING,
    name="ring.hlo",
  )
  rc, out, _ = run(capsys, ring, "--topology=1x1x8", "--format=json", "--no-hlo-verifier")
  assert checks(out)["nvshmem-team"]["status"] == "pass"


def test_pass_output_of_a_shift_passes_the_team_check(capsys, tmp_path):
  out_hlo = pass_output(tmp_path, "shift_1x2x4.before_async", "1x1x8")
  rc, out, err = run(capsys, out_hlo, "--topology=1x1x8", "--format=json")
  assert rc == 0, out + err
  assert checks(out)["nvshmem-team"]["status"] in ("pass", "not_applicable")
  assert '"backend":"NVSHMEM"' not in out_hlo.read_text()


def _nvshmem(text):
  """The module with every permute's config set to NVSHMEM (a hand edit)."""
  assert text.count('"backend":"DEFAULT"') >= 1
  return text.replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"')


def _memory_space_note(capsys, path):
  rc = cli.main(["verify", str(path), "--topology=1x1x8", "--format=json", "--no-hlo-verifier"])
  [check] = [
    c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "memory-space"
  ]
  assert rc == 1  # NVSHMEM by hand fails other checks; the note is what is asked here
  assert check["status"] == "not_applicable"
  return check["note"]


def test_memory_space_note_without_a_buffer_assignment_beside(tmp_path, capsys):
  # An after-optimizations module: it is not "from before buffer assignment".
  path = tmp_path / "ring.txt"
  path.write_text(_nvshmem(RING_MODULE.read_text()))
  note = _memory_space_note(capsys, path)
  assert "before buffer assignment" not in note
  assert note == (
    "no layout in the module names a memory space S(n), so its text does "
    "not say where the NVSHMEM buffers live; no buffer-assignment dump lies "
    "beside it (ring-buffer-assignment.txt)"
  )


def test_memory_space_note_with_the_buffer_assignment_beside(tmp_path, capsys):
  # XLA's own dump of the conditional ring: the module and its buffer assignment.
  work = tmp_path / "gen"
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "scripts" / "gen_config_fixtures.py"),
      "--only=cond_ring_1x1x8",
      f"--out_dir={work}",
      f"--xla_dump_dir={work / 'xla'}",
    ],
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  [module] = (work / "xla" / "cond_ring_1x1x8").glob("*gpu_after_optimizations.txt")
  [assignment] = (work / "xla" / "cond_ring_1x1x8").glob(
    "*gpu_after_optimizations-buffer-assignment.txt"
  )
  path = tmp_path / "cond.txt"
  path.write_text(_nvshmem(module.read_text()))
  shutil.copy(assignment, tmp_path / "cond-buffer-assignment.txt")
  note = _memory_space_note(capsys, path)
  assert note.endswith(
    "the buffer-assignment dump beside it does, and nvshmem-runtime checks their destinations there"
  )


# ---------------------------------------------------------------------------------------
# The checks on one async permute over two partitions, in-process (no driver).

PAIR = """HloModule m, num_partitions=2

ENTRY %main (p: TYPE[16]) -> TYPE[16] {
  %p = TYPE[16]{0} parameter(0)
  %start = (TYPE[16]{0}, TYPE[16]{0}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}CONFIG
  ROOT %done = TYPE[16]{0} collective-permute-done(%start)
}
"""
NVSHMEM = ', backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}'
PEER = (
  ', backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_PEER_MEMORY"}}'
)


def pair(config, element_type="f32", spec="1x1x2:map=0,1", backends=None):
  source = sources.read_text(
    None, PAIR.replace("CONFIG", config).replace("TYPE", element_type), "m.hlo"
  )
  selected = options.load(spec, backends=backends)
  perms = decisions.analyze(source, selected.topology, selected.table, tolerant=True)
  return source, selected, perms


def test_nvshmem_heap_holds_operand_and_result():
  # f32[16]: 64 bytes a buffer, two buffers (operand and result) on the heap.
  _, selected, perms = pair(NVSHMEM)
  assert messages(verify_runtime.check_nvshmem_heap(perms, selected.table)) == [
    ("pass", "NVSHMEM; 64 bytes fit the symmetric heap")
  ]
  small = selection.parse_cost_table("nvshmem_max_bytes: 32\n")
  [(status, message)] = messages(verify_runtime.check_nvshmem_heap(perms, small))
  assert status == "fail" and message.startswith("NVSHMEM: ")
  assert "2 x 64 B, exceed the NVSHMEM symmetric heap (32 B)" in message


def test_an_nvshmem_pair_on_one_host_passes_team_and_runtime():
  source, selected, perms = pair(NVSHMEM)
  assert messages(verify_runtime.check_nvshmem_team(perms, selected.topology, source)) == [
    (
      "pass",
      "NVSHMEM; all 2 devices of the program have a source, so every device reaches the barrier",
    )
  ]
  [(status, message)] = messages(
    verify_runtime.check_nvshmem_runtime(perms, selected.topology, source, selected.table)
  )
  assert status == "pass" and message.startswith("NVSHMEM; element types f32 and every edge")


def test_nvshmem_of_an_element_type_it_does_not_put_fails_runtime():
  # The pinned runtime's NVSHMEM puts F64, F32, F16, BF16, S32, S64, U32, U64: not S8.
  source, selected, perms = pair(NVSHMEM, element_type="s8")
  [(status, message)] = messages(
    verify_runtime.check_nvshmem_runtime(perms, selected.topology, source, selected.table)
  )
  assert status == "fail" and "element type s8" in message


def test_no_nvshmem_permute_leaves_the_nvshmem_checks_nothing():
  source, selected, perms = pair("")
  for check in (
    verify_runtime.check_nvshmem_heap(perms, selected.table),
    verify_runtime.check_nvshmem_team(perms, selected.topology, source),
    verify_runtime.check_nvshmem_runtime(perms, selected.topology, source, selected.table),
    verify_runtime.check_memory_space(perms, source),
  ):
    assert check.status == "not_applicable" and check.note == "no collective-permute uses NVSHMEM"
  peer = verify_runtime.check_peer_safety(perms, source, selected.topology, selected.table)
  assert peer.note == "no collective-permute uses peer or symmetric memory"


def test_memory_space_note_of_a_module_read_from_stdin():
  # No path, so no buffer-assignment dump can lie beside it.
  source, _, perms = pair(NVSHMEM)
  check = verify_runtime.check_memory_space(perms, source)
  assert check.status == "not_applicable"
  assert check.note.endswith("no buffer-assignment dump lies beside it (none for stdin)")


def test_peer_safety_follows_hosts_and_processes():
  # One host, one process of two GPUs (the nccl,peer set's default layout): allowed.
  source, selected, perms = pair(PEER, backends="nccl,peer")
  [(status, message)] = messages(
    verify_runtime.check_peer_safety(perms, source, selected.topology, selected.table)
  )
  assert status == "pass" and message.startswith("peer: the core's safety rule allows it (")
  # Two hosts of one GPU: every edge leaves its host.
  source, selected, perms = pair(PEER, spec="1x2x1:map=0,1", backends="nccl,peer")
  [(status, message)] = messages(
    verify_runtime.check_peer_safety(perms, source, selected.topology, selected.table)
  )
  assert status == "fail" and message.startswith("peer refused: 2 of 2 edges leave their host")
