"""The report directory: what the NVSHMEM pass does to a program, case by case.

Per case the pass's rewrite, explain, verify, diff and the per-pass trace; an HTML
page with a chart of modeled time against message size; report.json. The cases
come from cases.py, their input modules from inputs.py, each case's analysis from
analyze.py; text.py puts the summary in words."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

from hlo_tools import bounded_input, selection
from hlo_tools.errors import InputError
from hlo_tools.model import options
from hlo_tools.ops import dump_compile, outdir
from hlo_tools.ops.report.analyze import Loaded, analyze_case, case_summary, derive_topology
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.inputs import prepare_inputs, write_text
from hlo_tools.ops.report.page import comparison_rows, render_page


def _check_out(out: str) -> None:
  if os.path.exists(out) and not os.path.isdir(out):
    raise InputError(f"--out {out}: exists and is not a directory")
  if (
    os.path.isdir(out) and os.listdir(out) and not os.path.exists(os.path.join(out, "report.json"))
  ):
    raise InputError(f"--out {out}: not empty and not an earlier report; refusing to replace it")


def _versions(work: str, results: list[dict[str, Any]]) -> dict[str, str]:
  for r in results:
    path = os.path.join(work, r["case"].id, "dump", "manifest.json")
    if os.path.exists(path):
      with open(path) as f:
        return json.load(f).get("versions")
  return dump_compile._local_versions()  # pylint: disable=protected-access


def _files(work: str) -> list[str]:
  out = []
  for root, _, names in os.walk(work):
    rel = os.path.relpath(root, work)
    if rel.split(os.sep)[1:2] == ["dump"]:
      continue  # the dump directories are listed by their manifest
    out += [os.path.normpath(os.path.join(rel, n)) for n in names]
  out += [
    os.path.join(d, "dump", "manifest.json")
    for d in os.listdir(work)
    if os.path.exists(os.path.join(work, d, "dump", "manifest.json"))
  ]
  return sorted(out)


def build(
  cases: list[Case],
  out: str,
  cost_table: str | None = None,
  num_partitions: int | None = None,
  progress: bool = True,
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
  backends: str | None = None,
  table: tuple[selection.CostTable, str | None] | None = None,
  per_op_xla: bool = options.PER_OP_MODES_DEFAULT,
) -> dict[str, Any]:
  """Builds the report directory; returns the report.json dict.

  backends: the set the target XLA offers ("nccl,peer"), else the cost table's.
  per_op_xla: the target XLA runs each permute's own mode (options.PER_OP_MODES_HELP).
  table: what options.load_table already gave for cost_table and backends (the
  command reads the table before anything else), else read here."""
  # Each input parsed once, bad ones failing before any compile: the table's file
  # and the backend set for every case, each case's topology unless its Case has it.
  loaded = Loaded(
    cost_table, *(table or options.load_table(cost_table, backends, max_bytes)), per_op_xla
  )
  options.check_target(loaded.table.backends, per_op_xla)
  offered = loaded.table.backends
  # The topology with the set's process layout (case.parsed has the spec's shape
  # only, parsed before the set was known).
  selected = {
    case.id: options.load(
      case.topology, cost_table, loaded=loaded.table_and_set, per_op_xla=per_op_xla
    )
    for case in cases
    if case.topology is not None
  }
  out = os.path.abspath(out)
  _check_out(out)
  work = outdir.make_work_dir(out)
  say = (
    (lambda m: print(f"hlo-tools report: {m}", file=sys.stderr, flush=True))
    if progress
    else (lambda m: None)
  )
  try:
    results, timings = [], {}
    for case in cases:
      t = time.monotonic()
      case_dir = os.path.join(work, case.id)
      stages, dump_dir, origin = prepare_inputs(case, case_dir, say, max_bytes)
      done = None
      if case.topology is None:
        selected[case.id], done = derive_topology(
          case, stages, origin, loaded, num_partitions, max_bytes, not progress
        )
      results.append(
        analyze_case(
          case, case_dir, stages, dump_dir, selected[case.id], num_partitions, say, done, origin
        )
      )
      timings[case.id] = time.monotonic() - t
    report: dict[str, Any] = {
      "cost_table": cost_table,
      "backends": offered,
      "versions": _versions(work, results),
      "timings_s": timings,
      "cases": [case_summary(r, r["case"].id) for r in results],
      "summary": {
        "comparison": comparison_rows(results),
        "overlap": {r["case"].id: r["overlap"] for r in results},
      },
    }
    folders = [c.folder for c in cases if c.folder]
    if folders:  # a dump folder of several programs: how many, which skipped and why
      report["folder"] = folders[0]
    report["summary"]["verify_passed"] = all(c["verify_passed"] for c in report["cases"])
    report["summary"]["failed_checks"] = sorted(
      {f for c in report["cases"] for f in c["failed_checks"]}
    )
    report["files"] = ["index.html", "report.json"] + _files(work)
    write_text(os.path.join(work, "report.json"), json.dumps(report, indent=1, default=str))
    write_text(os.path.join(work, "index.html"), render_page(report, results))
    # mkdtemp made the directory private; a report is for reading.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(work, 0o777 & ~umask)
    outdir.publish(work, out)
    report["out"] = out
    return report
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise
