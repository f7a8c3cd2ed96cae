"""`hlo-tools explain FILE --topology=T`: why each collective-permute gets its backend.

    hlo-tools explain FILE --topology=SPEC [--cost-table=F] [--format=text|json]

One entry per collective-permute (sync, start/done or async-wrapped): where it is
(computation, enclosing while loop and trip count, line), bytes per device, edges
by link class, modeled time per backend, the selection core's choice and reason,
and what upstream XLA's CollectiveBackendAssigner would choose. The choice comes
from the C++ selection core through its Python bindings (hlo_tools.selection), the
same code the pass runs. Upstream's answer comes from `nvshmem-opt
--compare-upstream` when the driver is built, else from upstream's rule for
collective-permutes (NVSHMEM iff every edge stays inside an NVLink domain; its
size threshold only applies to all-reduce since XLA PR #30718); `upstream.source`
says which.

Split parts written by the pass (`<name>.nvshmem-start` / `<name>.nccl-start`,
frontend attribute `_nvshmem_split_part`) are explained on the union of their
pairs, i.e. the permute the pass decided on.

This module also holds the input helpers that verify and report share: reading
a module with one-line errors, strict pair lists, finding and running nvshmem-opt.

Exit status: 0 ok, 2 bad input (unreadable or malformed HLO, broken pair list,
bad topology or cost table).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from hlo_tools import cli_io
from hlo_tools import selection
from hlo_tools.collectives import collective_permutes
from hlo_tools.hlo_text import HloParseError, parse_hlo_text

# Link classes whose edges stay inside one NVLink domain: what NVSHMEM may use.
NVLINK_CLASSES = ("same_device", "nvlink", "nvlink_domain")
PLAN_BACKEND = {"nvshmem": "NVSHMEM", "nccl": "DEFAULT", "split": "SPLIT"}
SPLIT_SUFFIXES = (".nvshmem-start", ".nccl-start")
# The driver's own log lines (TensorFlow/absl start-up noise) are not messages.
_NOISE_RE = re.compile(r"^(WARNING: All log messages|[IWE]\d{4} |\s*$)")


class InputError(Exception):
  """Bad input: str() is the one line printed on stderr (`file:line:col: ...`)."""

  def __init__(self, message):
    super().__init__(cli_io.one_line(message))


# ---------------------------------------------------------------------------------------
# Reading input

class Source:
  """A parsed module plus the text it came from (for columns and side-by-side views)."""

  def __init__(self, module, text, path, label=None):
    self.module = module
    self.text = text
    self.path = path
    self.label = label or path
    self._lines = None
    # The program's partition count: the header's, else inferred (resolve_partitions).
    self.num_partitions = module.num_partitions
    self.num_replicas = module.num_replicas
    self.partitions_from = "module header" if "num_partitions" in module.attributes \
        else "default"

  @property
  def lines(self):
    if self._lines is None:
      self._lines = self.text.split("\n")
    return self._lines

  def line(self, lineno):
    return self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""


def read_text(path, text, label=None):
  """Parses HLO text; InputError carries the reader's `file:line:col: message`."""
  label = label or path
  if not text.strip():
    raise InputError(f"{label}: empty file, no HLO module")
  try:
    module = parse_hlo_text(text, label)
  except HloParseError as e:
    raise InputError(str(e)) from None
  return Source(module, text, path, label)


def read_source(path, label=None, max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES):
  """Reads and parses an HLO text file (any file, device or pipe; "-" is stdin),
  never more than max_bytes of it."""
  try:
    data = cli_io.read_input(path, max_bytes, label)
  except cli_io.InputReadError as e:
    raise InputError(str(e)) from None
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise InputError(f"{label or path}: not UTF-8 text (byte {e.start}); is it a "
                     "serialized proto? convert it with nvshmem-opt first") from None
  return read_text(path, text, label)


_PAIR_RE = re.compile(r"\s*\{\s*(-?\d+)\s*,\s*(-?\d+)\s*\}\s*")


