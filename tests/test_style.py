"""The C++ is in Google style, as XLA's: clang-format 17 with the repository's
.clang-format (core/.clang-format: XLA's own settings) finds nothing to
change (skipped when clang-format is not in .venv; scripts/setup.sh --tests installs
it). The Bazel files' buildifier check is in test_patches.py."""

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The clang-format XLA checks with (17.0.6, installed by scripts/setup.sh --tests):
# core/.clang-format, XLA's style, needs it.
VENV_CLANG_FORMAT = REPO / ".venv" / "bin" / "clang-format"
CLANG_FORMAT = str(VENV_CLANG_FORMAT) if VENV_CLANG_FORMAT.exists() else None


def tracked(*patterns):
  out = subprocess.run(
    ["git", "ls-files", "-z", "--", *patterns], cwd=REPO, capture_output=True, text=True, check=True
  ).stdout
  return [name for name in out.split("\0") if name]


@pytest.mark.skipif(CLANG_FORMAT is None, reason="clang-format not installed")
def test_cpp_is_clang_formatted():
  files = tracked("*.cc", "*.h", "*.inc")
  assert files
  proc = subprocess.run(
    [CLANG_FORMAT, "--dry-run", "--Werror", *files], cwd=REPO, capture_output=True, text=True
  )
  unformatted = sorted(
    {line.split(":", 1)[0] for line in proc.stderr.splitlines() if ": error:" in line}
  )
  assert proc.returncode == 0, f"run clang-format -i on: {' '.join(unformatted)}"


@pytest.mark.parametrize("package", ["model", "hook"])
def test_package_docstring_names_each_of_its_modules(package):
  """A package that lists its modules in its docstring lists them all, so that a
  newcomer reading it sees the whole package."""
  import importlib
  import re

  folder = REPO / "hlo_tools" / package
  doc = importlib.import_module(f"hlo_tools.{package}").__doc__ or ""
  modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
  missing = [m for m in modules if not re.search(rf"^  {m}\b", doc, re.M)]
  assert not missing, f"hlo_tools/{package}/__init__.py does not name {missing}"


def mirror_test_file(module):
  """The test file of `module` (a path under hlo_tools/): tests/ mirrors the package,
  hlo_tools/ops/verify.py -> tests/ops/test_verify.py, hlo_tools/cli.py ->
  tests/test_cli.py; a package whose __init__.py holds code is tested as a module
  of its parent (hlo_tools/ops/report/__init__.py -> tests/ops/test_report.py,
  hlo_tools/__init__.py -> tests/test_hlo_tools.py)."""
  parts = module.relative_to(REPO).with_suffix("").parts
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return REPO.joinpath("tests", *parts[1:-1], f"test_{parts[-1]}.py")


def modules_with_code():
  """Every module of hlo_tools/ but the __init__.py files that only name or re-export
  their package's modules (no function or class of their own)."""
  import ast

  for path in sorted((REPO / "hlo_tools").rglob("*.py")):
    if path.name == "__init__.py":
      tree = ast.parse(path.read_text())
      if not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
        continue
    yield path


def test_every_module_has_a_test_file_named_after_it():
  modules = list(modules_with_code())
  assert len(modules) > 80
  missing = [
    f"{m.relative_to(REPO)} -> {mirror_test_file(m).relative_to(REPO)}"
    for m in modules
    if not mirror_test_file(m).is_file()
  ]
  assert not missing, "no test file for:\n" + "\n".join(missing)
