"""`hlo-tools diff A B`: what changed between two HLO modules, collectives first.

    hlo-tools diff A B [--format=text|json|html] [--out=FILE] [--trace DUMP_DIR]
                   [--ignore-metadata]

A and B are each
  FILE                      an HLO text file;
  DIR:before_optimizations  a stage of a dump directory (written by `hlo-tools dump`,
  DIR:after_optimizations   or XLA's own --xla_dump_to directory);
  DIR:before_async          the module entering async-collective-creator (what the
                            NVSHMEM pass and XLA's backend assigner see);
  DIR:after:PASS[#N]        the module right after (or before) XLA pass PASS, from a
  DIR:before:PASS[#N]       dump with --all_passes; #N picks the N-th run (0-based,
                            default the last), e.g. DIR:after:collective-permute-combiner.
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
moved into a loop, scheduled.

Exit status: 0 (also when the modules differ), 2 bad input.
"""

import collections
import gc
import html
import json
import os
import sys

from hlo_tools import cli_io
from hlo_tools.commands import common
from hlo_tools.model import decisions, dumps, source as inputs
from hlo_tools.model.collectives import collective_permutes
from hlo_tools.model.dumps import STAGE_HELP, read_stage, xla_dir_of
from hlo_tools.model.source import InputError


# ---------------------------------------------------------------------------------------
# Inputs

def read_input(spec, max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES):
  """FILE or DIR:STAGE (the first ':' whose left side is a directory splits them).

  FILE may be any readable file, device or pipe, "-" for stdin; reading stops past
  max_bytes."""
  if spec == "-" or (os.path.exists(spec) and not os.path.isdir(spec)):
    return inputs.read_source(spec, max_bytes=max_bytes)
  idx = spec.find(":")
  while idx != -1:
    if os.path.isdir(spec[:idx]):
      return read_stage(spec[:idx], spec[idx + 1:], max_bytes)
    idx = spec.find(":", idx + 1)
  if os.path.isdir(spec):
    raise InputError(f"{spec}: is a directory; name a stage, e.g. "
                        f"{spec}:after_optimizations ({STAGE_HELP})")
  raise InputError(f"{spec}: cannot read: No such file or directory")


# ---------------------------------------------------------------------------------------
# Matching

def _comp_key(comp, loose=False):
  params = tuple(p.shape.to_string(False) for p in comp.instructions
                 if p.opcode == "parameter")
  root = comp.root.opcode if comp.root is not None else None
  return (root, params) if loose else (root, params, len(comp.instructions))


def _bucket_match(unmatched_a, unmatched_b, key_a, key_b):
  """Pairs items with equal keys, in order (FIFO per key): one hash pass, linear."""
  buckets = collections.defaultdict(collections.deque)
  for a in unmatched_a:
    buckets[key_a(a)].append(a)
  out = []
  for b in unmatched_b:
    bucket = buckets.get(key_b(b))
    if bucket:
      out.append((bucket.popleft(), b))
  return out


def match_computations(ma, mb):
  """[(comp_a or None, comp_b or None)]: by name, then by structure."""
  pairs = {}
  for cb in mb.computations:
    if cb.name in ma:
      pairs[cb.name] = ma.computation(cb.name)
  matched_a = {ca.name for ca in pairs.values()}
  for loose in (False, True):
    un_a = [c for c in ma.computations if c.name not in matched_a]
    un_b = [c for c in mb.computations if c.name not in pairs]
    for ca, cb in _bucket_match(un_a, un_b, lambda c: _comp_key(c, loose),
                                lambda c: _comp_key(c, loose)):
      pairs[cb.name] = ca
      matched_a.add(ca.name)
  out = [(pairs.get(cb.name), cb) for cb in mb.computations]
  out += [(ca, None) for ca in ma.computations if ca.name not in matched_a]
  return out


def _leaf_text(instr):
  return instr.operand_text if not instr.operands else None


def match_instructions(ca, cb):
  """{b name: a name} for one computation pair: names, then structure in 3 rounds."""
  b_to_a = {ib.name: ib.name for ib in cb.instructions if ib.name in ca}
  a_matched = set(b_to_a.values())

  def op_key_a(name):
    if name in a_matched_snapshot:
      return ("=", name)
    instr = ca.instruction(name) if name in ca else None
    return ("?", instr.opcode, instr.shape.to_string(False)) if instr else ("?", name)

  def op_key_b(name):
    if name in b_to_a_snapshot:
      return ("=", b_to_a_snapshot[name])
    instr = cb.instruction(name) if name in cb else None
    return ("?", instr.opcode, instr.shape.to_string(False)) if instr else ("?", name)

  for rnd in range(3):
    # Keys use the matches as they stood when the round began, on both sides alike.
    a_matched_snapshot = set(a_matched)
    b_to_a_snapshot = dict(b_to_a)
    un_a = [i for i in ca.instructions if i.name not in a_matched]
    un_b = [i for i in cb.instructions if i.name not in b_to_a]
    if not un_a or not un_b:
      break
    if rnd < 2:
      key_a = lambda i: (i.opcode, i.shape.to_string(False), _leaf_text(i),
                         tuple(op_key_a(o) for o in i.operands))
      key_b = lambda i: (i.opcode, i.shape.to_string(False), _leaf_text(i),
                         tuple(op_key_b(o) for o in i.operands))
    else:  # last resort: same opcode, shape and arity
      key_a = key_b = lambda i: (i.opcode, i.shape.to_string(False), len(i.operands))
    for ia, ib in _bucket_match(un_a, un_b, key_a, key_b):
      b_to_a[ib.name] = ia.name
      a_matched.add(ia.name)
  return b_to_a


