"""The bad-input matrix: every command x every input slot it has x every kind of bad
input that slot can be given.

A command joins by declaring its slots in SLOTS (the file it reads, where the bad
file goes: passed as the argument, at the name of the config beside the module, or
as a stage of a dump folder); a kind joins by declaring itself in KINDS (what it
puts at a path, and which contents it applies to). The cases are the product,
never listed by hand. Each case asserts what every bad input must give: exit
status 2, one line on stderr naming the file, no traceback, an end within the time
cap, memory under the cap of 2 GB of address space, and every input unchanged
(hashed before and after).

The cases run in a batch, several at once (most wait on a silent FIFO's one second
or on the driver's start-up): each hlo-tools case is a fork of this process, which
imported hlo_tools once, with its own stdin, stdout, stderr and address-space limit
(RLIMIT_AS, what `ulimit -v` sets); each nvshmem-opt case is the driver's own
process. The hook's cases run in one process of their own (importing jax once).
test_table_from_dev_zero_under_a_2gb_cap runs each command that takes a table as
its own program under the cap, imports included.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

import pytest

from hlo_tools import cli
from hlo_tools.errors import escape_name

from conftest import FIXTURES, NVSHMEM_OPT, ROOT

# Hundreds of cases, each a command run on a bad input: about a minute.
pytestmark = pytest.mark.long

MODULE = FIXTURES / "shift_1x1x2.before_async.hlo"
CONFIG = FIXTURES / "shift_1x1x2.before_async.config.pbtxt"
TABLE = FIXTURES / "fast_nvshmem.cost"
PROTO = next(
  (FIXTURES / "training_script_pb_1x1x8.xla_dump").glob("module_2066.*after_optimizations.hlo.pb")
)
STAGE_NAME = "module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt"
# A measurement CSV the calibration takes: NCCL over NVLink, 10 us + 200 GB/s.
CSV = "backend,link_class,bytes,seconds\n" + "".join(
  f"nccl,nvlink,{4**k},{10e-6 + 4**k / 200e9:.9g}\n" for k in range(5, 14)
)

CAP_BYTES = 2_000_000 * 1024  # `ulimit -v 2000000`
TIME_CAP = 30.0  # seconds any one case may take (a silent FIFO is given 1 s)
PARALLEL = 4  # cases at once: most wait on a FIFO or the driver's start-up
# Every command is given these: a small size bound keeps /dev/zero and a growing
# file quick to refuse; a silent FIFO is given up after 1 s.
BOUNDS = ("--max-input-bytes=1000000", "--input-timeout=1")
NOBODY = 65534
GROWS_TO = 256 << 20  # past every limit the cases use (1 MB; 64 MiB for the hook's)


# ---------------------------------------------------------------------------------------
# The slots: where each command reads a file.


@dataclasses.dataclass(frozen=True)
class Slot:
  command: str  # as test ids name it
  name: str  # main, cost-table, module-config, config-beside, dump-folder, ...
  content: str  # what a good file there holds: module, table, config, csv, target
  argv: tuple[str, ...]  # {bad}: the bad path; {module}, {dir}, {out}: good ones
  where: str = "arg"  # arg: {bad} as given; beside: {module}'s config; folder: a stage of {dir}
  runner: str = "hlo-tools"  # hlo-tools (in a fork), nvshmem-opt, hook

  @property
  def id(self) -> str:
    return f"{self.command}:{self.name}"


T = "--topology=1x1x2"
SLOTS = [
  Slot("parse", "main", "module", ("parse", "{bad}")),
  Slot("explain", "main", "module", ("explain", "{bad}", T)),
  Slot("explain", "cost-table", "table", ("explain", "{module}", T, "--cost-table={bad}")),
  Slot("explain", "config-beside", "config", ("explain", "{module}", T), "beside"),
  Slot("explain", "dump-folder", "module", ("explain", "{dir}:after_optimizations", T), "folder"),
  Slot("verify", "main", "module", ("verify", "{bad}", T)),
  Slot("verify", "cost-table", "table", ("verify", "{module}", T, "--cost-table={bad}")),
  Slot("verify", "config-beside", "config", ("verify", "{module}", T), "beside"),
  Slot("verify", "dump-folder", "module", ("verify", "{dir}:after_optimizations", T), "folder"),
  Slot("diff", "a", "module", ("diff", "{bad}", "{module}")),
  Slot("diff", "b", "module", ("diff", "{module}", "{bad}")),
  Slot(
    "diff", "dump-folder", "module", ("diff", "{dir}:after_optimizations", "{module}"), "folder"
  ),
  Slot("report", "main", "module", ("report", "{bad}", T, "--quiet", "--out={out}")),
  Slot(
    "report",
    "cost-table",
    "table",
    ("report", "{module}", T, "--quiet", "--out={out}", "--cost-table={bad}"),
  ),
  Slot(
    "report",
    "config-beside",
    "config",
    ("report", "{module}", T, "--quiet", "--out={out}"),
    "beside",
  ),
  Slot(
    "report", "dump-folder", "module", ("report", "{dir}", T, "--quiet", "--out={out}"), "folder"
  ),
  Slot(
    "heuristics-sweep",
    "cost-table",
    "table",
    ("heuristics", "sweep", "--cost-table={bad}", "--out={out}", "--no-plots"),
  ),
  Slot(
    "heuristics-check-pass",
    "cost-table",
    "table",
    ("heuristics", "check-pass", "--cost-table={bad}"),
  ),
  Slot("heuristics-calibrate", "csv", "csv", ("heuristics", "calibrate", "{bad}")),
  Slot(
    "heuristics-calibrate",
    "base-table",
    "table",
    ("heuristics", "calibrate", "{csv}", "--base-table={bad}"),
  ),
  Slot(
    "heuristics-calibrate",
    "holdout-csv",
    "csv",
    ("heuristics", "calibrate", "{csv}", "--holdout-csv={bad}"),
  ),
  Slot("dump", "dump-folder", "module", ("dump", "{dir}", "--out={out}", "--quiet"), "folder"),
  Slot(
    "dump",
    "target-config",
    "target",
    ("dump", "--topology=1x1x2", "--target_config={bad}", "--out={out}", "--quiet"),
  ),
  Slot("nvshmem-opt", "main", "module", ("{bad}", T, "--mode=explain"), runner="nvshmem-opt"),
  Slot(
    "nvshmem-opt",
    "cost-table",
    "table",
    ("{module}", T, "--mode=explain", "--cost-table={bad}"),
    runner="nvshmem-opt",
  ),
  Slot(
    "nvshmem-opt",
    "module-config",
    "config",
    ("{module}", T, "--mode=explain", "--module-config={bad}"),
    runner="nvshmem-opt",
  ),
  Slot(
    "nvshmem-opt",
    "config-beside",
    "config",
    ("{module}", T, "--mode=explain"),
    "beside",
    "nvshmem-opt",
  ),
  Slot("hook-install", "cost-table", "table", ("install", "{bad}"), runner="hook"),
  # The file XLA_FLAGS names, which the hook reads at compile for the flag's mode
  # (set after jax started its backend, so that XLA itself read other flags).
  Slot("hook-compile", "xla-flags-file", "flags", ("compile", "{bad}"), runner="hook"),
]


# ---------------------------------------------------------------------------------------
# The kinds of bad input: what each puts at a path.


def _text(content: str) -> str:
  return {
    "module": MODULE.read_text(),
    "table": TABLE.read_text(),
    "config": CONFIG.read_text(),
    "csv": CSV,
    "target": "",
    "flags": "--xla_gpu_collective_permute_mode=peer\n",
  }[content]


def _write(data: bytes | str) -> Callable[[pathlib.Path, str], None]:
  def make(path: pathlib.Path, content: str) -> None:
    path.write_bytes(data.encode() if isinstance(data, str) else data)

  return make


def _edited(content_edits: dict[str, tuple[str, str]]) -> Callable[[pathlib.Path, str], None]:
  """The good file of the slot's content with one edit (old -> new), which must apply."""

  def make(path: pathlib.Path, content: str) -> None:
    old, new = content_edits[content]
    text = _text(content)
    assert old in text, (content, old)
    path.write_text(text.replace(old, new, 1))

  return make


