"""The report's page: the side-by-side table of every configuration, then each
configuration's decisions, chart, verify results, diff and trace."""

from __future__ import annotations

import json
from typing import Any

from hlo_tools import selection
from hlo_tools.model.runtime_rules import rule_lines
from hlo_tools.ops import diff
from hlo_tools.ops.explain import entry_trips_text
from hlo_tools.ops.report.chart import MAX_CHARTS, chart_title, svg_chart
from hlo_tools.ops.sizes import format_bytes


def fmt_us(v: float | None) -> str:
  return "-" if v is None else f"{v:.2f}"


NAMES = {n: r["label"] for n, r in selection.BACKEND_INFO.items()}


def alternative(entry: dict[str, Any]) -> tuple[str, float | None]:
  """(backend, modeled us) of the set's other backend the verdict weighs against NCCL:
  the chosen one, else the fastest that can run, else the first refused."""
  others = {
    b: v
    for b, v in (
      entry.get("backends") or {"nvshmem": {"us": entry["modeled_us"]["nvshmem"]}}
    ).items()
    if b != "nccl"
  }
  plan = entry["choice"]["plan"]
  if plan in others:
    return plan, others[plan]["us"]
  timed = [(v["us"], b) for b, v in others.items() if v["us"] is not None]
  if timed:
    us, b = min(timed)
    return b, us
  return next(iter(others), "nvshmem"), None


def verdict(entry: dict[str, Any]) -> str:
  """One phrase: what the core chose and by how much, or why the other backend
  cannot run."""
  nccl = entry["modeled_us"]["nccl"]
  if entry.get("user_mark") is not None:
    return (
      f"marked by the user: {entry['user_mark']}; kept as marked "
      f"({NAMES.get(entry['choice']['plan'], entry['choice']['plan'])}), no saving counted"
    )
  backend, other = alternative(entry)
  name = NAMES.get(backend, backend)
  if other is None:
    why = entry["reason"]
    for prefix in ("NCCL: ", f"{backend} refused: "):
      why = why[len(prefix) :] if why.startswith(prefix) else why
    return f"NCCL only: {name} cannot run here ({why})"
  delta = (nccl - other) / nccl * 100 if nccl else 0.0
  if entry["choice"]["plan"] == backend:
    return f"{name} wins: {delta:.1f}% faster than NCCL"
  if delta < 0:
    return f"NCCL wins: {name} would be {-delta:.1f}% slower"
  if "margin" in entry["reason"]:
    return f"NCCL kept: {name} only {delta:.1f}% faster, inside the core's margin"
  return "NCCL: " + entry["reason"].split(": ", 1)[-1]


def _stock_note(entry: dict[str, Any], program: dict[str, Any] | None) -> str:
  """On a stock XLA, where the program's one mode is not this permute's own choice,
  the mode that runs it, so that no line says a backend wins that never runs."""
  if not program or program.get("per_op_xla") or not program.get("backend"):
    return ""
  if program["backend"] == entry["choice"]["plan"]:
    return ""
  runs = NAMES.get(program["backend"], program["backend"])
  return f"; a stock XLA runs {runs} here, the program's one mode"


