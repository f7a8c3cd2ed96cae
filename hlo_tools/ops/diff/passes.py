"""How each collective-permute evolves through XLA's passes, from a dump written with
every pass: created, combined, decomposed, made async, backend set, moved,
scheduled; each permute of the final module with the permutes it came from."""

import os
from collections.abc import Sequence
from typing import Any

from hlo_tools import bounded_input
from hlo_tools.errors import InputError
from hlo_tools.model import dumps, sources
from hlo_tools.model.dumps import xla_dir_of
from hlo_tools.ops.diff.permutes import VIEW_FIELDS, Record, collective_view, match_collectives

# (kind, message, the origins of the permutes it touches, the names it gives them)
Event = tuple[str, str, set[str], list[str]]
# id(record) -> the permutes of the first snapshot (or created since) it comes from
Lineage = dict[int, set[str]]


def signature(text: str) -> str:
  """The lines a collective-permute's state depends on; equal -> nothing to re-parse."""
  lines = text.split("\n", 1)[:1]
  lines += [
    l
    for l in text.split("\n")
    if "collective-permute" in l or " while(" in l or " send(" in l or " recv(" in l
  ]
  return "\n".join(lines)


def _between(source: sources.Source, rec: Record) -> int | None:
  """Instructions scheduled between a start and its done (the overlap)."""
  if not rec["done"]:
    return None
  comp = source.module.computation(rec["computation"])
  names = [i.name for i in comp.instructions]
  try:
    return names.index(rec["done"]) - names.index(rec["start"]) - 1
  except ValueError:
    return None


def _fmt_rec(r: Record) -> str:
  return f"%{r['start']} ({r['form']}, {r['backend']}, {r['bytes']} B, {len(r['pairs'])} pairs)"


def _changes(ra: Record, group: Sequence[Record], origins: set[str]) -> list[Event]:
  """Events of one permute that is still there (maybe under a new name or split)."""
  events: list[Event] = []
  names, rb = [r["start"] for r in group], group[0]
  if len(group) > 1:
    events.append(
      (
        "split",
        f"%{ra['start']} split into " + ", ".join(_fmt_rec(r) for r in group),
        origins,
        names,
      )
    )
  if ra["form"] == "sync" and rb["form"] != "sync":
    events.append(
      (
        "made async",
        f"%{ra['start']} -> %{rb['start']} / %{rb['done']} ({rb['form']})",
        origins,
        names,
      )
    )
  if any(r["backend"] != ra["backend"] for r in group):
    events.append(
      (
        "backend set",
        f"%{rb['start']}: backend {ra['backend']} -> " + "/".join(r["backend"] for r in group),
        origins,
        names,
      )
    )
  if sorted(map(tuple, ra["pairs"])) != sorted(tuple(p) for r in group for p in r["pairs"]):
    events.append(
      (
        "pairs changed",
        f"%{rb['start']}: {len(ra['pairs'])} -> {sum(len(r['pairs']) for r in group)} pairs",
        origins,
        names,
      )
    )
  if ra["bytes"] != rb["bytes"]:
    events.append(
      ("bytes changed", f"%{rb['start']}: {ra['bytes']} -> {rb['bytes']} B", origins, names)
    )
  if (ra["while_loop"] is None) != (rb["while_loop"] is None) or ra["trip_count"] != rb[
    "trip_count"
  ]:
    events.append(
      (
        "loop changed",
        f"%{rb['start']}: while {ra['while_loop']} "
        f"(trips {ra['trip_count']}) -> {rb['while_loop']} "
        f"(trips {rb['trip_count']})",
        origins,
        names,
      )
    )
  if ra["computation"] != rb["computation"]:
    events.append(
      (
        "moved",
        f"%{rb['start']}: computation %{ra['computation']} -> %{rb['computation']}",
        origins,
        names,
      )
    )
  return events


