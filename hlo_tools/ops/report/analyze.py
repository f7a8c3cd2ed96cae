"""One case analysed: nvshmem-opt on each stage, explain, verify, diff and trace; its JSON."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

from hlo_tools import messages, selection
from hlo_tools.errors import InputError
from hlo_tools.hlo import buffer_assignment
from hlo_tools.model import description, driver, dumps, options, placement, sources
from hlo_tools.model.driver_report import Report
from hlo_tools.model.topology import derived_notes
from hlo_tools.ops import diff, explain, ring_overlap, verify
from hlo_tools.ops.report.cases import PROG, Case
from hlo_tools.ops.report.chart import chart_data
from hlo_tools.ops.report.inputs import write_text


@dataclasses.dataclass(frozen=True)
class Loaded:
  """The cost table read once for every case, and the backend set given."""

  cost_table: str | None  # the table's file, None for the built-in one
  table: selection.CostTable
  backends: str | None  # the set given (the core's spelling), None: the table's
  per_op_xla: bool = options.PER_OP_MODES_DEFAULT  # the target XLA (options.Selection)

  @staticmethod
  def of(selected: options.Selection) -> Loaded:
    return Loaded(selected.cost_table, selected.table, selected.backends, selected.per_op_xla)

  @property
  def table_and_set(self) -> tuple[selection.CostTable, str | None]:
    return self.table, self.backends

  def driver_table(self) -> selection.CostTable | None:
    """As nvshmem-opt is given it: on stdin where the user gave a file."""
    return self.table if self.cost_table else None


def derive_topology(
  case: Case,
  stages: dict[str, str],
  origin: str,
  loaded: Loaded,
  num_partitions: int | None,
  max_bytes: int,
  quiet: bool,
) -> tuple[options.Selection, dict[str, tuple[Report, str]]]:
  """The case's topology from nvshmem-opt's rewrite of its first input (a copy of
  the user's module, placed by XLA's config beside `origin`), as the pass derives it
  inside XLA; said on stderr. Returns the case's Selection and that run's
  {stage: (report, output)}, which analyze_case takes instead of running it again."""
  stage, done = _first_stage_run(case, stages, origin, None, loaded, num_partitions)
  spec = done[0]["spec"]
  # Placed as the driver placed it: its JSON says where the map came from.
  selected = placement.from_report(
    options.load(
      spec,
      loaded.cost_table,
      loaded=loaded.table_and_set,
      per_op_xla=loaded.per_op_xla,
      topology=driver.placed_topology(done[0]),
    ),
    done[0],
  )
  note, warning = derived_notes(
    PROG,
    case.label or stages[stage],
    spec,
    selected.topology,
    done[0]["other_host_shapes"],
    case.devices_per_host,
    done[0]["num_partitions"] * done[0]["num_replicas"],
  )
  if not quiet:
    messages.print_error(note)
  if warning:  # loud even with --quiet: every choice depends on it
    messages.print_error(warning)
  shown = case.label if case.program is None else f"{case.label}:{case.program}"
  case.topology, case.parsed, case.title = spec, selected.topology, f"{shown} on {spec}"
  return selected, {stage: done}


def place_topology(
  case: Case,
  stages: dict[str, str],
  origin: str | None,
  selected: options.Selection,
  num_partitions: int | None,
) -> tuple[options.Selection, dict[str, tuple[Report, str]]]:
  """The case's given topology on the module's own device map, as nvshmem-opt's
  rewrite of its first input placed it (from XLA's config beside `origin`, which
  the driver reads). Returns the placed Selection and that run's {stage: (report,
  output)}, which analyze_case takes instead of running it again."""
  stage, done = _first_stage_run(
    case, stages, origin, selected.spec, Loaded.of(selected), num_partitions
  )
  return placement.from_report(selected, done[0]), {stage: done}


def _first_stage_run(
  case: Case,
  stages: dict[str, str],
  origin: str | None,
  spec: str | None,
  loaded: Loaded,
  num_partitions: int | None,
) -> tuple[str, tuple[Report, str]]:
  """nvshmem-opt on the case's first input, placed by XLA's config beside `origin`
  (spec None: the driver derives the topology): (that stage, (report, output))."""
  stage, path = next(iter(stages.items()))
  case_dir = os.path.dirname(os.path.dirname(path))
  module_config = placement.config_path(origin)
  return stage, _run_pass(
    case_dir, stage, path, case, spec, loaded, num_partitions, module_config=module_config
  )


def input_label(case: Case, stage: str, copy: str) -> str:
  """How messages name a stage's input: the user's FILE (or <stdin>) as given, a
  dump's DIR:STAGE; `copy`, the report's own file, only for a program compiled here.
  The copy under hlo/ holds the same text, so its line numbers are the input's."""
  if case.path is None:
    return copy
  label = case.label or case.path
  if case.program is not None:
    label = f"{label}:{case.program}"
  return label if stage == "input" else f"{label}:{stage}"


