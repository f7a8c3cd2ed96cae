"""One collectives mode per program (model.program_mode) on real compiled modules."""

import pytest

from hlo_tools.hlo import module_config
from hlo_tools.model import backend_tables, decisions, options, program_mode, sources
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.text import summary_text

from conftest import FIXTURES

PEER = "COLLECTIVES_PEER_MEMORY"
PRIVATE = "COLLECTIVES_PRIVATE_MEMORY"
SYMMETRIC = "COLLECTIVES_SYMMETRIC_MEMORY"


def _choose(name, topology, backends="nccl,peer,symmetric"):
  selected = options.load(topology, None, backends)
  source = sources.resolve_partitions(sources.read_source(str(FIXTURES / name)), selected.topology)
  perms = decisions.analyze(source, selected.topology, selected.table)
  return program_mode.choose(
    perms, source, selected.topology, selected.table, selected.table.backends
  ), perms


def test_a_train_step_on_one_host_runs_peer_for_the_whole_program():
  got, perms = _choose("train_step_1x1x8.after_optimizations.hlo", "1x1x8")
  assert len(perms) > 1 and got["permutes"] == len(perms)
  assert got["backend"] == "peer" and got["mode"] == PEER
  assert got["xla_flags"] == "XLA_FLAGS=--xla_gpu_collective_permute_mode=peer"
  assert got["compiler_options"] == {"xla_gpu_collective_permute_mode": PEER}
  # The sum over permutes of modeled time x runs, for each mode.
  total = sum(p.decision["backend_us"]["peer"] * program_mode.runs_per_step(p)[0] for p in perms)
  assert got["modes"]["peer"]["total_us"] == pytest.approx(total)
  assert got["saving_us"] == pytest.approx(got["nccl_us"] - total) and got["saving_us"] > 0
  # Symmetric memory needs NCCL signals, which the default table does not claim.
  assert "signals" in got["modes"]["symmetric"]["refused"]
  assert got["per_op_adds_us"] >= 0


def test_a_permute_under_a_branch_refuses_every_one_sided_mode():
  got, _ = _choose("cond_ring_1x1x8.after_optimizations.hlo", "1x1x8")
  assert got["backend"] == "nccl" and got["mode"] == PRIVATE
  assert "conditional's branch" in got["modes"]["peer"]["refused"]
  for backend in ("peer", "symmetric"):  # symmetric: the core's first rule, signals
    assert got["modes"][backend]["refused"] and got["modes"][backend]["total_us"] is None
  assert got["saving_us"] == 0 and got["per_op_adds_us"] == 0
  assert "peer refused" in got["why"]


def test_a_users_mark_is_kept_by_the_programs_mode_too():
  """The ring marked private would gain from peer for the whole program; a flag of
  peer would run the marked permute in peer memory, against the mark, so it is
  refused, and the per-op sum keeps the mark's backend."""
  got, [perm] = _choose("marked_ring_1x1x8.after_optimizations.hlo", "1x1x8", "nccl,peer")
  assert perm.decision["backend_us"]["peer"] < perm.decision["backend_us"]["nccl"]
  assert got["backend"] == "nccl" and got["mode"] == PRIVATE
  assert got["modes"]["peer"]["refused"].endswith("marked by the user: private")
  assert got["per_op_us"] == got["nccl_us"] and got["saving_us"] == 0


def test_a_ring_across_hosts_stays_on_nccl():
  got, _ = _choose("ring_1x2x4.after_optimizations.hlo", "1x2x4", "nccl,peer")
  assert got["backend"] == "nccl" and got["modes"]["peer"]["refused"]
  assert list(got["modes"]) == ["nccl", "peer"]


def test_per_op_choice_adds_where_permutes_differ():
  """Per op, each permute takes its own best; one mode for all cannot do better."""
  got, perms = _choose("train_step_1x1x8.after_optimizations.hlo", "1x1x8", "nccl,peer")
  per_op = sum(
    min(p.decision["backend_us"]["nccl"], p.decision["backend_us"]["peer"])
    * program_mode.runs_per_step(p)[0]
    for p in perms
  )
  assert got["per_op_us"] == pytest.approx(per_op)
  assert got["per_op_us"] <= got["best_us"] <= got["nccl_us"]


