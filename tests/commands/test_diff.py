"""hlo_tools.commands.diff: `hlo-tools diff`'s arguments (formats, --out,
--ignore-metadata, --num-partitions, --trace), its exit statuses and output."""

import json

import pytest

from hlo_tools import cli

from conftest import FIXTURES

# One ring-attention module before async-collective-creator (346 instructions, its
# permute %ppermute.6.0 sync) and after XLA's optimizations (358 instructions, the
# permute made async: %collective-permute-start / -done).
BEFORE = FIXTURES / "ring_1x2x4.before_async.hlo"
AFTER = FIXTURES / "ring_1x2x4.after_optimizations.hlo"
# jax's lowered HLO: no num_partitions in its header.
LOWERED = FIXTURES / "ring_1x2x4.lowered.hlo"


def run(capsys, *argv):
  rc = cli.main(["diff", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def test_text_leads_with_the_collectives(capsys):
  rc, out, err = run(capsys, BEFORE, AFTER)
  assert rc == 0 and err == ""  # modules that differ are no error
  lines = out.splitlines()
  assert lines[:4] == [
    f"--- {BEFORE} (346 instructions, 8 partitions)",
    f"+++ {AFTER} (358 instructions, 8 partitions)",
    "collective-permutes (1), before -> after:",
    "  %ppermute.6.0 -> %collective-permute-start/%collective-permute-done   [changed]",
  ]
  assert "    form        sync -> start-done" in lines
  assert "    pairs       0->1 1->2 2->3 3->4 4->5 5->6 6->7 7->0 (same)" in lines


def test_json(capsys):
  rc, out, _ = run(capsys, BEFORE, AFTER, "--format=json")
  assert rc == 0
  result = json.loads(out)
  assert result["summary"]["instructions_a"] == 346 and result["summary"]["instructions_b"] == 358
  [perm] = result["collectives"]
  assert perm["status"] == "changed"
  assert perm["changes"] == [{"field": "form", "a": "sync", "b": "start-done"}]
  assert perm["a"]["start"] == "ppermute.6.0"
  assert [b["start"] for b in perm["b"]] == ["collective-permute-start"]


def test_html_is_one_page(capsys):
  rc, out, _ = run(capsys, BEFORE, AFTER, "--format=html")
  assert rc == 0 and out.startswith("<!DOCTYPE html>") and "</html>" in out


def test_ignore_metadata_drops_scheduling_names(capsys):
  # XLA's scheduler adds metadata.scheduling_name to every instruction it schedules.
  _, out, _ = run(capsys, BEFORE, AFTER)
  assert "metadata.scheduling_name: - -> " in out
  rc, out, _ = run(capsys, BEFORE, AFTER, "--ignore-metadata")
  assert rc == 0 and "metadata." not in out


def test_num_partitions_stands_for_a_header_without_one(capsys):
  _, out, _ = run(capsys, LOWERED, LOWERED, "--format=json")
  summary = json.loads(out)["summary"]
  assert summary["num_partitions_from_a"] != "--num-partitions"
  rc, out, _ = run(capsys, LOWERED, LOWERED, "--format=json", "--num-partitions=8")
  summary = json.loads(out)["summary"]
  assert rc == 0 and summary["num_partitions_a"] == summary["num_partitions_b"] == 8
  assert summary["num_partitions_from_a"] == summary["num_partitions_from_b"] == "--num-partitions"
  assert summary["changed"] == summary["added"] == summary["removed"] == 0


def test_out_writes_the_file(capsys, tmp_path):
  dest = tmp_path / "diff.json"
  rc, out, _ = run(capsys, BEFORE, AFTER, "--format=json", f"--out={dest}")
  assert rc == 0 and out == ""
  assert json.loads(dest.read_text())["summary"]["instructions_b"] == 358


@pytest.mark.parametrize("which", ["a", "b"])
def test_out_that_is_an_input_is_refused(capsys, tmp_path, which):
  a, b = tmp_path / "a.hlo", tmp_path / "b.hlo"
  a.write_text(BEFORE.read_text())
  b.write_text(AFTER.read_text())
  rc, out, err = run(capsys, a, b, f"--out={a if which == 'a' else b}")
  assert rc == 2 and out == ""
  assert "refusing to overwrite an input" in err
  assert a.read_text() == BEFORE.read_text() and b.read_text() == AFTER.read_text()


def test_bad_input_is_one_line(capsys, tmp_path):
  rc, out, err = run(capsys, BEFORE, tmp_path / "missing.hlo")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert "missing.hlo: cannot read" in err
  rc, _, err = run(capsys, BEFORE)
  assert rc == 2 and "the following arguments are required: b" in err
  rc, _, err = run(capsys, BEFORE, AFTER, "--format=svg")
  assert rc == 2 and "argument --format: invalid choice: 'svg'" in err


def test_trace_of_a_folder_without_dumps_is_refused(capsys, tmp_path):
  rc, out, err = run(capsys, BEFORE, AFTER, f"--trace={tmp_path}")
  assert rc == 2 and out == ""
  [line] = err.strip().splitlines()
  assert line.startswith(f"{tmp_path}: no XLA module dumps")


# `hlo-tools dump --all_passes` of a ring's gradient on 1x2x4 (one program).
PASSES = FIXTURES / "ring_product_grad_1x2x4.passes"


@pytest.mark.parametrize("trace", ["", ":ring_product_grad", ":1"])
def test_trace_of_a_dump_or_one_of_its_programs(capsys, trace):
  rc, out, _ = run(
    capsys,
    f"{PASSES}:before_async",
    f"{PASSES}:after_optimizations",
    f"--trace={PASSES}{trace}",
    "--format=json",
  )
  assert rc == 0
  traced = json.loads(out)["trace"]
  assert traced["module"] == "module_0001.jit_ring_product_grad"
  assert traced["dump"] == str(PASSES)
