"""hlo_tools.ops.heuristics.check: `hlo-tools heuristics check-pass`, the real pass's
decisions on compiled JAX programs against the core's sweep rows."""

import pytest

from hlo_tools import cli, selection
from hlo_tools.errors import HeuristicsError
from hlo_tools.ops.heuristics import check


def run_cli(argv, capsys):
  rc = cli.main(["heuristics"] + argv)
  out, err = capsys.readouterr()
  return rc, out, err


def test_program_args_are_f32_arrays_sharded_over_cp():
  # 1 KiB a device is 256 f32; 8 devices hold 2048 of the global array. K and V: two.
  assert check._program_args([("ring", 1024), ("kv", 2048)], 8) == [
    "2048:f32:cp",
    "4096:f32:cp",
    "4096:f32:cp",
  ]
  with pytest.raises(HeuristicsError, match="buffer size 1022 is not a multiple of 4 bytes"):
    check._program_args([("ring", 1022)], 8)


def test_sample_cases_of_one_host_go_past_the_symmetric_heap():
  topology = selection.parse_topology("1x1x8")
  sizes = [size for _, size in check.sample_cases("1x1x8", topology)]
  assert sizes == [4 << 10, 2 << 30, 1 << 20, 256 << 10]  # the 2 GiB ring: over 1 GiB
  other = check.sample_cases("1x2x4", selection.parse_topology("1x2x4"))
  assert other == [("ring", 4 << 10), ("ring", 64 << 20), ("kv", 1 << 20), ("shift", 256 << 10)]


ROW = {
  "chosen_plan": "nvshmem",
  "nccl_us": 20.0,
  "nvshmem_us": 10.0,
  "chosen_us": 10.0,
  "upstream_plan": "nvshmem",
}


def test_a_decision_that_agrees_with_the_core_has_no_problems():
  # nvshmem-opt prints six significant digits: 10.00001 is 10.
  decision = {
    "plan": "nvshmem",
    "modeled_us": {"nccl": 20.0, "nvshmem": 10.00001, "chosen": 10.0},
    "upstream": "NVSHMEM",
  }
  assert check.compare(ROW, decision) == []


def test_each_disagreement_is_named():
  decision = {
    "plan": "nccl",
    "modeled_us": {"nccl": 20.0, "nvshmem": None, "chosen": 20.0},
    "upstream": "DEFAULT",  # upstream's NCCL, as its config says it
  }
  assert check.compare(ROW, decision) == [
    "plan nccl != core nvshmem",
    "nvshmem None us != core 10.0",
    "chosen 20.0 us != core 10.0",
    "upstream assigner DEFAULT on the program != nvshmem on the sweep's module",
  ]


def test_missing_tool_and_bad_jobs_are_refused(tmp_path):
  with pytest.raises(HeuristicsError, match="nvshmem-opt not found"):
    check.run_check(["1x1x8"], nvshmem_opt=str(tmp_path / "no-such-tool"))
  tool = tmp_path / "nvshmem-opt"
  tool.write_text("")
  with pytest.raises(HeuristicsError, match="--jobs must be at least 1"):
    check.run_check(["1x1x8"], nvshmem_opt=str(tool), jobs=0)


# NCCL's NVLink edges slower than its network: NVSHMEM would win on the NVLink
# edges alone, but a permute runs whole on one backend, priced by its slowest
# (network) edge, where NCCL wins, in the pass and in the core alike.
SLOW_NVLINK_TABLE = "links { backend: NCCL link_class: NVLINK latency_us: 20 bandwidth_gbps: 100 per_buffer_us: 0 }\nlinks { backend: NCCL link_class: NETWORK latency_us: 3 bandwidth_gbps: 1000 per_buffer_us: 0 }\n"


@pytest.mark.parametrize("table_text, expect_plan", [(None, "nccl"), (SLOW_NVLINK_TABLE, "nccl")])
def test_check_pass_matches_core(tmp_path, capsys, table_text, expect_plan):
  argv = ["check-pass", "--topology=1x2x4", "--jobs=1"]
  if table_text:
    (tmp_path / "t.txt").write_text(table_text)
    argv.append(f"--cost-table={tmp_path / 't.txt'}")
  rc, out, err = run_cli(argv, capsys)
  assert rc == 0, out + err
  assert out.strip().splitlines()[-1] == "check-pass: 4 of 4 cases match the core"
  assert f": {expect_plan} " in out
