"""hlo_tools.commands.parse: `hlo-tools parse`'s summary of a module (text and --json),
its exit statuses and errors."""

import json

from hlo_tools import cli

from conftest import FIXTURES

# XLA's module before async-collective-creator, ring attention on 1x2x4: 30 computations,
# 346 instructions, 16 of them in ENTRY %main.8_spmd (line 422, ROOT %bitcast.19.0); one
# sync permute %ppermute.6.0 (line 368) of bf16[2,1,128,2,64] (65536 bytes) around the
# ring of 8, in %region_0.5_spmd, the body of %while.71, which runs 8 times.
RING = FIXTURES / "ring_1x2x4.before_async.hlo"


def run(capsys, *argv):
  rc = cli.main(["parse", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def test_text_summary(capsys):
  rc, out, err = run(capsys, RING)
  assert rc == 0 and err == ""
  lines = out.splitlines()
  assert lines[0] == (
    "module jit_ring_attention_shard: 30 computations, 346 instructions, entry %main.8_spmd"
  )
  assert "  ENTRY %main.8_spmd: 16 instructions (line 422)" in lines
  assert lines[-2:] == [
    "collective-permutes: 1",
    "  sync %ppermute.6.0 in %region_0.5_spmd line 368: 8 pairs, 65536 bytes/device, "
    "backend DEFAULT in while %while.71 (trip count 8)",
  ]


def test_json_summary(capsys):
  rc, out, _ = run(capsys, RING, "--json")
  assert rc == 0
  summary = json.loads(out)
  assert summary["module"] == "jit_ring_attention_shard"
  assert summary["num_partitions"] == 8 and summary["num_replicas"] == 1
  assert summary["entry"] == "main.8_spmd" and summary["instruction_count"] == 346
  assert len(summary["computations"]) == 30
  [entry] = [c for c in summary["computations"] if c["is_entry"]]
  assert entry == {
    "name": "main.8_spmd",
    "is_entry": True,
    "line": 422,
    "instructions": 16,
    "root": "bitcast.19.0",
  }
  [perm] = summary["collective_permutes"]
  assert perm["start"] == "ppermute.6.0" and perm["form"] == "sync"
  assert perm["pairs"] == [[i, (i + 1) % 8] for i in range(8)]
  assert perm["bytes_per_device"] == 65536 and perm["while_loop"] == "while.71"


def test_unreadable_input_is_one_line(capsys, tmp_path):
  rc, out, err = run(capsys, tmp_path / "missing.hlo")
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert "missing.hlo: cannot read" in err
  rc, _, err = run(capsys, RING, "--max-input-bytes=1000")
  assert rc == 2 and "--max-input-bytes" in err and len(err.strip().splitlines()) == 1


def test_a_bad_flag_is_one_line_as_for_every_command(capsys):
  rc, out, err = run(capsys, RING, "--bogus")
  assert rc == 2 and out == ""
  assert err.strip() == "hlo-tools parse: unrecognized arguments: --bogus"
