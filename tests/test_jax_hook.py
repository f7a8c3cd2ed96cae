"""The JAX hook: the transformation on real modules, and registration in a real compile."""

import json
import os
import subprocess
import sys

import pytest

from hlo_tools import jax_hook
from hlo_tools.hook import decide, flags as hook_flags, text_edit
from hlo_tools.hook.processes import with_process_layout

from conftest import FAST_PEER_TABLE, H200_TARGET, run_jax, run_live_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def _config(line):
  if "backend_config=" not in line:
    return {}
  at = line.index("backend_config=") + len("backend_config=")
  return json.loads(line[at : text_edit._match_brace(line, at)])  # pylint: disable=protected-access


def _permute_lines(text):
  return [l for l in text.split("\n") if text_edit._PERMUTE_RE.search(l)]  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def core():
  sel = decide.import_selection()
  return sel, sel.load_cost_table()


@pytest.mark.parametrize(
  "name,topology",
  [
    ("ring_1x1x8.after_optimizations.hlo", "1x1x8"),
    ("ring_1x2x4.after_optimizations.hlo", "1x2x4"),
    ("ring_1x1x8.before_async.hlo", "1x1x8"),
  ],
)
def test_transform_sets_mode_and_keeps_the_rest(core, name, topology):
  sel, table = core
  with open(os.path.join(FIXTURES, name)) as f:
    text = f.read()
  new, records = text_edit.transform_text(
    text, sel, sel.parse_topology(topology), table, ("nccl", "peer")
  )
  assert records, "no permute found"
  old_lines, new_lines = text.split("\n"), (new or text).split("\n")
  assert len(old_lines) == len(new_lines)
  changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
  # Only permute lines change, and within them only the mode.
  for a, b in changed:
    assert text_edit._PERMUTE_RE.search(a)  # pylint: disable=protected-access
    ca, cb = _config(a), _config(b)
    mode = cb.get("collective_backend_config", {}).pop("collectives_mode", None)
    ca.get("collective_backend_config", {}).pop("collectives_mode", None)
    assert mode in (None, "COLLECTIVES_PEER_MEMORY"), mode  # None: NCCL
    assert {k: v for k, v in ca.items() if v} == {k: v for k, v in cb.items() if v}
    # Before the config, only the mode attribute of the patched XLA is new.
    value = "peer" if mode else "private"
    assert f'_xla_collectives_mode="{value}"' in b
    a = text_edit.set_line_attribute(a, value)
    if "backend_config=" not in b:  # NCCL on a line without a config
      assert a == b
      continue
    head = a[: a.index("backend_config=")] if "backend_config=" in a else a.rstrip() + ", "
    assert head == b[: b.index("backend_config=")]
  for r in records:
    assert r["backend"] in ("nccl", "peer")
    assert r["bytes"] > 0 and r["pairs"]
  if topology == "1x2x4":  # the ring crosses hosts: no peer memory there
    assert {r["backend"] for r in records} == {"nccl"}
  want = sum(r["backend"] == "peer" for r in records)
  assert (
    sum(
      text_edit.permute_modes(new or text).get(k, 0)
      for k in text_edit.permute_modes(new or text)
      if k.endswith("PEER_MEMORY")
    )
    == want
  )


def test_mode_round_trip_on_real_lines():
  """jax 0.10.2 and 0.11.2 lines: set a mode, then NCCL removes it, nothing else moves."""
  paths = [
    os.path.join(FIXTURES, "ring_1x1x8.after_optimizations.hlo"),
    os.path.join(FIXTURES, "jax0112", "h200_jax0112_ppermute_loop.after_optimizations.hlo"),
  ]
  for path in paths:
    with open(path) as f:
      lines = [l for l in _permute_lines(f.read()) if "collectives_mode" in l]
    assert lines, f"{path} lost its collectives_mode"
    for line in lines:
      peer = text_edit.set_line_mode(line, "COLLECTIVES_PEER_MEMORY")
      assert text_edit.line_mode(peer) == "COLLECTIVES_PEER_MEMORY"
      out = text_edit.set_line_mode(peer, None)
      assert text_edit.line_mode(out) is None
      cfg_in, cfg_out = _config(line), _config(out)
      cfg_in["collective_backend_config"].pop("collectives_mode")
      assert cfg_in == cfg_out


def test_line_without_backend_config_gets_one():
  line = "  %cp = f32[4]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}"
  assert text_edit.set_line_mode(line, None) == line
  out = text_edit.set_line_mode(line, "COLLECTIVES_PEER_MEMORY")
  assert text_edit.line_mode(out) == "COLLECTIVES_PEER_MEMORY"


