"""What a report covers: the cases a request asks for, each a module or program on a topology."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from hlo_tools import bounded_input, messages, selection
from hlo_tools.errors import InputError
from hlo_tools.model import dumps
from hlo_tools.model.topology import jax_topology, manifest_note
from hlo_tools.ops import dump_target

DEFAULTS = {
  "seq_len": 131072,
  "num_heads": 32,
  "num_kv_heads": 8,
  "head_dim": 128,
  "batch": 1,
  "dtype": "bf16",
  "causal": True,
  "backward": False,
}
DEFAULT_TOPOLOGY = "1x2x4"
# The embedded default: one host vs two, short vs long context.
DEFAULT_GRID = (("1x1x8", 4096), ("1x1x8", 131072), ("1x2x4", 4096), ("1x2x4", 131072))
# The seed's layout on 2 hosts x 8: the mesh's last axis spans consecutive device ids,
# so cp is the 8 GPUs of a host (the ring on NVLink) and tp spans the two hosts.
SEED_MESH = "tp:2,cp:8"
# The train step beside the ring, as (topology, mesh or None for dump's default, tokens):
# one host (cp 4 x tp 2); tp inside each host with the ring across the two (cp 2 x tp 8),
# where NVSHMEM cannot run at the pin; the seed's layout at 64K, 128K and 256K tokens
# (each compiles deviceless in 16-25 s on 2 cores, whatever the length).
DEFAULT_TRAIN_STEPS = (
  ("1x1x8", None, 65536),
  ("1x2x8", None, 65536),
  ("1x2x8", SEED_MESH, 65536),
  ("1x2x8", SEED_MESH, 131072),
  ("1x2x8", SEED_MESH, 262144),
)
DEFAULT_OUT = "nvshmem_report"
PROG = "hlo-tools report"


def parse_topology_arg(spec: str) -> tuple[str, str, selection.Topology]:
  """(SxHxG to compile for, the spec, the core's Topology): the spec in the core's
  grammar, parsed once by the core, whose one-line error a bad one raises.
  '1x9x8:nvl72' -> ('1x9x8', '1x9x8:nvl72', Topology)."""
  topology = selection.parse_topology(spec)
  return jax_topology(topology), spec, topology


@dataclasses.dataclass
class Case:
  """One configuration: a module (or a program to compile) on one topology."""

  id: str  # directory name inside DIR
  title: str
  topology: str | None  # the selection core's spec; None: the driver derives it
  parsed: selection.Topology | None = None  # the core's Topology of `topology`, when already parsed
  compile_topology: str | None = None  # SxHxG, for programs compiled here
  source: dict | None = None  # a dump.dump() source: ring or module:function
  config: dict | None = None  # the ring's shapes
  path: str | None = None  # FILE or DIR given by the user
  label: str | None = None  # how messages name the input: as given, or <stdin>
  target_config: str | None = None  # the GPU target config to compile for (default: H200)
  devices_per_host: int | None = None  # a FILE or DIR whose topology the driver derives
  program: str | None = None  # the module key of one program of a DIR of several
  # A DIR of several programs: how many it holds, which were skipped and why.
  folder: dict | None = None


def _tokens(n: int) -> str:
  return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def ring_case(config: dict[str, Any], topology_arg: str) -> Case:
  compile_topo, spec, parsed = parse_topology_arg(topology_arg)
  return Case(
    id=f"{spec.replace(':', '_')}-{_tokens(config['seq_len'])}",
    title=f"ring attention, {_tokens(config['seq_len'])} tokens, on {spec}",
    topology=spec,
    parsed=parsed,
    compile_topology=compile_topo,
    source={"kind": "ring", "config": config},
    config=config,
  )


def train_step_case(topology: str, mesh: str | None = None, seq_len: int = 65536) -> Case:
  """The built-in train step on `topology` (SxHxG) and `mesh` ('tp:2,cp:8', slowest axis
  first; None: dump's default mesh for the topology) at seq_len tokens."""
  source = {"kind": "program", "program": "train_step", "config": {"seq_len": seq_len}}
  if mesh is not None:
    source["mesh"] = mesh
  axes = dump_target.resolve_mesh(source, dump_target.Target(topology=topology), mesh)
  layout = " x ".join(f"{name} {size}" for name, size in axes)
  return Case(
    id=f"train_step-{topology}-{'_'.join(f'{n}{s}' for n, s in axes)}-{_tokens(seq_len)}",
    title=f"Llama train step ({layout}), {_tokens(seq_len)} tokens, on {topology}",
    topology=topology,
    compile_topology=topology,
    source=source,
  )


@dataclasses.dataclass
class Request:
  """What a command line asks `report` for, flags already turned into values."""

  source: str | None = None  # None: the embedded default; FILE, DIR, '-' or module:function
  config: dict | None = None  # the ring's shapes
  explicit: bool = False  # a ring option or --topology given: that one ring only
  topology: str | None = None  # --topology; None: the default, the manifest's or derived
  stdin_path: str | None = None  # for '-': the file holding what stdin gave
  function_source: dict | None = None  # for module:function: the ops.dump source
  target_config: str | None = None
  devices_per_host: int | None = None  # FILE or DIR without --topology
  num_partitions: int | None = None
  max_input_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
  quiet: bool = False


def plan_cases(request: Request) -> list[Case]:
  """The cases a Request asks for (see the module docstring)."""
  topology = request.topology or DEFAULT_TOPOLOGY
  if request.source is None:
    config = request.config or dict(DEFAULTS)
    if request.explicit:
      return [ring_case(config, topology)]
    return [ring_case(dict(config, seq_len=n), topo) for topo, n in DEFAULT_GRID] + [
      train_step_case(*entry) for entry in DEFAULT_TRAIN_STEPS
    ]
  path = request.stdin_path or request.source
  label = "<stdin>" if request.source == "-" else request.source
  picked = None  # DIR:PROGRAM, one program of a dump folder of several
  folder, _, name = request.source.rpartition(":")
  if not os.path.exists(path) and folder and os.path.isdir(folder):
    picked = dumps.resolve_program(folder, name)
    path = label = folder
  name = (
    "stdin"
    if label == "<stdin>"
    else re.sub(
      r"[^\w.-]+", "_", os.path.basename(os.path.normpath(label if picked else request.source))
    )
  )
  if os.path.isdir(path) or os.path.isfile(path):
    # As the pass does inside XLA: from the dump's manifest, else the module itself
    # (nvshmem-opt's first run on it, in build).
    spec = request.topology or manifest_topology(path, label, request)
    programs: list[str | None] = [picked] if picked else [None]
    folder_info = None
    if os.path.isdir(path) and picked is None:
      kept, skipped = dumps.select_programs(path, max_bytes=request.max_input_bytes)
      main = dumps.main_key(path, dumps.index_xla_dump(dumps.xla_dir_of(path)))
      if len(kept) > 1 or (kept and kept[0] != main):
        folder_info = {
          "programs_total": len(kept) + len(skipped),
          "decided": list(kept),
          "skipped": [{"program": k, "reason": why} for k, why in skipped],
          "note": dumps.programs_note(label, kept, skipped),
        }
        programs = list(kept)
    cases = []
    for program in programs:
      shown = label if program is None else f"{label}:{program}"
      case = Case(
        id=name if program is None else f"{name}-{program}",
        title=f"{shown} on {spec}",
        topology=spec,
        path=os.path.abspath(path),
        label=label,
        devices_per_host=request.devices_per_host,
        program=program,
        folder=folder_info,
      )
      if spec is not None:
        case.parsed = parse_topology_arg(spec)[2]
      cases.append(case)
    return cases
  compile_topo, spec, parsed = parse_topology_arg(topology)
  if request.function_source is not None:
    return [
      Case(
        id=name,
        title=f"{request.source} on {spec}",
        topology=spec,
        parsed=parsed,
        compile_topology=compile_topo,
        source=request.function_source,
        target_config=request.target_config,
      )
    ]
  raise InputError(f"{request.source}: no such file or directory, and not module:function")


def manifest_topology(path: str, label: str, request: Request) -> str | None:
  """The topology of a DIR without --topology from its manifest, said on stderr;
  None: nvshmem-opt derives it from the module (derive_topology)."""
  spec = dumps.manifest_topology(path) if os.path.isdir(path) else None
  if spec is None:
    return None
  if request.devices_per_host is not None:
    raise InputError(
      f"{PROG}: --devices-per-host: {path} was compiled for {spec} "
      "(its manifest); give --topology to report it on another"
    )
  if not request.quiet:
    messages.print_error(manifest_note(PROG, label, spec))
  return spec
