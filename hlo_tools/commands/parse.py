"""`hlo-tools parse FILE [--json]`: read HLO text and summarise it (and its collective-permutes)."""

import argparse
import dataclasses
import json
from typing import Any

from hlo_tools import bounded_input
from hlo_tools.commands import common
from hlo_tools.hlo.ir import HloModule
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model.collectives import collective_permutes, trips_text
from hlo_tools.model.sources import proto_text, require_entry


def summarize(module: HloModule) -> dict[str, Any]:
  """A JSON-friendly summary of a parsed module."""
  return {
    "module": module.name,
    "path": module.path,
    "num_partitions": module.num_partitions,
    "num_replicas": module.num_replicas,
    "is_scheduled": module.is_scheduled,
    "entry": module.entry.name,
    "instruction_count": module.instruction_count,
    "computations": [
      {
        "name": c.name,
        "is_entry": c.is_entry,
        "line": c.line,
        "instructions": len(c.instructions),
        "root": c.root.name,
      }
      for c in module.computations
    ],
    "collective_permutes": [dataclasses.asdict(r) for r in collective_permutes(module)],
  }


def _text(summary: dict[str, Any]) -> str:
  lines = [
    f"module {summary['module']}: {len(summary['computations'])} computations, "
    f"{summary['instruction_count']} instructions, entry %{summary['entry']}"
  ]
  for c in summary["computations"]:
    lines.append(
      f"  {'ENTRY ' if c['is_entry'] else ''}%{c['name']}: {c['instructions']} "
      f"instructions (line {c['line']})"
    )
  perms = summary["collective_permutes"]
  lines.append(f"collective-permutes: {len(perms)}")
  for r in perms:
    counts = [n for _, _, n in r["loops"]]
    branch = r.get("branch")
    loop = (
      f" in while %{r['while_loop']} (trip count "
      f"{'unknown' if counts[0] is None else counts[0]}"
      + (
        f"; {trips_text(counts, bool(branch))}" + ("" if branch else " in all loops")
        if len(counts) > 1 or branch
        else ""
      )
      + ")"
      if r["while_loop"]
      else ""
    )
    loop += f", a branch of conditional %{branch[0]}" if branch else ""
    names = r["start"] + (f" -> %{r['done']}" if r["done"] else "")
    lines.append(
      f"  {r['form']} %{names} in %{r['computation']} line {r['start_line']}: "
      f"{len(r['pairs'])} pairs, {r['bytes_per_device']} bytes/device, "
      f"backend {r['backend']}{loop}"
    )
  return "\n".join(lines)


def main(argv: list[str]) -> int:
  parser = common.parser_for(argv[0] if argv else "hlo-tools parse", __doc__ or "")
  parser.add_argument(
    "file", help='HLO text file, a serialized module (X.hlo.pb, as XLA dumps it), or "-" for stdin'
  )
  parser.add_argument("--json", action="store_true", help="print the summary as JSON")
  bounded_input.add_max_input_bytes(parser)

  def run(args: argparse.Namespace) -> int:
    data = bounded_input.read_input(args.file, args.max_input_bytes)
    text = proto_text(data, args.file)  # X.hlo.pb, as XLA dumps it
    module = parse_hlo_text(data if text is None else text, args.file)
    require_entry(module, data.decode("utf-8", "replace") if text is None else text, args.file)
    summary = summarize(module)
    print(json.dumps(summary, indent=1) if args.json else _text(summary))
    return 0

  return common.run_command(parser, argv, run)