def comparison_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The side-by-side table: one row per collective-permute of every case."""
  rows = []
  for r in results:
    for e in r["explain"]["collectives"]:
      m = e["modeled_us"]
      # Runs per step through every enclosing loop: exact, or a bound (runs_bound).
      trips = e["runs_per_step"]
      # A mark is the user's choice, not the pass's: no saving is the pass's.
      saved = (
        0.0 if e.get("user_mark") is not None or m["chosen"] is None else m["nccl"] - m["chosen"]
      )
      branch = e.get("under_branch")
      rows.append(
        {
          "case": r["case"].id,
          "title": r["case"].title,
          "topology": r["case"].topology,
          "instruction": e["instruction"],
          "bytes": e["bytes"],
          "buffers": e.get("buffers", 1),
          "trip_count": e["trip_count"],
          "edges_by_class": e["edges_by_class"],
          "trips": entry_trips_text(e),
          "nccl_us": m["nccl"],
          "nvshmem_us": m["nvshmem"],
          "chosen_us": m["chosen"],
          "plan": e["choice"]["plan"],
          "collectives_mode": e.get("choice_collectives_mode"),
          "backend_us": {b: v["us"] for b, v in (e.get("backends") or {}).items()},
          "runs": trips,
          "runs_bound": e["runs_bound"],
          # Saved by one run of the permute, and by its runs in a step.
          "saved_us_per_run": saved,
          "saved_us_per_step": saved * trips,
          "nccl_us_per_step": m["nccl"] * trips,
          "user_mark": e.get("user_mark"),
          # One branch of a conditional runs per execution (step_saving).
          "branch": [branch["conditional"], branch["computation"], branch["branch"]]
          if branch
          else None,
          "upstream": e["upstream"]["backend"],
          "verdict": verdict(e) + _stock_note(e, r["explain"].get("program")),
        }
      )
  return rows


def _takeaways(rows: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
  """One item per configuration, with every permute of it in words (alike permutes
  together): what the pass does there."""
  items = []
  for r in results:
    mine = [row for row in rows if row["case"] == r["case"].id]
    if not mine:
      items.append(
        f"<li>{diff.esc(r['case'].title)}: no collective-permutes, nothing for "
        "the pass to decide</li>"
      )
      continue
    groups: dict[tuple[int, int, str, str], list[str]] = {}
    for row in mine:
      key = (row["bytes"], row["buffers"], row.get("trips", ""), row["verdict"])
      groups.setdefault(key, []).append(row["instruction"])
    parts = []
    for (size, buffers, trips, verdict), names in groups.items():
      count = f"{len(names)} permutes" if len(names) > 1 else f"%{names[0]}"
      parts.append(
        f"<li><b>{format_bytes(size)}</b> in {buffers} buffer(s)"
        f"{f' {trips}' if trips else ''} ({diff.esc(count)}): "
        f"{diff.esc(verdict)}</li>"
      )
    items.append(
      f"<li>{diff.esc(r['case'].title)}: {len(mine)} collective-permute(s)"
      f"<ul>{''.join(parts)}</ul></li>"
    )
  return '<ul id="takeaways">' + "".join(items) + "</ul>"


def set_names(backends: str | None) -> str:
  """'NVSHMEM', 'peer memory', 'peer memory or symmetric memory': the set's other backends."""
  others = [b for b in (backends or "nccl,nvshmem").split(",") if b != "nccl"]
  return " or ".join(NAMES.get(b, b) for b in others) or "NCCL only"


def _upstream_cell(answer: str | None, backends: str | None) -> str:
  """Upstream's assigner's answer, where the set offers NVSHMEM, the one backend it
  picks; else no alternative to compare (and the page of such a set names only its
  own backends)."""
  if "nvshmem" not in (backends or "nccl,nvshmem").split(","):
    return "not compared (upstream's assigner picks no backend of this set)"
  return answer or "-"


def _comparison_html(rows: list[dict[str, Any]], backends: str | None = None) -> str:
  if not rows:
    return ""  # the takeaways say that no configuration has a permute
  out = [
    '<table id="comparison" class="decisions"><tr><th>configuration</th>'
    "<th>collective-permute</th><th>bytes/device</th><th>edges</th><th>NCCL us</th>"
    "<th>other backends us</th><th>choice</th><th>saved per run (us)</th>"
    "<th>saved per step (us)</th>"
    "<th>upstream XLA</th><th>what it shows</th></tr>"
  ]
  spans: dict[str, int] = {}
  for row in rows:
    spans[row["case"]] = spans.get(row["case"], 0) + 1
  for i, row in enumerate(rows):
    edges = ", ".join(f"{k} {v}" for k, v in row["edges_by_class"].items() if v)
    trips = f" {row['trips']}" if row.get("trips") else ""
    cls = "same" if row["plan"] == "nccl" else "add"
    # The configuration once, spanning its permutes' rows.
    first = i == 0 or rows[i - 1]["case"] != row["case"]
    head = (
      (
        f'<td rowspan="{spans[row["case"]]}" style="max-width:16em;'
        f'overflow-wrap:anywhere"><a href="#{diff.esc(row["case"])}">'
        f"{diff.esc(row['title'])}</a></td>"
      )
      if first
      else ""
    )
    out.append(
      f"<tr>{head}"
      f'<td class="mono">%{diff.esc(row["instruction"])}</td>'
      f"<td>{diff.esc(format_bytes(row['bytes']))} in {row['buffers']} buffer(s)"
      f"{diff.esc(trips)}</td><td>{diff.esc(edges)}</td><td>{fmt_us(row['nccl_us'])}</td>"
      f'<td>{_others_us(row)}</td><td class="{cls}"><b>{diff.esc(row["plan"])}</b>'
      f"{_mode_html(row.get('collectives_mode'))}</td>"
      f"<td>{fmt_us(row['saved_us_per_run'])}</td>"
      f"<td>{fmt_us(row['saved_us_per_step'])}</td>"
      f"<td>{diff.esc(_upstream_cell(row['upstream'], backends))}</td>"
      f"<td>{diff.esc(row['verdict'])}</td></tr>"
    )
  out.append("</table>")
  return "\n".join(out)


