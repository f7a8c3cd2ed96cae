"""Why each collective-permute gets its backend: the selection core's reasoning, the
modeled time per backend and upstream's answer, per permute."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlo_tools import bounded_input
from hlo_tools.hlo.ir import HloModule
from hlo_tools.model import description, modes, placement, program_mode, sources
from hlo_tools.model.collectives import trips_text
from hlo_tools.model.driver_report import Report
from hlo_tools.model.options import Selection
from hlo_tools.ops import program_text
from hlo_tools.ops.sizes import format_bytes

PRE_OPTIMIZATION_NOTE = (
  "note: this module is from before XLA's optimizations (no fusions, no async "
  "permutes), not what the pass sees: inside XLA it runs after "
  "collective-permute-combiner, which merges the permutes of one step into fewer, "
  "larger ones of several buffers, so its sizes and choices can differ from these. "
  "Explain the module entering async-collective-creator (DIR:before_async of a "
  "`hlo-tools dump --all_passes` directory) or DIR:after_optimizations instead."
)


def us(value: float | None) -> str:
  return "-" if value is None else f"{value:.2f} us"


def is_pre_optimization(module: HloModule, collectives: list[dict[str, Any]]) -> bool:
  """A module with permutes, none async and no fusion: jax's lowered or XLA's
  before-optimizations HLO, which the combiner has not seen yet."""
  if not collectives or any(e["form"] != "sync" for e in collectives):
    return False
  return not any(i.opcode == "fusion" for i in module.instructions())


def explain(
  path: str,
  selected: Selection,
  source: sources.Source | None = None,
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
  stage: str | None = None,
  per_op_xla: bool = False,
  **kwargs: Any,
) -> dict:
  """The model layer's description of the module (description.describe: kwargs) on
  `selected` (parsed once by the caller), with a note when the module is from before
  XLA's optimizations: by its `stage` of a dump when known, else by its structure."""
  source = source or sources.read_source(path, max_bytes=max_bytes)
  report, why = kwargs.pop("report", None), None
  if report is None:  # the driver's one run, which places the module's devices
    report, why = description.module_report(
      path, selected, source, kwargs.get("use_driver", True), kwargs.get("num_partitions")
    )
  # On the module's own device map, for its permutes and the program's mode alike.
  selected = placement.settled(selected, path, report, max_bytes)
  result = description.describe(
    path, selected, source=source, max_bytes=max_bytes, report=report, upstream_why=why, **kwargs
  )
  add_program(result, source, selected, per_op_xla, report)
  pre = (
    stage in ("before_optimizations", "lowered")
    if stage is not None
    else is_pre_optimization(source.module, result["collectives"])
  )
  result["stage"] = "before_optimizations" if pre else None
  result["note"] = PRE_OPTIMIZATION_NOTE if pre else None
  return result


def add_program(
  result: dict[str, Any],
  source: sources.Source,
  selected: Selection,
  per_op_xla: bool = False,
  report: Report | None = None,
) -> None:
  """The program's one mode (model.program_mode) into `result`, and into each
  permute's entry what it runs on this XLA (`runs`). Nothing for a backend set
  without a mode the flag names (the pinned XLA's nccl,nvshmem has no such flag).
  report: the driver's JSON on the module, which says the flag it was compiled with."""
  if program_mode.candidates(selected.table.backends) == ["nccl"]:
    return
  program = program_mode.for_source(
    source, selected.topology, selected.table, selected.table.backends, per_op_xla, report
  )
  for e in result["collectives"]:
    e["runs"] = program["runs"].get((e["computation"], e["instruction"]))
    if not per_op_xla:
      _mark_on_stock_xla(e, program)
  result["program"] = program_text.json_ready(program)


