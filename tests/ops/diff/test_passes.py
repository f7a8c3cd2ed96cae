"""hlo_tools.ops.diff.passes: each collective-permute followed through the per-pass
snapshots of an XLA dump."""

import pytest

from hlo_tools import cli
from hlo_tools.errors import InputError
from hlo_tools.model import sources
from hlo_tools.ops import diff
from hlo_tools.ops.diff import passes

from conftest import FIXTURES

HEADER = "HloModule jit_f, num_partitions=2\n\nENTRY %main (p: f32[8]) -> f32[8] {\n"
PAIRS = "channel_id=1, source_target_pairs="
# The snapshots of one permute's life: sync over both pairs; split in two, one pair
# each (a cycle decomposer); both made async.
SNAPSHOTS = {
  "module_0001.jit_f.before_optimizations.txt": HEADER
  + "  %p = f32[8]{0} parameter(0)\n"
  + f"  ROOT %cp = f32[8]{{0}} collective-permute(%p), {PAIRS}{{{{0,1}},{{1,0}}}}\n}}\n",
  # A pass that leaves every permute line as it was: not parsed again.
  "module_0001.jit_f.0001.opt.after_algsimp.before_dce.txt": HEADER
  + "  %p = f32[8]{0} parameter(0)\n"
  + f"  ROOT %cp = f32[8]{{0}} collective-permute(%p), {PAIRS}{{{{0,1}},{{1,0}}}}\n}}\n",
  "module_0001.jit_f.0002.opt.after_cycle-decomposer.before_dce.txt": HEADER
  + "  %p = f32[8]{0} parameter(0)\n"
  + f"  %cp.a = f32[8]{{0}} collective-permute(%p), {PAIRS}{{{{0,1}}}}\n"
  + f"  %cp.b = f32[8]{{0}} collective-permute(%p), {PAIRS}{{{{1,0}}}}\n"
  + "  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%cp.a, %cp.b)\n}\n",
  "module_0001.jit_f.0003.async.after_async-collective-creator.before_dce.txt": HEADER
  + "  %p = f32[8]{0} parameter(0)\n"
  + f"  %cp.a-start = (f32[8]{{0}}, f32[8]{{0}}) collective-permute-start(%p), {PAIRS}{{{{0,1}}}}\n"
  + "  %cp.a-done = f32[8]{0} collective-permute-done(%cp.a-start)\n"
  + f"  %cp.b-start = (f32[8]{{0}}, f32[8]{{0}}) collective-permute-start(%p), {PAIRS}{{{{1,0}}}}\n"
  + "  %cp.b-done = f32[8]{0} collective-permute-done(%cp.b-start)\n"
  + "  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%cp.a-done, %cp.b-done)\n}\n",
}


def test_signature_keeps_the_lines_a_permute_depends_on():
  text = (
    "HloModule m\n"
    "  %a = f32[8]{0} add(%p, %p)\n"
    "  %cp = f32[8]{0} collective-permute(%a), channel_id=1\n"
    "  %w = (s32[]) while(%t), condition=%c, body=%b\n"
    "  %s = (f32[8]{0}, u32[], token[]) send(%a, %tok), channel_id=2\n"
    "  %r = (f32[8]{0}, u32[], token[]) recv(%tok), channel_id=3\n"
  )
  kept = passes.signature(text).splitlines()
  assert kept == ["HloModule m"] + text.splitlines()[2:]
  # An edit elsewhere leaves the signature as it was: that snapshot is not re-read.
  assert passes.signature(text.replace("add(", "multiply(")) == passes.signature(text)


def test_trace_follows_a_permute_through_split_and_async(tmp_path):
  xla = tmp_path / "dump" / "xla_dump"
  xla.mkdir(parents=True)
  for name, text in SNAPSHOTS.items():
    (xla / name).write_text(text)
  tr = passes.trace(str(tmp_path / "dump"))
  assert (tr["module"], tr["snapshots"], tr["parsed"]) == ("module_0001.jit_f", 4, 3)
  kinds = [(e["pass"], e["kind"], e["names"]) for e in tr["events"]]
  assert kinds == [
    ("before_optimizations", "present", ["cp"]),
    ("cycle-decomposer", "decomposed", ["cp.a", "cp.b"]),
    ("async-collective-creator", "made async", ["cp.a-start"]),
    ("async-collective-creator", "made async", ["cp.b-start"]),
  ]
  assert tr["events"][1]["message"] == (
    "%cp -> %cp.a (sync, DEFAULT, 32 B, 1 pairs), %cp.b (sync, DEFAULT, 32 B, 1 pairs)"
  )
  # Both permutes of the final snapshot come from %cp.
  assert [(f["start"], f["origins"], f["state"]["form"]) for f in tr["final"]] == [
    ("cp.a-start", ["cp"], "start-done"),
    ("cp.b-start", ["cp"], "start-done"),
  ]
  assert tr["final"][0]["events"] == [0, 1, 2, 3]


def test_trace_needs_a_dump_directory_with_pass_snapshots(tmp_path):
  with pytest.raises(InputError, match="--trace needs a dump directory"):
    passes.trace(str(tmp_path / "missing"))
  with pytest.raises(InputError, match=r"no XLA module dumps \(module_\*\.txt\)"):
    passes.trace(str(tmp_path))
  name = "module_0001.jit_f.before_optimizations.txt"
  (tmp_path / name).write_text(SNAPSHOTS[name])
  with pytest.raises(InputError, match="no per-pass snapshots"):
    passes.trace(str(tmp_path))


def test_trace_follows_the_combiner_per_loop(capsys):
  # A real per-pass dump (`hlo-tools dump --all_passes`, pruned to the snapshots that
  # change a permute): a forward loop rotating 2 buffers and a backward loop rotating
  # 4, all with the same pairs and bytes. XLA's combiner makes %collective-permute of
  # %ppermute.18.0-21.0 (backward) and %collective-permute.1 of 22.0+23.0 (forward).
  passes = FIXTURES / "ring_product_grad_1x2x4.passes"
  tr = diff.trace(str(passes))
  combined = [e for e in tr["events"] if e["kind"] == "combined"]
  assert [e["message"].split(" -> ")[0] for e in combined] == [
    "%ppermute.18.0 + %ppermute.19.0 + %ppermute.20.0 + %ppermute.21.0",
    "%ppermute.22.0 + %ppermute.23.0",
  ]
  assert [e["names"] for e in combined] == [["collective-permute"], ["collective-permute.1"]]
  assert not [e for e in tr["events"] if e["kind"] in ("decomposed", "removed", "created")]
  final = {f["start"]: set(f["origins"]) for f in tr["final"]}
  assert final == {
    "collective-permute-start": {f"ppermute.{i}" for i in (8, 9, 10, 11)},
    "collective-permute-start.1": {"ppermute.2", "ppermute.3"},
  }
  # Each origin set is one loop of the module before optimization.
  before = sources.read_source(str(next((passes / "xla_dump").glob("*before_optimizations*"))))
  comp_of = {i.name: c.name for c in before.module.computations for i in c.instructions}
  for origins in final.values():
    assert len({comp_of[name] for name in origins}) == 1
  rc = cli.main(
    [
      "diff",
      f"{passes}:before_optimizations",
      f"{passes}:after_optimizations",
      "--trace",
      str(passes),
    ]
  )
  out, _ = capsys.readouterr()
  assert rc == 0 and "decomposed" not in out
  assert "combined: %ppermute.22.0 + %ppermute.23.0 -> %collective-permute.1" in out
