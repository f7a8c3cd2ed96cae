"""The Hook that jax calls inside its compile (with compile() and jit()), and install()."""

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools import atomic_output
from hlo_tools.errors import HookError, InputError
from hlo_tools.hlo import reader
from hlo_tools.hook import decide, flags, processes, program, registry, text_edit
from hlo_tools.hook.decide import Record
from hlo_tools.hook.jit import JitFunction

if TYPE_CHECKING:  # jax and the binding are imported when first used
  from jax.stages import Compiled, Lowered

  from hlo_tools._selection_core import CostTable, Topology


class Hook:
  """An installed transformation: decisions and calls so far; compile(), jit(),
  uninstall(). `xla`: what probe() found of the XLA (per_op None: not probed)."""

  def __init__(
    self,
    name: str,
    stage: Any,
    platforms: Sequence[str],
    selection: ModuleType,
    topology: "Topology",
    table: "CostTable",
    backends: Sequence[str],
    report: str | None,
    xla: dict[str, Any] | None = None,
    trust_caller_mode: bool = False,
  ) -> None:
    self.name, self.stage, self.platforms = name, stage, list(platforms)
    self.trust_caller_mode = trust_caller_mode
    self.topology, self.table, self.backends = topology, table, tuple(backends)
    self.report = report
    self.decisions: list[Record] = []
    self.calls: list[Record] = []
    self.programs: list[Record] = []
    self.xla = xla or {"per_op": None, "evidence": "not probed"}
    self._selection = selection
    self._lock = threading.Lock()
    # compile() calls under way, which record their own decision. Not per thread:
    # XLA may run the transformation on a thread other than the compiling caller's
    # (measured on jax 0.10.2's CPU client).
    self._compiling = 0
    self.installed = False
    self.table_digest = registry.table_fingerprint(selection, table)

  def __call__(self, proto_bytes: bytes) -> bytes | None:
    if flags.STATE["probing"]:
      return None  # the probe's own module
    from jax._src.lib import xla_client  # jaxlib's own HLO parser and printer

    call: Record = {"bytes_in": len(proto_bytes)}
    try:
      module = xla_client.hlo.HloModule.from_serialized_hlo_module_proto(proto_bytes)
      call["module"] = module.name
      result = None
      if self.xla["per_op"]:
        result = self._per_op(module.to_string(), call)
      elif not self._compiling:  # else compile() records it; the text is not needed
        self._program(module.to_string(), call)  # decided and recorded; nothing written
    except Exception as e:  # the module stays as jax built it; the error is kept
      call["error"] = f"{type(e).__name__}: {e}"[:2000]
      result = None
    with self._lock:
      self.calls.append(call)
      self._write_report()
    return result

  def _per_op(self, text: str, call: Record) -> bytes | None:
    """The series' XLA: each permute's choice written on it."""
    from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel

    new_text, records = text_edit.transform_text(
      text, self._selection, self.topology, self.table, self.backends
    )
    call["permutes"] = len(records)
    result = None
    call["modes_out"] = text_edit.permute_modes(new_text or text)
    if new_text is not None:
      module = xla_client.hlo.hlo_module_from_text(new_text)
      result = module.as_serialized_hlo_module_proto()
      call["permutes_out"] = call["modes_out"]
    with self._lock:
      self.decisions.extend(records)
    return result

  def _program(self, text: str, call: Record) -> None:
    """A stock XLA: the program's one mode decided and recorded, nothing written
    (the flag of this compile is already set; compile() applies it)."""
    module = reader.parse_hlo_text(text)
    decide.check_collective_marks(module)  # a mark off a permute: an error, as in the series
    marks = decide.user_marks(module)  # a mark no mode names: an error
    choice = program.program_choice(
      text, self.topology, self.table, self.backends, label=f"<{call['module']}>"
    )
    call["permutes"] = choice["permutes"]
    if not choice["permutes"]:
      return None
    try:
      mode, _, mark_why, _, _ = program.settle(
        choice,
        choice["mode"],
        flags.XLA_DEFAULT,
        marks,
        False,
        f"<{call['module']}>",
        lambda b: choice,
      )
    except HookError as e:  # the marks' mode refused by a rule: the core's mode instead
      mode, mark_why = choice["mode"], f"refused the marks' mode: {e}"
    word = next(w for w, m in flags.FLAG_WORDS.items() if m == mode)
    why = (
      "decided inside a compile, whose flag is already set: apply it with "
      f"XLA_FLAGS=--{flags.FLAG}={word} or compiler_options={{{flags.FLAG!r}: {mode!r}}}, "
      "or compile through hook.compile() / hook.jit()"
    )
    if marks:
      why += "; " + mark_why
    with self._lock:
      self.programs.append(
        {
          "module": call["module"],
          "program": choice,
          "applied": None,
          "to_set": mode,
          "marks": marks,
          "why": why,
        }
      )
    return None

  def compile(
    self,
    lowered: "Lowered",
    compiler_options: Mapping[str, Any] | None = None,
    *,
    trust_caller_mode: bool | None = None,
  ) -> "Compiled":
    """`lowered` (jax.jit(f).lower(...)) compiled once with the program's mode
    (program.compile_program), checked against what XLA compiled; the record is
    kept in `programs`. trust_caller_mode (default: install's) keeps a mode the
    caller set that the core refuses, with a warning, instead of a HookError."""
    from jax.stages import Lowered  # pylint: disable=import-outside-toplevel

    if not isinstance(lowered, Lowered):
      raise HookError(
        "hook.compile takes what jax.jit(f).lower(...) returns (a jax.stages.Lowered), "
        f"not {type(lowered).__name__}"
      )
    if compiler_options is not None and not isinstance(compiler_options, Mapping):
      raise HookError(
        f"hook.compile's compiler_options is a dict of XLA options or None, not "
        f"{type(compiler_options).__name__}"
      )
    if not self.installed:  # no transformation runs: a per-op record would be false
      raise HookError(
        f"the hook {self.name!r} is uninstalled: install one again to compile through it"
      )
    trust = self.trust_caller_mode if trust_caller_mode is None else bool(trust_caller_mode)
    devices = program.program_devices(lowered)
    topology, layout = self._topology_for(devices)
    with self._lock:
      self._compiling += 1
      since = len(self.calls)
    try:
      compiled, record = program.compile_program(
        lowered,
        topology,
        self.table,
        self.backends,
        compiler_options,
        self.xla["per_op"],
        trust,
        transformation=lambda: list(self.calls[since:]),
        decide_per_op=self._decide_per_op,
      )
    finally:
      with self._lock:
        self._compiling -= 1
    if self.xla["per_op"] is None:
      self.xla = record["xla"]
    # The compiled module's name (compile_program's, from the text it checked).
    record["module"] = record.get("module") or flags.module_name(flags.compiled_text(compiled))
    record["topology"] = str(topology)
    if layout:
      record["process_layout"] = layout
    with self._lock:
      self.programs.append(record)
      self._write_report()
    return compiled

  def _decide_per_op(self, text: str) -> str:
    """`text` with the hook's per-op modes written (as the transformation would)."""
    new, _ = text_edit.transform_text(
      text, self._selection, self.topology, self.table, self.backends
    )
    return new or text

  def _topology_for(self, devices: Sequence[Any]) -> "tuple[Topology, str | None]":
    """The topology to decide with for a program on `devices` (jax's, in partition
    order): the hook's, unless jax's devices say that processes split what the
    topology has in one (each device's process_index). Peer and symmetric memory
    need a permute's devices in one process: jax's facts then win."""
    return processes.topology_for_devices(self._selection, self.topology, self.backends, devices)

  # jax.jit's arguments that jit() passes on.
  JIT_ARGUMENTS = (
    "static_argnums",
    "static_argnames",
    "donate_argnums",
    "donate_argnames",
    "in_shardings",
    "out_shardings",
    "keep_unused",
    "inline",
    "compiler_options",
  )

  def jit(self, fun: Callable[..., Any], **jit_kwargs: Any) -> "JitFunction":
    """jax.jit(fun, **jit_kwargs) whose every new argument signature compiles
    through compile() (see JitFunction). jax.jit arguments other than
    JIT_ARGUMENTS are refused up front."""
    if not callable(fun):
      raise HookError(f"hook.jit takes a function, not {type(fun).__name__}")
    other = sorted(set(jit_kwargs) - set(self.JIT_ARGUMENTS))
    if other:
      raise HookError(
        f"hook.jit does not take jax.jit's {', '.join(other)} (it takes "
        f"{', '.join(self.JIT_ARGUMENTS)}); compile such a function with "
        "hook.compile(jax.jit(fun, ...).lower(...))"
      )
    return JitFunction(self, fun, jit_kwargs)

  def summary(self) -> Record:
    return {
      "name": self.name,
      "topology": str(self.topology),
      "backends": list(self.backends),
      "xla": self.xla,
      "calls": list(self.calls),
      "decisions": list(self.decisions),
      "programs": list(self.programs),
    }

  def _write_report(self) -> None:
    if not self.report:
      return
    atomic_output.write_atomic(self.report, json.dumps(self.summary(), indent=1, default=str))

  def uninstall(self) -> bool:
    """Removes the transformation; True when jax found it."""
    if not self.installed:
      return False
    from jax.extend import xla as jx

    self.installed = False
    if registry.INSTALLED.get(self.name) is self:
      del registry.INSTALLED[self.name]
    registry.set_cache_key_settings()
    removed = bool(
      jx.clear_hlo_module_transformation(self.name, stage=self.stage, platforms=self.platforms)
    )
    registry.clear_jax_caches()
    return removed


