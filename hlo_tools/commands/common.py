"""What every command shares: its argument parser, its error handling, its output."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from hlo_tools import atomic_output, bounded_input, messages
from hlo_tools.errors import InputError
from hlo_tools.hlo import buffer_assignment, module_config, proto
from hlo_tools.model import driver, dumps, options, placement, sources, topology


class ArgumentParser(argparse.ArgumentParser):
  """argparse with one-line usage errors (InputError, exit status 2)."""

  def error(self, message: str) -> NoReturn:
    raise InputError(f"{self.prog}: {message}")


def parser_for(prog: str, doc: str) -> ArgumentParser:
  """A command's parser, described by the first paragraph of its docstring."""
  return ArgumentParser(prog=prog, description=doc.split("\n\n")[0])


def run_command(
  parser: argparse.ArgumentParser, argv: list[str], body: Callable[[argparse.Namespace], int]
) -> int:
  """Parses argv[1:] and returns body(args)'s exit status. Failures propagate: the
  CLI root (hlo_tools.cli.run) turns them into one line and an exit status."""
  return body(parser.parse_args(argv[1:]))


# What every command's --topology help says of the two facts beside the shape.
LAYOUT_HELP = (
  ":gpus_per_process=N states the job's processes (default: one GPU per process "
  "where the backends offer NVSHMEM, which the pinned XLA runs only so; else "
  "one process per host); :map=D0,D1,... the device of each id (default: XLA's "
  "config beside the module; without one, NVSHMEM, peer and symmetric memory "
  "are refused on a program over several hosts or processes)"
)


def add_topology_flags(parser: argparse.ArgumentParser) -> None:
  parser.add_argument(
    "--topology",
    default=None,
    help="e.g. 1x2x4 or 1x9x8:nvl72 (default: derived from the module "
    "by nvshmem-opt, as the pass does). " + LAYOUT_HELP,
  )
  parser.add_argument(
    "--devices-per-host",
    "--devices_per_host",
    dest="devices_per_host",
    type=int,
    default=None,
    help="GPUs per host when --topology is absent (nvshmem-opt's default)",
  )
  parser.add_argument("--cost-table", "--cost_table", dest="cost_table", default=None)


def given_topology(args: argparse.Namespace, file_arg: str, path: str, prog: str) -> str | None:
  """--topology, else the topology the module's dump was compiled for (the manifest
  of DIR:STAGE's directory, or the one beside FILE), said on stderr; None: the
  topology is nvshmem-opt's to derive (selection_for)."""
  if args.topology:
    if args.devices_per_host is not None:
      raise InputError(
        "--devices-per-host and --topology: give one (the spec says how many GPUs a host has)"
      )
    return args.topology  # parsed by selection_for, with the cost table
  if args.devices_per_host is not None:
    return None
  split = dumps.split_spec(file_arg)
  places = ([split[0]] if split else []) + (
    [os.path.dirname(os.path.abspath(path))] if os.path.isfile(path) else []
  )
  for directory in places:
    spec = dumps.manifest_topology(directory)
    if spec:
      messages.print_note(topology.manifest_note(prog, file_arg, spec))
      return spec
  return None


def selection_for(
  args: argparse.Namespace, file_arg: str, path: str, prog: str, compare_upstream: bool = True
) -> tuple[options.Selection, driver.Answer | None]:
  """The command's topology, cost table and backends as one options.Selection, each
  parsed by the core here, once; its one-line error for a bad one. Without a
  topology given or found (given_topology), nvshmem-opt's one run on the module
  (at `path`) is its source: the Answer comes back for the command to use, so the
  module goes to the driver once."""
  spec = given_topology(args, file_arg, path, prog)
  loaded = options.load_table(args.cost_table, args.backends, args.max_input_bytes)
  # What stands at the config's name is checked here (a FIFO, device or link loop
  # is refused, never skipped); its content is the driver's to read and refuse.
  placement.config_path(path)
  if os.path.isfile(path):  # and what stands at its buffer assignment's name
    buffer_assignment.found(buffer_assignment.sibling_path(path), args.max_input_bytes)
  per_op = getattr(args, "per_op_modes", options.PER_OP_MODES_DEFAULT)
  if spec is not None:
    return options.load(
      spec, args.cost_table, args.backends, loaded=loaded, per_op_xla=per_op
    ), None
  table, backends = loaded
  options.check_target(table.backends, per_op)
  answer = driver.ask(
    path,
    None,
    table if args.cost_table else None,
    compare_upstream,
    backends=backends,
    devices_per_host=args.devices_per_host,
    num_partitions=getattr(args, "num_partitions", None),
    module_config=placement.config_path(path),
  )
  # The derived topology, placed as the driver placed it: its JSON says where from.
  spec = driver.derived(path, answer)
  assert answer.report is not None  # derived() raised where the driver wrote none
  selected = placement.from_report(
    options.load(
      spec,
      args.cost_table,
      args.backends,
      loaded=loaded,
      per_op_xla=per_op,
      topology=driver.placed_topology(answer.report),
    ),
    answer.report,
  )
  for line in topology.derived_notes(
    prog,
    file_arg,
    selected.spec,
    selected.topology,
    answer.report["other_host_shapes"],
    args.devices_per_host,
    _devices(answer),
  ):
    if line:
      messages.print_note(line)
  return selected, answer