# ---------------------------------------------------------------------------------------
# Attribute differences

def _flatten(value, prefix, out):
  if isinstance(value, dict) and (value or not prefix):
    for k, v in value.items():
      _flatten(v, f"{prefix}.{k}", out)
  else:
    out[prefix] = value
  return out


def _dict_changes(name, a, b, fmt=json.dumps):
  out = []
  for key in list(a) + [k for k in b if k not in a]:
    va, vb = a.get(key), b.get(key)
    if va != vb:
      out.append({"attribute": f"{name}.{key}" if key != name else name,
                  "a": None if key not in a else fmt(va),
                  "b": None if key not in b else fmt(vb)})
  return out


def attribute_changes(ia, ib, comp_map, b_to_a, ignore_metadata=False):
  """Changed attributes of a matched instruction pair, one entry per attribute."""
  out = []
  if ia.opcode != ib.opcode:
    out.append({"attribute": "opcode", "a": ia.opcode, "b": ib.opcode})
  sa, sb = ia.shape.to_string(), ib.shape.to_string()
  if sa != sb:
    out.append({"attribute": "shape", "a": sa, "b": sb})
  ops_b = [b_to_a.get(o, o) for o in ib.operands]
  if ops_b != list(ia.operands):
    out.append({"attribute": "operands", "a": ", ".join("%" + o for o in ia.operands),
                "b": ", ".join("%" + o for o in ib.operands)})
  elif not ia.operands and ia.operand_text != ib.operand_text:
    out.append({"attribute": "literal", "a": ia.operand_text, "b": ib.operand_text})
  if ia.is_root != ib.is_root:
    out.append({"attribute": "ROOT", "a": str(ia.is_root), "b": str(ib.is_root)})
  keys = list(ia.attributes) + [k for k in ib.attributes if k not in ia.attributes]
  for key in keys:
    ra, rb = ia.attributes.get(key), ib.attributes.get(key)
    if key in ("calls", "to_apply", "body", "condition", "branch_computations",
               "true_computation", "false_computation") and ra and rb:
      mapped = ",".join(comp_map.get(n.strip().lstrip("%"), n.strip().lstrip("%"))
                        for n in rb.strip("{}").split(","))
      if mapped == ",".join(n.strip().lstrip("%") for n in ra.strip("{}").split(",")):
        continue
    if ra == rb:
      continue
    if key == "metadata":
      if not ignore_metadata:
        out += _dict_changes("metadata", ia.metadata if ra else {},
                             ib.metadata if rb else {}, fmt=str)
    elif key == "frontend_attributes":
      out += _dict_changes("frontend_attributes", ia.frontend_attributes if ra else {},
                           ib.frontend_attributes if rb else {}, fmt=str)
    elif key == "backend_config":
      ja, jb = ia.backend_config_json(), ib.backend_config_json()
      if (ra is None or isinstance(ja, dict)) and (rb is None or isinstance(jb, dict)):
        out += _dict_changes("backend_config", _flatten(ja or {}, "", {}),
                             _flatten(jb or {}, "", {}))
        for change in out:
          change["attribute"] = change["attribute"].replace("backend_config..",
                                                            "backend_config.")
      else:
        out.append({"attribute": key, "a": ra, "b": rb})
    else:
      out.append({"attribute": key, "a": ra, "b": rb})
  return out


# ---------------------------------------------------------------------------------------
# Collective-permutes

def collective_view(source):
  """JSON-friendly records of every collective-permute of a Source."""
  out = []
  for rec in collective_permutes(source.module):
    start = source.module.computation(rec.computation).instruction(rec.start)
    permute = start
    if rec.form == "async-wrapped":
      permute = source.module.computation(rec.wrapped_computation).root
    out.append({
        "computation": rec.computation, "start": rec.start, "done": rec.done,
        "form": rec.form, "async": rec.is_async, "pairs": [list(p) for p in
                                                           inputs.strict_pairs(source, permute)],
        "bytes": rec.bytes_per_device, "backend": rec.backend,
        "while_loop": rec.while_loop, "trip_count": rec.trip_count,
        "line": rec.start_line, "channel_id": rec.channel_id,
        "split_part": start.frontend_attributes.get("_nvshmem_split_part"),
        "plan": start.frontend_attributes.get("_nvshmem_plan"),
        "operands": list(permute.operands),
    })
  return out


def base_name(name):
  """The name a collective-permute had before async conversion or a split."""
  for suffix in decisions.SPLIT_SUFFIXES:
    if name.endswith(suffix):
      return name[:-len(suffix)]
  name = name.replace("collective-permute-start", "collective-permute")
  return name[:-len("-start")] if name.endswith("-start") else name


