"""What the JAX hook relies on, asked of the jax that runs this script (one JSON line).

    python scripts/hook_jax_check.py [TARGET_CONFIG]

Runs on any jax >= 0.10.2 with a CUDA plugin, without a GPU (a deviceless compile
for two H200s; TARGET_CONFIG defaults to hlo_tools/data/h200_gpu_target_config.pbtxt).
It says, for this jax, whether each thing the hook (hlo_tools/hook/) reads is where it
reads it, and what a compile does:
  * registration: jax.extend.xla.register_hlo_module_transformation and
    PipelineStage.PRE_SCHEDULER;
  * jit_options: jax.jit's compiler_options kept on the lowering
    (MeshComputation._compiler_options_kvs), and merged into the compile: a ring
    jitted with compiler_options PEER compiles to permutes carrying PEER;
  * compile_options: the same through Lowered.compile(compiler_options);
  * cache_key: jax._src.cache_key.custom_hook, which the hook replaces;
  * static_arguments: jax._src.api_util.fun_signature and resolve_argnums;
  * deviceless: jax._src.lib._jax.CompileOnlyPyClient and
    jax._src.compiler._get_cross_compile_backend;
  * probe: the hook's own probe of this XLA (per_op: the series' assigner);
  * hook: hook.compile on the ring with a cost table in which peer wins (the record's
    first-compile mode, applied mode and the compiled permutes' modes).
Meant for a machine with a newer jax than this checkout's venv (carried wheels):
compare its line with the one from jax 0.10.2 here.
"""

import json
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_FLAG = "xla_gpu_collective_permute_mode"
_PEER = "COLLECTIVES_PEER_MEMORY"


def _has(module: str, *names: str) -> bool:
  import importlib  # pylint: disable=import-outside-toplevel

  try:
    obj: Any = importlib.import_module(module)
  except ImportError:
    return False
  for name in names:
    if not hasattr(obj, name):
      return False
    obj = getattr(obj, name)
  return True


def main() -> int:
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from jax import lax  # pylint: disable=import-outside-toplevel
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  from jax.sharding import (  # pylint: disable=import-outside-toplevel
    Mesh,
    NamedSharding,
    PartitionSpec as P,
  )

  from hlo_tools import jax_hook  # pylint: disable=import-outside-toplevel
  from hlo_tools.hook import flags, text_edit  # pylint: disable=import-outside-toplevel

  target = (
    sys.argv[1]
    if len(sys.argv) > 1
    else os.path.join(ROOT, "hlo_tools", "data", "h200_gpu_target_config.pbtxt")
  )
  with open(target, encoding="utf-8") as f:
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2", target_config=f.read())
  mesh = Mesh(np.array(topo.devices), ("cp",))
  arg = jax.ShapeDtypeStruct((2, 8 << 20), np.float32, sharding=NamedSharding(mesh, P("cp")))

  def ring(**jit: Any) -> Any:
    body = jax.shard_map(
      lambda x: lax.ppermute(x, "cp", [(0, 1), (1, 0)]) * 2,
      mesh=mesh,
      in_specs=P("cp"),
      out_specs=P("cp"),
    )
    return jax.jit(body, **jit)

  out: dict[str, Any] = {"jax": jax.__version__}
  out["registration"] = _has("jax.extend.xla", "register_hlo_module_transformation") and _has(
    "jax.extend.xla", "PipelineStage", "PRE_SCHEDULER"
  )
  out["cache_key"] = _has("jax._src.cache_key", "custom_hook")
  out["static_arguments"] = _has("jax._src.api_util", "fun_signature") and _has(
    "jax._src.api_util", "resolve_argnums"
  )
  out["deviceless"] = _has("jax._src.lib", "_jax", "CompileOnlyPyClient") and _has(
    "jax._src.compiler", "_get_cross_compile_backend"
  )
  lowered = ring(compiler_options={_FLAG: _PEER}).lower(arg)
  out["jit_options"] = {
    "kept": flags.jit_compiler_options(lowered),
    "compiled": text_edit.permute_modes(flags.compiled_text(lowered.compile())),
  }
  out["compile_options"] = text_edit.permute_modes(
    flags.compiled_text(ring().lower(arg).compile({_FLAG: _PEER}))
  )
  table = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hook_jax_check_table.txt")
  with open(table, "w", encoding="utf-8") as f:
    f.write(
      "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 900 "
      "per_buffer_us: 1 }\n"
    )
  hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), cost_table=table)
  try:
    compiled = hook.compile(ring().lower(arg))
    record = hook.programs[-1]
    out["probe"] = hook.xla
    out["hook"] = {
      k: record.get(k)
      for k in (
        "mode_requested",
        "mode_requested_from",
        "compiles",
        "compiled_modes",
        "applied",
        "per_op_fallback",
        "why",
      )
    }
    out["hook"]["compiled"] = text_edit.permute_modes(flags.compiled_text(compiled))
    out["calls"] = len(hook.calls)
  finally:
    hook.uninstall()
  print(json.dumps(out, default=str))
  return 0


if __name__ == "__main__":
  sys.exit(main())
