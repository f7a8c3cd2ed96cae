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
GPU = ROOT / "benchmarks"
# Every process of a GPU script keeps NVLink multicast off.
MULTICAST_OFF = {
  "NCCL_NVLS_ENABLE": "0",
  "NVSHMEM_DISABLE_NVLS": "1",
  "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}
# For jax programs that the tests compile and run on the CPU only to check values and
# HLO: LLVM without optimisation. Their compiles take a third less time; the HLO
# passes, and so the values and the compiled HLO the tests read, are the same.
CPU_CODEGEN_O0 = "--xla_backend_optimization_level=0"


# The start of a jax program compiled for two H200s on the CPU (deviceless, jax
# 0.10.2's XLA): `mesh` over axis "cp"; sys.argv[1] is the target config.
TWO_H200_PRELUDE = r"""
import sys, jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(sys.argv[1]).read())
mesh = Mesh(np.array(topo.devices), ("cp",))
"""
H200_TARGET = ROOT / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt"


def compile_two_h200(program, dump, *args):
  """Compiles TWO_H200_PRELUDE + `program` (more argv in `args`) with XLA dumping
  into `dump`; returns `dump`."""
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
    XLA_FLAGS=f"--xla_dump_to={dump}",
  )
  subprocess.run(
    [sys.executable, "-c", TWO_H200_PRELUDE + program, str(H200_TARGET), *map(str, args)],
    check=True,
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  return dump


def placed(spec, devices=None):
  """`spec` with a map for a program of `devices` (default: every GPU of the spec),
  logical device i on device i: what a module without XLA's config beside it needs
  before the tools decide a one-sided backend where it spans hosts or processes."""
  dims = [int(x) for x in spec.split(":")[0].split("x")]
  devices = devices or dims[0] * dims[1] * dims[2]
  return f"{spec}:map={','.join(str(i) for i in range(devices))}"


def load_gpu_script(name):
  """benchmarks/NAME.py as a module (the scripts are not a package)."""
  spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def run_nvshmem_opt(*args, check=False, **kwargs):
  """Runs the C++ driver; returns the CompletedProcess (text mode)."""
  if not NVSHMEM_OPT.exists():
    pytest.fail(f"{NVSHMEM_OPT} is not built: run scripts/setup.sh")
  return subprocess.run(
    [str(NVSHMEM_OPT), *map(str, args)],
    capture_output=True,
    text=True,
    check=check,
    timeout=120,
    **kwargs,
  )


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


# The files that take tens of seconds run first (paths under tests/), so that the
# two workers of scripts/test.sh (pytest-xdist, one file per worker at a time) end
# together; the rest follow in their usual order.
SLOW_FIRST = (
  "test_jax_hook.py",
  "test_nvshmem_opt.py",
  "test_report.py",
  "ops/test_dump_compile.py",
  "test_dump_programs.py",
  "test_user_mark.py",
  "test_input_kinds.py",
  "hlo/test_reader.py",
)


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(SLOW_FIRST)}
  tests = pathlib.Path(__file__).parent
  items.sort(key=lambda item: rank.get(item.path.relative_to(tests).as_posix(), len(SLOW_FIRST)))


# scripts/test.sh's promise: no test it runs takes over 20 s (setup included).
# A slower one belongs to scripts/test_long.sh (@pytest.mark.long).
QUICK_TEST_LIMIT_S = 20
_slow_quick_tests = {}


def pytest_runtest_logreport(report):
  if "long" in report.keywords or report.when == "teardown":
    return
  _slow_quick_tests[report.nodeid] = _slow_quick_tests.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
  slow = {k: v for k, v in _slow_quick_tests.items() if v > QUICK_TEST_LIMIT_S}
  if slow:
    terminalreporter.write_line(
      f"tests not marked long that took over {QUICK_TEST_LIMIT_S} s (setup and call):"
    )
    for nodeid, seconds in sorted(slow.items(), key=lambda kv: -kv[1]):
      terminalreporter.write_line(f"  {seconds:6.1f} s  {nodeid}")


def pytest_sessionfinish(session, exitstatus):
  """Fails the run when /dev/null is no longer a character device: a tool that replaced
  it (`-o /dev/null` as root) breaks every later program, git included."""
  if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
    sys.stderr.write(
      "\nFAILED: /dev/null is no longer a character device; a test's "
      "output replaced it (restore: rm /dev/null && mknod -m 666 /dev/null c 1 3)\n"
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# A cost table that makes peer memory the faster backend on NVLink, for the hook's
# tests on a live CPU client.
FAST_PEER_TABLE = (
  "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 1 }\n"
)


def run_live_cpu(script, *args):
  """Runs the Python `script` (argv: `args`) on a live CPU client of 2 devices with
  this checkout first on the path; returns the JSON its last stdout line holds."""
  return run_jax(script, *args)


def run_jax(script, *args, deviceless=False, xla_flags=None):
  """run_live_cpu, or with deviceless=True a process that compiles for GPUs on the
  CPU (jax 0.10.2's CUDA plugin, no device); xla_flags: XLA_FLAGS for it."""
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )
  if deviceless:
    env["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
  else:
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
  if xla_flags is not None:
    env["XLA_FLAGS"] = xla_flags
  proc = subprocess.run(
    [sys.executable, "-c", script, *map(str, args)],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  import json

  return json.loads(proc.stdout.strip().splitlines()[-1])
