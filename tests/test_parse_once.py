"""Each input parsed once, and one topology grammar, the core's, for every command.

The counts come from hooks, not timing: hlo_tools.selection.COUNTS (topology parses,
cost-table file reads and parses in this process) and hlo_tools.model.driver.RUNS
(nvshmem-opt processes started, each of which reads the spec and table itself)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import cli, selection
from hlo_tools.model import driver

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"
RING = FIXTURES / "ring_1x2x4.before_async.hlo"
CORE_ERROR = "expected SLICESxHOSTSxGPUS"


def _counted(argv):
  selection.COUNTS.clear()
  driver.RUNS.clear()
  driver.PARSES.clear()
  rc = cli.main(argv)
  return rc, dict(selection.COUNTS), dict(driver.RUNS)


@pytest.mark.parametrize("extra", [[], ["--backends=nccl,peer"]])
def test_report_file_parses_each_input_once(tmp_path, capsys, monkeypatch, extra):
  rc, counts, runs = _counted(["report", str(RING), "--topology=1x2x4",
                               f"--cost-table={FAST_NVSHMEM}", f"--out={tmp_path / 'r'}",
                               "--quiet", *extra])
  capsys.readouterr()
  assert rc == 0
  # The spec parsed for its shape, then with the set's process layout, then with the
  # module's own map (XLA's config beside it); one read and parse of the table, one
  # nvshmem-opt run (its rewrite, verified by XLA inside it, with upstream's answers).
  assert counts.get("topology_parse") == 3, counts
  assert counts.get("cost_table_read") == 1 and counts.get("cost_table_parse") == 1, counts
  assert runs == {"rewrite": 1}, runs
  report = json.loads((tmp_path / "r" / "report.json").read_text())
  verify = json.loads((tmp_path / "r" / report["cases"][0]["id"] / "json" /
                       "verify_input.json").read_text())
  [verifier] = [c for c in verify["checks"] if c["name"] == "hlo-verifier"]
  assert verifier["results"][0]["status"] == "pass"


@pytest.mark.parametrize("command", ["explain", "verify"])
def test_explain_and_verify_parse_each_input_once(capsys, command):
  rc, counts, runs = _counted([command, str(RING), "--topology=1x2x4",
                               f"--cost-table={FAST_NVSHMEM}"])
  capsys.readouterr()
  assert rc in (0, 1)
  # The spec, then the spec with the module's own map (XLA's config beside it).
  assert counts.get("topology_parse") == 2, counts
  assert counts.get("cost_table_read") == 1, counts
  assert sum(runs.values()) == 1, runs  # upstream's answers / XLA's verifier


# ---------------------------------------------------------------------------------------
# One grammar: the core's, its error on a bad spec, for every command that takes one.

BAD_SPECS = ("2x4", "1x2x4:nvl", "two")


@pytest.mark.parametrize("spec", BAD_SPECS)
@pytest.mark.parametrize("argv", [
    ["explain", str(RING)], ["verify", str(RING)], ["report", str(RING)],
    ["heuristics", "sweep", "--only-given"],
    ["dump", "hlo_tools.programs.ring_attention:neighbour_shift", "--arg=8,4:f32:cp"]])
def test_every_command_refuses_what_the_core_refuses(tmp_path, capsys, argv, spec):
  rc = cli.main(argv + [f"--topology={spec}", f"--out={tmp_path / 'o'}"])
  err = capsys.readouterr().err.strip()
  assert rc == 2 and len(err.splitlines()) == 1, err
  assert f"topology spec '{spec}'" in err, err
  assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_nvshmem_opt_refuses_what_the_core_refuses(spec):
  exe = driver.find_nvshmem_opt()
  proc = subprocess.run([exe, str(RING), f"--topology={spec}"], capture_output=True,
                        text=True, env=driver.driver_env(), check=False)
  assert proc.returncode == 2 and f"topology spec '{spec}'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("spec", ["1x2x4:nvl8", "1x2x4:gpus_per_process=2",
                                  "1x2x4:map=7,6,5,4,3,2,1,0"])
def test_explain_and_nvshmem_opt_take_every_form_of_the_grammar(capsys, spec):
  rc = cli.main(["explain", str(RING), f"--topology={spec}", "--format=json"])
  out = capsys.readouterr().out
  # The module's own map joins a spec that states none.
  topology = json.loads(out)["topology"]
  assert rc == 0 and (topology == spec if "map=" in spec else
                      topology == spec + ":map=0,1,2,3,4,5,6,7")
  proc = subprocess.run([driver.find_nvshmem_opt(), str(RING), f"--topology={spec}",
                         "--mode=explain"], capture_output=True, text=True,
                        env=driver.driver_env(), check=False)
  assert proc.returncode == 0, proc.stderr


def test_nvl72_dump_is_priced_as_one_domain(tmp_path):
  """dump --topology=1x9x8:nvl72 compiles for 1x9x8 and keeps the spec; report DIR
  then prices the ring inside the one NVLink domain, never on the network."""
  out = tmp_path / "d"
  proc = subprocess.run(
      [sys.executable, "-m", "hlo_tools.cli", "dump",
       "hlo_tools.programs.ring_attention:neighbour_shift", "--topology=1x9x8:nvl72",
       "--arg=72,8:f32:cp", f"--out={out}", "--quiet"],
      capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr
  target = json.loads((out / "manifest.json").read_text())["target"]
  assert target["topology"] == "1x9x8:nvl72" and target["num_devices"] == 72
  rc = cli.main(["report", str(out), f"--out={tmp_path / 'r'}", "--quiet"])
  assert rc == 0
  [case] = json.loads((tmp_path / "r" / "report.json").read_text())["cases"]
  assert case["topology"] == "1x9x8:nvl72"
  [perm] = case["collective_permutes"]
  # 71 edges of the 72-device ring: 8 cross a host, all inside the domain.
  assert perm["edges_by_class"]["network"] == 0
  assert perm["edges_by_class"]["nvlink_domain"] == 8
