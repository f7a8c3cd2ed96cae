"""hlo_tools.ops.verify_choice: the backend-set, user-mark, selection and permute-mode
checks, on the pass's output and on small modules."""

from hlo_tools.model import decisions, options, sources
from hlo_tools.ops import explain, verify_choice

from conftest import FIXTURES
from verify_cli import checks, messages, pass_output, run

# A table where NVSHMEM wins on NVLink at every size (the pass then writes NVSHMEM).
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"


def test_unannotated_default_is_skipped_not_failed(capsys):
  # XLA left DEFAULT; the core would pick NVSHMEM on one host, but the pass never ran.
  rc, out, _ = run(
    capsys,
    FIXTURES / "ring_1x1x8.after_optimizations.hlo",
    "--topology=1x1x8",
    f"--cost-table={FAST_NVSHMEM}",
    "--format=json",
  )
  assert rc == 0
  sel = checks(out)["selection"]
  assert sel["status"] == "skip" and "would choose nvshmem" in sel["results"][0]["message"]


def test_no_split_where_nvlink_is_slow(capsys, tmp_path):
  # NCCL over NVLink slow: the pass keeps the permute whole on NCCL (an NVSHMEM
  # part would hang), and verify agrees with either table.
  table = tmp_path / "slow_nccl_nvlink.cost"
  table.write_text(
    "links { backend: NCCL link_class: NVLINK latency_us: 30 bandwidth_gbps: 450 per_buffer_us: 0 }\n"
  )
  out_hlo = pass_output(tmp_path, "ring_1x2x4.before_async", "1x2x4", f"--cost-table={table}")
  for extra in ([f"--cost-table={table}"], []):
    rc, out, _ = run(capsys, out_hlo, "--topology=1x2x4", *extra, "--format=json")
    assert rc == 0
    sel = checks(out)["selection"]
    assert [r["status"] for r in sel["results"]] == ["pass"]


def test_scheduled_module_with_slow_nccl_nvlink(capsys, tmp_path):
  # A scheduled module with a table where NCCL's NVLink edges are slow: the pass keeps
  # the mixed ring on NCCL, and verify passes its own output with the same table.
  table = tmp_path / "slow_nvlink.tbl"
  table.write_text(
    "links { backend: NCCL link_class: NVLINK latency_us: 6 bandwidth_gbps: 20 per_buffer_us: 0 }\nlinks { backend: NCCL link_class: NVLINK_DOMAIN latency_us: 6 bandwidth_gbps: 20 per_buffer_us: 0 }\n"
  )
  out_hlo = pass_output(
    tmp_path, "ring_1x2x4.after_optimizations", "1x2x4", f"--cost-table={table}"
  )
  rc, out, err = run(capsys, out_hlo, "--topology=1x2x4", f"--cost-table={table}", "--format=json")
  assert rc == 0, out + err
  assert checks(out)["selection"]["status"] == "pass"
  result = explain.explain(str(out_hlo), options.load("1x2x4", str(table)), use_driver=False)
  [e] = result["collectives"]
  assert e["choice"]["plan"] == "nccl" and e["recorded"]["plan"] == "nccl"


# ---------------------------------------------------------------------------------------
# The checks on one async permute over two partitions, in-process (no driver). START:
# what the start carries after its operands.

PAIR = """HloModule m, num_partitions=2

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  %start = (f32[16]{0}, f32[16]{0}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}START
  ROOT %done = f32[16]{0} collective-permute-done(%start)
}
"""
NVSHMEM = ', backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}'
PEER = (
  ', backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_PEER_MEMORY"}}'
)
SYMMETRIC = ', backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_SYMMETRIC_MEMORY"}}'
STOCK_DEFAULT = "COLLECTIVES_PRIVATE_MEMORY, XLA's default (no module config beside the file)"


def pair(start="", spec="1x1x2"):
  source = sources.read_text(None, PAIR.replace("START", start), "m.hlo")
  selected = options.load(spec)
  return source, decisions.analyze(source, selected.topology, selected.table, tolerant=True)


def test_backend_set_lists_only_ops_off_nccl():
  _, perms = pair()
  check = verify_choice.check_backend_set(perms, ("nccl", "nvshmem"))
  assert check.status == "not_applicable"
  assert check.note == "every collective-permute runs NCCL, which every set contains"
  _, perms = pair(PEER)
  assert messages(verify_choice.check_backend_set(perms, ("nccl", "peer"))) == [
    ("pass", "DEFAULT, COLLECTIVES_PEER_MEMORY: peer, in the set nccl,peer")
  ]
  _, perms = pair(NVSHMEM)
  assert messages(verify_choice.check_backend_set(perms, ("nccl", "peer"))) == [
    ("fail", "NVSHMEM selects nvshmem, which the backend set nccl,peer does not contain")
  ]


def test_user_mark_kept_by_its_mode():
  _, perms = pair(PEER + ', frontend_attributes={_xla_collectives_mode="peer"}')
  assert messages(verify_choice.check_user_mark(perms, per_op_xla=True)) == [
    ("pass", "marked 'peer'; backend DEFAULT, COLLECTIVES_PEER_MEMORY keeps it")
  ]
  # A stock XLA compiled with the peer flag runs it too.
  flag = ("COLLECTIVES_PEER_MEMORY", "m.config.pbtxt")
  assert verify_choice.check_user_mark(perms, per_op_xla=False, flag=flag).status == "pass"
  _, unmarked = pair()
  assert (
    verify_choice.check_user_mark(unmarked).note == "no collective-permute carries a user's mark"
  )


