"""hlo_tools/hook/program.py: a stock XLA's one mode per program (the policy over the
caller's modes and marks, settle), the check of what XLA compiled, and the compiles
compile_program makes."""

import os
from types import SimpleNamespace

import pytest

from hlo_tools import jax_hook
from hlo_tools.hook import decide, program, text_edit

from conftest import FAST_PEER_TABLE, FIXTURES, H200_TARGET, run_jax

_PEER = "COLLECTIVES_PEER_MEMORY"
_PRIVATE = "COLLECTIVES_PRIVATE_MEMORY"
_SYMMETRIC = "COLLECTIVES_SYMMETRIC_MEMORY"


@pytest.fixture(scope="module")
def core():
  sel = decide.import_selection()
  return sel, sel.load_cost_table()


_COUNT = r"""
import json, sys, warnings
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax._src import compiler
from jax._src.lib.mlir import ir
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention as ra
# Every XLA compile jax makes goes through compiler.backend_compile_and_load (jax
# 0.10.2's compiler.py, compile_or_get_cached): counted here by module name.
compiled_names = []
backend_compile = compiler.backend_compile_and_load
def counting(backend, module, *args, **kwargs):
  compiled_names.append(ir.StringAttr(module.operation.attributes["sym_name"]).value)
  return backend_compile(backend, module, *args, **kwargs)
compiler.backend_compile_and_load = counting
target, table = sys.argv[1], sys.argv[2]
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(target).read())
mesh = ra.make_mesh(topo.devices)
arg = jax.ShapeDtypeStruct((2, 8 << 20), np.float32, sharding=NamedSharding(mesh, P("cp")))
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), cost_table=table)
shard = lambda body: jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
def ring(x):
  return lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 2
def scale(x):
  return x * 3
def roll(x):  # the partitioner's permute: none in the lowered program
  return jnp.roll(x, 1, axis=0)
hook.compile(jax.jit(lambda x: x + 1).lower(arg))  # the probe's compile, once a process
out = {}
for name, f in (("ring", shard(ring)), ("scale", shard(scale)), ("roll", jax.jit(roll))):
  n = len(compiled_names)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hook.compile(f.lower(arg))
  record = hook.programs[-1]
  out[name] = {"xla": compiled_names[n:], "compiles": record["compiles"],
               "applied": record["applied"],
               "warnings": [str(w.message) for w in caught if w.category is jax_hook.HookWarning]}
print(json.dumps(out))
"""


