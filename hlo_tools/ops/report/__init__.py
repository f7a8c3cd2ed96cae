"""What the NVSHMEM pass does to a program, as a report directory: per case the pass's
rewrite, explain, verify, diff and the per-pass trace; an HTML page with a chart of
modeled time against message size; report.json."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from hlo_tools import cli_io, selection
from hlo_tools.errors import InputError
from hlo_tools.hlo import buffer_assignment, module_config, proto
from hlo_tools.model import decisions, driver, dumps, options, placement, sources
from hlo_tools.model.collectives import per_step_sum
from hlo_tools.model.driver_report import Report
from hlo_tools.model.topology import derived_notes, jax_topology, manifest_note
from hlo_tools.ops import diff, dump, explain, outdir, program_text, ring_overlap, verify
from hlo_tools.ops.report.chart import chart_data
from hlo_tools.ops.report.page import comparison_rows, fmt_us, page_title, render_page
from hlo_tools.ops.sizes import format_bytes

DEFAULTS = {
  "seq_len": 131072,
  "num_heads": 32,
  "num_kv_heads": 8,
  "head_dim": 128,
  "batch": 1,
  "dtype": "bf16",
  "causal": True,
  "backward": False,
}
DEFAULT_TOPOLOGY = "1x2x4"
# The embedded default: one host vs two, short vs long context.
DEFAULT_GRID = (("1x1x8", 4096), ("1x1x8", 131072), ("1x2x4", 4096), ("1x2x4", 131072))
# The seed's layout on 2 hosts x 8: the mesh's last axis spans consecutive device ids,
# so cp is the 8 GPUs of a host (the ring on NVLink) and tp spans the two hosts.
SEED_MESH = "tp:2,cp:8"
# The train step beside the ring, as (topology, mesh or None for dump's default, tokens):
# one host (cp 4 x tp 2); tp inside each host with the ring across the two (cp 2 x tp 8),
# where NVSHMEM cannot run at the pin; the seed's layout at 64K, 128K and 256K tokens
# (each compiles deviceless in 16-25 s on 2 cores, whatever the length).
DEFAULT_TRAIN_STEPS = (
  ("1x1x8", None, 65536),
  ("1x2x8", None, 65536),
  ("1x2x8", SEED_MESH, 65536),
  ("1x2x8", SEED_MESH, 131072),
  ("1x2x8", SEED_MESH, 262144),
)
DEFAULT_OUT = "nvshmem_report"
PROG = "hlo-tools report"


def parse_topology_arg(spec: str) -> tuple[str, str, selection.Topology]:
  """(SxHxG to compile for, the spec, the core's Topology): the spec in the core's
  grammar, parsed once by the core, whose one-line error a bad one raises.
  '1x9x8:nvl72' -> ('1x9x8', '1x9x8:nvl72', Topology)."""
  topology = selection.parse_topology(spec)
  return jax_topology(topology), spec, topology


# ---------------------------------------------------------------------------------------
# What to report on


@dataclasses.dataclass
class Case:
  """One configuration: a module (or a program to compile) on one topology."""

  id: str  # directory name inside DIR
  title: str
  topology: str | None  # the selection core's spec; None: the driver derives it
  parsed: selection.Topology | None = None  # the core's Topology of `topology`, when already parsed
  compile_topology: str | None = None  # SxHxG, for programs compiled here
  source: dict | None = None  # a dump.dump() source: ring or module:function
  config: dict | None = None  # the ring's shapes
  path: str | None = None  # FILE or DIR given by the user
  label: str | None = None  # how messages name the input: as given, or <stdin>
  target_config: str | None = None  # the GPU target config to compile for (default: H200)
  devices_per_host: int | None = None  # a FILE or DIR whose topology the driver derives
  program: str | None = None  # the module key of one program of a DIR of several
  # A DIR of several programs: how many it holds, which were skipped and why.
  folder: dict | None = None


def _tokens(n: int) -> str:
  return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def ring_case(config: dict[str, Any], topology_arg: str) -> Case:
  compile_topo, spec, parsed = parse_topology_arg(topology_arg)
  return Case(
    id=f"{spec.replace(':', '_')}-{_tokens(config['seq_len'])}",
    title=f"ring attention, {_tokens(config['seq_len'])} tokens, on {spec}",
    topology=spec,
    parsed=parsed,
    compile_topology=compile_topo,
    source={"kind": "ring", "config": config},
    config=config,
  )


def train_step_case(topology: str, mesh: str | None = None, seq_len: int = 65536) -> Case:
  """The built-in train step on `topology` (SxHxG) and `mesh` ('tp:2,cp:8', slowest axis
  first; None: dump's default mesh for the topology) at seq_len tokens."""
  source = {"kind": "program", "program": "train_step", "config": {"seq_len": seq_len}}
  if mesh is not None:
    source["mesh"] = mesh
  axes = dump.resolve_mesh(source, dump.Target(topology=topology), mesh)
  layout = " x ".join(f"{name} {size}" for name, size in axes)
  return Case(
    id=f"train_step-{topology}-{'_'.join(f'{n}{s}' for n, s in axes)}-{_tokens(seq_len)}",
    title=f"Llama train step ({layout}), {_tokens(seq_len)} tokens, on {topology}",
    topology=topology,
    compile_topology=topology,
    source=source,
  )


@dataclasses.dataclass
class Request:
  """What a command line asks `report` for, flags already turned into values."""

  source: str | None = None  # None: the embedded default; FILE, DIR, '-' or module:function
  config: dict | None = None  # the ring's shapes
  explicit: bool = False  # a ring option or --topology given: that one ring only
  topology: str | None = None  # --topology; None: the default, the manifest's or derived
  stdin_path: str | None = None  # for '-': the file holding what stdin gave
  function_source: dict | None = None  # for module:function: the ops.dump source
  target_config: str | None = None
  devices_per_host: int | None = None  # FILE or DIR without --topology
  num_partitions: int | None = None
  max_input_bytes: int = cli_io.DEFAULT_MAX_INPUT_BYTES
  quiet: bool = False


@dataclasses.dataclass(frozen=True)
class Loaded:
  """The cost table read once for every case, and the backend set given."""

  cost_table: str | None  # the table's file, None for the built-in one
  table: selection.CostTable
  backends: str | None  # the set given (the core's spelling), None: the table's

  @staticmethod
  def of(selected: options.Selection) -> Loaded:
    return Loaded(selected.cost_table, selected.table, selected.backends)

  @property
  def table_and_set(self) -> tuple[selection.CostTable, str | None]:
    return self.table, self.backends

  def driver_table(self) -> selection.CostTable | None:
    """As nvshmem-opt is given it: on stdin where the user gave a file."""
    return self.table if self.cost_table else None


def plan_cases(request: Request) -> list[Case]:
  """The cases a Request asks for (see the module docstring)."""
  topology = request.topology or DEFAULT_TOPOLOGY
  if request.source is None:
    config = request.config or dict(DEFAULTS)
    if request.explicit:
      return [ring_case(config, topology)]
    return [ring_case(dict(config, seq_len=n), topo) for topo, n in DEFAULT_GRID] + [
      train_step_case(*entry) for entry in DEFAULT_TRAIN_STEPS
    ]
  path = request.stdin_path or request.source
  label = "<stdin>" if request.source == "-" else request.source
  picked = None  # DIR:PROGRAM, one program of a dump folder of several
  folder, _, name = request.source.rpartition(":")
  if not os.path.exists(path) and folder and os.path.isdir(folder):
    picked = dumps.resolve_program(folder, name)
    path = label = folder
  name = (
    "stdin"
    if label == "<stdin>"
    else re.sub(
      r"[^\w.-]+", "_", os.path.basename(os.path.normpath(label if picked else request.source))
    )
  )
  if os.path.isdir(path) or os.path.isfile(path):
    # As the pass does inside XLA: from the dump's manifest, else the module itself
    # (nvshmem-opt's first run on it, in build).
    spec = request.topology or manifest_topology(path, label, request)
    programs: list[str | None] = [picked] if picked else [None]
    folder_info = None
    if os.path.isdir(path) and picked is None:
      kept, skipped = dumps.select_programs(path, max_bytes=request.max_input_bytes)
      main = dumps.main_key(path, dumps.index_xla_dump(dumps.xla_dir_of(path)))
      if len(kept) > 1 or (kept and kept[0] != main):
        folder_info = {
          "programs_total": len(kept) + len(skipped),
          "decided": list(kept),
          "skipped": [{"program": k, "reason": why} for k, why in skipped],
          "note": dumps.programs_note(label, kept, skipped),
        }
        programs = list(kept)
    cases = []
    for program in programs:
      shown = label if program is None else f"{label}:{program}"
      case = Case(
        id=name if program is None else f"{name}-{program}",
        title=f"{shown} on {spec}",
        topology=spec,
        path=os.path.abspath(path),
        label=label,
        devices_per_host=request.devices_per_host,
        program=program,
        folder=folder_info,
      )
      if spec is not None:
        case.parsed = parse_topology_arg(spec)[2]
      cases.append(case)
    return cases
  compile_topo, spec, parsed = parse_topology_arg(topology)
  if request.function_source is not None:
    return [
      Case(
        id=name,
        title=f"{request.source} on {spec}",
        topology=spec,
        parsed=parsed,
        compile_topology=compile_topo,
        source=request.function_source,
        target_config=request.target_config,
      )
    ]
  raise InputError(f"{request.source}: no such file or directory, and not module:function")


def manifest_topology(path: str, label: str, request: Request) -> str | None:
  """The topology of a DIR without --topology from its manifest, said on stderr;
  None: nvshmem-opt derives it from the module (derive_topology)."""
  spec = dumps.manifest_topology(path) if os.path.isdir(path) else None
  if spec is None:
    return None
  if request.devices_per_host is not None:
    raise InputError(
      f"{PROG}: --devices-per-host: {path} was compiled for {spec} "
      "(its manifest); give --topology to report it on another"
    )
  if not request.quiet:
    cli_io.print_error(manifest_note(PROG, label, spec))
  return spec


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
  stage, path = next(iter(stages.items()))
  case_dir = os.path.dirname(os.path.dirname(path))
  done = _run_pass(
    case_dir,
    stage,
    path,
    case,
    None,
    loaded,
    num_partitions,
    module_config=placement.config_path(origin),
  )
  spec = done[0]["spec"]
  # Placed as the driver placed it: its JSON says where the map came from.
  selected = placement.from_report(
    options.load(spec, loaded.cost_table, loaded=loaded.table_and_set), done[0]
  )
  note, warning = derived_notes(
    PROG, case.label or path, spec, selected.topology, case.devices_per_host
  )
  if not quiet:
    cli_io.print_error(note)
  if warning:  # loud even with --quiet: every choice depends on it
    cli_io.print_error(warning)
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
  stage, path = next(iter(stages.items()))
  case_dir = os.path.dirname(os.path.dirname(path))
  done = _run_pass(
    case_dir,
    stage,
    path,
    case,
    selected.spec,
    Loaded.of(selected),
    num_partitions,
    module_config=placement.config_path(origin),
  )
  return placement.from_report(selected, done[0]), {stage: done}


# ---------------------------------------------------------------------------------------
# Inputs of one case: hlo/before_async.hlo (and hlo/after_optimizations.hlo)


def _write(path: str, text: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def _compiled_inputs(case: Case, case_dir: str, say: Callable[[str], None]) -> str:
  """Compiles the case's program with every pass dumped; returns its dump directory."""
  dump_dir = os.path.join(case_dir, "dump")
  assert case.source is not None, "a case without a path compiles its source"
  say(f"{case.id}: compiling for {case.compile_topology} (deviceless, all passes)")
  try:
    # The whole spec for the manifest, its SxHxG (already parsed) for jax.
    target = dump.Target(
      topology=case.topology,
      parsed=case.parsed,
      target_config=case.target_config or dump.DEFAULT_TARGET_CONFIG,
    )
    dump.dump(
      case.source,
      dump_dir,
      target=target,
      all_passes=True,
      options=dict(case.config or {}),
      progress=False,
    )
  except dump.DumpError as e:
    raise InputError(f"hlo-tools report: compile failed: {e}") from None
  return dump_dir


def _file_text(path: str, max_bytes: int, label: str | None = None) -> tuple[str, str | None]:
  """(HLO text of FILE, a module config placing it or None): text as is; a serialized
  module (XLA's X.hlo.pb, an HloProto, or a bare HloModuleProto) printed by jaxlib,
  with the device assignment it carries as a config.
  label: how errors name the file (the user's spelling of it)."""
  label = label or path
  data = cli_io.read_input(path, max_bytes, label)
  if proto.looks_like_text(data) or b"\0" not in data[:4096] and proto.module_bytes(data) is None:
    return data.decode("utf-8", errors="replace"), None
  module = proto.module_bytes(data)
  if module is None:
    raise InputError(f"{label}: neither HLO text nor a serialized HloModuleProto")
  assignment = proto.device_assignment(module, label)
  return (
    proto.to_text(module, label, assignment),
    proto.config_text(assignment) if assignment is not None else None,
  )


def prepare_inputs(
  case: Case, case_dir: str, say: Callable[[str], None], max_bytes: int
) -> tuple[dict[str, str], str | None, str]:
  """Writes the case's input modules under hlo/; returns ({stage: path}, dump dir,
  the module file whose XLA config places its devices)."""
  hlo_dir = os.path.join(case_dir, "hlo")
  os.makedirs(hlo_dir, exist_ok=True)
  dump_dir = None
  if case.path is not None and os.path.isfile(case.path):
    text, config = _file_text(case.path, max_bytes, case.label)
    copy = os.path.join(hlo_dir, "input.hlo")
    _write(copy, text)
    # The config beside the user's file places it; else the proto's own assignment.
    if config is not None and placement.config_path(case.path) is None:
      _write(module_config.sidecar_path(copy), config)
      return {"input": copy}, None, copy
    return {"input": copy}, None, case.path
  dump_dir = case.path if case.path is not None else _compiled_inputs(case, case_dir, say)
  stages = {}
  for stage in ("before_async", "after_optimizations"):
    try:
      src = dumps.read_stage(dump_dir, stage, max_bytes, case.program)
    except InputError:
      continue  # a dump without every pass has no before_async
    stages[stage] = os.path.join(hlo_dir, f"{stage}.hlo")
    _write(stages[stage], src.text)
    # XLA's buffer assignment of the module, where it dumped one, goes with the copy
    # (and the pass's output): report's verify then judges what verify would.
    placed = src.path and buffer_assignment.sibling_path(src.path)
    if placed and os.path.isfile(placed):
      shutil.copyfile(placed, buffer_assignment.sibling_path(stages[stage]))
  if not stages:
    raise InputError(
      f"{dump_dir}: no after_optimizations module and no per-pass snapshots in this dump directory"
    )
  if case.program is None:
    return stages, dump_dir, dump_dir
  # One program of several: any of its files in the dump leads to its own config.
  return stages, dump_dir, dumps.program_file(dump_dir, case.program)


# ---------------------------------------------------------------------------------------
# Analysis of one case


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
  _write(os.path.join(json_dir, f"pass_{stage}.json"), json.dumps(report, indent=1))
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
    if os.path.isfile(placed):  # the rewrite keeps every instruction's name
      shutil.copyfile(placed, buffer_assignment.sibling_path(out))
    rewritten[stage] = sources.resolve_partitions(
      sources.read_source(out, rel(out)), topology, num_partitions
    )
  explained = decisions.describe(
    stages[first], selected, source=parsed[first], report=passes[first]
  )
  explain.add_program(explained, parsed[first], selected, report=passes[first])
  verified = {
    s: verify.verify(
      outputs[s],
      selected,
      source=rewritten[s],
      num_partitions=num_partitions,
      verified_by=VERIFIED_BY_PASS,
      per_op_xla=True,
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
    _write(os.path.join(json_dir, f"{name}.json"), json.dumps(value, indent=1))
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


# ---------------------------------------------------------------------------------------
# Building the directory


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
  return dump._local_versions()  # pylint: disable=protected-access


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
  max_bytes: int = cli_io.DEFAULT_MAX_INPUT_BYTES,
  backends: str | None = None,
) -> dict[str, Any]:
  """Builds the report directory; returns the report.json dict.

  backends: the set the target XLA offers ("nccl,peer"), else the cost table's."""
  # Each input parsed once, bad ones failing before any compile: the table's file
  # and the backend set for every case, each case's topology unless its Case has it.
  loaded = Loaded(cost_table, *options.load_table(cost_table, backends))
  offered = loaded.table.backends
  # The topology with the set's process layout (case.parsed has the spec's shape
  # only, parsed before the set was known).
  selected = {
    case.id: options.load(case.topology, cost_table, loaded=loaded.table_and_set)
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
    _write(os.path.join(work, "report.json"), json.dumps(report, indent=1, default=str))
    _write(os.path.join(work, "index.html"), render_page(report, results))
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


def summary_text(report: dict[str, Any]) -> str:
  lines = [
    f"{page_title(report.get('backends'))}: {len(report['cases'])} configuration(s), "
    f"cost table {report['cost_table'] or 'default'}"
    + (f", backends {report['backends']}" if report.get("backends") else "")
  ]
  if report.get("folder"):
    lines.append(f"  {report['folder']['note']}")
  lines += [
    f"  {c['title']}: no collective-permutes, nothing for the pass to decide"
    for c in report["cases"]
    if not c["collective_permutes"]
  ]
  lines += [f"  {c['title']}: {c['note']}" for c in report["cases"] if c.get("note")]
  lines += [
    f"  {c['title']}: {c['processes']}; {c['placement']}"
    for c in report["cases"]
    if c.get("processes") and c["collective_permutes"]
  ]
  lines += [
    f"  {c['title']}: {program_text.summary(c['program'])}"
    for c in report["cases"]
    if (c.get("program") or {}).get("permutes")
  ]
  rows = report["summary"]["comparison"]
  # Upstream's assigner picks only NVSHMEM: no alternative under a set without it.
  offers_nvshmem = "nvshmem" in str(report.get("backends") or "nvshmem").split(",")
  for i, row in enumerate(rows):
    if i == 0 or rows[i - 1]["case"] != row["case"]:  # the configuration, then its permutes
      lines.append(
        step_line(
          [r for r in rows if r["case"] == row["case"]],
          report["summary"].get("overlap", {}).get(row["case"]),
        )
      )
    edges = ", ".join(f"{k} {v}" for k, v in row["edges_by_class"].items() if v)
    trips = f" {row['trips']}" if row.get("trips") else ""
    lines.append(
      f"  {row['title']}: %{row['instruction']} ({format_bytes(row['bytes'])}"
      f"/device{trips}; {edges}): {row['plan']}"
      + (f" ({row['collectives_mode']})" if row.get("collectives_mode") else "")
      + f", nccl {fmt_us(row['nccl_us'])} us, "
      + _others_text(row)
      + (f"; upstream {row['upstream']}" if offers_nvshmem else "")
      + f"; {row['verdict']}"
    )
  s = report["summary"]
  lines.append(
    "verify: "
    + ("all checks pass" if s["verify_passed"] else "FAILED " + ", ".join(s["failed_checks"]))
  )
  lines.append(f"report: {os.path.join(report['out'], 'index.html')}")
  return "\n".join(lines)


def _per_step(rows: list[dict[str, Any]], key: str) -> float:
  """`key` summed over a configuration's rows, a conditional's branches by the largest
  (collectives.per_step_sum)."""
  return per_step_sum((r[key], tuple(r["branch"]) if r.get("branch") else None) for r in rows)


def step_saving(rows: list[dict[str, Any]]) -> tuple[float, float]:
  """A configuration's comparison rows as (us saved, us on NCCL) per step: each permute's
  modeled saving against NCCL x its runs per step (the model's trips through every
  loop; a bound where a count is unknown or a conditional's branch runs on some trips
  only), summed, a conditional's branches by the largest."""
  return _per_step(rows, "saved_us_per_step"), _per_step(rows, "nccl_us_per_step")


def _duration(us: float) -> str:
  return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.2f} us"


def _bound(rows: list[dict[str, Any]]) -> tuple[str, str]:
  """('at least ' | 'at most ' | '', note): how the per-step figures bound the truth."""
  bounds = {r.get("runs_bound", "exact") for r in rows} - {"exact"}
  if not bounds:
    return "", ""
  if len(bounds) == 1 and bounds != {"unknown"}:
    return f"{bounds.pop()} ", ""
  return "", (
    " (neither a lower nor an upper bound: loops of unknown count are counted "
    "at least, permutes under a conditional's branch at most)"
  )


def overlap_text(windows: list) -> str:
  """What the compiled schedule says of the permutes and the step's compute
  (ring_overlap's windows of the scheduled module)."""
  asynchronous = [w for w in windows if not w["synchronous"]]
  if not asynchronous:
    return (
      "the module is not scheduled with async permutes, so whether they overlap "
      "attention is not known"
    )
  hidden = sum(1 for w in asynchronous if w["attention_between"])
  what = "attention (a fused-attention call, a conditional or a loop)"
  if not hidden:
    return (
      f"none of the {len(asynchronous)} async permutes has {what} scheduled between start and done"
    )
  return (
    f"{hidden} of {len(asynchronous)} async permutes have {what} scheduled between "
    "start and done, so the step gains only the part of a saving that was not "
    "hidden under it"
  )


def step_line(rows: list, windows: list | None = None) -> str:
  """A configuration in one line: what the choices save per step (saving x runs,
  summed), and that this is modeled permute time, which may overlap attention, not
  step time; then per permute its choice and modeled saving per run against NCCL."""
  saved, nccl = step_saving(rows)
  marked = lambda r: r.get("user_mark") is not None
  each = ", ".join(
    f"%{r['instruction']} {r['plan']} saves "
    f"{0 if marked(r) else r['nccl_us'] - r['chosen_us']:.2f} us"
    + (" (marked by the user)" if marked(r) else "")
    + (f" {r['trips']}" if r.get("trips") else "")
    for r in rows
  )
  bound, note = _bound(rows)
  share = f", {saved / nccl * 100:.1f}% of {_duration(nccl)} on NCCL" if nccl else ""
  overlap = f"; {overlap_text(windows)}" if windows is not None else ""
  return (
    f"  {rows[0]['title']}: per step the choices save {bound}{_duration(saved)} of "
    f"modeled permute time{share}{note}, time that may overlap attention: the step's "
    f"own time is not modeled here, so its share of a step is not known{overlap}; "
    f"{each}"
  )


def _others_text(row: dict[str, Any]) -> str:
  """The other backends' modeled times: nvshmem's for the pinned XLA's set."""
  others = {b: v for b, v in (row.get("backend_us") or {}).items() if b != "nccl"}
  if not others or list(others) == ["nvshmem"]:
    others = {"nvshmem": row["nvshmem_us"]}
  return ", ".join(
    f"{b} refused" if v is None else f"{b} {fmt_us(v)} us" for b, v in others.items()
  )