def _others_us(row: dict[str, Any]) -> str:
  """The NVSHMEM column: its time, or each other backend's of a newer XLA's set."""
  others = {b: v for b, v in (row.get("backend_us") or {}).items() if b != "nccl"}
  if not others or list(others) == ["nvshmem"]:
    return "refused" if row["nvshmem_us"] is None else fmt_us(row["nvshmem_us"])
  return "<br>".join(
    f"{diff.esc(b)} {'refused' if v is None else fmt_us(v)}" for b, v in others.items()
  )


def _mode_html(mode: str | None) -> str:
  return f'<br><small class="mono">{diff.esc(mode)}</small>' if mode else ""


def _decision_table(result: dict[str, Any]) -> str:
  by_name = {
    (d["computation"], d["instruction"]): d
    for d in result["passes"][result["first"]].get("decisions", [])
  }
  rows = [
    f'<table class="decisions" id="decisions-{diff.esc(result["case"].id)}"><tr>'
    "<th>collective-permute</th><th>where</th><th>bytes/device</th><th>edges</th>"
    "<th>NCCL us</th><th>other backends us</th><th>choice</th><th>upstream XLA</th>"
    "<th>pass wrote</th><th>reason</th></tr>"
  ]
  for e in result["explain"]["collectives"]:
    m = e["modeled_us"]
    d = by_name.get((e["computation"], e["instruction"]), {})
    edges = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v)
    loop = f"while %{e['while_loop']} {entry_trips_text(e)}" if e["while_loop"] else "no loop"
    new = ", ".join(d.get("new_instructions") or [])
    rows.append(
      f'<tr><td class="mono">%{diff.esc(e["instruction"])}</td>'
      f'<td class="mono">%{diff.esc(e["computation"])} line {e["line"]}<br>'
      f"{diff.esc(loop)}</td>"
      f"<td>{diff.esc(format_bytes(e['bytes']))}</td><td>{diff.esc(edges)}</td>"
      f"<td>{fmt_us(m['nccl'])}</td><td>{_others_us(_row_us(e))}</td>"
      f"<td><b>{diff.esc(e['choice']['plan'])}</b> ({diff.esc(e['choice']['backend'])})"
      f"{_mode_html(e.get('choice_collectives_mode'))}</td>"
      + (
        f"<td>{diff.esc(e['upstream']['backend'])}<br><small>"
        f"{diff.esc(e['upstream']['source'])}</small></td>"
        if "nvshmem" in (result["explain"].get("backends") or "nccl,nvshmem").split(",")
        else f"<td>{diff.esc(_upstream_cell(None, result['explain'].get('backends')))}</td>"
      )
      + f'<td class="mono">{diff.esc(d.get("backend", "-"))}'
      f"{_mode_html(d.get('collectives_mode'))}{': ' + diff.esc(new) if new else ''}</td>"
      f"<td>{diff.esc(e['reason'])}</td></tr>"
    )
  rows.append("</table>")
  return "\n".join(rows)


def _row_us(e: dict[str, Any]) -> dict[str, Any]:
  return {
    "nvshmem_us": e["modeled_us"]["nvshmem"],
    "backend_us": {b: v["us"] for b, v in (e.get("backends") or {}).items()},
  }


def _verify_html(result: dict[str, Any]) -> str:
  status = (
    "all checks pass"
    if result["passed"]
    else "FAILED: " + diff.esc(", ".join(result["failed_checks"]))
  )
  rows = [
    f'<p><b>{diff.esc(result["file"])}</b>: {status}</p><table class="verify">'
    "<tr><th>check</th><th>status</th><th>details</th></tr>"
  ]
  for c in result["checks"]:
    cls = {"pass": "add", "fail": "del"}.get(c["status"], "same")
    detail = "<br>".join(
      diff.esc(
        (f"%{r['instruction']} line {r['line']}: " if r["instruction"] else "") + r["message"]
      )
      for r in c["results"]
    ) or diff.esc(c["note"])
    rows.append(
      f'<tr><td>{diff.esc(c["name"])}</td><td class="{cls}">{diff.esc(c["status"])}'
      f'</td><td class="mono">{detail}</td></tr>'
    )
  rows.append("</table>")
  return "\n".join(rows)


def _charts_html(result: dict[str, Any]) -> list[str]:
  chart, case = result["chart"], result["case"]
  body = [svg_chart(c, chart_title(c, case.topology)) for c in chart["charts"]]
  if chart["kinds"] > MAX_CHARTS:
    body.append(
      f"<p>{chart['kinds'] - MAX_CHARTS} more kinds of permute are not drawn; "
      "the table above lists every permute.</p>"
    )
  return body


