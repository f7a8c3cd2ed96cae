"""Every input the fuzzers found (tests/fuzz/regressions/) through the normal tools:
build/nvshmem-opt exits 0 (the valid ones) or 2 with one line on stderr, never 1 (a
bug) and never dies of a signal; `hlo-tools parse` exits 0 or 2 and never prints a
traceback. The harness reads the same files as they are (its configuration in a
leading comment that XLA and the driver skip)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_nvshmem_opt

REGRESSIONS = sorted((ROOT / "tests" / "fuzz" / "regressions").glob("*.hlo"))
# tests/fuzz/run_fuzz.sh builds into build-fuzz/; NVSHMEM_BUILD_FUZZ names another.
BUILD_FUZZ = pathlib.Path(os.environ.get("NVSHMEM_BUILD_FUZZ", ROOT / "build-fuzz"))


def _assert_clean(result):
  assert result.returncode in (0, 1, 2), (result.returncode, result.stderr)
  if result.returncode != 0:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvshmem-opt: "), result.stderr


# Valid modules the splicer once mangled; every other regression is malformed.
VALID = {"driver_splice_frontend_json.hlo", "driver_splice_repeated_names.hlo"}
MODES = ["rewrite", "annotate", "explain"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_driver_rejects_cleanly(path, mode, tmp_path):
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(
    path, "--topology=1x2x4", f"--mode={mode}", *(["-o", out] if mode != "explain" else [])
  )
  _assert_clean(result)
  if path.name in VALID:
    assert result.returncode == 0, result.stderr
  else:
    assert result.returncode == 2, result.stderr
    assert not out.exists()


SPLICE_INVALID = ROOT / "tests/fuzz/regressions/driver_splice_invalid.hlo"


@pytest.mark.parametrize("mode", MODES)
def test_permute_backend_config_that_is_not_json_is_named_at_its_line(mode):
  # driver_fuzzer: `"backend"):"DEFAULT"` in a permute's backend_config. XLA's parser
  # takes any brace-balanced text there; the splicer then counted the ')' and cut the
  # statement wrong ("the spliced output does not verify (a bug)", exit 1). Now the
  # input is refused, in every mode, at the statement's line.
  result = run_nvshmem_opt(SPLICE_INVALID, "--topology=1x2x4:nvl8", f"--mode={mode}")
  _assert_clean(result)
  assert result.returncode == 2
  assert re.fullmatch(
    rf"nvshmem-opt: {re.escape(str(SPLICE_INVALID))}:64: collective-permute-start: "
    r"backend_config is not valid JSON: '\)' at character \d+ of it\n",
    result.stderr,
  ), result.stderr


def test_file_that_does_not_start_with_hlomodule_says_what_is_before_it(tmp_path):
  # The fuzzer's input as the old harness took it: a configuration byte (0x0b), then
  # the module. The driver called it "neither HLO text nor a serialized
  # HloModuleProto"; it now says what stands before 'HloModule', where.
  text = SPLICE_INVALID.read_bytes()
  old_form = tmp_path / "crash-old-harness"
  old_form.write_bytes(b"\x0b" + text[text.index(b"HloModule") :])
  result = run_nvshmem_opt(old_form, "--topology=1x2x4")
  _assert_clean(result)
  assert result.returncode == 2
  assert result.stderr.startswith(f"nvshmem-opt: {old_form}:1:1: byte 0x0b before 'HloModule'"), (
    result.stderr
  )


@pytest.mark.parametrize("mode", ["rewrite", "annotate"])
def test_splice_steps_over_brackets_in_json_dicts(mode, tmp_path):
  # A frontend attribute's {...} value is a JSON dict to XLA's lexer, whatever
  # brackets it holds: the splicer took its ')' for a bracket and cut the
  # permute's statement short (exit 1 before the fix).
  path = ROOT / "tests/fuzz/regressions/driver_splice_frontend_json.hlo"
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(path, "--topology=1x2x4", f"--mode={mode}", "-o", out)
  assert result.returncode == 0, result.stderr
  before, after = path.read_text().splitlines(), out.read_text().splitlines()
  permute = next(i for i, line in enumerate(before) if "collective-permute(" in line)
  grown = len(after) - len(before)  # rewrite: a start and a done for the permute
  assert before[:permute] == after[:permute]
  assert before[permute + 1 :] == after[permute + 1 + grown :]
  again = run_nvshmem_opt(out, "--topology=1x2x4", f"--mode={mode}", "--report=-")
  assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_reader_cli_rejects_cleanly(path):
  result = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "parse", str(path)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=60,
  )
  assert result.returncode in (0, 2), result.stderr
  assert "Traceback" not in result.stderr
  if result.returncode == 2:
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith(str(path) + ":"), line
    _, lineno, col = line[len(str(path)) :].split(":")[:3]
    assert lineno.isdigit() and col.isdigit(), line


@pytest.mark.parametrize(
  "name,check",
  [
    ("xla_parser_param_number_check.hlo", "Check failed: param_no"),
    ("xla_parser_constant_bool_as_f32.hlo", "F32 is not PRED type"),
    ("xla_parser_tuple_shape_not_tuple.hlo", "Expected a tuple shape. Got f32[2]"),
  ],
)
def test_xla_abort_becomes_one_line(name, check):
  path = ROOT / "tests/fuzz/regressions" / name
  result = run_nvshmem_opt(path, "--topology=1x2x4")
  _assert_clean(result)
  assert result.returncode == 2
  assert f"{path}: XLA aborted while parsing the module: " in result.stderr
  assert check in result.stderr and result.stderr.endswith("(the input is malformed)\n")


def test_invalid_layout_is_rejected_not_printed():
  path = ROOT / "tests/fuzz/regressions/invalid_layout_clone_crash.hlo"
  result = run_nvshmem_opt(path, "--topology=1x2x4")
  assert result.returncode == 2
  assert "layout minor_to_major field has duplicate values" in result.stderr


@pytest.mark.parametrize("spec", ["1x2\nx4", "1x2x4:nvl\n8", "1x2x4:map=0,\x01", "\x7f1x2x4"])
def test_topology_error_is_one_line(spec):
  result = run_nvshmem_opt(
    ROOT / "tests/fixtures/shift_1x2x4.before_async.hlo", f"--topology={spec}"
  )
  _assert_clean(result)
  assert result.returncode == 2
  assert "\\x" in result.stderr


def test_cost_table_error_is_one_line(tmp_path):
  table = tmp_path / "costs.txtpb"
  table.write_bytes(b"margin: 0.1\nlinks { backend: \x01NCCL link_class: NVLINK }\n")
  result = run_nvshmem_opt(
    ROOT / "tests/fixtures/shift_1x2x4.before_async.hlo",
    "--topology=1x2x4",
    f"--cost-table={table}",
  )
  _assert_clean(result)
  assert f"{table}:2:" in result.stderr


def fuzzer(name):
  """A built fuzz harness: scripts/setup.sh --long builds them (tests/fuzz/run_fuzz.sh)
  before scripts/test_long.sh's Python tests, so a missing one fails, never skips."""
  path = BUILD_FUZZ / name
  assert path.exists(), f"{path} is not built: run tests/fuzz/run_fuzz.sh (clang++ with libFuzzer)"
  return str(path)