def match_collectives(recs_a, recs_b, comp_map=None):
  """[(rec_a or None, [recs_b])]: by computation and base name, then by pairs."""
  comp_map = comp_map or {}
  by_key = collections.defaultdict(list)
  for rb in recs_b:
    by_key[(comp_map.get(rb["computation"], rb["computation"]), base_name(rb["start"]))].append(rb)
  used = set()
  out = []
  leftovers = []
  for ra in recs_a:
    group = by_key.get((ra["computation"], base_name(ra["start"])))
    if group and not id(group[0]) in used:
      used.update(id(r) for r in group)
      out.append((ra, group))
    else:
      leftovers.append(ra)
  rest_b = [rb for rb in recs_b if id(rb) not in used]
  for ra, rb in _match_by_computation(leftovers, rest_b) + _bucket_match(
      leftovers, rest_b, _pairs_bytes, _pairs_bytes):
    if id(rb) in used or any(ra is x for x, _ in out):
      continue
    used.add(id(rb))
    out.append((ra, [rb]))
  matched_a = {id(ra) for ra, _ in out}
  out += [(ra, []) for ra in leftovers if id(ra) not in matched_a]
  out += [(None, [rb]) for rb in rest_b if id(rb) not in used]
  return out


def _pairs_bytes(rec):
  return tuple(map(tuple, rec["pairs"])), rec["bytes"]


def _match_by_computation(recs_a, recs_b):
  """Pairs the permutes of renamed computations, a computation's permutes together.

  Passes rename computations (inlining, partitioning, cloning) and their permutes at
  once; when several permutes share pairs and bytes, the set each computation holds
  (e.g. a forward loop's two, a backward loop's four) tells them apart.
  """
  def groups(recs):
    by_comp = collections.defaultdict(list)
    for r in recs:
      by_comp[r["computation"]].append(r)
    return list(by_comp.values())

  def key(group):
    return tuple(sorted(_pairs_bytes(r) for r in group))

  out = []
  for ga, gb in _bucket_match(groups(recs_a), groups(recs_b), key, key):
    out += _bucket_match(ga, gb, _pairs_bytes, _pairs_bytes)
  return out


_VIEW_FIELDS = ("form", "backend", "pairs", "bytes", "while_loop", "trip_count",
                "computation", "split_part")


def _summarize_group(group):
  """One value per field for a list of records (a split gives several)."""
  if not group:
    return None
  if len(group) == 1:
    return {k: group[0][k] for k in _VIEW_FIELDS}
  merged = {}
  for k in _VIEW_FIELDS:
    values = [r[k] for r in group]
    if k == "pairs":
      merged[k] = [p for r in group for p in r["pairs"]]
    elif all(v == values[0] for v in values):
      merged[k] = values[0]
    else:
      merged[k] = " + ".join(str(v) for v in values)
  return merged


def collectives_diff(view_a, view_b, comp_map):
  rows = []
  for ra, group in match_collectives(view_a, view_b, comp_map):
    sa, sb = _summarize_group([ra] if ra else []), _summarize_group(group)
    changes = []
    for k in _VIEW_FIELDS:
      va = sa[k] if sa else None
      vb = sb[k] if sb else None
      if k == "pairs" and va is not None and vb is not None:
        same = sorted(map(tuple, va)) == sorted(map(tuple, vb))
      else:
        same = va == vb
      if not same:
        changes.append({"field": k, "a": va, "b": vb})
    rows.append({"a": ra, "b": group, "changes": changes,
                 "status": "removed" if not group else "added" if ra is None else
                           "changed" if changes else "same"})
  return rows


# ---------------------------------------------------------------------------------------
# The diff

