"""The per-permute collectives mode attribute, _xla_collectives_mode, from jax to the tools.

jax's set_xla_metadata around lax.ppermute puts the attribute on the permute, and it
survives a deviceless GPU compile (jax 0.10.2 and its CUDA plugin; jax 0.11.0 writes
it the same way); hlo-tools explain shows the value, the mode the patched assigner
gives and why; the rule refuses what the patched assigner refuses.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools.hlo import reader
from hlo_tools.model import collectives, modes

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt"

# Two permutes of one shape and pairs, the first marked "peer".
_MARKED_RING = r"""
import sys, jax, jax.numpy as jnp
from jax import lax
from jax.experimental import topologies
from jax.experimental.xla_metadata import set_xla_metadata
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
try:
  from jax import shard_map
except ImportError:
  from jax.experimental.shard_map import shard_map
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(sys.argv[1]).read())
mesh = Mesh(topo.devices, ("cp",))
def ring(x, y):
  perm = [(0, 1), (1, 0)]
  with set_xla_metadata(_xla_collectives_mode="peer"):
    a = lax.ppermute(x, "cp", perm)
  return a, lax.ppermute(y, "cp", perm)
f = jax.jit(shard_map(ring, mesh=mesh, in_specs=(P("cp"), P("cp")),
                      out_specs=(P("cp"), P("cp"))))
spec = jax.ShapeDtypeStruct((8192, 256), jnp.float32, sharding=NamedSharding(mesh, P("cp")))
sys.stdout.write(f.lower(spec, spec).compile().as_text())
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  text = subprocess.run(
    [sys.executable, "-c", _MARKED_RING, str(TARGET)],
    capture_output=True,
    text=True,
    env=env,
    check=True,
    timeout=300,
  ).stdout
  path = tmp_path_factory.mktemp("marked") / "marked_ring.hlo"
  path.write_text(text)
  return path


def _permute_instructions(module):
  for p in collectives.collective_permutes(module):
    comp = module.computation(p.computation)
    yield p, next(i for i in comp.instructions if i.name == p.start)


def test_set_xla_metadata_reaches_the_compiled_permute(compiled):
  module = reader.parse_hlo_text(compiled.read_text(), "marked_ring.hlo")
  found = list(_permute_instructions(module))
  # The XLA of jax 0.10.2 combines the marked permute with the unmarked one and
  # gives the combined permute the mark: the patch series keeps them apart.
  assert len(found) == 1 and found[0][0].buffers == 2
  assert found[0][1].frontend_attributes[modes.ATTRIBUTE] == "peer"
  assert modes.requested(found[0][1])["mode"] == "COLLECTIVES_PEER_MEMORY"


def test_explain_shows_attribute_mode_and_why(compiled):
  r = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "explain", str(compiled), "--topology", "1x1x2"],
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == 0, r.stderr
  rows = [l for l in r.stdout.splitlines() if l.strip().startswith("attribute")]
  assert rows == [
    '  attribute     _xla_collectives_mode="peer": COLLECTIVES_PEER_MEMORY; '
    "taken over the flag's mode"
  ]


@pytest.mark.parametrize(
  "value,operand,mode,why",
  [
    ("Peer", "f32[8]{0}", "COLLECTIVES_PEER_MEMORY", "taken over"),
    ("private", "f32[8]{0}", "COLLECTIVES_PRIVATE_MEMORY", "taken over"),
    ("symmetric", "f32[8]{0}", "COLLECTIVES_SYMMETRIC_MEMORY", "taken over"),
    ("symmetric", "f32[8]{0:S(5)}", "COLLECTIVES_PRIVATE_MEMORY", "memory space S(5)"),
    ("peer,symmetric", "f32[8]{0}", None, "fails the compile"),
    ("nvshmem", "f32[8]{0}", None, "fails the compile"),
  ],
)
def test_rule_is_the_patched_assigners(value, operand, mode, why):
  text = (
    f"HloModule m\n\nENTRY main {{\n  p0 = {operand} parameter(0)\n"
    f"  ROOT cp = f32[8]{{0}} collective-permute(p0), channel_id=1, "
    f"source_target_pairs={{{{0,1}},{{1,0}}}}, "
    f'frontend_attributes={{_xla_collectives_mode="{value}"}}\n}}\n'
  )
  module = reader.parse_hlo_text(text, "m.hlo")  # kept: instructions refer to it weakly
  [(_, instr)] = list(_permute_instructions(module))
  got = modes.requested(instr)
  assert got["attribute"] == value and got["mode"] == mode and why in got["why"]


def test_no_attribute_asks_for_nothing():
  text = (
    "HloModule m\n\nENTRY main {\n  p0 = f32[8]{0} parameter(0)\n"
    "  ROOT cp = f32[8]{0} collective-permute(p0), channel_id=1, "
    "source_target_pairs={{0,1},{1,0}}\n}\n"
  )
  module = reader.parse_hlo_text(text, "m.hlo")
  [(_, instr)] = list(_permute_instructions(module))
  assert modes.requested(instr) is None


def test_jax_hook_keeps_the_users_mark_and_writes_its_own(compiled):
  """The hook's choice yields to a marked permute, as the patched assigner's does, and
  every permute it decides carries the attribute of its choice."""
  from hlo_tools.hook import decide, text_edit  # pylint: disable=import-outside-toplevel

  sel = decide.import_selection()
  text = compiled.read_text()
  new, [record] = text_edit.transform_text(
    text, sel, sel.parse_topology("1x1x2"), sel.load_cost_table(), ("nccl", "peer")
  )
  assert record["backend"] == "peer" and "_xla_collectives_mode=" in record["reason"]
  assert text_edit.permute_modes(new) == {"collective-permute-start:COLLECTIVES_PEER_MEMORY": 1}
  unmarked = text.replace('_xla_collectives_mode="peer"', '_other="x"')
  new, [record] = text_edit.transform_text(
    unmarked, sel, sel.parse_topology("1x1x2"), sel.load_cost_table(), ("nccl", "peer")
  )
  value = sel.BACKEND_INFO[record["backend"]]["mode_attribute"]
  assert f'_xla_collectives_mode="{value}"' in (new or "")


def test_nvshmem_opt_writes_the_attribute_of_its_choice(compiled, tmp_path):
  """nvshmem-opt --backends writes a peer or symmetric choice as the attribute too, in
  the language the patched XLA and the JAX hook use."""
  from hlo_tools.model import driver  # pylint: disable=import-outside-toplevel

  table = tmp_path / "peer_wins.txtpb"
  table.write_text(
    "links { backend: PEER link_class: NVLINK latency_us: 1 "
    "bandwidth_gbps: 900 per_buffer_us: 1 }\n"
  )
  unmarked = tmp_path / "unmarked.hlo"
  unmarked.write_text(compiled.read_text().replace('_xla_collectives_mode="peer"', '_other="x"'))
  out = tmp_path / "out.hlo"
  proc = subprocess.run(
    [
      str(REPO / "build" / "nvshmem-opt"),
      str(unmarked),
      "--topology=1x1x2",
      "--backends=nccl,peer",
      "--per-op-modes",
      f"--cost-table={table}",
      "-o",
      str(out),
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr
  [start] = [l for l in out.read_text().splitlines() if " collective-permute-start(" in l]
  assert '_xla_collectives_mode="peer"' in start and "COLLECTIVES_PEER_MEMORY" in start
  assert '_other="x"' in start
