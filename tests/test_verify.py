"""hlo-tools verify: named checks on fixtures and on the pass's output; failing modules."""

import json
import subprocess
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.model import driver, options
from hlo_tools.ops import explain, verify

from conftest import placed

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
DRIVER = REPO / "build" / "nvshmem-opt"
H200_HLO = (
  REPO / "tests" / "fixtures" / "jax0112" / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
)
# A table where NVSHMEM wins on NVLink at every size (the pass then writes NVSHMEM).
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"
RING = "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}"


def run(capsys, *argv):
  rc = cli.main(["verify", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def checks(out):
  return {c["name"]: c for c in json.loads(out)["checks"]}


def pass_output(tmp_path, fixture, topology, *extra):
  out = tmp_path / f"{fixture}.{topology}.nvshmem.hlo"
  # --annotate: the pass records its decision on each op (verify checks NCCL ones too).
  proc = subprocess.run(
    [
      str(DRIVER),
      str(FIXTURES / f"{fixture}.hlo"),
      f"--topology={topology}",
      "--annotate",
      "-o",
      str(out),
      *extra,
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  return out


@pytest.mark.parametrize(
  "fixture,topology",
  [
    ("ring_1x2x4.before_async", "1x2x4"),
    ("ring_1x2x4.after_optimizations", "1x2x4"),
    ("ring_2x2x4.after_optimizations", "2x2x4"),
    ("ring_bwd_1x2x4.before_async", "1x2x4"),
    ("shift_1x2x4.after_optimizations", "1x2x4"),
    ("ring_1x1x8.after_optimizations", "1x1x8"),
  ],
)
def test_every_fixture_passes_its_checks(capsys, fixture, topology):
  rc, out, err = run(capsys, FIXTURES / f"{fixture}.hlo", f"--topology={topology}", "--format=json")
  assert rc == 0, out + err
  by_name = checks(out)
  assert list(by_name) == list(verify.CHECKS)
  assert by_name["permutation"]["status"] == "pass"
  assert by_name["memory-space"]["status"] == "not_applicable"
  if DRIVER.exists():
    assert by_name["hlo-verifier"]["status"] == "pass"


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


def test_pass_output_passes_for_its_topology(capsys, tmp_path):
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, _ = run(capsys, out_hlo, "--topology=1x1x8", f"--cost-table={FAST_NVSHMEM}")
  assert rc == 0
  assert "PASS nvshmem-heap" in out and "PASS selection" in out
  assert "PASS start-done" in out and "all checks pass" in out


def test_backend_contradicting_topology_fails_selection_and_runtime(capsys, tmp_path):
  # NVSHMEM chosen for one host of 8, then checked against 2 hosts of 4: every
  # device still has a source (no hang), but two edges now cross hosts, where the
  # pinned runtime's receiver does not wait for the put (NVSHMEM_TEAM_SHARED), and
  # the model picks NCCL there.
  out_hlo = pass_output(
    tmp_path, "ring_1x1x8.before_async", "1x1x8", f"--cost-table={FAST_NVSHMEM}"
  )
  rc, out, _ = run(
    capsys, out_hlo, "--topology=1x2x4", f"--cost-table={FAST_NVSHMEM}", "--format=json"
  )
  assert rc == 1
  result = json.loads(out)
  assert result["failed_checks"] == ["nvshmem-runtime", "selection"]
  assert checks(out)["nvshmem-team"]["status"] == "pass"
  rc, out, _ = run(capsys, out_hlo, "--topology=1x2x4", f"--cost-table={FAST_NVSHMEM}")
  assert rc == 1 and "PASS nvshmem-heap" in out
  assert "FAILED: nvshmem-runtime, selection" in out and "2 of 8 edges" in out


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


def edited(tmp_path, source, old, new, name="edited.hlo"):
  text = Path(source).read_text()
  assert old in text
  path = tmp_path / name
  path.write_text(text.replace(old, new))
  return path


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


def test_hlo_verifier_rejection_fails_the_check(capsys, tmp_path):
  # A start whose done has the wrong shape: our reader accepts it, XLA's verifier not.
  path = edited(
    tmp_path,
    FIXTURES / "ring_1x2x4.after_optimizations.hlo",
    "%collective-permute-done = bf16[2,1,128,2,64]{4,3,2,1,0} collective-permute-done(",
    "%collective-permute-done = bf16[2,1,128,2,32]{4,3,2,1,0} collective-permute-done(",
  )
  rc, out, _ = run(capsys, path, "--topology=1x2x4", "--format=json")
  assert rc == 1
  hv = checks(out)["hlo-verifier"]
  assert hv["status"] == "fail" and "HloVerifier rejects" in hv["results"][0]["message"]


def test_bad_input_is_one_line_naming_the_file(capsys, tmp_path):
  text = (FIXTURES / "ring_1x2x4.after_optimizations.hlo").read_text()
  trunc = tmp_path / "truncated.hlo"
  trunc.write_text(text[: len(text) // 3])
  rc, out, err = run(capsys, trunc, "--topology=1x2x4")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert err.startswith(f"{trunc}:")
  rc, _, err = run(capsys, tmp_path / "nope.hlo", "--topology=1x2x4")
  assert rc == 2 and "nope.hlo: cannot read" in err
  broken = edited(
    tmp_path, FIXTURES / "ring_1x2x4.before_async.hlo", RING, "source_target_pairs={{0,1},{1,x}}"
  )
  rc, _, err = run(capsys, broken, "--topology=1x2x4")
  assert rc == 2 and ":368:" in err and "source_target_pairs" in err
  rc, _, err = run(capsys, FIXTURES / "ring_1x2x4.before_async.hlo", "--topology=bogus")
  assert rc == 2 and len(err.strip().splitlines()) == 1


def test_newer_xla_text_passes_the_reader_checks(capsys):
  rc, out, _ = run(capsys, H200_HLO, "--topology=1x1x8", "--format=json")
  by_name = checks(out)
  for name in ("permutation", "start-done", "backend-config"):
    assert by_name[name]["status"] == "pass"
  # The pinned XLA's HloVerifier rejects this newer text's start shape: reported, not hidden.
  assert rc in (0, 1)


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


def test_topology_derived_by_the_driver(capsys, tmp_path):
  """No --topology: the checks run on the topology nvshmem-opt derives from the module."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  rc, out, err = run(capsys, path, "--devices-per-host=4", "--format=json")
  assert rc == 0
  result = json.loads(out)
  assert result["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7" and result["passed"]
  # The picked topology decides every check: said on stderr, as nvshmem-opt says it.
  [line] = err.strip().splitlines()
  assert "no --topology; using 1x2x4" in line
  rc, out, err = run(capsys, path, "--devices-per-host=5")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert "do not fill hosts of 5 GPUs" in err
