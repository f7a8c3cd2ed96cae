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
backend only"). `compile` needs none, so it works there too; on the series' XLA it
then applies one mode for the program, as on a stock XLA, and its record says so.

The mode a compile ran is what XLA took: a compile's compiler_options over those
given to jax.jit (jax merges the two), else XLA_FLAGS as XLA tokenizes it (the last
flag wins), else XLA's default; on a stock XLA the compiled permutes, whose configs
carry the flag's mode, have the last word. A user's mark (set_xla_metadata's
_xla_collectives_mode) is kept: on a stock XLA, which reads none, as the program's
mode where the marks agree and the program can run it, else the record names the
permutes that do not run as marked; a mark that names no mode is an error, as it is
in the series' compile.

jax's persistent compilation cache keys an executable by its compile options, not
by the transformations registered when it was compiled: while a hook is installed,
its settings are part of every key (jax's cache_key.custom_hook), so no executable
compiled without it, or with other settings, is served to it.

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
  return {
    n: (r["collectives_mode"] or None, r["mode_attribute"])
    for n, r in selection.BACKEND_INFO.items()
    if r["mode_attribute"]
  }


def operand_count(module: reader.HloModule, permute: collectives.CollectivePermute) -> int:
  """Buffers the permute sends: its data operands (the in-place form sends one)."""
  comp = module.computation(permute.computation)
  instr = next(i for i in comp.instructions if i.name == permute.start)
  ops = instr.operand_instructions()
  if instr.opcode != "async-start" and len(ops) == 4 and ops[2].shape.is_tuple:
    return 1
  return max(len(ops), 1)


def decide_mode(
  selection: ModuleType,
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  permute: collectives.CollectivePermute,
  buffers: int = 1,
  num_partitions: int | None = None,
  num_replicas: int = 1,
) -> tuple[str, Decision]:
  """(backend name, the core's decision dict) for one CollectivePermute of a module
  of `num_partitions` x `num_replicas` devices (its header's counts: the core maps
  the pairs' ids to devices with them, and a permute without a channel id pairs
  replicas): the core's plan over the backend set names the backend; one the hook
  writes no mode for runs as NCCL."""
  pairs = [tuple(p) for p in permute.pairs]
  # Under a conditional's branch, as nvshmem-opt's planner tells the core.
  place = "branch" if permute.branch else "anywhere"
  d: Decision = selection.decide(
    topology,
    table,
    permute.bytes_per_device,
    pairs,
    permute.channel_id is not None,
    num_partitions,
    num_replicas,
    backends=tuple(backends),
    buffers=buffers,
    place=place,
  )
  backend = d.get("backend") or d.get("plan")
  return (backend if backend in hook_modes(selection) else "nccl"), d


def mark_error(module_name: str, instr_name: str, value: str) -> str:
  """The one line for a mark that names no collectives mode."""
  return (
    f'module {module_name}: %{instr_name} is marked {modes.ATTRIBUTE}="{value}", '
    f"which names no collectives mode ({', '.join(modes.MODES)}); the patched XLA "
    "fails such a compile, and no XLA runs it"
  )


def user_marks(module: reader.HloModule) -> list[Record]:
  """[{"permute", "value", "mode"}] of the module's permutes that the user marked
  with _xla_collectives_mode (the mark's own mode, by its word); HookError, naming
  the permute and the value, for a mark that names no mode."""
  found: list[Record] = []
  for permute in collectives.collective_permutes(module):
    comp = module.computation(permute.computation)
    instrs = [next(i for i in comp.instructions if i.name == permute.start)]
    if permute.form == "async-wrapped" and permute.wrapped_computation:
      instrs.append(module.computation(permute.wrapped_computation).root)
    value = next((v for i in instrs for v in [modes.user_mark(i)] if v is not None), None)
    if value is None:
      continue
    mode = modes.mark_mode(value)
    if mode is None:
      raise HookError(mark_error(module.name, permute.start, value))
    found.append({"permute": permute.start, "value": value, "mode": mode})
  return found


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
  config = json.loads(line[begin : _match_brace(line, begin)])
  mode = (config.get("collective_backend_config") or {}).get("collectives_mode")
  return None if mode in (None, "COLLECTIVES_MODE_INVALID") else str(mode)


_ATTRS_RE = re.compile(r"frontend_attributes=\{")


def set_line_attribute(line: str, value: str) -> str:
  """One instruction line with frontend attribute _xla_collectives_mode=value, the
  language of the patched XLA's assigner, and the tools' attribute saying the same
  (the choice is the hook's, not a user's mark); the other attributes are kept."""
  item = f'{modes.ATTRIBUTE}="{value}",{modes.TOOLS_ATTRIBUTE}="{value}"'
  m = _ATTRS_RE.search(line)
  if m is None:
    at = line.find(", backend_config=")
    at = at if at >= 0 else len(line.rstrip())
    return line[:at] + ", frontend_attributes={" + item + "}" + line[at:]
  begin, end = m.end() - 1, _match_brace(line, m.end() - 1)
  old = re.sub(rf'(?<![\w]){modes.ATTRIBUTE}="[^"]*",?', "", line[begin + 1 : end - 1])
  old = re.sub(rf'(?<![\w]){modes.TOOLS_ATTRIBUTE}="[^"]*",?', "", old).rstrip(",")
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


def header_counts(text: str) -> tuple[int | None, int]:
  """(num_partitions, replica count) that the module's header states: the compiled
  module's text states them; the module a registered transformation gets states
  neither (jaxlib builds it from the proto alone, whose config is the default),
  and then the program is taken to be the topology's devices (None), in one
  replica unless stated."""
  head = text.split("\n", 1)[0]
  partitions = re.search(r"\bnum_partitions=(\d+)", head)
  replicas = re.search(r"\breplica_count=(\d+)", head)
  return (
    int(partitions.group(1)) if partitions else None,
    int(replicas.group(1)) if replicas else 1,
  )


def transform_text(
  text: str,
  selection: ModuleType,
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
) -> tuple[str | None, list[Record]]:
  """(new text or None when unchanged, [decision records]) for one module.

  A permute the user marked keeps its mark and its mode, as the patched assigner
  keeps them; a mark that names no mode is a HookError (the patched XLA fails that
  compile), and the module is then left as it was."""
  module = reader.parse_hlo_text(text)
  user_marks(module)  # a mark no mode names: refused before anything is written
  partitions, replicas = header_counts(text)
  lines = text.split("\n")
  records: list[Record] = []
  changed = False
  written = hook_modes(selection)
  for permute in collectives.collective_permutes(module):
    buffers = operand_count(module, permute)
    backend, decision = decide_mode(
      selection, topology, table, backends, permute, buffers, partitions, replicas
    )
    start = next(
      i for i in module.computation(permute.computation).instructions if i.name == permute.start
    )
    asked = modes.requested(start) if modes.user_mark(start) is not None else None
    if asked and asked["mode"]:
      backend = {m: b for b, (m, _) in written.items() if m}.get(asked["mode"], "nccl")
      decision = {
        **decision,
        "reason": f'{modes.ATTRIBUTE}="{asked["attribute"]}" '
        f"on the permute ({decision.get('reason')})",
      }
    at = _permute_line(module, permute) - 1
    mode, value = written[backend]
    new = set_line_mode(lines[at], mode)
    if not asked:  # the user's own mark stays as the user wrote it
      new = set_line_attribute(new, value)
    changed |= new != lines[at]
    lines[at] = new
    records.append(
      {
        "module": module.name,
        "permute": permute.start,
        "bytes": permute.bytes_per_device,
        "buffers": buffers,
        "pairs": [list(p) for p in permute.pairs],
        "in_loop": permute.while_loop is not None,
        "backend": backend,
        "mode": mode,
        "plan": decision.get("plan"),
        "reason": decision.get("reason"),
        "modeled_us": decision.get("backend_us"),
        "refused": decision.get("refused"),
        "user_mark": asked["attribute"] if asked else None,
      }
    )
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
# The backend of the core that runs each mode of the flag (PRIVATE: NCCL).
_MODE_BACKEND = {
  "COLLECTIVES_PRIVATE_MEMORY": "nccl",
  "COLLECTIVES_PEER_MEMORY": "peer",
  "COLLECTIVES_SYMMETRIC_MEMORY": "symmetric",
}


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
      "per_op": per_op,
      "platform": client.platform,
      "evidence": (
        f'a permute marked {modes.ATTRIBUTE}="peer" compiled with '
        f"{_FLAG}={_DEFAULT_MODE} came out as {found}: "
        + (
          "the assigner took the mark, so the thunk runs each op's own mode (the series)"
          if per_op
          else "the mark was not read; every permute runs the flag's mode (a stock XLA)"
        )
      ),
    }
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

  f = jax.jit(
    jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec("p"), out_specs=PartitionSpec("p"))
  )
  x = jax.ShapeDtypeStruct((256,), np.float32, sharding=NamedSharding(mesh, PartitionSpec("p")))
  return _text(f.lower(x).compile({_FLAG: _DEFAULT_MODE}))