def test_what_a_stock_permute_runs():
  # The default flag, a mode written on the op: its thunk runs NCCL all the same.
  run = program_mode.what_runs(PEER, PRIVATE, per_op_xla=False)
  assert run == {"thunk": PRIVATE, "config": PEER, "agree": False}
  run = program_mode.what_runs(SYMMETRIC, None, per_op_xla=False)
  assert run["thunk"] == PRIVATE and not run["agree"]
  # A flag other than the default: the assigner writes it over every op's mode.
  assert program_mode.what_runs(None, PEER, per_op_xla=False) == {
    "thunk": PEER,
    "config": PEER,
    "agree": True,
  }
  assert program_mode.what_runs(SYMMETRIC, PEER, per_op_xla=False)["agree"]
  assert program_mode.what_runs(backend_tables.NO_MODE, PRIVATE, False) == {
    "thunk": PRIVATE,
    "config": None,
    "agree": True,
  }
  # The series' thunk runs the op's own mode.
  assert program_mode.what_runs(PEER, PRIVATE, per_op_xla=True) == {
    "thunk": PEER,
    "config": PEER,
    "agree": True,
  }


def test_the_flag_a_fixture_was_compiled_with_is_in_its_config():
  config = module_config.for_module(str(FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo"))
  assert config.collective_permute_mode == PRIVATE
  assert program_mode.FLAG_BACKEND[config.collective_permute_mode] == "nccl"


# ---------------------------------------------------------------------------------------
# What the tools say of a compiled module's modes


def _with_peer_on_first_permute(src, dst):
  """`src` with COLLECTIVES_PEER_MEMORY written into its first permute's config, as
  the series' assigner writes a mode it takes from a mark (the rest as XLA left them)."""
  from hlo_tools.hook import text_edit

  lines = src.read_text().split("\n")
  at = next(i for i, l in enumerate(lines) if "collective-permute-start(" in l)
  lines[at] = text_edit.set_line_mode(lines[at], PEER)
  dst.write_text("\n".join(lines))
  return dst


def _run(capsys, command, *argv):
  from hlo_tools import cli

  rc = cli.main([command, *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def _check(result, name):
  return next(c for c in result["checks"] if c["name"] == name)


def test_verify_fails_a_per_op_mode_a_stock_xla_does_not_run(tmp_path, capsys):
  import json

  module = _with_peer_on_first_permute(
    FIXTURES / "train_step_1x1x8.after_optimizations.hlo", tmp_path / "m.hlo"
  )
  rc, out, err = _run(
    capsys,
    "verify",
    module,
    "--topology=1x1x8",
    "--backends=nccl,peer",
    "--no-hlo-verifier",
    "--format=json",
  )
  check = _check(json.loads(out), "permute-mode")
  assert check["status"] == "fail", check
  [failed] = [r for r in check["results"] if r["status"] == "fail"]
  assert "thunk_emitter.cc:1824" in failed["message"] and PRIVATE in failed["message"]
  # On the series' XLA the op's own mode runs.
  rc, out, err = _run(
    capsys,
    "verify",
    module,
    "--topology=1x1x8",
    "--backends=nccl,peer",
    "--no-hlo-verifier",
    "--format=json",
    "--per-op-modes",
  )
  assert _check(json.loads(out), "permute-mode")["status"] == "pass"


def test_verify_reads_the_flag_from_the_module_config(tmp_path, capsys):
  """A module compiled with the flag at peer: XLA's assigner wrote PEER on every
  permute, and that is what its thunks run."""
  import json

  from hlo_tools.hook import text_edit

  text = (FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo").read_text()
  lines = [
    text_edit.set_line_mode(l, PEER) if "collective-permute-start(" in l else l
    for l in text.split("\n")
  ]
  module = tmp_path / "ring.after_optimizations.hlo"
  module.write_text("\n".join(lines))
  config = (FIXTURES / "marked_ring_1x1x8.after_optimizations.config.pbtxt").read_text()
  assert f"xla_gpu_collective_permute_mode: {PRIVATE}" in config
  (tmp_path / "ring.after_optimizations.config.pbtxt").write_text(
    config.replace(
      f"xla_gpu_collective_permute_mode: {PRIVATE}", f"xla_gpu_collective_permute_mode: {PEER}"
    )
  )
  rc, out, err = _run(
    capsys,
    "verify",
    module,
    "--topology=1x1x8",
    "--backends=nccl,peer",
    "--no-hlo-verifier",
    "--format=json",
  )
  check = _check(json.loads(out), "permute-mode")
  assert check["status"] == "pass" and "config.pbtxt" in check["results"][0]["message"]
  rc, out, err = _run(
    capsys, "explain", module, "--topology=1x1x8", "--backends=nccl,peer", "--format=json"
  )
  result = json.loads(out)
  assert result["program"]["compiled_with"] == PEER
  assert result["collectives"][0]["runs"] == {"thunk": PEER, "config": PEER, "agree": True}


def test_explain_prints_the_programs_mode_and_its_setting(tmp_path, capsys):
  module = _with_peer_on_first_permute(
    FIXTURES / "train_step_1x1x8.after_optimizations.hlo", tmp_path / "m.hlo"
  )
  rc, out, err = _run(capsys, "explain", module, "--topology=1x1x8", "--backends=nccl,peer")
  assert rc == 0, err
  assert "program: one mode for every permute (what a stock XLA runs): peer" in out
  assert "XLA_FLAGS=--xla_gpu_collective_permute_mode=peer" in out
  assert f'compiler_options={{"xla_gpu_collective_permute_mode": "{PEER}"}}' in out
  assert "per op" in out and "compiled with unknown" in out
  # The permute carrying PEER runs the flag's mode on a stock XLA, and says so.
  assert (
    f"runs          {PRIVATE}, the flag's mode (stock XLA); its backend_config says {PEER}" in out
  )
  rc, out, err = _run(
    capsys, "explain", module, "--topology=1x1x8", "--backends=nccl,peer", "--per-op-modes"
  )
  assert f"runs          {PEER}, its own mode (the series)" in out


def test_report_gives_each_configuration_its_one_mode(tmp_path):
  from hlo_tools.ops import report

  path = FIXTURES / "train_step_1x1x8.after_optimizations.hlo"
  case = Case(id="ts", title="train step", topology="1x1x8", path=str(path), label=str(path))
  data = report.build([case], tmp_path / "r", progress=False, backends="nccl,peer")
  [entry] = data["cases"]
  program = entry["program"]
  assert program["backend"] == "peer" and program["saving_us"] > 0
  assert program["compiler_options"] == {"xla_gpu_collective_permute_mode": PEER}
  text = summary_text(data)
  assert (
    "train step: one mode for the program (stock XLA): peer, "
    "XLA_FLAGS=--xla_gpu_collective_permute_mode=peer"
  ) in text
  # The pass's per-op rewrite is verified as the series' XLA runs it.
  assert "permute-mode" not in entry["failed_checks"]


# ---------------------------------------------------------------------------------------
# The flag's settings, its candidates, and what refuses a mode


def test_settings_spell_the_mode_for_xla_flags_and_compiler_options():
  assert program_mode.settings(PRIVATE) == {
    "xla_flags": "XLA_FLAGS=--xla_gpu_collective_permute_mode=private",
    "compiler_options": {"xla_gpu_collective_permute_mode": PRIVATE},
  }
  assert program_mode.settings(SYMMETRIC)["xla_flags"].endswith("=symmetric")


def test_candidates_are_the_modes_the_flag_names_nccl_first():
  assert program_mode.candidates("nccl,peer,symmetric") == ["nccl", "peer", "symmetric"]
  assert program_mode.candidates(["symmetric", "nccl"]) == ["nccl", "symmetric"]
  # The flag names no NVSHMEM.
  assert program_mode.candidates("nccl,nvshmem") == ["nccl"]


# A two-device ring whose operand lives in memory space 1.
SPACED = """HloModule m, num_partitions=2

ENTRY e {
  p = f32[1024]{0:S(1)} parameter(0)
  ROOT cp = f32[1024]{0} collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
"""


def test_symmetric_memory_is_refused_a_buffer_in_another_memory_space():
  selected = options.load("1x1x2:map=0,1", None, "nccl,peer,symmetric")
  source = sources.read_text("m.hlo", SPACED)
  [perm] = decisions.analyze(source, selected.topology, selected.table)
  refused = program_mode.refusal(perm, source, selected.topology, selected.table, "symmetric")
  assert refused.startswith("a buffer in memory space S(1): symmetric memory needs")
  assert program_mode.refusal(perm, source, selected.topology, selected.table, "nccl") is None
  perm.decision, perm.error = None, "no room"
  assert program_mode.refusal(perm, source, selected.topology, selected.table, "peer") == (
    "its edges cannot be placed on the topology: no room"
  )


def test_compiled_flag_from_the_drivers_json_or_the_config_beside():
  source = sources.read_source(str(FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo"))
  assert program_mode.compiled_flag(source) == (
    PRIVATE,
    str(FIXTURES / "marked_ring_1x1x8.after_optimizations.config.pbtxt"),
  )
  report = {"collective_permute_mode": PEER, "module_config": "x.config.pbtxt"}
  assert program_mode.compiled_flag(source, report) == (PEER, "x.config.pbtxt")
  assert program_mode.compiled_flag(
    source, {"collective_permute_mode": "", "module_config": ""}
  ) == (
    None,
    None,
  )
  assert program_mode.compiled_flag(sources.read_text(None, SPACED, "m.hlo")) == (None, None)