def _gone(
  vanished: Sequence[Record], new: list[Record], lineage: Lineage, sends_added: int
) -> list[Event]:
  """Events of permutes that vanished: decomposed into new ones, into send/recv, or
  removed. A vanished permute whose pairs new ones of its computation share out (each
  a part, none overlapping, as the cycle decomposer does) was decomposed."""
  events: list[Event] = []
  for ra in list(vanished):
    pairs = set(map(tuple, ra["pairs"]))
    parts = [
      rb
      for rb in new
      if rb["computation"] == ra["computation"] and set(map(tuple, rb["pairs"])) < pairs
    ]
    if (
      parts
      and sum(len(r["pairs"]) for r in parts) == len(pairs)
      and set[tuple[int, ...]]().union(*(set(map(tuple, r["pairs"])) for r in parts)) == pairs
    ):
      for rb in parts:
        lineage[id(rb)] = set(lineage[id(ra)])
        new.remove(rb)
      events.append(
        (
          "decomposed",
          f"%{ra['start']} -> " + ", ".join(_fmt_rec(r) for r in parts),
          lineage[id(ra)],
          [r["start"] for r in parts],
        )
      )
    elif sends_added > 0:
      events.append(
        ("decomposed", f"%{ra['start']} -> send/recv ({sends_added} send(s))", lineage[id(ra)], [])
      )
    else:
      events.append(("removed", f"%{ra['start']} is gone", lineage[id(ra)], []))
  return events


def _sends(src: sources.Source) -> int:
  return sum(1 for i in src.module.instructions() if i.opcode == "send")


def _events(
  prev: Sequence[Record],
  cur: Sequence[Record],
  prev_src: sources.Source,
  cur_src: sources.Source,
  lineage: Lineage,
  next_id: list[int],
) -> list[Event]:
  """Events between two snapshots; updates lineage {id(rec): set of origin ids}."""
  events: list[Event] = []
  matched = match_collectives(prev, cur)
  vanished = [ra for ra, group in matched if ra is not None and not group]
  new = [group[0] for ra, group in matched if ra is None]
  for ra, group in matched:
    if ra is not None and group:
      for rb in group:
        lineage[id(rb)] = set(lineage[id(ra)])
      events += _changes(ra, group, lineage[id(ra)])
  for rb, group in _combines(vanished, new):
    origins = set[str]().union(*(lineage[id(r)] for r in group))
    lineage[id(rb)] = origins
    events.append(
      (
        "combined",
        " + ".join(f"%{r['start']}" for r in group) + f" -> {_fmt_rec(rb)}",
        origins,
        [rb["start"]],
      )
    )
    new.remove(rb)
    for r in group:
      vanished.remove(r)
  events += _gone(vanished, new, lineage, _sends(cur_src) - _sends(prev_src))
  for rb in new:
    origin = f"{rb['start']}#{next_id[0]}"
    next_id[0] += 1
    lineage[id(rb)] = {origin}
    events.append(("created", _fmt_rec(rb), {origin}, [rb["start"]]))
  if cur_src.module.is_scheduled and not prev_src.module.is_scheduled:
    for rb in cur:
      n = _between(cur_src, rb)
      events.append(
        (
          "scheduled",
          f"%{rb['start']}"
          + (f": {n} instruction(s) between start and done" if n is not None else ""),
          lineage.get(id(rb), set()),
          [rb["start"]],
        )
      )
  return events


def _combines(
  vanished: Sequence[Record], new: Sequence[Record]
) -> list[tuple[Record, list[Record]]]:
  """[(new record, [vanished records it combines])].

  XLA's collective-permute-combiner makes one permute of several with equal pairs
  in one computation, whose operands are theirs: match by operands first, and by
  pairs and summed bytes only where the operands were renamed meanwhile.
  """
  out: list[tuple[Record, list[Record]]] = []
  taken: set[int] = set()
  for rb in new:
    ops = rb.get("operands") or []
    parts = [
      ra
      for ra in vanished
      if id(ra) not in taken
      and ra["computation"] == rb["computation"]
      and ra.get("operands")
      and set(ra["operands"]) <= set(ops)
    ]
    if len(parts) > 1 and sorted(o for r in parts for o in r["operands"]) == sorted(ops):
      out.append((rb, parts))
      taken.update(id(r) for r in parts)
  for rb in new:
    if any(rb is r for r, _ in out):
      continue
    key = sorted(map(tuple, rb["pairs"]))
    parts = [
      ra
      for ra in vanished
      if id(ra) not in taken
      and ra["computation"] == rb["computation"]
      and sorted(map(tuple, ra["pairs"])) == key
    ]
    if len(parts) > 1 and sum(r["bytes"] for r in parts) == rb["bytes"]:
      out.append((rb, parts))
      taken.update(id(r) for r in parts)
  return out