def diff_sources(src_a, src_b, ignore_metadata=False):
  """The diff as a JSON-friendly dict."""
  ma, mb = src_a.module, src_b.module
  comp_pairs = match_computations(ma, mb)
  comp_map = {cb.name: ca.name for ca, cb in comp_pairs if ca and cb}  # b -> a
  comps = []
  totals = collections.Counter()
  for ca, cb in comp_pairs:
    entry = {"a": ca.name if ca else None, "b": cb.name if cb else None,
             "line_a": ca.line if ca else None, "line_b": cb.line if cb else None,
             "status": "matched", "added": [], "removed": [], "changed": [],
             "renamed": [], "unchanged": 0, "order": []}
    if ca is None or cb is None:
      entry["status"] = "added" if ca is None else "removed"
      comp = cb or ca
      key = "added" if ca is None else "removed"
      entry[key] = [{"name": i.name, "line": i.line, "opcode": i.opcode}
                    for i in comp.instructions]
      totals[key] += len(comp.instructions)
      totals["computations_" + key] += 1
      comps.append(entry)
      continue
    if ca.name != cb.name:
      entry["status"] = "renamed"
    b_to_a = match_instructions(ca, cb)
    a_to_b = {a: b for b, a in b_to_a.items()}
    for ib in cb.instructions:
      if ib.name not in b_to_a:
        entry["added"].append({"name": ib.name, "line": ib.line, "opcode": ib.opcode})
        continue
      ia = ca.instruction(b_to_a[ib.name])
      changes = attribute_changes(ia, ib, comp_map, b_to_a, ignore_metadata)
      if ia.name != ib.name:
        entry["renamed"].append({"a": ia.name, "b": ib.name})
      if changes or ia.name != ib.name:
        entry["changed"].append({"a": ia.name, "b": ib.name, "line_a": ia.line,
                                 "line_b": ib.line, "changes": changes})
      else:
        entry["unchanged"] += 1
    for ia in ca.instructions:
      if ia.name not in a_to_b:
        entry["removed"].append({"name": ia.name, "line": ia.line, "opcode": ia.opcode})
    for key in ("added", "removed", "changed", "renamed", "unchanged"):
      totals[key] += len(entry[key]) if key != "unchanged" else entry[key]
    entry["b_to_a"] = b_to_a
    comps.append(entry)
  view_a, view_b = collective_view(src_a), collective_view(src_b)
  return {
      "a": src_a.label, "b": src_b.label,
      "summary": {"num_partitions_a": src_a.num_partitions,
                  "num_partitions_b": src_b.num_partitions,
                  "instructions_a": ma.instruction_count,
                  "instructions_b": mb.instruction_count,
                  "computations_a": len(ma.computations),
                  "computations_b": len(mb.computations),
                  "added": totals["added"], "removed": totals["removed"],
                  "changed": totals["changed"], "renamed": totals["renamed"],
                  "unchanged": totals["unchanged"],
                  "computations_added": totals["computations_added"],
                  "computations_removed": totals["computations_removed"]},
      "collectives": collectives_diff(view_a, view_b, comp_map),
      "computations": comps,
  }


def to_json(result):
  """The diff without the internal matching tables."""
  out = dict(result)
  out["computations"] = [{k: v for k, v in c.items() if k not in ("b_to_a", "order")}
                         for c in result["computations"] if _interesting(c)]
  return out


def _interesting(comp):
  return comp["status"] != "matched" or comp["added"] or comp["removed"] or comp["changed"]


# ---------------------------------------------------------------------------------------
# Pass-by-pass trace

def _signature(text):
  """The lines a collective-permute's state depends on; equal -> nothing to re-parse."""
  lines = text.split("\n", 1)[:1]
  lines += [l for l in text.split("\n") if "collective-permute" in l or " while(" in l
            or " send(" in l or " recv(" in l]
  return "\n".join(lines)


def _between(source, rec):
  """Instructions scheduled between a start and its done (the overlap)."""
  if not rec["done"]:
    return None
  comp = source.module.computation(rec["computation"])
  names = [i.name for i in comp.instructions]
  try:
    return names.index(rec["done"]) - names.index(rec["start"]) - 1
  except ValueError:
    return None


def _fmt_rec(r):
  return f"%{r['start']} ({r['form']}, {r['backend']}, {r['bytes']} B, {len(r['pairs'])} pairs)"


