"""hlo_tools/jax_hook.py, the public entry: the hook end to end, registered in real
compiles on a live CPU client and deviceless on jax 0.10.2's GPU compiler."""

import json
import os
import subprocess
import sys

import pytest

from hlo_tools.hook import flags as hook_flags

from conftest import FAST_PEER_TABLE, H200_TARGET, run_jax, run_live_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_CHILD = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.hook import text_edit
from hlo_tools.programs import ring_attention
# The series' per-op path, on the CPU compiler, which carries the mode through (no
# XLA here has the series; the probe would find the CPU's XLA reads no mark).
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        report=sys.argv[1], cost_table=sys.argv[2], per_op=True)
try:  # a second install must not stack a second transformation
  jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",))
  twice = None
except jax_hook.HookError as e:
  twice = str(e)
mesh = ring_attention.make_mesh(jax.devices()[:2])
f = jax.jit(jax.shard_map(lambda x: lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 2,
                          mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
x = jnp.arange(1 << 20, dtype=jnp.float32)
compiled = f.lower(x).compile()
y = compiled(x)
ok = bool(jnp.array_equal(y, jnp.roll(x.reshape(2, -1), 1, axis=0).reshape(-1) * 2))
after = text_edit.permute_modes(compiled.as_text())
removed = hook.uninstall()
again = jax.jit(lambda x: x + 1).lower(x).compile()
reinstalled = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                               per_op=True)
print(json.dumps({"calls": hook.calls, "decisions": hook.decisions, "after": after,
                  "ok": ok, "removed": removed, "calls_after": len(hook.calls),
                  "twice": twice, "reinstalled": reinstalled.uninstall()}))
"""


@pytest.mark.long
def test_registered_hook_runs_in_a_real_compile(tmp_path):
  report = tmp_path / "hook.json"
  # A table in which peer memory clearly wins, so the mode must reach the module.
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_live_cpu(_CHILD, report, table)
  assert [c.get("error") for c in got["calls"]] == [None] * len(got["calls"])
  (decision,) = got["decisions"]
  assert decision["pairs"] == [[0, 1], [1, 0]] and decision["bytes"] == 2 << 20
  assert decision["backend"] == "peer", decision
  assert got["after"] == {"collective-permute:COLLECTIVES_PEER_MEMORY": 1}
  assert got["ok"], "the program's result changed"
  assert got["removed"] and got["calls_after"] == len(got["calls"])
  # install() twice: refused with one line, one transformation per compile.
  assert got["twice"] and "already installed" in got["twice"] and "\n" not in got["twice"]
  assert [c["module"] for c in got["calls"]].count("jit__lambda") == 1
  assert got["reinstalled"]
  assert json.loads(report.read_text())["decisions"] == got["decisions"]


# Deviceless: the project's ring attention (forward and backward) on two H200s,
# compiled on the CPU by jax 0.10.2's own XLA, through hook.compile.
_DEVICELESS = r"""
import glob, json, os, sys
import jax, numpy as np
from jax.experimental import topologies
from hlo_tools import jax_hook
from hlo_tools.hook import text_edit
from hlo_tools.hlo import module_config
from hlo_tools.programs import ring_attention as ra
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(sys.argv[1]).read())
mesh = ra.make_mesh(topo.devices)
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), cost_table=sys.argv[2])
xla_at_install = dict(hook.xla)
out = {}
for name, cond in (("ring", False), ("cond", True)):
  if cond:  # the ring's direction picked by a conditional on the step
    from jax import lax
    from jax.sharding import PartitionSpec as P
    def body(x):
      def step(i, x):
        return lax.cond(i % 2 == 0, lambda y: lax.ppermute(y, "cp", [(0, 1), (1, 0)]),
                        lambda y: lax.ppermute(y * 2, "cp", [(0, 1), (1, 0)]), x)
      return lax.fori_loop(0, 4, step, x)
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
    args = [jax.ShapeDtypeStruct((2, 8 << 20), np.float32,
                                 sharding=jax.sharding.NamedSharding(mesh, P("cp")))]
  else:
    config = ra.RingConfig(seq_len=16384, backward=True, kernel="blocked", dtype="f32")
    f = jax.jit(ra.example_function(config, mesh))
    args = ra.example_args(config, mesh)
  try:
    compiled = hook.compile(f.lower(*args))
  except jax_hook.HookError as e:
    out[name] = {"error": str(e)}
    continue
  out[name] = {"record": hook.programs[-1], "after": text_edit.permute_modes(compiled.as_text())}
