"""hlo_tools.ops.report.inputs: a case's input modules under hlo/: a user's file as
text (a serialized module printed), a dump's stages, or a compile."""

import os

import pytest

from hlo_tools.errors import InputError
from hlo_tools.ops.report import inputs
from hlo_tools.ops.report.cases import Case

from conftest import FIXTURES

SHIFT = FIXTURES / "shift_1x1x2.before_async.hlo"
PASSES = FIXTURES / "ring_product_grad_1x2x4.passes"
NO_OP = lambda message: None


def test_write_text_makes_the_folder_and_escapes_a_name_that_is_not_utf8(tmp_path):
  path = tmp_path / "a" / "b" / "note.txt"
  # A file name of byte 0xff, as Python keeps it (a lone surrogate).
  inputs.write_text(str(path), "from " + os.fsdecode(b"\xff.hlo") + "\n")
  assert path.read_bytes() == b"from \\xff.hlo\n"


def test_text_is_read_as_it_is():
  text, config = inputs._file_text(str(SHIFT), 1 << 30)
  assert text == SHIFT.read_text() and config is None


def test_a_serialized_module_is_printed_as_text(tmp_path):
  from jaxlib._hlo import hlo_module_from_text  # pylint: disable=import-outside-toplevel

  proto = tmp_path / "shift.pb"
  proto.write_bytes(hlo_module_from_text(SHIFT.read_text()).as_serialized_hlo_module_proto())
  text, _ = inputs._file_text(str(proto), 1 << 30)
  assert text.startswith("HloModule jit_neighbour_shift")
  assert "collective-permute(" in text and "source_target_pairs={{0,1}}" in text


def test_bytes_that_are_neither_text_nor_a_module_are_refused(tmp_path):
  junk = tmp_path / "junk.bin"
  junk.write_bytes(b"\x00\x01\x02\xff" * 64)
  with pytest.raises(
    InputError, match="junk.bin: neither HLO text nor a serialized HloModuleProto"
  ):
    inputs._file_text(str(junk), 1 << 30, "junk.bin")


def test_a_users_file_is_copied_as_the_input_stage(tmp_path):
  case = Case(id="shift", title="t", topology="1x1x2", path=str(SHIFT), label="shift.hlo")
  stages, dump_dir, origin = inputs.prepare_inputs(case, str(tmp_path / "shift"), NO_OP, 1 << 30)
  copy = tmp_path / "shift" / "hlo" / "input.hlo"
  assert stages == {"input": str(copy)} and dump_dir is None
  assert copy.read_text() == SHIFT.read_text()
  # The config beside the user's file places the module: it is found from the original.
  assert origin == str(SHIFT)


def test_a_dump_gives_its_before_async_and_optimized_stages(tmp_path):
  case = Case(id="grad", title="t", topology="1x2x4", path=str(PASSES), label="grad")
  stages, dump_dir, origin = inputs.prepare_inputs(case, str(tmp_path / "grad"), NO_OP, 1 << 30)
  hlo = tmp_path / "grad" / "hlo"
  assert stages == {
    "before_async": str(hlo / "before_async.hlo"),
    "after_optimizations": str(hlo / "after_optimizations.hlo"),
  }
  assert dump_dir == origin == str(PASSES)
  optimized = (
    PASSES / "xla_dump" / "module_0001.jit_ring_product_grad.sm_9.0a_gpu_after_optimizations.txt"
  )
  assert (hlo / "after_optimizations.hlo").read_text() == optimized.read_text()
  # Entering async-collective-creator, the permutes are still synchronous.
  before = (hlo / "before_async.hlo").read_text()
  assert " collective-permute(" in before and "collective-permute-start" not in before


def test_a_dump_without_modules_is_refused(tmp_path):
  (tmp_path / "empty").mkdir()
  case = Case(id="e", title="t", topology="1x2x4", path=str(tmp_path / "empty"))
  with pytest.raises(InputError, match="no after_optimizations module and no per-pass snapshots"):
    inputs.prepare_inputs(case, str(tmp_path / "e"), NO_OP, 1 << 30)
