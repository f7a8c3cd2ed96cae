"""Permutes under a conditional's branch stay on NCCL.

The pinned NVSHMEM thunk puts to the sender's own destination address. Devices that
take different branches of a conditional run different permutes, whose buffers sit at
different addresses, so a put lands in another buffer; NCCL matches each side's own
buffers. The patched emitter refuses NVSHMEM there and the pass keeps NCCL there,
both through RunsUnderConditionalBranch, and the tools say so. On today's XLA a peer
or symmetric put lands in the peer's copy of the sender's own destination just the
same; the patched assigner makes such a permute private. The module is
a deviceless GPU compile (jax 0.10.2's XLA, two H200) of a cond on the device index
whose branches each rotate a block.
"""

import json
from pathlib import Path

import pytest

from hlo_tools import cli

from conftest import compile_two_h200

REPO = Path(__file__).resolve().parents[1]
# A table where NVSHMEM wins on NVLink at every size.
FAST_NVSHMEM = REPO / "tests" / "fixtures" / "fast_nvshmem.cost"

_BRANCHES = r"""
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
"""


@pytest.fixture(scope="module")
def branches(tmp_path_factory):
  """The compiled module, its permutes still DEFAULT."""
  dump = compile_two_h200(_BRANCHES, tmp_path_factory.mktemp("branches"))
  [module] = dump.glob("*jit_prog*after_optimizations.txt")
  text = module.read_text()
  assert text.count('"backend":"DEFAULT"') == 2 and "conditional(" in text
  return text


def test_explain_keeps_nccl_under_a_branch(capsys, tmp_path, branches):
  path = tmp_path / "branches.txt"
  path.write_text(branches)
  assert cli.main(["explain", str(path), "--topology=1x1x2", f"--cost-table={FAST_NVSHMEM}"]) == 0
  out = capsys.readouterr().out
  choices = [l for l in out.splitlines() if l.strip().startswith("choice")]
  assert len(choices) == 2 and all("nccl (backend DEFAULT" in c for c in choices), out
  reasons = [l for l in out.splitlines() if l.strip().startswith("reason")]
  assert len(reasons) == 2
  assert all(
    "nvshmem refused: under a conditional's branch" in r and "the patched XLA keeps NCCL there" in r
    for r in reasons
  )


def _failures(capsys, tmp_path, text, check, *flags):
  """verify's results of `check` on the module `text`, after asserting it fails."""
  path = tmp_path / "branches.txt"
  path.write_text(text)
  rc = cli.main(["verify", str(path), "--topology=1x1x2", *flags, "--format=json"])
  by_name = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
  assert rc == 1
  results = by_name[check]["results"]
  assert len(results) == 2 and all(r["status"] == "fail" for r in results)
  return [r["message"] for r in results]


def test_verify_fails_nvshmem_under_a_branch(capsys, tmp_path, branches):
  messages = _failures(
    capsys,
    tmp_path,
    branches.replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"'),
    "nvshmem-runtime",
    f"--cost-table={FAST_NVSHMEM}",
  )
  assert all("under a conditional's branch" in m for m in messages)


def test_verify_fails_peer_memory_under_a_branch(capsys, tmp_path, branches):
  # Today's XLA: a peer (or symmetric) put lands in the peer's copy of the sender's
  # own destination; the patched assigner makes such a permute private.
  peer = branches.replace(
    '"collectives_mode":"COLLECTIVES_MODE_INVALID"', '"collectives_mode":"COLLECTIVES_PEER_MEMORY"'
  )
  messages = _failures(capsys, tmp_path, peer, "peer-safety", "--backends=nccl,peer")
  assert all("peer refused: under a conditional's branch" in m for m in messages)