@pytest.mark.parametrize("xla_flags", ["", "--xla_gpu_collective_permute_mode=peer"])
def test_xla_compiles_counted(tmp_path, xla_flags):
  """The compiles XLA makes, counted at jax's one entry to the backend's compile:
  one for a ring the hook moves to peer memory, one for a program with no permute
  (with or without a caller's mode, which changes nothing there and so warns of
  nothing), and two, as the record says, only where the optimized module holds a
  permute the lowered program did not (the partitioner's, from jnp.roll) and the
  mode the caller's settings run is not the one chosen."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_jax(_COUNT, H200_TARGET, table, deviceless=True, xla_flags=xla_flags)
  assert got["ring"]["xla"] == ["jit_ring"] and got["ring"]["compiles"] == 1
  assert got["ring"]["applied"] == _PEER and got["ring"]["warnings"] == []
  assert got["scale"]["xla"] == ["jit_scale"] and got["scale"]["compiles"] == 1
  assert got["scale"]["warnings"] == []
  roll = got["roll"]
  assert roll["applied"] == _PEER
  twice = not xla_flags  # XLA_FLAGS=peer already runs the chosen mode
  assert roll["xla"] == ["jit_roll"] * (2 if twice else 1) and roll["compiles"] == len(roll["xla"])
  assert len(roll["warnings"]) == (1 if twice else 0)


def test_per_op_modes_written_and_compiled_must_agree(core):
  """The series' path: what the transformation wrote on a module must be what XLA
  compiled. A real module with the hook's peer modes written against the same module
  as compiled without them (NCCL) is a HookError naming both; a failed call too."""
  from hlo_tools.hook import program

  sel, table = core
  with open(os.path.join(FIXTURES, "ring_1x1x8.after_optimizations.hlo")) as f:
    text = f.read()
  fast = sel.parse_cost_table(
    "links { backend: PEER link_class: NVLINK latency_us: 1 "
    "bandwidth_gbps: 900 per_buffer_us: 1 }\n"
  )
  topology = sel.parse_topology("1x1x8:gpus_per_process=8", "nccl,peer")
  peer, _ = text_edit.transform_text(text, sel, topology, fast, ("nccl", "peer"))
  assert peer is not None and _PEER in peer
  call = {"modes_out": text_edit.permute_modes(peer)}
  program.check_written_modes(call, peer, "<ring>")  # agree: no error
  with pytest.raises(jax_hook.HookError) as err:
    program.check_written_modes(call, text, "<ring>")
  assert str(err.value).startswith("<ring>: the per-op transformation wrote {")
  assert _PEER in str(err.value) and "\n" not in str(err.value)
  with pytest.raises(jax_hook.HookError, match="failed in this compile: boom"):
    program.check_written_modes({"error": "boom", "modes_out": call["modes_out"]}, peer, "<ring>")


def _choice(permutes=2, refused=None):
  """A program choice as model.program_mode.choose gives one: NCCL modeled best,
  peer priced (refused by a rule where `refused` says why), symmetric not priced."""
  return {
    "permutes": permutes,
    "mode": _PRIVATE,
    "backend": "nccl",
    "why": "nccl modeled faster",
    "modes": {"nccl": {"refused": None}, "peer": {"refused": refused}},
  }


def _no_recheck(backend):
  raise AssertionError(f"no recheck expected, asked for {backend}")


def _mark(permute, value, mode):
  return {"permute": permute, "value": value, "mode": mode}


def test_settle_without_a_callers_mode_takes_the_cores():
  got = program.settle(_choice(), _PRIVATE, "XLA's default", [], False, "<m>", _no_recheck)
  assert got == (_PRIVATE, program.CORE, "nccl modeled faster", [], [])


def test_settle_keeps_a_callers_mode_with_a_warning_where_the_core_prefers_another():
  mode, source, why, notes, not_run = program.settle(
    _choice(), _PEER, "XLA_FLAGS", [], False, "<m>", _no_recheck
  )
  assert (mode, source, not_run) == (_PEER, "XLA_FLAGS", [])
  assert why == (
    "kept the caller's XLA_FLAGS sets xla_gpu_collective_permute_mode=COLLECTIVES_PEER_MEMORY; "
    "the modeled best is COLLECTIVES_PRIVATE_MEMORY (nccl modeled faster)"
  )
  assert notes == [
    "<m>: XLA_FLAGS sets xla_gpu_collective_permute_mode=COLLECTIVES_PEER_MEMORY: kept, "
    "though the core models nccl faster for this program (nccl modeled faster)"
  ]


def test_settle_refuses_a_callers_mode_the_core_refuses_unless_trusted():
  choice = _choice(refused="under a conditional's branch")
  with pytest.raises(jax_hook.HookError) as err:
    program.settle(choice, _PEER, "compiler_options", [], False, "<m>", _no_recheck)
  assert str(err.value).startswith(
    "<m>: compiler_options sets xla_gpu_collective_permute_mode=COLLECTIVES_PEER_MEMORY, "
    "which the core refuses for this program: under a conditional's branch"
  )
  assert "trust_caller_mode=True" in str(err.value)
  mode, _, why, [note], _ = program.settle(
    choice, _PEER, "compiler_options", [], True, "<m>", _no_recheck
  )
  assert mode == _PEER and "under trust_caller_mode" in why
  assert note.endswith("kept, as trust_caller_mode=True asks")


def test_settle_asks_the_core_again_for_a_mode_it_did_not_price():
  asked = []

  def recheck(backend):
    asked.append(backend)
    return {"modes": {backend: {"refused": None}}}

  mode, _, why, _, _ = program.settle(
    _choice(), _SYMMETRIC, "compiler_options", [], False, "<m>", recheck
  )
  assert asked == ["symmetric"] and mode == _SYMMETRIC and why.startswith("kept the caller's")


def test_settle_runs_the_marks_mode_for_the_whole_program():
  marks = [_mark("cp.1", "peer", _PEER), _mark("cp.2", "Peer", _PEER)]
  mode, source, why, notes, not_run = program.settle(
    _choice(), _PRIVATE, "XLA's default", marks, False, "<m>", _no_recheck
  )
  assert (mode, source, not_run) == (_PEER, program.MARKS, [])
  assert why.startswith(
    "kept the user's mark for the whole program: the user's marks ask for "
    "COLLECTIVES_PEER_MEMORY (%cp.1 peer, %cp.2 Peer); the modeled best was "
    "COLLECTIVES_PRIVATE_MEMORY"
  )
  assert len(notes) == 1 and "kept, though the core models nccl faster" in notes[0]


def test_settle_runs_the_cores_mode_where_marks_disagree():
  marks = [_mark("cp.1", "peer", _PEER), _mark("cp.2", "private", _PRIVATE)]
  mode, source, why, notes, not_run = program.settle(
    _choice(), _PRIVATE, "XLA's default", marks, False, "<m>", _no_recheck
  )
  assert (mode, source, not_run) == (_PRIVATE, program.CORE, ["cp.1"])
  assert why.startswith("refused the marks' mode: the user's marks ask for ")
  assert why.endswith("; not as marked: %cp.1 (peer) run COLLECTIVES_PRIVATE_MEMORY")
  assert notes == [
    "<m>: %cp.1 (peer) marked for another mode run COLLECTIVES_PRIVATE_MEMORY: a stock "
    "XLA runs one mode for the whole program"
  ]


def test_settle_without_permutes_keeps_the_callers_mode_silently():
  got = program.settle(_choice(permutes=0), _PEER, "XLA_FLAGS", [], False, "<m>", _no_recheck)
  assert got[:2] == (_PEER, "XLA_FLAGS") and got[3] == []
  assert got[2].endswith("the program has no collective-permute")


_COMPILED = """HloModule jit_f, num_partitions=2

