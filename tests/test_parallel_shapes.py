"""The tools on the parallel shapes of hlo_tools/programs/parallel_shapes.py, compiled
deviceless with jax 0.10.2 (scripts/gen_fixtures.py): a GPipe pipeline beside a cp
ring, dp x cp x tp on four hosts, a ring both ways, Ulysses all-to-all, a scan over
rematerialized layers around a ring."""

import json
from pathlib import Path

from hlo_tools import cli
from hlo_tools.model import decisions, sources
from hlo_tools.model.collectives import collective_permutes, trips_text
from hlo_tools.ops.report import Case
from hlo_tools.ops.report.page import comparison_rows

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PIPELINE = FIXTURES / "pipeline_1x2x4.before_async.hlo"
SCAN_REMAT = FIXTURES / "scan_remat_1x1x8.before_async.hlo"
BIDIR = FIXTURES / "bidir_1x1x8.before_async.hlo"
ULYSSES = FIXTURES / "ulysses_1x1x8.before_async.hlo"
DP_CP_TP = FIXTURES / "dp_cp_tp_1x4x8.before_async.hlo"
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"  # NVSHMEM wins on NVLink at every size


def run(capsys, *argv):
  rc = cli.main([*map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def permutes(path):
  return {len(r.pairs): r for r in collective_permutes(sources.read_source(path).module)}


# ---------------------------------------------------------------------------------------
# Trip counts multiply through every enclosing loop

def test_pipeline_ring_runs_steps_times_ring_trips():
  by_pairs = permutes(PIPELINE)
  ring, shift = by_pairs[8], by_pairs[4]  # the cp ring (8 pairs), the pp shift (4)
  assert [n for _, _, n in ring.loops] == [4, 7]  # ring loop inside the 7-step schedule
  assert ring.trip_count == 28 and ring.while_loop == ring.loops[0][0]
  assert [n for _, _, n in shift.loops] == [7] and shift.trip_count == 7


def test_scan_over_remat_layers_multiplies_layers_and_ring_steps():
  records = collective_permutes(sources.read_source(SCAN_REMAT).module)
  assert len(records) == 3  # forward, the rematerialized forward, backward
  assert all(r.trip_count == 32 and [n for _, _, n in r.loops] == [8, 4] for r in records)


def test_trips_text_says_at_least_where_a_count_is_unknown():
  assert trips_text([4, 7]) == "x28 trips (7 x 4)"
  assert trips_text([8]) == "x8 trips"
  assert trips_text([4, None]).startswith("at least x4 trips (? x 4")
  assert trips_text([None]) == "trips unknown"
  assert trips_text([]) == ""


def test_unknown_outer_count_gives_at_least(tmp_path, capsys):
  # The pipeline with its schedule loop's recorded count taken away (a loop whose
  # bound XLA cannot prove; its condition is a fusion, which no reader counts): the
  # ring runs at least its own 4 trips.
  path = tmp_path / "pipeline_unknown.hlo"
  path.write_text(PIPELINE.read_text().replace('"known_trip_count":{"n":"7"}',
                                               '"known_trip_count":{}'))
  ring, shift = permutes(path)[8], permutes(path)[4]
  assert [n for _, _, n in ring.loops] == [4, None]
  assert ring.trip_count is None and ring.trips_at_least == 4
  assert shift.trip_count is None
  rc, out, err = run(capsys, "explain", path, "--topology=1x2x4", "--format=json")
  assert rc == 0, err
  ring_e, shift_e = sorted(json.loads(out)["collectives"], key=lambda e: -len(e["pairs"]))
  assert ring_e["modeled_loop_us"] == ring_e["modeled_us"]["chosen"] * 4
  assert shift_e["modeled_loop_us"] is None  # nothing known about how often it runs
  rc, out, _ = run(capsys, "explain", path, "--topology=1x2x4")
  assert "at least x4 trips (? x 4" in out and "trip count unknown" in out


def test_explain_text_shows_nested_trips(capsys):
  rc, out, err = run(capsys, "explain", PIPELINE, "--topology=1x2x4")
  assert rc == 0, err
  assert "x28 trips (7 x 4) = " in out
  assert "(trip count 4) inside while" in out and "(trip count 7)" in out


def test_report_saved_per_run_counts_every_loop():
  # A table where NVSHMEM wins on NVLink: the ring saves time on each of its 28 runs.
  explained = decisions.describe(str(PIPELINE), "1x2x4", str(FAST_NVSHMEM),
                                 use_driver=False)
  case = Case(id="pipeline", title="pipeline", topology="1x2x4")
  [ring_row] = [r for r in comparison_rows([{"case": case, "explain": explained}])
                if r["trip_count"] == 28]
  [e] = [e for e in explained["collectives"] if len(e["pairs"]) == 8]
  saved_once = e["modeled_us"]["nccl"] - e["modeled_us"]["chosen"]
  assert e["choice"]["plan"] == "nvshmem" and saved_once > 0
  assert abs(ring_row["saved_us_per_run"] - 28 * saved_once) < 1e-9
  assert ring_row["trips"] == "x28 trips (7 x 4)"


# ---------------------------------------------------------------------------------------
# report module:function takes every option that shapes the compile, as dump does

PIPELINE_FLAGS = ("--topology=1x2x4", "--mesh=pp:2,cp:4", "--nocheck_vma",
                  "--arg=6,64,32:f32:None,cp", "--arg=2,32,32:f32:pp", "--out_spec=None,cp")


def test_report_compiles_a_function_on_a_two_axis_mesh(capsys, tmp_path):
  rc, out, err = run(capsys, "report", "hlo_tools.programs.parallel_shapes:pipeline_ring",
                     *PIPELINE_FLAGS, "--quiet", f"--out={tmp_path / 'r'}")
  assert rc == 0, err
  report = json.loads((tmp_path / "r" / "report.json").read_text())
  [case] = report["cases"]
  manifest = json.loads((tmp_path / "r" / case["id"] / "dump" / "manifest.json").read_text())
  assert manifest["mesh"] == {"pp": 2, "cp": 4}
  assert sorted(p["trip_count"] for p in case["collective_permutes"]) == [7, 28]
  assert "verify: all checks pass" in out


def test_report_names_the_mesh_flag_it_takes(capsys, tmp_path):
  # Without --mesh the compile fails naming --mesh; report takes it (no dead end).
  flags = [f for f in PIPELINE_FLAGS if not f.startswith("--mesh")]
  rc, _, err = run(capsys, "report", "hlo_tools.programs.parallel_shapes:pipeline_ring",
                   *flags, "--quiet", f"--out={tmp_path / 'r'}")
  assert rc == 2 and "--mesh=" in err and "unrecognized" not in err


def test_dump_and_report_share_the_compile_options():
  from hlo_tools.commands import dump as dump_cmd, report as report_cmd  # pylint: disable=import-outside-toplevel
  def flags(parser):
    return {o for a in parser._actions for o in a.option_strings}  # pylint: disable=protected-access
  shared = {"--mesh", "--arg", "--out_spec", "--global", "--check_vma", "--nocheck_vma",
            "--target_config"}
  assert shared <= flags(dump_cmd._parser("dump")) & flags(report_cmd._parser("report"))  # pylint: disable=protected-access


def test_report_refuses_compile_options_for_a_file(capsys, tmp_path):
  rc, _, err = run(capsys, "report", PIPELINE, "--mesh=pp:2,cp:4", f"--out={tmp_path / 'r'}")
  assert rc == 2 and "--mesh applies to a module:function SOURCE" in err


# ---------------------------------------------------------------------------------------
# explain and verify take DIR:STAGE, as diff does; the manifest names before_async

def test_explain_and_verify_read_a_dump_stage(capsys, tmp_path):
  dump_dir = tmp_path / "pipeline"
  rc, _, err = run(capsys, "dump", "hlo_tools.programs.parallel_shapes:pipeline_ring",
                   *PIPELINE_FLAGS, "--all_passes", "--quiet", f"--out={dump_dir}")
  assert rc == 0, err
  manifest = json.loads((dump_dir / "manifest.json").read_text())
  assert manifest["stages"]["before_async"] == "before_async.hlo"
  assert (dump_dir / "before_async.hlo").read_text().startswith("HloModule")
  for stage in ("before_async", "after_optimizations"):
    rc, out, err = run(capsys, "explain", f"{dump_dir}:{stage}", "--format=json")
    assert rc == 0, err
    assert "using 1x2x4, the topology its dump was compiled for" in err
    result = json.loads(out)
    assert result["file"] == f"{dump_dir}:{stage}"
    assert sorted(e["trip_count"] for e in result["collectives"]) == [7, 28]
  rc, out, err = run(capsys, "verify", f"{dump_dir}:before_async")
  assert rc == 0, err
  assert f"{dump_dir}:before_async: all checks pass (topology 1x2x4" in out
  rc, _, err = run(capsys, "verify", f"{dump_dir}:no_such_stage")
  assert rc == 2 and "unknown stage 'no_such_stage'" in err


# ---------------------------------------------------------------------------------------
# The pre-optimization warning names the stage the tools actually used

def test_report_dir_does_not_warn_on_its_before_async_stage(capsys, tmp_path):
  # K and V rotated once: the module entering async-collective-creator has two
  # permutes and no fusion, as a module before optimizations looks.
  dump_dir = tmp_path / "kv"
  rc, _, err = run(capsys, "dump", "hlo_tools.programs.pass_tests:kv_step",
                   "--topology=1x1x2", "--arg=64,8:f32:cp", "--arg=64,8:f32:cp",
                   "--out_spec=cp", "--out_spec=cp", "--all_passes", "--quiet",
                   f"--out={dump_dir}")
  assert rc == 0, err
  assert "fusion" not in (dump_dir / "before_async.hlo").read_text()
  rc, out, err = run(capsys, "report", dump_dir, "--quiet", f"--out={tmp_path / 'r'}")
  assert rc == 0, err
  assert "before XLA's optimizations" not in out
  for spec, warned in ((f"{dump_dir}:before_async", False),
                       (dump_dir / "before_async.hlo", False),
                       (f"{dump_dir}:before_optimizations", True)):
    rc, out, err = run(capsys, "explain", spec)
    assert rc == 0, err
    assert ("before XLA's optimizations" in out) == warned, spec
