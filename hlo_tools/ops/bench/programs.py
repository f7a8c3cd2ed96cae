"""The JAX programs `hlo-tools bench` compiles, and the child process that compiles them.

Two programs:
  llama  a Llama-3-8B-shaped transformer layer stack (hidden 4096, 32 query heads,
         8 K/V heads, head dim 128, MLP 14336, bf16) whose attention is the ring of
         hlo_tools.programs.ring_attention over CP=8, loss gradients (forward and backward)
         w.r.t. the input and every weight; `num_layers` layers, unrolled.
  ring   an unrolled ring of ppermute + matmul steps (bench_reader's generator):
         cheap to compile, so it scales to big modules for the reader and diff.

Compilation runs in a child (`python -m hlo_tools.ops.bench.programs SPEC_JSON`) for the
same reason as in hlo_tools.ops.dump: XLA reads XLA_FLAGS once per process, and the
dumping compile must not share a process with the timed ones (dumping every pass
would inflate the compile time we divide by).
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from hlo_tools.ops import dump
from hlo_tools.hlo import reader

TOPOLOGY = "1x2x4"


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  """Llama-3-8B layer shape; seq_len is global (split over the CP ring)."""
  num_layers: int = 4
  seq_len: int = 8192
  hidden: int = 4096
  num_heads: int = 32
  num_kv_heads: int = 8
  head_dim: int = 128
  mlp: int = 14336
  batch: int = 1
  dtype: str = "bf16"


def _rms_norm(x):
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  xf = x.astype(jnp.float32)
  return (xf * (1.0 / jnp.sqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5))
          ).astype(x.dtype)


def llama_function(config, mesh):
  """Global (weights, x) -> (d weights, d x) of a sum-of-squares loss over the stack."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from hlo_tools.programs import ring_attention  # pylint: disable=import-outside-toplevel
  attn = ring_attention.ring_attention(mesh, causal=True)
  b, s = config.batch, config.seq_len
  h, kvh, d = config.num_heads, config.num_kv_heads, config.head_dim

  def loss(weights, x):
    # A Python loop, not a scan: every layer is its own code in the module, as in
    # an unrolled production step, so the module grows with num_layers.
    for w in weights:
      y = _rms_norm(x)
      q = (y @ w["wq"]).reshape(b, s, h, d)
      k = (y @ w["wk"]).reshape(b, s, kvh, d)
      v = (y @ w["wv"]).reshape(b, s, kvh, d)
      x = x + attn(q, k, v).reshape(b, s, h * d) @ w["wo"]
      y = _rms_norm(x)
      x = x + (jax.nn.silu(y @ w["w1"]) * (y @ w["w3"])) @ w["w2"]
    return jnp.sum(jnp.square(x.astype(jnp.float32)))

  return jax.grad(loss, argnums=(0, 1))


def llama_args(config, mesh):
  """Abstract arguments: replicated weights, activations sharded along the sequence."""
  import jax  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  from hlo_tools.programs import ring_attention  # pylint: disable=import-outside-toplevel
  dt = ring_attention.DTYPES[config.dtype]
  rep = NamedSharding(mesh, P())
  hd, kvd = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
  shapes = {"wq": (config.hidden, hd), "wk": (config.hidden, kvd),
            "wv": (config.hidden, kvd), "wo": (hd, config.hidden),
            "w1": (config.hidden, config.mlp), "w3": (config.hidden, config.mlp),
            "w2": (config.mlp, config.hidden)}
  weights = [{k: jax.ShapeDtypeStruct(v, dt, sharding=rep) for k, v in shapes.items()}
             for _ in range(config.num_layers)]
  x = jax.ShapeDtypeStruct((config.batch, config.seq_len, config.hidden), dt,
                           sharding=NamedSharding(mesh, P(None, ring_attention.AXIS)))
  return weights, x