def _a_device(compiled: "Compiled") -> "jax.Device":
  """One device the compiled program runs on (a compile-only one when deviceless)."""
  import jax  # pylint: disable=import-outside-toplevel

  shardings = jax.tree.leaves(compiled.input_shardings) + jax.tree.leaves(compiled.output_shardings)
  for sharding in shardings:
    devices = getattr(sharding, "device_set", None)
    if devices:
      return min(devices, key=lambda d: d.id)
  raise HookError("the compiled program names no device to probe its XLA with")


def _module_name(text: str) -> str:
  head = text.split("\n", 1)[0].split()
  return head[1].rstrip(",") if len(head) > 1 and head[0] == "HloModule" else "module"


# The enum's values by number (xla.proto, DebugOptions.CollectivesMode), which
# compiler_options may give instead of the name (pjrt_executable.cc:743-752 at 131bf41a).
_MODE_NUMBERS = {
  0: "COLLECTIVES_MODE_INVALID",
  1: "COLLECTIVES_PRIVATE_MEMORY",
  2: "COLLECTIVES_SYMMETRIC_MEMORY",
  3: "COLLECTIVES_PEER_MEMORY",
}
_WS = " \t\r\n"


def xla_flags_args(value: str) -> list[str]:
  """The arguments XLA makes of an XLA_FLAGS value (parse_flags_from_env.cc:104-145
  at 131bf41a): flags from the first non-blank character on while each starts with
  '-' (the rest is dropped unread); a flag ends at a blank, or, written
  --name="..." or --name='...', at its closing quote (a backslash escapes the next
  character inside double quotes only), the quotes removed."""
  args: list[str] = []
  n = len(value)

  def skip(i: int) -> int:
    while i < n and value[i] in _WS:
      i += 1
    return i

  b = skip(0)
  while b < n and value[b] == "-":
    e = b
    while e < n and value[e].isascii() and (value[e] in "-_" or value[e].isalnum()):
      e += 1
    if e + 1 < n and value[e] == "=" and value[e + 1] in "'\"":
      name_end, quote, e = e + 1, value[e + 1], e + 2
      chars: list[str] = []
      while e < n and value[e] != quote:
        if quote == '"' and value[e] == "\\" and e + 1 < n:
          e += 1
        chars.append(value[e])
        e += 1
      args.append(value[b:name_end] + "".join(chars))
      e = min(e + 1, n)  # past the closing quote
    else:
      while e < n and value[e] not in _WS:
        e += 1
      args.append(value[b:e])
    b = skip(e)
  return args


