"""The selection core inside jax's own compile (jax >= 0.10.2): one collectives mode
for the whole program on a stock XLA, one per collective-permute on an XLA with the
patch series for jax v0.11.0's XLA.

    from hlo_tools import jax_hook
    hook = jax_hook.install(topology="1x1x2", backends=("nccl", "peer"))
    compiled = hook.compile(jax.jit(f).lower(x))  # the program's best safe mode applied
    hook.uninstall()

What each XLA honours. Every XLA that jax ships builds a CollectivePermuteThunk with
the flag `xla_gpu_collective_permute_mode` (thunk_emitter.cc:1824 at 5a9e73cb, jax
0.10.2; :1948 at 131bf41a, jax 0.11.0; :2188 at 183fa00c); a permute's own
`collective_backend_config.collectives_mode` only moves a SYMMETRIC permute's
buffers into the collective memory (gpu_memory_space_assignment.cc:145 and :130).
So on a stock XLA the mode is one per compiled program: `compile` (or `jit`) reads
the program's permutes from a first compile, lets the core choose the one mode
every permute can run that is modeled fastest in sum (model.program_mode), and
compiles again with it in jax's compiler_options when it is not the mode the first
compile ran; it writes no mode on any op. A program compiled through plain
jax.jit still meets the registered transformation, which then only records, in
`programs`, the mode to set for it (XLA_FLAGS or compiler_options): the flag of a
compile under way cannot change. With the series the thunk runs the op's
own mode; the transformation that `install` registers (before the scheduler, where
jax runs it: a compile on a live client) then writes each permute's choice into its
backend_config and as the frontend attribute _xla_collectives_mode, and a permute
the user marked (set_xla_metadata) keeps its mode.

Which XLA is which is asked of the XLA itself (`probe`): a one-device permute marked
`_xla_collectives_mode="peer"` is compiled with the flag at its default; the
series' assigner writes PEER into its config (the same patch makes the thunk read
it), a stock assigner leaves the config as it was (collective_backend_assigner.cc:51).

A deviceless compile (jax.experimental.topologies.get_topology_desc) runs no
registered transformation: jax 0.10.2 registers it only on a PjRt client, and the
compile-only client of a topology refuses it ("implemented for a PjRt-compatible
backend only"). `compile` needs none, so it works there too.

Only pure Python and the core's binding are imported (no TensorFlow): the
module is read with hlo_tools.hlo.reader, edited as text and re-parsed by jaxlib.
A module the hook cannot read or rewrite is left as jax built it, and the
error is recorded in the handle's `calls`.
"""

import json
import os
import re
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hlo_tools import cli_io
from hlo_tools.errors import HookError
from hlo_tools.hlo import reader
from hlo_tools.model import collectives, modes

if TYPE_CHECKING:  # jax and the binding are imported when first used
  import jax
  from jax.stages import Compiled, Lowered
  from hlo_tools._selection_core import CostTable, Topology

# The core's decision for one permute, a record of the hook's (JSON-friendly).
Decision = dict[str, Any]
Record = dict[str, Any]