def _run_pass(
  case_dir: str,
  stage: str,
  path: str,
  case: Case,
  spec: str | None,
  loaded: Loaded,
  partitions: int | None,
  module_config: str | None = None,
) -> tuple[Report, str]:
  """nvshmem-opt (rewrite, upstream beside it) on one stage; (report, output path).
  Without a spec the driver derives the topology."""
  hlo_dir, json_dir = os.path.join(case_dir, "hlo"), os.path.join(case_dir, "json")
  os.makedirs(json_dir, exist_ok=True)
  out = os.path.join(hlo_dir, f"{stage}.nvshmem.hlo")
  try:
    rc, report, message = driver.run_nvshmem_opt(
      path,
      spec,
      loaded.driver_table(),
      mode="rewrite",
      out=out,
      compare_upstream=True,
      num_partitions=partitions,
      tmp_dir=json_dir,
      annotate=True,
      backends=loaded.backends,
      per_op_modes=loaded.per_op_xla,
      devices_per_host=case.devices_per_host,
      module_config=module_config,
    )
  except FileNotFoundError as e:
    raise InputError(f"{PROG}: {e}") from None
  if rc != 0 or report is None:
    # The driver names the copy under the work directory, which is gone by the time
    # the user reads this: name the input the user gave instead.
    label = (
      input_label(case, stage, case.label or case.id)
      if case.path
      else (case.id if stage == "input" else f"{case.id}:{stage}")
    )
    message = message.replace(os.fspath(path), label) or f"{label}: no message"
    raise InputError(f"{PROG}: nvshmem-opt exit {rc}: {message}")
  write_text(os.path.join(json_dir, f"pass_{stage}.json"), json.dumps(report, indent=1))
  return report, out


# nvshmem-opt's rewrite re-reads the text it writes and runs XLA's verifier on it.
VERIFIED_BY_PASS = "HloVerifier accepts the module (nvshmem-opt verified the text it wrote)"


