"""Per-op collective-permute backends inside jax's own compile (jax >= 0.10.2).

    from hlo_tools import jax_hook
    hook = jax_hook.install(topology="1x1x2", backends=("nccl", "peer"))
    ...  # every module jax compiles from now on gets a per-permute choice
    hook.uninstall()

The XLA of jax 0.10.2 and later runs a collective-permute on NCCL unless its
backend_config names `collective_backend_config.collectives_mode`:
COLLECTIVES_PEER_MEMORY (copy-engine writes into the peer's buffer) or
COLLECTIVES_SYMMETRIC_MEMORY (put + signal on NCCL symmetric memory). Its own
flag sets one mode for every permute. `install` registers a module
transformation (jax.extend.xla.register_hlo_module_transformation, before the
scheduler) that runs the selection core on each permute of the module (bytes,
source-target pairs, topology) and writes the chosen mode into that permute's
backend_config, keeping every other field; NCCL leaves the field unset. It
also writes the choice as the frontend attribute _xla_collectives_mode
(private, peer, symmetric), which the patch series for jax v0.11.0's XLA reads;
a permute the user marked with that attribute (set_xla_metadata) keeps its mode.

Only pure Python and the core's binding are imported (no TensorFlow): the
module is read with hlo_tools.hlo.reader, edited as text and re-parsed by jaxlib.
A module the hook cannot read or rewrite is left as jax built it, and the
error is recorded in the handle's `calls`.
"""

import inspect
import json
import os
import re
import threading

from hlo_tools import cli_io
from hlo_tools.errors import HookError
from hlo_tools.hlo import reader
from hlo_tools.model import collectives, modes

_PERMUTE_RE = re.compile(r"\s(collective-permute(?:-start)?)\(")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where a binding built for another interpreter may sit (see
# scripts/build_core_py312.sh); searched only when the package has none.
CORE_DIRS_ENV = "NVSHMEM_OPT_CORE_DIR"
_CARRY_DIRS = (".carry_py312",)


# name -> the installed Hook: jax would run a second registration under one name as
# a second transformation, deciding every permute twice.
_INSTALLED = {}


# ---------------------------------------------------------------------------
# Core access

def import_selection():
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


def hook_modes(selection):
  """{backend: (collectives_mode or None for NCCL, _xla_collectives_mode value)} for
  the backends the hook writes (those with a mode attribute: the XLA of jax >=
  0.10.2), from the core's records."""
  return {n: (r["collectives_mode"] or None, r["mode_attribute"])
          for n, r in selection.BACKEND_INFO.items() if r["mode_attribute"]}


def _decide_params(selection):
  try:
    return set(inspect.signature(selection.decide).parameters)
  except (TypeError, ValueError):
    return set()


def operand_count(module, permute):
  """Buffers the permute sends: its data operands (the in-place form sends one)."""
  comp = module.computation(permute.computation)
  instr = next(i for i in comp.instructions if i.name == permute.start)
  ops = instr.operand_instructions()
  if instr.opcode != "async-start" and len(ops) == 4 and ops[2].shape.is_tuple:
    return 1
  return max(len(ops), 1)


def decide_mode(selection, topology, table, backends, permute, buffers=1):
  """(backend name, the core's decision dict) for one CollectivePermute.

  With a core that plans over backend sets, its plan names the backend. With an
  older core (NCCL vs NVSHMEM only) a one-sided plan maps to the first
  one-sided backend given, and a split (which one op cannot express) to NCCL;
  the decision records `mapped_from` then.
  """
  pairs = [tuple(p) for p in permute.pairs]
  params = _decide_params(selection)
  if "backends" in params:
    kwargs = {"buffers": buffers} if "buffers" in params else {}
    d = selection.decide(topology, table, permute.bytes_per_device, pairs,
                         backends=tuple(backends), **kwargs)
    backend = d.get("backend") or d.get("plan")
    return (backend if backend in hook_modes(selection) else "nccl"), d
  d = selection.decide(topology, table, permute.bytes_per_device, pairs)
  plan = d.get("plan")
  one_sided = [b for b in backends if b != "nccl"]
  if plan == "nvshmem" and one_sided:
    d["mapped_from"] = plan
    return one_sided[0], d
  if plan != "nccl":
    d["mapped_from"] = plan
  return "nccl", d


# ---------------------------------------------------------------------------
# Text editing

def _match_brace(text, start):
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


def set_line_mode(line, mode):
  """One instruction line with collectives_mode = mode (None: field removed).

  The rest of the backend_config JSON is kept as it was (key order included).
  """
  key = "backend_config="
  at = line.find(key + "{")
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


def line_mode(line):
  """collectives_mode of one instruction line, None when unset."""
  at = line.find("backend_config={")
  if at < 0:
    return None
  begin = at + len("backend_config=")
  config = json.loads(line[begin:_match_brace(line, begin)])
  mode = (config.get("collective_backend_config") or {}).get("collectives_mode")
  return None if mode in (None, "COLLECTIVES_MODE_INVALID") else mode


_ATTRS_RE = re.compile(r"frontend_attributes=\{")


def set_line_attribute(line, value):
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


def permute_modes(text):
  """{backend/mode summary: count} of the collective-permutes in HLO text."""
  found = {}
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


def _permute_line(module, permute):
  """1-based line of the instruction that carries the permute's backend_config."""
  if permute.form == "async-wrapped" and permute.wrapped_computation:
    return module.computation(permute.wrapped_computation).root.line
  return permute.start_line


def transform_text(text, selection, topology, table, backends):
  """(new text or None when unchanged, [decision records]) for one module."""
  module = reader.parse_hlo_text(text)
  lines = text.split("\n")
  records, changed = [], False
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
                    "mapped_from": decision.get("mapped_from"),
                    "reason": decision.get("reason"),
                    "modeled_us": decision.get("backend_us"),
                    "refused": decision.get("refused")})
  return ("\n".join(lines) if changed else None), records


