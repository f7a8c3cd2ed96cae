"""`hlo-tools dump`: compile a JAX program (or index an XLA dump) into a stage directory.

    hlo-tools dump [SOURCE] --out=DIR [--topology=SPEC] [--all_passes] ...

SOURCE is absent (a built-in program: --program=ring, the default, ring attention
alone; or --program=train_step, a Llama-3-8B-shaped train step with ring attention
over a mesh axis `cp` and tensor parallelism over `tp`), `module:function` (a
per-shard function run under shard_map, with arguments from repeated
--arg=SHAPE:DTYPE[:PARTITIONSPEC]; with --global, a whole program compiled as it is
on the mesh, which its own shard_map calls use), or an existing directory written by XLA's
--xla_dump_to (indexed as it is, nothing recompiled).

The mesh: --mesh=NAME:SIZE[,NAME:SIZE...] names the axes in order, the last the
fastest-varying (consecutive device ids, so GPUs of one host), e.g. --mesh=cp:4,tp:2;
the sizes must multiply to the number of devices. Without --mesh, module:function
gets one axis over all devices, named by its partition specs (`cp` when they name
none); the train step gets tp = the GPUs of a host and cp = the hosts on a topology
of several hosts, tp 2 and cp the rest on one host (1x1x8: cp 4 x tp 2), so the
ring crosses hosts and tensor parallelism stays inside them.

Compilation always happens in a child process: XLA reads XLA_FLAGS (dump
directory, host device count) once, when jax first initializes its backend, so
the parent cannot set them for itself, and one process could not serve two dumps.

The output directory holds stablehlo.mlir, lowered.hlo (jax's HLO text of the
lowered program, as `jax.jit(f).lower(...).as_text(dialect="hlo")` gives it),
before_optimizations.hlo, after_optimizations.hlo, with --all_passes
before_async.hlo (the module entering async-collective-creator, what the NVSHMEM
pass and XLA's backend assigner see), XLA's own files under xla_dump/ and
manifest.json. `hlo-tools report module:function` takes the same options that
shape the compile (--mesh, --arg, --out_spec, --global, --nocheck_vma,
--target_config).
"""

import argparse
import os
import re
from collections.abc import Iterable
from typing import Any

from hlo_tools import bounded_input
from hlo_tools.commands import common
from hlo_tools.errors import DumpError
from hlo_tools.ops import dump, dump_target
from hlo_tools.ops.dump_target import DEFAULT_TARGET_CONFIG


def _parser(prog: str) -> common.ArgumentParser:
  p = common.parser_for(prog, __doc__)
  # The sources and the mesh, as the module docstring gives them.
  p.epilog = "\n\n".join(__doc__.split("\n\n")[2:4])
  p.formatter_class = argparse.RawDescriptionHelpFormatter
  p.add_argument(
    "source",
    nargs="?",
    default=None,
    help="absent: the built-in --program; module:function; or an --xla_dump_to directory",
  )
  p.add_argument(
    "--program",
    choices=dump.PROGRAMS,
    default=None,
    help="built-in program when SOURCE is absent: ring (ring attention "
    "alone, the default) or train_step (Llama-3-8B-shaped layers, ring "
    "attention over cp, tensor parallelism over tp, gradients, Adam)",
  )
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument(
    "--topology",
    default=None,
    help="GPU topology in the selection core's grammar, "
    "SxHxG[:nvlN][:gpus_per_process=N][:map=...] (slices x hosts x GPUs per "
    "host, e.g. 1x9x8:nvl72): jax compiles for SxHxG, the manifest keeps the "
    "spec for report, explain and verify; absent: CPU",
  )
  p.add_argument(
    "--cpu_devices", type=int, default=8, help="host devices when --topology is absent"
  )
  p.add_argument(
    "--all_passes", action="store_true", help="also dump the module after every HLO pass"
  )
  p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
  p.add_argument("--quiet", action="store_true", help="no progress on stderr")
  ring = p.add_argument_group(
    "built-in programs' shapes (defaults: ring 8192 tokens, 8 heads / 8 KV heads x "
    "128; train_step Llama 3 8B's layers, 65536 tokens, 2 layers, vocabulary 8192)"
  )
  for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
    ring.add_argument(f"--{key}", type=int, default=None)
  ring.add_argument("--dtype", default=None, choices=["bf16", "f32", "f16"])
  ring.add_argument(
    "--causal",
    dest="causal",
    action="store_true",
    default=None,
    help="ring only (the train step is always causal)",
  )
  ring.add_argument("--nocausal", dest="causal", action="store_false")
  ring.add_argument(
    "--backward",
    dest="backward",
    action="store_true",
    default=None,
    help="ring only: loss gradients too (the train step always has them)",
  )
  ring.add_argument("--nobackward", dest="backward", action="store_false")
  for key in ("num_layers", "hidden", "mlp", "vocab"):
    ring.add_argument(f"--{key}", type=int, default=None, help="train_step only")
  ring.add_argument("--optimizer", choices=["adam", "sgd"], default=None, help="train_step only")
  ring.add_argument(
    "--norotary",
    dest="rotary",
    action="store_false",
    default=None,
    help="train_step only: no rotary position embedding",
  )
  common.add_function_flags(
    p,
    DEFAULT_TARGET_CONFIG,
    "the compile: module:function source (--mesh and --target_config: any program)",
  )
  # Each file of an --xla_dump_to SOURCE, and --target_config, is read within these.
  bounded_input.add_max_input_bytes(p)
  return p