_PERMUTE_RE = re.compile(r"\s(collective-permute(?:-start)?)\(")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where a binding built for another interpreter may sit (see
# scripts/build_core_py312.sh); searched only when the package has none.
CORE_DIRS_ENV = "NVSHMEM_OPT_CORE_DIR"
_CARRY_DIRS = (".carry_py312",)


# name -> the installed Hook: jax would run a second registration under one name as
# a second transformation, deciding every permute twice.
_INSTALLED: "dict[str, Hook]" = {}


# ---------------------------------------------------------------------------
# Core access

def import_selection() -> ModuleType:
  """hlo_tools.selection, looking also in carried binding folders."""
  try:
    from hlo_tools import selection
    return selection
  except ImportError:
    pass
  import hlo_tools
  dirs = [d for d in os.environ.get(CORE_DIRS_ENV, "").split(os.pathsep) if d]
  dirs += [os.path.join(_REPO, d) for d in _CARRY_DIRS]
  for d in dirs:
    if os.path.isdir(d) and d not in hlo_tools.__path__:
      hlo_tools.__path__.append(d)
  from hlo_tools import selection  # raises ImportError naming what is missing
  return selection


def hook_modes(selection: ModuleType) -> dict[str, tuple[str | None, str]]:
  """{backend: (collectives_mode or None for NCCL, _xla_collectives_mode value)} for
  the backends the hook writes (those with a mode attribute: the XLA of jax >=
  0.10.2), from the core's records."""
  return {n: (r["collectives_mode"] or None, r["mode_attribute"])
          for n, r in selection.BACKEND_INFO.items() if r["mode_attribute"]}


def operand_count(module: reader.HloModule, permute: collectives.CollectivePermute) -> int:
  """Buffers the permute sends: its data operands (the in-place form sends one)."""
  comp = module.computation(permute.computation)
  instr = next(i for i in comp.instructions if i.name == permute.start)
  ops = instr.operand_instructions()
  if instr.opcode != "async-start" and len(ops) == 4 and ops[2].shape.is_tuple:
    return 1
  return max(len(ops), 1)


def decide_mode(selection: ModuleType, topology: "Topology", table: "CostTable",
                backends: Sequence[str], permute: collectives.CollectivePermute,
                buffers: int = 1) -> tuple[str, Decision]:
  """(backend name, the core's decision dict) for one CollectivePermute: the core's
  plan over the backend set names the backend; one the hook writes no mode for runs
  as NCCL."""
  pairs = [tuple(p) for p in permute.pairs]
  # Under a conditional's branch, as nvshmem-opt's planner tells the core.
  place = "branch" if permute.branch else "anywhere"
  d: Decision = selection.decide(topology, table, permute.bytes_per_device, pairs,
                                 backends=tuple(backends), buffers=buffers, place=place)
  backend = d.get("backend") or d.get("plan")
  return (backend if backend in hook_modes(selection) else "nccl"), d


# ---------------------------------------------------------------------------
# Text editing

def _match_brace(text: str, start: int) -> int:
  """Index just past the JSON object that starts at text[start] == '{'."""
  depth, i, in_str = 0, start, False
  while i < len(text):
    c = text[i]
    if in_str:
      if c == "\\":
        i += 1
      elif c == '"':
        in_str = False
    elif c == '"':
      in_str = True
    elif c == "{":
      depth += 1
    elif c == "}":
      depth -= 1
      if depth == 0:
        return i + 1
    i += 1
  raise ValueError("unbalanced backend_config")


def set_line_mode(line: str, mode: str | None) -> str:
  """One instruction line with collectives_mode = mode (None: field removed).

  The rest of the backend_config JSON is kept as it was (key order included).
  """
  key = "backend_config="
  at = line.find(key + "{")
  begin: int | None
  end: int | None
  config: dict[str, Any]
  if at >= 0:
    begin = at + len(key)
    end = _match_brace(line, begin)
    config = json.loads(line[begin:end])
  elif mode is None:
    return line
  else:
    begin = end = None
    config = {}
  cbc = config.setdefault("collective_backend_config", {})
  if mode is None:
    cbc.pop("collectives_mode", None)
  else:
    cbc["collectives_mode"] = mode
  blob = json.dumps(config, separators=(",", ":"))
  if begin is None:
    return line.rstrip() + ", " + key + blob
  return line[:begin] + blob + line[end:]


def line_mode(line: str) -> str | None:
  """collectives_mode of one instruction line, None when unset."""
  at = line.find("backend_config={")
  if at < 0:
    return None
  begin = at + len("backend_config=")
  config = json.loads(line[begin:_match_brace(line, begin)])
  mode = (config.get("collective_backend_config") or {}).get("collectives_mode")
  return None if mode in (None, "COLLECTIVES_MODE_INVALID") else str(mode)


_ATTRS_RE = re.compile(r"frontend_attributes=\{")


def set_line_attribute(line: str, value: str) -> str:
  """One instruction line with frontend attribute _xla_collectives_mode=value, the
  language of the patched XLA's assigner; the other attributes are kept."""
  item = f'{modes.ATTRIBUTE}="{value}"'
  m = _ATTRS_RE.search(line)
  if m is None:
    at = line.find(", backend_config=")
    at = at if at >= 0 else len(line.rstrip())
    return line[:at] + ", frontend_attributes={" + item + "}" + line[at:]
  begin, end = m.end() - 1, _match_brace(line, m.end() - 1)
  old = re.sub(rf'{modes.ATTRIBUTE}="[^"]*",?', "", line[begin + 1:end - 1]).rstrip(",")
  return line[:begin] + "{" + ",".join(x for x in (item, old) if x) + "}" + line[end:]


def permute_modes(text: str) -> dict[str, int]:
  """{backend/mode summary: count} of the collective-permutes in HLO text."""
  found: dict[str, int] = {}
  for line in text.split("\n"):
    m = _PERMUTE_RE.search(line)
    if not m:
      continue
    try:
      mode = line_mode(line) or "NCCL"
    except ValueError:
      mode = "UNPARSED"
    key = f"{m.group(1)}:{mode}"
    found[key] = found.get(key, 0) + 1
  return found


def _permute_line(module: reader.HloModule, permute: collectives.CollectivePermute) -> int:
  """1-based line of the instruction that carries the permute's backend_config."""
  if permute.form == "async-wrapped" and permute.wrapped_computation:
    return module.computation(permute.wrapped_computation).root.line
  return permute.start_line


def transform_text(text: str, selection: ModuleType, topology: "Topology", table: "CostTable",
                   backends: Sequence[str]) -> tuple[str | None, list[Record]]:
  """(new text or None when unchanged, [decision records]) for one module."""
  module = reader.parse_hlo_text(text)
  lines = text.split("\n")
  records: list[Record] = []
  changed = False
  written = hook_modes(selection)
  for permute in collectives.collective_permutes(module):
    buffers = operand_count(module, permute)
    backend, decision = decide_mode(selection, topology, table, backends, permute,
                                    buffers)
    # A permute the user marked keeps its mode, as the patched assigner keeps it.
    start = next(i for i in module.computation(permute.computation).instructions
                 if i.name == permute.start)
    asked = modes.requested(start)
    if asked and asked["mode"]:
      backend = {m: b for b, (m, _) in written.items() if m}.get(asked["mode"], "nccl")
      decision = {**decision, "reason": f"{modes.ATTRIBUTE}=\"{asked['attribute']}\" "
                  f"on the permute ({decision.get('reason')})"}
    at = _permute_line(module, permute) - 1
    mode, value = written[backend]
    new = set_line_attribute(set_line_mode(lines[at], mode), value)
    changed |= new != lines[at]
    lines[at] = new
    records.append({"module": module.name, "permute": permute.start,
                    "bytes": permute.bytes_per_device, "buffers": buffers,
                    "pairs": [list(p) for p in permute.pairs],
                    "in_loop": permute.while_loop is not None,
                    "backend": backend, "mode": mode,
                    "plan": decision.get("plan"),
                    "reason": decision.get("reason"),
                    "modeled_us": decision.get("backend_us"),
                    "refused": decision.get("refused")})
  return ("\n".join(lines) if changed else None), records


# ---------------------------------------------------------------------------
# What the XLA honours

# (platform, platform_version) -> probe(): one probe per XLA in a process.
_PROBED: dict[tuple[str, str], dict[str, Any]] = {}
# Set while a probe compiles, so that an installed transformation leaves it alone
# (not thread-local: XLA may run the transformation on a thread of its own).
_STATE = {"probing": 0}
_FLAG = "xla_gpu_collective_permute_mode"
_DEFAULT_MODE = "COLLECTIVES_PRIVATE_MEMORY"
_FLAG_WORDS = {w: f"COLLECTIVES_{w.upper()}_MEMORY" for w in ("private", "symmetric", "peer")}


def probe(device: "jax.Device") -> dict[str, Any]:
  """Whether the XLA that compiles for `device` runs a permute in its own mode.

  Compiles a one-device permute marked _xla_collectives_mode="peer", the flag
  at XLA's default: {"per_op": True} when the compiled permute's config says
  PEER (the series' assigner took the mark), False when it carries no mode (a
  stock assigner reads no mark), with the evidence."""
  client = device.client
  key = (client.platform, client.platform_version)
  if key not in _PROBED:
    _STATE["probing"] += 1
    try:
      found = permute_modes(_probe_text(device))
    finally:
      _STATE["probing"] -= 1
    per_op = any(k.endswith(":COLLECTIVES_PEER_MEMORY") for k in found)
    _PROBED[key] = {
        "per_op": per_op, "platform": client.platform,
        "evidence": (f"a permute marked {modes.ATTRIBUTE}=\"peer\" compiled with "
                     f"{_FLAG}={_DEFAULT_MODE} came out as {found}: "
                     + ("the assigner took the mark, so the thunk runs each op's own "
                        "mode (the series)" if per_op else
                        "the mark was not read; every permute runs the flag's mode "
                        "(a stock XLA)"))}
  return _PROBED[key]


def _text(compiled: "Compiled") -> str:
  """The compiled module's HLO text."""
  text = compiled.as_text()
  if text is None:
    raise HookError("jax printed no HLO text of a compiled program")
  return text


def _probe_text(device: "jax.Device") -> str:
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from jax.experimental.xla_metadata import set_xla_metadata  # pylint: disable=import-outside-toplevel
  from jax.sharding import Mesh, NamedSharding, PartitionSpec  # pylint: disable=import-outside-toplevel
  mesh = Mesh(np.array([device]), ("p",))

  def body(x: jax.Array) -> jax.Array:
    with set_xla_metadata(**{modes.ATTRIBUTE: "peer"}):
      return jax.lax.ppermute(x, "p", [(0, 0)])

  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec("p"),
                            out_specs=PartitionSpec("p")))
  x = jax.ShapeDtypeStruct((256,), np.float32,
                           sharding=NamedSharding(mesh, PartitionSpec("p")))
  return _text(f.lower(x).compile({_FLAG: _DEFAULT_MODE}))


