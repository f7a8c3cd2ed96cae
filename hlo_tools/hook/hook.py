"""The Hook that jax calls inside its compile (with compile() and jit()), and install()."""

import json
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools import cli_io
from hlo_tools.errors import HookError
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
  ) -> None:
    self.name, self.stage, self.platforms = name, stage, list(platforms)
    self.topology, self.table, self.backends = topology, table, tuple(backends)
    self.report = report
    self.decisions: list[Record] = []
    self.calls: list[Record] = []
    self.programs: list[Record] = []
    self.xla = xla or {"per_op": None, "evidence": "not probed"}
    self._selection = selection
    self._lock = threading.Lock()
    self._compiling = 0  # compile() calls under way, which record their own decision
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
      else:  # decided and recorded; nothing written
        self._program(module.to_string(), call)
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
    if new_text is not None:
      module = xla_client.hlo.hlo_module_from_text(new_text)
      result = module.as_serialized_hlo_module_proto()
      call["permutes_out"] = text_edit.permute_modes(new_text)
    with self._lock:
      self.decisions.extend(records)
    return result

  def _program(self, text: str, call: Record) -> None:
    """A stock XLA: the program's one mode decided and recorded, nothing written
    (the flag of this compile is already set; compile() applies it)."""
    if self._compiling:
      return None  # compile() records its own decision
    marks = decide.user_marks(reader.parse_hlo_text(text))  # a mark no mode names: an error
    choice = program.program_choice(
      text, self.topology, self.table, self.backends, label=f"<{call['module']}>"
    )
    call["permutes"] = choice["permutes"]
    if not choice["permutes"]:
      return None
    mark_mode, mark_why = program.mark_policy(choice, marks) if marks else (None, "")
    mode = mark_mode or choice["mode"]
    word = next(w for w, m in flags.FLAG_WORDS.items() if m == mode)
    why = (
      "decided inside a compile, whose flag is already set: apply it with "
      f"XLA_FLAGS=--{flags.FLAG}={word} or compiler_options={{{flags.FLAG!r}: {mode!r}}}, "
      "or compile through hook.compile() / hook.jit()"
    )
    if marks:
      why += (
        "; " + ("kept the user's mark: " if mark_mode else "refused the marks' mode: ") + mark_why
      )
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
    self, lowered: "Lowered", compiler_options: Mapping[str, Any] | None = None
  ) -> "Compiled":
    """`lowered` (jax.jit(f).lower(...)) compiled with the program's best safe mode
    on a stock XLA (compile_program); the decision is kept in `programs`."""
    with self._lock:
      self._compiling += 1
    try:
      per_op = self.xla["per_op"]
      compiled, record = program.compile_program(
        lowered, self.topology, self.table, self.backends, compiler_options, per_op
      )
    finally:
      with self._lock:
        self._compiling -= 1
    if self.xla["per_op"] is None:
      self.xla = record["xla"]
    record["module"] = flags.module_name(flags.compiled_text(compiled))
    with self._lock:
      self.programs.append(record)
      self._write_report()
    return compiled

  # jax.jit's arguments that jit() passes on: each leaves a compiled program callable
  # with the call's dynamic arguments, which the cache key below is made of.
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

  def jit(self, fun: Callable[..., Any], **jit_kwargs: Any) -> Callable[..., Any]:
    """jax.jit(fun, **jit_kwargs) whose every new argument signature compiles
    through compile(). Static arguments (by position or name, as jax.jit resolves
    them from fun's signature) key the cache by value, the others by shape, dtype,
    weak type and sharding; keyword arguments are taken as jax.jit takes them.
    jax.jit arguments other than JIT_ARGUMENTS are refused up front."""
    import jax  # pylint: disable=import-outside-toplevel

    other = sorted(set(jit_kwargs) - set(self.JIT_ARGUMENTS))
    if other:
      raise HookError(
        f"hook.jit does not take jax.jit's {', '.join(other)} (it takes "
        f"{', '.join(self.JIT_ARGUMENTS)}); compile such a function with "
        "hook.compile(jax.jit(fun, ...).lower(...))"
      )
    jitted = jax.jit(fun, **jit_kwargs)
    nums, names = _static_arguments(fun, jit_kwargs)
    cache: dict[Hashable, Compiled] = {}

    def call(*args: Any, **kwargs: Any) -> Any:
      static = {i if i >= 0 else len(args) + i for i in nums}
      dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
      dyn_kwargs = {k: v for k, v in kwargs.items() if k not in names}
      fixed = (
        tuple((i, args[i]) for i in sorted(static) if 0 <= i < len(args)),
        tuple(sorted((k, v) for k, v in kwargs.items() if k in names)),
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
            str(getattr(x, "sharding", None)),
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
      if key not in cache:
        cache[key] = self.compile(jitted.lower(*args, **kwargs))
      return cache[key](*dyn_args, **dyn_kwargs)

    return call

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
    return bool(
      jx.clear_hlo_module_transformation(self.name, stage=self.stage, platforms=self.platforms)
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


def with_process_layout(spec: str, local_devices: int, all_devices: int) -> str:
  """`spec` with `:gpus_per_process=N` from jax's view of the processes: N is
  the number of devices this process drives (len(jax.local_devices())) when
  there are others elsewhere. Peer and symmetric memory need every device of the
  permute's clique (every device of the program, for a permute over all of it) in
  one process."""
  if "gpus_per_process" in spec or local_devices >= all_devices or local_devices < 1:
    return spec
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


def install(
  topology: "str | Topology",
  backends: Sequence[str] = ("nccl", "peer"),
  cost_table: "str | CostTable | None" = None,
  report: str | None = None,
  platforms: str | Sequence[str] = ("cuda", "gpu"),
  name: str = "nvshmem_opt_permute_modes",
  per_op: bool | None = None,
) -> Hook:
  """Registers the hook for every module jax compiles next (see the module docstring).

  topology: a spec such as "1x1x2" (slices x hosts x GPUs per host) or a parsed
  Topology; a spec without gpus_per_process gets it from jax's local devices
  (with_process_layout); backends: the set the target XLA offers, NCCL first; cost_table:
  None (the core's default), a path, or a CostTable; report: a JSON file
  rewritten after each compile with the decisions; platforms: where jax
  registers the pass ("cpu" too for tests); per_op: whether the XLA runs each
  permute in its own mode, None to probe it (on the first platform with a live
  device, else at the first compile()). Returns a Hook.
  """
  if name in registry.INSTALLED:
    raise HookError(
      f"a hook named {name!r} is already installed (topology "
      f"{registry.INSTALLED[name].topology}); call its uninstall() first, or "
      "install under another name"
    )
  selection = decide.import_selection()
  backends = tuple(backends)
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
  if isinstance(topology, str):
    import jax

    topology = with_process_layout(topology, len(jax.local_devices()), len(jax.devices()))
  try:
    topo = _parse_topology(selection, topology, backends) if isinstance(topology, str) else topology
    table = (
      cost_table
      if cost_table is not None and not isinstance(cost_table, str)
      else selection.load_cost_table(cost_table)
    )
    table = selection.with_backends(table, backends)
  except selection.SelectionError as e:
    raise HookError(str(e)) from None
  names = [platforms] if isinstance(platforms, str) else list(platforms)
  xla = (
    {"per_op": per_op, "evidence": "given by the caller"}
    if per_op is not None
    else _probe_live(names)
  )
  hook = Hook(
    name, jx.PipelineStage.PRE_SCHEDULER, names, selection, topo, table, backends, report, xla
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
  return hook
