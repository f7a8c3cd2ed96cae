"""Collective-permutes of two modules side by side: one record per permute, matched
by computation and name, then by the permutes each renamed computation holds."""

import collections
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from hlo_tools.model import backend_tables, sources
from hlo_tools.model.collectives import collective_permutes

# One collective-permute as collective_view records it (JSON-friendly).
Record = dict[str, Any]
_A = TypeVar("_A")
_B = TypeVar("_B")


def bucket_match(
  unmatched_a: Iterable[_A],
  unmatched_b: Iterable[_B],
  key_a: Callable[[_A], Hashable],
  key_b: Callable[[_B], Hashable],
) -> list[tuple[_A, _B]]:
  """Pairs items with equal keys, in order (FIFO per key): one hash pass, linear."""
  buckets: collections.defaultdict[Hashable, collections.deque[_A]] = collections.defaultdict(
    collections.deque
  )
  for a in unmatched_a:
    buckets[key_a(a)].append(a)
  out = []
  for b in unmatched_b:
    bucket = buckets.get(key_b(b))
    if bucket:
      out.append((bucket.popleft(), b))
  return out


def collective_view(source: sources.Source) -> list[Record]:
  """JSON-friendly records of every collective-permute of a Source."""
  out = []
  for rec in collective_permutes(source.module):
    start = source.module.computation(rec.computation).instruction(rec.start)
    permute = start
    if rec.form == "async-wrapped" and rec.wrapped_computation:
      permute = source.module.computation(rec.wrapped_computation).root
    out.append(
      {
        "computation": rec.computation,
        "start": rec.start,
        "done": rec.done,
        "form": rec.form,
        "async": rec.is_async,
        "pairs": [list(p) for p in sources.strict_pairs(source, permute)],
        # With collectives_mode (XLA of jax >= 0.10.2): "DEFAULT, COLLECTIVES_PEER_MEMORY".
        "bytes": rec.bytes_per_device,
        "backend": backend_tables.written_backend(rec),
        "while_loop": rec.while_loop,
        "trip_count": rec.trip_count,
        "line": rec.start_line,
        "channel_id": rec.channel_id,
        "plan": start.frontend_attributes.get("_nvshmem_plan"),
        "operands": list(permute.operands),
      }
    )
  return out


def base_name(name: str) -> str:
  """The name a collective-permute had before async conversion."""
  name = name.replace("collective-permute-start", "collective-permute")
  return name[: -len("-start")] if name.endswith("-start") else name


def match_collectives(
  recs_a: Sequence[Record], recs_b: Sequence[Record], comp_map: Mapping[str, str] | None = None
) -> list[tuple[Record | None, list[Record]]]:
  """[(rec_a or None, [recs_b])]: by computation and base name, then by pairs."""
  comp_map = comp_map or {}
  by_key: collections.defaultdict[tuple[str, str], list[Record]] = collections.defaultdict(list)
  for rb in recs_b:
    by_key[(comp_map.get(rb["computation"], rb["computation"]), base_name(rb["start"]))].append(rb)
  used: set[int] = set()
  out: list[tuple[Record | None, list[Record]]] = []
  leftovers: list[Record] = []
  for ra in recs_a:
    group = by_key.get((ra["computation"], base_name(ra["start"])))
    if group and id(group[0]) not in used:
      used.update(id(r) for r in group)
      out.append((ra, group))
    else:
      leftovers.append(ra)
  rest_b = [rb for rb in recs_b if id(rb) not in used]
  # A set, not a scan of `out`: a ring renamed by a pass leaves every permute here.
  matched_a = {id(ra) for ra, _ in out}
  for ra, rb in _match_by_computation(leftovers, rest_b) + bucket_match(
    leftovers, rest_b, _pairs_bytes, _pairs_bytes
  ):
    if id(rb) in used or id(ra) in matched_a:
      continue
    used.add(id(rb))
    matched_a.add(id(ra))
    out.append((ra, [rb]))
  out += [(ra, []) for ra in leftovers if id(ra) not in matched_a]
  out += [(None, [rb]) for rb in rest_b if id(rb) not in used]
  return out


def _pairs_bytes(rec: Record) -> tuple[tuple[tuple[int, ...], ...], int]:
  return tuple(map(tuple, rec["pairs"])), rec["bytes"]


def _match_by_computation(
  recs_a: Sequence[Record], recs_b: Sequence[Record]
) -> list[tuple[Record, Record]]:
  """Pairs the permutes of renamed computations, a computation's permutes together.

  Passes rename computations (inlining, partitioning, cloning) and their permutes at
  once; when several permutes share pairs and bytes, the set each computation holds
  (e.g. a forward loop's two, a backward loop's four) tells them apart.
  """

  def groups(recs: Sequence[Record]) -> list[list[Record]]:
    by_comp: collections.defaultdict[str, list[Record]] = collections.defaultdict(list)
    for r in recs:
      by_comp[r["computation"]].append(r)
    return list(by_comp.values())

  def key(group: list[Record]) -> Hashable:
    return tuple(sorted(_pairs_bytes(r) for r in group))

  out: list[tuple[Record, Record]] = []
  for ga, gb in bucket_match(groups(recs_a), groups(recs_b), key, key):
    out += bucket_match(ga, gb, _pairs_bytes, _pairs_bytes)
  return out


VIEW_FIELDS = ("form", "backend", "pairs", "bytes", "while_loop", "trip_count", "computation")


def summarize_group(group: Sequence[Record]) -> Record | None:
  """One value per field for a list of records (a split gives several)."""
  if not group:
    return None
  if len(group) == 1:
    return {k: group[0][k] for k in VIEW_FIELDS}
  merged: Record = {}
  for k in VIEW_FIELDS:
    values = [r[k] for r in group]
    if k == "pairs":
      merged[k] = [p for r in group for p in r["pairs"]]
    elif all(v == values[0] for v in values):
      merged[k] = values[0]
    else:
      merged[k] = " + ".join(str(v) for v in values)
  return merged


def collectives_diff(
  view_a: Sequence[Record], view_b: Sequence[Record], comp_map: Mapping[str, str]
) -> list[Record]:
  """One row per permute of either side: the pair, the fields that differ, a status."""
  rows = []
  for ra, group in match_collectives(view_a, view_b, comp_map):
    sa, sb = summarize_group([ra] if ra else []), summarize_group(group)
    changes: list[Record] = []
    for k in VIEW_FIELDS:
      va = sa[k] if sa else None
      vb = sb[k] if sb else None
      if k == "pairs" and va is not None and vb is not None:
        same = sorted(map(tuple, va)) == sorted(map(tuple, vb))
      else:
        same = va == vb
      if not same:
        changes.append({"field": k, "a": va, "b": vb})
    rows.append(
      {
        "a": ra,
        "b": group,
        "changes": changes,
        "status": "removed"
        if not group
        else "added"
        if ra is None
        else "changed"
        if changes
        else "same",
      }
    )
  return rows
