"""The JAX hook and jax's caches: no executable compiled under another hook (or none)
is served to a compile, in process or from a persistent cache on disk.

jax keeps executables in process (pxla._cached_compilation, keyed by the lowered
module, its devices and the compile options; jax.jit's own caches) and on disk
(keyed by the compile options and cache_key.custom_hook): no key holds the
registered transformations. Each sequence runs on a live CPU client of two devices,
with the series' per-op path (the CPU's compiler carries each permute's written mode
into the executable), so the mode in an executable says which hook compiled it."""

import os

import pytest

from conftest import FAST_PEER_TABLE, run_live_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SEQUENCES = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
table, cache = sys.argv[1], sys.argv[2]
mesh = ring_attention.make_mesh(jax.devices()[:2])
x = jnp.arange(1 << 16, dtype=jnp.float32)

def make():  # a new function each time: its lowering is jax's own cached module
  return jax.jit(jax.shard_map(lambda x: lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 2,
                               mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))

f = make()

def modes(compiled):
  return jax_hook.permute_modes(compiled.as_text())

def install(backends=("nccl", "peer"), name="nvshmem_opt_permute_modes"):
  return jax_hook.install("1x1x2", backends=backends, platforms=("cpu",), cost_table=table,
                          per_op=True, name=name)

out = {}
# 1. compiled before install (a warm-up), then given to hook.compile; a jitted call
# before install, called again after it.
lowered = f.lower(x)
warm = lowered.compile()
f(x)
hook = install()
compiled = hook.compile(lowered)
calls = len(hook.calls)
f(x)
out["before_install"] = {"warm": modes(warm), "hooked": modes(compiled),
                         "record": hook.programs[-1], "call_recompiled": len(hook.calls) > calls}
# 2. uninstall, then plain jax.jit, then another hook (NCCL only) on the same function.
hook.uninstall()
plain = f.lower(x).compile()
other = install(("nccl",))
compiled_b = other.compile(f.lower(x))
out["reinstall"] = {"plain": modes(plain), "other": modes(compiled_b),
                    "record": other.programs[-1]}
# 3. a second hook while one is installed.
try:
  install(name="another")
  out["two_hooks"] = None
except jax_hook.HookError as e:
  out["two_hooks"] = str(e)
other.uninstall()
# 4. a persistent cache on disk at the same time.
jax.config.update("jax_compilation_cache_dir", cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
g = make()
cold = g.lower(x).compile()  # written to disk without a hook
hook = install()
first = hook.compile(g.lower(x))  # not the disk's executable: the key holds the hook
first_record = hook.programs[-1]
hook.uninstall()
again_plain = g.lower(x).compile()  # the disk's no-hook executable, rightly
hook = install()
second = hook.compile(g.lower(x))  # the disk's hooked executable: no transformation runs
out["persistent"] = {"cold": modes(cold), "first": modes(first), "first_record": first_record,
                     "plain": modes(again_plain), "second": modes(second),
                     "second_record": hook.programs[-1]}
hook.uninstall()
print(json.dumps(out, default=str))
"""

_PEER = "COLLECTIVES_PEER_MEMORY"
_NCCL = {"collective-permute:NCCL": 1}
_PEER_ONE = {f"collective-permute:{_PEER}": 1}


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("hook_cache")
  table = tmp / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  cache = tmp / "cache"
  cache.mkdir()
  return run_live_cpu(_SEQUENCES, table, cache)


def test_compiled_before_install(sequences):
  got = sequences["before_install"]
  assert got["warm"] == _NCCL  # no hook then
  # hook.compile of the same lowering is a new compile that met the transformation,
  # and says so; a jitted function called before install compiles again after it.
  assert got["hooked"] == _PEER_ONE
  assert got["record"]["compiled_modes"] == {_PEER: 1}
  assert "decided each in this compile" in got["record"]["why"]
  assert got["call_recompiled"]


def test_uninstall_then_plain_then_another_hook(sequences):
  got = sequences["reinstall"]
  assert got["plain"] == _NCCL  # not the first hook's PEER executable
  assert got["other"] == _NCCL  # the NCCL-only hook's own decision
  assert got["record"]["compiled_modes"] == {"COLLECTIVES_PRIVATE_MEMORY": 1}


def test_a_second_hook_on_a_platform_is_refused(sequences):
  error = sequences["two_hooks"]
  assert error and "is installed on cpu" in error and "uninstall()" in error
  assert "\n" not in error


def test_persistent_cache_at_the_same_time(sequences):
  got = sequences["persistent"]
  assert got["cold"] == _NCCL
  assert got["first"] == _PEER_ONE
  assert "decided each in this compile" in got["first_record"]["why"]
  assert got["plain"] == _NCCL  # the disk's executable compiled without a hook
  # Served from disk with the hook's settings in the key: no transformation ran,
  # which the record says, and the modes are checked against the hook's decision.
  assert got["second"] == _PEER_ONE
  assert got["second_record"]["why"].startswith("no registered transformation ran")
  assert got["second_record"]["compiled_modes"] == {_PEER: 1}
