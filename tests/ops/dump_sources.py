"""Per-shard and global functions the dump tests compile by their module:function name
(tests.ops.dump_sources:NAME), imported by the compile child, which has no tests/ on
its path: nothing here imports conftest."""


def tp_cp_block(x):
  """Per-shard function over a (cp, tp) mesh: a cp ring step, then a sum over tp."""
  from jax import lax  # pylint: disable=import-outside-toplevel

  n = lax.axis_size("cp")
  return lax.psum(lax.ppermute(x, "cp", [(i, (i + 1) % n) for i in range(n)]), "tp")


def global_tp_cp(x):
  """A whole program: its own shard_map on the context mesh, then a global sum."""
  import jax  # pylint: disable=import-outside-toplevel
  from jax.sharding import PartitionSpec as P  # pylint: disable=import-outside-toplevel

  step = jax.shard_map(tp_cp_block, in_specs=P("cp", "tp"), out_specs=P("cp"))
  return step(x).sum()
