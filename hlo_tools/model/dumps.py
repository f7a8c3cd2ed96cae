"""Dump directories: XLA's --xla_dump_to files (or `hlo-tools dump`'s copy of them),
indexed by module and pass, and the module at any stage or pass of one.

XLA writes a pass's file only when the pass changed the module; every pipeline
start is written.

`hlo-tools dump` writes manifest.json beside the stage files. Its keys:
  source        what was compiled: {"kind": "ring" | "program" | "function" |
                "xla_dump", ...}, as given (a "mesh" key holds --mesh's text)
  target        where for: {"platform": "cuda", "topology": the core's spec as
                given (SxHxG, slices x hosts x GPUs per host, maybe with :nvlN,
                :gpus_per_process=N, :map=...), "num_devices", "target_config"} for a
                deviceless GPU compile, {"platform": "cpu", "num_devices"} for host
                devices, null for an indexed --xla_dump_to directory. Readers take
                the dump's topology from target.topology (absent: none known).
  mesh          the device mesh, {axis name: size} in mesh order (the last axis
                the fastest-varying over device ids); null for an indexed directory
  versions      jax, jaxlib (and the CUDA plugin) that compiled it
  options       the command line's options
  stages        stage name -> file in the dump directory; with every pass dumped,
                before_async is the module entering async-collective-creator.
                Beside each HLO stage file X.hlo lies X.config.pbtxt, XLA's module
                config of the compile (hlo.module_config), where XLA wrote one
  partition_to_device   the device id of each partition (XLA's flattened id,
                hlo.module_config), from XLA's module config; null without one
  main_module, xla_dump_dir, modules   the index of XLA's files (index_xla_dump)
  programs      every module of the folder with its count of collective-permutes
                (a script that jits init, a step, an eval step and a metrics
                function dumps four); main_module is, for an indexed folder, the
                one with the most
"""

from __future__ import annotations

import os
import re
from typing import Any

from hlo_tools import bounded_input
from hlo_tools.errors import DumpReadError, InputError
from hlo_tools.hlo import module_config
from hlo_tools.model import sources

XLA_DUMP_SUBDIR = "xla_dump"  # where `hlo-tools dump` keeps XLA's own files
STAGE_HELP = (
  "before_optimizations, after_optimizations, before_async, after:PASS[#N] or before:PASS[#N]"
)
# How to get a dump with a file per pass: hlo-tools dump's flag, or XLA's own for an
# XLA_FLAGS=--xla_dump_to folder (xla/debug_options_flags.cc names it).
ALL_PASSES_HINT = (
  "dump with `hlo-tools dump --all_passes`, or compile with "
  "XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*'"
)
# The module XLA's backend assigner sees is the input of async-collective-creator.
BEFORE_ASYNC_PASS = "async-collective-creator"

# module_0001.jit_f.0082.post-fusion_optimization.after_A.before_B.txt
_PASS_FILE_RE = re.compile(
  r"^module_(?P<id>\d+)\.(?P<name>.+?)\.(?P<seq>\d{4})\.(?P<pipeline>[^.]+)"
  r"\.after_(?P<pass>.+?)\.before_(?P<next>.+)\.txt$"
)
# module_0001.jit_f.before_optimizations.txt and
# module_0001.jit_f[.sm_9.0a_gpu]_after_optimizations.txt (GPU prefixes the arch).
_STAGE_FILE_RE = re.compile(
  r"^module_(?P<id>\d+)\.(?P<name>.+?)\.(?:[\w.]*_)?(?P<stage>before_optimizations|"
  r"after_optimizations)\.txt$"
)

# index_xla_dump's records, as the manifest stores them: module key -> {"id", "name",
# "stages", "passes"}.
ModuleIndex = dict[str, dict[str, Any]]


