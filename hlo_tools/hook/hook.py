"""The Hook that jax calls inside its compile (with compile() and jit()), and install()."""

import functools
import json
import re
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools import cli_io
from hlo_tools.errors import HookError, InputError
from hlo_tools.hlo import reader
from hlo_tools.hook import decide, flags, program, registry, text_edit
from hlo_tools.hook.decide import Record

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
    record["module"] = flags.module_name(flags.compiled_text(compiled))
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
    return topology_for_devices(self._selection, self.topology, self.backends, devices)

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
    cli_io.write_atomic(self.report, json.dumps(self.summary(), indent=1, default=str))

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


class JitFunction:
  """What hook.jit returns: jax.jit(fun, **jit_kwargs), whose calls compile through
  hook.compile, one compile per argument signature (static arguments by value, by
  position or name as jax.jit resolves them; the others by shape, dtype, weak type
  and sharding). `lower` gives a Lowered whose compile() is hook.compile's.

  Called with jax tracers (under jax.grad, jax.vmap, jax.checkpoint or inside
  another jax.jit) it is jax.jit(fun) itself: the function joins the traced program,
  and the compile of that program decides its mode: hook.compile or hook.jit of the
  outer function, one mode for all of it (the same decision as for that program
  written with plain jax.jit inside); a plain jax.jit's compile only meets the
  registered transformation (records the mode to set on a stock XLA, decides per
  permute on the series'): so under an eager jax.grad on a stock XLA no mode is
  applied (hook.jit(jax.grad(loss)) applies one; jax refuses compiler_options on
  the tangent jit it stages, jax/_src/pjit.py pjit_staging_rule). Under an eager
  jax.vmap without an axis name the batched program compiles through
  hook.compile (_under_vmap), unless shardings or donations were given."""

  _VMAP_PLAIN = {
    "in_shardings",
    "out_shardings",
    "donate_argnums",
    "donate_argnames",
    "keep_unused",
    "inline",
  }

  def __init__(self, hook: "Hook", fun: Callable[..., Any], jit_kwargs: Mapping[str, Any]) -> None:
    import jax  # pylint: disable=import-outside-toplevel

    self._hook, self._fun = hook, fun
    self._jitted = jax.jit(fun, **jit_kwargs)
    self._nums, self._names = _static_arguments(fun, jit_kwargs)
    self._cache: dict[Hashable, Compiled] = {}
    self._jit_kwargs = dict(jit_kwargs)
    # Under an eager jax.vmap: the batched function's JitFunction per batching.
    self._vmapped: dict[Hashable, JitFunction] = {}
    functools.update_wrapper(self, fun)

  def _key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Hashable, tuple, dict]:
    import jax  # pylint: disable=import-outside-toplevel

    static = {i if i >= 0 else len(args) + i for i in self._nums}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._names}
    fixed = (
      tuple((i, args[i]) for i in sorted(static) if 0 <= i < len(args)),
      tuple(sorted((k, v) for k, v in kwargs.items() if k in self._names)),
    )
    leaves, tree = jax.tree.flatten((dyn_args, dyn_kwargs))
    key = (
      len(args),
      fixed,
      tree,
      tuple(
        (
          type(x).__name__,
          getattr(x, "shape", None),
          str(getattr(x, "dtype", "")),
          getattr(x, "weak_type", None),
          # The sharding itself: its printed form names no device, and two meshes
          # of one shape on other devices need their own executable.
          getattr(x, "sharding", None),
        )
        for x in leaves
      ),
    )
    try:
      hash(key)
    except TypeError:
      raise HookError(
        "a static argument of hook.jit is not hashable, as jax.jit needs it to be"
      ) from None
    return key, dyn_args, dyn_kwargs

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    import jax  # pylint: disable=import-outside-toplevel

    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
      # Shardings and donations of the unbatched arguments do not carry over to
      # jax.vmap(fun) as written: such a function keeps jax's own batching.
      plain = self._VMAP_PLAIN & set(self._jit_kwargs)
      if not plain and _eager_vmap(jax.tree.leaves((args, kwargs))):
        return self._under_vmap(args, kwargs)
      return self._jitted(*args, **kwargs)  # part of a traced program: see the class
    key, dyn_args, dyn_kwargs = self._key(args, kwargs)
    compiled = self._cache.get(key)
    if compiled is None:
      compiled = self._cache[key] = self._hook.compile(self._jitted.lower(*args, **kwargs))
    return compiled(*dyn_args, **dyn_kwargs)

  def _under_vmap(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A call under an eager jax.vmap: the batched program, jax.jit(jax.vmap(fun)),
    compiled through hook.compile (decided, compiled once with its mode, checked)
    and called on the concrete batched arrays. jax's own batching rule would bind
    the jit one level up and compile it without the hook (pjit.py _pjit_batcher);
    custom_vmap hands its rule those concrete arrays instead, each batched one
    with its batch axis first."""
    import jax  # pylint: disable=import-outside-toplevel
    from jax.custom_batching import custom_vmap  # pylint: disable=import-outside-toplevel

    static = {i if i >= 0 else len(args) + i for i in self._nums}
    fixed_args = tuple((i, a) for i, a in enumerate(args) if i in static)
    fixed_kwargs = tuple(sorted((k, v) for k, v in kwargs.items() if k in self._names))
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._names}
    fixed = (fixed_args, fixed_kwargs)
    try:
      hash(fixed)
    except TypeError:
      raise HookError(
        "a static argument of hook.jit is not hashable, as jax.jit needs it to be"
      ) from None

    def call(dyn: tuple[Any, ...], named: dict[str, Any]) -> Any:
      it, at = iter(dyn), dict(fixed_args)
      full = [at[i] if i in at else next(it) for i in range(len(args))]
      return self._fun(*full, **dict(fixed_kwargs), **named)

    batched = custom_vmap(call)

    @batched.def_vmap
    def rule(axis_size: int, in_batched: Any, dyn: Any, named: Any) -> Any:
      axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
      key = (fixed, axis_size, jax.tree.structure(axes), tuple(jax.tree.leaves(axes)))
      inner = self._vmapped.get(key)
      if inner is None:
        options = {k: v for k, v in self._jit_kwargs.items() if k == "compiler_options"}
        vmapped = jax.vmap(call, in_axes=axes, axis_size=axis_size)
        inner = self._vmapped[key] = JitFunction(self._hook, vmapped, options)
      out = inner(dyn, named)
      return out, jax.tree.map(lambda _: True, out)

    return batched(dyn_args, dyn_kwargs)

  def lower(self, *args: Any, **kwargs: Any) -> "HookLowered":
    """jax.jit(fun).lower(...), whose compile() goes through hook.compile."""
    return HookLowered(self._hook, self._jitted.lower(*args, **kwargs))

  def trace(self, *args: Any, **kwargs: Any) -> Any:
    return self._jitted.trace(*args, **kwargs)

  def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
    return self._jitted.eval_shape(*args, **kwargs)

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    """A method, as jax.jit's: bound to the instance (its first argument)."""
    if obj is None:
      return self
    return functools.partial(self, obj)


class HookLowered:
  """A jax.stages.Lowered whose compile() is hook.compile's; the rest is the Lowered's."""

  def __init__(self, hook: "Hook", lowered: "Lowered") -> None:
    self._hook, self.lowered = hook, lowered

  def compile(self, compiler_options: Mapping[str, Any] | None = None) -> "Compiled":
    return self._hook.compile(self.lowered, compiler_options)

  def __getattr__(self, name: str) -> Any:
    return getattr(self.lowered, name)


def topology_for_devices(
  selection: ModuleType, topology: "Topology", backends: Sequence[str], devices: Sequence[Any]
) -> "tuple[Topology, str | None]":
  """(the topology to decide with, why it differs from `topology`, or None) for a
  program on jax's `devices`. Each device's process is jax's (process_index): where
  the program's devices span processes of fewer GPUs than the topology's
  gpus_per_process, the process size is jax's; where their processes do not hold
  consecutive ids of one size, each GPU is taken as its own process (no permute
  between two of them then runs in peer or symmetric memory)."""
  procs: dict[int, list[int]] = {}
  for d in devices:
    procs.setdefault(int(getattr(d, "process_index", 0)), []).append(int(d.id))
  if len(procs) < 2:
    return topology, None
  sizes = {len(ids) for ids in procs.values()}
  size = sizes.pop() if len(sizes) == 1 else 1
  if size > 1 and any(len({i // size for i in ids}) != 1 for ids in procs.values()):
    size = 1
  stated = topology.gpus_per_process
  if size >= stated:
    return topology, None
  spec = re.sub(r":gpus_per_process=\d+", "", str(topology)) + f":gpus_per_process={size}"
  try:
    new = _parse_topology(selection, spec, backends)
  except selection.SelectionError as e:
    raise HookError(f"the program's devices in jax's processes: {e}") from None
  where = "; ".join(f"process {p}: devices {ids}" for p, ids in sorted(procs.items()))
  return new, (
    f"jax puts the program's devices in {len(procs)} processes ({where}), where the "
    f"topology {topology} has {stated} GPUs per process: decided with {spec}"
  )


def _eager_vmap(leaves: Sequence[Any]) -> bool:
  """Whether the tracers among `leaves` are all of one jax.vmap applied eagerly
  (its trace's parent evaluates) with no axis name that a collective inside could
  use. Reads jax's BatchTrace (jax/_src/interpreters/batching.py, 0.10.2); any
  other layout is False (the plain jax.jit path)."""
  try:
    from jax._src import core  # pylint: disable=import-outside-toplevel
    from jax._src.interpreters import batching  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  tracers = [x for x in leaves if isinstance(x, core.Tracer)]
  if not all(isinstance(t, batching.BatchTracer) for t in tracers):
    return False
  if len({id(t._trace) for t in tracers}) != 1:
    return False
  trace = tracers[0]._trace
  data = getattr(trace, "axis_data", None)
  return (
    isinstance(getattr(trace, "parent_trace", None), core.EvalTrace)
    and data is not None
    and getattr(data, "name", None) is core.no_axis_name
    and getattr(data, "spmd_name", None) is None
    and getattr(data, "explicit_mesh_axis", None) is None
  )


def _static_arguments(
  fun: Callable[..., Any], jit_kwargs: Mapping[str, Any]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
  """(static positions, static names) as jax.jit resolves them from fun's signature
  (jax/_src/pjit.py, api_util.resolve_argnums)."""
  try:
    from jax._src import api_util  # pylint: disable=import-outside-toplevel

    signature = api_util.fun_signature(fun)
    _, _, nums, names = api_util.resolve_argnums(
      fun,
      signature,
      jit_kwargs.get("donate_argnums"),
      jit_kwargs.get("donate_argnames"),
      jit_kwargs.get("static_argnums"),
      jit_kwargs.get("static_argnames"),
    )
  except (ImportError, AttributeError) as e:
    raise HookError(f"hook.jit needs jax's own reading of static arguments: {e}") from None
  return tuple(nums), tuple(names)


def with_process_layout(
  spec: str,
  local_devices: int,
  all_devices: int,
  processes: Sequence[int] | None = None,
  parses: Callable[[str], bool] | None = None,
) -> str:
  """`spec` with jax's view of the processes where there are several: each device's
  own process (`:processes=`, `processes` indexed by device id, from each jax
  device's process_index) where the spec has exactly those devices (`parses` says
  whether the core takes it), else `:gpus_per_process=N`, N the devices this
  process drives (len(jax.local_devices())). Device i need not live in process
  i, so the map is the fact; the count is the fallback. Peer and symmetric memory
  need every device of the permute's clique in one process, NVSHMEM one GPU a
  process."""
  if "gpus_per_process" in spec or ":processes=" in spec:
    return spec
  if local_devices >= all_devices or local_devices < 1:
    return spec
  if processes and len(set(processes)) > 1:
    stated = f"{spec}:processes={','.join(map(str, processes))}"
    if parses is None or parses(stated):
      return stated
  return f"{spec}:gpus_per_process={local_devices}"


def _parse_topology(selection: ModuleType, spec: str, backends: Sequence[str]) -> "Topology":
  """The core's Topology of `spec`, an unstated process layout taken as the backend
  set's default."""
  topology: Topology = selection.parse_topology(spec, ",".join(backends))
  return topology


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
    topology = with_process_layout(
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
    topo = _parse_topology(selection, topology, backends) if isinstance(topology, str) else topology
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
