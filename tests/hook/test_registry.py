"""hlo_tools/hook/registry.py: the installed hooks by name and their settings in jax's
cache key. No executable compiled under another hook (or none)
is served to a compile, in process or from a persistent cache on disk.

jax keeps executables in process (pxla._cached_compilation, keyed by the lowered
module, its devices and the compile options; jax.jit's own caches) and on disk
(keyed by the compile options and cache_key.custom_hook): no key holds the
registered transformations. Each sequence runs on a live CPU client of two devices,
with the series' per-op path (the CPU's compiler carries each permute's written mode
into the executable), so the mode in an executable says which hook compiled it."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hlo_tools.hook import decide, registry

from conftest import FAST_PEER_TABLE, ROOT, run_live_cpu

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


_CACHED = r"""
import json, os, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.hook import text_edit
from hlo_tools.programs import ring_attention
cache, table, with_hook = sys.argv[1], sys.argv[2], sys.argv[3] == "hook"
jax.config.update("jax_compilation_cache_dir", cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
if with_hook:  # the series' path on the CPU compiler, which carries the mode through
  hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                          cost_table=table, per_op=True)
mesh = ring_attention.make_mesh(jax.devices()[:2])
f = jax.jit(jax.shard_map(lambda x: lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 2,
                          mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
text = f.lower(jnp.arange(1 << 16, dtype=jnp.float32)).compile().as_text()
print(json.dumps({"modes": text_edit.permute_modes(text),
                  "ran": [c["module"] for c in hook.calls] if with_hook else None,
                  "entries": sorted(e for e in os.listdir(cache) if e.startswith("jit__lambda"))}))
"""


@pytest.mark.long
def test_persistent_cache_serves_no_executable_compiled_without_the_hook(tmp_path):
  """jax's persistent cache keys hold no registered transformation: the hook puts
  its settings into the key, so a program cached without it compiles again with it
  (the transformation runs and the permute gets its mode), and a second process
  with the same hook is served the hook's own executable."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  cache = tmp_path / "cache"
  cache.mkdir()
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS="--xla_force_host_platform_device_count=2",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )

  def run(kind):
    proc = subprocess.run(
      [sys.executable, "-c", _CACHED, str(cache), str(table), kind],
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

  plain = run("plain")
  assert len(plain["entries"]) == 1 and plain["modes"] == {"collective-permute:NCCL": 1}
  hooked = run("hook")
  assert "jit__lambda" in hooked["ran"], hooked
  assert hooked["modes"] == {"collective-permute:COLLECTIVES_PEER_MEMORY": 1}
  assert len(hooked["entries"]) == 2
  again = run("hook")  # served from the cache: no transformation, the hook's mode
  assert "jit__lambda" not in again["ran"] and again["entries"] == hooked["entries"]
  assert again["modes"] == hooked["modes"]


def _hook(name, topology, backends, per_op, digest):
  return SimpleNamespace(
    name=name, topology=topology, backends=backends, xla={"per_op": per_op}, table_digest=digest
  )


def test_cache_key_settings_name_every_installed_hooks_settings(monkeypatch):
  monkeypatch.setattr(registry, "INSTALLED", {})
  assert registry.cache_key_settings() == ""
  monkeypatch.setattr(
    registry,
    "INSTALLED",
    {
      "zeta": _hook("zeta", "1x1x8", ("nccl",), None, "d2"),
      "alpha": _hook("alpha", "1x1x2", ("nccl", "peer"), True, "d1"),
    },
  )
  # By name, so that the key does not depend on the order of install.
  assert registry.cache_key_settings() == (
    "nvshmem_opt_hook alpha topology=1x1x2 backends=nccl,peer per_op=True table=d1;"
    "nvshmem_opt_hook zeta topology=1x1x8 backends=nccl per_op=None table=d2"
  )


def test_jaxs_cache_key_holds_the_settings_while_a_hook_is_installed(monkeypatch):
  from jax._src import cache_key  # pylint: disable=import-outside-toplevel

  def jax_own():
    return "jax;"

  monkeypatch.setattr(cache_key, "custom_hook", jax_own)
  monkeypatch.setattr(registry, "_CACHE_HOOK", {})
  hook = _hook("h", "1x1x2", ("nccl", "peer"), None, "d")
  monkeypatch.setattr(registry, "INSTALLED", {"h": hook})
  registry.set_cache_key_settings()
  settings = "nvshmem_opt_hook h topology=1x1x2 backends=nccl,peer per_op=None table=d"
  assert cache_key.custom_hook() == "jax;" + settings
  # Read at each key: a probe that settles per_op later changes the key.
  hook.xla["per_op"] = False
  assert cache_key.custom_hook() == "jax;" + settings.replace("None", "False")
  # None installed: jax's own hook back.
  monkeypatch.setattr(registry, "INSTALLED", {})
  registry.set_cache_key_settings()
  assert cache_key.custom_hook is jax_own
  assert registry._CACHE_HOOK == {}  # pylint: disable=protected-access


def test_table_fingerprint_changes_with_the_table():
  sel = decide.import_selection()
  default = registry.table_fingerprint(sel, sel.load_cost_table())
  assert len(default) == 32 and int(default, 16) >= 0
  assert registry.table_fingerprint(sel, sel.load_cost_table()) == default
  fast = registry.table_fingerprint(sel, sel.parse_cost_table(FAST_PEER_TABLE))
  assert fast != default
  # The backend set is part of what the core decides with.
  narrowed = sel.with_backends(sel.load_cost_table(), ("nccl",))
  assert registry.table_fingerprint(sel, narrowed) != default
