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
import sys

from hlo_tools import cli_io
from hlo_tools.commands import common
from hlo_tools.commands.common import human_bytes, us
from hlo_tools.model import decisions, source as source_mod


PRE_OPTIMIZATION_NOTE = (
    "note: this module is from before XLA's optimizations (no fusions, no async "
    "permutes), not what the pass sees: inside XLA it runs after "
    "collective-permute-combiner, which merges the permutes of one step into fewer, "
    "larger ones of several buffers, so its sizes and choices can differ from these. "
    "Explain the module entering async-collective-creator (the before_async stage of "
    "`hlo-tools dump --all_passes`) or the after-optimizations module instead.")


def is_pre_optimization(module, collectives):
  """A module with permutes, none async and no fusion: jax's lowered or XLA's
  before-optimizations HLO, which the combiner has not seen yet."""
  if not collectives or any(e["form"] != "sync" for e in collectives):
    return False
  return not any(i.opcode == "fusion" for i in module.instructions())


def explain(path, topology_spec, cost_table=None, source=None,
            max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES, **kwargs):
  """The model layer's description of the module (decisions.describe: kwargs), with
  a note when the module is from before XLA's optimizations."""
  source = source or source_mod.read_source(path, max_bytes=max_bytes)
  result = decisions.describe(path, topology_spec, cost_table, source=source, **kwargs)
  pre = is_pre_optimization(source.module, result["collectives"])
  result["stage"] = "before_optimizations" if pre else None
  result["note"] = PRE_OPTIMIZATION_NOTE if pre else None
  return result


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


def modeled_text(m, sets):
  """Each backend of the set with its modeled time ('refused' when it cannot run)."""
  if not sets:
    return f"nccl {us(m['nccl'])}, nvshmem {us(m['nvshmem'])}"
  return ", ".join(f"{b} {'refused' if v['refused'] else us(v['us'])}"
                   for b, v in sets.items())


def current_text(e):
  mode = e.get("current_collectives_mode")
  if mode in (None, "COLLECTIVES_MODE_INVALID"):
    return e["current_backend"]
  return f"{e['current_backend']}, collectives_mode {mode} ({e['current_plan']})"


def format_text(result):
  inferred = result.get("num_partitions_from", "module header")
  lines = [f"{result['file']}: {len(result['collectives'])} collective-permute(s), "
           f"topology {result['topology']}, {result['num_partitions']} partitions"
           + ("" if inferred in ("module header", "default") else f" ({inferred})")
           + f" x {result['num_replicas']} replicas"
           + (f", backends {result['backends']}" if result.get("backends") else "")]
  if result.get("note"):
    lines.append(result["note"])
  for e in result["collectives"]:
    classes = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v) or "none"
    m = e["modeled_us"]
    sets = e.get("backends") or {}
    rows = [
        ("where", where_text(e)),
        ("form", e["form"] + (f" (done %{e['done']} line {e['done_line']})" if e["done"] else "")),
        ("bytes", f"{e['bytes']} ({human_bytes(e['bytes'])}) per device in "
                  f"{e.get('buffers', 1)} buffer(s)"),
        ("pairs", pairs_text(e["pairs"])),
        ("edges", classes),
        ("modeled", modeled_text(m, sets)
         + (f"; x{e['trip_count']} trips = {us(e['modeled_loop_us'])}"
            if e["modeled_loop_us"] is not None else "")),
        ("choice", f"{e['choice']['plan']} (backend {e['choice']['backend']}"
                   + (f", collectives_mode {e['choice_collectives_mode']}"
                      if e.get("choice_collectives_mode") else "")
                   + f", {us(m['chosen'])}); now {current_text(e)}"),
        ("reason", e["reason"]),
        ("upstream XLA", f"{e['upstream']['backend'] or '-'} ({e['upstream']['source']})"),
    ]
    rows[6:6] = [("refused", v["refused"]) for v in sets.values()
                 if v["refused"]]
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
  common.add_backends_flag(parser)
  parser.add_argument("--format", choices=("text", "json"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  common.add_partitions_flag(parser)
  cli_io.add_max_input_bytes(parser)

  def run(args):
    common.check_out_path(args.out, [args.file])
    spec = common.topology_spec(args, args.file, parser.prog)
    result = explain(args.file, spec, args.cost_table,
                     num_partitions=args.num_partitions, max_bytes=args.max_input_bytes,
                     backends=args.backends)
    text = json.dumps(result, indent=1) if args.format == "json" else format_text(result)
    common.write_output(text, args.out)
    return 0

  return common.run_command(parser, argv, run)


if __name__ == "__main__":
  sys.exit(cli_io.run_main(main, ["hlo-tools explain"] + sys.argv[1:]))
