"""`hlo-tools heuristics`: test and tune the backend-selection heuristic.

    hlo-tools heuristics sweep [--out=DIR] [--topology=SPEC ...] [--cost-table=F]
    hlo-tools heuristics check-pass [--topology=SPEC ...] [--cost-table=F]
    hlo-tools heuristics calibrate CSV [--out=TABLE]

sweep: modeled times of every plan over sizes x topologies x shapes, against
the oracle, upstream XLA's assigner and NCCL-only. check-pass: compile real JAX
programs for a sample of those cases and check the C++ pass decides what the
core predicts. calibrate: fit a cost table from measured point-to-point times.
"""

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Iterable

from hlo_tools import bounded_input, selection
from hlo_tools.commands import common
from hlo_tools.ops.heuristics import HeuristicsError

# What `--help` says of each; `hlo-tools heuristics SUBCOMMAND --help` says more.
DESCRIPTIONS = {
  "sweep": "modeled time of every plan over sizes x topologies x shapes, against the "
  "model's best, upstream XLA's assigner and NCCL-only (CSV, JSON, plots)",
  "check-pass": "compile real JAX programs for a sample of the sweep's cases and check "
  "that the C++ pass decides what the core predicts",
  "calibrate": "fit a cost table from measured permute times (a CSV of seconds from "
  "benchmarks/xla_permute_bench.py)",
}


