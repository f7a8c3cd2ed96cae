"""hlo_tools/__init__.py: the package's version and where it finds a binding of the
core built for another interpreter."""

import os
import re
import subprocess
import sys

import hlo_tools

from conftest import ROOT


def test_version_is_the_distributions():
  pyproject = (ROOT / "pyproject.toml").read_text()
  assert re.search(rf'^version = "{re.escape(hlo_tools.__version__)}"$', pyproject, re.M)


def test_core_dirs_are_searched_after_the_package_once_each(tmp_path, monkeypatch):
  carried = tmp_path / "carried"
  carried.mkdir()
  monkeypatch.setenv(
    hlo_tools.CORE_DIRS_ENV, os.pathsep.join([str(carried), str(tmp_path / "absent"), ""])
  )
  before = list(hlo_tools.__path__)
  monkeypatch.setattr(hlo_tools, "__path__", before)
  hlo_tools.add_core_dirs()
  hlo_tools.add_core_dirs()
  assert hlo_tools.__path__[: len(before)] == before  # the package's own folder first
  assert hlo_tools.__path__.count(str(carried)) == 1
  assert str(tmp_path / "absent") not in hlo_tools.__path__  # only folders that exist


def test_a_module_in_a_core_dir_imports_from_the_package_at_first_import(tmp_path):
  # Whatever is imported first (here the reader, which reads the input bounds from the
  # binding): the package's import has already added the folders.
  (tmp_path / "carried_probe.py").write_text("WHERE = 'carried'\n")
  script = (
    "import hlo_tools.hlo.reader, hlo_tools.carried_probe as p, hlo_tools.bounded_input as b;"
    "print(p.WHERE, b.DEFAULT_MAX_INPUT_BYTES)"
  )
  env = dict(os.environ, **{hlo_tools.CORE_DIRS_ENV: str(tmp_path)})
  out = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
  ).stdout.split()
  assert out == ["carried", str(1 << 30)]
