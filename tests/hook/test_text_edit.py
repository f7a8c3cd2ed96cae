"""hlo_tools/hook/text_edit.py: a permute line's collectives mode and mark, and one
module's per-op rewrite (transform_text) on real modules."""

import json
import os

import pytest

from hlo_tools import jax_hook
from hlo_tools.hook import decide, text_edit

from conftest import FIXTURES

RING = FIXTURES / "cond_ring_1x1x8.after_optimizations.hlo"


def _config(line):
  if "backend_config=" not in line:
    return {}
  at = line.index("backend_config=") + len("backend_config=")
  return json.loads(line[at : text_edit._match_brace(line, at)])  # pylint: disable=protected-access


def _permute_lines(text):
  return [l for l in text.split("\n") if text_edit._PERMUTE_RE.search(l)]  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def core():
  sel = decide.import_selection()
  return sel, sel.load_cost_table()


@pytest.mark.parametrize(
  "name,topology",
  [
    ("ring_1x1x8.after_optimizations.hlo", "1x1x8"),
    ("ring_1x2x4.after_optimizations.hlo", "1x2x4"),
    ("ring_1x1x8.before_async.hlo", "1x1x8"),
  ],
)
def test_transform_sets_mode_and_keeps_the_rest(core, name, topology):
  sel, table = core
  with open(os.path.join(FIXTURES, name)) as f:
    text = f.read()
  new, records = text_edit.transform_text(
    text, sel, sel.parse_topology(topology), table, ("nccl", "peer")
  )
  assert records, "no permute found"
  old_lines, new_lines = text.split("\n"), (new or text).split("\n")
  assert len(old_lines) == len(new_lines)
  changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
  # Only permute lines change, and within them only the mode.
  for a, b in changed:
    assert text_edit._PERMUTE_RE.search(a)  # pylint: disable=protected-access
    ca, cb = _config(a), _config(b)
    mode = cb.get("collective_backend_config", {}).pop("collectives_mode", None)
    ca.get("collective_backend_config", {}).pop("collectives_mode", None)
    assert mode in (None, "COLLECTIVES_PEER_MEMORY"), mode  # None: NCCL
    assert {k: v for k, v in ca.items() if v} == {k: v for k, v in cb.items() if v}
    # Before the config, only the mode attribute of the patched XLA is new.
    value = "peer" if mode else "private"
    assert f'_xla_collectives_mode="{value}"' in b
    a = text_edit.set_line_attribute(a, value)
    if "backend_config=" not in b:  # NCCL on a line without a config
      assert a == b
      continue
    head = a[: a.index("backend_config=")] if "backend_config=" in a else a.rstrip() + ", "
    assert head == b[: b.index("backend_config=")]
  for r in records:
    assert r["backend"] in ("nccl", "peer")
    assert r["bytes"] > 0 and r["pairs"]
  if topology == "1x2x4":  # the ring crosses hosts: no peer memory there
    assert {r["backend"] for r in records} == {"nccl"}
  want = sum(r["backend"] == "peer" for r in records)
  assert (
    sum(
      text_edit.permute_modes(new or text).get(k, 0)
      for k in text_edit.permute_modes(new or text)
      if k.endswith("PEER_MEMORY")
    )
    == want
  )


def test_mode_round_trip_on_real_lines():
  """jax 0.10.2 and 0.11.2 lines: set a mode, then NCCL removes it, nothing else moves."""
  paths = [
    os.path.join(FIXTURES, "ring_1x1x8.after_optimizations.hlo"),
    os.path.join(FIXTURES, "jax0112", "h200_jax0112_ppermute_loop.after_optimizations.hlo"),
  ]
  for path in paths:
    with open(path) as f:
      lines = [l for l in _permute_lines(f.read()) if "collectives_mode" in l]
    assert lines, f"{path} lost its collectives_mode"
    for line in lines:
      peer = text_edit.set_line_mode(line, "COLLECTIVES_PEER_MEMORY")
      assert text_edit.line_mode(peer) == "COLLECTIVES_PEER_MEMORY"
      out = text_edit.set_line_mode(peer, None)
      assert text_edit.line_mode(out) is None
      cfg_in, cfg_out = _config(line), _config(out)
      cfg_in["collective_backend_config"].pop("collectives_mode")
      assert cfg_in == cfg_out


def test_line_without_backend_config_gets_one():
  line = "  %cp = f32[4]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}"
  assert text_edit.set_line_mode(line, None) == line
  out = text_edit.set_line_mode(line, "COLLECTIVES_PEER_MEMORY")
  assert text_edit.line_mode(out) == "COLLECTIVES_PEER_MEMORY"


