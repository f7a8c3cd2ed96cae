"""hlo_tools/hook/hook.py: the Hook and install(). A caller's wrong argument is a
HookError saying what was expected; a mark on a collective that is not a permute is
refused as the series' compile refuses it; each device's process is jax's, not the
topology string's."""

import pytest

from hlo_tools import jax_hook

from conftest import FAST_PEER_TABLE, H200_TARGET, run_jax

_PEER = "COLLECTIVES_PEER_MEMORY"
_PRIVATE = "COLLECTIVES_PRIVATE_MEMORY"

_SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.experimental import topologies
from jax.experimental.xla_metadata import set_xla_metadata
from jax.sharding import NamedSharding, PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention as ra
target, table = sys.argv[1], sys.argv[2]
config = open(target).read()
out = {"errors": {}}

def error(name, call):
  try:
    call()
    out["errors"][name] = None
  except Exception as e:
    out["errors"][name] = [type(e).__name__, str(e)]

error("topology_int", lambda: jax_hook.install(8, backends=("nccl", "peer")))
error("backends_str", lambda: jax_hook.install("1x1x2", backends="nccl,peer"))
error("backends_int", lambda: jax_hook.install("1x1x2", backends=("nccl", 3)))
error("topology_bad", lambda: jax_hook.install("1xZx2"))
error("cost_table_int", lambda: jax_hook.install("1x1x2", cost_table=5))
error("cost_table_missing", lambda: jax_hook.install("1x1x2", cost_table=table + ".missing"))
error("report_int", lambda: jax_hook.install("1x1x2", report=3))
error("platforms_int", lambda: jax_hook.install("1x1x2", platforms=7))
error("per_op_str", lambda: jax_hook.install("1x1x2", per_op="yes"))
error("name_empty", lambda: jax_hook.install("1x1x2", name=""))

topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2", target_config=config)
mesh = ra.make_mesh(topo.devices)
arg = jax.ShapeDtypeStruct((2, 4 << 20), np.float32, sharding=NamedSharding(mesh, P("cp")))
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), cost_table=table)
ring = jax.jit(jax.shard_map(lambda v: lax.ppermute(v, "cp", [(0, 1), (1, 0)]), mesh=mesh,
                             in_specs=P("cp"), out_specs=P("cp")))
error("compile_none", lambda: hook.compile(None))
error("compile_options_list", lambda: hook.compile(ring.lower(arg), [1]))
error("compile_mode_bad", lambda: hook.compile(
    ring.lower(arg), {"xla_gpu_collective_permute_mode": "WARP"}))
error("jit_int", lambda: hook.jit(5))
out["public_permute_modes"] = jax_hook.permute_modes(
    "  %cp = f32[4]{0} collective-permute(%p), source_target_pairs={{0,1}}")

# A mark around sharded code that XLA's partitioner turns into an all-reduce.
def marked_sum(x):
  with set_xla_metadata(_xla_collectives_mode="peer"):
    return jnp.sum(x, axis=0)
error("mark_on_all_reduce", lambda: hook.compile(jax.jit(marked_sum).lower(arg)))
# A mark around jnp.roll of a sharded array: the partitioner's permute.
def marked_roll(x):
  with set_xla_metadata(_xla_collectives_mode="peer"):
    return jnp.roll(x, 1, axis=0)
try:
  hook.compile(jax.jit(marked_roll).lower(arg))
  out["roll"] = hook.programs[-1]
except jax_hook.HookError as e:
  out["roll"] = {"error": str(e)}
hook.uninstall()
error("compile_after_uninstall", lambda: hook.compile(ring.lower(arg)))

# jax's devices in two processes (1x2x4: devices 4-7 have process_index 1) against
# a spec that says one host and one process.
topo8 = topologies.get_topology_desc(platform="cuda", topology="1x2x4", target_config=config)
mesh8 = ra.make_mesh(topo8.devices)
arg8 = jax.ShapeDtypeStruct((8, 1 << 20), np.float32, sharding=NamedSharding(mesh8, P("cp")))
ring8 = jax.jit(jax.shard_map(
    lambda v: lax.ppermute(v, "cp", [(i, (i + 1) % 8) for i in range(8)]), mesh=mesh8,
    in_specs=P("cp"), out_specs=P("cp")))