@pytest.mark.long
@pytest.mark.skipif(
  os.environ.get("NVSHMEM_FUZZED") == "1",
  reason="scripts/test_long.sh ran this fuzzer 10,000 times at this seed",
)
def test_selection_fuzzer_short_run(tmp_path):
  result = subprocess.run(
    [fuzzer("selection_fuzzer"), "-runs=3000", "-seed=1", f"-artifact_prefix={tmp_path}/"],
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.long
def test_driver_fuzzer_replays_regressions(tmp_path):
  # Each regression as it is (its own comment's configuration, else 1x2x4 rewrite)
  # and under 1x2x4 explain and annotate.
  inputs = [str(path) for path in REGRESSIONS]
  for path in REGRESSIONS:
    for mode in ("explain", "annotate"):
      target = tmp_path / f"{path.stem}.{mode}"
      target.write_bytes(
        f"/* driver_fuzzer --topology=1x2x4 --mode={mode} */\n".encode() + path.read_bytes()
      )
      inputs.append(str(target))
  result = subprocess.run(
    [fuzzer("driver_fuzzer"), "-rss_limit_mb=8192", *inputs],
    capture_output=True,
    text=True,
    timeout=120,
    env={"ASAN_OPTIONS": "detect_leaks=0", "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
  )
  assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.long
def test_driver_fuzzer_survives_stack_overflow(tmp_path):
  # 500 levels pass the driver's nesting limit; on a 256 KiB stack XLA's
  # parser still overflows it. The harness's handler, on its own stack,
  # counts that as a rejected input instead of dying of SIGSEGV.
  import resource

  shape = "(" * 500 + "f32[]" + ")" * 500
  seed = tmp_path / "deep500"
  seed.write_bytes(f"HloModule x\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n}}\n".encode())
  limit = 256 * 1024
  result = subprocess.run(
    [fuzzer("driver_fuzzer"), "-rss_limit_mb=8192", str(seed)],
    capture_output=True,
    text=True,
    timeout=120,
    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_STACK, (limit, limit)),
    env={"ASAN_OPTIONS": "detect_leaks=0", "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "driver_fuzzer: 0 inputs" not in result.stderr  # it did overflow