def _mark_on_stock_xla(e: dict[str, Any], program: dict[str, Any]) -> None:
  """A user's mark on a stock XLA, which reads none: the entry's reason and its
  attribute row say the mode that runs (the flag's) where it is not the mark's, so
  that no line of the entry says the mark is kept where it does not run."""
  mark, runs = e.get("user_mark"), e.get("runs")
  wanted = modes.mark_mode(mark) if mark is not None else None
  if wanted is None or runs is None:
    return
  flag = (
    f"{program['compiled_with']} ({program['compiled_with_from']})"
    if program.get("compiled_with")
    else f"{program_mode.DEFAULT}, XLA's default (no module config beside the file)"
  )
  requested = e.get("requested_mode")
  if requested and requested.get("mode"):
    requested["why"] = "the series' XLA takes it over the flag's mode; a stock XLA reads no mark"
  if runs["thunk"] == wanted:  # the core's "kept as marked" holds
    return
  e["mark_not_run"] = runs["thunk"]
  e["reason"] = (
    f"marked by the user: {mark}; not run as marked: a stock XLA reads no "
    f"mark, and every permute of the program runs the flag's mode, {flag}; "
    f"set the flag to {wanted} for the program, or compile with the series' XLA"
  )


# ---------------------------------------------------------------------------------------
# Text


def pairs_text(pairs: Sequence[Sequence[int]], limit: int = 16) -> str:
  text = " ".join(f"{s}->{t}" for s, t in pairs[:limit])
  return text + (f" ... ({len(pairs)} pairs)" if len(pairs) > limit else "")


def loop_counts(e: dict[str, Any]) -> list[int | None]:
  """The trip counts of the permute's loops, innermost first (None: unknown)."""
  return [loop["trip_count"] for loop in e.get("loops") or ()]


def where_text(e: dict[str, Any]) -> str:
  """Where the permute is, with every loop around it (innermost first)."""
  loops = e.get("loops") or []
  branch = e.get("under_branch")
  under = (
    f"; a branch of conditional %{branch['conditional']} in %{branch['computation']}"
    if branch
    else ""
  )
  if not loops:
    return f"%{e['computation']} line {e['line']}{under}; not in a loop"
  nest = " inside ".join(
    f"while %{x['while']} in %{x['computation']} (trip count "
    f"{x['trip_count'] if x['trip_count'] is not None else 'unknown'})"
    for x in loops
  )
  return f"%{e['computation']} line {e['line']}{under}; {nest}"


def entry_trips_text(e: dict) -> str:
  """trips_text of an explain entry: its loops' counts, bounded under a branch."""
  return trips_text(loop_counts(e), bool(e.get("under_branch")))


def upstream_text(e: dict, backends: str | None) -> str:
  """Upstream's CollectiveBackendAssigner's answer, where the backend set (`nccl,peer`)
  has the one backend it assigns (NVSHMEM): under a set without it, it is no
  alternative."""
  names = backends.split(",") if backends else []
  if names and "nvshmem" not in names:
    return (
      f"not compared: its assigner picks only NVSHMEM, which the backend set "
      f"{','.join(map(str, names))} does not offer"
    )
  return f"{e['upstream']['backend'] or '-'} ({e['upstream']['source']})"


def choice_text(e: dict) -> str:
  """The choice row: the core's plan, or the user's mark, which is the choice."""
  head = (
    f"marked by the user: {e['user_mark']} -> {e['choice']['plan']}"
    if e.get("user_mark") is not None
    else e["choice"]["plan"]
  )
  mode = e.get("choice_collectives_mode")
  return (
    f"{head} (backend {e['choice']['backend']}"
    + (f", collectives_mode {mode}" if mode else "")
    + f", {us(e['modeled_us']['chosen'])}); now {current_text(e)}"
    + (f"; runs {e['mark_not_run']} on this XLA, not as marked" if e.get("mark_not_run") else "")
  )


def modeled_text(m: dict[str, float | None], sets: dict[str, dict[str, Any]]) -> str:
  """Each backend of the set with its modeled time ('refused' when it cannot run)."""
  if not sets:
    return f"nccl {us(m['nccl'])}, nvshmem {us(m['nvshmem'])}"
  return ", ".join(f"{b} {'refused' if v['refused'] else us(v['us'])}" for b, v in sets.items())


