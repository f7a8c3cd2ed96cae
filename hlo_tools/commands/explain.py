"""`hlo-tools explain FILE --topology=T`: why each collective-permute gets its backend.

    hlo-tools explain FILE --topology=SPEC [--cost-table=F] [--format=text|json]
                      [--num-partitions=N] [--max-input-bytes=N] [--out=F]

One entry per collective-permute (sync, start/done or async-wrapped): where it is
(computation, enclosing while loop and trip count, line), bytes per device, edges
by link class, modeled time per backend, the selection core's choice and reason as
the pass makes it in this module, and what upstream XLA's CollectiveBackendAssigner
chooses: the real assigner, run by `nvshmem-opt --compare-upstream` (without the
driver, upstream's answer is reported as unavailable, never guessed).

Split parts written by an older pass (`<name>.nvshmem-start` / `<name>.nccl-start`,
frontend attribute `_nvshmem_split_part`) are explained on the union of their
pairs, i.e. the permute the pass decided on.

Exit status: 0 ok, 2 bad input (unreadable or malformed HLO, broken pair list,
bad topology or cost table).
"""

import json
import sys

from hlo_tools import cli_io
from hlo_tools.commands import common
from hlo_tools.commands.common import human_bytes, us
from hlo_tools.model import decisions


# The explain JSON is the model layer's description of a module (decisions.describe).
explain = decisions.describe


# ---------------------------------------------------------------------------------------
# Text

def pairs_text(pairs, limit=16):
  text = " ".join(f"{s}->{t}" for s, t in pairs[:limit])
  return text + (f" ... ({len(pairs)} pairs)" if len(pairs) > limit else "")


def where_text(e):
  loop = (f"; while %{e['while_loop']} in %{e['while_computation']}, trip count "
          f"{e['trip_count'] if e['trip_count'] is not None else 'unknown'}"
          if e["while_loop"] else "; not in a loop")
  return f"%{e['computation']} line {e['line']}{loop}"


def format_text(result):
  inferred = result.get("num_partitions_from", "module header")
  lines = [f"{result['file']}: {len(result['collectives'])} collective-permute(s), "
           f"topology {result['topology']}, {result['num_partitions']} partitions"
           + ("" if inferred in ("module header", "default") else f" ({inferred})")
           + f" x {result['num_replicas']} replicas"]
  for e in result["collectives"]:
    classes = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v) or "none"
    m = e["modeled_us"]
    rows = [
        ("where", where_text(e)),
        ("form", e["form"] + (f" (done %{e['done']} line {e['done_line']})" if e["done"] else "")
         + (f", split part '{e['split_part']}', decided on the union of the parts"
            if e["split_part"] else "")),
        ("bytes", f"{e['bytes']} ({human_bytes(e['bytes'])}) per device in "
                  f"{e.get('buffers', 1)} buffer(s)"),
        ("pairs", pairs_text(e["pairs"])),
        ("edges", classes),
        ("modeled", f"nccl {us(m['nccl'])}, nvshmem {us(m['nvshmem'])}, "
                    f"split {us(m['split'])}"
         + (f"; x{e['trip_count']} trips = {us(e['modeled_loop_us'])}"
            if e["modeled_loop_us"] is not None else "")),
        ("choice", f"{e['choice']['plan']} (backend {e['choice']['backend']}, "
                   f"{us(m['chosen'])}); now {e['current_backend']}"),
        ("reason", e["reason"]),
        ("upstream XLA", f"{e['upstream']['backend'] or '-'} ({e['upstream']['source']})"),
    ]
    if e["recorded"]:
      rows.append(("pass wrote", f"plan {e['recorded']['plan']}: {e['recorded']['reason']}"))
    lines.append("")
    lines.append(f"%{e['instruction']}")
    lines.extend(f"  {k:<13} {v}" for k, v in rows)
  return "\n".join(lines)



def main(argv):
  parser = common.parser_for(argv[0] if argv else "hlo-tools explain", __doc__)
  parser.add_argument("file", help="HLO text file")
  common.add_topology_flags(parser)
  parser.add_argument("--format", choices=("text", "json"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  common.add_partitions_flag(parser)
  cli_io.add_max_input_bytes(parser)

  def run(args):
    common.check_out_path(args.out, [args.file])
    result = explain(args.file, args.topology, args.cost_table,
                     num_partitions=args.num_partitions, max_bytes=args.max_input_bytes)
    text = json.dumps(result, indent=1) if args.format == "json" else format_text(result)
    common.write_output(text, args.out)
    return 0

  return common.run_command(parser, argv, run)


if __name__ == "__main__":
  sys.exit(cli_io.run_main(main, ["hlo-tools explain"] + sys.argv[1:]))