def test_install_refuses_backends_without_nccl_or_unknown_to_this_xla():
  with pytest.raises(jax_hook.HookError, match="backends"):
    jax_hook.install("1x1x2", backends=("peer",))
  with pytest.raises(jax_hook.HookError, match="backends"):
    jax_hook.install("1x1x2", backends=("nccl", "nvshmem"))


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


def test_process_layout_comes_from_jax_local_devices():
  # One process per GPU (8 processes of 1 device): peer would run as NCCL.
  assert with_process_layout("1x1x8", 1, 8) == "1x1x8:gpus_per_process=1"
  # One process drives every GPU (JAX's default on one host): unchanged.
  assert with_process_layout("1x1x8", 8, 8) == "1x1x8"
  # A spec that says it already wins.
  assert with_process_layout("1x2x4:gpus_per_process=4", 1, 8) == "1x2x4:gpus_per_process=4"
  from hlo_tools import selection

  t = selection.parse_topology(with_process_layout("1x2x4", 4, 8))
  assert t.gpus_per_process == 4

  def parses(spec):
    try:
      selection.parse_topology(spec)
    except selection.SelectionError:
      return False
    return True

  # Each device's own process where jax says it, device i not in process i: the
  # map, not a count, reaches the core.
  reordered = [1, 1, 1, 1, 0, 0, 0, 0]
  spec = with_process_layout("1x2x4", 4, 8, reordered, parses)
  assert spec == "1x2x4:processes=1,1,1,1,0,0,0,0"
  assert list(selection.parse_topology(spec).device_to_process) == reordered
  # A map that does not fit the spec's devices: the count instead.
  assert with_process_layout("1x1x8", 2, 4, [0, 0, 1, 1], parses) == "1x1x8:gpus_per_process=2"


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


def test_probe_of_a_cpu_xla_finds_no_per_op_mode():
  code = (
    "import jax, json; from hlo_tools.hook import flags; "
    "print(json.dumps(flags.probe(jax.devices('cpu')[0])))"
  )
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
  )
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got["per_op"] is False and got["platform"] == "cpu"


def test_series_transform_keeps_the_users_mark(core):
  """On the series' XLA the hook decides per op; a permute the user marked keeps the
  mode of its mark, as the series' assigner keeps it."""
  sel, table = core
  with open(os.path.join(FIXTURES, "marked_ring_1x1x8.before_async.hlo")) as f:
    text = f.read()
  new, records = text_edit.transform_text(
    text, sel, sel.parse_topology("1x1x8"), table, ("nccl", "peer")
  )
  assert records and all(r["backend"] == "nccl" for r in records)
  assert all('_xla_collectives_mode="private"' in r["reason"] for r in records)
  for line in _permute_lines(new or text):
    if "backend_config=" in line:
      assert text_edit.line_mode(line) is None


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


@pytest.mark.parametrize(
  "value,want",
  [
    ("", None),
    ("--xla_gpu_collective_permute_mode=peer", _PEER),
    # The last one wins, as each sets the flag in turn.
    ("--xla_gpu_collective_permute_mode=peer --xla_gpu_collective_permute_mode=private", _PRIVATE),
    ('  --xla_gpu_collective_permute_mode="PEER"', _PEER),
    ("--xla_gpu_collective_permute_mode='Symmetric'", "COLLECTIVES_SYMMETRIC_MEMORY"),
    # XLA stops reading at the first word that is not a flag.
    ("--xla_dump_to=/tmp/x stray --xla_gpu_collective_permute_mode=peer", None),
    ("--xla_gpu_collective_permute_mode=peer -- --xla_gpu_collective_permute_mode=private", _PEER),
    ("--xla_gpu_collective_permute_mode_x=peer", None),
  ],
)
def test_xla_flags_read_as_xla_reads_them(value, want):
  assert hook_flags.xla_flags_mode({"XLA_FLAGS": value})[0] == want


def test_xla_flags_from_a_file_and_a_bad_word(tmp_path):
  flags = tmp_path / "flags"
  flags.write_text(
    "--xla_gpu_collective_permute_mode=private\n--xla_gpu_collective_permute_mode=peer\n"
  )
  mode, where = hook_flags.xla_flags_mode({"XLA_FLAGS": str(flags)})
  assert mode == _PEER and str(flags) in where
  with pytest.raises(jax_hook.HookError, match="warp"):
    hook_flags.xla_flags_mode({"XLA_FLAGS": "--xla_gpu_collective_permute_mode=warp"})


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


def test_permute_decided_with_the_modules_partition_count(core):
  """A two-device program under a hook installed for two hosts of four: its header
  says 2 partitions, so its ring is on one host and peer memory may run it; taken as
  the topology's 8 devices, the program would span both hosts, where the device
  order is unknown."""
  sel, table = core
  with open(os.path.join(FIXTURES, "shift_1x1x2.before_async.hlo")) as f:
    text = f.read()
  assert text_edit.header_counts(text) == (2, 1)
  fast = sel.parse_cost_table(
    "links { backend: PEER link_class: NVLINK latency_us: 1 "
    "bandwidth_gbps: 900 per_buffer_us: 1 }\n"
  )
  _, records = text_edit.transform_text(
    text, sel, sel.parse_topology("1x2x4", "nccl,peer"), fast, ("nccl", "peer")
  )
  assert records and {r["backend"] for r in records} == {"peer"}, records


