"""The report's summary in words: per configuration its saving per step, per permute its choice."""

from __future__ import annotations

import os
from typing import Any

from hlo_tools.model.collectives import per_step_sum
from hlo_tools.ops import program_text
from hlo_tools.ops.report.page import fmt_us, page_title
from hlo_tools.ops.sizes import format_bytes


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
