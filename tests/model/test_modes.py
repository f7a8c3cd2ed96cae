"""hlo_tools.model.modes: the collectives mode a permute's _xla_collectives_mode
attribute asks for, as the series' CollectiveBackendAssigner reads it."""

import pytest

from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model import modes

PEER = "COLLECTIVES_PEER_MEMORY"
PRIVATE = "COLLECTIVES_PRIVATE_MEMORY"
SYMMETRIC = "COLLECTIVES_SYMMETRIC_MEMORY"

MARKED = """HloModule m, num_partitions=2

ENTRY e {
  p = f32[8]{0LAYOUT} parameter(0)
  ROOT cp = f32[8]{0} collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}ATTRS
}
"""


def _permute(attrs="", layout=""):
  """The module and its permute (the module keeps the instruction alive)."""
  text = MARKED.replace("ATTRS", attrs and f", frontend_attributes={{{attrs}}}")
  module = parse_hlo_text(text.replace("LAYOUT", layout))
  return module, module.entry.instruction("cp")


@pytest.mark.parametrize(
  "value,word",
  [
    ("peer", "peer"),
    ("PEER", "peer"),  # any case, as the flag's parser takes it
    ("Symmetric", "symmetric"),
    ("private", "private"),
    ("peer,Peer", "peer"),  # a combiner's join of two marks of one mode
    ("peer,symmetric", None),  # two modes: no mode
    ("nccl", None),
    ("", None),
    ("p\u00e9er", None),
  ],
)
def test_mark_word(value, word):
  assert modes.mark_word(value) == word
  assert modes.mark_mode(value) == (modes.MODES[word] if word else None)


def test_mark_mode_is_the_configs_enum():
  assert modes.mark_mode("peer") == PEER
  assert modes.mark_mode("symmetric") == SYMMETRIC
  assert modes.mark_mode("private") == PRIVATE


def test_requested_without_a_mark_is_none():
  _module, cp = _permute()
  assert modes.requested(cp) is None


def test_requested_takes_the_mark_over_the_flag():
  _module, cp = _permute('_xla_collectives_mode="Peer"')
  assert modes.requested(cp) == {
    "attribute": "Peer",
    "mode": PEER,
    "why": "taken over the flag's mode",
  }


def test_a_mark_of_no_mode_fails_the_compile():
  _module, cp = _permute('_xla_collectives_mode="peer,symmetric"')
  got = modes.requested(cp)
  assert got["attribute"] == "peer,symmetric" and got["mode"] is None
  assert "InvalidArgument" in got["why"]


def test_symmetric_memory_for_a_buffer_in_another_memory_space_is_private():
  _module, cp = _permute('_xla_collectives_mode="symmetric"', layout=":S(1)")
  assert modes.requested(cp) == {
    "attribute": "symmetric",
    "mode": PRIVATE,
    "why": "no symmetric memory for a buffer in memory space S(1): private memory",
  }
  # Peer memory has no such rule.
  _module, cp = _permute('_xla_collectives_mode="peer"', layout=":S(1)")
  assert modes.requested(cp)["mode"] == PEER


def test_user_mark_is_none_where_a_tool_wrote_the_mode():
  _module, cp = _permute('_xla_collectives_mode="peer"')
  assert modes.user_mark(cp) == "peer"
  _module, cp = _permute('_nvshmem_opt_mode="peer",_xla_collectives_mode="peer"')
  assert modes.user_mark(cp) is None
  # The tool chose another value than the one now there: the user changed it.
  _module, cp = _permute('_nvshmem_opt_mode="peer",_xla_collectives_mode="private"')
  assert modes.user_mark(cp) == "private"
  _module, cp = _permute()
  assert modes.user_mark(cp) is None