def _link_to(target: str) -> Callable[[pathlib.Path, str], None]:
  def make(path: pathlib.Path, content: str) -> None:
    os.symlink(target, path)

  return make


def _truncated_text(path: pathlib.Path, content: str) -> None:
  text = _text(content)
  path.write_text(text[: len(text) // 2])


def _fifo(path: pathlib.Path, content: str) -> None:
  os.mkfifo(path)


def _sparse(path: pathlib.Path, content: str) -> None:
  with open(path, "wb") as f:
    f.truncate(2 << 30)


def _loop(path: pathlib.Path, content: str) -> None:
  os.symlink(path.name, path)


def _through_a_file(path: pathlib.Path, content: str) -> None:
  plain = path.parent / "plain_file"
  plain.write_text("a file, not a directory\n")
  os.symlink(str(plain / "inside"), path)


def _unreadable(path: pathlib.Path, content: str) -> None:
  path.write_text(_text(content) or "x\n")
  path.chmod(0)


def _mkdir(path: pathlib.Path, content: str) -> None:
  path.mkdir()


ALL = ("module", "table", "config", "csv", "target", "flags")
TEXTS = ("module", "table", "config", "csv")  # read by the tools themselves (not XLA's)


@dataclasses.dataclass(frozen=True)
class Kind:
  name: str
  make: Callable[[pathlib.Path, str], None]
  applies: tuple[str, ...] = ALL
  arg_path: str | None = None  # given as itself where the slot takes a path
  grows: bool = False  # a writer appends to it while the command reads
  non_utf8_name: bool = False  # every path of the case has a non-UTF-8 component
  as_nobody: bool = False  # run without root's override of file permissions
  # Commands to which the content is no error: parse, diff and dump read a module's
  # structure; a mark is judged where a backend is decided.
  not_for: tuple[str, ...] = ()


JUNK = bytes(range(256)) * 4 + b"\xff\xfe\x00junk"
KINDS = [
  Kind("empty", _write(b""), TEXTS),
  Kind("junk", _write(JUNK), TEXTS),
  Kind("truncated-text", _truncated_text, TEXTS),
  Kind("truncated-proto", _write(PROTO.read_bytes()[: PROTO.stat().st_size // 2]), TEXTS),
  Kind("dev-zero", _link_to("/dev/zero"), arg_path="/dev/zero"),
  Kind("silent-fifo", _fifo),
  Kind("sparse-2gib", _sparse),
  Kind("directory", _mkdir),
  Kind("symlink-loop", _loop),
  Kind("path-through-a-file", _through_a_file),
  Kind("unreadable", _unreadable, as_nobody=True),
  Kind("proc-self-mem", _link_to("/proc/self/mem"), arg_path="/proc/self/mem"),
  Kind("non-utf8-name", _write(JUNK), TEXTS, non_utf8_name=True),
  Kind(
    "huge-dimension",
    _edited(
      {
        "module": (
          "bf16[1,128,2,64]{3,2,1,0} parameter(0)",
          "bf16[1,128,2,99999999999999999999]{3,2,1,0} parameter(0)",
        ),
        "table": ("latency_us: 2\n", "latency_us: 1e999\n"),
        "config": ("num_partitions: 2", "num_partitions: 99999999999999999999"),
        "csv": ("nccl,nvlink,1024,", "nccl,nvlink,99999999999999999999999,"),
      }
    ),
    TEXTS,
  ),
  Kind(
    "unknown-name",  # an opcode, a field, a link class nobody knows
    _edited(
      {
        "module": (" multiply(", " multiplyy("),
        "table": ("links {", "no_such_field: 1\nlinks {"),
        "csv": ("nccl,nvlink,1024,", "nccl,no_such_link,1024,"),
      }
    ),
    # Not a config's: its readers skip a field they do not know (a newer XLA's).
    ("module", "table", "csv"),
  ),
  Kind(
    "nan",
    _edited(
      {
        "table": ("latency_us: 2\n", "latency_us: nan\n"),
        "csv": ("nccl,nvlink,1024,", "nccl,nvlink,1024,nan\nnccl,nvlink,2048,"),
      }
    ),
    ("table", "csv"),
  ),
  Kind(
    "no-backend-of-the-set",
    _edited({"table": ("links {", 'backends: "nccl,no_such_backend"\nlinks {')}),
    ("table",),
  ),
  Kind(
    "config-not-fitting-the-module",
    _edited({"config": ("num_partitions: 2", "num_partitions: 8")}),
    ("config",),
  ),
  Kind(
    "mark-no-mode-names",
    _edited(
      {
        "module": (
          "channel_id=1, source_target_pairs={{0,1}}",
          'channel_id=1, source_target_pairs={{0,1}}, frontend_attributes={_xla_collectives_mode="no_such_mode"}',
        )
      }
    ),
    ("module",),
    not_for=("parse", "diff", "dump"),
  ),
  Kind("grows-while-read", _write(b""), grows=True),
]


# ---------------------------------------------------------------------------------------
# The cases and their run.


@dataclasses.dataclass
class Case:
  slot: Slot
  kind: Kind
  dir: pathlib.Path = pathlib.Path()
  bad: str = ""  # the path the command is given or finds
  names: tuple[str, ...] = ()  # what the error line may call the file
  argv: list[str] = dataclasses.field(default_factory=list)
  inputs: list[pathlib.Path] = dataclasses.field(default_factory=list)
  # Results.
  rc: int | None = None
  stderr: str = ""
  took: float = 0.0
  maxrss_kb: int = 0
  hashes_before: dict[str, str] = dataclasses.field(default_factory=dict)
  skip: str | None = None

  @property
  def id(self) -> str:
    return f"{self.slot.id}:{self.kind.name}"


def _cases() -> list[Case]:
  return [
    Case(s, k)
    for s in SLOTS
    for k in KINDS
    if s.content in k.applies and s.command not in k.not_for
  ]


CASES = _cases()


def _fingerprint(path: pathlib.Path) -> str:
  """What must not change: a regular file's bytes (the first MiB and the size of a
  large one), a link's target, anything else's type and size."""
  try:
    info = os.lstat(path)
  except OSError as e:
    return f"missing: {e.errno}"
  if os.path.islink(path):
    return "link " + os.readlink(path)
  if not os.path.isfile(path):
    return f"mode {info.st_mode:o}"
  if info.st_mode & 0o444 == 0:
    return f"unreadable {info.st_size} {info.st_mtime_ns}"
  with open(path, "rb") as f:
    head = f.read(1 << 20)
  return f"{info.st_size} {info.st_mtime_ns} {hashlib.sha256(head).hexdigest()}"


def _prepare(case: Case, base: pathlib.Path) -> None:
  slot, kind = case.slot, case.kind
  name = case.id.replace(":", "_")
  case.dir = pathlib.Path(
    os.fsdecode(os.fsencode(str(base / name)) + (b"\xff\xfe" if kind.non_utf8_name else b""))
  )
  case.dir.mkdir(mode=0o777)
  case.dir.chmod(0o777)  # for the case run without root's override
  module = case.dir / "m.hlo"
  shutil.copyfile(MODULE, module)
  csv = case.dir / "good.csv"
  csv.write_text(CSV)
  folder = case.dir / "xla"
  folder.mkdir()
  folder.chmod(0o777)
  if slot.where == "beside":
    bad = case.dir / "m.config.pbtxt"
  elif slot.where == "folder":
    bad = folder / STAGE_NAME
  else:
    bad = case.dir / ("bad." + {"module": "hlo", "csv": "csv"}.get(slot.content, "pbtxt"))
  if slot.where == "arg" and kind.arg_path:
    case.bad = kind.arg_path
  else:
    kind.make(bad, slot.content)
    case.bad = str(bad)
  case.inputs = [module, csv, bad]
  values = {
    "bad": case.bad,
    "module": str(module),
    "dir": str(folder),
    "out": str(case.dir / "out"),
    "csv": str(csv),
  }
  case.argv = [a.format(**values) for a in slot.argv]
  if slot.runner != "hook":
    case.argv += list(BOUNDS)
  shown = [case.bad, os.path.basename(case.bad)] + ([str(folder)] if slot.where == "folder" else [])
  case.names = tuple(escape_name(n) for n in shown)
  if kind.grows:  # its writer changes it; the command must not change the others
    case.inputs.remove(bad)
  case.hashes_before = {str(p): _fingerprint(p) for p in case.inputs}


def _child(case: Case) -> None:
  """In the forked child: the case's command, as its own program would run it."""
  try:
    os.setpgid(0, 0)
    for fd, name, flags in (
      (0, "/dev/null", os.O_RDONLY),
      (1, str(case.dir / "stdout"), os.O_WRONLY | os.O_CREAT),
      (2, str(case.dir / "stderr"), os.O_WRONLY | os.O_CREAT),
    ):
      new = os.open(name, flags, 0o666)
      os.dup2(new, fd)
      os.close(new)
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))
    if case.kind.as_nobody and os.geteuid() == 0:
      os.setgroups([])
      os.setgid(NOBODY)
      os.setuid(NOBODY)
    if case.slot.runner == "nvshmem-opt":
      os.execv(str(NVSHMEM_OPT), [str(NVSHMEM_OPT)] + case.argv)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
      rc = cli.main(case.argv)
    except SystemExit as e:
      rc = e.code if isinstance(e.code, int) else 1
    except BaseException:  # what the real entry point would print: a traceback, 1
      traceback.print_exc()
      rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
  except BaseException:
    try:
      traceback.print_exc(file=open(2, "w", closefd=False))
    finally:
      os._exit(99)


def _grow(path: str) -> int:
  """A process appending junk to `path` until killed (at most GROWS_TO bytes, then
  more after each pause, so the disk is not filled)."""
  pid = os.fork()
  if pid == 0:
    try:
      with open(path, "ab", buffering=0) as f:
        end = time.monotonic() + TIME_CAP * 4
        while time.monotonic() < end:
          if f.tell() < GROWS_TO:
            f.write(JUNK * 64)
          else:
            time.sleep(0.05)
            f.write(JUNK)
    finally:
      os._exit(0)
  return pid


def _run_all(cases: list[Case]) -> None:
  """Runs the fork and driver cases, PARALLEL at a time, each within TIME_CAP."""
  waiting = [c for c in cases if c.slot.runner != "hook" and c.skip is None]
  running: dict[int, tuple[Case, float, int | None]] = {}
  while waiting or running:
    while waiting and len(running) < PARALLEL:
      case = waiting.pop(0)
      writer = _grow(case.bad) if case.kind.grows else None
      if writer is not None:
        time.sleep(0.05)  # the file has bytes, and more come, when the command opens it
      pid = os.fork()
      if pid == 0:
        _child(case)
      running[pid] = (case, time.monotonic(), writer)
    time.sleep(0.01)
    for pid, (case, start, writer) in list(running.items()):
      done, status, usage = os.wait4(pid, os.WNOHANG)
      late = time.monotonic() - start > TIME_CAP
      if not done and not late:
        continue
      if not done:  # a hang: kill its process group, say so
        os.killpg(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
      case.took = time.monotonic() - start
      case.rc = os.waitstatus_to_exitcode(status) if done else None
      case.maxrss_kb = usage.ru_maxrss
      case.stderr = (case.dir / "stderr").read_bytes().decode("utf-8", "backslashreplace")
      if writer is not None:
        os.kill(writer, signal.SIGKILL)
        os.waitpid(writer, 0)
      del running[pid]


_HOOK_RUNNER = r"""
import json, os, signal, sys, time, warnings
from hlo_tools import bounded_input, jax_hook, selection
from hlo_tools.errors import HookError, one_line
warnings.simplefilter("ignore")
bounded_input.set_input_timeout(1.0)  # the library's bound on a silent FIFO
topology = selection.parse_topology("1x1x2:gpus_per_process=1", "nccl,peer")
compiling = []

class Hang(BaseException):
  pass

def hang(*_):
  raise Hang("no end within the time cap")

signal.signal(signal.SIGALRM, hang)
import jax.extend.xla  # jax's import, once, before any case's time runs

def ready_to_compile():
  if not compiling:  # jax's backend started, with the environment's own XLA_FLAGS
    import jax, jax.numpy as jnp
    x = jnp.ones(4)
    one = selection.parse_topology("1x1x1:gpus_per_process=1", "nccl,peer")
    hook = jax_hook.install(one, backends=("nccl", "peer"), per_op=False,
                            platforms=("cpu",), name="matrix_compile")
    compiling.append((hook, jax.jit(lambda a: a + 1).lower(x)))
    compiling[0][0].compile(compiling[0][1])  # jax's first compile, outside any case

def compile_with_flags_file(path):
  hook, lowered = compiling[0]
  os.environ["XLA_FLAGS"] = path
  try:
    hook.compile(lowered)
  finally:
    del os.environ["XLA_FLAGS"]

cases = [json.loads(line) for line in sys.stdin]
for case in cases:
  if case["op"] == "compile":
    ready_to_compile()  # after the install cases (one hook per platform), untimed
  start = time.monotonic()
  signal.alarm(int(sys.argv[1]))
  try:
    if case["op"] == "install":
      jax_hook.install(topology, backends=("nccl", "peer"), cost_table=case["bad"],
                       per_op=False, platforms=("cpu",), name="matrix_" + case["id"]).uninstall()
    else:
      compile_with_flags_file(case["bad"])
    result = {"rc": 0, "stderr": "no error"}
  except HookError as e:
    result = {"rc": 2, "stderr": one_line(e)}
  except Hang:
    result = {"rc": None, "stderr": "no end within the time cap"}
  except BaseException as e:
    result = {"rc": 1, "stderr": "Traceback: " + type(e).__name__ + ": " + one_line(e)}
  finally:
    signal.alarm(0)
  result["took"] = time.monotonic() - start
  print(json.dumps(result), flush=True)
"""
HOOK_TIME_CAP = 5  # seconds per hook case (one process runs them in turn)


def _start_hook(cases: list[Case]) -> tuple | None:
  """Starts the hook's cases, in one process (jax imported once), each with a time
  cap; they run while the forks do (_finish_hook collects them)."""
  hook = [c for c in cases if c.slot.runner == "hook" and c.skip is None]
  if not hook:
    return None
  for case in hook:
    if case.kind.as_nobody and os.geteuid() == 0:
      # The hook's process is a new interpreter, whose own files nobody may not read
      # (a Python under /root); the forks of this one and the driver run as nobody.
      case.skip = "the hook's process runs as root, which reads a file of mode 000"
  hook = [c for c in hook if c.skip is None]
  writers = {c.id: _grow(c.bad) for c in hook if c.kind.grows}
  proc = subprocess.Popen(
    [sys.executable, "-c", _HOOK_RUNNER, str(HOOK_TIME_CAP)],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    errors="backslashreplace",
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES)),
  )
  assert proc.stdin is not None
  proc.stdin.write(
    "".join(
      json.dumps({"op": c.slot.argv[0], "id": c.id.replace(":", "_"), "bad": c.bad}) + "\n"
      for c in hook
    )
  )
  proc.stdin.close()
  proc.stdin = None  # all given: communicate() only reads
  return proc, hook, writers


def _finish_hook(started: tuple | None) -> None:
  if started is None:
    return
  proc, hook, writers = started
  try:
    out, err = proc.communicate(timeout=120 + HOOK_TIME_CAP * len(hook))
  except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
  finally:
    for pid in writers.values():
      os.kill(pid, signal.SIGKILL)
      os.waitpid(pid, 0)
  results = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
  for case, result in zip(hook, results):
    case.rc, case.stderr, case.took = result["rc"], result["stderr"], result["took"]
  for case in hook[len(results) :]:
    case.stderr = f"no result (the hook's process ended: {err[-500:]})"


def _others_may_run(path: pathlib.Path) -> bool:
  """Whether a user other than the owner may reach and run `path` (and the build
  folder beside it, where the launcher finds the driver)."""
  for part in [path, *path.parents]:
    if not os.stat(part).st_mode & stat.S_IXOTH:
      return False
  return True


@pytest.fixture(scope="module")
def results(request):
  if not NVSHMEM_OPT.exists():
    pytest.skip("nvshmem-opt is not built (scripts/setup.sh)")
  # Every command's modules imported before the forks, once (a case run as nobody
  # may not read the interpreter's own files).
  for module in list(cli.COMMANDS.values()) + [
    "hlo_tools.ops.heuristics.check",
    "hlo_tools.ops.heuristics.sweep",
    "hlo_tools.ops.heuristics.calibrate",
    "hlo_tools.ops.heuristics.evaluate",
    "hlo_tools.ops.heuristics.plot",
    "concurrent.futures.thread",
  ]:
    __import__(module)
  base = pathlib.Path(tempfile.mkdtemp(prefix="bad-input-matrix-"))
  base.chmod(0o755)  # the unreadable cases run as nobody
  # The cases this session collected (-k picks some), each run once.
  wanted = {
    item.callspec.params["case_id"]
    for item in request.session.items
    if hasattr(item, "callspec") and "case_id" in item.callspec.params
  }
  cases = {c.id: c for c in _cases() if c.id in wanted}
  driver_for_nobody = _others_may_run(NVSHMEM_OPT)
  try:
    for case in cases.values():
      if case.slot.runner == "nvshmem-opt" and case.kind.as_nobody and not driver_for_nobody:
        # A checkout in a private folder (mode 700): nobody cannot start the driver,
        # so an unreadable input cannot be told from an unrunnable driver there.
        case.skip = "nvshmem-opt's folder is private to its owner: nobody cannot run it"
        continue
      _prepare(case, base)
    hook = _start_hook(list(cases.values()))
    _run_all(list(cases.values()))
    _finish_hook(hook)
    yield cases
  finally:
    for case in cases.values():
      if case.kind.name == "unreadable":
        for path in case.inputs:
          if path.exists() and not path.is_symlink():
            path.chmod(0o644)
    shutil.rmtree(base, ignore_errors=True)


def _check(case: Case) -> None:
  if case.skip:
    pytest.skip(case.skip)
  lines = case.stderr.strip().splitlines()
  where = f"{case.id} ({' '.join(case.argv)}): rc {case.rc}, {case.took:.1f} s, stderr:\n{case.stderr[-3000:]}"
  assert case.rc is not None, "no end within the time cap: " + where
  assert "Traceback" not in case.stderr, where
  assert case.rc == 2, where
  assert len(lines) == 1, where
  assert any(name in lines[0] for name in case.names), (
    f"the line names none of {case.names}: " + where
  )
  assert case.took < TIME_CAP, where
  assert case.maxrss_kb * 1024 < CAP_BYTES, where
  after = {str(p): _fingerprint(p) for p in case.inputs}
  assert after == case.hashes_before, where


# Cases whose fix is another part's, not yet in: (slot id, kind) -> what is missing.
# Each is a strict xfail: it fails the suite once fixed, so the entry goes.
MISSING: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_bad_input(results, case_id):
  case = results[case_id]
  key = (case.slot.id, case.kind.name)
  if key in MISSING:
    try:
      _check(case)
    except AssertionError:
      pytest.xfail(MISSING[key])
    pytest.fail(f"{case_id} passes now: remove its MISSING entry ({MISSING[key]})")
  _check(case)


def test_matrix_is_large_enough():
  # Each slot meets every kind of bad input that applies to what it holds; the
  # kinds are at least the twenty the issue of bad inputs lists.
  assert len(KINDS) >= 20
  commands = {s.command for s in SLOTS}
  assert commands >= {"parse", "explain", "verify", "diff", "report", "dump", "nvshmem-opt"}
  assert {"heuristics-sweep", "heuristics-check-pass", "heuristics-calibrate"} <= commands
  assert "hook-install" in commands
  for slot in SLOTS:
    kinds = [k for k in KINDS if slot.content in k.applies and slot.command not in k.not_for]
    # A GPU target config's text is XLA's to read, in the compile, and XLA_FLAGS' file
    # is XLA's flags: the file's kinds only.
    assert len(kinds) >= (9 if slot.content in ("target", "flags") else 14), (slot.id, len(kinds))