def index_xla_dump(xla_dir: str) -> ModuleIndex:
  """Groups XLA's dump files by module; per module, passes in the order XLA ran them.

  Returns {module key: {"id", "name", "stages": {stage: file}, "passes": [...]}}
  with file names relative to xla_dir. XLA only writes a pass's file when the pass
  changed the module, so passes that changed nothing are absent.
  """
  modules: ModuleIndex = {}

  def entry(mid: str, name: str) -> dict[str, Any]:
    key = f"module_{mid}.{name}"
    return modules.setdefault(key, {"id": int(mid), "name": name, "stages": {}, "passes": []})

  for fname in sorted(os.listdir(xla_dir)):
    m = _PASS_FILE_RE.match(fname)
    if m:
      entry(m["id"], m["name"])["passes"].append(
        {
          "seq": int(m["seq"]),
          "pipeline": m["pipeline"],
          "pass": m["pass"],
          "next": m["next"],
          "file": fname,
        }
      )
      continue
    m = _STAGE_FILE_RE.match(fname)
    if m:
      entry(m["id"], m["name"])["stages"][m["stage"]] = fname
  for module in modules.values():
    module["passes"].sort(key=lambda p: p["seq"])
  return modules


def main_module(modules: ModuleIndex, preferred_name: str | None = None) -> str | None:
  """The module the dump is about: the compiled jit, else the one with most passes."""
  if not modules:
    return None
  candidates = [k for k, m in modules.items() if m["name"] == preferred_name]
  if candidates:
    return max(candidates, key=lambda k: modules[k]["id"])
  return max(
    modules,
    key=lambda k: (
      len(modules[k]["passes"]),
      "after_optimizations" in modules[k]["stages"],
      modules[k]["id"],
    ),
  )


def pass_snapshot_text(
  xla_dir: str,
  pass_name: str,
  module_key: str | None = None,
  occurrence: int = -1,
  when: str = "after",
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
) -> str:
  """HLO text of the module right after (or before) `pass_name`, from an XLA dump.

  XLA writes a pass's file only when the pass changed the module, and every
  pipeline start is written, so:
    after P:  the file after_P; if P changed nothing, its input, the file named
              ...before_P (written when the pass before P changed the module).
    before P: the file named ...before_P, else the last file written before
              after_P (every change is dumped, so that is P's input).
  Otherwise the snapshot cannot be located and DumpReadError says so.
  `occurrence` picks among several runs of the pass (-1: the last). The file is
  read as every input is (bounded_input.read_input, within max_bytes and the input
  timeout).
  """
  if when not in ("after", "before"):
    raise ValueError(f"when must be 'after' or 'before', not {when!r}")
  modules = index_xla_dump(xla_dir)
  key = module_key or main_module(modules)
  if key not in modules:
    raise DumpReadError(f"module {key!r} not in {xla_dir}")
  passes = modules[key]["passes"]
  after = [i for i, p in enumerate(passes) if p["pass"] == pass_name]
  before = [i for i, p in enumerate(passes) if p["next"] == pass_name]
  if when == "after":
    hits = after or before
  else:
    hits = before or [i - 1 for i in after if i > 0]
  if not hits:
    raise DumpReadError(
      f"no dump {when} pass {pass_name!r} in module {key}: the pass did "
      "not run or neither it nor its neighbour changed the module"
    )
  path = os.path.join(xla_dir, passes[hits[occurrence]]["file"])
  return sources.decode_text(bounded_input.read_input(path, max_bytes))


def main_key(dump_dir: str, modules: ModuleIndex) -> str | None:
  key = (module_config.read_manifest(dump_dir) or {}).get("main_module")
  if isinstance(key, str) and key in modules:
    return key
  return main_module(modules)


def xla_dir_of(dump_dir: str) -> str:
  sub = os.path.join(dump_dir, XLA_DUMP_SUBDIR)
  return sub if os.path.isdir(sub) else dump_dir