def trace(dump_dir: str, program: str | None = None) -> dict[str, Any]:
  """How each collective-permute evolves through the passes of a dump directory
  (of its main module, or of `program`, a module key)."""
  if not os.path.isdir(dump_dir):
    raise InputError(f"{dump_dir}: --trace needs a dump directory")
  xla_dir = xla_dir_of(dump_dir)
  modules = dumps.index_xla_dump(xla_dir)
  key = program or dumps.main_key(dump_dir, modules)  # None: no modules
  if key is None:
    raise InputError(f"{dump_dir}: no XLA module dumps (module_*.txt) found")
  module = modules[key]
  if not module["passes"]:
    raise InputError(f"{dump_dir}: no per-pass snapshots; {dumps.ALL_PASSES_HINT}")
  snaps = []
  if "before_optimizations" in module["stages"]:
    snaps.append(
      {
        "seq": None,
        "pipeline": "",
        "pass": "before_optimizations",
        "file": module["stages"]["before_optimizations"],
      }
    )
  snaps += module["passes"]
  events: list[dict[str, Any]] = []
  lineage: Lineage = {}
  next_id = [0]
  prev: list[Record] = []
  prev_src: sources.Source | None = None
  prev_sig: str | None = None
  parsed = 0
  for snap in snaps:
    path = os.path.join(xla_dir, snap["file"])
    # Bounded as every input is: a FIFO or /dev/zero at a pass's name is refused.
    text = bounded_input.read_input(path).decode("utf-8", "replace")
    sig = signature(text)
    if sig == prev_sig:
      continue  # no line a collective-permute depends on changed
    try:
      src = sources.read_text(path, text, snap["file"])
      cur = collective_view(src)
    except InputError as e:
      events.append(
        {
          "seq": snap["seq"],
          "pipeline": snap["pipeline"],
          "pass": snap["pass"],
          "kind": "unreadable",
          "message": str(e),
          "origins": [],
          "names": [],
        }
      )
      continue
    parsed += 1
    prev_sig = sig
    if prev_src is None:
      prev_src = src
      for rb in cur:
        origin = rb["start"]
        lineage[id(rb)] = {origin}
      for r in cur:
        events.append(
          {
            "seq": snap["seq"],
            "pipeline": snap["pipeline"],
            "pass": snap["pass"],
            "kind": "present",
            "message": _fmt_rec(r),
            "origins": [r["start"]],
            "names": [r["start"]],
          }
        )
    else:
      for kind, message, origins, names in _events(prev, cur, prev_src, src, lineage, next_id):
        events.append(
          {
            "seq": snap["seq"],
            "pipeline": snap["pipeline"],
            "pass": snap["pass"],
            "kind": kind,
            "message": message,
            "origins": sorted(origins),
            "names": names,
          }
        )
    prev, prev_src = cur, src
  final = []
  for rec in prev:
    origins = lineage.get(id(rec), set())
    final.append(
      {
        "start": rec["start"],
        "computation": rec["computation"],
        "state": {k: rec[k] for k in VIEW_FIELDS},
        "origins": sorted(origins),
        "events": [i for i, e in enumerate(events) if origins & set(e["origins"])],
      }
    )
  return {
    "dump": dump_dir,
    "module": key,
    "snapshots": len(snaps),
    "parsed": parsed,
    "events": events,
    "final": final,
  }
