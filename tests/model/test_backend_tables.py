"""hlo_tools.model.backend_tables: what each plan writes, what each collectives_mode
names, and the backend an op's backend_config selects."""

import pytest

from hlo_tools import selection
from hlo_tools.hlo.reader import parse_hlo_text
from hlo_tools.model import backend_tables
from hlo_tools.model.collectives import collective_permutes

PERMUTE = """HloModule m, num_partitions=2

ENTRY e {
  p = f32[8] parameter(0)
  ROOT cp = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}CONFIG
}
"""


def _record(config):
  text = PERMUTE.replace("CONFIG", f", backend_config={config}" if config else "")
  [rec] = collective_permutes(parse_hlo_text(text))
  return rec


def _cbc(**fields):
  body = ",".join(f'"{k}":"{v}"' for k, v in fields.items())
  return '{"collective_backend_config":{' + body + "}}"


@pytest.mark.parametrize(
  "config,backend,written",
  [
    (None, "nccl", "DEFAULT"),
    (_cbc(backend="DEFAULT"), "nccl", "DEFAULT"),
    (_cbc(backend="NVSHMEM"), "nvshmem", "NVSHMEM"),
    (
      _cbc(backend="DEFAULT", collectives_mode="COLLECTIVES_MODE_INVALID"),
      "nccl",
      "DEFAULT",
    ),
    (
      _cbc(backend="DEFAULT", collectives_mode="COLLECTIVES_PEER_MEMORY"),
      "peer",
      "DEFAULT, COLLECTIVES_PEER_MEMORY",
    ),
    (
      _cbc(collectives_mode="COLLECTIVES_SYMMETRIC_MEMORY"),
      "symmetric",
      "DEFAULT, COLLECTIVES_SYMMETRIC_MEMORY",
    ),
    (
      _cbc(backend="DEFAULT", collectives_mode="COLLECTIVES_PRIVATE_MEMORY"),
      "private",
      "DEFAULT, COLLECTIVES_PRIVATE_MEMORY",
    ),
    # A mode of a newer XLA: named as written, no set holds it.
    (_cbc(collectives_mode="COLLECTIVES_FUTURE_MEMORY"), "COLLECTIVES_FUTURE_MEMORY", None),
  ],
)
def test_the_backend_an_ops_config_selects(config, backend, written):
  rec = _record(config)
  assert backend_tables.op_backend(rec) == backend
  if written is not None:
    assert backend_tables.written_backend(rec) == written


def test_every_collectives_mode_names_its_backend():
  # XLA's CollectivesMode enum (jax 0.10.2): INVALID is the default, NCCL's.
  assert backend_tables.MODE_BACKEND == {
    "COLLECTIVES_MODE_INVALID": "nccl",
    "COLLECTIVES_PEER_MEMORY": "peer",
    "COLLECTIVES_SYMMETRIC_MEMORY": "symmetric",
    "COLLECTIVES_PRIVATE_MEMORY": "private",
  }
  assert backend_tables.PLAN_MODE == {
    "peer": "COLLECTIVES_PEER_MEMORY",
    "symmetric": "COLLECTIVES_SYMMETRIC_MEMORY",
  }
  # NVSHMEM is a backend of its own; the modes run on DEFAULT.
  assert backend_tables.PLAN_BACKEND == {
    "nccl": "DEFAULT",
    "nvshmem": "NVSHMEM",
    "peer": "DEFAULT",
    "symmetric": "DEFAULT",
  }


def test_a_users_mark_asks_for_a_plan():
  # _xla_collectives_mode=private asks for NCCL; NVSHMEM has no mark.
  assert backend_tables.MODE_ATTRIBUTE == {
    "nccl": "private",
    "peer": "peer",
    "symmetric": "symmetric",
  }
  assert backend_tables.MARK_PLAN == {"private": "nccl", "peer": "peer", "symmetric": "symmetric"}


def test_backend_set_of_a_table():
  table = selection.CostTable.default()
  table.backends = "nccl,peer,symmetric"
  assert backend_tables.backend_set(table) == ("nccl", "peer", "symmetric")
  table.backends = "nccl,nvshmem"
  assert backend_tables.backend_set(table) == ("nccl", "nvshmem")
