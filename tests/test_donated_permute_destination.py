"""Why the patched emitter checks where a NVSHMEM permute writes.

A put must land in the NVSHMEM heap, where XLA allocates buffers of the collective
memory space; an entry parameter's buffer is the caller's. In a deviceless GPU compile
(jax 0.10.2's XLA, two H200), a ring in a fori_loop whose carry is donated writes the
permute's result into parameter 0's allocation; without the donation, into one XLA
allocates. CheckNvshmemDestination (the first patch) keeps the first on NCCL.

A put lands at the sender's own offset in the heap, and each process allocates from
its own pool: a heap buffer that is the program's output (the ring returns its carry)
lives as long as each process's caller keeps it, after which offsets can differ.
The patched memory-space assignment keeps live-out buffers off the heap.
"""

import json
import re
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.hlo import buffer_assignment

from conftest import compile_two_h200

pytestmark = pytest.mark.long


REPO = Path(__file__).resolve().parents[1]
# A table where NVSHMEM wins on NVLink at every size.
FAST_NVSHMEM = REPO / "tests" / "fixtures" / "fast_nvshmem.cost"

_RING_LOOP = r"""
def body(i, c):
  k, acc = c
  return jax.lax.ppermute(k, "cp", [(0, 1), (1, 0)]), acc + jnp.sin(k)
def ring(k, acc):
  k, acc = jax.lax.fori_loop(0, 3, body, (k, acc))
  # "temp": the carries stay inside the program, which returns a few elements.
  return (acc[:8], acc[:8]) if sys.argv[2] == "temp" else (k, acc)
f = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=(P("cp"), P("cp")),
                          out_specs=(P("cp"), P("cp"))),
            donate_argnums=(0, 1) if sys.argv[2] == "donate" else ())
a = jax.ShapeDtypeStruct((2 * 1024 * 1024,), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp")))
f.lower(a, a).compile()
"""


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
  """{mode: (module after optimizations, its buffer assignment)} for "donate", "keep"
  and "temp"."""
  out = {}
  for mode in ("donate", "keep", "temp"):
    dump = compile_two_h200(_RING_LOOP, tmp_path_factory.mktemp(mode), mode)
    [module] = dump.glob("*jit_ring*after_optimizations.txt")
    out[mode] = (module, Path(buffer_assignment.sibling_path(module)))
  return out


def _permute_result_allocation(assignment):
  """The header line of the allocation holding collective-permute-start{1}."""
  header = None
  for line in assignment.read_text().splitlines():
    if line.startswith("allocation "):
      header = line
    elif re.search(r"collective-permute-start(\.\d+)?\{1\}", line):
      return header
  return pytest.fail(f"no collective-permute-start{{1}} in {assignment.name}")


def test_a_donated_ring_carry_is_the_permute_destination(dumps):
  assert ", parameter 0," in _permute_result_allocation(dumps["donate"][1])
  assert "parameter" not in _permute_result_allocation(dumps["keep"][1])


def _as_nvshmem(tmp_path, dumps, mode, edit=None):
  """The compiled module with its permute on NVSHMEM, beside its buffer assignment
  (`edit` applied to the latter's text)."""
  module, assignment = dumps[mode]
  text = module.read_text()
  assert text.count('"backend":"DEFAULT"') == 1
  path = tmp_path / f"{mode}.txt"
  path.write_text(text.replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"'))
  placed = assignment.read_text()
  Path(buffer_assignment.sibling_path(path)).write_text(edit(placed) if edit else placed)
  return path


def _nvshmem_runtime(capsys, path):
  # The copy has no XLA config beside it: the map is given.
  rc = cli.main(
    [
      "verify",
      str(path),
      "--topology=1x1x2:map=0,1",
      f"--cost-table={FAST_NVSHMEM}",
      "--format=json",
    ]
  )
  out, _ = capsys.readouterr()
  by_name = {c["name"]: c for c in json.loads(out)["checks"]}
  return rc, by_name["nvshmem-runtime"]["results"]


def test_verify_fails_nvshmem_into_a_donated_carry(capsys, tmp_path, dumps):
  rc, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "donate"))
  assert rc == 1 and r["status"] == "fail"
  assert "destination {1} (allocation 0) is parameter 0's buffer" in r["message"]
  # explain marks it, with the same reason.
  assert (
    cli.main(
      ["explain", str(tmp_path / "donate.txt"), "--topology=1x1x2", f"--cost-table={FAST_NVSHMEM}"]
    )
    == 0
  )
  unsafe = [l for l in capsys.readouterr().out.splitlines() if l.strip().startswith("UNSAFE ")]
  assert len(unsafe) == 1 and "parameter 0's buffer" in unsafe[0]


