"""The type checker's view of hlo_tools: the core binding's stub agrees with the built
binding (mypy's stubtest imports the module and compares every name, signature and
property), and a real type error in the package is reported."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# pybind11 gives its classes a metaclass of its own, which a stub does not name.
_ALLOWLIST = """hlo_tools._selection_core.CostTable
hlo_tools._selection_core.Topology
"""


def _run(args, cwd=ROOT):
  return subprocess.run(
    [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
  )


def test_selection_core_stub_matches_the_built_binding(tmp_path):
  allowlist = tmp_path / "allowlist.txt"
  allowlist.write_text(_ALLOWLIST)
  proc = _run(["mypy.stubtest", "hlo_tools._selection_core", "--allowlist", str(allowlist)])
  assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stubtest_notices_a_binding_function_the_stub_lacks(tmp_path):
  # The check above can fail: a stub without one of the binding's functions is caught.
  stub = tmp_path / "stubs" / "hlo_tools"
  stub.mkdir(parents=True)
  with open(os.path.join(ROOT, "hlo_tools", "_selection_core.pyi")) as f:
    text = f.read()
  (stub / "__init__.pyi").write_text("")
  (stub / "_selection_core.pyi").write_text(
    "\n".join(l for l in text.split("\n") if not l.startswith("def link_classes"))
  )
  allowlist = tmp_path / "allowlist.txt"
  allowlist.write_text(_ALLOWLIST)
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "mypy.stubtest",
      "hlo_tools._selection_core",
      "--allowlist",
      str(allowlist),
    ],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
    env=dict(os.environ, MYPYPATH=str(tmp_path / "stubs")),
  )
  assert proc.returncode != 0 and "link_classes" in proc.stdout, proc.stdout


def test_mypy_reports_a_wrong_call_into_the_reader(tmp_path):
  # The package's types are real: a caller passing an int where the reader wants text
  # fails the check, naming the file and line.
  bad = tmp_path / "bad_caller.py"
  bad.write_text(
    "from hlo_tools.hlo import reader\n\n\n"
    "def first(n: int) -> str:\n"
    "  return reader.parse_hlo_text(n).name\n"
  )
  proc = _run(
    ["mypy", "--no-incremental", "--config-file", os.path.join(ROOT, "pyproject.toml"), str(bad)]
  )
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert f"{bad}:5: error" in proc.stdout and "parse_hlo_text" in proc.stdout, proc.stdout
