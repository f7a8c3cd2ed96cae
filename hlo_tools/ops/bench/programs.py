"""Compiles the programs of `hlo-tools bench` (hlo_tools.programs.bench: llama, ring)
in a child process and returns their texts and compile times.

Compilation runs in a child (`python -m hlo_tools.ops.bench.programs SPEC_JSON`) for the
same reason as in hlo_tools.ops.dump: XLA reads XLA_FLAGS once per process, and the
dumping compile must not share a process with the timed ones (dumping every pass
would inflate the compile time we divide by).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hlo_tools.hlo.attributes import expand_mesh_groups
from hlo_tools.model import dumps
from hlo_tools.ops import dump_target

TOPOLOGY = "1x2x4"

# {"name": "llama", "config": {LlamaConfig field: value}} or {"name": "ring", "layers": N}
Program = dict[str, Any]


def _build(program: Program) -> tuple[Callable[..., Any], Any]:
  """(function, args) for a program spec {"name": "llama"|"ring", ...}."""
  from hlo_tools.programs import bench, ring_attention  # pylint: disable=import-outside-toplevel

  target = dump_target.Target(topology=program.get("topology", TOPOLOGY))
  mesh = ring_attention.make_mesh(dump_target._devices(target))  # pylint: disable=protected-access
  if program["name"] == "llama":
    config = bench.LlamaConfig(**program["config"])
    return bench.llama_function(config, mesh), bench.llama_args(config, mesh)
  return bench.ring_function(program["layers"], mesh), bench.ring_args(mesh)


def _child(spec: dict[str, Any]) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  fn, args = _build(spec["program"])
  # Warm-up on a trivial program: the first compile of a process also pays for
  # one-time set-up (backend and compiler initialization), which is not the
  # program's compile time.
  tiny = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=jax.tree.leaves(args)[0].sharding)
  jax.jit(lambda x: x + 1).lower(tiny).compile()
  result: dict[str, list[float]] = {"lower_s": [], "compile_s": []}
  text = ""
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
    text = text or compiled.as_text() or ""
  if spec.get("text_out"):
    with open(spec["text_out"], "w") as f:
      f.write(text)
  with open(spec["result"], "w") as f:
    json.dump(result, f)
  return 0


_MESH_GROUPS_RE = re.compile(r"replica_groups=(mesh\[[^\]]*\]\s*\{[^}]*\})")


def _explicit_groups(m: "re.Match[str]") -> str:
  groups = expand_mesh_groups(m.group(1))
  if groups is None:  # not a form the reader expands: left as it is
    return m.group(0)
  return "replica_groups={" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def legacy_replica_groups(text: str) -> str:
  """Rewrites jaxlib 0.10's `replica_groups=mesh['a'=8,'b'=1] {'a'}` as explicit groups.

  The XLA that nvshmem-opt is built against (and hlo_text) predate this
  spelling and reject it; the explicit list names the same device groups.
  """
  return _MESH_GROUPS_RE.sub(_explicit_groups, text)


# ----------------------------------------------------------------------------
# Parent side.


def _env(xla_dump_dir: str | None = None, pass_re: str | None = None) -> dict[str, str]:
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
  # The folder that holds hlo_tools/ (this file is hlo_tools/ops/bench/programs.py).
  package_root = str(Path(__file__).resolve().parents[3])
  env["PYTHONPATH"] = os.pathsep.join(
    [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
  )
  return env


def run_child(
  program: Program,
  repeats: int = 1,
  xla_dump_dir: str | None = None,
  pass_re: str | None = None,
  text_out: str | None = None,
  timeout: float = 3600,
) -> dict[str, list[float]]:
  """Compiles `program` in a child; returns {"lower_s", "compile_s": [...]}."""
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-") as tmp:
    spec: dict[str, Any] = {
      "program": program,
      "repeats": repeats,
      "text_out": text_out,
      "result": os.path.join(tmp, "result.json"),
    }
    proc = subprocess.run(
      [sys.executable, "-m", "hlo_tools.ops.bench.programs", json.dumps(spec)],
      env=_env(xla_dump_dir, pass_re),
      capture_output=True,
      text=True,
      timeout=timeout,
      check=False,
    )
    if proc.returncode != 0:
      tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
      raise RuntimeError(f"bench compile child failed (exit {proc.returncode}): {tail}")
    with open(spec["result"]) as f:
      result: dict[str, list[float]] = json.load(f)
      return result


def before_async_text(program: Program, timeout: float = 3600, text_out: str | None = None) -> str:
  """The module entering XLA's async-collective-creator (what the pass sees).

  Only the passes next to async-collective-creator are dumped: a full
  --xla_dump_hlo_pass_re=.* of a big module writes gigabytes. text_out, if
  given, also receives the optimized module of the same compile.
  """
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-dump-") as tmp:
    run_child(
      program,
      xla_dump_dir=tmp,
      pass_re="async-collective-creator",
      text_out=text_out,
      timeout=timeout,
    )
    text: str = dumps.pass_snapshot_text(tmp, "async-collective-creator", when="before")
    return text


def both_texts(program: Program) -> tuple[str, str]:
  """(before-async text, optimized text) of one compile."""
  with tempfile.TemporaryDirectory(prefix="hlo-tools-bench-text-") as tmp:
    path = os.path.join(tmp, "module.hlo")
    before = before_async_text(program, text_out=path)
    with open(path) as f:
      return before, f.read()


def compile_times(program: Program, repeats: int) -> list[float]:
  """Seconds of each of `repeats` compiles of one lowering, in a clean child."""
  return run_child(program, repeats=repeats)["compile_s"]


if __name__ == "__main__":
  sys.exit(_child(json.loads(sys.argv[1])))