def ring_function(layers, mesh):
  """bench_reader's unrolled ring: `layers` ppermute + matmul steps, no loop."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax import lax  # pylint: disable=import-outside-toplevel
  from jax.sharding import PartitionSpec as P  # pylint: disable=import-outside-toplevel
  n = mesh.devices.size
  perm = [(j, (j + 1) % n) for j in range(n)]

  def ring(x, w):
    for k in range(layers):  # unrolled on purpose: a big module
      x = jnp.tanh(lax.ppermute(x, "cp", perm) @ w + k)
    return x

  return jax.shard_map(ring, mesh=mesh, in_specs=(P("cp"), P()), out_specs=P("cp"))


def ring_args(mesh):
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  n = mesh.devices.size
  return (jax.ShapeDtypeStruct((n * 128, 256), jnp.bfloat16,
                               sharding=NamedSharding(mesh, P("cp"))),
          jax.ShapeDtypeStruct((256, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P())))


# ----------------------------------------------------------------------------
# Child side.


def _build(program):
  """(function, args) for a program spec {"name": "llama"|"ring", ...}."""
  from hlo_tools.programs import ring_attention  # pylint: disable=import-outside-toplevel
  target = dump.Target(topology=program.get("topology", TOPOLOGY))
  mesh = ring_attention.make_mesh(dump._devices(target))  # pylint: disable=protected-access
  if program["name"] == "llama":
    config = LlamaConfig(**program["config"])
    return llama_function(config, mesh), llama_args(config, mesh)
  return ring_function(program["layers"], mesh), ring_args(mesh)


def _child(spec):
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  fn, args = _build(spec["program"])
  # Warm-up on a trivial program: the first compile of a process also pays for
  # one-time set-up (backend and compiler initialization), which is not the
  # program's compile time.
  tiny = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=jax.tree.leaves(args)[0].sharding)
  jax.jit(lambda x: x + 1).lower(tiny).compile()
  result = {"lower_s": [], "compile_s": []}
  text = None
  for _ in range(spec.get("repeats", 1)):
    # JAX memoizes compiles of a lowering; clearing its caches and lowering again
    # makes every repeat a real XLA compile.
    jax.clear_caches()
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    result["lower_s"].append(time.perf_counter() - t0)
    # Only the compile is timed: lowering is JAX's (Python) work, not XLA's, and
    # the pass under test runs inside XLA's compile.
    t0 = time.perf_counter()
    compiled = lowered.compile()
    result["compile_s"].append(time.perf_counter() - t0)
    text = text or compiled.as_text()
  if spec.get("text_out"):
    with open(spec["text_out"], "w") as f:
      f.write(text)
  with open(spec["result"], "w") as f:
    json.dump(result, f)
  return 0


_MESH_GROUPS_RE = re.compile(r"replica_groups=(mesh\[[^\]]*\]\s*\{[^}]*\})")


def _explicit_groups(m):
  groups = reader.expand_mesh_groups(m.group(1))
  return "replica_groups={" + ",".join(
      "{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def legacy_replica_groups(text):
  """Rewrites jaxlib 0.10's `replica_groups=mesh['a'=8,'b'=1] {'a'}` as explicit groups.

  The XLA that nvshmem-opt is built against (and hlo_text) predate this
  spelling and reject it; the explicit list names the same device groups.
  """
  return _MESH_GROUPS_RE.sub(_explicit_groups, text)


# ----------------------------------------------------------------------------
# Parent side.


def _env(xla_dump_dir=None, pass_re=None, threads=None):
  env = dict(os.environ)
  flags = [env.get("XLA_FLAGS", "")]
  if xla_dump_dir:
    flags += [f"--xla_dump_to={xla_dump_dir}", "--xla_dump_hlo_as_text"]
    if pass_re:
      flags.append(f"--xla_dump_hlo_pass_re={pass_re}")
  env["XLA_FLAGS"] = " ".join(f for f in flags if f)
  env["JAX_PLATFORMS"] = "cpu"
  env["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
  # A compilation cache would turn repeats into cache hits.
  env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env["PYTHONPATH"] = os.pathsep.join(
      [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
  return env


def run_child(program, repeats=1, xla_dump_dir=None, pass_re=None, text_out=None,
              timeout=3600):
  """Compiles `program` in a child; returns {"lower_s", "compile_s": [...]}."""
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-") as tmp:
    spec = {"program": program, "repeats": repeats, "text_out": text_out,
            "result": os.path.join(tmp, "result.json")}
    proc = subprocess.run([sys.executable, "-m", "hlo_tools.ops.bench.programs",
                           json.dumps(spec)], env=_env(xla_dump_dir, pass_re),
                          capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
      tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
      raise RuntimeError(f"bench compile child failed (exit {proc.returncode}): {tail}")
    with open(spec["result"]) as f:
      return json.load(f)


def before_async_text(program, timeout=3600, text_out=None):
  """The module entering XLA's async-collective-creator (what the pass sees).

  Only the passes next to async-collective-creator are dumped: a full
  --xla_dump_hlo_pass_re=.* of a big module writes gigabytes. text_out, if
  given, also receives the optimized module of the same compile.
  """
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-dump-") as tmp:
    run_child(program, xla_dump_dir=tmp, pass_re="async-collective-creator",
              text_out=text_out, timeout=timeout)
    return dump.pass_snapshot_text(tmp, "async-collective-creator", when="before")


def both_texts(program):
  """(before-async text, optimized text) of one compile."""
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-text-") as tmp:
    path = os.path.join(tmp, "module.hlo")
    before = before_async_text(program, text_out=path)
    with open(path) as f:
      return before, f.read()


def compile_times(program, repeats):
  """Seconds of each of `repeats` compiles of one lowering, in a clean child."""
  return run_child(program, repeats=repeats)["compile_s"]


if __name__ == "__main__":
  sys.exit(_child(json.loads(sys.argv[1])))