def read_stage(
  dump_dir: str,
  stage: str,
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
  program: str | None = None,
) -> sources.Source:
  """The Source of one stage of a dump directory (see the module docstring).
  program: the module key (resolve_program) of a folder of several programs; None:
  the folder's main module."""
  xla_dir = xla_dir_of(dump_dir)
  modules = index_xla_dump(xla_dir)
  main = main_key(dump_dir, modules) if modules else None
  key = program or main
  label = f"{dump_dir}:{stage}" if program is None else f"{dump_dir}:{program}:{stage}"
  if stage in ("before_optimizations", "after_optimizations", "before_async"):
    # `hlo-tools dump`'s copies are of its main module only.
    copied = os.path.join(dump_dir, stage + ".hlo")
    if key == main and os.path.isfile(copied):
      return sources.read_source(copied, label, max_bytes)
  if stage in ("before_optimizations", "after_optimizations"):
    if key is None or stage not in modules[key]["stages"]:
      raise InputError(
        f"{dump_dir}: no {stage} module in this dump directory"
        + (f" for program {key}" if program else "")
      )
    return sources.read_source(
      os.path.join(xla_dir, modules[key]["stages"][stage]), label, max_bytes
    )
  when, pass_name, occurrence = "", "", -1
  if stage == "before_async":
    when, pass_name = "before", BEFORE_ASYNC_PASS
  elif stage.startswith(("after:", "before:")):
    when, pass_name = stage.split(":", 1)
    if "#" in pass_name:
      pass_name, _, n = pass_name.partition("#")
      if not n.lstrip("-").isdigit():
        raise InputError(f"{label}: bad occurrence {n!r}: expected PASS#N, N an integer")
      occurrence = int(n)
  if not pass_name:
    raise InputError(f"{dump_dir}: unknown stage {stage!r}; expected {STAGE_HELP}")
  if key is None:
    raise InputError(f"{dump_dir}: no XLA module dumps (module_*.txt) found")
  if not modules[key]["passes"]:
    raise InputError(
      f"{dump_dir}: no per-pass snapshots"
      + (f" of program {key}" if program else "")
      + "; "
      + ALL_PASSES_HINT
    )
  try:
    text = pass_snapshot_text(xla_dir, pass_name, key, occurrence, when, max_bytes)
  except DumpReadError as e:
    raise InputError(f"{dump_dir}: {e}") from None
  except IndexError:
    raise InputError(f"{label}: pass {pass_name!r} has no run #{occurrence}") from None
  return sources.read_text(label, text, label)


def module_config_path(dump_dir: str, program: str | None = None) -> str | None:
  """XLA's module config (hlo.module_config) of the dump's main module (or of
  `program`, a module key), every stage's and pass's alike; None where XLA wrote none."""
  xla_dir = xla_dir_of(dump_dir)
  modules = index_xla_dump(xla_dir)
  key = program or (main_key(dump_dir, modules) if modules else None)
  return key and module_config.xla_dump_config(xla_dir, key)


# ---------------------------------------------------------------------------------------
# A folder of several programs: a training script jits init, its step, an eval step and
# a metrics function, and XLA dumps each as a module of its own.

_STAGE_NAMES = ("before_optimizations", "after_optimizations", "before_async")
PROGRAM_HELP = (
  "DIR:PROGRAM:STAGE picks one program of a dump folder of several (PROGRAM: "
  "its module name, e.g. jit_train_step or train_step, or its id, e.g. 668 or "
  "module_0668); without it, every program with collective-permutes"
)


def is_stage(text: str) -> bool:
  """Whether `text` names a stage (STAGE_HELP), not a program."""
  return text in _STAGE_NAMES or text.startswith(("after:", "before:"))