def test_series_transform_keeps_the_users_mark(core):
  """On the series' XLA the hook decides per op; a permute the user marked keeps the
  mode of its mark, as the series' assigner keeps it."""
  sel, table = core
  with open(os.path.join(FIXTURES, "marked_ring_1x1x8.before_async.hlo")) as f:
    text = f.read()
  new, records = text_edit.transform_text(
    text, sel, sel.parse_topology("1x1x8"), table, ("nccl", "peer")
  )
  assert records and all(r["backend"] == "nccl" for r in records)
  assert all('_xla_collectives_mode="private"' in r["reason"] for r in records)
  for line in _permute_lines(new or text):
    if "backend_config=" in line:
      assert text_edit.line_mode(line) is None


def test_permute_decided_with_the_modules_partition_count(core):
  """A two-device program under a hook installed for two hosts of four: its header
  says 2 partitions, so its ring is on one host and peer memory may run it; taken as
  the topology's 8 devices, the program would span both hosts, where the device
  order is unknown."""
  sel, table = core
  with open(os.path.join(FIXTURES, "shift_1x1x2.before_async.hlo")) as f:
    text = f.read()
  assert text_edit.header_counts(text) == (2, 1)
  fast = sel.parse_cost_table(
    "links { backend: PEER link_class: NVLINK latency_us: 1 "
    "bandwidth_gbps: 900 per_buffer_us: 1 }\n"
  )
  _, records = text_edit.transform_text(
    text, sel, sel.parse_topology("1x2x4", "nccl,peer"), fast, ("nccl", "peer")
  )
  assert records and {r["backend"] for r in records} == {"peer"}, records


def test_series_transform_keeps_an_invalid_mark_as_an_error(core):
  """A mark that is not one mode ("peer,symmetric", as an unpatched combiner joins
  two): the series' assigner fails that compile, so the hook writes nothing over it
  and says why, naming the permute and the value."""
  sel, table = core
  with open(os.path.join(FIXTURES, "marked_ring_1x1x8.before_async.hlo")) as f:
    text = f.read().replace(
      '_xla_collectives_mode="private"', '_xla_collectives_mode="peer,symmetric"'
    )
  with pytest.raises(jax_hook.HookError) as err:
    text_edit.transform_text(text, sel, sel.parse_topology("1x1x8"), table, ("nccl", "peer"))
  assert '_xla_collectives_mode="peer,symmetric", which names no collectives mode' in str(err.value)
  assert "\n" not in str(err.value)