def _events(prev, cur, prev_src, cur_src, lineage, next_id):
  """Events between two snapshots; updates lineage {id(rec): set of origin ids}."""
  events = []
  matched = match_collectives(prev, cur)
  vanished = [ra for ra, group in matched if ra is not None and not group]
  new = [group[0] for ra, group in matched if ra is None]
  for ra, group in matched:
    if ra is None or not group:
      continue
    origins = lineage[id(ra)]
    for rb in group:
      lineage[id(rb)] = set(origins)
    names = [rb["start"] for rb in group]
    if len(group) > 1:
      events.append(("split", f"%{ra['start']} split into " +
                     ", ".join(_fmt_rec(r) for r in group), origins, names))
    rb = group[0]
    if ra["form"] == "sync" and rb["form"] != "sync":
      events.append(("made async", f"%{ra['start']} -> %{rb['start']} / %{rb['done']} "
                     f"({rb['form']})", origins, names))
    if any(r["backend"] != ra["backend"] for r in group):
      events.append(("backend set", f"%{rb['start']}: backend {ra['backend']} -> " +
                     "/".join(r["backend"] for r in group), origins, names))
    if sorted(map(tuple, ra["pairs"])) != sorted(tuple(p) for r in group for p in r["pairs"]):
      events.append(("pairs changed", f"%{rb['start']}: {len(ra['pairs'])} -> "
                     f"{sum(len(r['pairs']) for r in group)} pairs", origins, names))
    if ra["bytes"] != rb["bytes"]:
      events.append(("bytes changed", f"%{rb['start']}: {ra['bytes']} -> {rb['bytes']} B",
                     origins, names))
    if (ra["while_loop"] is None) != (rb["while_loop"] is None) or \
        ra["trip_count"] != rb["trip_count"]:
      events.append(("loop changed", f"%{rb['start']}: while {ra['while_loop']} "
                     f"(trips {ra['trip_count']}) -> {rb['while_loop']} "
                     f"(trips {rb['trip_count']})", origins, names))
    if ra["computation"] != rb["computation"]:
      events.append(("moved", f"%{rb['start']}: computation %{ra['computation']} -> "
                     f"%{rb['computation']}", origins, names))
  for rb, group in _combines(vanished, new):
    origins = set().union(*(lineage[id(r)] for r in group))
    lineage[id(rb)] = origins
    events.append(("combined", " + ".join(f"%{r['start']}" for r in group) +
                   f" -> {_fmt_rec(rb)}", origins, [rb["start"]]))
    new.remove(rb)
    for r in group:
      vanished.remove(r)
  # A vanished permute whose pairs new ones of its computation share out (each a
  # part, none overlapping, as the cycle decomposer does): decomposed.
  sends = sum(1 for i in cur_src.module.instructions() if i.opcode == "send")
  prev_sends = sum(1 for i in prev_src.module.instructions() if i.opcode == "send")
  for ra in list(vanished):
    pairs = set(map(tuple, ra["pairs"]))
    parts = [rb for rb in new if rb["computation"] == ra["computation"]
             and set(map(tuple, rb["pairs"])) < pairs]
    if parts and sum(len(r["pairs"]) for r in parts) == len(pairs) and \
        set().union(*(set(map(tuple, r["pairs"])) for r in parts)) == pairs:
      for rb in parts:
        lineage[id(rb)] = set(lineage[id(ra)])
        new.remove(rb)
      events.append(("decomposed", f"%{ra['start']} -> " + ", ".join(_fmt_rec(r) for r in parts),
                     lineage[id(ra)], [r["start"] for r in parts]))
    elif sends > prev_sends:
      events.append(("decomposed", f"%{ra['start']} -> send/recv "
                     f"({sends - prev_sends} send(s))", lineage[id(ra)], []))
    else:
      events.append(("removed", f"%{ra['start']} is gone", lineage[id(ra)], []))
  for rb in new:
    origin = f"{rb['start']}#{next_id[0]}"
    next_id[0] += 1
    lineage[id(rb)] = {origin}
    events.append(("created", _fmt_rec(rb), {origin}, [rb["start"]]))
  if cur_src.module.is_scheduled and not prev_src.module.is_scheduled:
    for rb in cur:
      n = _between(cur_src, rb)
      events.append(("scheduled", f"%{rb['start']}" + (
          f": {n} instruction(s) between start and done" if n is not None else ""),
                     lineage.get(id(rb), set()), [rb["start"]]))
  return events


def _combines(vanished, new):
  """[(new record, [vanished records it combines])].

  XLA's collective-permute-combiner makes one permute of several with equal pairs
  in one computation, whose operands are theirs: match by operands first, and by
  pairs and summed bytes only where the operands were renamed meanwhile.
  """
  out, taken = [], set()
  for rb in new:
    ops = rb.get("operands") or []
    parts = [ra for ra in vanished if id(ra) not in taken
             and ra["computation"] == rb["computation"] and ra.get("operands")
             and set(ra["operands"]) <= set(ops)]
    if len(parts) > 1 and sorted(o for r in parts for o in r["operands"]) == sorted(ops):
      out.append((rb, parts))
      taken.update(id(r) for r in parts)
  for rb in new:
    if any(rb is r for r, _ in out):
      continue
    key = sorted(map(tuple, rb["pairs"]))
    parts = [ra for ra in vanished if id(ra) not in taken
             and ra["computation"] == rb["computation"]
             and sorted(map(tuple, ra["pairs"])) == key]
    if len(parts) > 1 and sum(r["bytes"] for r in parts) == rb["bytes"]:
      out.append((rb, parts))
      taken.update(id(r) for r in parts)
  return out


def trace(dump_dir):
  """How each collective-permute evolves through the passes of a dump directory."""
  if not os.path.isdir(dump_dir):
    raise InputError(f"{dump_dir}: --trace needs a dump directory")
  xla_dir = xla_dir_of(dump_dir)
  modules = dumps.index_xla_dump(xla_dir)
  if not modules:
    raise InputError(f"{dump_dir}: no XLA module dumps (module_*.txt) found")
  key = dumps.main_key(dump_dir, modules)
  module = modules[key]
  if not module["passes"]:
    raise InputError(f"{dump_dir}: no per-pass snapshots; dump with --all_passes")
  snaps = []
  if "before_optimizations" in module["stages"]:
    snaps.append({"seq": None, "pipeline": "", "pass": "before_optimizations",
                  "file": module["stages"]["before_optimizations"]})
  snaps += module["passes"]
  events, lineage, next_id = [], {}, [0]
  prev, prev_src, prev_sig, parsed = [], None, None, 0
  for snap in snaps:
    path = os.path.join(xla_dir, snap["file"])
    with open(path, encoding="utf-8", errors="replace") as f:
      text = f.read()
    sig = _signature(text)
    if sig == prev_sig:
      continue  # no line a collective-permute depends on changed
    try:
      src = inputs.read_text(path, text, snap["file"])
      cur = collective_view(src)
    except InputError as e:
      events.append({"seq": snap["seq"], "pipeline": snap["pipeline"], "pass": snap["pass"],
                     "kind": "unreadable", "message": str(e), "origins": [], "names": []})
      continue
    parsed += 1
    prev_sig = sig
    if prev_src is None:
      prev_src = src
      for rb in cur:
        origin = rb["start"]
        lineage[id(rb)] = {origin}
      for r in cur:
        events.append({"seq": snap["seq"], "pipeline": snap["pipeline"], "pass": snap["pass"],
                       "kind": "present", "message": _fmt_rec(r), "origins": [r["start"]],
                       "names": [r["start"]]})
    else:
      for kind, message, origins, names in _events(prev, cur, prev_src, src, lineage, next_id):
        events.append({"seq": snap["seq"], "pipeline": snap["pipeline"], "pass": snap["pass"],
                       "kind": kind, "message": message, "origins": sorted(origins),
                       "names": names})
    prev, prev_src = cur, src
  final = []
  for rec in prev:
    origins = lineage.get(id(rec), set())
    final.append({"start": rec["start"], "computation": rec["computation"],
                  "state": {k: rec[k] for k in _VIEW_FIELDS},
                  "origins": sorted(origins),
                  "events": [i for i, e in enumerate(events) if origins & set(e["origins"])]})
  return {"dump": dump_dir, "module": key, "snapshots": len(snaps), "parsed": parsed,
          "events": events, "final": final}


