"""hlo_tools.ops.diff.render: the diff and the trace as text, JSON records and HTML."""

import json

from hlo_tools.model import sources
from hlo_tools.ops.diff import modules, render


def _perm(start, form, done=None):
  return {
    "computation": "main",
    "start": start,
    "done": done,
    "form": form,
    "backend": "DEFAULT",
    "pairs": [[0, 1], [1, 0]],
    "bytes": 64,
    "while_loop": None,
    "trip_count": None,
  }


RESULT = {
  "a": "a.hlo",
  "b": "b.hlo",
  "summary": {
    "num_partitions_a": 8,
    "num_partitions_b": 8,
    "num_partitions_from_a": "inferred from the Shardy mesh",
    "num_partitions_from_b": "module header",
    "instructions_a": 10,
    "instructions_b": 11,
    "unchanged": 9,
    "changed": 1,
    "renamed": 1,
    "added": 1,
    "removed": 0,
    "computations_added": 0,
    "computations_removed": 1,
  },
  "collectives": [
    {
      "a": _perm("cp", "sync"),
      "b": [_perm("cp-start", "start-done", "cp-done")],
      "changes": [{"field": "form", "a": "sync", "b": "start-done"}],
      "status": "changed",
    }
  ],
  "computations": [
    {
      "a": "main",
      "b": "main",
      "status": "matched",
      "added": [{"name": "n", "line": 5, "opcode": "negate"}],
      "removed": [],
      "changed": [
        {
          "a": "cp",
          "b": "cp-start",
          "line_a": 4,
          "line_b": 4,
          "changes": [
            {"attribute": "opcode", "a": "collective-permute", "b": "collective-permute-start"}
          ],
        }
      ],
      "renamed": [{"a": "cp", "b": "cp-start"}],
      "unchanged": 9,
      "b_to_a": {"cp-start": "cp"},
      "order": [],
    },
    {
      "a": "old",
      "b": None,
      "status": "removed",
      "added": [],
      "removed": [{"name": "x", "line": 8, "opcode": "parameter"}] * 2,
      "changed": [],
      "renamed": [],
      "unchanged": 0,
    },
  ],
}

TRACE = {
  "module": "module_0001.jit_f",
  "dump": "d",
  "snapshots": 4,
  "parsed": 3,
  "events": [
    {"seq": None, "pipeline": "", "pass": "before_optimizations", "kind": "present",
     "message": "%cp (sync, DEFAULT, 64 B, 2 pairs)", "origins": ["cp"], "names": ["cp"]},
    {"seq": 3, "pipeline": "async", "pass": "async-collective-creator", "kind": "made async",
     "message": "%cp -> %cp-start / %cp-done (start-done)", "origins": ["cp"],
     "names": ["cp-start"]},
    {"seq": 5, "pipeline": "opt", "pass": "dce", "kind": "removed", "message": "%x is gone",
     "origins": ["x"], "names": []},
  ],
  "final": [{"start": "cp-start", "computation": "main", "origins": ["cp"], "events": [0, 1]}],
}  # fmt: skip


def test_text_gives_collectives_first_then_each_changed_computation():
  assert render.format_text(RESULT).splitlines() == [
    "--- a.hlo (10 instructions, 8 partitions, inferred from the Shardy mesh)",
    "+++ b.hlo (11 instructions, 8 partitions)",
    "collective-permutes (1), before -> after:",
    "  %cp -> %cp-start/%cp-done   [changed]",
    "    form        sync -> start-done",
    "    backend     DEFAULT (same)",
    "    pairs       0->1 1->0 (same)",
    "    bytes       64 (same)",
    "    while_loop  - (same)",
    "    trip_count  - (same)",
    "instructions: 9 unchanged, 1 changed (1 renamed), 1 added, 0 removed; "
    "computations: 0 added, 1 removed",
    "computation %main [matched]",
    "  + %n (negate, line 5)",
    "  ~ %cp -> %cp-start (renamed) (line 4 -> 4)",
    "      opcode: collective-permute -> collective-permute-start",
    "computation %old [removed]",
    "  - 2 instructions",
  ]


def test_text_of_modules_without_permutes_says_so():
  lines = render.collectives_text([])
  assert lines == ["collective-permutes (0), before -> after:", "  (none in either module)"]


def test_trace_text_lists_each_final_permutes_history_and_what_vanished():
  assert render.trace_text(TRACE).splitlines() == [
    "trace of module_0001.jit_f in d: 4 snapshots, 3 with collective changes parsed",
    "  %cp-start (main), from cp:",
    "    before_optimizations: present: %cp (sync, DEFAULT, 64 B, 2 pairs)",
    "    0003 async/async-collective-creator: made async: %cp -> %cp-start / %cp-done (start-done)",
    "  dce: removed: %x is gone",
  ]
  assert render.format_text(RESULT, TRACE).endswith("\n" + render.trace_text(TRACE))


