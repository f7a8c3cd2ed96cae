"""Side inputs read as the main one is, under a real cap; names that are not UTF-8;
a module XLA cannot load; the hint for a dump without its passes.

The bad-input matrix (test_bad_input_matrix.py) runs each case in a fork of the test
process; here each command is its own program, imports included, as a user runs it.
"""

import os
import resource
import shutil
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, NVSHMEM_OPT, ROOT

MODULE = FIXTURES / "shift_1x1x2.before_async.hlo"
CAP_BYTES = 2_000_000 * 1024  # `ulimit -v 2000000`
HLO_TOOLS = [sys.executable, "-m", "hlo_tools.cli"]
NAME = os.fsdecode(b"bad\xff\xfename")  # a file name that is not UTF-8
ESCAPED = "bad\\xff\\xfename"


def _capped():
  resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def _run(cmd, cwd=ROOT, cap=False, timeout=120):
  start = time.monotonic()
  proc = subprocess.run(
    cmd,
    capture_output=True,
    cwd=cwd,
    timeout=timeout,
    preexec_fn=_capped if cap else None,
  )
  return proc, time.monotonic() - start


# Every command that takes a cost table, with the table's flag last.
TABLE_TAKERS = {
  "explain": HLO_TOOLS + ["explain", str(MODULE), "--topology=1x1x2", "--cost-table"],
  "verify": HLO_TOOLS + ["verify", str(MODULE), "--topology=1x1x2", "--cost-table"],
  "report": HLO_TOOLS + ["report", str(MODULE), "--topology=1x1x2", "--quiet", "--cost-table"],
  "heuristics sweep": HLO_TOOLS + ["heuristics", "sweep", "--no-plots", "--cost-table"],
  "heuristics check-pass": HLO_TOOLS + ["heuristics", "check-pass", "--cost-table"],
  "heuristics calibrate": HLO_TOOLS + ["heuristics", "calibrate", "{csv}", "--base-table"],
  "nvshmem-opt": [str(NVSHMEM_OPT), str(MODULE), "--topology=1x1x2", "--cost-table"],
}


@pytest.mark.parametrize("name", sorted(TABLE_TAKERS))
def test_table_from_dev_zero_under_a_2gb_cap(name, tmp_path):
  # A table read without a bound grew until the kernel killed the machine's jobs.
  # Under 2 GB of address space, with the default limits, each command refuses
  # /dev/zero in one line within 5 s.
  if name == "nvshmem-opt" and not NVSHMEM_OPT.exists():
    pytest.skip("nvshmem-opt is not built")
  csv = tmp_path / "m.csv"
  csv.write_text("backend,link_class,bytes,seconds\nnccl,nvlink,1024,1e-5\n")
  cmd = [a.format(csv=csv) for a in TABLE_TAKERS[name]]
  cmd[-1] += "=/dev/zero"
  if "report" in name or "sweep" in name:
    cmd.append(f"--out={tmp_path / 'out'}")
  proc, took = _run(cmd, cwd=tmp_path, cap=True)
  lines = proc.stderr.decode(errors="replace").strip().splitlines()
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert len(lines) == 1 and "/dev/zero" in lines[0] and "limit" in lines[0], lines
  assert took < 5, took


def _good_inputs(directory):
  """A module, its config, a measurement CSV and an XLA dump folder, each under a
  name that is not UTF-8."""
  module = directory / (NAME + ".hlo")
  shutil.copyfile(MODULE, module)
  shutil.copyfile(
    FIXTURES / "shift_1x1x2.before_async.config.pbtxt", directory / (NAME + ".config.pbtxt")
  )
  csv = directory / (NAME + ".csv")
  csv.write_text(
    "backend,link_class,bytes,seconds\n"
    + "".join(f"nccl,nvlink,{4**k},{10e-6 + 4**k / 200e9:.9g}\n" for k in range(5, 14))
  )
  folder = directory / (NAME + "_xla")
  folder.mkdir()
  shutil.copyfile(MODULE, folder / "module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt")
  return module, csv, folder


