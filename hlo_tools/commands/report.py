"""`hlo-tools report`: what the NVSHMEM pass does to a program, as an HTML page.

    hlo-tools report [SOURCE] [--topology=SPEC | --devices-per-host=N] [--out=DIR]
                     [--cost-table=F]
                     [--backends=nccl,nvshmem|nccl,peer[,symmetric]] [--per-op-modes]
                     [--num-partitions=N] [ring options]
                     [--mesh=... --arg=... --out_spec=... --global --nocheck_vma]

SOURCE is
  absent            the embedded default: ring attention with Llama-3-8B attention
                    shapes (32 query / 8 KV heads x 128, bf16, causal) side by side
                    on one host of 8 H200s (1x1x8) and on 2 hosts x 4 (1x2x4), at a
                    short (4K tokens) and a long (128K tokens) context: where NVSHMEM
                    wins, where it loses and where it cannot run; beside them, the
                    Llama-3-8B-shaped train step (`hlo-tools dump --program=train_step`:
                    2 decoder layers, ring attention over cp, tensor parallelism over
                    tp, gradients, Adam) on one host (1x1x8, cp 4 x tp 2, 64K tokens),
                    across hosts with tp 8 inside each and the ring across the two
                    (1x2x8, cp 2 x tp 8, 64K), and in the seed's layout: the ring on
                    each host's NVLink, tp across the two hosts (1x2x8, --mesh
                    tp:2,cp:8, at 64K, 128K and 256K tokens). The summary gives, per
                    configuration, each permute's choice and modeled saving against
                    NCCL and the permute time the choices save per step. With
                    --topology or --seq_len, that one ring configuration only.
  FILE              an HLO module (text, or a serialized HloModuleProto), as it is;
                    without --topology, on the topology nvshmem-opt derives from it
                    (hosts of --devices-per-host GPUs, default 8), as the pass does;
  DIR               a dump directory (`hlo-tools dump` or XLA's --xla_dump_to): the
                    module entering async-collective-creator when the dump has every
                    pass, and its after-optimizations module; a folder of several
                    programs (a script's init, step, eval and metrics functions): each
                    program with collective-permutes, the report saying how many the
                    folder holds and which it skipped, and why;
  DIR:PROGRAM       one program of such a folder, by its module name (jit_train_step
                    or train_step) or id (668 or module_0668);
  module:function   a per-shard JAX function, compiled like `hlo-tools dump
                    module:function`, with the same options (--mesh, --arg,
                    --out_spec, --global, --nocheck_vma, --target_config).

For each configuration: the pass (nvshmem-opt, with upstream's assigner beside it)
on the module entering async-collective-creator and on the after-optimizations
module; explain (the selection core's reasoning per collective-permute); verify of
both rewritten modules; diff before/after; the per-pass trace of each permute when
the dump has every pass; a chart of modeled time vs message size. DIR (default
./nvshmem_report) gets index.html, report.json and one directory per configuration
(json/, hlo/, dump/). It is written next to DIR and swapped in at the end: DIR holds
the old report or the new one, never a mix, even when the run is killed.

--backends names the backends the target XLA offers and goes to nvshmem-opt, explain
and verify alike: nccl,nvshmem (the pinned XLA) or nccl,peer[,symmetric] (XLA of jax
>= 0.10.2; the pass then writes collectives_mode, which the report shows beside each
choice). Default: the cost table's set.

--per-op-modes: the target XLA runs each permute's own collectives_mode (the series for
jax v0.11.0's and openxla main's XLA); default: a stock XLA, whose permutes all run the
program's one mode: nvshmem-opt then writes peer and symmetric memory as NCCL, the
report gives the program's mode and its setting, and verify checks the stock thunk.

Exit status: 0 report written and every check passed, 1 written but a verify check
failed, 2 error (bad option or input, compile failure, nvshmem-opt missing or failing).
"""

import argparse
import os
import re
import signal
import tempfile
from types import FrameType
from typing import Any, NoReturn