def test_jax_hook_keeps_nccl_under_a_branch():
  # The hook's per-op choice is the same decision: peer wins the 32 MiB ring
  # elsewhere, never under a branch.
  from hlo_tools.hook import decide, text_edit  # pylint: disable=import-outside-toplevel

  sel = decide.import_selection()
  text = RING.read_text()
  # The set's own process layout: one process drives the host's 8 GPUs.
  topology = sel.parse_topology("1x1x8", "nccl,peer")
  _, records = text_edit.transform_text(
    text, sel, topology, sel.load_cost_table(), ("nccl", "peer")
  )
  assert [r["backend"] for r in records] == ["nccl", "nccl"]
  assert all("under a conditional's branch" in r["reason"] for r in records)
  plain = (
    (FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo")
    .read_text()
    .replace('_xla_collectives_mode="private"', 'x="y"')
  )
  _, [record] = text_edit.transform_text(
    plain, sel, topology, sel.load_cost_table(), ("nccl", "peer")
  )
  assert record["backend"] == "peer"


def _start_line(path):
  [line] = [l for l in path.read_text().split("\n") if " collective-permute-start(" in l]
  return line


def test_set_line_attribute_inserts_the_mark_before_the_backend_config():
  # A real start line with no frontend_attributes: the mark and the tools' own
  # attribute go in one new frontend_attributes, before backend_config, nothing
  # else moves.
  line = _start_line(FIXTURES / "ring_1x1x8.after_optimizations.hlo")
  assert "frontend_attributes" not in line
  want = line.replace(
    ", backend_config={",
    ', frontend_attributes={_xla_collectives_mode="peer",_nvshmem_opt_mode="peer"}'
    ", backend_config={",
    1,
  )
  assert text_edit.set_line_attribute(line, "peer") == want


def test_set_line_attribute_replaces_a_mark_and_keeps_other_attributes():
  line = (
    "  %cp = f32[8]{0} collective-permute(%p0), channel_id=1, "
    "source_target_pairs={{0,1},{1,0}}, "
    'frontend_attributes={_xla_collectives_mode="private",other="x",'
    '_nvshmem_opt_mode="private"}'
  )
  assert text_edit.set_line_attribute(line, "peer") == (
    "  %cp = f32[8]{0} collective-permute(%p0), channel_id=1, "
    "source_target_pairs={{0,1},{1,0}}, "
    'frontend_attributes={_xla_collectives_mode="peer",_nvshmem_opt_mode="peer",other="x"}'
  )
  # No backend_config and no attributes: appended at the end of the line.
  bare = "  %cp = f32[8]{0} collective-permute(%p0), source_target_pairs={{0,1}}"
  assert text_edit.set_line_attribute(bare, "private") == (
    bare + ', frontend_attributes={_xla_collectives_mode="private",_nvshmem_opt_mode="private"}'
  )


def test_set_line_mode_keeps_key_order_and_braces_inside_strings():
  # A "}" inside a JSON string does not end the backend_config.
  line = (
    '  %cp = f32[8]{0} collective-permute(%p0), backend_config={"a":"x}y",'
    '"collective_backend_config":{"backend":"DEFAULT"},"z":1}, metadata={op_name="m"}'
  )
  assert text_edit.set_line_mode(line, "COLLECTIVES_PEER_MEMORY") == (
    '  %cp = f32[8]{0} collective-permute(%p0), backend_config={"a":"x}y",'
    '"collective_backend_config":{"backend":"DEFAULT",'
    '"collectives_mode":"COLLECTIVES_PEER_MEMORY"},"z":1}, metadata={op_name="m"}'
  )
  with pytest.raises(ValueError, match="unbalanced"):
    text_edit.line_mode('  %cp = f32[8]{0} collective-permute(%p0), backend_config={"a":{')


def test_line_mode_reads_invalid_as_unset():
  # XLA prints COLLECTIVES_MODE_INVALID where no mode was assigned (the flag's runs).
  line = _start_line(FIXTURES / "ring_1x1x8.after_optimizations.hlo")
  assert '"collectives_mode":"COLLECTIVES_MODE_INVALID"' in line
  assert text_edit.line_mode(line) is None
  assert text_edit.line_mode("  %p0 = f32[8]{0} parameter(0)") is None


_THREE = """HloModule m, num_partitions=2

ENTRY main {
  p0 = f32[8]{0} parameter(0)
  %a = f32[8]{0} collective-permute(p0), channel_id=1, source_target_pairs={{0,1},{1,0}}, backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_PEER_MEMORY"}}
  b = f32[8]{0} collective-permute(%a), channel_id=2, source_target_pairs={{0,1},{1,0}}
  c = (f32[8]{0}, f32[8]{0}) collective-permute-start(b), channel_id=3, source_target_pairs={{0,1},{1,0}}, backend_config={"collective_backend_config":{
  d = f32[8]{0} collective-permute-done(c)
  ROOT r = f32[8]{0} add(d, d)
}
"""


def test_permute_modes_and_line_modes_count_each_permute_once():
  # Three permutes: one in peer memory, one without a config (NCCL), a start whose
  # config does not parse; the done and the other instructions are not permutes.
  assert text_edit.permute_modes(_THREE) == {
    "collective-permute:COLLECTIVES_PEER_MEMORY": 1,
    "collective-permute:NCCL": 1,
    "collective-permute-start:UNPARSED": 1,
  }
  assert text_edit.permute_line_modes(_THREE) == [
    ("a", "COLLECTIVES_PEER_MEMORY"),
    ("b", None),
    ("c", "UNPARSED"),
  ]


def test_header_counts_read_the_header_line_only():
  assert text_edit.header_counts("HloModule m, replica_count=2, num_partitions=4\n") == (4, 2)
  # jaxlib's module inside a compile states neither: the topology's devices, one replica.
  assert text_edit.header_counts("HloModule m\n\nENTRY e { num_partitions=8 }") == (None, 1)
  head = (FIXTURES / "ring_1x1x8.before_async.hlo").read_text()
  assert text_edit.header_counts(head) == (8, 1)


def test_a_module_without_permutes_is_left_as_it_is(core):
  sel, table = core
  text = "HloModule m\n\nENTRY main {\n  ROOT p0 = f32[8]{0} parameter(0)\n}\n"
  assert text_edit.transform_text(
    text, sel, sel.parse_topology("1x1x2"), table, ("nccl", "peer")
  ) == (None, [])
