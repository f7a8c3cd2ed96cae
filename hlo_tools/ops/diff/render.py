"""The diff and the trace as text and as HTML (self-contained, no scripts)."""

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from hlo_tools.model.sources import Source
from hlo_tools.ops.diff.modules import interesting, to_json
from hlo_tools.ops.diff.permutes import VIEW_FIELDS, Record, summarize_group

# diff_sources' result, trace's result: JSON-friendly dicts.
Diff = Mapping[str, Any]
Trace = Mapping[str, Any]


def _short(value: object, limit: int = 120) -> str:
  if isinstance(value, list):
    value = (
      " ".join(f"{s}->{t}" for s, t in value)
      if value and isinstance(value[0], list)
      else str(value)
    )
  text = "-" if value is None else str(value)
  return text if len(text) <= limit else text[: limit - 3] + "..."


def _names(group: Sequence[Record]) -> str:
  return " + ".join(f"%{r['start']}" + (f"/%{r['done']}" if r["done"] else "") for r in group)


def collectives_text(rows: Sequence[Record]) -> list[str]:
  lines = [f"collective-permutes ({len(rows)}), before -> after:"]
  if not rows:
    lines.append("  (none in either module)")
  for row in rows:
    a = f"%{row['a']['start']}" if row["a"] else "(none)"
    b = _names(row["b"]) if row["b"] else "(none)"
    lines.append(f"  {a} -> {b}   [{row['status']}]")
    for c in row["changes"]:
      lines.append(f"    {c['field']:<11} {_short(c['a'])} -> {_short(c['b'])}")
    if row["a"] and row["b"]:
      same = [k for k in VIEW_FIELDS if k not in {c["field"] for c in row["changes"]}]
      for k in same:
        if k in ("pairs", "bytes", "backend", "form", "while_loop", "trip_count"):
          lines.append(f"    {k:<11} {_short(row['a'][k])} (same)")
  return lines


def trace_text(tr: Trace) -> str:
  lines = [
    f"trace of {tr['module']} in {tr['dump']}: {tr['snapshots']} snapshots, "
    f"{tr['parsed']} with collective changes parsed"
  ]
  for fin in tr["final"]:
    lines.append(
      f"  %{fin['start']} ({fin['computation']}), from " + ", ".join(fin["origins"]) + ":"
    )
    for i in fin["events"]:
      e = tr["events"][i]
      where = f"{e['seq']:04d} {e['pipeline']}/{e['pass']}" if e["seq"] is not None else e["pass"]
      lines.append(f"    {where}: {e['kind']}: {e['message']}")
  orphan = [e for e in tr["events"] if e["kind"] in ("removed", "unreadable")]
  for e in orphan:
    lines.append(f"  {e['pass']}: {e['kind']}: {e['message']}")
  return "\n".join(lines)


def _partitions(summary: Mapping[str, Any], side: str) -> str:
  """'8 partitions', and where the count came from when the header did not say it."""
  n, how = summary.get(f"num_partitions_{side}"), summary.get(f"num_partitions_from_{side}")
  inferred = f", {how}" if how not in (None, "module header", "default") else ""
  return f"{n} partitions{inferred}"


def format_text(result: Diff, tr: Trace | None = None) -> str:
  s = result["summary"]
  lines = [
    f"--- {result['a']} ({s['instructions_a']} instructions, {_partitions(s, 'a')})",
    f"+++ {result['b']} ({s['instructions_b']} instructions, {_partitions(s, 'b')})",
  ]
  lines += collectives_text(result["collectives"])
  lines.append(
    f"instructions: {s['unchanged']} unchanged, {s['changed']} changed "
    f"({s['renamed']} renamed), {s['added']} added, {s['removed']} removed; "
    f"computations: {s['computations_added']} added, "
    f"{s['computations_removed']} removed"
  )
  for c in result["computations"]:
    if not interesting(c):
      continue
    name = (
      c["b"]
      if c["a"] == c["b"] or c["a"] is None
      else (c["a"] if c["b"] is None else f"{c['a']} -> %{c['b']}")
    )
    lines.append(f"computation %{name} [{c['status']}]")
    if c["status"] in ("added", "removed"):
      lines.append(f"  {'+' if c['status'] == 'added' else '-'} {len(c[c['status']])} instructions")
      continue
    for i in c["removed"]:
      lines.append(f"  - %{i['name']} ({i['opcode']}, line {i['line']})")
    for i in c["added"]:
      lines.append(f"  + %{i['name']} ({i['opcode']}, line {i['line']})")
    for i in c["changed"]:
      name = i["a"] if i["a"] == i["b"] else f"{i['a']} -> %{i['b']} (renamed)"
      lines.append(f"  ~ %{name} (line {i['line_a']} -> {i['line_b']})")
      for ch in i["changes"]:
        lines.append(f"      {ch['attribute']}: {_short(ch['a'])} -> {_short(ch['b'])}")
  out = "\n".join(lines)
  if tr is not None:
    out += "\n" + trace_text(tr)
  return out