from hlo_tools import bounded_input
from hlo_tools.commands import common
from hlo_tools.errors import InputError
from hlo_tools.model import options, placement
from hlo_tools.ops import report
from hlo_tools.ops.dump_target import DEFAULT_TARGET_CONFIG
from hlo_tools.ops.report.cases import DEFAULT_OUT, DEFAULT_TOPOLOGY, DEFAULTS, Request, plan_cases
from hlo_tools.ops.report.text import summary_text


def _parser(prog: str) -> common.ArgumentParser:
  parser = common.parser_for(prog, __doc__)
  parser.add_argument(
    "source",
    nargs="?",
    default=None,
    help="absent: the embedded default; an HLO file (text or .hlo.pb), a "
    "dump directory, DIR:PROGRAM (one program of a dump folder of "
    "several, by module name or id) or module:function",
  )
  parser.add_argument("--out", default=DEFAULT_OUT)
  parser.add_argument(
    "--topology",
    default=None,
    help=f"SxHxG[:nvlN][:gpus_per_process=N][:map=...] (default "
    f"{DEFAULT_TOPOLOGY}; a FILE: derived from the module; absent with "
    "no SOURCE: the ring on 1x1x8 and 1x2x4, the train step on 1x1x8 "
    "and 1x2x8). " + common.LAYOUT_HELP,
  )
  parser.add_argument(
    "--devices-per-host",
    "--devices_per_host",
    dest="devices_per_host",
    type=int,
    default=None,
    help="FILE without --topology: GPUs per host of the topology "
    "nvshmem-opt derives from the module",
  )
  parser.add_argument("--cost-table", "--cost_table", dest="cost_table", default=None)
  common.add_backends_flag(parser)
  common.add_target_flag(parser)
  for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
    parser.add_argument(f"--{key}", type=int, default=None)
  parser.add_argument("--dtype", choices=("bf16", "f16", "f32"), default=None)
  parser.add_argument("--causal", dest="causal", action="store_true", default=None)
  parser.add_argument("--nocausal", dest="causal", action="store_false")
  parser.add_argument("--backward", dest="backward", action="store_true", default=None)
  parser.add_argument("--nobackward", dest="backward", action="store_false")
  parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
  common.add_partitions_flag(parser)
  bounded_input.add_max_input_bytes(parser)
  # module:function: the options `hlo-tools dump` compiles it with, the same group.
  common.add_function_flags(parser, DEFAULT_TARGET_CONFIG)
  return parser


_RING_KEYS = (
  "seq_len",
  "num_heads",
  "num_kv_heads",
  "head_dim",
  "batch",
  "dtype",
  "causal",
  "backward",
)


def _is_function(source: str | None) -> bool:
  """module:function, not a file, nor DIR:PROGRAM of a dump folder."""
  return bool(
    source
    and not os.path.exists(source)
    and re.match(r"^[\w.]+:\w+$", source)
    and not os.path.isdir(source.rpartition(":")[0])
  )


def _check_options(prog: str, args: argparse.Namespace) -> None:
  """Refuses options that the given SOURCE would silently ignore."""
  if args.topology is not None and args.devices_per_host is not None:
    raise InputError(
      f"{prog}: --devices-per-host and --topology: give one (the spec says "
      "how many GPUs a host has)"
    )
  ring = [k for k in _RING_KEYS if getattr(args, k) is not None]
  if ring and args.source is not None:
    raise InputError(
      f"{prog}: --{ring[0]} shapes the built-in ring-attention example; "
      f"{args.source} is compiled or read as it is"
    )
  function = _is_function(args.source)
  compiled = args.source is None or function
  given = [flag for flag, value in _function_flags(args) if value]
  if given and not function:
    raise InputError(
      f"{prog}: {given[0]} applies to a module:function SOURCE (it shapes "
      "the compile), not to " + (args.source or "the built-in default")
    )
  if args.devices_per_host is not None and compiled:
    raise InputError(
      f"{prog}: --devices-per-host applies to a FILE or DIR without "
      "--topology (the topology then comes from the module)"
    )