ENTRY main {
  p0 = f32[8]{0} parameter(0)
  a = f32[8]{0} collective-permute(p0), channel_id=1, source_target_pairs={{0,1},{1,0}}, backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_PEER_MEMORY"}}
  ROOT b = f32[8]{0} collective-permute(a), channel_id=2, source_target_pairs={{0,1},{1,0}}
}
"""


def test_permute_mode_list_reads_no_mode_as_xlas_default():
  assert program.permute_mode_list(_COMPILED) == [("a", _PEER), ("b", _PRIVATE)]


def test_check_program_mode_fails_a_permute_that_does_not_run_the_recorded_mode():
  with pytest.raises(jax_hook.HookError) as err:
    program.check_program_mode(_COMPILED, _PEER, "<jit_f>", "cuda")
  assert str(err.value) == (
    "<jit_f>: the record applies COLLECTIVES_PEER_MEMORY to the program's permutes, "
    "and XLA compiled %b as COLLECTIVES_PRIVATE_MEMORY"
  )
  with pytest.raises(jax_hook.HookError, match="the cpu compiler writes no collectives mode"):
    program.check_program_mode(_COMPILED, _PRIVATE, "<jit_f>", "cpu")
  # On the series' XLA a marked permute runs its own mark's mode.
  assert program.check_program_mode(_COMPILED, _PRIVATE, "<jit_f>", "cuda", {"a": _PEER}) == {
    _PEER: 1,
    _PRIVATE: 1,
  }


def test_program_devices_are_jaxs_or_a_hook_error():
  devices = [SimpleNamespace(id=1), SimpleNamespace(id=0)]
  lowered = SimpleNamespace(_lowering=SimpleNamespace(_device_list=devices))
  assert program.program_devices(lowered) == devices  # partition order, as jax assigned
  with pytest.raises(jax_hook.HookError, match="this one names none"):
    program.program_devices(SimpleNamespace())


def test_program_choice_on_a_real_module(core):
  """The fixtures' two-GPU shift where peer memory is fast: peer for the program when
  one process drives both GPUs; NCCL, peer refused, with one GPU per process."""
  sel, _ = core
  text = (FIXTURES / "shift_1x1x2.before_async.hlo").read_text()
  fast = sel.parse_cost_table(FAST_PEER_TABLE)
  one = sel.parse_topology("1x1x2", "nccl,peer")
  choice = program.program_choice(text, one, fast, ("nccl", "peer"))
  assert choice["permutes"] == 1 and choice["mode"] == _PEER and choice["backend"] == "peer"
  assert choice["compiler_options"] == {"xla_gpu_collective_permute_mode": _PEER}
  two = sel.parse_topology("1x1x2:gpus_per_process=1", "nccl,peer")
  choice = program.program_choice(text, two, fast, ("nccl", "peer"))
  assert choice["mode"] == _PRIVATE
  assert "outside its first device's process" in choice["modes"]["peer"]["refused"]