def test_json_is_one_record_per_line():
  out = render.format_json(RESULT, TRACE)
  lines = out.splitlines()
  assert lines[:5] == [
    "{",
    ' "a": "a.hlo",',
    ' "b": "b.hlo",',
    ' "summary": {',
    '  "num_partitions_a": 8,',
  ]
  # Each collective and computation on a line of its own; the internal tables left out.
  start = lines.index(' "computations": [')
  main, old = (json.loads(l.strip().rstrip(",")) for l in lines[start + 1 : start + 3])
  assert lines[start + 3] == " ],"
  assert (main["a"], old["a"]) == ("main", "old") and "b_to_a" not in main and "order" not in main
  assert json.loads(lines[lines.index(' "collectives": [') + 1])["status"] == "changed"
  doc = json.loads(out)
  assert doc["trace"] == TRACE and list(doc) == [
    "a",
    "b",
    "summary",
    "collectives",
    "computations",
    "trace",
  ]
  empty = render.format_json(dict(RESULT, collectives=[], computations=[]))
  assert ' "collectives": [],' in empty.splitlines() and empty.endswith(' "computations": []\n}')


def test_escape_and_page_are_self_contained_html():
  assert (
    render.esc(None) == "-" and render.esc('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
  )
  page = render.page("a < b", "<p>body</p>")
  assert page.startswith("<!DOCTYPE html>\n") and "<title>a &lt; b</title>" in page
  assert "<script" not in page and "http" not in page and "<p>body</p>" in page


def test_collectives_table_spans_a_permutes_fields():
  row = RESULT["collectives"][0]
  html = render.collectives_html([row, dict(row, b=[], status="removed", changes=[])])
  # Four fields either side has (no loop: while_loop and trip_count are left out).
  assert html.count('rowspan="4"') == 2 * 3
  assert '<td rowspan="4" class="chg">changed</td>' in html
  assert '<td rowspan="4" class="del">removed</td>' in html
  assert '<td>form</td><td class="mono chg">sync</td><td class="mono chg">start-done</td>' in html
  assert "while_loop" not in html


A = """HloModule a, num_partitions=2

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %c = f32[] constant(1)
  %b = f32[8]{0} broadcast(%c), dimensions={}
  ROOT %r = f32[8]{0} all-reduce(%b), channel_id=1, replica_groups={{0,1}}, to_apply=%add
}
"""
B = A.replace("constant(1)", "constant(2)").replace(
  "  ROOT %r = f32[8]{0} all-reduce(%b)",
  "  %n = f32[8]{0} negate(%b)\n  ROOT %r = f32[8]{0} all-reduce(%n)",
)


def test_html_shows_changes_side_by_side_and_folds_unchanged_runs():
  src_a, src_b = sources.read_text("a.hlo", A), sources.read_text("b.hlo", B)
  page = render.format_html(modules.diff_sources(src_a, src_b), src_a, src_b)
  assert page.startswith("<!DOCTYPE html>") and "<title>diff a.hlo b.hlo</title>" in page
  assert "<script" not in page and "Pass-by-pass trace" not in page
  # %p unchanged, then the changed literal, the new %n and %r's new operand.
  assert (
    '<tr><td colspan="2" class="ctx">1 unchanged</td></tr>'
    '<tr class="chg" title="literal"><td>%c = f32[] constant(1)</td>'
    "<td>%c = f32[] constant(2)</td></tr>"
  ) in page
  assert '<tr class="add" title=""><td></td><td>%n = f32[8]{0} negate(%b)</td></tr>' in page
  assert '<tr class="chg" title="operands">' in page
  # %add, the same in both, is not shown.
  assert '<h3 class="mono">%main [matched]</h3>' in page and '<h3 class="mono">%add' not in page
  with_trace = render.format_html(modules.diff_sources(src_a, src_b), src_a, src_b, TRACE)
  assert "<h2>Pass-by-pass trace</h2>" in with_trace and "async-collective-creator" in with_trace


def test_a_renamed_computation_names_both_with_their_percent_sign():
  # As a renamed instruction reads: %old -> %new.
  renamed = dict(
    RESULT,
    computations=[
      {
        "a": "add",
        "b": "sum",
        "status": "matched",
        "added": [],
        "removed": [],
        "changed": [
          {
            "a": "x",
            "b": "x",
            "line_a": 2,
            "line_b": 2,
            "changes": [{"attribute": "opcode", "a": "add", "b": "subtract"}],
          }
        ],
      }
    ],
  )
  assert "computation %add -> %sum [matched]" in render.format_text(renamed).splitlines()