def main(argv: list[str]) -> int:
  prog = argv[0] if argv else "hlo-tools heuristics"
  parser = common.ArgumentParser(
    prog=prog,
    description=__doc__.split("\n\n", maxsplit=1)[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog="subcommands (SUBCOMMAND --help for their options):\n"
    + "\n".join(
      textwrap.fill(text, 78, initial_indent=f"  {name:<11} ", subsequent_indent=" " * 14)
      for name, text in DESCRIPTIONS.items()
    ),
  )
  parser.add_argument(
    "subcommand", choices=sorted(SUBCOMMANDS), help="one of: " + ", ".join(DESCRIPTIONS)
  )
  parser.add_argument("args", nargs=argparse.REMAINDER, help="the subcommand's arguments")

  def run(args: argparse.Namespace) -> int:
    sub_prog = f"{prog} {args.subcommand}"
    try:
      return SUBCOMMANDS[args.subcommand]([sub_prog] + args.args)
    except HeuristicsError as e:
      raise HeuristicsError(f"{sub_prog}: {e}") from None

  return common.run_command(parser, argv, run)


def _sweep_parser(prog: str, description: str, shapes: Iterable[str]) -> argparse.ArgumentParser:
  p = common.ArgumentParser(prog=prog, description=description)
  p.add_argument(
    "--out", default="heuristics-sweep", help="output directory (default: %(default)s)"
  )
  p.add_argument(
    "--topology",
    action="append",
    default=[],
    help="extra topology SPEC (repeatable), e.g. 2x4x8:nvl16",
  )
  p.add_argument(
    "--only-given",
    action="store_true",
    help="sweep only the --topology specs, not the built-in five",
  )
  p.add_argument("--cost-table", help="cost table file (default: built-in table)")
  p.add_argument(
    "--sizes",
    help="comma-separated buffer sizes, e.g. 1K,1M,1G (default: 1 KiB .. 1 GiB in factors of 2)",
  )
  p.add_argument(
    "--shapes", default=",".join(shapes), help="comma-separated subset of " + ",".join(shapes)
  )
  p.add_argument("--no-plots", action="store_true", help="skip the PNGs")
  bounded_input.add_max_input_bytes(p)
  return p


def _sweep(argv: list[str]) -> int:
  from hlo_tools.ops.heuristics import sweep, sweep_cases, sweep_summary  # pylint: disable=import-outside-toplevel

  args = _sweep_parser(argv[0], sweep.__doc__.split("\n\n")[0], sweep_cases.SHAPES).parse_args(
    argv[1:]
  )
  table = selection.load_cost_table(args.cost_table, args.max_input_bytes)
  paths, summary = sweep.run_sweep(
    args.out,
    args.topology,
    args.only_given,
    args.cost_table,
    args.sizes,
    args.shapes,
    plots=not args.no_plots,
    table=table,
  )
  for path in paths:
    print(f"wrote {path}", file=sys.stderr)
  print("\n".join(sweep_summary.format_summary(summary)))
  return 0


def _check_pass_parser(
  prog: str, description: str, default_topologies: Iterable[str]
) -> argparse.ArgumentParser:
  p = common.ArgumentParser(prog=prog, description=description)
  p.add_argument(
    "--topology",
    action="append",
    default=[],
    help="topology SPEC to check (repeatable; default: " + ", ".join(default_topologies) + ")",
  )
  p.add_argument("--cost-table", help="cost table for both the core and the pass")
  p.add_argument(
    "--nvshmem-opt", help="path of nvshmem-opt (default: next to this python, else on PATH)"
  )
  p.add_argument("--out", help="keep the compiled HLO and pass reports here")
  p.add_argument(
    "--jobs",
    type=int,
    default=min(4, os.cpu_count() or 1),
    help="compiles in parallel (default: %(default)s)",
  )
  bounded_input.add_max_input_bytes(p)
  return p


def _check_pass(argv: list[str]) -> int:
  # jax only when compiling (check imports it there), after the inputs are read.
  from hlo_tools.ops.heuristics import check  # pylint: disable=import-outside-toplevel

  args = _check_pass_parser(
    argv[0], check.__doc__.split("\n\n")[0], check.DEFAULT_TOPOLOGIES
  ).parse_args(argv[1:])
  table = selection.load_cost_table(args.cost_table, args.max_input_bytes)
  results = check.run_check(
    args.topology, args.cost_table, args.nvshmem_opt, args.out, args.jobs, table=table
  )
  failed = 0
  for name, row, problems in results:
    if problems or row is None:  # a permute outside the sample has no row, only problems
      failed += 1
      print(f"MISMATCH {name}: " + "; ".join(problems))
    else:
      print(
        f"ok {name}: {row['chosen_plan']} {row['chosen_us']:.2f} us "
        f"(nccl {row['nccl_us']:.2f}, upstream {row['upstream_plan']})"
      )
  print(f"check-pass: {len(results) - failed} of {len(results)} cases match the core")
  return 1 if failed else 0


def _calibrate(argv: list[str]) -> int:
  # pylint: disable=import-outside-toplevel
  from hlo_tools.ops.heuristics import calibrate, evaluate, plot

  p = common.ArgumentParser(prog=argv[0], description=calibrate.__doc__.split("\n\n")[0])
  p.add_argument(
    "csv", help="measured times: backend,link_class,bytes,seconds[,operands,step_s,baseline_s,...]"
  )
  p.add_argument("--out", default="-", help="cost table to write ('-': stdout)")
  p.add_argument(
    "--base-table",
    help="table whose entries are kept where the CSV has no data (default: the built-in defaults)",
  )
  p.add_argument(
    "--holdout",
    default="none",
    choices=evaluate.HOLDOUTS,
    help="odd-powers-of-two: sizes that are not powers of 4 only validate the model",
  )
  p.add_argument("--holdout-csv", help="a second CSV that only validates the model")
  p.add_argument(
    "--machine",
    help="where the CSV was measured, for the table's provenance (e.g. '2x H200 SXM, NV18 NVLink')",
  )
  p.add_argument("--software", help="versions measured with, for the provenance")
  p.add_argument(
    "--note", action="append", default=[], help="a further provenance comment (repeatable)"
  )
  p.add_argument("--date", help="date for the provenance (default: today, UTC)")
  p.add_argument("--plot", help="PNG of model vs measurement per backend")
  p.add_argument("--errors-csv", help="every measurement with its modeled time")
  bounded_input.add_max_input_bytes(p)
  args = p.parse_args(argv[1:])
  result = calibrate.run_calibration(
    args.csv,
    args.base_table,
    args.machine,
    args.date,
    args.holdout,
    args.holdout_csv,
    args.software,
    args.note,
    args.max_input_bytes,
  )
  checks = evaluate.evaluate(result.table, result.calibration, result.held_out)
  for line in evaluate.error_report(result.fits, checks):
    print(line, file=sys.stderr)
  if args.plot:
    plot.plot_calibration(args.plot, result, checks, os.path.basename(args.csv))
    print(f"wrote {args.plot}", file=sys.stderr)
  if args.errors_csv:
    evaluate.write_errors_csv(args.errors_csv, checks)
    print(f"wrote {args.errors_csv}", file=sys.stderr)
  if args.out == "-":
    sys.stdout.write(result.text)
  else:
    evaluate.write_file(args.out, result.text)
    print(f"wrote {args.out}", file=sys.stderr)
  return 0


# subcommand -> its main(argv). Each imports its operation when it runs (check-pass
# pulls in the dump machinery, sweep may pull in matplotlib).
SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
  "sweep": _sweep,
  "check-pass": _check_pass,
  "calibrate": _calibrate,
}
