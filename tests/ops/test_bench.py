"""hlo_tools.ops.bench (its __init__): the P1-P3 figures' statistics, module sizes,
summary table, and P3's timed diff."""

from hlo_tools.ops import bench

from conftest import ROOT


def test_stats_are_median_min_max_of_the_samples():
  st = bench.stats([3.0, 1.0, 2.0])
  assert st == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3, "samples": [3.0, 1.0, 2.0]}
  # An even count: the mean of the two middle samples.
  assert bench.stats([4.0, 1.0, 2.0, 3.0])["median"] == 2.5


# Hand-counted: 6 instructions (the ROOT one and the mesh-group all-reduce included),
# 2 collective-permutes (the sync one and the start; not the done), 10 newlines.
SMALL_MODULE = """HloModule m, num_partitions=8

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %cp = f32[8]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %s = (f32[8]{0}, f32[8]{0}) collective-permute-start(%cp), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %d = f32[8]{0} collective-permute-done(%s)
  %ar = f32[8]{0} all-reduce(%d), channel_id=3, replica_groups=mesh['a'=8] {'a'}, to_apply=%add
  ROOT %out = f32[8]{0} add(%ar, %p), metadata={op_name="µ"}
}
"""  # noqa: E501  (HLO as XLA prints it)


def test_module_size_counts_by_line_without_a_parser():
  size = bench._module_size(SMALL_MODULE)
  assert size["instructions"] == 6
  assert size["collective_permutes"] == 2
  assert size["lines"] == 10
  # Bytes, not characters: the "µ" in the metadata is two bytes in UTF-8.
  assert size["bytes"] == len(SMALL_MODULE) + 1


def _st(median, lo, hi):
  return {"median": median, "min": lo, "max": hi, "n": 3, "samples": [lo, median, hi]}


def _result(**figures):
  return {
    "quick": False,
    "runs": 5,
    "machine": {
      "cpu_model": "Test CPU",
      "cpus_usable": 2,
      "cpu_count": 4,
      "mem_total_gb": 16.0,
      "platform": "Linux-test",
    },
    "versions": {"jax": "0.10.2", "jaxlib": "0.10.2"},
    **figures,
  }


P1 = {
  "ratio": 0.001,
  "ratio_min": 0.0005,
  "ratio_max": 0.002,
  "goal": 0.005,
  "met": True,
  "pass_s": _st(0.002, 0.001, 0.003),
  "process_s": _st(0.5, 0.4, 0.6),
  "process_ratio": 0.25,
  "compile_s": _st(2.0, 1.5, 2.5),
  "module": {
    "num_layers": 1,
    "seq_len": 8192,
    "instructions": 1234,
    "collective_permutes": 4,
    "bytes": 2_500_000,
  },
}
P2 = {
  "ratio": 1.5,
  "ratio_min": 1.25,
  "ratio_max": 1.75,
  "goal": 1.0,
  "met": False,
  "ours_s": _st(0.5, 0.4, 0.6),
  "jaxlib_s": _st(0.25, 0.2, 0.3),
  "module": {"bytes": 12_000_000, "lines": 5000, "instructions": 4000, "ring_layers": 60},
  "memory": {
    "ours_rss_peak_mb": 100.0,
    "ours_tracemalloc_peak_mb": 80.0,
    "jaxlib_rss_peak_mb": 50.0,
    "rss_ratio": 2.0,
  },
}


def _line(text, start):
  [line] = [l for l in text.splitlines() if l.startswith(start)]
  return line