def strict_pairs(source, instr):
  """The source_target_pairs of `instr`, each exactly two ids, or InputError.

  The reader keeps attribute values verbatim, so `{{0,1},{2}}` reads as a pair of
  one id; every command must reject it where it is, not decide on it.
  """
  raw = instr.attributes.get("source_target_pairs")
  if raw is None:
    return []
  line = source.line(instr.line)
  base = line.find("source_target_pairs=")
  base = base + len("source_target_pairs=") if base >= 0 else instr.col - 1

  def fail(offset, what):
    raise InputError(f"{source.label}:{instr.line}:{base + offset + 1}: broken "
                     f"source_target_pairs of %{instr.name}: {what}")

  body = raw.strip()
  if not (body.startswith("{") and body.endswith("}")):
    fail(0, "expected {{source,target},...}")
  pos, end, pairs = 1, len(body) - 1, []
  if body[1:-1].strip():
    while True:
      m = _PAIR_RE.match(body, pos, end)
      if not m:
        fail(pos, "expected {source,target} with two integer ids")
      pairs.append((int(m.group(1)), int(m.group(2))))
      pos = m.end()
      if pos == end:
        break
      if body[pos] != ",":
        fail(pos, f"expected ',' or '}}', found {body[pos]!r}")
      pos += 1
  return pairs


# ---------------------------------------------------------------------------------------
# How many devices the program runs on

_MESH_RE = re.compile(r"#sdy\.mesh<\[([^\]]*)\]")
_AXIS_SIZE_RE = re.compile(r"=\s*(\d+)")


def mesh_devices(module):
  """Devices of the largest Shardy mesh in the module's frontend attributes, or None."""
  raw = module.attributes.get("frontend_attributes") or ""
  sizes = []
  for axes in _MESH_RE.findall(raw):
    n = 1
    for size in _AXIS_SIZE_RE.findall(axes):
      n *= int(size)
    sizes.append(n)
  return max(sizes) if sizes else None


def largest_partition_id(module):
  """The largest id in cross-partition pairs and groups (those with a channel_id)."""
  top = -1
  for instr in module.instructions():
    if instr.channel_id is None:
      continue
    try:
      ids = [i for p in instr.source_target_pairs or () for i in p]
      ids += [i for g in instr.replica_groups or () for i in g]
    except ValueError:
      continue  # broken lists are reported where they are decided on
    top = max([top] + ids)
  return top


def resolve_partitions(source, topology=None, override=None):
  """Sets source.num_partitions for a module whose header does not say it.

  jax's lowered modules (`jax.jit(f).lower(...).as_text(dialect="hlo")`) carry no
  num_partitions; the count is then the --num-partitions override, the Shardy mesh in
  the frontend attributes, the topology's devices (when they hold every id used), or
  the largest id used plus one, in that order. source.partitions_from says which.
  """
  module = source.module
  if override is not None:
    if override < 1:
      raise InputError(f"--num-partitions must be >= 1, got {override}")
    source.num_partitions, source.partitions_from = override, "--num-partitions"
    return source
  if "num_partitions" in module.attributes:
    return source
  largest = largest_partition_id(module)
  if largest < 0:
    return source  # nothing crosses partitions: the default of 1 is right
  mesh = mesh_devices(module)
  if mesh is not None and mesh > largest:
    source.num_partitions, source.partitions_from = mesh, "inferred from the Shardy mesh"
  elif topology is not None and topology.num_devices > largest:
    source.num_partitions = topology.num_devices
    source.partitions_from = "inferred from the topology's devices"
  else:
    source.num_partitions = largest + 1
    source.partitions_from = "inferred from the largest device id used"
  return source


def partitions_note(source):
  """One line for the user when the count did not come from the module header."""
  if source.partitions_from in ("module header", "default"):
    return None
  return (f"{source.label}: num_partitions {source.num_partitions} "
          f"({source.partitions_from}; the module header does not say)")


# ---------------------------------------------------------------------------------------
# The C++ driver