def _colored(header):
  """An edit that puts the allocation of `header` in memory space 1, as the pinned XLA
  colors every buffer an NVSHMEM permute reads or writes when NVSHMEM is on."""
  assert ", color" not in header
  return lambda text: text.replace(
    header, re.sub(r"^(allocation \d+: size \d+)", r"\1, color 1", header)
  )


def _operand_allocation(module, assignment):
  """The header line of the allocation holding the permute-start's operand."""
  operand = re.search(r"collective-permute-start\(%?([\w.\-]+)\)", module.read_text())[1]
  header = None
  for line in assignment.read_text().splitlines():
    if line.startswith("allocation "):
      header = line
    elif re.match(rf" value: <\d+ {re.escape(operand)}(\{{\}})? @", line):
      return header
  return pytest.fail(f"no value of %{operand} in {assignment.name}")


def test_verify_wants_the_destination_in_collective_memory(capsys, tmp_path, dumps):
  # XLA compiled the permute as NVSHMEM (its operand in the collective memory) but
  # left the destination in memory space 0, as the series' coloring leaves the
  # program's output: the emitter runs it on NCCL.
  header = _permute_result_allocation(dumps["keep"][1])
  operand = _operand_allocation(*dumps["keep"])
  assert operand != header and "maybe-live-out" in header
  _, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "keep", _colored(operand)))
  assert r["status"] == "fail" and "is in memory space 0" in r["message"], r
  # A temporary destination colored, as XLA's coloring of an NVSHMEM permute leaves it.
  header = _permute_result_allocation(dumps["temp"][1])
  assert "maybe-live-out" not in header and ", parameter" not in header
  _, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "temp", _colored(header)))
  assert r["status"] == "pass", r
  assert "not NVSHMEM" not in r["message"]


def test_a_plan_xla_has_not_compiled_is_not_judged_by_another_plans_memory_spaces(
  capsys, tmp_path, dumps
):
  # The plan (NVSHMEM) written onto a module XLA compiled on NCCL: its buffer
  # assignment is of that compile, where no buffer of the permute is in the collective
  # memory. XLA colors the buffers by the plan it compiles, so the memory space 0 there
  # is not where the NVSHMEM plan's destination goes: the check passes, and says why.
  _, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "temp"))
  assert r["status"] == "pass", r
  assert "is of a compile where this permute was not NVSHMEM" in r["message"]
  # What holds under any plan is still judged from it: a destination that is an entry
  # parameter, or the program's output, which the series' coloring leaves off the heap.
  rc, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "donate"))
  assert rc == 1 and "is parameter 0's buffer" in r["message"], r
  rc, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "keep"))
  assert rc == 1 and r["status"] == "fail" and "lives out of the program" in r["message"], r


def test_verify_fails_a_heap_buffer_that_outlives_the_run(capsys, tmp_path, dumps):
  # The ring returns its last carry: the permute writes a buffer that is the program's
  # output, which each process frees when its own caller drops it.
  header = _permute_result_allocation(dumps["keep"][1])
  assert header.endswith(", maybe-live-out:")
  rc, [r] = _nvshmem_runtime(capsys, _as_nvshmem(tmp_path, dumps, "keep", _colored(header)))
  assert rc == 1 and r["status"] == "fail"
  number = re.match(r"allocation (\d+):", header)[1]
  assert f"allocation {number} of the collective memory (1) may be live out" in r["message"]


def test_a_malformed_buffer_assignment_is_named_by_line(capsys, tmp_path, dumps):
  path = _as_nvshmem(tmp_path, dumps, "temp", lambda t: t.replace(" value: <", " value: <x", 1))
  rc = cli.main(["verify", str(path), "--topology=1x1x2"])
  _, err = capsys.readouterr()
  assert rc == 2
  assert f"{buffer_assignment.sibling_path(path)}:3: expected ' value:" in err