def analyze_case(
  case: Case,
  case_dir: str,
  stages: dict[str, str],
  dump_dir: str | None,
  selected: options.Selection,
  num_partitions: int | None,
  say: Callable[[str], None],
  done: dict[str, tuple[Report, str]] | None = None,
  origin: str | None = None,
) -> dict[str, Any]:
  """Runs the pass, explain, verify, diff and trace; writes json/; returns the results.
  selected: the case's options.Selection (topology, cost table, backends).
  done: {stage: (report, output)} of the pass runs already made (derive_topology);
  else the first run places `selected` by XLA's config beside `origin`."""
  json_dir = os.path.join(case_dir, "json")
  os.makedirs(json_dir, exist_ok=True)
  rel = lambda p: os.path.relpath(p, os.path.dirname(case_dir))
  parsed = {
    s: sources.resolve_partitions(
      sources.read_source(p, input_label(case, s, rel(p))), selected.topology, num_partitions
    )
    for s, p in stages.items()
  }
  first = next(iter(stages))
  partitions = num_partitions  # the user's; else the driver settles each module's
  say(f"{case.id}: running nvshmem-opt, explain, verify, diff")
  if done is None:  # after the reader, so that bad input is named by its line
    selected, done = place_topology(case, stages, origin, selected, num_partitions)
  topology, table = selected.topology, selected.table
  passes, rewritten, outputs = {}, {}, {}
  for stage, path in stages.items():
    passes[stage], out = (done or {}).get(stage) or _run_pass(
      case_dir, stage, path, case, selected.spec, Loaded.of(selected), partitions
    )
    outputs[stage] = out
    placed = buffer_assignment.sibling_path(path)
    if buffer_assignment.found(placed):  # the rewrite keeps every instruction's name
      buffer_assignment.copy(placed, buffer_assignment.sibling_path(out))
    rewritten[stage] = sources.resolve_partitions(
      sources.read_source(out, rel(out)), topology, num_partitions
    )
  explained = description.describe(
    stages[first], selected, source=parsed[first], report=passes[first]
  )
  explain.add_program(
    explained, parsed[first], selected, per_op_xla=selected.per_op_xla, report=passes[first]
  )
  verified = {
    s: verify.verify(
      outputs[s],
      selected,
      source=rewritten[s],
      num_partitions=num_partitions,
      verified_by=VERIFIED_BY_PASS,
      per_op_xla=selected.per_op_xla,
      given=parsed[s],
      config_report=passes[s],
    )
    for s in stages
  }
  # A plan the input already carries (hand-edited, another pass) that its runtime
  # cannot run fails the report even though the pass's rewrite replaces it.
  for s in stages:
    given = verify.verify(
      stages[s],
      selected,
      run_driver=False,
      source=parsed[s],
      num_partitions=num_partitions,
      only=verify.SAFETY_CHECKS,
      config_report=passes[s],
    )
    if not given["passed"]:
      given["file"] = f"{case.label or case.id}{'' if s == 'input' else ':' + s} (as given)"
      verified[f"{s}_as_given"] = given
  diffs = {s: diff.diff_sources(parsed[s], rewritten[s]) for s in stages}
  trace = _trace(dump_dir, case.program)
  chart = chart_data(topology, table, explained, parsed[first])
  for name, value in (
    [("explain", explained), ("trace", trace), ("chart", chart)]
    + [(f"verify_{s}", v) for s, v in verified.items()]
    + [(f"diff_{s}", diff.to_json(d)) for s, d in diffs.items()]
  ):
    write_text(os.path.join(json_dir, f"{name}.json"), json.dumps(value, indent=1))
  # A dump's stages are named (before_async first), and so is a FILE of a dump
  # directory by its manifest; only another FILE is judged by its structure.
  stage = first if first != "input" else dumps.manifest_stage(case.path or "") or ""
  if (
    stage in ("before_optimizations", "lowered")
    if stage
    else explain.is_pre_optimization(parsed[first].module, explained["collectives"])
  ):
    explained["note"] = explain.PRE_OPTIMIZATION_NOTE
  if explained.get("topology_note"):  # a topology larger than the module
    explained["note"] = " ".join(filter(None, (explained.get("note"), explained["topology_note"])))
  # The scheduled module says whether the permutes overlap compute.
  scheduled = parsed.get("after_optimizations") or parsed[first]
  return {
    "case": case,
    "stages": list(stages),
    "explain": explained,
    "passes": passes,
    "verify": verified,
    "diff": diffs,
    "trace": trace,
    "chart": chart,
    "sources": parsed,
    "rewritten": rewritten,
    "first": first,
    "dump_dir": dump_dir,
    "overlap": ring_overlap.permute_windows(scheduled.text),
  }


def _trace(dump_dir: str | None, program: str | None = None) -> dict[str, Any] | None:
  if dump_dir is None:
    return None
  try:
    return diff.trace(dump_dir, program)
  except InputError:
    return None  # a dump without per-pass snapshots: nothing to trace


def case_summary(result: dict[str, Any], case_dir_name: str) -> dict[str, Any]:
  """The case's entry in report.json."""
  case = result["case"]
  verified = result["verify"]
  files = sorted(
    os.path.join(case_dir_name, sub, f)
    for sub in ("json", "hlo")
    for f in result.get("_files", {}).get(sub, [])
  )
  return {
    "id": case.id,
    "title": case.title,
    "topology": case.topology,
    "config": case.config,
    "input": case.label or case.path,
    "stages": result["stages"],
    # The program of a dump folder of several (its module key), else None.
    "dump_program": case.program,
    "collective_permutes": [
      {
        k: e[k]
        for k in (
          "instruction",
          "computation",
          "bytes",
          "buffers",
          "edges_by_class",
          "modeled_us",
          "choice",
          "choice_collectives_mode",
          "backends",
          "reason",
          "trip_count",
          "runs_per_step",
          "runs_bound",
          "under_branch",
          "user_mark",
        )
        if k in e
      }
      | {"upstream": e["upstream"]["backend"]}
      for e in result["explain"]["collectives"]
    ],
    "note": result["explain"].get("note"),
    # The process layout and the device order every verdict of the case rests on.
    "processes": result["explain"].get("processes"),
    "placement": result["explain"].get("placement"),
    "program": {k: v for k, v in (result["explain"].get("program") or {}).items() if k != "runs"},
    "verify_passed": all(v["passed"] for v in verified.values()),
    "failed_checks": sorted({c for v in verified.values() for c in v["failed_checks"]}),
    "files": files,
  }