def find_nvshmem_opt():
  """nvshmem-opt: $NVSHMEM_OPT, next to this Python (the venv), PATH, or the build tree."""
  env = os.environ.get("NVSHMEM_OPT")
  if env:
    return env if os.access(env, os.X_OK) else None
  here = os.path.dirname(os.path.abspath(sys.executable))
  repo_build = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "build", "nvshmem-opt")
  for cand in (os.path.join(here, "nvshmem-opt"), shutil.which("nvshmem-opt"), repo_build):
    if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
      return cand
  return None


def driver_env():
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
  return env


def first_message(stderr):
  """The driver's one-line error, skipping TensorFlow's start-up log lines."""
  for line in stderr.splitlines():
    if not _NOISE_RE.match(line):
      return line.strip()
  return ""


_REPORT_PREFIX = "nvshmem-opt-report-"
_REPORT_RE = re.compile(r"^nvshmem-opt-report-(\d+)-\w+\.json$")


def _clean_stale_reports(directory):
  """Removes driver reports left in `directory` by processes that were killed."""
  try:
    names = os.listdir(directory)
  except OSError:
    return
  for name in names:
    m = _REPORT_RE.match(name)
    if not m:
      continue
    try:
      os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
      try:
        os.unlink(os.path.join(directory, name))
      except OSError:
        pass
    except PermissionError:
      pass