def resolve_program(dump_dir: str, name: str) -> str:
  """The module key of the program `name` names in the folder: its key
  (module_0668.jit_train_step), name (jit_train_step, or train_step without jax's jit_),
  or id (668, 0668, module_0668). InputError listing the programs when none or
  several match."""
  modules = index_xla_dump(xla_dir_of(dump_dir))
  if not modules:
    raise InputError(f"{dump_dir}: no XLA module dumps (module_*.txt) found")
  wanted = name[len("module_") :] if name.startswith("module_") else name
  hits = [
    k
    for k, m in modules.items()
    if name == k
    or name in (m["name"], m["name"].removeprefix("jit_"))
    or (wanted.isdigit() and int(wanted) == m["id"])
  ]
  if len(hits) == 1:
    return hits[0]
  listed = ", ".join(sorted(modules, key=lambda k: modules[k]["id"]))
  if not hits:
    raise InputError(f"{dump_dir}: no program {name!r} in this dump folder; its programs: {listed}")
  raise InputError(
    f"{dump_dir}: {name!r} names {len(hits)} programs "
    f"({', '.join(sorted(hits))}); give the id, e.g. "
    f"{dump_dir}:{modules[hits[0]]['id']}:STAGE"
  )


def program_file(dump_dir: str, key: str) -> str:
  """A file of program `key` in the dump (a stage, else a pass snapshot): where its
  config is found beside it (module_config.find_config)."""
  xla_dir = xla_dir_of(dump_dir)
  module = index_xla_dump(xla_dir)[key]
  files = list(module["stages"].values()) + [p["file"] for p in module["passes"]]
  return os.path.join(xla_dir, files[0])


def program_keys(dump_dir: str) -> list[str]:
  """The folder's programs (module keys), by id."""
  modules = index_xla_dump(xla_dir_of(dump_dir))
  return sorted(modules, key=lambda k: modules[k]["id"])


_PERMUTE_RE = re.compile(rb"\bcollective-permute(?:-start)?\(")


def program_permutes(
  dump_dir: str, key: str, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
) -> int | None:
  """How many collective-permute statements the program has (its after-optimizations
  module, else its first stage or pass file); None where it has no file to read."""
  xla_dir = xla_dir_of(dump_dir)
  module = index_xla_dump(xla_dir).get(key)
  if not module:
    return None
  stages = module["stages"]
  fname = (
    stages.get("after_optimizations")
    or stages.get("before_optimizations")
    or (module["passes"][-1]["file"] if module["passes"] else None)
  )
  if fname is None:
    return None
  data = bounded_input.read_input(os.path.join(xla_dir, fname), max_bytes)
  return len(_PERMUTE_RE.findall(data))


def select_programs(
  dump_dir: str, stage: str | None = None, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES
) -> tuple[list[str], list[tuple[str, str]]]:
  """The programs a command decides on in a folder of several: (keys of those with
  collective-permutes, [(key, why skipped)]). A folder of one program keeps it,
  permutes or not. `stage`, where given, must exist for a kept program (a folder
  without per-pass files has no before_async)."""
  keys = program_keys(dump_dir)
  if len(keys) <= 1:
    return keys, []
  kept: list[str] = []
  skipped: list[tuple[str, str]] = []
  modules = index_xla_dump(xla_dir_of(dump_dir))
  for key in keys:
    count = program_permutes(dump_dir, key, max_bytes)
    if count is None:
      skipped.append((key, "no module file to read"))
    elif count == 0:
      skipped.append((key, "no collective-permutes"))
    elif stage is not None and not _has_stage(modules[key], stage):
      skipped.append((key, f"no {stage} in the dump"))
    else:
      kept.append(key)
  return kept, skipped


def _has_stage(module: dict[str, Any], stage: str) -> bool:
  if stage in ("before_optimizations", "after_optimizations"):
    return stage in module["stages"]
  return bool(module["passes"])


def programs_note(dump_dir: str, kept: list[str], skipped: list[tuple[str, str]]) -> str:
  """One line: how many programs the folder holds, which are decided, which skipped
  and why."""
  total = len(kept) + len(skipped)
  why = "; ".join(f"{k} ({reason})" for k, reason in skipped)
  return (
    f"{dump_dir}: {total} programs; deciding {len(kept)} with collective-permutes"
    + (f" ({', '.join(kept)})" if kept else "")
    + (f"; skipped {why}" if why else "")
  )