def test_every_command_reads_and_names_a_file_whose_name_is_not_utf8(tmp_path):
  # Each reads the file, says its name with the bytes escaped (\xff), and writes
  # its output beside it; the report's page holds the escaped name as UTF-8.
  module, csv, folder = _good_inputs(tmp_path)
  table = tmp_path / (NAME + ".cost")
  shutil.copyfile(FIXTURES / "fast_nvshmem.cost", table)
  out = tmp_path / (NAME + ".out")
  runs = {
    "parse": HLO_TOOLS + ["parse", str(module), "--json"],
    "explain": HLO_TOOLS
    + ["explain", str(module), "--topology=1x1x2", f"--out={out}.explain", f"--cost-table={table}"],
    "verify": HLO_TOOLS + ["verify", str(module), "--topology=1x1x2", f"--out={out}.verify"],
    "diff": HLO_TOOLS + ["diff", str(module), str(MODULE), f"--out={out}.diff", "--format=json"],
    "report": HLO_TOOLS
    + ["report", str(module), "--topology=1x1x2", "--quiet", f"--out={out}.report"],
    "calibrate": HLO_TOOLS + ["heuristics", "calibrate", str(csv), f"--out={out}.table"],
    "dump": HLO_TOOLS + ["dump", str(folder), f"--out={out}.dump", "--quiet"],
  }
  for name, cmd in runs.items():
    proc, _ = _run(cmd, cwd=tmp_path)
    assert proc.returncode == 0, (name, proc.stderr[-2000:])
    assert b"Traceback" not in proc.stderr, name
  assert ESCAPED in (tmp_path / (NAME + ".out.explain")).read_text(encoding="utf-8")
  assert ESCAPED in (tmp_path / (NAME + ".out.verify")).read_text(encoding="utf-8")
  assert (tmp_path / (NAME + ".out.diff")).read_text(encoding="utf-8")
  page = (tmp_path / (NAME + ".out.report") / "index.html").read_text(encoding="utf-8")
  assert ESCAPED in page
  assert "# Measurements: " + ESCAPED + ".csv" in (tmp_path / (NAME + ".out.table")).read_text(
    encoding="utf-8"
  )
  assert (tmp_path / (NAME + ".out.dump") / "manifest.json").exists()
  # stdout under a locale whose encoding is strict: escaped, not a UnicodeEncodeError.
  env = dict(os.environ, LC_ALL="en_US.UTF-8", LANG="en_US.UTF-8", PYTHONIOENCODING="utf-8")
  proc = subprocess.run(
    HLO_TOOLS + ["explain", str(module), "--topology=1x1x2"],
    capture_output=True,
    cwd=ROOT,
    env=env,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert ESCAPED.encode() in proc.stdout
  if NVSHMEM_OPT.exists():
    proc, _ = _run([str(NVSHMEM_OPT), str(module), "--topology=1x1x2", "-o", f"{out}.nvshmem.hlo"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / (NAME + ".out.nvshmem.hlo")).exists()


def test_an_error_names_a_non_utf8_file_escaped(tmp_path):
  bad = tmp_path / (NAME + ".hlo")
  bad.write_bytes(b"HloModule m\n\nENTRY %e {\n  ROOT %x = f32[4]{0} nosuchop()\n}\n")
  proc, _ = _run(HLO_TOOLS + ["explain", str(bad), "--topology=1x1x2"])
  lines = proc.stderr.decode("utf-8").strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1 and ESCAPED in lines[0], lines


def test_verify_exits_2_on_a_module_xla_cannot_load(tmp_path):
  # The tools' reader takes an attribute it does not interpret; XLA's parser refuses
  # it. verify used to skip its HloVerifier check and print "all checks pass".
  if not NVSHMEM_OPT.exists():
    pytest.skip("nvshmem-opt is not built")
  text = MODULE.read_text().replace(
    "channel_id=1, source_target_pairs", "no_such_attribute=3, channel_id=1, source_target_pairs", 1
  )
  assert "no_such_attribute" in text
  bad = tmp_path / "unloadable.hlo"
  bad.write_text(text)
  proc, _ = _run(HLO_TOOLS + ["verify", str(bad), "--topology=1x1x2"])
  err = proc.stderr.decode()
  assert proc.returncode == 2, (proc.stdout[-2000:], err)
  assert len(err.strip().splitlines()) == 1 and "no_such_attribute" in err, err
  assert b"all checks pass" not in proc.stdout


@pytest.mark.parametrize(
  "dims",
  ["1,128,2,99999999999999999999", "1,128,2,999999999999999999"],
  ids=["past-int64", "bytes-past-int64"],
)
def test_a_shape_xla_cannot_load_is_refused_by_every_reader(dims, tmp_path):
  # A dimension XLA's lexer cannot read, or an array whose byte size overflows
  # int64 (XLA's verifier refuses it): refused at its line, never decided on.
  text = MODULE.read_text().replace(
    "bf16[1,128,2,64]{3,2,1,0} parameter(0)", f"bf16[{dims}]{{3,2,1,0}} parameter(0)", 1
  )
  bad = tmp_path / "huge.hlo"
  bad.write_text(text)
  for cmd in (
    ["parse"],
    ["explain", "--topology=1x1x2"],
    ["verify", "--topology=1x1x2"],
    ["diff", str(MODULE)],
  ):
    proc, _ = _run(HLO_TOOLS + [cmd[0], str(bad)] + cmd[1:])
    err = proc.stderr.decode()
    assert proc.returncode == 2, (cmd, err)
    assert len(err.strip().splitlines()) == 1 and "huge.hlo:" in err and "64 bits" in err, err


def test_a_dump_without_its_passes_names_xlas_flag(tmp_path):
  # An --xla_dump_to folder without a file per pass: hlo-tools dump's flag does not
  # apply to the user's own XLA run; XLA's does.
  folder = tmp_path / "xla"
  folder.mkdir()
  shutil.copyfile(MODULE, folder / "module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt")
  proc, _ = _run(HLO_TOOLS + ["explain", f"{folder}:before_async", "--topology=1x1x2"])
  err = proc.stderr.decode()
  assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
  assert "--xla_dump_hlo_pass_re" in err and "--all_passes" in err, err


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling-link"])
def test_what_stands_at_the_buffer_assignments_name_is_refused_at_once(kind, tmp_path):
  # XLA's buffer-assignment dump beside a module: something other than a regular
  # file at its name is refused in one line, not skipped nor waited on.
  module = tmp_path / "m.hlo"
  shutil.copyfile(MODULE, module)
  beside = tmp_path / "m-buffer-assignment.txt"
  {"fifo": os.mkfifo, "directory": os.mkdir}.get(kind, lambda p: os.symlink("gone", p))(beside)
  for cmd in (["explain"], ["verify", "--no-hlo-verifier"]):
    proc, took = _run(HLO_TOOLS + [cmd[0], str(module), "--topology=1x1x2"] + cmd[1:])
    err = proc.stderr.decode()
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "m-buffer-assignment.txt" in err and "buffer assignment" in err, err
    assert took < 30


def test_a_fifo_named_as_the_config_beside_a_module_is_refused_at_once(tmp_path):
  # Skipped without a word before; now one line naming it, before any wait.
  module = tmp_path / "m.hlo"
  shutil.copyfile(MODULE, module)
  os.mkfifo(tmp_path / "m.config.pbtxt")
  for cmd in (["explain"], ["verify"]):
    proc, took = _run(HLO_TOOLS + [cmd[0], str(module), "--topology=1x1x2"])
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "m.config.pbtxt" in err and "FIFO" in err, err
    assert took < 30