def _devices(answer: driver.Answer) -> int | None:
  """The module's devices (partitions x replicas) by the driver's report."""
  report = answer.report
  return None if report is None else report["num_partitions"] * report["num_replicas"]


@dataclasses.dataclass
class ModuleInput:
  """One module a command decides on: `path`, a regular file nvshmem-opt can read
  (the user's own, or a copy beside its module config), and how messages name it."""

  path: str
  source: sources.Source | None  # parsed already, or None: the operation reads `path`
  label: str  # the user's spelling: FILE, DIR:STAGE or DIR:PROGRAM:STAGE
  stage: str | None = None
  program: str | None = None  # the module key in a folder of several programs
  # A copy's temporary paths -> what the user knows them as (in_user_terms).
  renames: dict[str, str] = dataclasses.field(default_factory=dict)

  def in_user_terms(self, value: Any) -> Any:
    """`value` (a result: dicts, lists, strings) with the copy's temporary paths
    named as the user knows them: the input as given, the config it came with."""
    if not self.renames:
      return value
    if isinstance(value, str):
      for temporary, shown in self.renames.items():
        value = value.replace(temporary, shown)
      return value
    if isinstance(value, dict):
      return {k: self.in_user_terms(v) for k, v in value.items()}
    if isinstance(value, list):
      return [self.in_user_terms(v) for v in value]
    return value


@dataclasses.dataclass
class ModuleInputs:
  """What FILE or DIR:[PROGRAM:]STAGE names: one module, or each program of a dump
  folder with collective-permutes (`note` says how many the folder held and which
  were skipped, and why)."""

  inputs: list[ModuleInput]
  note: str | None = None
  skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  folder: str | None = None
  total: int = 1


@contextlib.contextmanager
def module_inputs(spec: str, max_bytes: int) -> Iterator[ModuleInputs]:
  """The modules of FILE or DIR:[PROGRAM:]STAGE (a stage of a dump directory, as diff
  reads it). A regular text FILE is read by the operation itself (source None).
  Everything else is read here, once: a FIFO, device or stdin (bounded by max_bytes
  and the input timeout), a serialized proto (printed as text, its device assignment
  or the config beside it kept), a stage that is no file of its own (a pass
  snapshot). Each is copied to a temporary directory with its module config beside
  it, as a sidecar, for nvshmem-opt, which reads modules by path."""
  with tempfile.TemporaryDirectory(prefix="hlo-tools-input-") as work:
    yield _module_inputs(spec, max_bytes, work)


def _module_inputs(spec: str, max_bytes: int, work: str) -> ModuleInputs:
  split = dumps.split_spec(spec)
  if split is None:
    if spec != "-" and (os.path.isdir(spec) or not os.path.lexists(spec)):
      dumps.read_input(spec, max_bytes)  # raises: a directory names no stage; missing
    regular = bounded_input.is_regular_file(spec)
    if regular and not _is_proto_file(spec):
      return ModuleInputs([ModuleInput(spec, None, spec)])
    data = bounded_input.read_input(spec, max_bytes)
    config = module_config.find_config(spec) if regular else None
    return ModuleInputs([_copied_input(work, "input", spec, data, config)])
  folder, rest = split
  program, stage = dumps.split_program(folder, rest)
  if program is not None:
    return ModuleInputs([_stage_input(work, folder, stage, program, max_bytes)], folder=folder)
  kept, skipped = dumps.select_programs(folder, stage, max_bytes)
  total = len(kept) + len(skipped)
  if total <= 1:
    return ModuleInputs([_stage_input(work, folder, stage, None, max_bytes)], folder=folder)
  note = dumps.programs_note(folder, kept, skipped)
  if len(kept) <= 1:
    # One program to decide (or none: the folder's main module says so): its output
    # as for a folder of one, the folder's line on stderr.
    messages.print_note(note)
    main = dumps.main_key(folder, dumps.index_xla_dump(dumps.xla_dir_of(folder)))
    program = kept[0] if kept and kept[0] != main else None
    return ModuleInputs(
      [_stage_input(work, folder, stage, program, max_bytes)], None, skipped, folder, total
    )
  return ModuleInputs(
    [_stage_input(work, folder, stage, key, max_bytes) for key in kept],
    note,
    skipped,
    folder,
    total,
  )


