"""hlo_tools.ops.verify_structure: the permutation, start-done, backend-config and
start-done-agree checks, on fixtures edited by hand and on small modules."""

from hlo_tools.model import decisions, options, sources
from hlo_tools.ops import verify_structure

from conftest import FIXTURES
from verify_cli import checks, edited, messages, run

H200_HLO = FIXTURES / "jax0112" / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
RING = "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}"


def test_id_outside_the_program_fails_permutation(capsys, tmp_path):
  path = edited(
    tmp_path,
    FIXTURES / "ring_1x2x4.before_async.hlo",
    RING,
    "source_target_pairs={{0,1},{1,2},{2,9}}",
  )
  rc, out, _ = run(capsys, path, "--topology=1x2x4", "--format=json", "--no-hlo-verifier")
  assert rc == 1
  [r] = checks(out)["permutation"]["results"]
  assert r["status"] == "fail" and r["line"] == 368
  assert "target 9 outside 0..7" in r["message"]
  # A repeated target is malformed HLO (XLA's verifier rejects it): the reader stops.
  path = edited(
    tmp_path,
    FIXTURES / "ring_1x2x4.before_async.hlo",
    RING,
    "source_target_pairs={{0,1},{1,1}}",
    name="repeated.hlo",
  )
  rc, out, err = run(capsys, path, "--topology=1x2x4", "--no-hlo-verifier")
  assert rc == 2 and out == "" and "repeated.hlo:368:" in err


def test_unknown_backend_fails_backend_config(capsys, tmp_path):
  path = edited(
    tmp_path,
    FIXTURES / "ring_1x2x4.after_optimizations.hlo",
    '"backend":"DEFAULT"',
    '"backend":"MAGIC"',
  )
  rc, out, _ = run(capsys, path, "--topology=1x2x4", "--format=json", "--no-hlo-verifier")
  assert rc == 1
  assert "backend 'MAGIC'" in checks(out)["backend-config"]["results"][0]["message"]


def test_second_user_of_start_fails_start_done(capsys, tmp_path):
  src = FIXTURES / "ring_1x2x4.after_optimizations.hlo"
  text = src.read_text()
  done = next(l for l in text.splitlines() if "%collective-permute-done = bf16[2,1,128,2,64]" in l)
  extra = done.replace("%collective-permute-done =", "%collective-permute-done.extra =")
  path = tmp_path / "two_dones.hlo"
  path.write_text(text.replace(done, done + "\n" + extra))
  rc, out, _ = run(capsys, path, "--topology=1x2x4", "--format=json", "--no-hlo-verifier")
  assert rc == 1
  [r] = checks(out)["start-done"]["results"]
  assert r["status"] == "fail" and "2 collective-permute-dones" in r["message"]


def test_newer_xla_text_passes_the_reader_checks(capsys):
  rc, out, _ = run(capsys, H200_HLO, "--topology=1x1x8", "--format=json")
  by_name = checks(out)
  for name in ("permutation", "start-done", "backend-config"):
    assert by_name[name]["status"] == "pass"
  # The pinned XLA's HloVerifier rejects this newer text's start shape: reported, not hidden.
  assert rc in (0, 1)


# ---------------------------------------------------------------------------------------
# The checks on small modules, in-process (no driver).

# One async permute over two partitions; START and DONE: what each op carries after its
# operands.
PAIR = """HloModule m, num_partitions=2

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  %start = (f32[16]{0}, f32[16]{0}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}START
  ROOT %done = f32[16]{0} collective-permute-done(%start)DONE
}
"""


def analyzed(text):
  source = sources.read_text(None, text, "m.hlo")
  selected = options.load("1x1x2")
  return source, decisions.analyze(source, selected.topology, selected.table, tolerant=True)


def pair(start="", done=""):
  return analyzed(PAIR.replace("START", start).replace("DONE", done))