def _a_device(compiled: "Compiled") -> "jax.Device":
  """One device the compiled program runs on (a compile-only one when deviceless)."""
  import jax  # pylint: disable=import-outside-toplevel
  shardings = jax.tree.leaves(compiled.input_shardings) + \
      jax.tree.leaves(compiled.output_shardings)
  for sharding in shardings:
    devices = getattr(sharding, "device_set", None)
    if devices:
      return min(devices, key=lambda d: d.id)
  raise HookError("the compiled program names no device to probe its XLA with")


def _module_name(text: str) -> str:
  head = text.split("\n", 1)[0].split()
  return head[1].rstrip(",") if len(head) > 1 and head[0] == "HloModule" else "module"


def flag_in_effect(compiler_options: Mapping[str, Any] | None) -> tuple[str, str]:
  """(the permute mode a compile with these options runs, where it comes from):
  its compiler_options, else XLA_FLAGS, else XLA's default."""
  if compiler_options and _FLAG in compiler_options:
    return str(compiler_options[_FLAG]), "compiler_options"
  m = re.search(rf"--{_FLAG}=(\S+)", os.environ.get("XLA_FLAGS", ""))
  if m:  # XLA_FLAGS spells it private|symmetric|peer, any case
    word = m.group(1).lower()
    return _FLAG_WORDS.get(word, m.group(1)), "XLA_FLAGS"
  return _DEFAULT_MODE, "XLA's default"


