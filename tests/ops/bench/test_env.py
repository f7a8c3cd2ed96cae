"""hlo_tools.ops.bench.env: the machine and software versions a benchmark records."""

import io
import os
import re
import subprocess

from hlo_tools.ops.bench import env

from conftest import ROOT

MEMINFO = "MemTotal:       16777216 kB\nMemFree:         1048576 kB\n"
CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU @ 2.00GHz\n"


def _fake_proc(monkeypatch, files):
  """/proc files as `files` gives them ({path: text}); any other path cannot be read."""

  def fake_open(path, *args, **kwargs):
    if path in files:
      return io.StringIO(files[path])
    raise FileNotFoundError(path)

  monkeypatch.setattr(env, "open", fake_open, raising=False)


def test_machine_reads_memory_and_cpu_model_from_proc(monkeypatch):
  _fake_proc(monkeypatch, {"/proc/meminfo": MEMINFO, "/proc/cpuinfo": CPUINFO})
  m = env.machine()
  assert m["mem_total_gb"] == 16.0  # 16777216 kB = 16 GiB
  assert m["cpu_model"] == "Test CPU @ 2.00GHz"
  assert m["cpu_count"] == os.cpu_count()
  assert 1 <= m["cpus_usable"] <= m["cpu_count"]


def test_machine_without_proc_still_answers(monkeypatch):
  # Not Linux: no /proc. Memory 0, the CPU as the platform names it.
  _fake_proc(monkeypatch, {})
  monkeypatch.setattr(env.platform, "processor", lambda: "")
  m = env.machine()
  assert m["mem_total_gb"] == 0.0 and m["cpu_model"] == "unknown CPU"


def test_versions_name_jax_and_the_commit():
  import jax  # pylint: disable=import-outside-toplevel

  v = env.versions()
  assert v["jax"] == jax.__version__
  head = subprocess.run(
    ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
  ).stdout.strip()
  # The short commit, marked when the tracked files differ from it.
  assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?", v["hlo_tools_commit"])
  assert head.startswith(v["hlo_tools_commit"][:12])


def test_versions_without_git_leave_the_commit_unknown(monkeypatch):
  def no_git(*args, **kwargs):
    raise FileNotFoundError("git")

  monkeypatch.setattr(env.subprocess, "run", no_git)
  assert env.versions()["hlo_tools_commit"] is None
