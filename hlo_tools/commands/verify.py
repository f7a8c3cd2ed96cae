"""`hlo-tools verify FILE|DIR:[PROGRAM:]STAGE --topology=T`: named checks on a module's collective-permutes.

    hlo-tools verify FILE|DIR:[PROGRAM:]STAGE [--topology=SPEC | --devices-per-host=N] [--cost-table=F]
                     [--format=text|json] [--out=F]
                     [--backends=nccl,nvshmem|nccl,peer[,symmetric]] [--per-op-modes]

--backends names the backends the target XLA offers, as for nvshmem-opt (default: the
cost table's set, nccl,nvshmem unless the table says otherwise). An op's backend is
NVSHMEM by collective_backend_config.backend, peer or symmetric memory by its
collectives_mode (XLA of jax >= 0.10.2), NCCL otherwise.

Each check reports pass / fail / skip per instruction (with its line), or "not
applicable" as a whole:

  permutation     source_target_pairs form a valid permutation: no repeated source
                  or target, ids below num_partitions (cross-partition, i.e. with a
                  channel_id) or num_replicas (cross-replica)
  start-done      every collective-permute start has exactly one done in the same
                  computation, and nothing but its done (and async-updates leading
                  to it) uses the start
  backend-config  backend_config is a JSON object; collective_backend_config, when
                  present, is an object whose backend is DEFAULT or NVSHMEM and whose
                  collectives_mode is a value of XLA's enum (not set on an NVSHMEM
                  op); the pass's frontend attributes hold known values
  start-done-agree
                  a permute's start and done say the same: the done's
                  collective_backend_config, where it has one, and its
                  _xla_collectives_mode, where it has one, are the start's
  backend-set     every op's backend is one the backend set contains
  user-mark       a permute the user marked with _xla_collectives_mode (jax's
                  set_xla_metadata) runs the mark's mode: its backend_config names
                  no other (private is NCCL's); in the report's check of a rewrite,
                  the mark is also the one the input had
  nvshmem-heap    NVSHMEM only where the message fits the symmetric heap
                  (nvshmem_max_bytes in the cost table)
  nvshmem-team    no NVSHMEM permute leaves a device of the program without a
                  source: the pinned XLA's NVSHMEM collective-permute ends each buffer
                  with a barrier over NVSHMEM_TEAM_SHARED that only devices with a
                  source call, so such a permute hangs the runtime
  nvshmem-runtime what else the pinned runtime needs of an NVSHMEM permute: every
                  buffer of an element type it puts (F64, F32, F16, BF16, S32, S64,
                  U32, U64; nvshmem_communicator.cc:367, else it fails at run time),
                  every edge inside one host (the receiver waits only on
                  NVSHMEM_TEAM_SHARED, :179; a multi-host NVLink domain is refused
                  too, as nothing establishes that the team spans it).
                  xla_gpu_use_memcpy_local_p2p, which the thunk refuses, is a flag,
                  not in the HLO: not checked
  peer-safety     peer and symmetric memory only where the core's safety rule for
                  them allows: every device of the permute in one process (XLA of
                  jax 0.10.2 otherwise runs NCCL, collective_permute_thunk.cc:309,
                  :317) and inside one host; symmetric also needs NCCL signals
                  (symmetric_signals in the table). Neither needs a source for
                  every device: one without gets zeros. Neither runs under a
                  conditional's branch, where devices may run other permutes
  selection       the backend equals what the selection core decides for the topology,
                  cost table and backend set. DEFAULT ops without a recorded decision
                  (_nvshmem_plan, written by `nvshmem-opt --annotate`) are skipped:
                  nothing says the pass ran.
  memory-space    NVSHMEM operands and results live in the collective memory space
                  (S(1) in the layout); only applicable where some layout in the
                  module names a memory space S(n); otherwise the note says whether
                  XLA's buffer-assignment dump lies beside the module, which
                  nvshmem-runtime reads for the destinations
  hlo-verifier    XLA's HloVerifier accepts the module (`nvshmem-opt --mode=explain`);
                  skipped when nvshmem-opt is not built
  permute-mode    a collectives_mode written on a permute is the mode its thunk runs:
                  a stock XLA runs every permute in the flag
                  xla_gpu_collective_permute_mode it was compiled with (read from
                  XLA's module config beside the file, else XLA's default PRIVATE),
                  so a different mode on the op is not run (and a SYMMETRIC one has
                  moved the op's buffers); --per-op-modes: the target XLA carries
                  the series for jax v0.11.0, whose thunk runs the op's own mode

DIR:STAGE reads a stage of a dump directory as `hlo-tools diff` does, e.g.
DIR:before_async (the module entering async-collective-creator) or
DIR:after:PASS[#N]; without --topology, on the topology the dump was compiled for.
A folder of several programs (a training script's init, step, eval and metrics
functions): each program with collective-permutes is verified in turn, after a line
saying how many programs the folder holds and which were skipped, and why; the exit
status is 1 when any fails. DIR:PROGRAM:STAGE picks one (PROGRAM: its module name,
e.g. jit_train_step or train_step, or its id, e.g. 668 or module_0668).

FILE is HLO text or a serialized module as XLA dumps it (X.hlo.pb), placed by the
device assignment it carries or by its module's config beside it; a FIFO, device or
"-" (stdin) is read once, within --max-input-bytes and --input-timeout.

Without --topology the topology is the one nvshmem-opt derives from the module, as
the pass does inside XLA: hosts of --devices-per-host GPUs (default 8, or the module's
device count when smaller).

Any plan the module carries is judged, whoever wrote it: the pass, upstream's
assigner, or a hand edit.

Exit status: 0 all checks pass (skips allowed), 1 a check failed, 2 unreadable input
(missing file, malformed HLO, broken pair list, bad topology or cost table, a topology
with fewer devices than the module).
"""  # noqa: E501  (the --help text)