# ---------------------------------------------------------------------------
# One mode for the program (stock XLA)

def program_choice(text: str, topology: "Topology", table: "CostTable",
                   backends: Sequence[str], label: str = "<module>") -> dict[str, Any]:
  """model.program_mode.choose on the module in HLO `text` (import_selection first:
  the model imports the binding)."""
  from hlo_tools.model import decisions, program_mode, sources  # pylint: disable=import-outside-toplevel
  source = sources.resolve_partitions(sources.read_text(None, text, label), topology)
  perms = decisions.analyze(source, topology, table)
  choice: dict[str, Any] = program_mode.choose(perms, source, topology, table, backends)
  return choice


def compile_program(lowered: "Lowered", topology: "Topology", table: "CostTable",
                    backends: Sequence[str],
                    compiler_options: Mapping[str, Any] | None = None,
                    per_op: bool | None = None) -> tuple["Compiled", Record]:
  """(compiled, record): `lowered` compiled with the program's one mode applied.

  A first compile with the caller's options gives the program as XLA optimized
  it; on a stock XLA the core chooses its mode from that, and a second compile
  applies it through compiler_options when it differs from the mode the first
  ran. A mode the caller set in compiler_options is kept. On the series' XLA
  (per_op, else probed) the first compile stands: the registered transformation
  decides per op."""
  import_selection()
  options = dict(compiler_options or {})
  compiled = lowered.compile(options or None)
  xla = {"per_op": per_op, "evidence": "given by the caller"} if per_op is not None \
      else probe(_a_device(compiled))
  text = _text(compiled)
  choice = program_choice(text, topology, table, backends, label=f"<{_module_name(text)}>")
  ran, ran_from = flag_in_effect(options)
  record: Record = {"xla": xla, "program": choice, "first_compile_mode": ran,
            "first_compile_mode_from": ran_from}
  if xla["per_op"]:
    record["applied"] = None
    record["why"] = ("this XLA runs each permute in its own mode: the per-op "
                     "transformation decides, not one mode for the program")
    return compiled, record
  if ran_from == "compiler_options":
    record["applied"] = ran
    record["why"] = f"kept the caller's compiler_options {_FLAG}={ran}"
    refused = next((m["refused"] for m in choice["modes"].values()
                    if m["mode"] == ran and m["refused"]), None)
    if refused:
      record["why"] += f", which the core refuses ({refused})"
    return compiled, record
  record["applied"] = choice["mode"]
  record["why"] = choice["why"]
  if choice["mode"] != ran:
    compiled = lowered.compile({**options, _FLAG: choice["mode"]})
    text = _text(compiled)
  record["compiled_permutes"] = permute_modes(text)
  return compiled, record


