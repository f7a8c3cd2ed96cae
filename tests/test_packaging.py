"""`pip install .` as a Python user runs it: the wheel from the real build
backend (scikit-build-core, isolated, with the declared build requirements),
installed with its dependencies into a fresh virtual environment, then the
extension, `hlo-tools` and `nvshmem-opt` run from there on a real module.

It builds the C++ a second time and installs tensorflow twice (build and run
environments): several minutes, so it runs only when NVSHMEM_TEST_PACKAGE=1
(scripts/test_long.sh sets it, and while the series checks run builds the wheel
the same way and installs it into a fresh environment with `install_wheel`
below: NVSHMEM_TEST_WHEEL and NVSHMEM_TEST_VENV name them).
"""

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "ring_1x1x8.before_async.hlo"

pytestmark = pytest.mark.skipif(
    os.environ.get("NVSHMEM_TEST_PACKAGE") != "1",
    reason="builds and installs the wheel (minutes): scripts/test_long.sh, or set NVSHMEM_TEST_PACKAGE=1")


def run(cmd, **kw):
  proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
  assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  prebuilt = os.environ.get("NVSHMEM_TEST_WHEEL")
  if prebuilt:  # scripts/test_long.sh builds it the same way, beside the series checks
    return Path(prebuilt)
  dist = tmp_path_factory.mktemp("dist")
  env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
  run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--progress-bar", "off",
       "-w", dist, REPO], env=env, cwd=dist)
  wheels = list(dist.glob("hlo_tools-*.whl"))
  assert len(wheels) == 1, wheels
  return wheels[0]


def test_wheel_holds_the_built_binaries_and_declares_dependencies(wheel):
  with zipfile.ZipFile(wheel) as zf:
    names = zf.namelist()
    metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
  scripts = sorted(n for n in names if "/scripts/" in n)
  assert scripts == ["hlo_tools-0.1.0.data/scripts/nvshmem-opt",
                     "hlo_tools-0.1.0.data/scripts/nvshmem-opt-xla"], scripts
  # One library, the extension; nothing else from the tree.
  libraries = [n for n in names if ".so" in n]
  assert len(libraries) == 1 and libraries[0].startswith(
      "hlo_tools/_selection_core.cpython-"), libraries
  assert not [n for n in names if n.startswith(("tests/", "build", "xla_src/"))]
  requires = {line.split(":", 1)[1].strip() for line in metadata.splitlines()
              if line.startswith("Requires-Dist:")}
  assert {"jax>=0.10.2", "numpy>=2.0", "matplotlib>=3.8", "tensorflow==2.21.0",
          'jax-cuda13-plugin==0.10.2; extra == "cuda"',
          'pytest>=8; extra == "test"'} <= requires, requires


def install_wheel(wheel, env_dir):
  """A fresh virtual environment at env_dir with the wheel and its dependencies."""
  venv.create(env_dir, with_pip=True)
  # Without byte-compiling the ~7,400 modules of its dependencies (a third of
  # the install): what the test runs compiles as it imports.
  run([Path(env_dir) / "bin" / "python", "-m", "pip", "install", "--no-compile",
       "--progress-bar", "off", wheel])


def test_installed_package_runs_on_a_real_module(wheel, tmp_path):
  env_dir = os.environ.get("NVSHMEM_TEST_VENV")
  if not env_dir:  # scripts/test_long.sh installs it beside the series checks
    env_dir = tmp_path / "venv"
    install_wheel(wheel, env_dir)
  env_dir = Path(env_dir)
  bin_dir = env_dir / "bin"
  # Away from the repository, so only the installed package can be imported.
  probe = run([bin_dir / "python", "-c",
               "import hlo_tools._selection_core as c; print(c.__file__)"], cwd=tmp_path)
  assert probe.stdout.startswith(str(env_dir)), probe.stdout
  with zipfile.ZipFile(wheel) as zf:  # this wheel's extension, not an older one
    built = zf.read(next(n for n in zf.namelist() if n.startswith("hlo_tools/_selection_core")))
  assert Path(probe.stdout.strip()).read_bytes() == built

  table = run([bin_dir / "nvshmem-opt", "--print-cost-table"], cwd=tmp_path)
  # The compiled-in default: the measured 2x H200 NVLink curve.
  assert ("  backend: NVSHMEM\n  link_class: NVLINK\n" in table.stdout and
          "\n  points { buffers: 1 bytes: 1024 us: " in table.stdout), table.stdout[:400]
  explained = run([bin_dir / "nvshmem-opt", FIXTURE, "--topology=1x1x8", "--mode=explain"],
                  cwd=tmp_path)
  assert "8 pairs): " in explained.stdout, explained.stdout  # the ring permute, explained
  out = tmp_path / "out.hlo"
  run([bin_dir / "nvshmem-opt", FIXTURE, "--topology=1x1x8", "-o", out], cwd=tmp_path)
  # hlo-tools finds the nvshmem-opt installed beside it.
  run([bin_dir / "hlo-tools", "verify", out, "--topology=1x1x8"], cwd=tmp_path)


if __name__ == "__main__":  # scripts/test_long.sh: python tests/test_packaging.py WHEEL ENV_DIR
  install_wheel(*sys.argv[1:])