def run_nvshmem_opt(path, topology, cost_table=None, mode="explain", out=None,
                    compare_upstream=False, timeout=600, num_partitions=None,
                    tmp_dir=None):
  """Runs the driver; returns (exit status, report dict or None, error line).

  The driver's JSON report goes to a temporary file in tmp_dir (default: the system's
  temporary directory), named with our pid so that a later run can remove it when a
  kill left it behind.
  """
  exe = find_nvshmem_opt()
  if exe is None:
    raise FileNotFoundError("nvshmem-opt is not built (run scripts/setup.sh)")
  tmp_dir = tmp_dir or tempfile.gettempdir()
  _clean_stale_reports(tmp_dir)
  fd, report_path = tempfile.mkstemp(prefix=f"{_REPORT_PREFIX}{os.getpid()}-",
                                     suffix=".json", dir=tmp_dir)
  os.close(fd)
  try:
    cmd = [exe, os.fspath(path), f"--topology={topology}", f"--mode={mode}",
           f"--report={report_path}"]
    if cost_table:
      cmd.append(f"--cost-table={cost_table}")
    if compare_upstream:
      cmd.append("--compare-upstream")
    if num_partitions:
      cmd.append(f"--num-partitions={num_partitions}")
    if out:
      cmd += ["-o", os.fspath(out)]
    proc = subprocess.run(cmd, env=driver_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    report = None
    if proc.returncode == 0:
      try:
        with open(report_path) as f:
          report = json.load(f)
      except (OSError, ValueError):
        report = None
    return proc.returncode, report, first_message(proc.stderr)
  finally:
    os.unlink(report_path)


# ---------------------------------------------------------------------------------------
# Analysis

def load_selection(topology_spec, cost_table_path):
  try:
    return selection.parse_topology(topology_spec), selection.load_cost_table(cost_table_path)
  except selection.SelectionError as e:
    raise InputError(str(e)) from None


def split_group(record, instr):
  """(computation, original name) of a split part, else None."""
  part = instr.frontend_attributes.get("_nvshmem_split_part")
  if part is None:
    return None
  base = record.start
  for suffix in SPLIT_SUFFIXES:
    if base.endswith(suffix):
      base = base[:-len(suffix)]
  return record.computation, base


def device_edges(topology, source, pairs, cross_partition):
  edges = selection.core.edge_ids_to_devices(
      topology, [tuple(p) for p in pairs], cross_partition, source.num_partitions,
      source.num_replicas)
  return [(s, t, topology.classify(s, t)) for s, t in edges]


def what_the_pass_does(module, decision):
  """The core's decision as the pass applies it in `module`.

  In a module that is already scheduled the pass does not split (new instructions
  would lose the start/done overlap the schedule built) and keeps NCCL; the model's
  preference stays in decision["model_plan"].
  """
  decision["model_plan"] = decision["plan"]
  if decision["plan"] == "split" and module.is_scheduled:
    decision.update(
        plan="nccl", chosen_us=decision["nccl_us"], nvshmem_edge=[],
        reason=(f"NCCL: the model prefers a split ({decision['split_us']:.2f} us vs NCCL "
                f"{decision['nccl_us']:.2f} us) but the module is already scheduled, and "
                "splitting would lose the start/done overlap"))
  return decision


class Permute:
  """One collective-permute with its strict pairs and the core's decision."""

  def __init__(self, record, start, pairs):
    self.record = record
    self.start = start  # the -start / sync / async-start instruction
    self.pairs = pairs
    self.split_part = start.frontend_attributes.get("_nvshmem_split_part")
    self.group = None  # split parts: all parts of the original permute
    self.decision = None
    self.decided_pairs = pairs
    self.edges = []  # [(src device, dst device, link class)] of decided_pairs
    self.error = None


def analyze(source, topology, table, tolerant=False):
  """Permute objects for every collective-permute, decided by the selection core.

  Raises InputError for broken pair lists, and for pairs the topology cannot place
  unless `tolerant` (verify reports those as failed checks): then perm.error says
  why and perm.decision is None.
  """
  module = source.module
  perms = []
  groups = {}
  for rec in collective_permutes(module):
    comp = module.computation(rec.computation)
    start = comp.instruction(rec.start)
    permute = start
    if rec.form == "async-wrapped":
      permute = module.computation(rec.wrapped_computation).root
    perm = Permute(rec, start, strict_pairs(source, permute))
    key = split_group(rec, start)
    if key is not None:
      groups.setdefault(key, []).append(perm)
      perm.group = groups[key]
    perms.append(perm)
  for perm in perms:
    if perm.group is not None:
      perm.decided_pairs = [p for part in perm.group for p in part.pairs]
    cross = perm.record.channel_id is not None
    try:
      perm.edges = device_edges(topology, source, perm.decided_pairs, cross)
      perm.decision = what_the_pass_does(module, selection.decide(
          topology, table, perm.record.bytes_per_device, perm.decided_pairs, cross,
          source.num_partitions, source.num_replicas, buffers=perm.record.buffers))
    except (selection.SelectionError, ValueError) as e:
      if tolerant:
        perm.error, perm.edges = str(e), []
        continue
      raise InputError(f"{source.label}:{perm.start.line}: %{perm.start.name}: "
                       f"{e}") from None
  return perms


def upstream_rule(perm):
  """Upstream XLA's rule for collective-permutes: NVSHMEM iff no edge leaves an NVLink domain."""
  return "NVSHMEM" if all(c in NVLINK_CLASSES for _, _, c in perm.edges) else "DEFAULT"


def driver_partitions(source):
  """The --num-partitions to hand nvshmem-opt: only when the header does not say it."""
  return None if source.partitions_from in ("module header", "default") \
      else source.num_partitions


def upstream_answers(path, topology_spec, cost_table, num_partitions=None):
  """{(computation, instruction): backend} from nvshmem-opt --compare-upstream, or None."""
  try:
    rc, report, _ = run_nvshmem_opt(path, topology_spec, cost_table, mode="explain",
                                    compare_upstream=True, num_partitions=num_partitions)
  except (FileNotFoundError, OSError, subprocess.SubprocessError):
    return None
  if rc != 0 or not report:
    return None
  return upstream_from_report(report)


def _recorded(start):
  """What the pass wrote on the op (frontend attributes), if it ran."""
  attrs = start.frontend_attributes
  if "_nvshmem_plan" not in attrs:
    return None
  modeled = {}
  for item in attrs.get("_nvshmem_modeled_us", "").split(","):
    key, _, value = item.partition("=")
    if key:
      try:
        modeled[key] = float(value)
      except ValueError:
        modeled[key] = None
  return {"plan": attrs.get("_nvshmem_plan"), "reason": attrs.get("_nvshmem_reason"),
          "modeled_us": modeled, "split_part": attrs.get("_nvshmem_split_part")}


def entry(perm, upstream=None):
  """The JSON entry of one collective-permute."""
  rec, d = perm.record, perm.decision
  modeled = {"nccl": d["nccl_us"], "nvshmem": d["nvshmem_us"], "split": d["split_us"],
             "chosen": d["chosen_us"]}
  trips = rec.trip_count
  up_key = (rec.computation, rec.start)
  if upstream is not None and up_key in upstream:
    up = {"backend": upstream[up_key], "source": "nvshmem-opt --compare-upstream"}
  else:
    up = {"backend": upstream_rule(perm),
          "source": "rule: NVSHMEM iff every edge stays in an NVLink domain "
                    "(nvshmem-opt not built or could not load the module)"}
  return {
      "computation": rec.computation, "instruction": rec.start, "done": rec.done,
      "form": rec.form, "line": rec.start_line, "done_line": rec.done_line,
      "while_loop": rec.while_loop, "while_computation": rec.while_computation,
      "trip_count": trips, "channel_id": rec.channel_id,
      "bytes": rec.bytes_per_device, "buffers": rec.buffers,
      "pairs": [list(p) for p in perm.pairs],
      "current_backend": rec.backend, "split_part": perm.split_part,
      "decided_on": "union of split parts" if perm.group else "own pairs",
      "edges_by_class": d["edges_by_class"],
      "edges": [{"source": s, "target": t, "link_class": c} for s, t, c in perm.edges],
      "modeled_us": modeled,
      "modeled_loop_us": d["chosen_us"] * trips if trips else None,
      "choice": {"plan": d["plan"], "backend": PLAN_BACKEND.get(d["plan"], d["plan"])},
      "model_plan": d.get("model_plan", d["plan"]),
      "reason": d["reason"],
      "recorded": _recorded(perm.start),
      "upstream": up,
  }


def upstream_from_report(report):
  """{(computation, instruction): backend} from a driver report made with
  --compare-upstream (its decisions name the input's instructions)."""
  return {(d.get("computation"), d.get("instruction")): d.get("upstream")
          for d in (report or {}).get("decisions", []) if d.get("upstream")}


def explain(path, topology_spec, cost_table=None, use_driver=True, source=None,
            num_partitions=None, max_bytes=cli_io.DEFAULT_MAX_INPUT_BYTES, upstream=None):
  """The explain JSON object for the module at `path` (raises InputError).

  upstream: upstream's answers when the caller already has them (upstream_from_report);
  else the driver is asked once (use_driver)."""
  topology, table = load_selection(topology_spec, cost_table)
  source = resolve_partitions(source or read_source(path, max_bytes=max_bytes), topology,
                              num_partitions)
  perms = analyze(source, topology, table)
  if upstream is None and use_driver and perms:
    upstream = upstream_answers(path, topology_spec, cost_table, driver_partitions(source))
  module = source.module
  return {
      "file": source.label, "module": module.name, "topology": topology_spec,
      "cost_table": cost_table, "num_partitions": source.num_partitions,
      "num_partitions_from": source.partitions_from,
      "num_replicas": source.num_replicas,
      "collectives": [entry(p, upstream) for p in perms],
  }


# ---------------------------------------------------------------------------------------
# Text

def human_bytes(n):
  if n is None:
    return "-"
  for unit in ("B", "KiB", "MiB", "GiB"):
    if abs(n) < 1024 or unit == "GiB":
      return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024.0
  return f"{n} B"


def us(value):
  return "-" if value is None else f"{value:.2f} us"


def pairs_text(pairs, limit=16):
  text = " ".join(f"{s}->{t}" for s, t in pairs[:limit])
  return text + (f" ... ({len(pairs)} pairs)" if len(pairs) > limit else "")


def where_text(e):
  loop = (f"; while %{e['while_loop']} in %{e['while_computation']}, trip count "
          f"{e['trip_count'] if e['trip_count'] is not None else 'unknown'}"
          if e["while_loop"] else "; not in a loop")
  return f"%{e['computation']} line {e['line']}{loop}"


def format_text(result):
  inferred = result.get("num_partitions_from", "module header")
  lines = [f"{result['file']}: {len(result['collectives'])} collective-permute(s), "
           f"topology {result['topology']}, {result['num_partitions']} partitions"
           + ("" if inferred in ("module header", "default") else f" ({inferred})")
           + f" x {result['num_replicas']} replicas"]
  for e in result["collectives"]:
    classes = ", ".join(f"{k} {v}" for k, v in e["edges_by_class"].items() if v) or "none"
    m = e["modeled_us"]
    rows = [
        ("where", where_text(e)),
        ("form", e["form"] + (f" (done %{e['done']} line {e['done_line']})" if e["done"] else "")
         + (f", split part '{e['split_part']}', decided on the union of the parts"
            if e["split_part"] else "")),
        ("bytes", f"{e['bytes']} ({human_bytes(e['bytes'])}) per device in "
                  f"{e.get('buffers', 1)} buffer(s)"),
        ("pairs", pairs_text(e["pairs"])),
        ("edges", classes),
        ("modeled", f"nccl {us(m['nccl'])}, nvshmem {us(m['nvshmem'])}, "
                    f"split {us(m['split'])}"
         + (f"; x{e['trip_count']} trips = {us(e['modeled_loop_us'])}"
            if e["modeled_loop_us"] is not None else "")),
        ("choice", f"{e['choice']['plan']} (backend {e['choice']['backend']}, "
                   f"{us(m['chosen'])}); now {e['current_backend']}"),
        ("reason", e["reason"]),
        ("upstream XLA", f"{e['upstream']['backend']} ({e['upstream']['source']})"),
    ]
    if e["recorded"]:
      rows.append(("pass wrote", f"plan {e['recorded']['plan']}: {e['recorded']['reason']}"))
    lines.append("")
    lines.append(f"%{e['instruction']}")
    lines.extend(f"  {k:<13} {v}" for k, v in rows)
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Output and command line

def write_output(text, out):
  """Prints, or writes `out` atomically (temp file in the same directory + os.replace)."""
  if not out:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return
  directory = os.path.dirname(os.path.abspath(out))
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", dir=directory)
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
    # mkstemp makes the file private; give it the permissions a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, out)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


class ArgumentParser(argparse.ArgumentParser):
  """argparse with one-line usage errors and exit status 2."""

  def error(self, message):
    raise InputError(f"{self.prog}: {message}")


def add_partitions_flag(parser):
  parser.add_argument("--num-partitions", "--num_partitions", dest="num_partitions",
                      type=int, default=None,
                      help="devices of the program when the module header does not say "
                      "(default: inferred from the mesh, the topology or the ids used)")


def check_out_path(out, inputs):
  """Refuses an --out that would overwrite one of the inputs."""
  if not out:
    return
  for path in inputs:
    if path and os.path.exists(path) and os.path.exists(out) and os.path.samefile(out, path):
      raise InputError(f"{out}: refusing to overwrite an input")


def main(argv):
  prog = argv[0] if argv else "hlo-tools explain"
  parser = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
  parser.add_argument("file", help="HLO text file")
  parser.add_argument("--topology", required=True, help="e.g. 1x2x4 or 1x9x8:nvl72")
  parser.add_argument("--cost-table", "--cost_table", dest="cost_table", default=None)
  parser.add_argument("--format", choices=("text", "json"), default="text")
  parser.add_argument("--out", default=None, help="write here instead of stdout")
  add_partitions_flag(parser)
  cli_io.add_max_input_bytes(parser)
  try:
    args = parser.parse_args(argv[1:])
    check_out_path(args.out, [args.file])
    result = explain(args.file, args.topology, args.cost_table,
                     num_partitions=args.num_partitions, max_bytes=args.max_input_bytes)
    text = json.dumps(result, indent=1) if args.format == "json" else format_text(result)
    write_output(text, args.out)
  except InputError as e:
    print(str(e), file=sys.stderr)
    return 2
  except OSError as e:
    print(f"{prog}: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main(["hlo-tools explain"] + sys.argv[1:]))