# ---------------------------------------------------------------------------
# Registration

class Hook:
  """An installed transformation: decisions and calls so far; compile(), jit(),
  uninstall(). `xla`: what probe() found of the XLA (per_op None: not probed)."""

  def __init__(self, name: str, stage: Any, platforms: Sequence[str], selection: ModuleType,
               topology: "Topology", table: "CostTable", backends: Sequence[str],
               report: str | None, xla: dict[str, Any] | None = None) -> None:
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

  def __call__(self, proto_bytes: bytes) -> bytes | None:
    if _STATE["probing"]:
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
    new_text, records = transform_text(text, self._selection, self.topology, self.table,
                                       self.backends)
    call["permutes"] = len(records)
    result = None
    if new_text is not None:
      module = xla_client.hlo.hlo_module_from_text(new_text)
      result = module.as_serialized_hlo_module_proto()
      call["permutes_out"] = permute_modes(new_text)
    with self._lock:
      self.decisions.extend(records)
    return result

  def _program(self, text: str, call: Record) -> None:
    """A stock XLA: the program's one mode decided and recorded, nothing written
    (the flag of this compile is already set; compile() applies it)."""
    if self._compiling:
      return None  # compile() records its own decision
    choice = program_choice(text, self.topology, self.table, self.backends,
                            label=f"<{call['module']}>")
    call["permutes"] = choice["permutes"]
    if not choice["permutes"]:
      return None
    with self._lock:
      self.programs.append({"module": call["module"], "program": choice, "applied": None,
                            "why": "decided inside a compile, whose flag is already "
                            f"set: apply it with {choice['xla_flags']}, or compile "
                            "through hook.compile() / hook.jit()"})
    return None

  def compile(self, lowered: "Lowered", compiler_options: Mapping[str, Any] | None = None
              ) -> "Compiled":
    """`lowered` (jax.jit(f).lower(...)) compiled with the program's best safe mode
    on a stock XLA (compile_program); the decision is kept in `programs`."""
    with self._lock:
      self._compiling += 1
    try:
      per_op = self.xla["per_op"]
      compiled, record = compile_program(lowered, self.topology, self.table,
                                         self.backends, compiler_options, per_op)
    finally:
      with self._lock:
        self._compiling -= 1
    if self.xla["per_op"] is None:
      self.xla = record["xla"]
    record["module"] = _module_name(_text(compiled))
    with self._lock:
      self.programs.append(record)
      self._write_report()
    return compiled

  def jit(self, fun: Callable[..., Any], **jit_kwargs: Any) -> Callable[..., Any]:
    """jax.jit(fun, **jit_kwargs) whose every new argument signature compiles
    through compile()."""
    import jax  # pylint: disable=import-outside-toplevel
    jitted = jax.jit(fun, **jit_kwargs)
    cache: dict[Hashable, Compiled] = {}

    def call(*args: Any) -> Any:
      leaves, tree = jax.tree.flatten(args)
      key = (tree, tuple((getattr(x, "shape", None), str(getattr(x, "dtype", type(x))),
                          str(getattr(x, "sharding", None))) for x in leaves))
      if key not in cache:
        cache[key] = self.compile(jitted.lower(*args))
      return cache[key](*args)

    return call

  def summary(self) -> Record:
    return {"name": self.name, "topology": str(self.topology),
            "backends": list(self.backends), "xla": self.xla, "calls": list(self.calls),
            "decisions": list(self.decisions), "programs": list(self.programs)}

  def _write_report(self) -> None:
    if not self.report:
      return
    cli_io.write_atomic(self.report,
                        json.dumps(self.summary(), indent=1, default=str))

  def uninstall(self) -> bool:
    """Removes the transformation; True when jax found it."""
    if not self.installed:
      return False
    from jax.extend import xla as jx
    self.installed = False
    if _INSTALLED.get(self.name) is self:
      del _INSTALLED[self.name]
    return bool(jx.clear_hlo_module_transformation(
        self.name, stage=self.stage, platforms=self.platforms))


