"""The mode XLA runs a compile's permutes in: its flag, compiler_options, XLA_FLAGS; the probe."""

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlo_tools.errors import HookError
from hlo_tools.hook import text_edit
from hlo_tools.model import modes

if TYPE_CHECKING:  # jax is imported when first used
  import jax
  from jax.stages import Compiled, Lowered

# (platform, platform_version) -> probe(): one probe per XLA in a process.
_PROBED: dict[tuple[str, str], dict[str, Any]] = {}
# Set while a probe compiles, so that an installed transformation leaves it alone
# (not thread-local: XLA may run the transformation on a thread of its own).
STATE = {"probing": 0}
FLAG = "xla_gpu_collective_permute_mode"
DEFAULT_MODE = "COLLECTIVES_PRIVATE_MEMORY"
# flag_in_effect's source where the caller set no mode.
XLA_DEFAULT = "XLA's default"
FLAG_WORDS = {w: f"COLLECTIVES_{w.upper()}_MEMORY" for w in ("private", "symmetric", "peer")}
# The backend of the core that runs each mode of the flag (PRIVATE: NCCL).
MODE_BACKEND = {
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
    STATE["probing"] += 1
    try:
      found = text_edit.permute_modes(_probe_text(device))
    finally:
      STATE["probing"] -= 1
    per_op = any(k.endswith(":COLLECTIVES_PEER_MEMORY") for k in found)
    _PROBED[key] = {
      "per_op": per_op,
      "platform": client.platform,
      "evidence": (
        f'a permute marked {modes.ATTRIBUTE}="peer" compiled with '
        f"{FLAG}={DEFAULT_MODE} came out as {found}: "
        + (
          "the assigner took the mark, so the thunk runs each op's own mode (the series)"
          if per_op
          else "the mark was not read; every permute runs the flag's mode (a stock XLA)"
        )
      ),
    }
  return _PROBED[key]


def compiled_text(compiled: "Compiled") -> str:
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
  return compiled_text(f.lower(x).compile({FLAG: DEFAULT_MODE}))


def a_device(compiled: "Compiled") -> "jax.Device":
  """One device the compiled program runs on (a compile-only one when deviceless)."""
  import jax  # pylint: disable=import-outside-toplevel

  shardings = jax.tree.leaves(compiled.input_shardings) + jax.tree.leaves(compiled.output_shardings)
  for sharding in shardings:
    devices = getattr(sharding, "device_set", None)
    if devices:
      return min(devices, key=lambda d: d.id)
  raise HookError("the compiled program names no device to probe its XLA with")


def module_name(text: str) -> str:
  """The module's name from the header of its HLO text ("module" without one)."""
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
    # Bounded like every other input: a FIFO, /dev/zero or a huge file named here
    # must not hang the compile or take the process's memory.
    from hlo_tools import bounded_input
    from hlo_tools.errors import InputError

    try:
      value = bounded_input.read_side_input(value, "an XLA_FLAGS file").decode("utf-8", "replace")
    except InputError as e:
      raise HookError(
        f"XLA_FLAGS names the file {value!r}, which XLA reads its flags from, "
        f"and it cannot be read: {e}"
      ) from None
  mode = None
  prefix = f"--{FLAG}="
  for arg in xla_flags_args(value):
    if arg == "--":
      break
    if arg.startswith(prefix):
      word = arg[len(prefix) :]
      mode = FLAG_WORDS.get(word.lower())
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
    raise HookError(f"compiler_options {FLAG}={value!r} is not a collectives mode")
  if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
    number = int(value)
    if number in _MODE_NUMBERS:
      return _MODE_NUMBERS[number]
  elif isinstance(value, str) and value in _MODE_NUMBERS.values():
    return value
  raise HookError(
    f"compiler_options {FLAG}={value!r} is not a collectives mode "
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
  if FLAG in call:
    return _option_mode(call[FLAG]), "compiler_options"
  jit = dict(jit_options or ())
  if FLAG in jit:
    return _option_mode(jit[FLAG]), "jax.jit's compiler_options"
  mode, where = xla_flags_mode()
  if mode is not None:
    return mode, where
  return DEFAULT_MODE, XLA_DEFAULT


def compiled_flag_mode(text: str) -> str | None:
  """The flag's mode as a stock XLA's compiled module shows it: its assigner
  writes a mode other than PRIVATE on every collective-permute, and nothing under
  PRIVATE (collective_backend_assigner.cc:48-69 at 131bf41a). None where the
  module has no permute or its permutes disagree."""
  found = {key.split(":", 1)[1] for key in text_edit.permute_modes(text)}
  if len(found) != 1:
    return None
  mode = found.pop()
  return DEFAULT_MODE if mode == "NCCL" else None if mode == "UNPARSED" else mode