# ---------------------------------------------------------------------------------------
# Text

def _short(value, limit=120):
  if isinstance(value, list):
    value = " ".join(f"{s}->{t}" for s, t in value) if value and isinstance(value[0], list) \
        else str(value)
  text = "-" if value is None else str(value)
  return text if len(text) <= limit else text[:limit - 3] + "..."


def _names(group):
  return " + ".join(f"%{r['start']}" + (f"/%{r['done']}" if r["done"] else "") for r in group)


def collectives_text(rows):
  lines = [f"collective-permutes ({len(rows)}), before -> after:"]
  if not rows:
    lines.append("  (none in either module)")
  for row in rows:
    a = f"%{row['a']['start']}" if row["a"] else "(none)"
    b = _names(row["b"]) if row["b"] else "(none)"
    lines.append(f"  {a} -> {b}   [{row['status']}]")
    for c in row["changes"]:
      lines.append(f"    {c['field']:<11} {_short(c['a'])} -> {_short(c['b'])}")
    if row["a"] and row["b"]:
      same = [k for k in _VIEW_FIELDS if k not in {c["field"] for c in row["changes"]}]
      for k in same:
        if k in ("pairs", "bytes", "backend", "form", "while_loop", "trip_count"):
          lines.append(f"    {k:<11} {_short(row['a'][k])} (same)")
  return lines


def trace_text(tr):
  lines = [f"trace of {tr['module']} in {tr['dump']}: {tr['snapshots']} snapshots, "
           f"{tr['parsed']} with collective changes parsed"]
  for fin in tr["final"]:
    lines.append(f"  %{fin['start']} ({fin['computation']}), from "
                 + ", ".join(fin["origins"]) + ":")
    for i in fin["events"]:
      e = tr["events"][i]
      where = f"{e['seq']:04d} {e['pipeline']}/{e['pass']}" if e["seq"] is not None \
          else e["pass"]
      lines.append(f"    {where}: {e['kind']}: {e['message']}")
  orphan = [e for e in tr["events"] if e["kind"] in ("removed", "unreadable")]
  for e in orphan:
    lines.append(f"  {e['pass']}: {e['kind']}: {e['message']}")
  return "\n".join(lines)


def format_text(result, tr=None):
  s = result["summary"]
  lines = [f"--- {result['a']} ({s['instructions_a']} instructions, "
           f"{s.get('num_partitions_a', '?')} partitions)",
           f"+++ {result['b']} ({s['instructions_b']} instructions, "
           f"{s.get('num_partitions_b', '?')} partitions)"]
  lines += collectives_text(result["collectives"])
  lines.append(f"instructions: {s['unchanged']} unchanged, {s['changed']} changed "
               f"({s['renamed']} renamed), {s['added']} added, {s['removed']} removed; "
               f"computations: {s['computations_added']} added, "
               f"{s['computations_removed']} removed")
  for c in result["computations"]:
    if not _interesting(c):
      continue
    name = c["b"] if c["a"] == c["b"] or c["a"] is None else (
        c["a"] if c["b"] is None else f"{c['a']} -> {c['b']}")
    lines.append(f"computation %{name} [{c['status']}]")
    if c["status"] in ("added", "removed"):
      lines.append(f"  {'+' if c['status'] == 'added' else '-'} {len(c[c['status']])} "
                   "instructions")
      continue
    for i in c["removed"]:
      lines.append(f"  - %{i['name']} ({i['opcode']}, line {i['line']})")
    for i in c["added"]:
      lines.append(f"  + %{i['name']} ({i['opcode']}, line {i['line']})")
    for i in c["changed"]:
      name = i["a"] if i["a"] == i["b"] else f"{i['a']} -> %{i['b']} (renamed)"
      lines.append(f"  ~ %{name} (line {i['line_a']} -> {i['line_b']})")
      for ch in i["changes"]:
        lines.append(f"      {ch['attribute']}: {_short(ch['a'])} -> {_short(ch['b'])}")
  out = "\n".join(lines)
  if tr is not None:
    out += "\n" + trace_text(tr)
  return out