def _is_proto_file(path: str) -> bool:
  """Whether a regular file holds a serialized proto, not HLO text (its first bytes)."""
  try:
    with open(path, "rb") as f:
      head = f.read(4096)
  except OSError:
    return False  # read_input names the problem
  return (
    bool(head)
    and not proto.looks_like_text(head)
    and (path.endswith(".pb") or b"\0" in head or not _is_utf8_prefix(head))
  )


def _is_utf8_prefix(data: bytes) -> bool:
  try:
    data.decode("utf-8")
  except UnicodeDecodeError as e:
    return e.start >= len(data) - 3  # a character cut at the end of the prefix
  return True


def _copied_input(work: str, name: str, label: str, data: bytes, config: str | None) -> ModuleInput:
  """`data` (HLO text or a serialized proto) as a text file under `work`, with its
  module config beside it: `config` (a file), else the proto's own device assignment."""
  directory = tempfile.mkdtemp(dir=work)
  path = os.path.join(directory, name + ".hlo")
  config_text = None
  if not proto.looks_like_text(data):
    module = proto.module_bytes(data)
    if module is not None:
      assignment = proto.device_assignment(module, label)
      data = proto.to_text(module, label, assignment).encode()
      if config is None and assignment is not None:
        config_text = proto.config_text(assignment)
  with open(path, "wb") as f:
    f.write(data)
  sidecar = module_config.sidecar_path(path)
  renames = {}
  if config is not None:
    _copy_config(config, sidecar)
    renames[sidecar] = config
  elif config_text is not None:
    with open(sidecar, "w") as f:
      f.write(config_text)
    renames[sidecar] = f"{label}, the proto's own"
  renames[path] = label
  source = sources.read_source(path, label, max_bytes=len(data) + 1)
  return ModuleInput(path, source, label, renames=renames)


def _copy_config(config: str, to: str) -> None:
  """The module config at `config` copied beside a copy of its module, read as every
  input is (bounded in size and time)."""
  module_config.read_config(config)  # refused under the user's name, not the copy's
  data = bounded_input.read_side_input(config, module_config.WHAT)
  with open(to, "wb") as f:
    f.write(data)


def _stage_input(
  work: str, folder: str, stage: str, program: str | None, max_bytes: int
) -> ModuleInput:
  source = dumps.read_stage(folder, stage, max_bytes, program)
  label = source.label or f"{folder}:{stage}"
  if source.path and os.path.isfile(source.path) and source.path != label:
    return ModuleInput(source.path, source, label, stage, program)
  config = dumps.module_config_path(folder, program)
  directory = tempfile.mkdtemp(dir=work)
  path = os.path.join(directory, "stage.hlo")
  with open(path, "w") as f:
    f.write(source.text)
  renames = {path: label}
  if config:
    sidecar = module_config.sidecar_path(path)
    _copy_config(config, sidecar)
    renames[sidecar] = config
  source.path = path
  return ModuleInput(path, source, label, stage, program, renames)


def programs_json(found: ModuleInputs, results: list[dict[str, Any]]) -> dict[str, Any]:
  """A command's JSON over the programs of a dump folder (module_inputs)."""
  return {
    "folder": found.folder,
    "programs_total": found.total,
    "skipped": [{"program": key, "reason": why} for key, why in found.skipped],
    "programs": [dict(result, program=one.program) for one, result in zip(found.inputs, results)],
  }


def programs_text(found: ModuleInputs, texts: list[str]) -> str:
  """A command's text over the programs of a dump folder: the folder's line (how
  many programs, which skipped and why), then each program's text under its name."""
  parts = [found.note or ""]
  for one, text in zip(found.inputs, texts):
    parts.append(f"=== program {one.program} ({one.label}) ===\n{text.rstrip()}")
  return "\n\n".join(parts)


def add_backends_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument(
    "--backends",
    default=None,
    help="the backends the target XLA offers, as for nvshmem-opt: "
    "nccl,nvshmem (the pinned XLA) or nccl,peer[,symmetric] (XLA of "
    "jax >= 0.10.2, collectives_mode); default: the cost table's set",
  )


