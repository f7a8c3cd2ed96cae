"""XLA's module config beside a module (hlo_tools.hlo.module_config): the partition ->
device map and the collective flags, read from real jax 0.10.2 compiles
(tests/fixtures/*.config.pbtxt, scripts/gen_config_fixtures.py), bad configs refused
in one line naming file and line, and `hlo-tools dump` carrying the config beside
every stage file it writes.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from hlo_tools import cli
from hlo_tools.errors import InputError, InputReadError
from hlo_tools.hlo import module_config
from hlo_tools.hlo.reader import parse_hlo_file
from hlo_tools.model import collectives, dumps

from conftest import FIXTURES, ROOT

PERMUTED = (0, 4, 1, 5, 2, 6, 3, 7)
MAPS = {
  "perm_ring_1x2x4": PERMUTED,
  "perm_flat_ring_1x2x4": PERMUTED,
  "marked_ring_1x1x8": tuple(range(8)),
  "cond_ring_1x1x8": tuple(range(8)),
}
STAGES = ("before_async", "after_optimizations")
CONFIG = FIXTURES / "perm_ring_1x2x4.after_optimizations.config.pbtxt"


def _env():
  return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


# ---------------------------------------------------------------------------------------
# The fixtures


@pytest.mark.parametrize("name", sorted(MAPS))
@pytest.mark.parametrize("stage", STAGES)
def test_fixture_config_reads_its_device_map(name, stage):
  module = FIXTURES / f"{name}.{stage}.hlo"
  assert module_config.find_config(str(module)) == str(FIXTURES / f"{name}.{stage}.config.pbtxt")
  config = module_config.for_module(str(module))
  assert config.partition_to_device == MAPS[name]
  assert (config.replica_count, config.computation_count) == (1, 8)
  assert config.collective_permute_mode == "COLLECTIVES_PRIVATE_MEMORY"
  assert config.nvshmem_enabled is False
  assert config.path.endswith(f"{name}.{stage}.config.pbtxt")


def _permutes(name, stage="after_optimizations"):
  return collectives.collective_permutes(parse_hlo_file(FIXTURES / f"{name}.{stage}.hlo"))


def _ring(members):
  return sorted((a, b) for a, b in zip(members, members[1:] + members[:1]))


def test_fixture_rings_are_as_described():
  # The (dp, cp) mesh: a 4-ring at each dp index; the flat mesh: one 8-ring.
  [perm] = _permutes("perm_ring_1x2x4")
  assert sorted(perm.pairs) == sorted(_ring([0, 1, 2, 3]) + _ring([4, 5, 6, 7]))
  [flat] = _permutes("perm_flat_ring_1x2x4")
  assert sorted(flat.pairs) == _ring(list(range(8)))
  # A fori_loop of ring size - 1 trips, a 32 MiB block each.
  for p, trips in ((perm, 3), (flat, 7)):
    assert p.bytes_per_device == 32 << 20 and p.trip_count == trips and p.is_async
  # With the map, each partition pair is a device pair: every hop crosses the hosts
  # (devices 0-3 and 4-7) in both rings.
  for p in (perm, flat):
    assert all((PERMUTED[a] < 4) != (PERMUTED[b] < 4) for a, b in p.pairs)
  # The conditional ring: forward in one branch, backward in the other, each 32 MiB.
  fwd, bwd = _permutes("cond_ring_1x1x8")
  assert sorted(fwd.pairs) == _ring(list(range(8)))
  assert sorted(bwd.pairs) == sorted((b, a) for a, b in _ring(list(range(8))))
  assert fwd.computation != bwd.computation and fwd.bytes_per_device == 32 << 20
  text = (FIXTURES / "cond_ring_1x1x8.after_optimizations.hlo").read_text()
  assert re.search(
    rf"conditional\(.*true_computation=%{fwd.computation}, "
    rf"false_computation=%{bwd.computation}",
    text,
  )


def test_marked_ring_keeps_the_mark_on_start_and_done():
  text = (FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo").read_text()
  ops = [l for l in text.splitlines() if re.search(r"collective-permute-(start|done)\(", l)]
  assert len(ops) == 2
  assert all('frontend_attributes={_xla_collectives_mode="private"}' in l for l in ops)
  before = (FIXTURES / "marked_ring_1x1x8.before_async.hlo").read_text()
  [sync] = [l for l in before.splitlines() if " collective-permute(" in l]
  assert '_xla_collectives_mode="private"' in sync


def test_fixtures_are_reproducible(tmp_path):
  # One compile (a few seconds); XLA's own dump folder is kept for the next test.
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "scripts" / "gen_config_fixtures.py"),
      f"--out_dir={tmp_path / 'out'}",
      "--only=perm_ring_1x2x4",
      f"--xla_dump_dir={tmp_path / 'raw'}",
    ],
    env=_env(),
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  made = sorted(os.listdir(tmp_path / "out"))
  assert made == sorted(f for f in os.listdir(FIXTURES) if f.startswith("perm_ring_1x2x4."))
  for fname in made:
    assert (tmp_path / "out" / fname).read_text() == (FIXTURES / fname).read_text(), fname
  # `hlo-tools dump` on XLA's real dump folder: the config beside every stage it writes.
  out = tmp_path / "indexed"
  assert (
    cli.main(["dump", str(tmp_path / "raw" / "perm_ring_1x2x4"), f"--out={out}", "--quiet"]) == 0
  )
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["partition_to_device"] == list(PERMUTED)
  assert {"before_optimizations", "before_async", "after_optimizations"} <= set(manifest["stages"])
  for fname in manifest["stages"].values():
    config = module_config.for_module(str(out / fname))
    assert config.path == module_config.sidecar_path(str(out / fname))
    assert config.partition_to_device == PERMUTED
  assert dumps.module_config_path(str(out)).endswith(f"{manifest['main_module']}.config.pbtxt")


# ---------------------------------------------------------------------------------------
# Where the config is


def _xla_layout(tmp_path, config_text=None):
  """A dump folder in XLA's names: the permuted ring's module and its config."""
  raw = tmp_path / "raw"
  raw.mkdir()
  module = (FIXTURES / "perm_ring_1x2x4.after_optimizations.hlo").read_text()
  (raw / "module_0007.jit_ring.sm_9.0a_gpu_after_optimizations.txt").write_text(module)
  (raw / "module_0007.jit_ring.config.pbtxt").write_text(config_text or CONFIG.read_text())
  return raw


def test_find_config_in_xla_dump_names(tmp_path):
  raw = _xla_layout(tmp_path)
  want = str(raw / "module_0007.jit_ring.config.pbtxt")
  for name in (
    "module_0007.jit_ring.sm_9.0a_gpu_after_optimizations.txt",
    "module_0007.jit_ring.before_optimizations.txt",
    "module_0007.jit_ring.0082.post-fusion_optimization.after_a.before_b.txt",
  ):
    assert module_config.find_config(str(raw / name)) == want, name
  # Another module of the dump, a plain file, stdin: no config.
  for path in (raw / "module_0008.jit_other.before_optimizations.txt", tmp_path / "x.hlo", "-"):
    assert module_config.find_config(str(path)) is None
  assert module_config.for_module(str(tmp_path / "x.hlo")) is None
  assert (
    module_config.sidecar_path("a/b.after_optimizations.hlo")
    == "a/b.after_optimizations.config.pbtxt"
  )
  assert module_config.sidecar_path("a/m.txt") == "a/m.config.pbtxt"


def test_dump_of_an_xla_folder_copies_the_config(tmp_path):
  raw = _xla_layout(tmp_path)
  out = tmp_path / "out"
  assert cli.main(["dump", str(raw), f"--out={out}", "--quiet"]) == 0
  assert (out / "after_optimizations.config.pbtxt").read_text() == CONFIG.read_text()
  assert json.loads((out / "manifest.json").read_text())["partition_to_device"] == list(PERMUTED)
  # A stage file without its sidecar (a dump written before the sidecar) finds the
  # main module's config under xla_dump/ through the manifest.
  (out / "after_optimizations.config.pbtxt").unlink()
  found = module_config.find_config(str(out / "after_optimizations.hlo"))
  assert found == str(out / "xla_dump" / "module_0007.jit_ring.config.pbtxt")
  # Not for a file the manifest does not list as a stage.
  shutil.copyfile(out / "after_optimizations.hlo", out / "mine.hlo")
  assert module_config.find_config(str(out / "mine.hlo")) is None


def test_dump_of_an_xla_folder_with_a_bad_config_names_the_users_file(tmp_path, capsys):
  text = CONFIG.read_text().replace("computation_count: 8", "computation_count: 9")
  raw = _xla_layout(tmp_path, text)
  out = tmp_path / "out"
  assert cli.main(["dump", str(raw), f"--out={out}", "--quiet"]) == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  line_no = text.splitlines().index("static_device_assignment {") + 1
  assert line.startswith(f"{raw / 'module_0007.jit_ring.config.pbtxt'}:{line_no}: ")
  assert "8 computation_devices for computation_count 9" in line
  assert not out.exists()


# ---------------------------------------------------------------------------------------
# Bad configs: one line, file:line


def _error(tmp_path, text, **kwargs):
  path = tmp_path / "bad.config.pbtxt"
  path.write_bytes(text.encode() if isinstance(text, str) else text)
  with pytest.raises(InputError) as info:
    module_config.read_config(str(path), **kwargs)
  message = str(info.value)
  assert "\n" not in message and message.startswith(f"{path}:"), message
  return message


def _line_of(text, needle, occurrence=0):
  return [i for i, l in enumerate(text.splitlines(), 1) if needle in l][occurrence]


def test_truncated_config(tmp_path):
  text = CONFIG.read_text()
  lines = text.splitlines(keepends=True)
  cut = _line_of(text, "replica_device_ids: 5")
  message = _error(tmp_path, "".join(lines[:cut]))
  opened = _line_of(text, "computation_devices {", 3)
  assert message == (
    f"{tmp_path / 'bad.config.pbtxt'}:{cut}: the file ends inside "
    f"'computation_devices' (opened at line {opened})"
  )
  # Cut inside a field: in the middle of debug_options.
  cut = _line_of(text, "xla_gpu_collective_permute_mode")
  message = _error(tmp_path, "".join(lines[: cut - 1]) + "  xla_gpu_collective_perm")
  assert f":{cut}: the file ends inside 'debug_options' (opened at line " in message


@pytest.mark.parametrize(
  "old,new,needle,message",
  [
    (
      "computation_count: 8",
      "computation_count: 9",
      "static_device_assignment {",
      "has 8 computation_devices for computation_count 9",
    ),
    (
      "computation_count: 8",
      "computation_count: 7",
      "computation_devices {#7",
      "has 8 computation_devices for computation_count 7",
    ),
    (
      "  replica_count: 1\n  computation_count",
      "  replica_count: 2\n  computation_count",
      "computation_devices {",
      "computation_devices 0 has 1 replica_device_ids for replica_count 2",
    ),
    (
      "replica_device_ids: 5",
      "replica_device_ids: 4",
      "replica_device_ids: 4#1",
      "device 4 is given twice",
    ),
    (
      "replica_device_ids: 5",
      "replica_device_ids: -5",
      "replica_device_ids: -5",
      "device id -5 is negative",
    ),
    (
      "replica_device_ids: 5",
      "replica_device_ids: 5.0",
      "replica_device_ids: 5.0",
      "'replica_device_ids' must be an integer, not '5.0'",
    ),
    (
      "num_partitions: 8",
      "num_partitions: 4",
      "num_partitions: 4",
      "num_partitions 4 differs from the device assignment's 8",
    ),
    (
      "  computation_count: 8",
      "  computation_count: 0",
      "computation_count: 0",
      "needs computation_count > 0, got 0",
    ),
    (
      "xla_gpu_experimental_enable_nvshmem: false",
      "xla_gpu_experimental_enable_nvshmem: maybe",
      "xla_gpu_experimental_enable_nvshmem",
      "must be true or false, not 'maybe'",
    ),
    (
      "use_spmd_partitioning: true",
      "use_spmd_partitioning: true\nnum_partitions: 8",
      "num_partitions: 8#1",
      "'num_partitions' given twice",
    ),
    (
      "use_spmd_partitioning: true",
      "use_spmd_partitioning: @",
      "use_spmd_partitioning",
      "unexpected character '@'",
    ),
    (
      "use_spmd_partitioning: true",
      "use_spmd_partitioning true",
      "use_spmd_partitioning",
      "expected ':' or '{' after 'use_spmd_partitioning', found 'true'",
    ),
    (
      "use_spmd_partitioning: true",
      "use_spmd_partitioning: true\n}",
      "use_spmd_partitioning+1",
      "'}' without a block to close",
    ),
  ],
)
def test_bad_config_names_file_and_line(tmp_path, old, new, needle, message):
  good = CONFIG.read_text()
  assert old in good
  text = good.replace(old, new, 1)
  needle, _, below = needle.partition("+")
  needle, _, nth = needle.partition("#")
  line = _line_of(text, needle, int(nth or 0)) + int(below or 0)
  got = _error(tmp_path, text)
  assert got.startswith(f"{tmp_path / 'bad.config.pbtxt'}:{line}: "), got
  assert message in got, got


def test_bytes_that_are_not_utf8(tmp_path):
  text = CONFIG.read_bytes().replace(b'xla_gpu_cuda_data_dir: "', b'xla_gpu_cuda_data_dir: "\xff')
  line = _line_of(CONFIG.read_text(), "xla_gpu_cuda_data_dir")
  assert f":{line}: not UTF-8 text" in _error(tmp_path, text)


def test_config_over_the_size_cap_is_refused(tmp_path):
  with pytest.raises(InputReadError, match="over the limit of 1000 .--max-input-bytes."):
    module_config.read_config(str(CONFIG), max_bytes=1000)


def test_config_without_a_device_assignment_has_no_map(tmp_path):
  text = re.sub(r"static_device_assignment \{.*?\n\}\n", "", CONFIG.read_text(), flags=re.S)
  path = tmp_path / "plain.config.pbtxt"
  path.write_text(text)
  config = module_config.read_config(str(path))
  assert config.partition_to_device is None
  assert (config.replica_count, config.computation_count) == (1, 8)  # the top level's


def test_replicas_and_partitions_map_by_xla_flattened_id(tmp_path):
  # Two replicas of two partitions: flattened id replica * 2 + partition.
  path = tmp_path / "rp.config.pbtxt"
  path.write_text(
    "replica_count: 2\nnum_partitions: 2\nstatic_device_assignment {\n"
    "  replica_count: 2\n  computation_count: 2\n"
    "  computation_devices { replica_device_ids: 10 replica_device_ids: 11 }\n"
    "  computation_devices { replica_device_ids: [12, 13] }\n}\n"
  )
  config = module_config.read_config(str(path))
  assert config.partition_to_device == (10, 12, 11, 13)
  assert config.collective_permute_mode is None and config.nvshmem_enabled is None


# ---------------------------------------------------------------------------------------
# `hlo-tools dump` of a program: one compile


@pytest.mark.long
def test_dump_writes_the_config_beside_each_stage(tmp_path):
  out = tmp_path / "ring"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "dump",
      "--topology=1x1x8",
      "--seq_len=512",
      "--num_heads=4",
      "--num_kv_heads=2",
      "--head_dim=32",
      "--quiet",
      f"--out={out}",
    ],
    cwd=ROOT,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["partition_to_device"] == list(range(8))
  hlo_stages = [s for s in manifest["stages"] if s != "stablehlo"]
  assert {"lowered", "before_optimizations", "after_optimizations"} <= set(hlo_stages)
  xla_config = (out / "xla_dump" / f"{manifest['main_module']}.config.pbtxt").read_text()
  for stage in hlo_stages:
    sidecar = out / f"{stage}.config.pbtxt"
    assert sidecar.read_text() == xla_config, stage
    assert module_config.for_module(str(out / f"{stage}.hlo")).partition_to_device == tuple(
      range(8)
    )
  assert not (out / "stablehlo.config.pbtxt").exists()
  shutil.rmtree(out)


# ---------------------------------------------------------------------------------------
# The text format, as protobuf's text parser takes it


def test_text_format_separators_comments_lists_and_strings():
  text = (
    "# written by hand\n"
    "replica_count: 1; num_partitions: 2,\n"
    "debug_options {\n"
    "  xla_gpu_collective_permute_mode: COLLECTIVES_PEER_MEMORY  # an enum by name\n"
    '  xla_gpu_cuda_data_dir: "a" "b"\n'
    "  xla_gpu_experimental_enable_nvshmem: t\n"
    "}\n"
    "static_device_assignment: { replica_count: 1 computation_count: 2\n"
    "  computation_devices { replica_device_ids: 1 } computation_devices { replica_device_ids: [0] }\n"
    "}\n"
  )
  config = module_config.parse_config(text, "hand.pbtxt")
  assert config.path == "hand.pbtxt"
  assert (config.replica_count, config.computation_count) == (1, 2)
  assert config.partition_to_device == (1, 0)
  assert config.collective_permute_mode == "COLLECTIVES_PEER_MEMORY"
  assert config.nvshmem_enabled is True


@pytest.mark.parametrize(
  "text, message",
  [
    (
      'debug_options { xla_gpu_collective_permute_mode: "PEER" }',
      "c:1: 'xla_gpu_collective_permute_mode' must be an enum name or number, not a string",
    ),
    (
      "debug_options {\n xla_gpu_experimental_enable_nvshmem { }\n}",
      "c:2: 'xla_gpu_experimental_enable_nvshmem' must be a value",
    ),
    (
      "num_partitions: 99999999999999999999",
      "c:1: 'num_partitions' 99999999999999999999 does not fit in 64 bits",
    ),
    ("num_partitions: [1, 2", "c:1: expected ',' or ']' in the list of 'num_partitions'"),
  ],
)
def test_fields_of_the_wrong_kind_are_refused(text, message):
  with pytest.raises(InputError) as info:
    module_config.parse_config(text, "c")
  assert str(info.value).startswith(message), str(info.value)


def test_an_empty_config_is_refused(tmp_path):
  path = tmp_path / "empty.config.pbtxt"
  path.write_text(" \n")
  with pytest.raises(InputError, match="empty.config.pbtxt: empty file, no module config"):
    module_config.read_config(str(path))