def with_process_layout(spec: str, local_devices: int, all_devices: int) -> str:
  """`spec` with `:gpus_per_process=N` from jax's view of the processes: N is
  the number of devices this process drives (len(jax.local_devices())) when
  there are others elsewhere. Peer and symmetric memory need every device of a
  permute in one process; XLA runs them as NCCL otherwise."""
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
      return probe(devices[0])
  return {"per_op": None, "evidence": f"not probed: no live device of {platforms}"}


def install(topology: "str | Topology", backends: Sequence[str] = ("nccl", "peer"),
            cost_table: "str | CostTable | None" = None, report: str | None = None,
            platforms: str | Sequence[str] = ("cuda", "gpu"),
            name: str = "nvshmem_opt_permute_modes", per_op: bool | None = None) -> Hook:
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
  if name in _INSTALLED:
    raise HookError(f"a hook named {name!r} is already installed (topology "
                    f"{_INSTALLED[name].topology}); call its uninstall() first, or "
                    "install under another name")
  selection = import_selection()
  backends = tuple(backends)
  known = tuple(hook_modes(selection))
  bad = [b for b in backends if b not in known]
  if bad or "nccl" not in backends:
    raise HookError(f"backends {backends!r}: need nccl and only {known}")
  try:
    from jax.extend import xla as jx
    register = jx.register_hlo_module_transformation
  except (ImportError, AttributeError):
    import jax
    raise HookError(f"jax {jax.__version__} has no "
                    "jax.extend.xla.register_hlo_module_transformation "
                    "(needs jax >= 0.10.2)") from None
  if isinstance(topology, str):
    import jax
    topology = with_process_layout(topology, len(jax.local_devices()),
                                   len(jax.devices()))
  try:
    topo = (_parse_topology(selection, topology, backends) if isinstance(topology, str)
            else topology)
    table = (cost_table if cost_table is not None and not isinstance(cost_table, str)
             else selection.load_cost_table(cost_table))
    table = selection.with_backends(table, backends)
  except selection.SelectionError as e:
    raise HookError(str(e)) from None
  names = [platforms] if isinstance(platforms, str) else list(platforms)
  xla = ({"per_op": per_op, "evidence": "given by the caller"} if per_op is not None
         else _probe_live(names))
  hook = Hook(name, jx.PipelineStage.PRE_SCHEDULER, names, selection, topo,
              table, backends, report, xla)
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
  _INSTALLED[name] = hook
  return hook