configs = {}
for path in glob.glob(os.path.join(sys.argv[3], "*.config.pbtxt")):
  c = module_config.read_config(path)
  configs[os.path.basename(path)] = c.collective_permute_mode
print(json.dumps({"install": xla_at_install, "xla": hook.xla, "calls": hook.calls,
                  "out": out, "configs": configs}, default=str))
"""


def _run_deviceless(tmp, flags=""):
  table = tmp / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  dump = tmp / "xla_dump"
  return run_jax(
    _DEVICELESS,
    H200_TARGET,
    table,
    dump,
    deviceless=True,
    xla_flags=f"--xla_dump_to={dump} {flags}",
  )


@pytest.fixture(scope="module")
def deviceless(tmp_path_factory):
  return _run_deviceless(tmp_path_factory.mktemp("hook_deviceless"))


def test_stock_xla_gets_one_mode_for_the_whole_ring(deviceless):
  # No live device to probe at install; the first compile probed jax 0.10.2's XLA.
  assert deviceless["install"]["per_op"] is None
  assert deviceless["xla"]["per_op"] is False and "stock" in deviceless["xla"]["evidence"]
  # A deviceless compile runs no registered transformation (the module docstring).
  assert deviceless["calls"] == []
  ring = deviceless["out"]["ring"]
  record = ring["record"]
  assert record["mode_requested"] == "COLLECTIVES_PRIVATE_MEMORY"
  assert record["mode_requested_from"] == "XLA's default"
  assert record["program"]["backend"] == "peer" and record["program"]["permutes"] >= 2
  assert record["applied"] == "COLLECTIVES_PEER_MEMORY"
  # Decided on the lowered program: one compile, with the mode.
  assert record["compiles"] == 1 and "recompiled" not in record
  assert record["compiled_modes"] == {"COLLECTIVES_PEER_MEMORY": record["program"]["permutes"]}
  # Every permute of the program carries the flag's mode, written by XLA's own
  # assigner; none carries another.
  modes = {k.split(":")[1] for k in ring["after"]}
  assert modes == {"COLLECTIVES_PEER_MEMORY"}, ring["after"]
  assert sum(ring["after"].values()) == record["program"]["permutes"]
  # The compile that produced it ran with the flag, as XLA's config dump says.
  assert "COLLECTIVES_PEER_MEMORY" in deviceless["configs"].values()


def test_stock_xla_keeps_nccl_where_a_permute_sits_under_a_branch(deviceless):
  cond = deviceless["out"]["cond"]
  record = cond["record"]
  assert record["applied"] == "COLLECTIVES_PRIVATE_MEMORY"
  assert "conditional's branch" in record["program"]["modes"]["peer"]["refused"]
  assert {k.split(":")[1] for k in cond["after"]} == {"NCCL"}


@pytest.mark.long
def test_xla_flags_mode_is_the_callers_and_refused_where_unsafe(tmp_path):
  """XLA_FLAGS asks peer for every program: the ring, which can run it, keeps it;
  the conditional ring, which cannot, is a HookError naming the permute, the rule
  and the way out (as the same mode in jax.jit's compiler_options is)."""
  got = _run_deviceless(tmp_path, "--xla_gpu_collective_permute_mode=peer")
  ring, cond = got["out"]["ring"], got["out"]["cond"]
  assert ring["record"]["mode_requested"] == "COLLECTIVES_PEER_MEMORY"
  assert ring["record"]["mode_from"] == "XLA_FLAGS"
  assert {k.split(":")[1] for k in ring["after"]} == {"COLLECTIVES_PEER_MEMORY"}
  assert "record" not in cond
  error = cond["error"]
  assert error.startswith("<jit_body>: XLA_FLAGS sets xla_gpu_collective_permute_mode=")
  assert "%ppermute" in error and "conditional's branch" in error
  assert "trust_caller_mode=True" in error and "\n" not in error


_JIT = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
# The CPU's XLA reads no mark: the probe finds a stock XLA, so one mode per program.
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        cost_table=sys.argv[1])
mesh = ring_attention.make_mesh(jax.devices()[:2])
g = hook.jit(jax.shard_map(lambda x: lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 2,
                           mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
x = jnp.arange(1 << 20, dtype=jnp.float32)
try:
  g(x)
  ok, error = True, None
except jax_hook.HookError as e:
  ok, error = False, str(e)
programs = list(hook.programs)
# Plain jax.jit: the transformation inside that compile only records the mode to set.
jax.jit(jax.shard_map(lambda x: lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 3, mesh=mesh,
                      in_specs=P("cp"), out_specs=P("cp"))).lower(x).compile()
print(json.dumps({"xla": hook.xla, "programs": programs, "ok": ok, "error": error,
                  "plain": hook.programs[len(programs):], "calls": hook.calls}, default=str))
hook.uninstall()
"""


def test_a_mode_xla_did_not_compile_is_an_error(tmp_path):
  """Every compile is checked: hook.jit on a CPU client, where the core chooses peer
  and the CPU's compiler writes no mode, is a HookError naming both modes, not a
  record that says peer ran."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_live_cpu(_JIT, table)
  assert got["xla"]["per_op"] is False
  # One record, from compile(): the transformation inside jax's compiles adds none for
  # that program, none for modules without permutes, and writes nothing.
  # The core chose peer; the CPU's compiler writes no mode, so what ran is not what
  # a record would say: a HookError with both modes, and no record.
  assert got["programs"] == [] and not got["ok"]
  assert got["error"].startswith("<jit__lambda>: the record applies COLLECTIVES_PEER_MEMORY")
  assert "as COLLECTIVES_PRIVATE_MEMORY" in got["error"] and "cpu compiler" in got["error"]
  assert all("permutes_out" not in c and c.get("error") is None for c in got["calls"])
  [plain] = got["plain"]
  assert plain["applied"] is None and plain["program"]["backend"] == "peer"
  assert "XLA_FLAGS=--xla_gpu_collective_permute_mode=peer" in plain["why"]


# ---------------------------------------------------------------------------
# The mode that runs is the mode recorded (deviceless, jax 0.10.2's own XLA).

_SCENARIO = r"""
import json, os, sys
import jax, numpy as np
from jax import lax
from jax.experimental import topologies
from jax.experimental.xla_metadata import set_xla_metadata
from jax.sharding import NamedSharding, PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention as ra
scenario, target, table, spec = sys.argv[1:5]
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(target).read())
mesh = ra.make_mesh(topo.devices)
arg = jax.ShapeDtypeStruct((2, 8 << 20), np.float32, sharding=NamedSharding(mesh, P("cp")))
ring = [(0, 1), (1, 0)]

def shard(body, **jit):
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")), **jit)

def marked(value):
  def body(x):
    with set_xla_metadata(_xla_collectives_mode=value):
      return lax.ppermute(x, "cp", ring)
  return body

def cond_ring(x):  # the ring's direction picked by a conditional on the step
  def step(i, x):
    return lax.cond(i % 2 == 0, lambda y: lax.ppermute(y, "cp", ring),
                    lambda y: lax.ppermute(y * 2, "cp", ring), x)
  return lax.fori_loop(0, 4, step, x)

out = {}
hook = jax_hook.install(spec, backends=("nccl", "peer"), cost_table=table,
                        per_op=True if scenario == "per_op" else None,
                        trust_caller_mode=scenario.endswith("_trusted"))
f = {"jit_options_cond": lambda: shard(cond_ring, compiler_options={
         "xla_gpu_collective_permute_mode": "COLLECTIVES_PEER_MEMORY"}),
     "jit_options_cond_trusted": lambda: shard(cond_ring, compiler_options={
         "xla_gpu_collective_permute_mode": "COLLECTIVES_PEER_MEMORY"}),
     "cond_trusted": lambda: shard(cond_ring),
     "per_op": lambda: shard(lambda x: lax.ppermute(x, "cp", ring) * 2),
     "plain": lambda: shard(lambda x: lax.ppermute(x, "cp", ring) * 2),
     "mark_peer": lambda: shard(marked("peer")),
     "marks_differ": lambda: shard(lambda x: marked("peer")(x) + marked("private")(x * 3)),
     "mark_unknown": lambda: shard(marked("warp_drive")),
     # XLA read its flags at its first compile: a later XLA_FLAGS is not what runs.
     "late_flags": lambda: (jax.jit(lambda x: x + 1).lower(arg).compile(),
                            os.environ.__setitem__(
                                "XLA_FLAGS", "--xla_gpu_collective_permute_mode=peer"),
                            shard(lambda x: lax.ppermute(x, "cp", ring) * 2))[-1]}[scenario]()
import warnings
try:
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = hook.compile(f.lower(arg))
  out["warnings"] = [str(w.message) for w in caught if w.category is jax_hook.HookWarning]
  out["record"] = hook.programs[-1]
  # What XLA compiled: each permute's collectives_mode, read here without the hook.
  def mode(line):
    if "backend_config=" not in line:
      return None
    config = json.JSONDecoder().raw_decode(line[line.index("backend_config=") + 15:])[0]
    mode = config.get("collective_backend_config", {}).get("collectives_mode")
    return None if mode == "COLLECTIVES_MODE_INVALID" else mode  # NCCL
  out["after"] = sorted((mode(line) for line in compiled.as_text().split("\n")
                         if " collective-permute-start(" in line), key=str)
except jax_hook.HookError as e:
  out["error"] = str(e)
out["calls"] = hook.calls
print(json.dumps(out, default=str))
"""


def _scenario(tmp, name, table="fast", xla_flags="", spec="1x1x2"):
  path = tmp / f"{table}.txt"
  path.write_text(
    {
      "fast": "links { backend: PEER link_class: NVLINK latency_us: 1 "
      "bandwidth_gbps: 900 per_buffer_us: 1 }\n",
      "slow": "links { backend: PEER link_class: NVLINK latency_us: 5000 "
      "bandwidth_gbps: 1 per_buffer_us: 1000 }\n",
    }[table]
  )
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
    XLA_FLAGS=xla_flags,
    PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
  )
  proc = subprocess.run(
    [
      sys.executable,
      "-c",
      _SCENARIO,
      name,
      os.path.join(ROOT, "hlo_tools", "data", "h200_gpu_target_config.pbtxt"),
      str(path),
      spec,
    ],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


_PEER = "COLLECTIVES_PEER_MEMORY"
_PRIVATE = "COLLECTIVES_PRIVATE_MEMORY"


def test_jit_level_compiler_options_refused_under_a_branch(tmp_path):
  """jax.jit(..., compiler_options=PEER) on a ring under lax.cond inside
  lax.fori_loop, installed for nccl and peer: peer memory under a conditional's
  branch is a rule of the core (the run goes wrong), so hook.compile raises,
  naming the permute, the rule and the way out; nothing is compiled or recorded."""
  got = _scenario(tmp_path, "jit_options_cond")
  assert "record" not in got
  error = got["error"]
  assert error.startswith(
    "<jit_cond_ring>: jax.jit's compiler_options sets "
    "xla_gpu_collective_permute_mode=COLLECTIVES_PEER_MEMORY, which the core refuses"
  ), error
  assert "%ppermute" in error and "under a conditional's branch" in error
  assert "trust_caller_mode=True" in error and "\n" not in error


def test_jit_level_compiler_options_kept_when_trusted(tmp_path):
  """The same with trust_caller_mode=True: PEER runs, as asked, with a warning that
  names the rule; the record says where the mode came from and that XLA compiled it."""
  got = _scenario(tmp_path, "jit_options_cond_trusted")
  record = got["record"]
  assert got["after"] == [_PEER, _PEER]  # what XLA compiled
  assert record["mode_from"] == "jax.jit's compiler_options" and record["applied"] == _PEER
  assert "under trust_caller_mode" in record["why"] and "conditional's branch" in record["why"]
  assert record["compiled_modes"] == {_PEER: 2} and record["compiles"] == 1
  [warning] = got["warnings"]
  assert "conditional's branch" in warning and "kept, as trust_caller_mode=True asks" in warning


def test_xla_flags_mode_kept_when_trusted(tmp_path):
  """The conditional ring with peer in XLA_FLAGS and trust_caller_mode=True: PEER
  runs, as with jax.jit's compiler_options, with a warning that names the rule."""
  flags = "--xla_gpu_collective_permute_mode=peer"
  got = _scenario(tmp_path, "cond_trusted", xla_flags=flags)
  record = got["record"]
  assert got["after"] == [_PEER, _PEER]
  assert record["mode_from"] == "XLA_FLAGS" and record["applied"] == _PEER
  assert record["compiled_modes"] == {_PEER: 2} and record["compiles"] == 1
  [warning] = got["warnings"]
  assert warning.startswith("<jit_cond_ring>: XLA_FLAGS sets")
  assert "conditional's branch" in warning and "kept, as trust_caller_mode=True asks" in warning


def test_series_xla_falls_back_to_one_mode_in_a_deviceless_compile(tmp_path):
  """per_op (the series' XLA) in a deviceless compile: no registered transformation
  runs there, so the hook applies the program's one mode and says so."""
  got = _scenario(tmp_path, "per_op")
  record = got["record"]
  assert got["calls"] == []  # the transformation never ran
  assert record["per_op_fallback"] is True and "deviceless" in record["why"]
  assert record["applied"] == _PEER and got["after"] == [_PEER]


def test_stock_xla_keeps_the_users_mark_for_the_program(tmp_path):
  """A ring the user marked peer, where NCCL is modeled faster: the program runs
  peer, the mark's mode, and the record says it kept the mark over the model."""
  got = _scenario(tmp_path, "mark_peer", table="slow")
  record = got["record"]
  assert record["program"]["mode"] == _PRIVATE  # the model alone would pick NCCL
  assert record["applied"] == _PEER and got["after"] == [_PEER]
  assert record["why"].startswith("kept the user's mark for the whole program")
  assert record["marks_not_run"] == [] and record["marks"][0]["value"] == "peer"
  # Kept against the model's advice: said in a warning too.
  [warning] = got["warnings"]
  assert "kept, though the core models nccl faster" in warning


def test_stock_xla_says_which_marks_do_not_run(tmp_path):
  """Marks that ask for two modes: a stock XLA runs one, so the record refuses the
  marks' mode and names the permute that does not run as marked."""
  got = _scenario(tmp_path, "marks_differ")
  record = got["record"]
  assert record["applied"] == _PRIVATE and got["after"] == [None, None]
  assert record["why"].startswith("refused the marks' mode")
  peer = next(m["permute"] for m in record["marks"] if m["value"] == "peer")
  assert record["marks_not_run"] == [peer]
  assert f"not as marked: %{peer} (peer) run {_PRIVATE}" in record["why"]


def test_a_mark_no_mode_names_is_an_error(tmp_path):
  got = _scenario(tmp_path, "mark_unknown")
  assert "record" not in got
  assert got["error"].startswith("module jit_body: %ppermute")
  assert 'is marked _xla_collectives_mode="warp_drive", which names no' in got["error"]
  assert "\n" not in got["error"]


@pytest.mark.long
@pytest.mark.parametrize(
  "flags,table",
  [
    ("--xla_gpu_collective_permute_mode=peer --xla_gpu_collective_permute_mode=private", "slow"),
    ('--xla_gpu_collective_permute_mode="PEER"', "fast"),
  ],
)
def test_xla_flags_reading_agrees_with_xla(tmp_path, flags, table):
  """XLA's own config dump of the compile is the oracle: the mode the hook reads
  from XLA_FLAGS is the mode XLA compiled with, and the hook's first-compile mode
  comes from XLA_FLAGS, not from correcting it after the compile. (The table makes
  the hook keep that mode, so that one compile writes the dump.)"""
  from hlo_tools.hlo import module_config

  dump = tmp_path / "dump"
  value = f"--xla_dump_to={dump} {flags}"
  got = _scenario(tmp_path, "plain", table=table, xla_flags=value)
  [config] = dump.glob("module_*.jit__lambda.config.pbtxt")
  xla = module_config.read_config(str(config)).collective_permute_mode or _PRIVATE
  assert (hook_flags.xla_flags_mode({"XLA_FLAGS": value})[0] or _PRIVATE) == xla
  record = got["record"]
  assert record["mode_requested"] == xla == record["applied"]
  assert record["mode_requested_from"] == "XLA_FLAGS" and record["compiles"] == 1


def test_one_gpu_per_process_says_why_peer_cannot_run(tmp_path):
  """Each of the two processes drives one GPU: under any device order the ring's
  edges leave their process, which is the reason the record gives; no advice meant
  for a command line (a --topology map) reaches a reason inside the hook."""
  got = _scenario(tmp_path, "plain", spec="1x1x2:gpus_per_process=1")
  record = got["record"]
  assert record["applied"] == _PRIVATE and got["after"] == [None]
  refused = record["program"]["modes"]["peer"]["refused"]
  assert (
    "1 of the program's 2 devices are outside its first device's process "
    "(1 GPU per process)" in refused
  ), refused
  assert "--topology" not in json.dumps(record) and "map=" not in json.dumps(record)


def test_xla_flags_set_late_still_run_as_recorded(tmp_path):
  """XLA_FLAGS set after XLA read its flags: the hook reads peer there, the caller's
  mode, and passes it in the compile's options, so what the record says is what XLA
  compiled (checked), with a warning that the core models NCCL faster."""
  got = _scenario(tmp_path, "late_flags", table="slow")
  record = got["record"]
  assert got["after"] == [_PEER] and record["applied"] == _PEER
  assert record["mode_from"] == "XLA_FLAGS" and record["compiled_modes"] == {_PEER: 1}
  assert any("kept, though the core models nccl faster" in w for w in got["warnings"])
