"""The diff of two modules: computations and instructions matched by name, then by
structure (hash buckets, linear in module size), and every changed attribute."""

import collections
import contextlib
import functools
import gc
import json
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from hlo_tools.hlo.grammar import CALL_ATTRS
from hlo_tools.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_tools.model.sources import Source
from hlo_tools.ops.diff.permutes import bucket_match, collective_view, collectives_diff

# An attribute that differs: {"attribute": name, "a": text or None, "b": text or None}.
Change = dict[str, Any]


def _comp_key(comp: HloComputation, loose: bool = False) -> Hashable:
  params = tuple(p.shape.to_string(False) for p in comp.instructions if p.opcode == "parameter")
  root = comp.root.opcode if comp.root is not None else None
  return (root, params) if loose else (root, params, len(comp.instructions))


def match_computations(
  ma: HloModule, mb: HloModule
) -> list[tuple[HloComputation | None, HloComputation | None]]:
  """[(comp_a or None, comp_b or None)]: by name, then by structure."""
  pairs: dict[str, HloComputation] = {}
  for cb in mb.computations:
    if cb.name in ma:
      pairs[cb.name] = ma.computation(cb.name)
  matched_a = {ca.name for ca in pairs.values()}
  for loose in (False, True):
    un_a = [c for c in ma.computations if c.name not in matched_a]
    un_b = [c for c in mb.computations if c.name not in pairs]
    key = functools.partial(_comp_key, loose=loose)
    for ca, cb in bucket_match(un_a, un_b, key, key):
      pairs[cb.name] = ca
      matched_a.add(ca.name)
  out: list[tuple[HloComputation | None, HloComputation | None]] = [
    (pairs.get(cb.name), cb) for cb in mb.computations
  ]
  out += [(ca, None) for ca in ma.computations if ca.name not in matched_a]
  return out


def _leaf_text(instr: HloInstruction) -> str | None:
  return instr.operand_text if not instr.operands else None


def match_instructions(ca: HloComputation, cb: HloComputation) -> dict[str, str]:
  """{b name: a name} for one computation pair: names, then structure in 3 rounds."""
  b_to_a = {ib.name: ib.name for ib in cb.instructions if ib.name in ca}
  a_matched = set(b_to_a.values())
  # The matches as they stood when the round began, on both sides alike.
  a_matched_snapshot: set[str] = set()
  b_to_a_snapshot: dict[str, str] = {}

  def op_key_a(name: str) -> Hashable:
    if name in a_matched_snapshot:
      return ("=", name)
    instr = ca.instruction(name) if name in ca else None
    return ("?", instr.opcode, instr.shape.to_string(False)) if instr else ("?", name)

  def op_key_b(name: str) -> Hashable:
    if name in b_to_a_snapshot:
      return ("=", b_to_a_snapshot[name])
    instr = cb.instruction(name) if name in cb else None
    return ("?", instr.opcode, instr.shape.to_string(False)) if instr else ("?", name)

  key_a: Callable[[HloInstruction], Hashable]
  key_b: Callable[[HloInstruction], Hashable]
  for rnd in range(3):
    a_matched_snapshot = set(a_matched)
    b_to_a_snapshot = dict(b_to_a)
    un_a = [i for i in ca.instructions if i.name not in a_matched]
    un_b = [i for i in cb.instructions if i.name not in b_to_a]
    if not un_a or not un_b:
      break
    if rnd < 2:
      key_a = lambda i: (
        i.opcode,
        i.shape.to_string(False),
        _leaf_text(i),
        tuple(op_key_a(o) for o in i.operands),
      )
      key_b = lambda i: (
        i.opcode,
        i.shape.to_string(False),
        _leaf_text(i),
        tuple(op_key_b(o) for o in i.operands),
      )
    else:  # last resort: same opcode, shape and arity
      key_a = key_b = lambda i: (i.opcode, i.shape.to_string(False), len(i.operands))
    for ia, ib in bucket_match(un_a, un_b, key_a, key_b):
      b_to_a[ib.name] = ia.name
      a_matched.add(ia.name)
  return b_to_a


# ---------------------------------------------------------------------------------------
# Attribute differences


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
  if isinstance(value, dict) and (value or not prefix):
    for k, v in value.items():
      _flatten(v, f"{prefix}.{k}", out)
  else:
    out[prefix] = value
  return out


def _dict_changes(
  name: str, a: Mapping[str, Any], b: Mapping[str, Any], fmt: Callable[[Any], str] = json.dumps
) -> list[Change]:
  out = []
  for key in list(a) + [k for k in b if k not in a]:
    va, vb = a.get(key), b.get(key)
    if va != vb:
      out.append(
        {
          "attribute": f"{name}.{key}" if key != name else name,
          "a": None if key not in a else fmt(va),
          "b": None if key not in b else fmt(vb),
        }
      )
  return out


