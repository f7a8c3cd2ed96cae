"""What changed between two HLO modules, matched collective by collective, and the per-
pass trace of each collective-permute through an XLA dump."""

import os

from hlo_tools import cli_io
from hlo_tools.ops.diff.modules import (attribute_changes, diff_sources,
                                             match_computations, match_instructions,
                                             to_json)
from hlo_tools.ops.diff.passes import signature, trace
from hlo_tools.ops.diff.permutes import (base_name, collective_view, collectives_diff,
                                              match_collectives)
from hlo_tools.ops.diff.render import (collectives_html, diff_html, esc, format_html,
                                            format_text, page, trace_html, trace_text)
from hlo_tools.model import sources
from hlo_tools.model.dumps import STAGE_HELP, read_stage
from hlo_tools.model.sources import InputError

# The library API (report, bench and the fixture generator use it).
__all__ = ["attribute_changes", "base_name", "collective_view", "collectives_diff",
           "collectives_html", "diff_html", "diff_sources", "esc", "format_html",
           "format_text", "match_collectives", "match_computations",
           "match_instructions", "page", "read_input", "read_stage", "signature", "to_json",
           "trace", "trace_html", "trace_text"]


def read_input(spec, max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES):
  """FILE or DIR:STAGE (the first ':' whose left side is a directory splits them).

  FILE may be any readable file, device or pipe, "-" for stdin; reading stops past
  max_bytes."""
  if spec == "-" or (os.path.exists(spec) and not os.path.isdir(spec)):
    return sources.read_source(spec, max_bytes=max_bytes)
  idx = spec.find(":")
  while idx != -1:
    if os.path.isdir(spec[:idx]):
      return read_stage(spec[:idx], spec[idx + 1:], max_bytes)
    idx = spec.find(":", idx + 1)
  if os.path.isdir(spec):
    raise InputError(f"{spec}: is a directory; name a stage, e.g. "
                        f"{spec}:after_optimizations ({STAGE_HELP})")
  raise InputError(f"{spec}: cannot read: No such file or directory")
