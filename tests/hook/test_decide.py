"""hlo_tools/hook/decide.py: the core's binding, one permute's mode, and the users'
marks (which mark names a mode, and where a mark may sit)."""

import types

import pytest

from hlo_tools import jax_hook
from hlo_tools.hlo import reader
from hlo_tools.hook import decide
from hlo_tools.model import collectives

from conftest import FAST_PEER_TABLE, FIXTURES

_PEER = "COLLECTIVES_PEER_MEMORY"


@pytest.fixture(scope="module")
def sel():
  return decide.import_selection()


def _module(*lines, header="HloModule m, num_partitions=2"):
  text = "\n".join(
    [
      header,
      "",
      "ENTRY main {",
      "  p0 = f32[8]{0} parameter(0)",
      "  p1 = f32[4]{0} parameter(1)",
      *lines,
      "}",
      "",
    ]
  )
  return reader.parse_hlo_text(text, "m.hlo")


def _permutes(module):
  return {p.start: p for p in collectives.collective_permutes(module)}


def test_hook_modes_are_the_backends_with_a_mode_attribute():
  # A stand-in for the binding's records: NVSHMEM has no mode attribute (no XLA the
  # hook targets runs it), NCCL writes none (None) but its attribute says private.
  stand_in = types.SimpleNamespace(
    BACKEND_INFO={
      "nccl": {"collectives_mode": "", "mode_attribute": "private"},
      "nvshmem": {"collectives_mode": "", "mode_attribute": ""},
      "peer": {"collectives_mode": _PEER, "mode_attribute": "peer"},
    }
  )
  assert decide.hook_modes(stand_in) == {"nccl": (None, "private"), "peer": (_PEER, "peer")}


def test_the_binding_offers_nccl_peer_and_symmetric_to_the_hook(sel):
  assert decide.hook_modes(sel) == {
    "nccl": (None, "private"),
    "peer": (_PEER, "peer"),
    "symmetric": ("COLLECTIVES_SYMMETRIC_MEMORY", "symmetric"),
  }


def test_operand_count_is_the_buffers_a_permute_sends():
  module = _module(
    "  a = (f32[8]{0}, f32[4]{0}) collective-permute(p0, p1), channel_id=1, "
    "source_target_pairs={{0,1},{1,0}}",
    "  ROOT b = f32[8]{0} collective-permute(p0), channel_id=2, source_target_pairs={{0,1},{1,0}}",
  )
  found = _permutes(module)
  assert decide.operand_count(module, found["a"]) == 2
  assert decide.operand_count(module, found["b"]) == 1


def test_user_marks_read_each_marked_permute():
  module = _module(
    "  a = f32[8]{0} collective-permute(p0), channel_id=1, source_target_pairs={{0,1},{1,0}}, "
    'frontend_attributes={_xla_collectives_mode="Peer"}',
    "  b = f32[8]{0} collective-permute(a), channel_id=2, source_target_pairs={{0,1},{1,0}}",
    # The tools' own choice (its attribute says the same value): no user's mark.
    "  ROOT c = f32[8]{0} collective-permute(b), channel_id=3, source_target_pairs={{0,1},{1,0}}, "
    'frontend_attributes={_xla_collectives_mode="private",_nvshmem_opt_mode="private"}',
  )
  assert decide.user_marks(module) == [{"permute": "a", "value": "Peer", "mode": _PEER}]


def test_a_mark_that_names_no_mode_is_a_hook_error():
  module = _module(
    "  ROOT a = f32[8]{0} collective-permute(p0), channel_id=1, source_target_pairs={{0,1}}, "
    'frontend_attributes={_xla_collectives_mode="peer,symmetric"}',
  )
  with pytest.raises(jax_hook.HookError) as err:
    decide.user_marks(module)
  assert str(err.value) == (
    'module m: %a is marked _xla_collectives_mode="peer,symmetric", which names no '
    "collectives mode (private, symmetric, peer); the patched XLA fails such a compile, "
    "and no XLA runs it"
  )


_SUM = """HloModule m, num_partitions=2

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}"""


def _all_reduce(attributes=""):
  line = (
    "  ROOT r = f32[8]{0} all-reduce(p0), channel_id=1, replica_groups={{0,1}}, to_apply=sum"
    + attributes
  )
  return _module(line, header=_SUM)


def test_a_mark_on_another_collective_is_refused():
  marked = _all_reduce(', frontend_attributes={_xla_collectives_mode="peer"}')
  with pytest.raises(jax_hook.HookError) as err:
    decide.check_collective_marks(marked)
  assert '%r (all-reduce) is marked _xla_collectives_mode="peer"' in str(err.value)
  assert "only a collective-permute takes a mode" in str(err.value)
  # Unmarked, or a marked permute: nothing to refuse.
  decide.check_collective_marks(_all_reduce())
  decide.check_collective_marks(
    _module(
      "  ROOT a = f32[8]{0} collective-permute(p0), channel_id=1, source_target_pairs={{0,1}}, "
      'frontend_attributes={_xla_collectives_mode="peer"}'
    )
  )


def test_decide_mode_names_the_backend_the_hook_writes(sel):
  # The two-GPU shift of the fixtures, in one process, where peer memory is fast.
  module = reader.parse_hlo_text((FIXTURES / "shift_1x1x2.before_async.hlo").read_text())
  [permute] = collectives.collective_permutes(module)
  topology = sel.parse_topology("1x1x2", "nccl,peer")
  fast = sel.parse_cost_table(FAST_PEER_TABLE)
  backend, decision = decide.decide_mode(sel, topology, fast, ("nccl", "peer"), permute, 1, 2)
  assert backend == "peer" and decision["reason"]
  # With NCCL the only backend offered, NCCL.
  backend, _ = decide.decide_mode(sel, topology, fast, ("nccl",), permute, 1, 2)
  assert backend == "nccl"


def test_decide_mode_keeps_nccl_under_a_conditionals_branch(sel):
  module = reader.parse_hlo_text((FIXTURES / "cond_ring_1x1x8.after_optimizations.hlo").read_text())
  permutes = collectives.collective_permutes(module)
  assert len(permutes) == 2 and all(p.branch for p in permutes)
  topology = sel.parse_topology("1x1x8", "nccl,peer")
  fast = sel.parse_cost_table(FAST_PEER_TABLE)
  for permute in permutes:
    backend, decision = decide.decide_mode(sel, topology, fast, ("nccl", "peer"), permute, 1, 8)
    assert backend == "nccl" and "under a conditional's branch" in decision["reason"]