_JIT_STATIC = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
# The series' per-op path (the CPU's compiler carries each permute's mode through).
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        cost_table=sys.argv[1], per_op=True)
mesh = ring_attention.make_mesh(jax.devices()[:2])

def f(x, n, scale=1.0, *, flip=False):
  def body(x):
    for _ in range(n):
      x = lax.ppermute(x, "cp", [(0, 1), (1, 0)])
    return -x * scale if flip else x * scale
  return jax.shard_map(body, mesh=mesh, in_specs=P("cp"), out_specs=P("cp"))(x)

x = jnp.arange(1 << 16, dtype=jnp.float32)
want = lambda n, scale=1.0, flip=False: jax.jit(f, static_argnums=1, static_argnames=("n", "flip"))(
    x, n, scale, flip=flip)
g = hook.jit(f, static_argnums=1, static_argnames=("n", "flip"))
got = {"positional": bool(jnp.array_equal(g(x, 1), want(1))),
       "other_static": bool(jnp.array_equal(g(x, 2), want(2))),
       "keyword_static": bool(jnp.array_equal(g(x, n=1), want(1))),
       "keyword_dynamic": bool(jnp.array_equal(g(x, 1, scale=3.0), want(1, 3.0))),
       "keyword_only_static": bool(jnp.array_equal(g(x, 1, flip=True), want(1, flip=True))),
       "again": bool(jnp.array_equal(g(x, 1, scale=5.0), want(1, 5.0)))}
# compile()'s records (plain jax.jit's compiles above add their own, of another kind)
compiled = [p for p in hook.programs if "mode_requested" in p]
got["compiles"] = len(compiled)
got["permutes"] = [sum(p["compiled_modes"].values()) for p in compiled]
try:
  hook.jit(f, abstracted_axes=None)
except jax_hook.HookError as e:
  got["refused"] = str(e)
print(json.dumps(got))
hook.uninstall()
"""


def test_jit_takes_static_and_keyword_arguments_as_jax_jit_does(tmp_path):
  """hook.jit(f, static_argnums=1): each static value compiles its own program
  (one permute per step of the loop it unrolls), keyword arguments static or not
  reach it as jax.jit passes them, and a value seen before compiles nothing."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_live_cpu(_JIT_STATIC, table)
  for case in (
    "positional",
    "other_static",
    "keyword_static",
    "keyword_dynamic",
    "keyword_only_static",
    "again",
  ):
    assert got[case], case
  # n=1, n=2, n=1 by keyword (jax.jit's own signature differs), a dynamic keyword,
  # flip=True; scale=5.0 after scale=3.0 reuses its program.
  assert got["compiles"] == 5 and got["permutes"][:2] == [1, 2]
  assert "abstracted_axes" in got["refused"] and "\n" not in got["refused"]


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
if with_hook:  # the series' path on the CPU compiler, as in the test above
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
    PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
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


def test_series_transform_keeps_an_invalid_mark_as_an_error(core):
  """A mark that is not one mode ("peer,symmetric", as an unpatched combiner joins
  two): the series' assigner fails that compile, so the hook writes nothing over it
  and says why, naming the permute and the value."""
  sel, table = core
  with open(os.path.join(FIXTURES, "marked_ring_1x1x8.before_async.hlo")) as f:
    text = f.read().replace(
      '_xla_collectives_mode="private"', '_xla_collectives_mode="peer,symmetric"'
    )
  with pytest.raises(jax_hook.HookError) as err:
    text_edit.transform_text(text, sel, sel.parse_topology("1x1x8"), table, ("nccl", "peer"))
  assert '_xla_collectives_mode="peer,symmetric", which names no collectives mode' in str(err.value)
  assert "\n" not in str(err.value)


def test_xla_flags_set_late_still_run_as_recorded(tmp_path):
  """XLA_FLAGS set after XLA read its flags: the hook reads peer there, the caller's
  mode, and passes it in the compile's options, so what the record says is what XLA
  compiled (checked), with a warning that the core models NCCL faster."""
  got = _scenario(tmp_path, "late_flags", table="slow")
  record = got["record"]
  assert got["after"] == [_PEER] and record["applied"] == _PEER
  assert record["mode_from"] == "XLA_FLAGS" and record["compiled_modes"] == {_PEER: 1}
  assert any("kept, though the core models nccl faster" in w for w in got["warnings"])


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