def attribute_changes(
  ia: HloInstruction,
  ib: HloInstruction,
  comp_map: Mapping[str, str],
  b_to_a: Mapping[str, str],
  ignore_metadata: bool = False,
) -> list[Change]:
  """Changed attributes of a matched instruction pair, one entry per attribute."""
  out: list[Change] = []
  if ia.opcode != ib.opcode:
    out.append({"attribute": "opcode", "a": ia.opcode, "b": ib.opcode})
  sa, sb = ia.shape.to_string(), ib.shape.to_string()
  if sa != sb:
    out.append({"attribute": "shape", "a": sa, "b": sb})
  ops_b = [b_to_a.get(o, o) for o in ib.operands]
  if ops_b != list(ia.operands):
    out.append(
      {
        "attribute": "operands",
        "a": ", ".join("%" + o for o in ia.operands),
        "b": ", ".join("%" + o for o in ib.operands),
      }
    )
  elif not ia.operands and ia.operand_text != ib.operand_text:
    out.append({"attribute": "literal", "a": ia.operand_text, "b": ib.operand_text})
  if ia.is_root != ib.is_root:
    out.append({"attribute": "ROOT", "a": str(ia.is_root), "b": str(ib.is_root)})
  if ia.attributes_match(ib):  # most pairs: nothing below would differ
    return out
  keys = list(ia.attributes) + [k for k in ib.attributes if k not in ia.attributes]
  for key in keys:
    ra, rb = ia.attributes.get(key), ib.attributes.get(key)
    if key in CALL_ATTRS and ra and rb:
      mapped = ",".join(
        comp_map.get(n.strip().lstrip("%"), n.strip().lstrip("%"))
        for n in rb.strip("{}").split(",")
      )
      if mapped == ",".join(n.strip().lstrip("%") for n in ra.strip("{}").split(",")):
        continue
    if ra == rb:
      continue
    if key == "metadata":
      if not ignore_metadata:
        out += _dict_changes(
          "metadata", ia.metadata if ra else {}, ib.metadata if rb else {}, fmt=str
        )
    elif key == "frontend_attributes":
      out += _dict_changes(
        "frontend_attributes",
        ia.frontend_attributes if ra else {},
        ib.frontend_attributes if rb else {},
        fmt=str,
      )
    elif key == "backend_config":
      ja, jb = ia.backend_config_json(), ib.backend_config_json()
      if (ra is None or isinstance(ja, dict)) and (rb is None or isinstance(jb, dict)):
        out += _dict_changes(
          "backend_config", _flatten(ja or {}, "", {}), _flatten(jb or {}, "", {})
        )
        for change in out:
          change["attribute"] = change["attribute"].replace("backend_config..", "backend_config.")
      else:
        out.append({"attribute": key, "a": ra, "b": rb})
    else:
      out.append({"attribute": key, "a": ra, "b": rb})
  return out


def diff_sources(src_a: Source, src_b: Source, ignore_metadata: bool = False) -> dict[str, Any]:
  """The diff as a JSON-friendly dict."""
  ma, mb = src_a.module, src_b.module
  comp_pairs = match_computations(ma, mb)
  comp_map = {cb.name: ca.name for ca, cb in comp_pairs if ca and cb}  # b -> a
  comps = []
  totals: collections.Counter[str] = collections.Counter()
  for ca, cb in comp_pairs:
    entry: dict[str, Any] = {
      "a": ca.name if ca else None,
      "b": cb.name if cb else None,
      "line_a": ca.line if ca else None,
      "line_b": cb.line if cb else None,
      "status": "matched",
      "added": [],
      "removed": [],
      "changed": [],
      "renamed": [],
      "unchanged": 0,
      "order": [],
    }
    if ca is None or cb is None:
      entry["status"] = "added" if ca is None else "removed"
      comp = cb or ca
      assert comp is not None  # match_computations pairs at least one side
      key = "added" if ca is None else "removed"
      entry[key] = [{"name": i.name, "line": i.line, "opcode": i.opcode} for i in comp.instructions]
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
        entry["changed"].append(
          {"a": ia.name, "b": ib.name, "line_a": ia.line, "line_b": ib.line, "changes": changes}
        )
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
    "a": src_a.label,
    "b": src_b.label,
    "summary": {
      "num_partitions_a": src_a.num_partitions,
      "num_partitions_b": src_b.num_partitions,
      "num_partitions_from_a": src_a.partitions_from,
      "num_partitions_from_b": src_b.partitions_from,
      "instructions_a": ma.instruction_count,
      "instructions_b": mb.instruction_count,
      "computations_a": len(ma.computations),
      "computations_b": len(mb.computations),
      "added": totals["added"],
      "removed": totals["removed"],
      "changed": totals["changed"],
      "renamed": totals["renamed"],
      "unchanged": totals["unchanged"],
      "computations_added": totals["computations_added"],
      "computations_removed": totals["computations_removed"],
    },
    "collectives": collectives_diff(view_a, view_b, comp_map),
    "computations": comps,
  }


def to_json(result: Mapping[str, Any]) -> dict[str, Any]:
  """The diff without the internal matching tables."""
  out = dict(result)
  out["computations"] = [
    {k: v for k, v in c.items() if k not in ("b_to_a", "order")}
    for c in result["computations"]
    if interesting(c)
  ]
  return out


def interesting(comp: Mapping[str, Any]) -> bool:
  return bool(comp["status"] != "matched" or comp["added"] or comp["removed"] or comp["changed"])


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
  """Runs a diff with what is parsed frozen out of the collector's sight and the
  collector off; both undone on exit.

  The diff makes no reference cycles, but with the collector on, each full collection
  rescans the output built so far, and the diff's time per instruction grew by a fifth
  from 10k to 100k instructions (docs/benchmarks.md). A command that diffs once and
  exits loses nothing by it; a library caller that keeps its modules chooses for itself.
  A caller's own frozen objects stay frozen: then nothing is unfrozen on exit.
  """
  was_enabled, was_frozen = gc.isenabled(), gc.get_freeze_count() > 0
  gc.freeze()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()
    if not was_frozen:
      gc.unfreeze()