# ---------------------------------------------------------------------------
# Registration

class Hook:
  """An installed transformation: decisions and calls so far; uninstall()."""

  def __init__(self, name, stage, platforms, selection, topology, table, backends,
               report):
    self.name, self.stage, self.platforms = name, stage, platforms
    self.topology, self.table, self.backends = topology, table, tuple(backends)
    self.report = report
    self.decisions, self.calls = [], []
    self._selection = selection
    self._lock = threading.Lock()
    self.installed = False

  def __call__(self, proto_bytes):
    from jax._src.lib import xla_client  # jaxlib's own HLO parser and printer
    call = {"bytes_in": len(proto_bytes)}
    try:
      module = xla_client.hlo.HloModule.from_serialized_hlo_module_proto(proto_bytes)
      call["module"] = module.name
      new_text, records = transform_text(module.to_string(), self._selection,
                                         self.topology, self.table, self.backends)
      call["permutes"] = len(records)
      result = None
      if new_text is not None:
        result = xla_client.hlo.hlo_module_from_text(new_text)
        result = result.as_serialized_hlo_module_proto()
        call["permutes_out"] = permute_modes(new_text)
      with self._lock:
        self.decisions.extend(records)
    except Exception as e:  # the module stays as jax built it; the error is kept
      call["error"] = f"{type(e).__name__}: {e}"[:2000]
      result = None
    with self._lock:
      self.calls.append(call)
      self._write_report()
    return result

  def summary(self):
    return {"name": self.name, "topology": str(self.topology),
            "backends": list(self.backends), "calls": list(self.calls),
            "decisions": list(self.decisions)}

  def _write_report(self):
    if not self.report:
      return
    cli_io.write_atomic(self.report,
                        json.dumps(self.summary(), indent=1, default=str))

  def uninstall(self):
    """Removes the transformation; True when jax found it."""
    if not self.installed:
      return False
    from jax.extend import xla as jx
    self.installed = False
    if _INSTALLED.get(self.name) is self:
      del _INSTALLED[self.name]
    return bool(jx.clear_hlo_module_transformation(
        self.name, stage=self.stage, platforms=self.platforms))


def with_process_layout(spec, local_devices, all_devices):
  """`spec` with `:gpus_per_process=N` from jax's view of the processes: N is
  the number of devices this process drives (len(jax.local_devices())) when
  there are others elsewhere. Peer and symmetric memory need every device of a
  permute in one process; XLA runs them as NCCL otherwise."""
  if "gpus_per_process" in spec or local_devices >= all_devices or local_devices < 1:
    return spec
  return f"{spec}:gpus_per_process={local_devices}"


def install(topology, backends=("nccl", "peer"), cost_table=None, report=None,
            platforms=("cuda", "gpu"), name="nvshmem_opt_permute_modes"):
  """Registers the per-permute choice for every module jax compiles next.

  topology: a spec such as "1x1x2" (slices x hosts x GPUs per host) or a parsed
  Topology; a spec without gpus_per_process gets it from jax's local devices
  (with_process_layout); backends: the set the target XLA offers, NCCL first; cost_table:
  None (the core's default), a path, or a CostTable; report: a JSON file
  rewritten after each compile with the decisions; platforms: where jax
  registers the pass ("cpu" too for tests). Returns a Hook.
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
    topo = (selection.parse_topology(topology) if isinstance(topology, str)
            else topology)
    table = (cost_table if cost_table is not None and not isinstance(cost_table, str)
             else selection.load_cost_table(cost_table))
  except selection.SelectionError as e:
    raise HookError(str(e)) from None
  platforms = [platforms] if isinstance(platforms, str) else list(platforms)
  hook = Hook(name, jx.PipelineStage.PRE_SCHEDULER, platforms, selection, topo,
              table, backends, report)
  # Register per platform: a name jax has no client for (e.g. "gpu" where the
  # plugin registers "cuda") is skipped; none at all is an error.
  registered, errors = [], []
  for platform in platforms:
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