# ---------------------------------------------------------------------------------------
# HTML

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px}h2{font-size:17px;margin-top:24px}h3{font-size:15px}
table{border-collapse:collapse;margin:6px 0}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}
.sbs{table-layout:fixed;width:100%}
.sbs td{font:12px/1.3 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;width:50%}
.add{background:#e6ffec}.del{background:#ffebe9}.chg{background:#fff8c5}
.same{color:#777}.ctx{color:#888;font-style:italic;text-align:center}
.mono{font-family:ui-monospace,monospace;font-size:12px}
.kv td:first-child{font-weight:600}
"""


def esc(value):
  return html.escape("-" if value is None else str(value))


def page(title, body):
  return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{esc(title)}"
          f"</title><style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


def collectives_html(rows):
  out = ["<table class=\"collectives\"><tr><th>before</th><th>after</th><th>status</th>"
         "<th>field</th><th>before</th><th>after</th></tr>"]
  for row in rows:
    a = f"%{row['a']['start']}" if row["a"] else "(none)"
    b = _names(row["b"]) if row["b"] else "(none)"
    fields = []
    for k in ("form", "backend", "bytes", "pairs", "while_loop", "trip_count", "split_part"):
      va = row["a"][k] if row["a"] else None
      vb = _summarize_group(row["b"])[k] if row["b"] else None
      changed = any(c["field"] == k for c in row["changes"])
      if va is None and vb is None:
        continue
      fields.append((k, va, vb, changed))
    n = max(len(fields), 1)
    cls = {"same": "same", "changed": "chg", "added": "add", "removed": "del"}[row["status"]]
    for j, (k, va, vb, changed) in enumerate(fields or [("", None, None, False)]):
      head = (f"<td rowspan=\"{n}\" class=\"mono\">{esc(a)}</td><td rowspan=\"{n}\" "
              f"class=\"mono\">{esc(b)}</td><td rowspan=\"{n}\" class=\"{cls}\">"
              f"{esc(row['status'])}</td>") if j == 0 else ""
      out.append(f"<tr>{head}<td>{esc(k)}</td><td class=\"mono{' chg' if changed else ''}\">"
                 f"{esc(_short(va, 400))}</td><td class=\"mono{' chg' if changed else ''}\">"
                 f"{esc(_short(vb, 400))}</td></tr>")
  out.append("</table>")
  return "\n".join(out)


def _side_by_side(comp, src_a, src_b, max_rows):
  """Rows of one computation pair: changes side by side, unchanged runs collapsed."""
  ma, mb = src_a.module, src_b.module
  ca = ma.computation(comp["a"]) if comp["a"] else None
  cb = mb.computation(comp["b"]) if comp["b"] else None
  b_to_a = comp.get("b_to_a", {})
  changed = {c["b"]: c for c in comp["changed"]}
  rows, run = [], 0

  def flush():
    nonlocal run
    if run:
      rows.append(f"<tr><td colspan=\"2\" class=\"ctx\">{run} unchanged</td></tr>")
      run = 0

  def row(cls, left, right, title=""):
    flush()
    rows.append(f"<tr class=\"{cls}\" title=\"{esc(title)}\"><td>{esc(left)}</td>"
                f"<td>{esc(right)}</td></tr>")

  if cb is None or ca is None:
    comp_ = cb or ca
    for i in comp_.instructions[:max_rows]:
      text = (src_b if cb else src_a).line(i.line).strip()
      row("add" if cb else "del", "" if cb else text, text if cb else "")
    return rows
  a_order = {i.name: k for k, i in enumerate(ca.instructions)}
  a_to_b = {a: b for b, a in b_to_a.items()}
  pending = [i for i in ca.instructions]
  pa = 0
  for ib in cb.instructions:
    if len(rows) > max_rows:
      rows.append("<tr><td colspan=\"2\" class=\"ctx\">(truncated)</td></tr>")
      break
    partner = b_to_a.get(ib.name)
    if partner is not None:
      # Removed instructions that came before the partner go first, in A's order.
      while pa < len(pending) and a_order[pending[pa].name] < a_order[partner]:
        ia = pending[pa]
        if ia.name not in a_to_b:
          row("del", src_a.line(ia.line).strip(), "")
        pa += 1
      if ib.name in changed:
        c = changed[ib.name]
        row("chg", src_a.line(ca.instruction(partner).line).strip(),
            src_b.line(ib.line).strip(),
            "; ".join(f"{x['attribute']}" for x in c["changes"]))
      else:
        run += 1
    else:
      row("add", "", src_b.line(ib.line).strip())
  while pa < len(pending):
    ia = pending[pa]
    if ia.name not in a_to_b:
      row("del", src_a.line(ia.line).strip(), "")
    pa += 1
  flush()
  return rows


def diff_html(result, src_a, src_b, max_rows=4000):
  """The diff as an HTML fragment: summary, collectives, side-by-side computations."""
  s = result["summary"]
  out = [f"<p class=\"mono\">A: {esc(result['a'])} ({s['instructions_a']} instructions)<br>"
         f"B: {esc(result['b'])} ({s['instructions_b']} instructions)</p>",
         "<h3>Collective-permutes, before vs after</h3>", collectives_html(result["collectives"]),
         f"<p>{s['unchanged']} unchanged, {s['changed']} changed ({s['renamed']} renamed), "
         f"{s['added']} added, {s['removed']} removed instructions; "
         f"{s['computations_added']} computations added, {s['computations_removed']} "
         "removed.</p>"]
  budget = max_rows
  for comp in result["computations"]:
    if not _interesting(comp):
      continue
    name = comp["b"] or comp["a"]
    if comp["a"] and comp["b"] and comp["a"] != comp["b"]:
      name = f"{comp['a']} -> {comp['b']}"
    rows = _side_by_side(comp, src_a, src_b, budget)
    budget = max(budget - len(rows), 50)
    out.append(f"<h3 class=\"mono\">%{esc(name)} [{esc(comp['status'])}]</h3>")
    details = []
    for c in comp["changed"]:
      for ch in c["changes"]:
        details.append(f"<tr><td class=\"mono\">%{esc(c['b'])}</td><td class=\"mono\">"
                       f"{esc(ch['attribute'])}</td><td class=\"mono\">{esc(_short(ch['a'], 300))}"
                       f"</td><td class=\"mono\">{esc(_short(ch['b'], 300))}</td></tr>")
    if details:
      out.append("<table class=\"changes\"><tr><th>instruction</th><th>attribute</th>"
                 "<th>before</th><th>after</th></tr>" + "".join(details) + "</table>")
    out.append("<table class=\"sbs\"><tr><th>before (A)</th><th>after (B)</th></tr>"
               + "".join(rows) + "</table>")
  return "\n".join(out)


def trace_html(tr):
  out = [f"<p>{esc(tr['module'])}: {tr['snapshots']} pass snapshots, {tr['parsed']} "
         "changed a collective-permute line and were parsed.</p>"]
  for fin in tr["final"]:
    out.append(f"<h3 class=\"mono\">%{esc(fin['start'])} ({esc(fin['computation'])})</h3>"
               "<table class=\"trace\"><tr><th>#</th><th>pipeline</th><th>pass</th>"
               "<th>event</th><th>detail</th></tr>")
    for i in fin["events"]:
      e = tr["events"][i]
      out.append(f"<tr><td>{esc(e['seq'])}</td><td>{esc(e['pipeline'])}</td>"
                 f"<td class=\"mono\">{esc(e['pass'])}</td><td>{esc(e['kind'])}</td>"
                 f"<td class=\"mono\">{esc(e['message'])}</td></tr>")
    out.append("</table>")
  return "\n".join(out)


def format_html(result, src_a, src_b, tr=None):
  body = [f"<h1>hlo-tools diff</h1>", diff_html(result, src_a, src_b)]
  if tr is not None:
    body += ["<h2>Pass-by-pass trace</h2>", trace_html(tr)]
  return page(f"diff {result['a']} {result['b']}", "\n".join(body))


# ---------------------------------------------------------------------------------------

def _render(args, src_a, src_b, result, tr):
  if args.format == "json":
    out = to_json(result)
    if tr is not None:
      out["trace"] = tr
    return json.dumps(out, indent=1)
  if args.format == "html":
    return format_html(result, src_a, src_b, tr)
  return format_text(result, tr)


def main(argv):
  parser = common.parser_for(argv[0] if argv else "hlo-tools diff", __doc__)
  parser.add_argument("a", help="FILE or DIR:STAGE (" + STAGE_HELP + ")")
  parser.add_argument("b", help="FILE or DIR:STAGE")
  parser.add_argument("--format", choices=("text", "json", "html"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  parser.add_argument("--trace", default=None, metavar="DUMP_DIR",
                      help="also trace each collective-permute through XLA's passes")
  parser.add_argument("--ignore-metadata", action="store_true",
                      help="do not report metadata (op_name, scheduling_name) changes")
  common.add_partitions_flag(parser)
  cli_io.add_max_input_bytes(parser)

  def run(args):
    src_a = read_input(args.a, args.max_input_bytes)
    src_b = read_input(args.b, args.max_input_bytes)
    for src in (src_a, src_b):
      inputs.resolve_partitions(src, override=args.num_partitions)
    # The parsed modules live until exit: keep the collector from rescanning
    # them over and over while the diff allocates (it made the diff's cost per
    # instruction grow with module size; docs/benchmarks.md).
    gc.freeze()
    common.check_out_path(args.out, [src_a.path, src_b.path])
    tr = trace(args.trace) if args.trace else None
    result = diff_sources(src_a, src_b, args.ignore_metadata)
    common.write_output(_render(args, src_a, src_b, result, tr), args.out)
    return 0

  return common.run_command(parser, argv, run)


if __name__ == "__main__":
  sys.exit(cli_io.run_main(main, ["hlo-tools diff"] + sys.argv[1:]))