def _probe_live(platforms: Sequence[str]) -> dict[str, Any]:
  """probe() on the first of `platforms` with a live device; not probed without one
  (a deviceless process: compile() probes with the program's device)."""
  import jax  # pylint: disable=import-outside-toplevel

  for platform in platforms:
    try:
      devices = jax.devices(platform)
    except RuntimeError:
      continue
    if devices:
      return flags.probe(devices[0])
  return {"per_op": None, "evidence": f"not probed: no live device of {platforms}"}


def _check_arguments(
  topology: Any,
  backends: Any,
  cost_table: Any,
  report: Any,
  platforms: Any,
  name: Any,
  per_op: Any,
  selection: ModuleType,
) -> tuple[tuple[str, ...], list[str]]:
  """(backends, platforms) as install() takes them; a HookError saying what was
  expected for anything else."""

  def strings(value: Any, what: str, example: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
      raise HookError(f"install's {what} is a sequence of names such as {example}, not {value!r}")
    bad = [v for v in value if not isinstance(v, str)]
    if bad:
      raise HookError(f"install's {what} holds names (str), not {bad[0]!r}")
    return list(value)

  if not isinstance(topology, (str, selection.Topology)):
    raise HookError(
      f'install\'s topology is a spec such as "1x1x8" or a Topology, not {topology!r}'
    )
  names = strings(backends, "backends", '("nccl", "peer")')
  if cost_table is not None and not isinstance(cost_table, (str, selection.CostTable)):
    raise HookError(
      f"install's cost_table is None, a file's path or a CostTable, not {cost_table!r}"
    )
  if report is not None and not isinstance(report, str):
    raise HookError(f"install's report is None or a file's path, not {report!r}")
  places = (
    [platforms]
    if isinstance(platforms, str)
    else strings(platforms, "platforms", '("cuda", "gpu")')
  )
  if not places:
    raise HookError("install's platforms names none")
  if not isinstance(name, str) or not name:
    raise HookError(f"install's name is a non-empty str, not {name!r}")
  if per_op is not None and not isinstance(per_op, bool):
    raise HookError(f"install's per_op is True, False or None (probe), not {per_op!r}")
  return tuple(names), places


def install(
  topology: "str | Topology",
  backends: Sequence[str] = ("nccl", "peer"),
  cost_table: "str | CostTable | None" = None,
  report: str | None = None,
  platforms: str | Sequence[str] = ("cuda", "gpu"),
  name: str = "nvshmem_opt_permute_modes",
  per_op: bool | None = None,
  trust_caller_mode: bool = False,
) -> Hook:
  """Registers the hook for every module jax compiles next (see the module docstring).

  topology: a spec such as "1x1x2" (slices x hosts x GPUs per host) or a parsed
  Topology; a spec without gpus_per_process gets it from jax's local devices
  (with_process_layout), and each program's devices' processes from jax
  (topology_for_devices); backends: the set the target XLA offers, NCCL first (a
  sequence, not a comma-joined str); cost_table: None (the core's default), a path,
  or a CostTable; report: a JSON file rewritten after each compile with the
  decisions; platforms: where jax registers the pass ("cpu" too for tests); per_op:
  whether the XLA runs each permute in its own mode, None to probe it (on the first
  platform with a live device, else at the first compile()); trust_caller_mode:
  keep a mode the caller set (compiler_options, XLA_FLAGS, a mark) that the core
  refuses, with a warning, instead of a HookError. One hook per platform: a second
  install on a platform that has one is refused. Returns a Hook. Every argument a
  caller gets wrong is a HookError saying what was expected.
  """
  selection = decide.import_selection()
  backends, names = _check_arguments(
    topology, backends, cost_table, report, platforms, name, per_op, selection
  )
  if name in registry.INSTALLED:
    raise HookError(
      f"a hook named {name!r} is already installed (topology "
      f"{registry.INSTALLED[name].topology}); call its uninstall() first, or "
      "install under another name"
    )
  known = tuple(decide.hook_modes(selection))
  bad = [b for b in backends if b not in known]
  if bad or "nccl" not in backends:
    raise HookError(f"backends {backends!r}: need nccl and only {known}")
  try:
    from jax.extend import xla as jx

    register = jx.register_hlo_module_transformation
  except (ImportError, AttributeError):
    import jax

    raise HookError(
      f"jax {jax.__version__} has no "
      "jax.extend.xla.register_hlo_module_transformation "
      "(needs jax >= 0.10.2)"
    ) from None
  taken = [(h, p) for h in registry.INSTALLED.values() for p in h.platforms if p in names]
  if taken:
    other, platform = taken[0]
    raise HookError(
      f"the hook {other.name!r} is installed on {platform} (topology {other.topology}): "
      "two hooks would each decide and record every compile; call its uninstall() first"
    )
  if isinstance(topology, str):
    import jax

    def parses(spec: str) -> bool:
      try:
        selection.parse_topology(spec)
      except selection.SelectionError:
        return False
      return True

    devices = sorted(jax.devices(), key=lambda d: d.id)
    topology = processes.with_process_layout(
      topology,
      len(jax.local_devices()),
      len(devices),
      # By device id, where the ids are 0..n-1 as XLA's device assignment names them.
      [d.process_index for d in devices]
      if [d.id for d in devices] == list(range(len(devices)))
      else None,
      parses,
    )
  try:
    topo = (
      processes.parse_topology(selection, topology, backends)
      if isinstance(topology, str)
      else topology
    )
    table = (
      cost_table
      if cost_table is not None and not isinstance(cost_table, str)
      else selection.load_cost_table(cost_table)
    )
    table = selection.with_backends(table, backends)
  except (selection.SelectionError, InputError) as e:
    raise HookError(str(e)) from None
  xla = (
    {"per_op": per_op, "evidence": "given by the caller"}
    if per_op is not None
    else _probe_live(names)
  )
  hook = Hook(
    name,
    jx.PipelineStage.PRE_SCHEDULER,
    names,
    selection,
    topo,
    table,
    backends,
    report,
    xla,
    trust_caller_mode=bool(trust_caller_mode),
  )
  # Register per platform: a name jax has no client for (e.g. "gpu" where the
  # plugin registers "cuda") is skipped; none at all is an error.
  registered: list[str] = []
  errors: list[str] = []
  for platform in names:
    try:
      register(hook, name=name, stage=hook.stage, platforms=[platform])
      registered.append(platform)
    except Exception as e:  # jax raises its own runtime error type
      errors.append(f"{platform}: {str(e).splitlines()[0]}")
  if not registered:
    raise HookError("no platform to register on: " + "; ".join(errors))
  hook.platforms = registered
  hook.installed = True
  registry.INSTALLED[name] = hook
  registry.set_cache_key_settings()
  # An executable jax compiled before (without the hook) stays in its in-process
  # caches, keyed by module, devices and options but no transformation: dropped.
  registry.clear_jax_caches()
  return hook