def priced_text(priced_by: dict[str, dict[str, str]]) -> str:
  """Per backend, the edge class of its slowest edge and how the table prices it."""
  text = "; ".join(
    f"{b} by its slowest edge, {p['link_class']} ({p['model']})" for b, p in priced_by.items()
  )
  if any(p["model"] == "parametric" for p in priced_by.values()):
    text += (
      "; parametric: an estimate, latency + size / bandwidth from the cost "
      "table, where it has no measured curve"
    )
  return text


def current_text(e: dict[str, Any]) -> str:
  mode = e.get("current_collectives_mode")
  if mode in (None, "COLLECTIVES_MODE_INVALID"):
    return e["current_backend"]
  return f"{e['current_backend']}, collectives_mode {mode} ({e['current_plan']})"


def format_text(result: dict[str, Any]) -> str:
  inferred = result.get("num_partitions_from", "module header")
  lines = [
    f"{result['file']}: {len(result['collectives'])} collective-permute(s), "
    f"topology {result['topology']}, {result['num_partitions']} partitions"
    + ("" if inferred in ("module header", "default") else f" ({inferred})")
    + f" x {result['num_replicas']} replicas"
    + (f", backends {result['backends']}" if result.get("backends") else "")
  ]
  if not result["collectives"]:
    lines.append("no collective-permutes, nothing for the pass to decide")
  if result.get("note"):
    lines.append(result["note"])
  if result.get("topology_note"):
    lines.append(result["topology_note"])
  lines += [result[k] for k in ("processes", "placement") if result.get(k)]
  lines += program_text.lines(result.get("program") or {})
  unsafe = [e for e in result["collectives"] if e.get("current_unsafe")]
  if unsafe:
    lines.append(
      f"UNSAFE: {len(unsafe)} collective-permute(s) already carry a backend "
      "their runtime cannot run (marked below; verify fails them)"
    )
  for e in result["collectives"]:
    classes = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v) or "none"
    m = e["modeled_us"]
    sets = e.get("backends") or {}
    rows = [
      ("where", where_text(e)),
      ("form", e["form"] + (f" (done %{e['done']} line {e['done_line']})" if e["done"] else "")),
      (
        "bytes",
        f"{e['bytes']} ({format_bytes(e['bytes'])}) per device in {e.get('buffers', 1)} buffer(s)",
      ),
      ("pairs", pairs_text(e["pairs"])),
      ("edges", classes),
      (
        "modeled",
        modeled_text(m, sets)
        + (
          f"; {entry_trips_text(e)} = {us(e['modeled_loop_us'])}"
          if e["modeled_loop_us"] is not None
          else ""
        ),
      ),
      ("choice", choice_text(e)),
      ("reason", e["reason"]),
      ("upstream XLA", upstream_text(e, result.get("backends"))),
    ]
    if e.get("priced_by"):
      rows.insert(6, ("priced by", priced_text(e["priced_by"])))
    rows[6:6] = [("refused", v["refused"]) for v in sets.values() if v["refused"]]
    if e.get("requested_mode"):
      r = e["requested_mode"]
      rows.insert(
        [k for k, _ in rows].index("choice"),
        (
          "attribute",
          (f'{modes.ATTRIBUTE}="{r["attribute"]}": {r["mode"] or "not taken"}; {r["why"]}'),
        ),
      )
    if e.get("runs"):
      rows.insert(
        [k for k, _ in rows].index("choice") + 1,
        (
          "runs",
          program_text.runs_text(e["runs"], (result.get("program") or {}).get("per_op_xla", False)),
        ),
      )
    if e.get("current_unsafe"):
      rows.insert(
        [k for k, _ in rows].index("choice") + 1,
        (
          "UNSAFE",
          f"now {current_text(e)}, which its runtime cannot run: " + "; ".join(e["current_unsafe"]),
        ),
      )
    if e["recorded"]:
      rows.append(("pass wrote", f"plan {e['recorded']['plan']}: {e['recorded']['reason']}"))
    lines.append("")
    lines.append(f"%{e['instruction']}")
    lines.extend(f"  {k:<13} {v}" for k, v in rows)
  return "\n".join(lines)