def test_user_mark_on_another_backend_and_on_a_stock_xla_fails():
  _, perms = pair(NVSHMEM + ', frontend_attributes={_xla_collectives_mode="peer"}')
  assert messages(verify_choice.check_user_mark(perms, per_op_xla=True)) == [
    ("fail", "marked 'peer', but backend NVSHMEM runs nvshmem, not peer")
  ]
  # A stock XLA reads no mark: it runs its flag's mode, XLA's default private here.
  [(status, message)] = messages(verify_choice.check_user_mark(perms, per_op_xla=False))
  assert status == "fail"
  assert message.split("; ")[1] == (
    "marked 'peer', but a stock XLA reads no mark: it runs the flag's mode, "
    f"{STOCK_DEFAULT}, not COLLECTIVES_PEER_MEMORY"
  )


def test_a_changed_user_mark_fails():
  given, _ = pair(PEER + ', frontend_attributes={_xla_collectives_mode="peer"}')
  _, perms = pair(SYMMETRIC + ', frontend_attributes={_xla_collectives_mode="symmetric"}')
  assert messages(verify_choice.check_user_mark(perms, given=given, per_op_xla=True)) == [
    (
      "fail",
      "the user marked it _xla_collectives_mode=\"peer\", and it now says 'symmetric': "
      "no tool may change a user's mark",
    )
  ]


def test_selection_on_a_stock_xla_leaves_the_mode_to_the_program():
  # The core's decision set by hand: peer, which a stock XLA runs only as the
  # program's flag, so the op written as NCCL passes there and fails on the series.
  _, perms = pair(', frontend_attributes={_nvshmem_plan="peer"}')
  perms[0].decision = {"plan": "peer", "reason": "fast"}
  assert messages(verify_choice.check_selection(perms, "1x1x2", per_op_xla=False)) == [
    (
      "pass",
      "peer -> DEFAULT: a stock XLA runs the program's one mode, not an op's, so the "
      "core's peer is the program's to set: fast",
    )
  ]
  assert messages(verify_choice.check_selection(perms, "1x1x2", per_op_xla=True)) == [
    (
      "fail",
      "backend DEFAULT (nccl), the core decides peer -> DEFAULT, COLLECTIVES_PEER_MEMORY "
      "on 1x1x2: fast",
    )
  ]


def test_selection_fails_a_recorded_plan_or_no_decision():
  _, perms = pair(', frontend_attributes={_nvshmem_plan="nvshmem"}')
  perms[0].decision = {"plan": "nccl", "reason": "slow"}
  assert messages(verify_choice.check_selection(perms, "1x1x2")) == [
    ("fail", "_nvshmem_plan says nvshmem, the core decides nccl")
  ]
  perms[0].decision, perms[0].error = None, "bad edges"
  assert messages(verify_choice.check_selection(perms, "1x1x2")) == [
    ("fail", "the core cannot decide on 1x1x2: bad edges")
  ]


def test_nvshmem_across_two_hosts_fails_selection():
  # Two hosts of one GPU: the core refuses NVSHMEM there and decides NCCL.
  _, perms = pair(NVSHMEM, "1x2x1")
  [(status, message)] = messages(verify_choice.check_selection(perms, "1x2x1"))
  assert status == "fail"
  assert message.startswith(
    "backend NVSHMEM (nvshmem), the core decides nccl -> DEFAULT on 1x2x1: "
  )


def test_permute_mode_on_a_stock_xla_is_the_flags():
  source, perms = pair(PEER)
  [(status, message)] = messages(verify_choice.check_permute_mode(perms, source))
  assert status == "fail"
  assert message.startswith(
    "collectives_mode COLLECTIVES_PEER_MEMORY on the op, but a stock XLA's thunk runs "
    f"the flag's mode, {STOCK_DEFAULT} ("
  )
  # The series' XLA runs the op's own mode.
  assert messages(verify_choice.check_permute_mode(perms, source, per_op_xla=True)) == [
    ("pass", "collectives_mode COLLECTIVES_PEER_MEMORY: its thunk runs COLLECTIVES_PEER_MEMORY")
  ]
  # Compiled with the peer flag (the driver's JSON says so): the op's mode is the flag's.
  report = {"collective_permute_mode": "COLLECTIVES_PEER_MEMORY", "module_config": "m.config.pbtxt"}
  assert messages(verify_choice.check_permute_mode(perms, source, report=report)) == [
    (
      "pass",
      "collectives_mode COLLECTIVES_PEER_MEMORY: its thunk runs COLLECTIVES_PEER_MEMORY, "
      "the flag's COLLECTIVES_PEER_MEMORY (m.config.pbtxt)",
    )
  ]


def test_symmetric_mode_on_a_stock_xla_says_its_buffers_moved():
  source, perms = pair(SYMMETRIC)
  [(status, message)] = messages(verify_choice.check_permute_mode(perms, source))
  assert status == "fail"
  assert "; the op's buffers were placed in the collective memory for it: " in message
  source, perms = pair()
  check = verify_choice.check_permute_mode(perms, source)
  assert check.note == "no collective-permute carries its own collectives_mode"
