"""What changed between two HLO modules, matched collective by collective, and the per-
pass trace of each collective-permute through an XLA dump."""

from hlo_tools.model import dumps
from hlo_tools.model.dumps import read_stage
from hlo_tools.ops.diff.modules import (
  attribute_changes,
  collector_paused,
  diff_sources,
  match_computations,
  match_instructions,
  to_json,
)
from hlo_tools.ops.diff.passes import signature, trace
from hlo_tools.ops.diff.permutes import (
  base_name,
  collective_view,
  collectives_diff,
  match_collectives,
)
from hlo_tools.ops.diff.render import (
  collectives_html,
  diff_html,
  esc,
  format_html,
  format_json,
  format_text,
  page,
  trace_html,
  trace_text,
)

# The library API (report, bench and the fixture generator use it).
__all__ = [
  "attribute_changes",
  "base_name",
  "collective_view",
  "collectives_diff",
  "collector_paused",
  "collectives_html",
  "diff_html",
  "diff_sources",
  "esc",
  "format_html",
  "format_json",
  "format_text",
  "match_collectives",
  "match_computations",
  "match_instructions",
  "page",
  "read_input",
  "read_stage",
  "signature",
  "to_json",
  "trace",
  "trace_html",
  "trace_text",
]


read_input = dumps.read_input  # FILE or DIR:STAGE, as explain and verify read it