def test_table_gives_machine_versions_and_each_figure_against_its_goal():
  text = bench.table(_result(P1=P1, P2=P2))
  assert text.splitlines()[:3] == [
    "machine: Test CPU, 2 usable of 4 cores, 16.0 GB RAM; Linux-test",
    "versions: jax 0.10.2, jaxlib 0.10.2",
    "runs: 5",
  ]
  # P1 is a share of the compile, in percent; the others plain ratios.
  assert _line(text, "P1 pass overhead").split()[3:] == [
    "0.1000%",
    "[0.0500%,",
    "0.2000%]",
    "0.5%",
    "yes",
  ]
  assert _line(text, "P2 reader speed").split()[3:] == ["1.50", "[1.25,", "1.75]", "1.0", "NO"]
  assert not [l for l in text.splitlines() if l.startswith("P3")]  # not run, not listed
  # Raw times: median [min, max] in the unit each line names.
  assert "P1 nvshmem-opt pass      2000 [1000, 3000] us" in text
  assert "P1 XLA compile           2.00 [1.50, 2.50] s" in text
  assert "P2 hlo_text parse        500.0 [400.0, 600.0] ms" in text
  assert "P2 jaxlib parse          250.0 [200.0, 300.0] ms" in text
  assert "12.0 MB, 5000 lines, 4000 instructions (60-step ring)" in text
  assert "start-up; 25.000% of compile)" in text


def test_table_says_quick_sizes_are_too_small_for_the_goals():
  text = bench.table(dict(_result(P2=P2), quick=True, runs=1))
  assert "runs: 1 (--quick: sizes too small for the goals)" in text.splitlines()


def test_table_lists_a_skipped_figure_as_skipped():
  text = bench.table(_result(P1={"skipped": "nvshmem-opt not built"}, P2=P2))
  assert "P1 pass overhead     skipped: nvshmem-opt not built" in text


def _record(monkeypatch, events):
  """Notes each collector freeze/unfreeze/disable/enable and each diff, in order, and
  still does them."""
  import gc  # pylint: disable=import-outside-toplevel

  from hlo_tools.ops import diff  # pylint: disable=import-outside-toplevel

  real = {
    "freeze": gc.freeze,
    "unfreeze": gc.unfreeze,
    "disable": gc.disable,
    "enable": gc.enable,
    "diff": diff.diff_sources,
  }

  def noting(name, module, attr):
    def call(*args, **kwargs):
      events.append(name)
      return real[name](*args, **kwargs)

    monkeypatch.setattr(module, attr, call)

  noting("freeze", gc, "freeze")
  noting("unfreeze", gc, "unfreeze")
  noting("disable", gc, "disable")
  noting("enable", gc, "enable")
  noting("diff", diff, "diff_sources")


def test_p3_times_the_diff_as_the_command_runs_it(monkeypatch, tmp_path):
  """P3's timed diff runs under the collector setting `hlo-tools diff` runs it under:
  whatever the command does to the collector between reading and diffing, the bench
  does too (and undoes it after each run, where the command exits)."""
  import gc  # pylint: disable=import-outside-toplevel

  from hlo_tools.commands import diff as diff_command  # pylint: disable=import-outside-toplevel
  from hlo_tools.ops import bench  # pylint: disable=import-outside-toplevel

  fixtures = ROOT / "tests" / "fixtures"
  path_a = fixtures / "ring_1x1x8.before_async.hlo"
  path_b = fixtures / "ring_1x1x8.after_optimizations.hlo"
  command: list[str] = []
  _record(monkeypatch, command)
  try:
    assert (
      diff_command.main(
        [
          "hlo-tools diff",
          str(path_a),
          str(path_b),
          "--format=json",
          "--out",
          str(tmp_path / "diff.json"),
        ]
      )
      == 0
    )
  finally:
    monkeypatch.undo()
    gc.enable()  # whatever the command left, the rest of the session collects
  timed: list[str] = []
  _record(monkeypatch, timed)
  bench._time_diff(path_a.read_text(), path_b.read_text(), runs=2)
  before_diff = command[: command.index("diff")]
  assert "freeze" in before_diff and "disable" in before_diff, command
  assert timed == command * 2, (timed, command)
  assert gc.isenabled() and gc.get_freeze_count() == 0