def test_a_plain_pair_passes_every_structural_check():
  source, perms = pair()
  assert messages(verify_structure.check_permutation(perms, source)) == [
    ("pass", "2 pairs, a permutation of 2 partitions")
  ]
  assert messages(verify_structure.check_start_done(source.module)) == [
    ("pass", "one collective-permute-done %done (line 6)")
  ]
  assert messages(verify_structure.check_backend_config(perms)) == [
    ("pass", "backend DEFAULT (no backend_config)")
  ]
  assert messages(verify_structure.check_start_done_agree(perms, source.module)) == [
    ("pass", "the done %done agrees")
  ]


def test_cross_replica_ids_are_bounded_by_the_replicas():
  # No channel_id: the ids are replicas, not partitions.
  text = """HloModule m, replica_count=2

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  ROOT %cp = f32[16]{0} collective-permute(%p), source_target_pairs={{0,1},{1,2}}
}
"""
  source, perms = analyzed(text)
  [result] = verify_structure.check_permutation(perms, source).results
  assert result["status"] == "fail" and result["instruction"] == "cp"
  assert result["message"] == "target 2 outside 0..1 (2 replicas)"


def test_a_sync_permute_has_no_done_to_check():
  text = PAIR.replace("START", "").replace("DONE", "")
  text = text.split("  %start")[0] + (
    "  ROOT %cp = f32[16]{0} collective-permute(%p), channel_id=1, "
    "source_target_pairs={{0,1},{1,0}}\n}\n"
  )
  source, perms = analyzed(text)
  assert verify_structure.check_start_done(source.module).status == "not_applicable"
  agree = verify_structure.check_start_done_agree(perms, source.module)
  assert agree.status == "not_applicable" and agree.note == "no collective-permute with a done op"


def test_a_start_read_by_another_op_fails_start_done():
  source, _ = analyzed(
    PAIR.replace("START", "")
    .replace("DONE", "")
    .replace("  ROOT %done", "  %gte = f32[16]{0} get-tuple-element(%start), index=0\n  ROOT %done")
  )
  assert messages(verify_structure.check_start_done(source.module)) == [
    ("fail", "also used by %gte (get-tuple-element, line 6)")
  ]


def test_nvshmem_with_a_collectives_mode_is_two_backends():
  _, perms = pair(
    ', backend_config={"collective_backend_config":{"backend":"NVSHMEM",'
    '"collectives_mode":"COLLECTIVES_PEER_MEMORY"}}'
  )
  assert messages(verify_structure.check_backend_config(perms)) == [
    ("fail", "backend NVSHMEM with collectives_mode COLLECTIVES_PEER_MEMORY: two backends at once")
  ]


def test_unknown_mode_non_boolean_flag_and_unknown_plan_each_fail():
  _, perms = pair(
    ', backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_BOGUS",'
    '"is_sync":"yes"}}, frontend_attributes={_nvshmem_plan="magic"}'
  )
  [(status, message)] = messages(verify_structure.check_backend_config(perms))
  assert status == "fail"
  assert message.split("; ") == [
    "collectives_mode 'COLLECTIVES_BOGUS' is not one of COLLECTIVES_MODE_INVALID, "
    "COLLECTIVES_PEER_MEMORY, COLLECTIVES_SYMMETRIC_MEMORY, COLLECTIVES_PRIVATE_MEMORY",
    "is_sync is 'yes', not a boolean",
    "_nvshmem_plan 'magic' is not one of nccl, nvshmem, peer, symmetric",
  ]


def test_a_done_whose_config_differs_from_its_start_fails_agree():
  source, perms = pair(
    ', backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}',
    ', backend_config={"collective_backend_config":{"backend":"DEFAULT"}}',
  )
  [(status, message)] = messages(verify_structure.check_start_done_agree(perms, source.module))
  assert status == "fail"
  assert message.startswith("backend_config: the start says ('NVSHMEM', ")
  assert "the done %done (line 6) ('DEFAULT', " in message


def test_known_backends_are_xlas_two():
  # XLA's CollectiveBackendConfig.backend: DEFAULT (NCCL) or NVSHMEM.
  assert set(verify_structure.KNOWN_BACKENDS) == {"DEFAULT", "NVSHMEM"}
