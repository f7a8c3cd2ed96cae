"""`hlo-tools explain FILE --topology=T`: why each collective-permute gets its backend.

    hlo-tools explain FILE [--topology=SPEC | --devices-per-host=N] [--cost-table=F]
                      [--format=text|json]
                      [--backends=nccl,nvshmem|nccl,peer[,symmetric]]
                      [--num-partitions=N] [--max-input-bytes=N] [--out=F]

One entry per collective-permute (sync, start/done or async-wrapped): where it is
(computation, enclosing while loop and trip count, line), bytes per device, edges
by link class, modeled time per backend, the selection core's choice and reason as
the pass makes it in this module, and what upstream XLA's CollectiveBackendAssigner
chooses: the real assigner, run by `nvshmem-opt --compare-upstream` (without the
driver, upstream's answer is reported as unavailable, never guessed).

--backends names the backends the target XLA offers, as for nvshmem-opt: nccl,nvshmem
(the pinned XLA) or nccl,peer[,symmetric] (XLA of jax >= 0.10.2, written as
collectives_mode); default: the cost table's set. Each backend of the set is shown
with its modeled time, or why it is refused.

Without --topology the topology is the one nvshmem-opt derives from the module, as
the pass does inside XLA: hosts of --devices-per-host GPUs (default 8, or the module's
device count when smaller).

Exit status: 0 ok, 2 bad input (unreadable or malformed HLO, broken pair list,
bad topology or cost table).
"""

import json

from hlo_tools import cli_io
from hlo_tools.commands import common
from hlo_tools.ops import explain


def main(argv):
  parser = common.parser_for(argv[0] if argv else "hlo-tools explain", __doc__)
  parser.add_argument("file", help="HLO text file")
  common.add_topology_flags(parser)
  common.add_backends_flag(parser)
  parser.add_argument("--format", choices=("text", "json"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  common.add_partitions_flag(parser)
  cli_io.add_max_input_bytes(parser)

  def run(args):
    common.check_out_path(args.out, [args.file])
    spec = common.topology_spec(args, args.file, parser.prog)
    result = explain.explain(args.file, spec, args.cost_table,
                             num_partitions=args.num_partitions,
                             max_bytes=args.max_input_bytes, backends=args.backends)
    text = (json.dumps(result, indent=1) if args.format == "json"
            else explain.format_text(result))
    common.write_output(text, args.out)
    return 0

  return common.run_command(parser, argv, run)