def split_spec(spec: str) -> tuple[str, str] | None:
  """(DIR, STAGE) when spec names a stage of a dump directory (the first ':' whose
  left side is a directory splits them), else None. STAGE may start with a program
  (split_program)."""
  if spec == "-" or (os.path.lexists(spec) and not os.path.isdir(spec)):
    return None
  idx = spec.find(":")
  while idx != -1:
    if os.path.isdir(spec[:idx]):
      return spec[:idx], spec[idx + 1 :]
    idx = spec.find(":", idx + 1)
  return None


def split_program(dump_dir: str, rest: str) -> tuple[str | None, str]:
  """(program key or None, STAGE) of what follows DIR: in a spec: STAGE, or
  PROGRAM:STAGE (resolve_program). STAGE alone in a folder of several programs picks
  none (the caller decides on each, or asks for one)."""
  if is_stage(rest) or ":" not in rest:
    if not is_stage(rest) and rest and len(program_keys(dump_dir)) > 1:
      # DIR:PROGRAM alone: a program, no stage; the caller says which stage it needs.
      try:
        key = resolve_program(dump_dir, rest)
      except InputError:
        return None, rest
      raise InputError(
        f"{dump_dir}:{rest}: name a stage of program {key}, e.g. "
        f"{dump_dir}:{rest}:after_optimizations ({STAGE_HELP})"
      )
    return None, rest
  name, stage = rest.split(":", 1)
  return resolve_program(dump_dir, name), stage


def single_program(dump_dir: str, stage: str, what: str) -> str | None:
  """The program DIR:STAGE means where a command reads one module (diff): the folder's
  only one, else the only one with collective-permutes; InputError listing the
  programs when several have them."""
  keys = program_keys(dump_dir)
  if len(keys) <= 1:
    return None
  kept, _ = select_programs(dump_dir)
  if len(kept) == 1:
    modules = index_xla_dump(xla_dir_of(dump_dir))
    return None if kept[0] == main_key(dump_dir, modules) else kept[0]
  raise InputError(
    f"{dump_dir}:{stage}: the folder holds {len(keys)} programs; {what} "
    f"reads one: give DIR:PROGRAM:{stage}, PROGRAM one of "
    f"{', '.join(keys)}"
  )


def read_input(
  spec: str, max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES, what: str = "the command"
) -> sources.Source:
  """FILE or DIR:[PROGRAM:]STAGE. FILE may be any readable file, device or pipe, "-"
  for stdin; reading stops past max_bytes."""
  split = split_spec(spec)
  if split is not None:
    program, stage = split_program(split[0], split[1])
    if program is None:
      program = single_program(split[0], stage, what)
    return read_stage(split[0], stage, max_bytes, program)
  if spec == "-" or os.path.lexists(spec) and not os.path.isdir(spec):
    return sources.read_source(spec, max_bytes=max_bytes)
  if os.path.isdir(spec):
    raise InputError(
      f"{spec}: is a directory; name a stage, e.g. {spec}:after_optimizations ({STAGE_HELP})"
    )
  raise InputError(f"{spec}: cannot read: No such file or directory")


def manifest_stage(path: str) -> str | None:
  """The stage a file is in the `hlo-tools dump` directory holding it (its manifest's
  stages), or None."""
  manifest = module_config.read_manifest(os.path.dirname(os.path.abspath(path))) or {}
  stages = manifest.get("stages") or {}
  name = os.path.basename(path)
  return (
    next((k for k, v in stages.items() if v == name), None) if isinstance(stages, dict) else None
  )


def manifest_topology(dump_dir: str) -> str | None:
  """The topology `hlo-tools dump` compiled the dump for (its manifest), or None."""
  target = (module_config.read_manifest(dump_dir) or {}).get("target") or {}
  topology = target.get("topology") if isinstance(target, dict) else None
  return topology if isinstance(topology, str) and topology else None