_RING_KEYS = (
  "seq_len",
  "num_heads",
  "num_kv_heads",
  "head_dim",
  "dtype",
  "causal",
  "backward",
  "batch",
)


_TRAIN_KEYS = (
  "seq_len",
  "num_heads",
  "num_kv_heads",
  "head_dim",
  "dtype",
  "batch",
  "num_layers",
  "hidden",
  "mlp",
  "vocab",
  "optimizer",
  "rotary",
)


_RING_DEFAULTS = {
  "seq_len": 8192,
  "num_heads": 8,
  "num_kv_heads": 8,
  "head_dim": 128,
  "dtype": "bf16",
  "causal": True,
  "backward": False,
  "batch": 1,
}


def _given(args: argparse.Namespace, keys: Iterable[str]) -> dict[str, Any]:
  return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def program_source(args: argparse.Namespace) -> dict[str, Any]:
  """The source of --program (ring by default), with the shapes given on the line."""
  program = args.program or "ring"
  keys = _RING_KEYS if program == "ring" else _TRAIN_KEYS
  for key, value in vars(args).items():
    if value is not None and key in set(_RING_KEYS + _TRAIN_KEYS) - set(keys):
      raise DumpError(
        f"--{'norotary' if key == 'rotary' else key} does not apply to --program={program}"
      )
  for key, value in _given(args, keys).items():
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
      raise DumpError(f"--{key} must be >= 1, got {value}")
  if program == "ring":
    source = {"kind": "ring", "config": dict(_RING_DEFAULTS, **_given(args, keys))}
  else:
    source = {"kind": "program", "program": program, "config": _given(args, keys)}
  if args.mesh:
    source["mesh"] = args.mesh
  return source


def source_from_args(args: argparse.Namespace) -> dict[str, Any]:
  if args.source is None:
    return program_source(args)
  if args.program:
    raise DumpError(f"--program={args.program} and SOURCE {args.source!r}: give one")
  if os.path.isdir(args.source):
    if args.mesh:
      raise DumpError(f"--mesh does not apply to an XLA dump directory ({args.source})")
    return {"kind": "xla_dump", "dir": os.path.abspath(args.source)}
  if re.match(r"^[\w.]+:\w+$", args.source):
    return common.function_source(args, args.source)
  raise DumpError(f"SOURCE {args.source!r} is neither a directory nor module:function")


def main(argv: list[str]) -> int:
  parser = _parser(argv[0] if argv else "hlo-tools dump")

  def run(args: argparse.Namespace) -> int:
    source = source_from_args(args)
    target = dump_target.Target(
      topology=args.topology, cpu_devices=args.cpu_devices, target_config=args.target_config
    )
    options = {
      k: v
      for k, v in vars(args).items()
      if k not in ("source", "out", "overwrite", "quiet", "max_input_bytes", "input_timeout")
    }
    if source["kind"] == "xla_dump":
      # Nothing is compiled: the compile's options would describe no compile.
      if args.topology is not None:
        raise DumpError(
          f"--topology does not apply to an XLA dump directory "
          f"({args.source}): it is indexed as XLA compiled it"
        )
      options = {
        k: v
        for k, v in options.items()
        if v not in (None, False, []) and k not in ("cpu_devices", "target_config", "check_vma")
      }
    dump.dump(
      source,
      args.out,
      target=target,
      all_passes=args.all_passes,
      overwrite=args.overwrite,
      options=options,
      progress=not args.quiet,
      max_bytes=args.max_input_bytes,
    )
    return 0

  return common.run_command(parser, argv, run)
