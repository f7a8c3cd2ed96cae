"""hlo_tools.ops.diff.permutes: each collective-permute as a record, the records of two
modules matched, and one row per permute of either side."""

from hlo_tools.model import sources
from hlo_tools.ops.diff import permutes

from conftest import FIXTURES


def test_bucket_match_pairs_equal_keys_first_come_first_served():
  a = [("x", 1), ("x", 2), ("y", 3)]
  b = [("x", 10), ("z", 11), ("x", 12), ("x", 13)]
  first = lambda item: item[0]
  assert permutes.bucket_match(a, b, first, first) == [(("x", 1), ("x", 10)), (("x", 2), ("x", 12))]


def test_base_name_is_the_name_before_async_conversion():
  assert permutes.base_name("collective-permute-start") == "collective-permute"
  assert permutes.base_name("collective-permute-start.3") == "collective-permute.3"
  assert permutes.base_name("ppermute.6.0-start") == "ppermute.6.0"
  assert permutes.base_name("ppermute.6.0") == "ppermute.6.0"


def test_view_of_a_sync_shift():
  # %ppermute.3.0: bf16[1,128,2,64] (32 KiB) from partition 0 to 1, outside any loop.
  src = sources.read_source(str(FIXTURES / "shift_1x1x2.before_async.hlo"))
  [rec] = permutes.collective_view(src)
  assert rec == {
    "computation": "main.0_spmd",
    "start": "ppermute.3.0",
    "done": None,
    "form": "sync",
    "async": False,
    "pairs": [[0, 1]],
    "bytes": 1 * 128 * 2 * 64 * 2,
    "backend": "DEFAULT",
    "while_loop": None,
    "trip_count": None,
    "line": 14,
    "channel_id": 1,
    "plan": None,
    "operands": ["param.1"],
  }


def test_view_of_an_async_ring_in_its_loop():
  # K and V (bf16[2,1,128,2,64], 64 KiB) around 8 devices, once per step of 8.
  src = sources.read_source(str(FIXTURES / "ring_1x1x8.after_optimizations.hlo"))
  [rec] = permutes.collective_view(src)
  assert (rec["start"], rec["done"], rec["form"]) == (
    "collective-permute-start",
    "collective-permute-done",
    "start-done",
  )
  assert rec["pairs"] == [[i, (i + 1) % 8] for i in range(8)]
  assert rec["bytes"] == 2 * 128 * 2 * 64 * 2 and rec["trip_count"] == 8
  assert rec["while_loop"] == "while.71" and rec["async"] is True


def _rec(computation, start, pairs, nbytes=64, form="sync", backend="DEFAULT"):
  return {
    "computation": computation,
    "start": start,
    "done": None,
    "form": form,
    "backend": backend,
    "pairs": pairs,
    "bytes": nbytes,
    "while_loop": None,
    "trip_count": None,
  }


RING = [[0, 1], [1, 0]]


def test_permutes_match_by_name_then_by_what_each_computation_holds():
  kept = _rec("main", "collective-permute", RING)
  made_async = _rec("main", "collective-permute-start", RING, form="start-done")
  # A pass renamed the loop body and its permute: same pairs and bytes.
  in_loop = _rec("body", "ppermute.1", [[0, 1]])
  renamed = _rec("body.clone", "ppermute.9", [[0, 1]])
  gone = _rec("main", "ppermute.2", [[1, 0]], nbytes=8)
  new = _rec("main", "ppermute.3", [[1, 0]], nbytes=16)
  matched = permutes.match_collectives([kept, in_loop, gone], [made_async, renamed, new])
  assert matched == [(kept, [made_async]), (in_loop, [renamed]), (gone, []), (None, [new])]


def test_a_computation_map_matches_names_across_renamed_computations():
  a, b = _rec("body", "cp", RING), _rec("body.1", "cp", RING, nbytes=128)
  assert permutes.match_collectives([a], [b], {"body.1": "body"}) == [(a, [b])]


def test_a_split_permute_is_one_record_of_its_parts():
  parts = [_rec("main", "cp.0", [[0, 1]], nbytes=64), _rec("main", "cp.1", [[1, 0]], nbytes=32)]
  merged = permutes.summarize_group(parts)
  assert merged["pairs"] == [[0, 1], [1, 0]]
  assert merged["bytes"] == "64 + 32" and merged["form"] == "sync"
  assert permutes.summarize_group([]) is None


def test_rows_name_each_changed_field_and_a_status():
  before = [_rec("main", "cp", RING), _rec("main", "old", RING)]
  after = [
    # The pairs in another order are the same pairs.
    _rec("main", "cp-start", [[1, 0], [0, 1]], form="start-done", backend="NVSHMEM"),
    _rec("main", "fresh", [[0, 1]], nbytes=4),
  ]
  rows = permutes.collectives_diff(before, after, {})
  assert [r["status"] for r in rows] == ["changed", "removed", "added"]
  assert rows[0]["changes"] == [
    {"field": "form", "a": "sync", "b": "start-done"},
    {"field": "backend", "a": "DEFAULT", "b": "NVSHMEM"},
  ]
  same = permutes.collectives_diff(before[:1], before[:1], {})
  assert [(r["status"], r["changes"]) for r in same] == [("same", [])]
