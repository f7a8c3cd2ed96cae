"""hlo_tools.hlo.buffer_assignment: XLA's buffer-assignment dump beside a module, read
from real jax 0.10.2 dumps (tests/fixtures/*-buffer-assignment.txt): where it is, the
allocation of each value, and bad dumps refused naming file and line."""

import os

import pytest

from hlo_tools.errors import InputError
from hlo_tools.hlo import buffer_assignment
from hlo_tools.hlo.buffer_assignment import Allocation

from conftest import FIXTURES

DONATED = FIXTURES / "donated_ring_1x1x8.after_optimizations-buffer-assignment.txt"
XLA_DUMP = FIXTURES / "training_script_1x1x8.xla_dump"


def test_sibling_path_is_the_name_xla_gives_the_dump():
  assert (
    buffer_assignment.sibling_path("d/ring.after_optimizations.hlo")
    == "d/ring.after_optimizations-buffer-assignment.txt"
  )
  # XLA's own dump folder: each module after optimizations has its dump beside it.
  modules = sorted(XLA_DUMP.glob("*after_optimizations.txt"))
  assert modules
  for module in modules:
    assert os.path.isfile(buffer_assignment.sibling_path(module)), module
  assert buffer_assignment.sibling_path(
    FIXTURES / "donated_ring_1x1x8.after_optimizations.hlo"
  ) == (str(DONATED))


def test_real_dump_places_donated_parameter_and_permute_result():
  # The ring writes its result into the donated parameter 1 (param.1), which the
  # program returns; the permute's own tuple is a temporary.
  holders = buffer_assignment.parse(DONATED.read_text(), str(DONATED))
  donated = Allocation(number=0, color=0, parameter=1, live_out=True)
  assert holders == {
    "param.1": {(): donated},
    "collective-permute-start": {(1,): donated, (): Allocation(2, 0, None, False)},
    "param.2": {(): Allocation(1, 0, 0, False)},
  }


def test_colors_phis_and_other_sections():
  text = (
    "BufferAssignment:\n"
    "allocation 3: size 16, color 1, parameter 2, shape |f32[4]| at ShapeIndex {}:\n"
    " value: <5 p.1{0,1} (phi) @0> (size=16,offset=0): f32[4]{0}\n"
    "allocation 4: size 8, maybe-live-out:\n"
    " value: <6 t @0> (size=8,offset=0): f32[2]{0}\n"
    " value: <7 p.1{0,1} @0> (size=8,offset=0): f32[2]{0}\n"
    "\n"
    "Total bytes used: 24 (24B)\n"
    "\n"
    "Used values:\n"
    "<5 p.1{0,1} (phi) @0>\n"
  )
  holders = buffer_assignment.parse(text, "x")
  # The first allocation named for a value is the one kept.
  assert holders["p.1"] == {(0, 1): Allocation(3, 1, 2, False)}
  assert holders["t"] == {(): Allocation(4, 0, None, True)}


@pytest.mark.parametrize(
  "text, message",
  [
    ("allocation 0: size 4:\n", "ba.txt:1: not an XLA buffer-assignment dump"),
    ("BufferAssignment:\nallocation x: size 4:\n", "ba.txt:2: expected 'allocation N: size S"),
    (
      "BufferAssignment:\n value: <0 p @0> (size=4,offset=0): f32[]\n",
      "ba.txt:2: expected ' value: <id name{index} @n>' under an allocation line",
    ),
    (
      "BufferAssignment:\nallocation 0: size 4:\n value: p\n",
      "ba.txt:3: expected ' value: <id name{index} @n>'",
    ),
  ],
)
def test_bad_dumps_name_file_and_line(text, message):
  with pytest.raises(InputError) as info:
    buffer_assignment.parse(text, "ba.txt")
  assert str(info.value).startswith(message), str(info.value)


def test_found_and_copy(tmp_path):
  assert buffer_assignment.found(str(DONATED))
  assert not buffer_assignment.found(str(tmp_path / "none-buffer-assignment.txt"))
  # Something else at its name is refused, not taken as no dump.
  (tmp_path / "dir-buffer-assignment.txt").mkdir()
  with pytest.raises(InputError, match="is a directory, not a regular file"):
    buffer_assignment.found(str(tmp_path / "dir-buffer-assignment.txt"))
  with pytest.raises(InputError, match="over the limit of 100"):
    buffer_assignment.found(str(DONATED), max_bytes=100)
  to = tmp_path / "copy.txt"
  buffer_assignment.copy(str(DONATED), str(to))
  assert to.read_bytes() == DONATED.read_bytes()
