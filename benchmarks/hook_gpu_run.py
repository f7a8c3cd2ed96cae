"""The JAX hook on a live GPU client, as a training job uses it.

    python3 benchmarks/hook_gpu_run.py OUT_DIR [--topology=1x1x1]

What a deviceless compile cannot show: `jax_hook.install` registers the hook
through jax's own registration on the real GPU client; a ring of ppermutes in a
fori_loop (one step under a conditional too) is compiled through plain jax.jit
(the registered transformation runs inside jax's compile) and through
`hook.compile` (the program's one mode applied, decided on the lowered program
and compiled once; hook.compile itself compares the executable's permutes with
its record and raises on a mismatch), run on the GPU and checked against numpy;
the mode in effect is read from each executable's optimized HLO (the
collective_backend_config every permute carries); peer memory asked for in
jax.jit's compiler_options for the ring, whose one step sits under a
conditional, must be refused (HookError) before anything compiles; XLA's dump of the
compiles goes to OUT_DIR/dump (or --dump-dir) and `hlo-tools explain` runs on it.

Writes OUT_DIR/hook_gpu.json (versions, device, date, each step's result and
mode) and OUT_DIR/explain.txt. Exit 0 when every step ran and the results are
right, 1 otherwise.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("out_dir")
  parser.add_argument("--topology", default="1x1x1")
  parser.add_argument("--dump-dir", help="XLA's dump folder (default OUT_DIR/dump)")
  parser.add_argument(
    "--installed",
    action="store_true",
    help="use the installed hlo_tools package, not this checkout's",
  )
  parser.add_argument(
    "--platforms", default="cuda,gpu", help="where the hook registers (cpu: a check of this script)"
  )
  args = parser.parse_args()
  os.makedirs(args.out_dir, exist_ok=True)
  dump = args.dump_dir or os.path.join(args.out_dir, "dump")
  # Before jax starts: XLA reads its flags once.
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
  ).strip()
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, PartitionSpec as P

  try:
    from jax import shard_map
  except ImportError:
    from jax.experimental.shard_map import shard_map  # type: ignore[no-redef]
  if not args.installed:
    sys.path.insert(0, ROOT)
  from hlo_tools import jax_hook
  from hlo_tools.hook import flags, text_edit

  result = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "hlo_tools": os.path.dirname(jax_hook.__file__),
    "jax": jax.__version__,
    "python": sys.version.split()[0],
    "devices": [str(d) for d in jax.devices()],
    "device_kind": jax.devices()[0].device_kind,
    "steps": {},
  }
  ok = True
  devices = jax.devices()[:1]
  mesh = Mesh(np.array(devices), ("x",))
  n = len(devices)
  perm = [(i, (i + 1) % n) for i in range(n)]

  def ring(x):
    def body(i, c):
      c = jax.lax.ppermute(c, "x", perm)
      # One step of the ring under a conditional's branch.
      return jax.lax.cond(
        i % 2 == 0, lambda v: v * 2.0, lambda v: jax.lax.ppermute(v, "x", perm), c
      )

    return jax.lax.fori_loop(0, 4, body, x)

  f = shard_map(ring, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  x = jnp.arange(n * 1024 * 1024, dtype=jnp.float32).reshape(n * 1024, 1024)
  expected = np.asarray(x) * 4.0  # Two doublings; the permutes of one device move nothing.

  def mode_of(compiled):
    text = compiled.as_text()
    return {
      "permute_modes": text_edit.permute_modes(text),
      "flag_mode": flags.compiled_flag_mode(text),
    }

  hook = jax_hook.install(
    topology=args.topology,
    backends=("nccl", "peer"),
    report=os.path.join(args.out_dir, "hook_report.json"),
    platforms=args.platforms.split(","),
  )
  result["hook_xla"] = hook.xla
  steps = result["steps"]
  try:
    jitted = jax.jit(f)
    y = np.asarray(jitted(x))
    steps["jax.jit"] = {
      "right": bool(np.allclose(y, expected)),
      **mode_of(jitted.lower(x).compile()),
      "programs": hook.summary(),
    }
    compiled = hook.compile(jax.jit(f).lower(x))
    y = np.asarray(compiled(x))
    record = hook.programs[-1]
    steps["hook.compile"] = {
      "right": bool(np.allclose(y, expected)),
      **mode_of(compiled),
      "compiles": record.get("compiles"),
      "compiled_modes": record.get("compiled_modes"),
      "verified": record.get("verified"),
      "summary": hook.summary(),
    }
    try:
      peer = {flags.FLAG: "COLLECTIVES_PEER_MEMORY"}
      hook.compile(jax.jit(f, compiler_options=peer).lower(x))
      steps["refused"] = {"right": False, "error": None}
    except jax_hook.HookError as e:
      steps["refused"] = {"right": "conditional's branch" in str(e), "error": str(e)}
  except Exception:  # Recorded: the run goes on to write what it has.
    steps["error"] = traceback.format_exc()
    ok = False
  finally:
    hook.uninstall()
  ok = ok and all(s.get("right", False) for k, s in steps.items() if k != "error")
  explain = subprocess.run(
    [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "explain",
      f"{dump}:after_optimizations",
      f"--topology={args.topology}",
      "--backends=nccl,peer",
    ],
    cwd=args.out_dir if args.installed else ROOT,
    capture_output=True,
    text=True,
    check=False,
  )
  with open(os.path.join(args.out_dir, "explain.txt"), "w") as out:
    out.write(explain.stdout + explain.stderr)
  result["explain_rc"] = explain.returncode
  with open(os.path.join(args.out_dir, "hook_gpu.json"), "w") as out:
    json.dump(result, out, indent=1, default=str)
  print(json.dumps(result, indent=1, default=str)[:6000])
  print(explain.stdout[-3000:], explain.stderr[-2000:])
  return 0 if ok and explain.returncode == 0 else 1


if __name__ == "__main__":
  sys.exit(main())
