"""Each input goes to nvshmem-opt once, whose JSON is the tools' source of module
facts, and one topology grammar, the core's, for every command.

The runs are counted from outside: a wrapper script stands in for nvshmem-opt
($NVSHMEM_OPT, which hlo_tools reads to find the driver), logs each run's input and
runs the real driver; nothing in the tools or the driver counts."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.hlo import module_config
from hlo_tools.model import driver

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"
RING = FIXTURES / "ring_1x2x4.before_async.hlo"
DUMP = FIXTURES / "ring_product_grad_1x2x4.passes"
CORE_ERROR = "expected SLICESxHOSTSxGPUS"


@pytest.fixture
def runs(tmp_path, monkeypatch):
  """Puts the logging wrapper in place of nvshmem-opt; returns a function giving
  the inputs of the runs made so far (one line per run: the module's path)."""
  log = tmp_path / "runs.log"
  wrapper = tmp_path / "nvshmem-opt"
  real = driver.find_nvshmem_opt()
  wrapper.write_text(
    f'#!/bin/sh\nprintf \'%s\\n\' "$1" >> {shlex.quote(str(log))}\nexec {shlex.quote(real)} "$@"\n'
  )
  wrapper.chmod(0o755)
  monkeypatch.setenv("NVSHMEM_OPT", str(wrapper))
  return lambda: log.read_text().splitlines() if log.exists() else []


def _main(capsys, *argv):
  rc = cli.main(list(map(str, argv)))
  out, err = capsys.readouterr()
  return rc, out, err


@pytest.mark.parametrize("command", ["explain", "verify"])
@pytest.mark.parametrize("topology", [["--topology=1x2x4"], ["--devices-per-host=4"]])
def test_explain_and_verify_run_the_driver_once(capsys, runs, command, topology):
  """Given a spec or not (the driver then derives it, in the same run), one run."""
  rc, out, err = _main(
    capsys, command, RING, *topology, f"--cost-table={FAST_NVSHMEM}", "--format=json"
  )
  assert rc in (0, 1), err
  assert runs() == [str(RING)]
  result = json.loads(out)
  assert result["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7"
  if command == "explain":
    # Decided by the driver's run, with upstream's answer beside each decision.
    assert {e["decided_by"] for e in result["collectives"]} == {"nvshmem-opt"}
    assert all(
      e["upstream"]["source"] == "nvshmem-opt --compare-upstream" for e in result["collectives"]
    )
  else:
    [verifier] = [c for c in result["checks"] if c["name"] == "hlo-verifier"]
    assert verifier["status"] == "pass"


@pytest.mark.parametrize(
  "flags",
  [["--topology=1x2x4"], ["--devices-per-host=4"], ["--topology=1x2x4", "--backends=nccl,peer"]],
)
def test_report_file_runs_the_driver_once(tmp_path, capsys, runs, flags):
  """report FILE: one rewrite, verified by XLA inside it, with upstream's answers;
  without --topology that run also gives the topology."""
  out = tmp_path / "r"
  rc, _, err = _main(
    capsys, "report", RING, *flags, f"--cost-table={FAST_NVSHMEM}", f"--out={out}", "--quiet"
  )
  assert rc == 0, err
  [run] = runs()
  assert run.endswith(os.path.join("hlo", "input.hlo"))
  report = json.loads((out / "report.json").read_text())
  [case] = report["cases"]
  # As given, or as the driver derived it, placed by XLA's config beside the module.
  assert case["topology"] == (
    "1x2x4" if "--topology=1x2x4" in flags else "1x2x4:map=0,1,2,3,4,5,6,7"
  )
  verify = json.loads((out / case["id"] / "json" / "verify_input.json").read_text())
  [verifier] = [c for c in verify["checks"] if c["name"] == "hlo-verifier"]
  assert verifier["results"][0]["status"] == "pass"
  # The driver's JSON: where its topology came from, the device of each id.
  facts = json.loads((out / case["id"] / "json" / "pass_input.json").read_text())
  assert facts["topology_source"] == ("flag" if "--topology=1x2x4" in flags else "module config")
  assert facts["partition_to_device"] == list(range(8))
  assert facts["spec"] == "1x2x4:map=0,1,2,3,4,5,6,7"


def test_report_dir_runs_the_driver_once_per_stage(tmp_path, capsys, runs):
  out = tmp_path / "r"
  rc, _, err = _main(capsys, "report", DUMP, f"--out={out}", "--quiet")
  assert rc == 0, err
  [case] = json.loads((out / "report.json").read_text())["cases"]
  # One run per stage, on the report's copy of it (built in a work directory).
  assert sorted(Path(r).relative_to(Path(r).parents[2]) for r in runs()) == sorted(
    Path(case["id"], "hlo", f"{s}.hlo") for s in case["stages"]
  )
  assert len(case["stages"]) == 2


def test_diff_and_dump_run_no_driver(tmp_path, capsys, runs):
  rc, _, err = _main(capsys, "diff", RING, FIXTURES / "ring_1x2x4.after_optimizations.hlo")
  assert rc in (0, 1), err
  rc, _, err = _main(
    capsys,
    "dump",
    "hlo_tools.programs.ring_attention:neighbour_shift",
    "--arg=8,4:f32:cp",
    "--topology=1x1x2",
    f"--out={tmp_path / 'd'}",
    "--quiet",
  )
  assert rc == 0, err
  assert runs() == []


def test_the_json_says_what_the_op_carries_and_why_it_cannot_run(tmp_path):
  """The backend an op already carries, and the core's refusal of it where it sits:
  here NVSHMEM written for one host of 8, read on two hosts of 4."""
  carried = tmp_path / "carried.hlo"
  rewrite = subprocess.run(
    [
      driver.find_nvshmem_opt(),
      str(FIXTURES / "ring_1x1x8.before_async.hlo"),
      "--topology=1x1x8",
      f"--cost-table={FAST_NVSHMEM}",
      "-o",
      str(carried),
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert rewrite.returncode == 0, rewrite.stderr
  answer = driver.ask(carried, "1x2x4", compare_upstream=False)
  assert answer.rc == 0, answer.message
  [decision] = answer.report["decisions"]
  assert decision["current_plan"] == "nvshmem"
  assert "2 of 8 edges leave their host" in decision["current_refused"]
  same = driver.ask(carried, "1x1x8", compare_upstream=False)
  [decision] = same.report["decisions"]
  assert decision["current_plan"] == "nvshmem" and decision["current_refused"] is None


def test_the_json_reads_a_peer_mode_the_op_carries(tmp_path):
  """A collectives_mode on the op (peer memory, XLA of jax >= 0.10.2) is the backend
  it carries; across hosts the core refuses it, on one host it may run."""
  name = "ring_1x2x4.after_optimizations"
  carried = tmp_path / f"{name}.hlo"
  carried.write_text(
    (FIXTURES / f"{name}.hlo")
    .read_text()
    .replace(
      '"collectives_mode":"COLLECTIVES_MODE_INVALID"',
      '"collectives_mode":"COLLECTIVES_PEER_MEMORY"',
    )
  )
  shutil.copyfile(FIXTURES / f"{name}.config.pbtxt", tmp_path / f"{name}.config.pbtxt")
  refused = {}
  for spec in ("1x2x4", "1x1x8"):
    answer = driver.ask(carried, spec, compare_upstream=False, backends="nccl,peer")
    assert answer.rc == 0, answer.message
    [decision] = answer.report["decisions"]
    assert decision["current_plan"] == "peer"
    refused[spec] = decision["current_refused"]
  assert refused["1x2x4"].startswith("peer refused: ") and refused["1x1x8"] is None


# ---------------------------------------------------------------------------------------
# One grammar: the core's, its error on a bad spec, for every command that takes one.

BAD_SPECS = ("2x4", "1x2x4:nvl", "two")


@pytest.mark.parametrize("spec", BAD_SPECS)
@pytest.mark.parametrize(
  "argv",
  [
    ["explain", str(RING)],
    ["verify", str(RING)],
    ["report", str(RING)],
    ["heuristics", "sweep", "--only-given"],
    ["dump", "hlo_tools.programs.ring_attention:neighbour_shift", "--arg=8,4:f32:cp"],
  ],
)
def test_every_command_refuses_what_the_core_refuses(tmp_path, capsys, argv, spec):
  rc = cli.main(argv + [f"--topology={spec}", f"--out={tmp_path / 'o'}"])
  err = capsys.readouterr().err.strip()
  assert rc == 2 and len(err.splitlines()) == 1, err
  assert f"topology spec '{spec}'" in err, err
  assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_nvshmem_opt_refuses_what_the_core_refuses(spec):
  exe = driver.find_nvshmem_opt()
  proc = subprocess.run(
    [exe, str(RING), f"--topology={spec}"],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 2 and f"topology spec '{spec}'" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
  "spec", ["1x2x4:nvl8", "1x2x4:gpus_per_process=2", "1x2x4:map=7,6,5,4,3,2,1,0"]
)
def test_explain_and_nvshmem_opt_take_every_form_of_the_grammar(capsys, spec):
  rc = cli.main(["explain", str(RING), f"--topology={spec}", "--format=json"])
  out = capsys.readouterr().out
  # The module's own map joins a spec that states none.
  topology = json.loads(out)["topology"]
  assert rc == 0 and (
    topology == spec if "map=" in spec else topology == spec + ":map=0,1,2,3,4,5,6,7"
  )
  proc = subprocess.run(
    [driver.find_nvshmem_opt(), str(RING), f"--topology={spec}", "--mode=explain"],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr


def test_nvl72_dump_is_priced_as_one_domain(tmp_path):
  """dump --topology=1x9x8:nvl72 compiles for 1x9x8 and keeps the spec; report DIR
  then prices the ring inside the one NVLink domain, never on the network."""
  out = tmp_path / "d"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "dump",
      "hlo_tools.programs.ring_attention:neighbour_shift",
      "--topology=1x9x8:nvl72",
      "--arg=72,8:f32:cp",
      f"--out={out}",
      "--quiet",
    ],
    capture_output=True,
    text=True,
    check=False,
  )
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


# ---------------------------------------------------------------------------------------
# The module's config: read by the driver, whose JSON carries the map to the tools.

PERM = FIXTURES / "perm_ring_1x2x4.after_optimizations.hlo"
SPREAD = "0,4,1,5,2,6,3,7"  # the device order of PERM's config: every hop crosses hosts


@pytest.fixture
def python_reads_no_config(monkeypatch):
  """Python's config reader, made to fail: whatever the tools print of the config
  came through the driver's JSON."""

  def refuse(path, *args, **kwargs):
    raise AssertionError(f"the tools read {path} themselves")

  monkeypatch.setattr(module_config, "read_config", refuse)


def _with_config(tmp_path):
  """PERM and its config as a user's own files (ring.hlo, ring.config.pbtxt)."""
  ring = tmp_path / "ring.hlo"
  shutil.copyfile(PERM, ring)
  shutil.copyfile(str(PERM).replace(".hlo", ".config.pbtxt"), tmp_path / "ring.config.pbtxt")
  return ring


@pytest.mark.parametrize("command", ["explain", "verify"])
def test_a_given_topology_is_placed_by_the_drivers_json(
  tmp_path, capsys, runs, python_reads_no_config, command
):
  ring = _with_config(tmp_path)
  config = tmp_path / "ring.config.pbtxt"
  rc, out, err = _main(capsys, command, ring, "--topology=1x2x4", "--format=json")
  assert rc in (0, 1), err
  assert runs() == [str(ring)]
  result = json.loads(out)
  assert result["topology"] == f"1x2x4:map={SPREAD}"
  if command == "explain":
    assert result["placement"] == f"device order: the module's device assignment ({config})"
    assert all(e["edges_by_class"]["network"] == 8 for e in result["collectives"])
  rc, out, err = _main(capsys, "explain", ring, "--topology=1x2x4")
  assert rc == 0, err
  assert f"device order: the module's device assignment ({config})" in out.splitlines()
  # A spec's own map wins over the config's, and says so.
  rc, out, err = _main(
    capsys, command, ring, "--topology=1x2x4:map=0,1,2,3,4,5,6,7", "--format=json"
  )
  assert rc in (0, 1), err
  assert json.loads(out)["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7"
  if command == "explain":
    assert json.loads(out)["placement"] == (
      f"device order: the topology's map, over the module's device assignment ({config}: {SPREAD})"
    )
  # The flag the program was compiled with, from the same JSON (a set with modes).
  rc, out, err = _main(
    capsys, "explain", ring, "--topology=1x2x4", "--backends=nccl,peer", "--format=json"
  )
  assert rc == 0, err
  program = json.loads(out)["program"]
  assert program["compiled_with"] == "COLLECTIVES_PRIVATE_MEMORY"
  assert program["compiled_with_from"] == str(config)
  assert len(runs()) == 4  # one per command


def test_report_places_a_given_topology_by_the_drivers_json(
  tmp_path, capsys, runs, python_reads_no_config
):
  ring = _with_config(tmp_path)
  out = tmp_path / "r"
  rc, _, err = _main(capsys, "report", ring, "--topology=1x2x4", f"--out={out}", "--quiet")
  assert rc == 0, err
  assert len(runs()) == 1
  [case] = json.loads((out / "report.json").read_text())["cases"]
  assert case["placement"] == (
    f"device order: the module's device assignment ({tmp_path / 'ring.config.pbtxt'})"
  )
  explained = json.loads((out / case["id"] / "json" / "explain.json").read_text())
  assert explained["topology"] == f"1x2x4:map={SPREAD}"
  facts = json.loads((out / case["id"] / "json" / "pass_input.json").read_text())
  # The placed topology as facts (no spec to parse again), with the config's map.
  assert facts["partition_to_device"] == [int(d) for d in SPREAD.split(",")]
  placed = facts["placed"]
  assert (placed["slices"], placed["hosts_per_slice"], placed["gpus_per_host"]) == (1, 2, 4)
  assert facts["topology_source"] == "flag"
  # The config's flag for the program's mode, read in the same run.
  assert facts["module_config"] == str(tmp_path / "ring.config.pbtxt")
  assert facts["collective_permute_mode"] == "COLLECTIVES_PRIVATE_MEMORY"


def test_report_dir_places_a_given_topology_by_the_drivers_json(
  tmp_path, capsys, runs, python_reads_no_config
):
  out = tmp_path / "r"
  rc, _, err = _main(capsys, "report", DUMP, "--topology=1x2x4", f"--out={out}", "--quiet")
  assert rc == 0, err
  [case] = json.loads((out / "report.json").read_text())["cases"]
  assert len(runs()) == len(case["stages"]) == 2
  assert case["placement"].startswith("device order: the module's device assignment (")
  assert "module_0001.jit_ring_product_grad.config.pbtxt" in case["placement"]


def test_verify_without_a_driver_reads_the_config_itself(tmp_path, capsys, runs):
  """--no-hlo-verifier runs no driver: the tools' own reader is the map's source."""
  ring = _with_config(tmp_path)
  rc, out, err = _main(
    capsys, "verify", ring, "--topology=1x2x4", "--format=json", "--no-hlo-verifier"
  )
  assert rc in (0, 1), err
  assert runs() == []
  assert json.loads(out)["topology"] == f"1x2x4:map={SPREAD}"
