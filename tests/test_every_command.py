"""Every command alike: bad input (unbounded, cut at a computation boundary, a topology
over the core's limit) is refused in one line, and real modules of jax 0.9.1 and
0.10.2 are read by explain, verify and diff."""

import json

import pytest

from hlo_tools import cli

from conftest import FIXTURES


def run(capsys, *argv):
  rc = cli.main(["explain", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


# jax's lowered HLO (`jax.jit(f).lower(...).as_text(dialect="hlo")`): no num_partitions in
# the header, scan loops without known_trip_count.
LOWERED = FIXTURES / "ring_1x2x4.lowered.hlo"


@pytest.mark.parametrize("command", ["explain", "verify", "diff"])
def test_unbounded_input_is_refused(command, capfd):
  # /dev/zero has no size to check up front: reading stops past the limit.
  from hlo_tools import cli

  extra = ["--topology=1x1x8"] if command != "diff" else [str(LOWERED)]
  rc = cli.main([command, "/dev/zero", *extra, "--max-input-bytes=100000"])
  _, err = capfd.readouterr()
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert "/dev/zero" in err and "100000" in err and "--max-input-bytes" in err


@pytest.mark.parametrize("command", ["explain", "verify", "parse", "diff"])
def test_module_cut_at_a_computation_boundary_is_refused(command, tmp_path, capfd):
  # XLA's parser would take the last computation as the entry; nvshmem-opt's verifier
  # rejects such a module, and so do the tools, with one line.
  from hlo_tools import cli

  text = (FIXTURES / "ring_1x1x8.before_async.hlo").read_text()
  cut = tmp_path / "cut.hlo"
  cut.write_text(text[: text.index("\nENTRY ")] + "\n")
  extra = {
    "explain": ["--topology=1x1x8"],
    "verify": ["--topology=1x1x8"],
    "parse": [],
    "diff": [str(FIXTURES / "ring_1x1x8.before_async.hlo")],
  }[command]
  rc = cli.main([command, str(cut), *extra])
  out, err = capfd.readouterr()
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
  assert f"{cut}:" in err and "no ENTRY computation" in err


@pytest.mark.parametrize(
  "command",
  [
    ["explain", str(FIXTURES / "shift_1x1x2.before_async.hlo")],
    ["verify", str(FIXTURES / "shift_1x1x2.before_async.hlo")],
    ["report", str(FIXTURES / "shift_1x1x2.before_async.hlo"), "--out=unused"],
    ["heuristics", "sweep", "--only-given", "--no-plots", "--out=unused"],
  ],
)
def test_too_large_topology_says_so(command, capfd, tmp_path, monkeypatch):
  # The core reads 2000000 as "not a positive whole number"; it is a whole number,
  # over the limit of 2**20 devices.
  from hlo_tools import cli

  monkeypatch.chdir(tmp_path)
  rc = cli.main([*command, "--topology=1x2000000x8"])
  out, err = capfd.readouterr()
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
  assert "'2000000' is too large (max 1048576 devices)" in err
  assert "whole number" not in err and not list(tmp_path.iterdir())


# Modules as jax 0.9.1 and 0.10.2 build them for GPUs: replica_groups=mesh[...] on
# the tensor-parallel all-reduces and collectives_mode in every collective's
# backend_config (0.10.2), which the wheel's XLA does not know.
REAL_MODULES = [
  ("train_step_1x1x8.after_optimizations.hlo", "1x1x8", 6),
  ("train_step_1x2x8.after_optimizations.hlo", "1x2x8", 6),
  ("train_step_1x4x4.after_optimizations.hlo", "1x4x4", 6),
  ("train_step_1x2x8.before_async.hlo", "1x2x8", 6),
  ("driver_tp_cp_1x1x8.after_optimizations.hlo", "1x1x8", 1),
  ("jax091/ring_1x2x4.after_optimizations.hlo", "1x2x4", 1),
]


@pytest.mark.parametrize("fixture,topology,permutes", REAL_MODULES)
def test_every_tool_reads_real_modules(capsys, fixture, topology, permutes):
  path = FIXTURES / fixture
  text = path.read_text()
  rc, out, err = run(capsys, path, f"--topology={topology}", "--format=json")
  assert rc == 0, err
  result = json.loads(out)
  assert len(result["collectives"]) == permutes
  # Upstream's answer came from its real assigner: the driver read the module.
  assert {e["upstream"]["source"] for e in result["collectives"]} == {
    "nvshmem-opt --compare-upstream"
  }, result["collectives"][0]["upstream"]
  rc = cli.main(["verify", str(path), f"--topology={topology}", "--format=json"])
  out, err = capsys.readouterr()
  assert rc == 0, out + err
  checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
  assert checks["hlo-verifier"] == "pass" and checks["permutation"] == "pass"
  rc = cli.main(["diff", str(path), str(path), "--format=json"])
  out, err = capsys.readouterr()
  assert rc == 0, err
  assert json.loads(out)["summary"]["changed"] == 0
  if "mesh[" in text:
    assert "collectives_mode" in text