def _function_flags(args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
  """(flag, whether given) for each option of common.add_function_flags."""
  return (
    ("--mesh", args.mesh),
    ("--arg", args.arg),
    ("--out_spec", args.out_spec),
    ("--global", args.global_fn),
    ("--nocheck_vma", not args.check_vma),
    ("--target_config", args.target_config != DEFAULT_TARGET_CONFIG),
  )


def _config(prog: str, args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
  """The ring's shapes (defaults where not given) and whether any was given."""
  given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
  config = dict(DEFAULTS, **given)
  for key in ("seq_len", "num_heads", "num_kv_heads", "head_dim", "batch"):
    if config[key] < 1:
      raise InputError(f"{prog}: --{key} must be >= 1, got {config[key]}")
  return config, bool(given) or args.topology is not None


def _stdin_file(args: argparse.Namespace) -> str:
  """`report -`, or a FIFO or device: what it gives (text or a serialized proto) read
  once, within --max-input-bytes and --input-timeout, and copied to a temporary file,
  since nvshmem-opt and the report's hlo/ both read the module by path."""
  label = "<stdin>" if args.source == "-" else args.source
  data = bounded_input.read_input(args.source, args.max_input_bytes, label)
  if not data.strip():
    raise InputError(f"{label}: empty input, no HLO module")
  fd, path = tempfile.mkstemp(prefix="hlo-tools-report-stdin-", suffix=".hlo")
  with os.fdopen(fd, "wb") as f:
    f.write(data)
  return path


def request_for(
  args: argparse.Namespace, config: dict[str, Any], explicit: bool, stdin_path: str | None = None
) -> Request:
  """The command line as an ops.report.cases.Request: flags turned into values once."""
  function = _is_function(args.source)
  return Request(
    source=args.source,
    config=config,
    explicit=explicit,
    topology=args.topology,
    stdin_path=stdin_path,
    function_source=common.function_source(args, args.source) if function else None,
    target_config=args.target_config,
    devices_per_host=args.devices_per_host,
    num_partitions=args.num_partitions,
    max_input_bytes=args.max_input_bytes,
    quiet=args.quiet,
  )


def _terminate(signum: int, _frame: FrameType | None) -> NoReturn:
  raise SystemExit(128 + signum)  # runs the clean-up of the work directory


def main(argv: list[str]) -> int:
  prog = argv[0] if argv else "hlo-tools report"
  parser = _parser(prog)

  def run(args: argparse.Namespace) -> int:
    _check_options(prog, args)
    config, explicit = _config(prog, args)
    # The table first: a bad one is refused before any module is read or compiled.
    table = options.load_table(args.cost_table, args.backends, args.max_input_bytes)
    options.check_target(table[0].backends, args.per_op_modes)
    if args.source and bounded_input.is_regular_file(args.source):  # what stands beside it
      placement.config_path(args.source)
    piped = args.source == "-" or (
      args.source is not None
      and os.path.lexists(args.source)
      and not os.path.isdir(args.source)
      and not bounded_input.is_regular_file(args.source)
    )
    stdin_path = _stdin_file(args) if piped else None
    try:
      cases = plan_cases(request_for(args, config, explicit, stdin_path))
      previous = signal.signal(signal.SIGTERM, _terminate)
      try:
        result = report.build(
          cases,
          args.out,
          args.cost_table,
          args.num_partitions,
          progress=not args.quiet,
          max_bytes=args.max_input_bytes,
          backends=args.backends,
          table=table,
          per_op_xla=args.per_op_modes,
        )
      finally:
        signal.signal(signal.SIGTERM, previous)
    finally:
      if stdin_path:
        os.unlink(stdin_path)
    print(summary_text(result))
    return 0 if result["summary"]["verify_passed"] else 1

  return common.run_command(parser, argv, run)