import argparse
import json

from hlo_tools import bounded_input
from hlo_tools.commands import common
from hlo_tools.model import dumps
from hlo_tools.ops import verify


def main(argv: list[str]) -> int:
  parser = common.parser_for(argv[0] if argv else "hlo-tools verify", __doc__)
  parser.add_argument(
    "file",
    help="HLO text or .hlo.pb file, or DIR:[PROGRAM:]STAGE of a "
    "dump directory (STAGE: " + dumps.STAGE_HELP + "; " + dumps.PROGRAM_HELP + ")",
  )
  common.add_topology_flags(parser)
  common.add_backends_flag(parser)
  parser.add_argument("--format", choices=("text", "json"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  parser.add_argument(
    "--no-hlo-verifier",
    dest="hlo_verifier",
    action="store_false",
    help="do not run XLA's HloVerifier through nvshmem-opt",
  )
  common.add_target_flag(parser)
  common.add_partitions_flag(parser)
  bounded_input.add_max_input_bytes(parser)

  def run(args: argparse.Namespace) -> int:
    results = []
    with common.module_inputs(args.file, args.max_input_bytes) as found:
      for one in found.inputs:
        common.check_out_path(args.out, [one.path])
        selected, answer = common.selection_for(
          args, args.file, one.path, parser.prog, compare_upstream=False
        )
        results.append(
          one.in_user_terms(
            verify.verify(
              one.path,
              selected,
              run_driver=args.hlo_verifier,
              source=one.source,
              num_partitions=args.num_partitions,
              max_bytes=args.max_input_bytes,
              per_op_xla=args.per_op_modes,
              answer=answer,
            )
          )
        )
    if found.note is None:
      text = (
        json.dumps(results[0], indent=1)
        if args.format == "json"
        else verify.format_text(results[0])
      )
    elif args.format == "json":
      text = json.dumps(
        dict(common.programs_json(found, results), passed=all(r["passed"] for r in results)),
        indent=1,
      )
    else:
      text = common.programs_text(found, [verify.format_text(r) for r in results])
    common.write_output(text, args.out)
    return 0 if all(r["passed"] for r in results) else 1

  return common.run_command(parser, argv, run)
