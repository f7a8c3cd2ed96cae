"""The driver's distribution (nvshmem_opt/pyproject.toml) as `pip install` builds it:
its wheel from the real build backend (scikit-build-core, isolated, with the
declared build requirements: the tensorflow wheel's XLA), installed with the
base package through its extra (`hlo-tools[xla]`) and their dependencies into
a fresh virtual environment; then `nvshmem-opt` and `hlo-tools` run from there
on a real module. (The base package alone, without TensorFlow, is
tests/test_base_wheel.py's.)

It builds the driver a second time and installs tensorflow twice (build and run
environments): several minutes, so it runs only when NVSHMEM_TEST_PACKAGE=1
(scripts/test_long.sh sets it, and while the series checks run builds the
wheels the same way and installs them into a fresh environment with
`install_wheels` below: NVSHMEM_TEST_WHEELS and NVSHMEM_TEST_VENV name them).
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

pytestmark = [
  pytest.mark.long,
  pytest.mark.skipif(
    os.environ.get("NVSHMEM_TEST_PACKAGE") != "1",
    reason="builds and installs the wheel (minutes): scripts/test_long.sh, "
    "or set NVSHMEM_TEST_PACKAGE=1",
  ),
]


def run(cmd, **kw):
  proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
  assert proc.returncode == 0, (
    f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  )
  return proc


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
  """(the base package's wheel, the driver's wheel)."""
  prebuilt = os.environ.get("NVSHMEM_TEST_WHEELS")
  dist = Path(prebuilt) if prebuilt else tmp_path_factory.mktemp("dist")
  if not prebuilt:  # scripts/test_long.sh builds them the same way, beside the series checks
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    run(
      [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--progress-bar",
        "off",
        "-w",
        dist,
        REPO,
        REPO / "nvshmem_opt",
      ],
      env=env,
      cwd=dist,
    )
  base, drv = list(dist.glob("hlo_tools-*.whl")), list(dist.glob("nvshmem_opt-*.whl"))
  assert len(base) == 1 and len(drv) == 1, (base, drv)
  return base[0], drv[0]


def test_driver_wheel_holds_the_driver_and_declares_tensorflow(wheels):
  with zipfile.ZipFile(wheels[1]) as zf:
    names = zf.namelist()
    metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
  scripts = sorted(n for n in names if "/scripts/" in n)
  assert scripts == [
    "nvshmem_opt-0.1.0.data/scripts/nvshmem-opt",
    "nvshmem_opt-0.1.0.data/scripts/nvshmem-opt-xla",
  ], scripts
  # The driver only: no Python package, no binding, nothing else from the tree.
  assert not [n for n in names if ".so" in n or n.endswith(".py")], names
  requires = {
    line.split(":", 1)[1].strip()
    for line in metadata.splitlines()
    if line.startswith("Requires-Dist:")
  }
  assert requires == {"tensorflow==2.21.0"}, requires
  with zipfile.ZipFile(wheels[0]) as zf:
    base_names = zf.namelist()
  assert not [n for n in base_names if "/scripts/" in n], base_names


def install_wheels(base, drv, env_dir):
  """A fresh virtual environment at env_dir with the base package, its `xla`
  extra (the driver's wheel) and their dependencies."""
  venv.create(env_dir, with_pip=True)
  # Without byte-compiling the ~7,400 modules of its dependencies (a third of
  # the install): what the test runs compiles as it imports.
  run(
    [
      Path(env_dir) / "bin" / "python",
      "-m",
      "pip",
      "install",
      "--no-compile",
      "--progress-bar",
      "off",
      f"{base}[xla]",
      drv,
    ]
  )


def test_installed_package_runs_on_a_real_module(wheels, tmp_path):
  env_dir = os.environ.get("NVSHMEM_TEST_VENV")
  if not env_dir:  # scripts/test_long.sh installs it beside the series checks
    env_dir = tmp_path / "venv"
    install_wheels(*wheels, env_dir)
  env_dir = Path(env_dir)
  bin_dir = env_dir / "bin"
  # Away from the repository, so only the installed package can be imported.
  probe = run(
    [bin_dir / "python", "-c", "import hlo_tools._selection_core as c; print(c.__file__)"],
    cwd=tmp_path,
  )
  assert probe.stdout.startswith(str(env_dir)), probe.stdout
  with zipfile.ZipFile(wheels[0]) as zf:  # this wheel's extension, not an older one
    built = zf.read(next(n for n in zf.namelist() if n.startswith("hlo_tools/_selection_core")))
  assert Path(probe.stdout.strip()).read_bytes() == built

  table = run([bin_dir / "nvshmem-opt", "--print-cost-table"], cwd=tmp_path)
  # The compiled-in default: the measured 2x H200 NVLink curve.
  assert (
    "  backend: NVSHMEM\n  link_class: NVLINK\n" in table.stdout
    and "\n  points { buffers: 1 bytes: 1024 us: " in table.stdout
  ), table.stdout[:400]
  explained = run(
    [bin_dir / "nvshmem-opt", FIXTURE, "--topology=1x1x8", "--mode=explain"], cwd=tmp_path
  )
  assert "8 pairs): " in explained.stdout, explained.stdout  # the ring permute, explained
  out = tmp_path / "out.hlo"
  run([bin_dir / "nvshmem-opt", FIXTURE, "--topology=1x1x8", "-o", out], cwd=tmp_path)
  # hlo-tools finds the nvshmem-opt installed beside it.
  run([bin_dir / "hlo-tools", "verify", out, "--topology=1x1x8"], cwd=tmp_path)


if __name__ == "__main__":
  # scripts/test_long.sh: python tests/test_packaging.py BASE_WHEEL DRIVER_WHEEL ENV_DIR
  install_wheels(*sys.argv[1:])