out["processes"] = [d.process_index for d in topo8.devices]
for spec in ("1x1x8", "1x2x4"):
  hook = jax_hook.install(spec, backends=("nccl", "peer"), cost_table=table)
  hook.compile(ring8.lower(arg8))
  out[spec] = hook.programs[-1]
  hook.uninstall()
print(json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def got(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("hook_api")
  table = tmp / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  return run_jax(_SCRIPT, H200_TARGET, table, deviceless=True)


@pytest.mark.parametrize(
  "case,expected",
  [
    ("topology_int", 'topology is a spec such as "1x1x8" or a Topology, not 8'),
    ("backends_str", "backends is a sequence of names such as"),
    ("backends_int", "backends holds names (str), not 3"),
    ("topology_bad", "1xZx2"),
    ("cost_table_int", "cost_table is None, a file's path or a CostTable, not 5"),
    ("cost_table_missing", ".missing"),
    ("report_int", "report is None or a file's path, not 3"),
    ("platforms_int", "platforms is a sequence of names such as"),
    ("per_op_str", "per_op is True, False or None (probe), not 'yes'"),
    ("name_empty", "name is a non-empty str"),
    ("compile_none", "hook.compile takes what jax.jit(f).lower(...) returns"),
    ("compile_options_list", "compiler_options is a dict of XLA options or None, not list"),
    ("compile_mode_bad", "is not a collectives mode"),
    ("jit_int", "hook.jit takes a function, not int"),
    ("compile_after_uninstall", "is uninstalled: install one again"),
  ],
)
def test_a_wrong_argument_is_a_hook_error(got, case, expected):
  kind, message = got["errors"][case]
  assert kind == "HookError", (kind, message)
  assert expected in message and "\n" not in message


def test_permute_modes_is_public(got):
  assert got["public_permute_modes"] == {"collective-permute:NCCL": 1}


def test_a_mark_on_an_all_reduce_is_refused_as_the_series_refuses_it(got):
  kind, message = got["errors"]["mark_on_all_reduce"]
  assert kind == "HookError"
  assert '(all-reduce-start) is marked _xla_collectives_mode="peer"' in message
  assert "only a collective-permute takes a mode" in message and "lax.ppermute" in message


def test_a_mark_around_jnp_roll_does_not_reach_its_permute(got):
  """The partitioner's permute of a sharded jnp.roll carries no mark: the program
  runs the core's choice (documented: only lax.ppermute carries a mark)."""
  record = got["roll"]
  assert "error" not in record, record
  assert record["marks"] == [] and record["mode_from"] == "the core's choice"
  assert record["program"]["permutes"] >= 1


def test_each_devices_process_is_jaxs(got):
  """A ring over 1x2x4's devices (two processes, jax says) under a hook installed
  for 1x1x8 (one host, one process): decided with jax's processes, so peer memory,
  which needs the ring in one process, is refused as under the 1x2x4 spec."""
  assert got["processes"] == [0, 0, 0, 0, 1, 1, 1, 1]
  one, two = got["1x1x8"], got["1x2x4"]
  assert "jax puts the program's devices in 2 processes" in one["process_layout"]
  assert one["topology"].endswith(":gpus_per_process=4")
  assert one["applied"] == two["applied"] == _PRIVATE
  assert "outside its first device's process" in one["program"]["modes"]["peer"]["refused"]
  assert "process_layout" not in two


def test_install_refuses_backends_without_nccl_or_unknown_to_this_xla():
  with pytest.raises(jax_hook.HookError, match="backends"):
    jax_hook.install("1x1x2", backends=("peer",))
  with pytest.raises(jax_hook.HookError, match="backends"):
    jax_hook.install("1x1x2", backends=("nccl", "nvshmem"))
