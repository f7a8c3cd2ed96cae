"""Permutes under a conditional's branch stay on NCCL.

The pinned NVSHMEM thunk puts to the sender's own destination address. Devices that
take different branches of a conditional run different permutes, whose buffers sit at
different addresses, so a put lands in another buffer; NCCL matches each side's own
buffers. The patched emitter refuses NVSHMEM there (CanRunNvshmemCollectivePermute),
the pass keeps NCCL there (NcclOnlyComputations), and the tools say so. On today's
XLA a peer or symmetric put lands in the peer's copy of the sender's own destination
just the same; the patched assigner makes such a permute private. The module is
a deviceless GPU compile (jax 0.10.2's XLA, two H200) of a cond on the device index
whose branches each rotate a block.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import cli

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt"
# A table where NVSHMEM wins on NVLink at every size.
FAST_NVSHMEM = REPO / "tests" / "fixtures" / "fast_nvshmem.cost"

_BRANCHES = r'''
import sys, jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(sys.argv[1]).read())
mesh = Mesh(np.array(topo.devices), ("cp",))
pairs = [(0, 1), (1, 0)]
def first(x):
  return jax.lax.ppermute(x, "cp", pairs) * 2.0
def second(x):
  y = jnp.exp(x)
  return jnp.sin(jax.lax.ppermute(y, "cp", pairs)) + y
def prog(x):
  return jax.lax.cond(jax.lax.axis_index("cp") == 0, first, second, x)[:8]
f = jax.jit(jax.shard_map(prog, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
a = jax.ShapeDtypeStruct((2 * 1024 * 1024,), jnp.float32, sharding=NamedSharding(mesh, P("cp")))
f.lower(a).compile()
'''


@pytest.fixture(scope="module")
def branches(tmp_path_factory):
  """The compiled module, its permutes still DEFAULT."""
  dump = tmp_path_factory.mktemp("branches")
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
             XLA_FLAGS=f"--xla_dump_to={dump}")
  subprocess.run([sys.executable, "-c", _BRANCHES, str(TARGET)], check=True,
                 capture_output=True, text=True, env=env, timeout=300)
  [module] = dump.glob("*jit_prog*after_optimizations.txt")
  text = module.read_text()
  assert text.count('"backend":"DEFAULT"') == 2 and "conditional(" in text
  return text


def test_explain_keeps_nccl_under_a_branch(capsys, tmp_path, branches):
  path = tmp_path / "branches.txt"
  path.write_text(branches)
  assert cli.main(["explain", str(path), "--topology=1x1x2",
                   f"--cost-table={FAST_NVSHMEM}"]) == 0
  out = capsys.readouterr().out
  choices = [l for l in out.splitlines() if l.strip().startswith("choice")]
  assert len(choices) == 2 and all("nccl (backend DEFAULT" in c for c in choices), out
  reasons = [l for l in out.splitlines() if l.strip().startswith("reason")]
  assert len(reasons) == 2
  assert all("under a conditional's branch, where the patched XLA keeps NCCL" in r
             for r in reasons)


def test_verify_fails_nvshmem_under_a_branch(capsys, tmp_path, branches):
  path = tmp_path / "branches.txt"
  path.write_text(branches.replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"'))
  rc = cli.main(["verify", str(path), "--topology=1x1x2", f"--cost-table={FAST_NVSHMEM}",
                 "--format=json"])
  by_name = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
  assert rc == 1
  results = by_name["nvshmem-runtime"]["results"]
  assert len(results) == 2 and all(r["status"] == "fail" for r in results)
  assert all("under a conditional's branch" in r["message"] for r in results)


def test_verify_fails_peer_memory_under_a_branch(capsys, tmp_path, branches):
  # Today's XLA: a peer (or symmetric) put lands in the peer's copy of the sender's
  # own destination; the patched assigner makes such a permute private.
  path = tmp_path / "branches.txt"
  path.write_text(branches.replace('"collectives_mode":"COLLECTIVES_MODE_INVALID"',
                                   '"collectives_mode":"COLLECTIVES_PEER_MEMORY"'))
  rc = cli.main(["verify", str(path), "--topology=1x1x2", "--backends=nccl,peer",
                 "--format=json"])
  by_name = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
  assert rc == 1
  results = by_name["peer-safety"]["results"]
  assert len(results) == 2 and all(r["status"] == "fail" for r in results)
  assert all("peer under a conditional's branch" in r["message"] for r in results)
