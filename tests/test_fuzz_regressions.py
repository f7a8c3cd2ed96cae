"""Every input the fuzzers found (fuzz/regressions/) through the normal tools:
build/nvshmem-opt exits 0, 1 or 2 with one line on stderr and never dies of a
signal; `hlo-tools parse` exits 0 or 2 and never prints a traceback."""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT, run_nvshmem_opt

REGRESSIONS = sorted((ROOT / "fuzz" / "regressions").glob("*.hlo"))
# fuzz/run_fuzz.sh builds into build-fuzz/; NVSHMEM_BUILD_FUZZ names another.
BUILD_FUZZ = pathlib.Path(os.environ.get("NVSHMEM_BUILD_FUZZ", ROOT / "build-fuzz"))


def _assert_clean(result):
  assert result.returncode in (0, 1, 2), (result.returncode, result.stderr)
  if result.returncode != 0:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvshmem-opt: "), result.stderr


@pytest.mark.parametrize("mode", ["rewrite", "annotate", "explain"])
@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_driver_rejects_cleanly(path, mode, tmp_path):
  result = run_nvshmem_opt(path, "--topology=1x2x4", f"--mode={mode}",
                           "-o", tmp_path / "out.hlo")
  _assert_clean(result)
  assert result.returncode == 2, result.stderr  # all of them are malformed
  assert not (tmp_path / "out.hlo").exists()


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_reader_cli_rejects_cleanly(path):
  result = subprocess.run([sys.executable, "-m", "hlo_tools.cli", "parse", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
  assert result.returncode in (0, 2), result.stderr
  assert "Traceback" not in result.stderr
  if result.returncode == 2:
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith(str(path) + ":"), line
    _, lineno, col = line[len(str(path)):].split(":")[:3]
    assert lineno.isdigit() and col.isdigit(), line


@pytest.mark.parametrize("name,check", [
    ("xla_parser_param_number_check.hlo", "Check failed: param_no"),
    ("xla_parser_constant_bool_as_f32.hlo", "F32 is not PRED type"),
    ("xla_parser_tuple_shape_not_tuple.hlo", "Expected a tuple shape. Got f32[2]"),
])
def test_xla_abort_becomes_one_line(name, check):
  path = ROOT / "fuzz/regressions" / name
  result = run_nvshmem_opt(path, "--topology=1x2x4")
  _assert_clean(result)
  assert result.returncode == 2
  assert f"{path}: XLA aborted while parsing the module: " in result.stderr
  assert check in result.stderr and result.stderr.endswith("(the input is malformed)\n")


def test_invalid_layout_is_rejected_not_printed():
  path = ROOT / "fuzz/regressions/invalid_layout_clone_crash.hlo"
  result = run_nvshmem_opt(path, "--topology=1x2x4")
  assert result.returncode == 2
  assert "layout minor_to_major field has duplicate values" in result.stderr


@pytest.mark.parametrize("spec", ["1x2\nx4", "1x2x4:nvl\n8", "1x2x4:map=0,\x01", "\x7f1x2x4"])
def test_topology_error_is_one_line(spec):
  result = run_nvshmem_opt(ROOT / "tests/fixtures/shift_1x2x4.before_async.hlo",
                           f"--topology={spec}")
  _assert_clean(result)
  assert result.returncode == 2
  assert "\\x" in result.stderr


def test_cost_table_error_is_one_line(tmp_path):
  table = tmp_path / "costs.txtpb"
  table.write_bytes(b"margin: 0.1\nlinks { backend: \x01NCCL link_class: NVLINK }\n")
  result = run_nvshmem_opt(ROOT / "tests/fixtures/shift_1x2x4.before_async.hlo",
                           "--topology=1x2x4", f"--cost-table={table}")
  _assert_clean(result)
  assert f"{table}:2:" in result.stderr


def fuzzer(name):
  """A built fuzz harness: scripts/test.sh builds them (fuzz/run_fuzz.sh) before the
  Python tests, so a missing one fails, never skips."""
  path = BUILD_FUZZ / name
  assert path.exists(), f"{path} is not built: run fuzz/run_fuzz.sh (clang++ with libFuzzer)"
  return str(path)


def test_selection_fuzzer_short_run(tmp_path):
  result = subprocess.run([fuzzer("selection_fuzzer"), "-runs=3000", "-seed=1",
                           f"-artifact_prefix={tmp_path}/"],
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr[-2000:]


def test_driver_fuzzer_replays_regressions(tmp_path):
  # Each regression behind config bytes 1 (1x2x4 rewrite) and 17 (1x2x4 explain).
  inputs = []
  for path in REGRESSIONS:
    for byte in (1, 17):
      target = tmp_path / f"{path.stem}.{byte}"
      target.write_bytes(bytes([byte]) + path.read_bytes())
      inputs.append(str(target))
  result = subprocess.run([fuzzer("driver_fuzzer"), "-rss_limit_mb=8192", *inputs],
                          capture_output=True, text=True, timeout=120,
                          env={"ASAN_OPTIONS": "detect_leaks=0", "TF_CPP_MIN_LOG_LEVEL": "3",
                               "PATH": "/usr/bin:/bin"})
  assert result.returncode == 0, result.stderr[-3000:]


def test_driver_fuzzer_survives_stack_overflow(tmp_path):
  # 500 levels pass the driver's nesting limit; on a 256 KiB stack XLA's
  # parser still overflows it. The harness's handler, on its own stack,
  # counts that as a rejected input instead of dying of SIGSEGV.
  import resource
  shape = "(" * 500 + "f32[]" + ")" * 500
  seed = tmp_path / "deep500"
  seed.write_bytes(bytes([1]) + f"HloModule x\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n}}\n".encode())
  limit = 256 * 1024
  result = subprocess.run([fuzzer("driver_fuzzer"), "-rss_limit_mb=8192", str(seed)],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_STACK, (limit, limit)),
                          env={"ASAN_OPTIONS": "detect_leaks=0", "TF_CPP_MIN_LOG_LEVEL": "3",
                               "PATH": "/usr/bin:/bin"})
  assert result.returncode == 0, result.stderr[-3000:]
  assert "driver_fuzzer: 0 inputs" not in result.stderr  # it did overflow
