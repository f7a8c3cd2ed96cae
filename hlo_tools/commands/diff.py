"""`hlo-tools diff A B`: what changed between two HLO modules, collectives first.

    hlo-tools diff A B [--format=text|json|html] [--out=FILE] [--trace DUMP_DIR]
                   [--ignore-metadata]

A and B are each
  FILE                      an HLO text file, or a serialized module as XLA dumps it
                            (X.hlo.pb);
  DIR:before_optimizations  a stage of a dump directory (written by `hlo-tools dump`,
  DIR:after_optimizations   or XLA's own --xla_dump_to directory);
  DIR:before_async          the module entering async-collective-creator (what the
                            NVSHMEM pass and XLA's backend assigner see);
  DIR:after:PASS[#N]        the module right after (or before) XLA pass PASS, from a
  DIR:before:PASS[#N]       dump with --all_passes; #N picks the N-th run (0-based,
                            default the last), e.g. DIR:after:collective-permute-combiner.
  DIR:PROGRAM:STAGE         a stage of one program of a dump folder of several (a
                            script's init, step, eval and metrics functions): PROGRAM
                            is its module name (jit_train_step or train_step) or id
                            (668 or module_0668). DIR:STAGE in such a folder reads its
                            one program with collective-permutes, else is an error
                            listing the programs.
Two passes of one dump: `hlo-tools diff D:after:P1 D:after:P2`.

Instructions are matched by (computation, name) first, then by structure (opcode,
operands already matched, shape; then opcode and shape) for renamed ones, each
round one pass over hash buckets so the diff stays linear in module size. The output
leads with the collective-permutes in either form (pairs, bytes, backend, sync/async,
while loop, trip count) before and after, then added, removed and changed
instructions with every changed attribute (backend_config and frontend attributes
key by key).

--trace DUMP_DIR follows each collective-permute through XLA's passes in a dump
written with --all_passes: created, combined, decomposed, made async, backend set,
moved into a loop, scheduled. --trace DUMP_DIR:PROGRAM traces one program of a
folder of several (default: its main one).

Exit status: 0 (also when the modules differ), 2 bad input.
"""

import argparse
import os
from typing import Any

from hlo_tools import bounded_input
from hlo_tools.commands import common
from hlo_tools.model import dumps, sources
from hlo_tools.model.dumps import STAGE_HELP
from hlo_tools.model.sources import Source
from hlo_tools.ops import diff


def _render(
  args: argparse.Namespace,
  src_a: Source,
  src_b: Source,
  result: dict[str, Any],
  tr: dict[str, Any] | None,
) -> str:
  if args.format == "json":
    return diff.format_json(result, tr)
  if args.format == "html":
    return diff.format_html(result, src_a, src_b, tr)
  return diff.format_text(result, tr)


def _trace(spec: str) -> dict[str, Any]:
  """--trace DUMP_DIR or DUMP_DIR:PROGRAM."""
  if not os.path.isdir(spec) and ":" in spec:
    folder, _, name = spec.rpartition(":")
    if os.path.isdir(folder):
      return diff.trace(folder, dumps.resolve_program(folder, name))
  return diff.trace(spec)


def main(argv: list[str]) -> int:
  parser = common.parser_for(argv[0] if argv else "hlo-tools diff", __doc__)
  parser.add_argument(
    "a",
    help="FILE (HLO text or .hlo.pb) or DIR:[PROGRAM:]STAGE (STAGE: "
    + STAGE_HELP
    + "; "
    + dumps.PROGRAM_HELP
    + ")",
  )
  parser.add_argument("b", help="FILE or DIR:[PROGRAM:]STAGE")
  parser.add_argument("--format", choices=("text", "json", "html"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  parser.add_argument(
    "--trace",
    default=None,
    metavar="DUMP_DIR",
    help="also trace each collective-permute through XLA's passes",
  )
  parser.add_argument(
    "--ignore-metadata",
    action="store_true",
    help="do not report metadata (op_name, scheduling_name) changes",
  )
  common.add_partitions_flag(parser)
  bounded_input.add_max_input_bytes(parser)

  def run(args: argparse.Namespace) -> int:
    src_a = diff.read_input(args.a, args.max_input_bytes, "diff")
    src_b = diff.read_input(args.b, args.max_input_bytes, "diff")
    for src in (src_a, src_b):
      sources.resolve_partitions(src, override=args.num_partitions)
    common.check_out_path(args.out, [src_a.path, src_b.path])
    tr = _trace(args.trace) if args.trace else None
    with diff.collector_paused():
      result = diff.diff_sources(src_a, src_b, args.ignore_metadata)
      text = _render(args, src_a, src_b, result, tr)
    common.write_output(text, args.out)
    return 0

  return common.run_command(parser, argv, run)