def xla_flags_mode(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
  """(the permute mode XLA_FLAGS sets, or None, where it was read), read as XLA
  reads it: the variable's flags, or the file it names when its first non-blank
  character is not '-' (parse_flags_from_env.cc:149-177 at 131bf41a); each
  --xla_gpu_collective_permute_mode=WORD sets the mode in turn, so the last one
  wins (tsl/util/command_line_flags.cc:254-278), and a lone "--" ends the flags;
  WORD is private, symmetric or peer in any case (debug_options_flags.cc:862-875).
  A value XLA cannot parse stops XLA at start-up (parse_flags_from_env.cc:220): a
  HookError here."""
  env = os.environ if env is None else env
  value = env.get("XLA_FLAGS", "")
  where = "XLA_FLAGS"
  if not value:
    return None, where
  if value[len(value) - len(value.lstrip(_WS)) :][:1] != "-":
    where = f"XLA_FLAGS (the file {value})"
    try:
      with open(value, encoding="utf-8", errors="replace") as f:
        value = f.read()
    except OSError as e:
      raise HookError(
        f"XLA_FLAGS names the file {value!r}, which XLA reads its flags "
        f"from, and it cannot be read: {e.strerror}"
      ) from None
  mode = None
  prefix = f"--{_FLAG}="
  for arg in xla_flags_args(value):
    if arg == "--":
      break
    if arg.startswith(prefix):
      word = arg[len(prefix) :]
      mode = _FLAG_WORDS.get(word.lower())
      if mode is None:
        raise HookError(
          f"{where}: {arg}: XLA takes private, symmetric or peer there "
          "and stops at start-up on anything else"
        )
  return mode, where


def _option_mode(value: Any) -> str:
  """The mode a compiler_options value sets: the enum's name or its number (a
  string of digits too), as XLA applies an option override."""
  if isinstance(value, bool):
    raise HookError(f"compiler_options {_FLAG}={value!r} is not a collectives mode")
  if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
    number = int(value)
    if number in _MODE_NUMBERS:
      return _MODE_NUMBERS[number]
  elif isinstance(value, str) and value in _MODE_NUMBERS.values():
    return value
  raise HookError(
    f"compiler_options {_FLAG}={value!r} is not a collectives mode "
    f"({', '.join(_MODE_NUMBERS.values())})"
  )


def jit_compiler_options(lowered: "Lowered") -> tuple[tuple[str, Any], ...] | None:
  """The compiler_options given to jax.jit, which jax puts before a compile's own
  (jax/_src/interpreters/pxla.py MeshComputation.compile, jax 0.10.2); None where
  this jax keeps them elsewhere (the compiled permutes then say what ran)."""
  lowering = getattr(lowered, "_lowering", None)
  kvs = getattr(lowering, "_compiler_options_kvs", None)
  return tuple(kvs) if isinstance(kvs, tuple) else None


def flag_in_effect(
  compiler_options: Mapping[str, Any] | None, jit_options: Sequence[tuple[str, Any]] | None = ()
) -> tuple[str, str]:
  """(the permute mode a compile with these options runs, where it comes from): the
  compile's compiler_options over jax.jit's (a later key wins, as jax's dict of
  them does: pxla.py _cached_compilation), else XLA_FLAGS, else XLA's default."""
  call = dict(compiler_options or {})
  if _FLAG in call:
    return _option_mode(call[_FLAG]), "compiler_options"
  jit = dict(jit_options or ())
  if _FLAG in jit:
    return _option_mode(jit[_FLAG]), "jax.jit's compiler_options"
  mode, where = xla_flags_mode()
  if mode is not None:
    return mode, where
  return _DEFAULT_MODE, "XLA's default"


def compiled_flag_mode(text: str) -> str | None:
  """The flag's mode as a stock XLA's compiled module shows it: its assigner
  writes a mode other than PRIVATE on every collective-permute, and nothing under
  PRIVATE (collective_backend_assigner.cc:48-69 at 131bf41a). None where the
  module has no permute or its permutes disagree."""
  found = {key.split(":", 1)[1] for key in permute_modes(text)}
  if len(found) != 1:
    return None
  mode = found.pop()
  return _DEFAULT_MODE if mode == "NCCL" else None if mode == "UNPARSED" else mode


# ---------------------------------------------------------------------------
# One mode for the program (stock XLA)


def program_choice(
  text: str,
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  label: str = "<module>",
) -> dict[str, Any]:
  """model.program_mode.choose on the module in HLO `text` (import_selection first:
  the model imports the binding)."""
  from hlo_tools.model import decisions, program_mode, sources  # pylint: disable=import-outside-toplevel

  source = sources.resolve_partitions(sources.read_text(None, text, label), topology)
  perms = decisions.analyze(source, topology, table)
  choice: dict[str, Any] = program_mode.choose(perms, source, topology, table, backends)
  return choice


def deviceless(device: "jax.Device") -> bool:
  """Whether jax compiles for `device` on a compile-only client with no live client
  of its platform to compile through (jax/_src/compiler.py
  _get_cross_compile_backend, jax 0.10.2): such a compile runs no registered
  transformation."""
  try:
    from jax._src import compiler  # pylint: disable=import-outside-toplevel
    from jax._src.lib import _jax  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  client = device.client
  if not isinstance(client, getattr(_jax, "CompileOnlyPyClient", ())):
    return False
  cross = getattr(compiler, "_get_cross_compile_backend", None)
  return cross is None or cross(client) is None


def _mark_policy(choice: dict[str, Any], marks: list[Record]) -> tuple[str | None, str]:
  """(the mode the users' marks ask of the whole program or None, why): a stock XLA
  runs one mode per program, so the marks are kept only where they all ask for one
  mode that no permute of the program refuses."""
  wanted = sorted({m["mode"] for m in marks})
  where = ", ".join(f"%{m['permute']} {m['value']}" for m in marks)
  if len(wanted) > 1:
    return None, (
      f"the user's marks ask for {' and '.join(wanted)} ({where}), and a stock "
      "XLA runs one mode for every permute of a program"
    )
  backend = _MODE_BACKEND[wanted[0]]
  entry = choice["modes"].get(backend)
  if entry is None and backend != "nccl":
    return None, (
      f"the user's marks ask for {wanted[0]} ({where}), which is not in the "
      f"hook's backend set ({', '.join(choice['modes'])})"
    )
  if entry is not None and entry["refused"]:
    return None, (
      f"the user's marks ask for {wanted[0]} ({where}), which the program "
      f"cannot run: {entry['refused']}"
    )
  return wanted[0], f"the user's marks ask for {wanted[0]} ({where})"


def compile_program(
  lowered: "Lowered",
  topology: "Topology",
  table: "CostTable",
  backends: Sequence[str],
  compiler_options: Mapping[str, Any] | None = None,
  per_op: bool | None = None,
) -> tuple["Compiled", Record]:
  """(compiled, record): `lowered` compiled with the program's one mode applied.

  A first compile with the caller's options gives the program as XLA optimized it
  and the mode it ran: the compile's compiler_options over jax.jit's, XLA_FLAGS or
  XLA's default, checked against the compiled permutes on a stock XLA (whose
  assigner writes the flag's mode on each). On a stock XLA the core chooses the
  program's mode from that module, and a second compile applies it through
  compiler_options when it differs from the mode the first ran; a mode the caller
  set in compiler_options (the compile's or jax.jit's) is kept. The users' marks
  (set_xla_metadata's _xla_collectives_mode) are kept for the program where they
  agree and the program can run them; otherwise the record says which permutes
  run another mode than marked. On the series' XLA (per_op, else probed) the first
  compile stands, its registered transformation having decided per op, except in a
  deviceless compile, which runs none: there one mode for the program is applied
  as on a stock XLA, and the record says so. A mark that names no mode is a
  HookError."""
  import_selection()
  options = dict(compiler_options or {})
  jit_options = jit_compiler_options(lowered)
  compiled = lowered.compile(options or None)
  device = _a_device(compiled)
  xla = (
    {"per_op": per_op, "evidence": "given by the caller"} if per_op is not None else probe(device)
  )
  text = _text(compiled)
  marks = user_marks(reader.parse_hlo_text(text))
  choice = program_choice(text, topology, table, backends, label=f"<{_module_name(text)}>")
  ran, ran_from = flag_in_effect(options, jit_options)
  if not xla["per_op"]:
    seen = compiled_flag_mode(text)
    if seen is not None and seen != ran:  # what XLA ran beats what the options say
      ran_from = f"the compiled permutes' collectives_mode (the options read {ran} from {ran_from})"
      ran = seen
  record: Record = {
    "xla": xla,
    "program": choice,
    "first_compile_mode": ran,
    "first_compile_mode_from": ran_from,
    "marks": marks,
  }
  fallback = ""
  if xla["per_op"]:
    if not deviceless(device):
      record["applied"] = None
      record["why"] = (
        "this XLA runs each permute in its own mode: the per-op "
        "transformation decides, not one mode for the program"
      )
      return compiled, record
    fallback = (
      "a deviceless compile runs no registered transformation, so no permute "
      "gets its own mode: one mode for the whole program instead; "
    )
    record["per_op_fallback"] = True
  # The series' assigner runs each mark's own mode over the flag: only a stock XLA
  # needs the program's mode to be the marks'.
  stock_marks = marks if not xla["per_op"] else []
  mark_mode, mark_why = _mark_policy(choice, stock_marks) if stock_marks else (None, "")
  if ran_from in ("compiler_options", "jax.jit's compiler_options"):
    record["applied"] = ran
    record["why"] = fallback + f"kept the caller's {ran_from} {_FLAG}={ran}"
    refused = next(
      (m["refused"] for m in choice["modes"].values() if m["mode"] == ran and m["refused"]), None
    )
    if refused:
      record["why"] += f", which the core refuses ({refused})"
  elif mark_mode is not None:
    record["applied"] = mark_mode
    record["why"] = (
      fallback
      + f"kept the user's mark for the whole program: {mark_why}"
      + (
        ""
        if mark_mode == choice["mode"]
        else f"; the modeled best was {choice['mode']} ({choice['why']})"
      )
    )
  elif stock_marks:
    record["applied"] = choice["mode"]
    record["why"] = (
      fallback + f"refused the marks' mode: {mark_why}; the program runs "
      f"{choice['mode']}: {choice['why']}"
    )
  else:
    record["applied"] = choice["mode"]
    record["why"] = fallback + choice["why"]
  applied = record["applied"]
  if not xla["per_op"]:  # the series' assigner keeps a mark over the flag
    for m in marks:
      m["runs"] = applied
    record["marks_not_run"] = [m["permute"] for m in marks if m["mode"] != applied]
    if record["marks_not_run"]:
      record["why"] += (
        "; not as marked: "
        + ", ".join(f"%{m['permute']} ({m['value']})" for m in marks if m["mode"] != applied)
        + f" run {applied}"
      )
  if applied != ran:
    compiled = lowered.compile({**options, _FLAG: applied})
    text = _text(compiled)
  record["compiled_permutes"] = permute_modes(text)
  return compiled, record


# ---------------------------------------------------------------------------
# Registration


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
    self.table_digest = table_fingerprint(selection, table)

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

    new_text, records = transform_text(
      text, self._selection, self.topology, self.table, self.backends
    )
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
    marks = user_marks(reader.parse_hlo_text(text))  # a mark no mode names: an error
    choice = program_choice(
      text, self.topology, self.table, self.backends, label=f"<{call['module']}>"
    )
    call["permutes"] = choice["permutes"]
    if not choice["permutes"]:
      return None
    mark_mode, mark_why = _mark_policy(choice, marks) if marks else (None, "")
    mode = mark_mode or choice["mode"]
    word = next(w for w, m in _FLAG_WORDS.items() if m == mode)
    why = (
      "decided inside a compile, whose flag is already set: apply it with "
      f"XLA_FLAGS=--{_FLAG}={word} or compiler_options={{{_FLAG!r}: {mode!r}}}, "
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
      compiled, record = compile_program(
        lowered, self.topology, self.table, self.backends, compiler_options, per_op
      )
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
    if _INSTALLED.get(self.name) is self:
      del _INSTALLED[self.name]
    _set_cache_key_settings()
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


def table_fingerprint(selection: ModuleType, table: "CostTable") -> str:
  """A digest of everything in `table` the core decides with."""
  import hashlib  # pylint: disable=import-outside-toplevel

  parts: list[Any] = [
    table.backends,
    table.margin,
    table.nvshmem_max_bytes,
    table.symmetric_signals,
  ]
  for backend in selection.BACKENDS:
    try:
      parts.append(table.sm_interference(backend))
    except (ValueError, KeyError):
      parts.append(None)
    for link_class in selection.LINK_CLASSES:
      for get in (table.link, table.per_buffer_us, table.points):
        try:
          parts.append(get(backend, link_class))
        except (ValueError, KeyError):
          parts.append(None)
  return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def cache_key_settings() -> str:
  """What every installed hook decides with, for jax's persistent compilation
  cache key: its key holds the compile options but no registered transformation
  (jax/_src/cache_key.py get(), whose `custom_hook` entry is there to be
  replaced), so without this an executable cached before the hook was installed,
  or by a hook with other settings, is served and no transformation runs."""
  return ";".join(
    f"nvshmem_opt_hook {h.name} topology={h.topology} backends={','.join(h.backends)} "
    f"per_op={h.xla.get('per_op')} table={h.table_digest}"
    for _, h in sorted(_INSTALLED.items())
  )


# jax's own cache_key.custom_hook, kept while a hook's settings stand in for it.
_CACHE_HOOK: dict[str, Callable[[], str]] = {}


def _set_cache_key_settings() -> None:
  """Puts the installed hooks' settings into jax's cache key (jax's own custom hook
  back when none is installed)."""
  try:
    from jax._src import cache_key  # pylint: disable=import-outside-toplevel
  except ImportError:
    return
  if "jax" not in _CACHE_HOOK:
    _CACHE_HOOK["jax"] = cache_key.custom_hook
  previous = _CACHE_HOOK["jax"]
  if not _INSTALLED:
    cache_key.custom_hook = previous
    del _CACHE_HOOK["jax"]
    return

  def custom_hook() -> str:  # read at each key: a probe may settle per_op later
    return previous() + cache_key_settings()

  cache_key.custom_hook = custom_hook


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
      return probe(devices[0])
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
  if name in _INSTALLED:
    raise HookError(
      f"a hook named {name!r} is already installed (topology "
      f"{_INSTALLED[name].topology}); call its uninstall() first, or "
      "install under another name"
    )
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
  _INSTALLED[name] = hook
  _set_cache_key_settings()
  return hook
