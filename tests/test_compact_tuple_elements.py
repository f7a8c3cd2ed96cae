"""Operands written `%t#K`: XLA's compact get-tuple-element, in jax 0.11.2's and 0.12's dumps.

tests/fixtures/jax0112/cond_ring_1x1x1.after_optimizations.hlo is the optimized module
XLA (jax 0.11.2) wrote on a real H200 for benchmarks/hook_gpu_run.py's ring: a fori_loop of
ppermutes, one of them under a conditional's branch (jax 0.12.0.1 wrote the same text).
Its while body reads the loop counter as `%arg_tuple.7#0` and the branch's permute
takes `%ppermute.1#0`; before the reader and the driver took the form, both refused
the dump ("expected an operand name", "cannot parse as an instruction name").
"""

import json
import re

from hlo_tools.errors import HloParseError
from hlo_tools.hlo import reader

from conftest import FIXTURES, run_nvshmem_opt

RING = FIXTURES / "jax0112" / "cond_ring_1x1x1.after_optimizations.hlo"


def test_the_fixture_uses_the_compact_form():
  text = RING.read_text()
  assert "collective-permute(%ppermute.1#0)" in text
  assert "fusion(%arg_tuple.7#0)" in text


def test_reader_adds_the_tuple_elements_xla_adds():
  module = reader.parse_hlo_file(RING)
  [body] = [c for c in module.computations if any(i.name == "arg_tuple.7" for i in c.instructions)]
  element = body.instruction("arg_tuple.7#0")
  assert element.opcode == "get-tuple-element"
  assert element.operands == ["arg_tuple.7"] and element.attributes["index"] == "0"
  assert str(element.shape) == "s32[]"
  # Defined before its first user, once.
  users = [i for i in body.instructions if "arg_tuple.7#0" in i.operands]
  assert users and body.instructions.index(element) < body.instructions.index(users[0])
  assert sum(i.name == "arg_tuple.7#0" for i in body.instructions) == 1


def test_bad_compact_elements_are_one_line_errors(tmp_path):
  text = RING.read_text().replace("%arg_tuple.7#0)", "%arg_tuple.7#9)", 1)
  bad = tmp_path / "bad.hlo"
  bad.write_text(text)
  line = next(n for n, l in enumerate(text.splitlines(), 1) if "%arg_tuple.7#9" in l)
  try:
    reader.parse_hlo_file(bad)
  except HloParseError as e:
    message = str(e)
  else:
    raise AssertionError("a tuple element past the tuple's end was read")
  assert f"bad.hlo:{line}:" in message and "no tuple element 9" in message
  assert "\n" not in message
  result = run_nvshmem_opt(bad, "--topology=1x1x1")
  assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
  assert f"bad.hlo:{line}:" in result.stderr


def test_nvshmem_opt_decides_and_writes_the_compact_form_back(tmp_path):
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(
    RING, "--topology=1x1x1", "--backends=nccl,peer", "-o", out, "--report=-"
  )
  assert result.returncode == 0, result.stderr
  decisions = {d["instruction"]: d for d in json.loads(result.stdout)["decisions"]}
  assert "ppermute.4.2" in decisions
  assert "conditional's branch" in json.dumps(decisions["ppermute.4.2"])
  text = out.read_text()
  # The rewritten permute keeps its operand as the input wrote it; no name the
  # driver made for the wheel's parser reaches the output.
  assert re.search(r"collective-permute-start\(%ppermute\.1#0\)", text), text
  assert "__cgte_" not in text
  # Every other line is the input's.
  changed = set(text.splitlines()) ^ set(RING.read_text().splitlines())
  assert all("ppermute.4.2" in l or "collective-permute-start =" in l for l in changed), changed


def test_a_name_that_holds_the_drivers_infix_is_written_as_it_was(tmp_path):
  # The driver's names for compact elements must never be confused with the module's.
  text = (FIXTURES / "ring_1x1x8.before_async.hlo").read_text()
  [permute] = [l for l in text.splitlines() if " collective-permute(" in l]
  operand = re.search(r"collective-permute\(%([\w.\-]+)\)", permute).group(1)
  renamed = text.replace(f"%{operand}", f"%{operand}__cgte_0")
  source, out = tmp_path / "in.hlo", tmp_path / "out.hlo"
  source.write_text(renamed)
  result = run_nvshmem_opt(source, "--topology=1x1x8", "-o", out)
  assert result.returncode == 0, result.stderr
  assert f"collective-permute-start(%{operand}__cgte_0)" in out.read_text()
  assert "#0" not in out.read_text()