def add_target_flag(parser: argparse.ArgumentParser) -> None:
  """--per-op-modes: which XLA the plan is for, the one setting every command and
  nvshmem-opt share (options.PER_OP_MODES_HELP)."""
  parser.add_argument(
    "--per-op-modes",
    "--per_op_modes",
    dest="per_op_modes",
    action="store_true",
    default=options.PER_OP_MODES_DEFAULT,
    help=options.PER_OP_MODES_HELP,
  )


def add_partitions_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument(
    "--num-partitions",
    "--num_partitions",
    dest="num_partitions",
    type=int,
    default=None,
    help="devices of the program when the module header does not say "
    "(default: inferred from the mesh, the topology or the ids used)",
  )


def add_function_flags(
  parser: argparse.ArgumentParser, target_config_default: str, title: str = "module:function source"
) -> argparse._ArgumentGroup:
  """The options that shape the compile of a module:function source, shared by
  `dump` and `report` so that one command line compiles the same program in both."""
  fn = parser.add_argument_group(title)
  fn.add_argument(
    "--mesh",
    default=None,
    help="NAME:SIZE[,NAME:SIZE...], slowest axis first, sizes multiplying "
    "to the devices, e.g. cp:4,tp:2 (default: a function gets one axis "
    "over all devices, named by its partition specs; dump's train step tp "
    "over a host's GPUs and cp across hosts)",
  )
  fn.add_argument(
    "--arg",
    action="append",
    default=[],
    help="SHAPE:DTYPE[:PARTITIONSPEC], e.g. 8192,8,128:bf16:cp (repeat per argument)",
  )
  fn.add_argument(
    "--out_spec",
    action="append",
    default=None,
    help="shard_map out_specs of the function, e.g. cp or None,cp; repeat "
    "it for a function returning a tuple, one per output (an empty "
    "--out_spec= is replicated); default cp",
  )
  fn.add_argument(
    "--global",
    dest="global_fn",
    action="store_true",
    help="the function is global, not per-shard: compile it as it is, "
    "its arguments sharded by --arg, on the mesh (jax.set_mesh), so its "
    "own shard_map calls and sharding constraints need not name one",
  )
  fn.add_argument(
    "--check_vma",
    dest="check_vma",
    action="store_true",
    default=True,
    help="shard_map's varying-type check (default on)",
  )
  fn.add_argument(
    "--nocheck_vma",
    dest="check_vma",
    action="store_false",
    help="shard_map(check_vma=False): for functions written before jax "
    "typed values as varying over mesh axes (loop carries started from "
    "fresh zeros)",
  )
  fn.add_argument(
    "--target_config",
    default=target_config_default,
    help="GPU target config (text proto) for deviceless compilation",
  )
  return fn


def function_source(args: argparse.Namespace, function: str) -> dict[str, Any]:
  """The ops.dump source of module:function from the flags of add_function_flags."""
  specs = args.out_spec or ["cp"]
  source = {
    "kind": "function",
    "function": function,
    "args": list(args.arg),
    "out_spec": specs[0] if len(specs) == 1 else list(specs),
    "check_vma": args.check_vma,
  }
  if args.global_fn:
    source["global"] = True
  if args.mesh:
    source["mesh"] = args.mesh
  return source


def check_out_path(out: str | None, inputs: Sequence[str | None]) -> None:
  """Refuses an --out that would overwrite one of the inputs."""
  if not out:
    return
  for path in inputs:
    if path and os.path.exists(path) and os.path.exists(out) and os.path.samefile(out, path):
      raise InputError(f"{out}: refusing to overwrite an input")


def check_output_file(path: str, flag: str) -> None:
  """Refuses, before any work, an output file that could not be written at the end.
  A device or FIFO is written in place (atomic_output.write_atomic), a symlink followed."""
  real = atomic_output.resolve_links(path)
  if os.path.isdir(real):
    raise InputError(f"{flag} {path}: is a directory, not a file")
  if os.path.exists(real):
    if not os.path.isfile(real):
      return  # a device or FIFO: written as it is, its directory untouched
  directory = os.path.dirname(os.path.abspath(real)) or "."
  if not os.path.isdir(directory):
    raise InputError(f"{flag} {path}: no such directory {directory}")
  if not os.access(directory, os.W_OK | os.X_OK):
    raise InputError(f"{flag} {path}: directory {directory} is not writable")


def write_output(text: str, out: str | None) -> None:
  """Prints, or writes `out` atomically (temp file in the same directory + os.replace)."""
  text = text if text.endswith("\n") else text + "\n"
  if not out:
    sys.stdout.write(text)
    return
  atomic_output.write_atomic(out, text)
