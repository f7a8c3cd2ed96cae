"""A fifth backend, `stand_in`, added at build time through the files
docs/architecture.md lists for a new backend (core/tool_layer/stand_in/add_backend.py),
reaches Python through the binding built on the same copy: the package's tables
of names, labels, what a plan writes, the accepted values and the colours take it
up, and the core plans over it, with no edit of hlo_tools."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BINDING = ROOT / "build" / "stand_in_python"

# Run in a fresh interpreter on a copy of hlo_tools whose binding is the stand-in's.
PROBE = r"""
import json
import sys
# The copy, not an editable install's finder, which would load the repository's.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
from hlo_tools import selection
from hlo_tools.hook import decide
from hlo_tools.model import backend_tables
from hlo_tools.ops import verify_structure
from hlo_tools.ops.report import chart, page

text = ('backends: [NCCL, STAND_IN]\n'
        'links { backend: STAND_IN link_class: NVLINK latency_us: 1 '
        'bandwidth_gbps: 900 per_buffer_us: 0 }\n')
table = selection.parse_cost_table(text, "t.txt")
again = selection.parse_cost_table(str(table), "printed")
topology = selection.parse_topology("1x1x2", table.backends)
d = selection.decide(topology, table, 1 << 20, [(0, 1), (1, 0)])
print(json.dumps({
    "file": selection._selection_core.__file__,
    "backends": selection.BACKENDS,
    "label": selection.BACKEND_INFO["stand_in"]["label"],
    "plan_backend": backend_tables.PLAN_BACKEND.get("stand_in"),
    "plan_mode": backend_tables.PLAN_MODE.get("stand_in"),
    "mark_plan": backend_tables.MARK_PLAN.get("stand_in"),
    "known_plans": list(verify_structure.KNOWN_PLANS),
    "page_name": page.NAMES.get("stand_in"),
    "chart_colour": chart.COLORS.get("stand_in"),
    "hook_modes": {k: list(v) for k, v in decide.hook_modes(selection).items()},
    "table_backends": table.backends,
    "round_trip": str(again) == str(table),
    "decided": d["backend"],
    "reason": d["reason"],
    "modeled": sorted(d["backend_us"]),
}))
"""


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict:
  built = sorted(BINDING.glob("_selection_core*.so"))
  assert built, (
    f"{BINDING} has no stand-in binding: build the CMake target "
    "stand_in_selection_core (scripts/setup.sh builds every target)"
  )
  package = tmp_path_factory.mktemp("stand_in") / "hlo_tools"
  shutil.copytree(
    ROOT / "hlo_tools", package, ignore=shutil.ignore_patterns("_selection_core*.so", "__pycache__")
  )
  shutil.copy(built[0], package)
  out = subprocess.run(
    [sys.executable, "-c", PROBE],
    cwd=package.parent,
    env={"PYTHONPATH": str(package.parent), "PATH": "/usr/bin:/bin"},
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 0, out.stderr
  probed = json.loads(out.stdout)
  assert probed["file"].startswith(str(package)), probed["file"]
  return probed


def test_the_records_reach_the_package(probed: dict) -> None:
  assert probed["backends"] == ["nccl", "nvshmem", "peer", "symmetric", "stand_in"]
  assert probed["label"] == "stand-in memory"
  assert probed["known_plans"] == probed["backends"]
  assert probed["page_name"] == "stand-in memory"
  assert probed["chart_colour"]


def test_what_a_plan_writes_follows_its_record(probed: dict) -> None:
  assert probed["plan_backend"] == "DEFAULT"
  assert probed["plan_mode"] == "COLLECTIVES_STAND_IN_MEMORY"
  assert probed["mark_plan"] == "stand_in"
  assert probed["hook_modes"]["stand_in"] == ["COLLECTIVES_STAND_IN_MEMORY", "stand_in"]


def test_the_core_plans_over_it_through_the_binding(probed: dict) -> None:
  assert probed["table_backends"] == "nccl,stand_in"
  assert probed["round_trip"]
  assert probed["decided"] == "stand_in", probed["reason"]
  assert probed["reason"].startswith("stand-in memory: all 2 edges stay in one host;")
  assert "stand_in" in probed["modeled"]