def _case_html(result: dict[str, Any], max_rows: int) -> str:
  case = result["case"]
  first = result["first"]
  body = [f'<h2 id="{diff.esc(case.id)}">{diff.esc(case.title)}</h2>']
  where = "entering async-collective-creator" if first == "before_async" else "as given"
  module = f'<span class="mono">{diff.esc(case.id)}/hlo/{diff.esc(first)}.hlo</span>'
  if result["explain"].get("note"):
    body.append(f'<p class="note"><b>{diff.esc(result["explain"]["note"])}</b></p>')
  if result["explain"]["collectives"]:
    body += [f"<p>Decisions on the module {where} ({module}):</p>", _decision_table(result)]
    body += _charts_html(result)
  else:
    body.append(
      f'<p class="no-permutes">No collective-permutes in the module {where} '
      f"({module}): the pass has nothing to decide and leaves the module as it "
      "is.</p>"
    )
  body += [_verify_html(v) for v in result["verify"].values()]
  for stage, d in result["diff"].items():
    body.append(f"<details><summary>Diff of {diff.esc(stage)} before vs after the pass</summary>")
    body.append(
      diff.diff_html(d, result["sources"][stage], result["rewritten"][stage], max_rows=max_rows)
      if stage == first
      else diff.collectives_html(d["collectives"])
    )
    body.append("</details>")
  if result["trace"]:
    body.append("<details><summary>Per-pass trace of each collective-permute</summary>")
    body.append(diff.trace_html(result["trace"]))
    body.append("</details>")
  return "\n".join(body)


def _rules_html(backends: str | None) -> str:
  """The rule each backend of the set really applies, as its runtime's code says:
  one item per backend, its conditions one per line under its name."""
  items = []
  for line in rule_lines(backends or "nccl,nvshmem"):
    name, _, rest = line.partition(": ")
    clauses = [c.strip() for c in rest.split("; ") if c.strip()]
    items.append(
      f"<li><b>{diff.esc(name)}</b>"
      + (
        "<ul>" + "".join(f"<li>{diff.esc(c)}</li>" for c in clauses) + "</ul>"
        if len(clauses) > 1
        else f": {diff.esc(rest)}"
      )
      + "</li>"
    )
  return '<h2>Where each backend can run</h2><ul id="rules">' + "".join(items) + "</ul>"


def page_title(backends: str | None) -> str:
  others = set_names(backends)
  return (
    "NVSHMEM collective-permute report"
    if others == "NVSHMEM"
    else f"Collective-permute report: NCCL or {others}"
  )


def render_page(report: dict[str, Any], results: list[dict[str, Any]]) -> str:
  timing = ", ".join(f"{k} {v:.2f} s" for k, v in report["timings_s"].items())
  # The ring's shapes, where a configuration is the built-in ring.
  cfg = next(
    (
      r["case"].config
      for r in results
      if (r["case"].source or {}).get("kind") == "ring" and r["case"].config
    ),
    None,
  )
  shapes = (
    f"Ring attention: {cfg['num_heads']} query / {cfg['num_kv_heads']} KV heads x "
    f"{cfg['head_dim']}, "
    f"batch {cfg['batch']}, {cfg['dtype']}, {'causal' if cfg['causal'] else 'non-causal'}"
    f", {'forward+backward' if cfg['backward'] else 'forward'}; "
    if cfg
    else ""
  )
  others = set_names(report.get("backends"))
  title = page_title(report.get("backends"))
  body = [
    f"<h1>{diff.esc(title)}</h1>",
    "<p>The pass gives each collective-permute the backend the selection core models "
    f"as faster, NCCL or {diff.esc(others)}, the whole permute on one backend, priced by "
    f"its slowest edge, and only where that backend's runtime can run it; NCCL "
    f"elsewhere. {diff.esc(shapes)}cost table "
    f"{diff.esc(report['cost_table'] or 'default')}, backends "
    f"{diff.esc(report.get('backends') or 'nccl,nvshmem')}.</p>",
    _rules_html(report.get("backends")),
    "<h2>Side by side</h2>",
    _takeaways(report["summary"]["comparison"], results),
    _comparison_html(report["summary"]["comparison"], report.get("backends")),
    f'<p class="mono">versions: {diff.esc(json.dumps(report["versions"]))}<br>'
    f"timings: {diff.esc(timing)}</p>",
  ]
  max_rows = 4000 // len(results)
  body += [_case_html(r, max_rows) for r in results]
  body.append(
    "<h2>Files</h2><ul>"
    + "".join(f'<li><a href="{diff.esc(f)}">{diff.esc(f)}</a></li>' for f in report["files"])
    + "</ul>"
  )
  return diff.page(title, "\n".join(body))
