"""hlo-tools diff: name + structure matching, collectives view, stages, trace, HTML."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.model import driver, sources
from hlo_tools.ops import diff, dump, dump_target

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# A table where NVSHMEM wins on NVLink at every size (the pass then writes NVSHMEM).
FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"
DRIVER = REPO / "build" / "nvshmem-opt"
SMALL_RING = {
  "seq_len": 1024,
  "num_heads": 4,
  "num_kv_heads": 2,
  "head_dim": 64,
  "dtype": "bf16",
  "causal": True,
  "backward": False,
  "batch": 1,
}


def run(capsys, *argv):
  rc = cli.main(["diff", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


@pytest.fixture(scope="session")
def ring_dump(tmp_path_factory):
  """A small ring compiled for 1x2x4 with every pass dumped (about 2 s)."""
  out = tmp_path_factory.mktemp("dump") / "ring"
  dump.dump(
    {"kind": "ring", "config": SMALL_RING},
    str(out),
    target=dump_target.Target(topology="1x2x4"),
    all_passes=True,
    progress=False,
  )
  return out


@pytest.fixture(scope="session")
def nvshmem_1x1x8(tmp_path_factory):
  out = tmp_path_factory.mktemp("pass") / "ring_1x1x8.nvshmem.hlo"
  proc = subprocess.run(
    [
      str(DRIVER),
      str(FIXTURES / "ring_1x1x8.before_async.hlo"),
      "--topology=1x1x8",
      f"--cost-table={FAST_NVSHMEM}",
      "-o",
      str(out),
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  return out


def test_pass_output_shows_sync_permute_became_start_done(capsys, nvshmem_1x1x8):
  rc, out, err = run(
    capsys, FIXTURES / "ring_1x1x8.before_async.hlo", nvshmem_1x1x8, "--format=json"
  )
  assert rc == 0, err
  result = json.loads(out)
  [row] = result["collectives"]
  assert row["status"] == "changed"
  assert row["a"]["start"] == "ppermute.6.0"
  assert [r["start"] for r in row["b"]] == ["collective-permute-start"]
  fields = {c["field"]: (c["a"], c["b"]) for c in row["changes"]}
  assert fields == {"form": ("sync", "start-done"), "backend": ("DEFAULT", "NVSHMEM")}
  s = result["summary"]
  [comp] = result["computations"]
  added = {i["name"] for i in comp["added"]}
  # The start is new; the done is new too, or keeps the sync permute's name (then
  # the permute's users read the same operand and stay unchanged).
  assert "collective-permute-start" in added
  assert added <= {"collective-permute-start", "collective-permute-done"}
  assert (s["added"], s["removed"]) == (len(added), len(added) - 1)
  changes = {c["b"]: c["changes"] for c in comp["changed"]}
  for name, ch in changes.items():
    assert ch[0]["attribute"] in ("operands", "opcode"), (name, ch)


def test_json_is_the_diff_one_record_per_line(capsys, nvshmem_1x1x8):
  before = FIXTURES / "ring_1x1x8.before_async.hlo"
  rc, out, err = run(capsys, before, nvshmem_1x1x8, "--format=json")
  assert rc == 0, err
  a, b = (
    sources.read_text(str(before), before.read_text()),
    sources.read_text(str(nvshmem_1x1x8), nvshmem_1x1x8.read_text()),
  )
  expected = diff.to_json(diff.diff_sources(a, b))
  assert json.loads(out) == json.loads(json.dumps(expected))
  lines = out.splitlines()
  # Each collective row and each computation entry is one line of its own.
  for key in ("collectives", "computations"):
    start = lines.index(f' "{key}": [')
    rows = lines[start + 1 : start + 1 + len(expected[key])]
    assert [json.loads(r.strip().rstrip(",")) for r in rows] == json.loads(
      json.dumps(expected[key])
    )


def test_text_lists_attributes_one_by_one(capsys, nvshmem_1x1x8):
  rc, out, _ = run(
    capsys,
    FIXTURES / "ring_1x1x8.after_optimizations.hlo",
    FIXTURES / "ring_1x2x4.after_optimizations.hlo",
  )
  assert rc == 0
  assert out.index("collective-permutes") < out.index("instructions:")
  assert "0 changed" in out  # the 1x1x8 and 1x2x4 modules are identical text


def test_backend_config_changes_key_by_key(capsys, tmp_path):
  src = FIXTURES / "ring_1x2x4.after_optimizations.hlo"
  b = tmp_path / "b.hlo"
  b.write_text(src.read_text().replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"'))
  rc, out, _ = run(capsys, src, b)
  assert rc == 0
  assert 'backend_config.collective_backend_config.backend: "DEFAULT" -> "NVSHMEM"' in out
  assert "backend     DEFAULT -> NVSHMEM" in out


def test_renamed_instructions_match_by_structure(capsys, tmp_path):
  src = FIXTURES / "ring_1x2x4.before_async.hlo"
  text = src.read_text()
  renamed = re.sub(r"%get-tuple-element\.(\d+(?:\.\d+)*)", r"%gte_renamed.\1", text)
  b = tmp_path / "renamed.hlo"
  b.write_text(renamed)
  rc, out, _ = run(capsys, src, b, "--format=json")
  assert rc == 0
  s = json.loads(out)["summary"]
  n = len(re.findall(r"^\s*(?:ROOT )?%get-tuple-element\.[\d.]+ =", text, re.M))
  assert n > 10
  assert s["renamed"] == n and s["added"] == 0 and s["removed"] == 0


def test_dump_stages_and_passes(capsys, ring_dump):
  rc, out, err = run(
    capsys, f"{ring_dump}:before_async", f"{ring_dump}:after_optimizations", "--format=json"
  )
  assert rc == 0, err
  result = json.loads(out)
  assert result["a"] == f"{ring_dump}:before_async"
  [row] = result["collectives"]
  assert row["a"]["form"] == "sync" and row["b"][0]["form"] == "start-done"
  rc, out, err = run(
    capsys,
    f"{ring_dump}:before:async-collective-creator",
    f"{ring_dump}:after:async-collective-creator",
  )
  assert rc == 0, err
  assert "form        sync -> start-done" in out


def test_trace_follows_each_permute_through_every_pass(capsys, ring_dump):
  rc, out, err = run(
    capsys,
    f"{ring_dump}:before_optimizations",
    f"{ring_dump}:after_optimizations",
    "--trace",
    ring_dump,
    "--format=json",
  )
  assert rc == 0, err
  tr = json.loads(out)["trace"]
  # Every snapshot XLA wrote parses (tuple shardings carry /*index=N*/ comments).
  assert not [e["message"] for e in tr["events"] if e["kind"] == "unreadable"]
  [final] = tr["final"]
  kinds = [tr["events"][i]["kind"] for i in final["events"]]
  # K and V travel in one permute from the start (the combiner's merge is traced in
  # test_trace_follows_the_combiner_per_loop): made async, then scheduled.
  assert kinds.index("made async") < kinds.index("scheduled")
  made_async = next(
    tr["events"][i] for i in final["events"] if tr["events"][i]["kind"] == "made async"
  )
  assert made_async["pass"] == "async-collective-creator"
  rc, out, _ = run(
    capsys, f"{ring_dump}:before_async", f"{ring_dump}:after_optimizations", "--trace", ring_dump
  )
  assert "trace of" in out and "made async" in out


def test_html_page_is_self_contained_side_by_side(capsys, tmp_path, nvshmem_1x1x8, ring_dump):
  dest = tmp_path / "diff.html"
  rc, out, _ = run(
    capsys,
    FIXTURES / "ring_1x1x8.before_async.hlo",
    nvshmem_1x1x8,
    "--format=html",
    f"--out={dest}",
    "--trace",
    ring_dump,
  )
  assert rc == 0 and out == ""
  page = dest.read_text()
  assert page.startswith("<!DOCTYPE html>") and "<script" not in page
  assert 'class="sbs"' in page and "collective-permute-start" in page
  assert "Pass-by-pass trace" in page
  assert "http" not in page.split("</style>")[0]  # self-contained


def test_bad_input_is_one_line_naming_the_file(capsys, tmp_path, ring_dump):
  good = FIXTURES / "ring_1x2x4.before_async.hlo"
  text = good.read_text()
  trunc = tmp_path / "truncated.hlo"
  trunc.write_text(text[: len(text) // 2])
  rc, out, err = run(capsys, good, trunc)
  assert rc == 2 and out == "" and err.startswith(f"{trunc}:")
  assert len(err.strip().splitlines()) == 1
  rc, _, err = run(capsys, f"{ring_dump}:after_lunch", good)
  assert rc == 2 and "unknown stage 'after_lunch'" in err
  rc, _, err = run(capsys, ring_dump, good)
  assert rc == 2 and "name a stage" in err
  rc, _, err = run(capsys, f"{ring_dump}:after:no-such-pass", good)
  assert rc == 2 and "no-such-pass" in err
  broken = tmp_path / "broken.hlo"
  broken.write_text(text.replace("{{0,1},{1,2},", "{{0,1},{1},"))
  rc, _, err = run(capsys, good, broken)
  # The reader (or, past it, the strict pair check) names the line and the attribute.
  assert rc == 2 and re.match(rf"{re.escape(str(broken))}:368:\d+: .*source_target_pairs", err)
  rc, _, err = run(capsys, good, tmp_path / "missing.hlo")
  assert rc == 2 and "missing.hlo: cannot read" in err
  rc, _, err = run(capsys, good, good, "--trace", tmp_path)
  assert rc == 2 and "no XLA module dumps" in err


def test_never_overwrites_an_input(capsys, tmp_path):
  a = tmp_path / "a.hlo"
  a.write_text((FIXTURES / "shift_1x2x4.before_async.hlo").read_text())
  before = a.read_text()
  rc, _, err = run(capsys, a, FIXTURES / "shift_1x2x4.after_optimizations.hlo", f"--out={a}")
  assert rc == 2 and "refusing to overwrite" in err
  assert a.read_text() == before


def test_lowered_module_infers_partitions_and_trip_count(capsys):
  # No num_partitions, no known_trip_count: both are inferred and said so.
  lowered = FIXTURES / "ring_1x2x4.lowered.hlo"
  rc, out, err = run(capsys, lowered, lowered)
  assert rc == 0, err
  assert "8 partitions, inferred from the Shardy mesh" in out
  assert "trip_count  8 (same)" in out
  rc, out, err = run(capsys, lowered, lowered, "--num-partitions=8", "--format=json")
  assert rc == 0, err
  result = json.loads(out)
  assert result["summary"]["num_partitions_from_a"] == "--num-partitions"
  assert {r["a"]["trip_count"] for r in result["collectives"]} == {8}
