"""`hlo-tools explain FILE|DIR:[PROGRAM:]STAGE --topology=T`: why each collective-permute gets its backend.

    hlo-tools explain FILE|DIR:[PROGRAM:]STAGE [--topology=SPEC | --devices-per-host=N] [--cost-table=F]
                      [--format=text|json]
                      [--backends=nccl,nvshmem|nccl,peer[,symmetric]]
                      [--num-partitions=N] [--max-input-bytes=N] [--out=F]
                      [--per-op-modes]

One entry per collective-permute (sync, start/done or async-wrapped): where it is
(computation, enclosing while loop and trip count, line), bytes per device, edges
by link class, modeled time per backend, the selection core's choice and reason as
the pass makes it in this module, and what upstream XLA's CollectiveBackendAssigner
chooses: the real assigner, run by `nvshmem-opt --compare-upstream` (without the
driver, upstream's answer is reported as unavailable, never guessed).

A permute the user marked with _xla_collectives_mode (jax's set_xla_metadata) keeps
its mark: its choice reads "marked by the user: MODE", the mark's backend where the
permute can run it (else NCCL, and the reason says why), and no tool changes it. A
permute under a conditional's branch runs on only some of its loops' trips: its
runs per step are "at most" the loops' count.

--backends names the backends the target XLA offers, as for nvshmem-opt: nccl,nvshmem
(the pinned XLA) or nccl,peer[,symmetric] (XLA of jax >= 0.10.2, written as
collectives_mode); default: the cost table's set. Each backend of the set is shown
with its modeled time, or why it is refused.

Per program: the one collectives mode a stock XLA would run for every permute (each
XLA jax ships builds the permute thunk with the flag xla_gpu_collective_permute_mode),
chosen by the core as the fastest mode every permute can run (modeled time x runs per
step, summed), the setting that applies it (XLA_FLAGS and jax's compiler_options),
its modeled saving against NCCL, and what a per-op choice would add, which only an
XLA with the series for jax v0.11.0 runs. Per permute, `runs`: the mode its thunk
runs, from the flag the module was compiled with (XLA's module config beside the
file; else XLA's default), or with --per-op-modes its own.

DIR:STAGE reads a stage of a dump directory as `hlo-tools diff` does, e.g.
DIR:before_async (the module entering async-collective-creator) or
DIR:after:PASS[#N]; without --topology, on the topology the dump was compiled for.
A folder of several programs (a training script's init, step, eval and metrics
functions): each program with collective-permutes is explained in turn, after a
line saying how many programs the folder holds and which were skipped, and why;
DIR:PROGRAM:STAGE picks one (PROGRAM: its module name, e.g. jit_train_step or
train_step, or its id, e.g. 668 or module_0668).

FILE is HLO text or a serialized module as XLA dumps it (X.hlo.pb), placed by the
device assignment it carries or by its module's config beside it; a FIFO, device or
"-" (stdin) is read once, within --max-input-bytes and --input-timeout.

Without --topology the topology is the one nvshmem-opt derives from the module, as
the pass does inside XLA: hosts of --devices-per-host GPUs (default 8, or the module's
device count when smaller).

Exit status: 0 ok, 2 bad input (unreadable or malformed HLO, broken pair list,
bad topology or cost table).
"""  # noqa: E501  (the --help text)

import argparse
import json

from hlo_tools import bounded_input
from hlo_tools.commands import common
from hlo_tools.model import dumps
from hlo_tools.ops import explain


def main(argv: list[str]) -> int:
  parser = common.parser_for(argv[0] if argv else "hlo-tools explain", __doc__)
  parser.add_argument(
    "file",
    help="HLO text or .hlo.pb file, or DIR:[PROGRAM:]STAGE of a "
    "dump directory (STAGE: " + dumps.STAGE_HELP + "; " + dumps.PROGRAM_HELP + ")",
  )
  common.add_topology_flags(parser)
  common.add_backends_flag(parser)
  parser.add_argument("--format", choices=("text", "json"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  common.add_target_flag(parser)
  common.add_partitions_flag(parser)
  bounded_input.add_max_input_bytes(parser)

  def run(args: argparse.Namespace) -> int:
    results = []
    with common.module_inputs(args.file, args.max_input_bytes) as found:
      for one in found.inputs:
        common.check_out_path(args.out, [one.path])
        selected, answer = common.selection_for(args, args.file, one.path, parser.prog)
        stage = one.stage or dumps.manifest_stage(one.path)
        results.append(
          one.in_user_terms(
            explain.explain(
              one.path,
              selected,
              source=one.source,
              stage=stage,
              num_partitions=args.num_partitions,
              max_bytes=args.max_input_bytes,
              per_op_xla=args.per_op_modes,
              report=answer.report if answer else None,
            )
          )
        )
    if found.note is None:
      text = (
        json.dumps(results[0], indent=1)
        if args.format == "json"
        else explain.format_text(results[0])
      )
    elif args.format == "json":
      text = json.dumps(common.programs_json(found, results), indent=1)
    else:
      text = common.programs_text(found, [explain.format_text(r) for r in results])
    common.write_output(text, args.out)
    return 0

  return common.run_command(parser, argv, run)
