"""Shared paths for the tests: fixtures, shared data, the built C++ driver."""

import importlib.util
import os
import pathlib
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
# Data from outside the repo, copied into tests/fixtures/ so CI does not need it.
SHARED_DATA = ROOT / "tests" / "fixtures" / "jax0112"
NVSHMEM_OPT = ROOT / "build" / "nvshmem-opt"
GPU = ROOT / "gpu"
# Every process of a GPU script keeps NVLink multicast off.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1",
                 "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# For jax programs that the tests compile and run on the CPU only to check values and
# HLO: LLVM without optimisation. Their compiles take a third less time; the HLO
# passes, and so the values and the compiled HLO the tests read, are the same.
CPU_CODEGEN_O0 = "--xla_backend_optimization_level=0"


def load_gpu_script(name):
  """gpu/NAME.py as a module (the scripts are not a package)."""
  spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def run_nvshmem_opt(*args, check=False, **kwargs):
  """Runs the C++ driver; returns the CompletedProcess (text mode)."""
  if not NVSHMEM_OPT.exists():
    pytest.fail(f"{NVSHMEM_OPT} is not built: run scripts/setup.sh")
  return subprocess.run([str(NVSHMEM_OPT), *map(str, args)], capture_output=True,
                        text=True, check=check, timeout=120, **kwargs)


@pytest.fixture(scope="session", autouse=True)
def nvshmem_opt_is_built():
  """The one build guard: without build/nvshmem-opt every test fails loudly (a broken
  build must never turn into skipped tests that read as a green run)."""
  if not NVSHMEM_OPT.exists():
    pytest.fail(f"{NVSHMEM_OPT} is not built: run scripts/setup.sh")


@pytest.fixture
def nvshmem_opt():
  return run_nvshmem_opt


@pytest.fixture
def fixtures_dir():
  return FIXTURES


# The files that take minutes (the wheel build, the GPU scripts' CPU runs) or
# tens of seconds run first, so that the two workers of scripts/test.sh
# (pytest-xdist, one file per worker at a time) end together; the rest follow
# in their usual order.
SLOW_FIRST = ("test_ring_e2e.py", "test_packaging.py",
              "test_attention_kernel_bench.py",
              "test_reliability.py", "test_ring_attention.py", "test_report.py",
              "test_bench.py")


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(SLOW_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))


def pytest_sessionfinish(session, exitstatus):
  """Fails the run when /dev/null is no longer a character device: a tool that replaced
  it (`-o /dev/null` as root) breaks every later program, git included."""
  if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
    sys.stderr.write("\nFAILED: /dev/null is no longer a character device; a test's "
                     "output replaced it (restore: rm /dev/null && mknod -m 666 /dev/null c 1 3)\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