# ---------------------------------------------------------------------------------------
# HTML

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px}h2{font-size:17px;margin-top:24px}h3{font-size:15px}
table{border-collapse:collapse;margin:6px 0}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}
.sbs{table-layout:fixed;width:100%}
.sbs td{font:12px/1.3 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;width:50%}
.add{background:#e6ffec}.del{background:#ffebe9}.chg{background:#fff8c5}
.same{color:#777}.ctx{color:#888;font-style:italic;text-align:center}
.mono{font-family:ui-monospace,monospace;font-size:12px}
.kv td:first-child{font-weight:600}
"""


def esc(value: object) -> str:
  return html.escape("-" if value is None else str(value))


def page(title: str, body: str) -> str:
  return (
    f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{esc(title)}'
    f"</title><style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
  )


def collectives_html(rows: Sequence[Record]) -> str:
  out = [
    '<table class="collectives"><tr><th>before</th><th>after</th><th>status</th>'
    "<th>field</th><th>before</th><th>after</th></tr>"
  ]
  for row in rows:
    a = f"%{row['a']['start']}" if row["a"] else "(none)"
    b = _names(row["b"]) if row["b"] else "(none)"
    fields = []
    for k in ("form", "backend", "bytes", "pairs", "while_loop", "trip_count"):
      va = row["a"][k] if row["a"] else None
      vb = (summarize_group(row["b"]) or {})[k] if row["b"] else None
      changed = any(c["field"] == k for c in row["changes"])
      if va is None and vb is None:
        continue
      fields.append((k, va, vb, changed))
    n = max(len(fields), 1)
    cls = {"same": "same", "changed": "chg", "added": "add", "removed": "del"}[row["status"]]
    for j, (k, va, vb, changed) in enumerate(fields or [("", None, None, False)]):
      head = (
        (
          f'<td rowspan="{n}" class="mono">{esc(a)}</td><td rowspan="{n}" '
          f'class="mono">{esc(b)}</td><td rowspan="{n}" class="{cls}">'
          f"{esc(row['status'])}</td>"
        )
        if j == 0
        else ""
      )
      out.append(
        f'<tr>{head}<td>{esc(k)}</td><td class="mono{" chg" if changed else ""}">'
        f'{esc(_short(va, 400))}</td><td class="mono{" chg" if changed else ""}">'
        f"{esc(_short(vb, 400))}</td></tr>"
      )
  out.append("</table>")
  return "\n".join(out)


def _side_by_side(
  comp: Mapping[str, Any], src_a: Source, src_b: Source, max_rows: int
) -> list[str]:
  """Rows of one computation pair: changes side by side, unchanged runs collapsed."""
  ma, mb = src_a.module, src_b.module
  ca = ma.computation(comp["a"]) if comp["a"] else None
  cb = mb.computation(comp["b"]) if comp["b"] else None
  b_to_a = comp.get("b_to_a", {})
  changed = {c["b"]: c for c in comp["changed"]}
  rows: list[str] = []
  run = 0

  def flush() -> None:
    nonlocal run
    if run:
      rows.append(f'<tr><td colspan="2" class="ctx">{run} unchanged</td></tr>')
      run = 0

  def row(cls: str, left: str, right: str, title: str = "") -> None:
    flush()
    rows.append(
      f'<tr class="{cls}" title="{esc(title)}"><td>{esc(left)}</td><td>{esc(right)}</td></tr>'
    )

  if cb is None or ca is None:
    comp_ = cb or ca
    assert comp_ is not None  # a computation pair has at least one side
    for i in comp_.instructions[:max_rows]:
      text = (src_b if cb else src_a).line(i.line).strip()
      row("add" if cb else "del", "" if cb else text, text if cb else "")
    return rows
  a_order = {i.name: k for k, i in enumerate(ca.instructions)}
  a_to_b = {a: b for b, a in b_to_a.items()}
  pending = list(ca.instructions)
  pa = 0
  for ib in cb.instructions:
    if len(rows) > max_rows:
      rows.append('<tr><td colspan="2" class="ctx">(truncated)</td></tr>')
      break
    partner = b_to_a.get(ib.name)
    if partner is not None:
      # Removed instructions that came before the partner go first, in A's order.
      while pa < len(pending) and a_order[pending[pa].name] < a_order[partner]:
        ia = pending[pa]
        if ia.name not in a_to_b:
          row("del", src_a.line(ia.line).strip(), "")
        pa += 1
      if ib.name in changed:
        c = changed[ib.name]
        row(
          "chg",
          src_a.line(ca.instruction(partner).line).strip(),
          src_b.line(ib.line).strip(),
          "; ".join(f"{x['attribute']}" for x in c["changes"]),
        )
      else:
        run += 1
    else:
      row("add", "", src_b.line(ib.line).strip())
  while pa < len(pending):
    ia = pending[pa]
    if ia.name not in a_to_b:
      row("del", src_a.line(ia.line).strip(), "")
    pa += 1
  flush()
  return rows


def diff_html(result: Diff, src_a: Source, src_b: Source, max_rows: int = 4000) -> str:
  """The diff as an HTML fragment: summary, collectives, side-by-side computations."""
  s = result["summary"]
  out = [
    f'<p class="mono">A: {esc(result["a"])} ({s["instructions_a"]} instructions)<br>'
    f"B: {esc(result['b'])} ({s['instructions_b']} instructions)</p>",
    "<h3>Collective-permutes, before vs after</h3>",
    collectives_html(result["collectives"]),
    f"<p>{s['unchanged']} unchanged, {s['changed']} changed ({s['renamed']} renamed), "
    f"{s['added']} added, {s['removed']} removed instructions; "
    f"{s['computations_added']} computations added, {s['computations_removed']} "
    "removed.</p>",
  ]
  budget = max_rows
  for comp in result["computations"]:
    if not interesting(comp):
      continue
    name = comp["b"] or comp["a"]
    if comp["a"] and comp["b"] and comp["a"] != comp["b"]:
      name = f"{comp['a']} -> %{comp['b']}"
    rows = _side_by_side(comp, src_a, src_b, budget)
    budget = max(budget - len(rows), 50)
    out.append(f'<h3 class="mono">%{esc(name)} [{esc(comp["status"])}]</h3>')
    details = []
    for c in comp["changed"]:
      for ch in c["changes"]:
        details.append(
          f'<tr><td class="mono">%{esc(c["b"])}</td><td class="mono">'
          f'{esc(ch["attribute"])}</td><td class="mono">{esc(_short(ch["a"], 300))}'
          f'</td><td class="mono">{esc(_short(ch["b"], 300))}</td></tr>'
        )
    if details:
      out.append(
        '<table class="changes"><tr><th>instruction</th><th>attribute</th>'
        "<th>before</th><th>after</th></tr>" + "".join(details) + "</table>"
      )
    out.append(
      '<table class="sbs"><tr><th>before (A)</th><th>after (B)</th></tr>'
      + "".join(rows)
      + "</table>"
    )
  return "\n".join(out)


def trace_html(tr: Trace) -> str:
  out = [
    f"<p>{esc(tr['module'])}: {tr['snapshots']} pass snapshots, {tr['parsed']} "
    "changed a collective-permute line and were parsed.</p>"
  ]
  for fin in tr["final"]:
    out.append(
      f'<h3 class="mono">%{esc(fin["start"])} ({esc(fin["computation"])})</h3>'
      '<table class="trace"><tr><th>#</th><th>pipeline</th><th>pass</th>'
      "<th>event</th><th>detail</th></tr>"
    )
    for i in fin["events"]:
      e = tr["events"][i]
      out.append(
        f"<tr><td>{esc(e['seq'])}</td><td>{esc(e['pipeline'])}</td>"
        f'<td class="mono">{esc(e["pass"])}</td><td>{esc(e["kind"])}</td>'
        f'<td class="mono">{esc(e["message"])}</td></tr>'
      )
    out.append("</table>")
  return "\n".join(out)


def format_html(result: Diff, src_a: Source, src_b: Source, tr: Trace | None = None) -> str:
  body = ["<h1>hlo-tools diff</h1>", diff_html(result, src_a, src_b)]
  if tr is not None:
    body += ["<h2>Pass-by-pass trace</h2>", trace_html(tr)]
  return page(f"diff {result['a']} {result['b']}", "\n".join(body))


def _records_json(doc: Mapping[str, Any]) -> str:
  """`doc` as JSON with each top-level key, each element of a top-level list and each
  key of a top-level dict on its own line.

  One record per line reads well with grep and line tools, and costs what compact JSON
  costs: json's C encoder writes each line, where `indent=` makes json fall back to its
  Python encoder (five times slower on a 100k-instruction diff).
  """
  lines = ["{"]
  last = len(doc) - 1
  for n, (key, value) in enumerate(doc.items()):
    end = "," if n < last else ""
    head = f" {json.dumps(key)}: "
    if isinstance(value, list) and value:
      lines.append(head + "[")
      lines += [f"  {json.dumps(v)}," for v in value[:-1]]
      lines += [f"  {json.dumps(value[-1])}", " ]" + end]
    elif isinstance(value, dict) and value:
      lines.append(head + "{")
      items = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
      lines += [line + "," for line in items[:-1]] + [items[-1], " }" + end]
    else:
      lines.append(head + json.dumps(value) + end)
  lines.append("}")
  return "\n".join(lines)


def format_json(result: Diff, tr: Trace | None = None) -> str:
  """What `hlo-tools diff --format=json` prints: to_json's diff (the trace under
  "trace"), one computation, collective or summary field per line."""
  out = to_json(result)
  if tr is not None:
    out["trace"] = tr
  return _records_json(out)
