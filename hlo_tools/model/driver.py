"""nvshmem-opt, the C++ driver: finding it, running it, and upstream's answer from it.

Upstream XLA's CollectiveBackendAssigner runs only inside the driver (the real pass
from the XLA it links, `--compare-upstream`); Python never re-implements its rule.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import typing
from typing import Any

from hlo_tools import selection
from hlo_tools.errors import InputError
from hlo_tools.model.driver_report import Report

# The driver's own log lines (TensorFlow/absl start-up noise, its note on an
# inferred partition count, which the tools print from its report) are not messages.
_NOISE_RE = re.compile(
  r"^(WARNING: All log messages|[IWE]\d{4} |\s*$"
  r"|nvshmem-opt: .* gives no num_partitions\b.*\(--num-partitions=N "
  r"overrides\)$|nvshmem-opt: .*: no --topology; using )"
)


# A command that needs the driver and finds none says which install brings it:
# the driver is its own distribution (built against the tensorflow wheel's XLA),
# an extra of the base package.
NOT_INSTALLED = (
  "nvshmem-opt is not installed: pip install 'hlo-tools[xla]' brings it "
  "(in a checkout, scripts/setup.sh builds it)"
)


def find_nvshmem_opt() -> str | None:
  """nvshmem-opt: $NVSHMEM_OPT, next to this Python (the venv), PATH, or the build tree."""
  env = os.environ.get("NVSHMEM_OPT")
  if env:
    return env if os.access(env, os.X_OK) else None
  here = os.path.dirname(os.path.abspath(sys.executable))
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  repo_build = os.path.join(repo, "build", "nvshmem-opt")
  for cand in (os.path.join(here, "nvshmem-opt"), shutil.which("nvshmem-opt"), repo_build):
    if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
      return cand
  return None


def driver_env() -> dict[str, str]:
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
  return env


def first_message(stderr: str) -> str:
  """The driver's one-line error, skipping TensorFlow's start-up log lines."""
  for line in stderr.splitlines():
    if not _NOISE_RE.match(line):
      return line.strip()
  return ""


_REPORT_PREFIX = "nvshmem-opt-report-"
_REPORT_RE = re.compile(r"^nvshmem-opt-report-(\d+)-\w+\.json$")


def _clean_stale_reports(directory: str) -> None:
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


class Answer(typing.NamedTuple):
  """One nvshmem-opt run on one input: its exit status, its JSON report (None
  unless it succeeded) and its one-line message (the error when it failed)."""

  rc: int
  report: Report | None
  message: str


def run_nvshmem_opt(
  path: str | os.PathLike,
  topology: str | None,
  cost_table: selection.CostTable | None = None,
  mode: str = "explain",
  out: str | os.PathLike | None = None,
  compare_upstream: bool = False,
  timeout: float = 600,
  num_partitions: int | None = None,
  tmp_dir: str | None = None,
  annotate: bool = False,
  backends: str | None = None,
  devices_per_host: int | None = None,
  module_config: str | None = None,
  per_op_modes: bool = False,
) -> Answer:
  """Runs the driver once on the module at `path`.

  topology: a spec, or None to let the driver derive it from the module (hosts of
  devices_per_host GPUs, the driver's default when None; its report's "spec").
  cost_table: the table a command read (selection.CostTable), which travels as its
  text on stdin, the one way a table reaches the driver; None: the built-in one.
  backends: the set the target XLA offers ("nccl,peer"), else the table's.
  module_config: XLA's config that places the module's devices, where none lies
  beside `path` (a copy of the user's module).
  per_op_modes: the target XLA runs each permute's own mode (options.PER_OP_MODES_HELP);
  else a stock XLA, on which the rewrite writes peer and symmetric memory as NCCL.

  The driver's JSON report goes to a temporary file in tmp_dir (default: the system's
  temporary directory), named with our pid so that a later run can remove it when a
  kill left it behind.
  """
  exe = find_nvshmem_opt()
  if exe is None:
    env = os.environ.get("NVSHMEM_OPT")
    raise FileNotFoundError(
      f"nvshmem-opt is not built at $NVSHMEM_OPT={env} (not an executable file)"
      if env
      else NOT_INSTALLED
    )
  tmp_dir = tmp_dir or tempfile.gettempdir()
  _clean_stale_reports(tmp_dir)
  fd, report_path = tempfile.mkstemp(
    prefix=f"{_REPORT_PREFIX}{os.getpid()}-", suffix=".json", dir=tmp_dir
  )
  os.close(fd)
  try:
    cmd = [exe, os.fspath(path), f"--mode={mode}", f"--report={report_path}"]
    cmd += _flags(topology, cost_table, backends, devices_per_host, num_partitions, module_config)
    if compare_upstream:
      cmd.append("--compare-upstream")
    if annotate:
      cmd.append("--annotate")  # decisions also in frontend attributes
    if per_op_modes:
      cmd.append("--per-op-modes")
    if out:
      cmd += ["-o", os.fspath(out)]
    proc = subprocess.run(
      cmd,
      env=driver_env(),
      capture_output=True,
      text=True,
      input=None if cost_table is None else str(cost_table),
      timeout=timeout,
      check=False,
    )
    report = None
    if proc.returncode == 0:
      try:
        with open(report_path) as f:
          report = _in_core_order(json.load(f))
      except (OSError, ValueError):
        report = None
    return Answer(proc.returncode, report, first_message(proc.stderr))
  finally:
    os.unlink(report_path)


def _flags(
  topology: str | None,
  cost_table: selection.CostTable | None,
  backends: str | None,
  devices_per_host: int | None,
  num_partitions: int | None,
  module_config: str | None,
) -> list[str]:
  """The driver's flags for what every run says of its inputs."""
  flags = []
  if topology:
    flags.append(f"--topology={topology}")
  elif devices_per_host is not None:
    flags.append(f"--devices-per-host={devices_per_host}")
  if cost_table is not None:
    flags.append("--cost-table=-")
  if backends:
    flags.append(f"--backends={backends}")
  if num_partitions:
    flags.append(f"--num-partitions={num_partitions}")
  if module_config:
    flags.append(f"--module-config={module_config}")
  return flags


def _in_core_order(report: Report) -> Report:
  """The report with each decision's per-backend times and refusals and
  per-link-class edge counts (JSON objects keyed by the core's names, in no set
  order) in the core's order, "chosen" last, so that what is printed from them
  reads the same every run."""
  for decision in report.get("decisions", ()):
    d = typing.cast(dict[str, Any], decision)  # keys taken in turn below
    for key, names in (
      ("modeled_us", selection.BACKENDS + ("chosen",)),
      ("refused", selection.BACKENDS),
      ("edges_by_class", selection.LINK_CLASSES),
    ):
      given = d.get(key)
      if isinstance(given, dict):
        d[key] = {**{n: given[n] for n in names if n in given}, **given}
  return report


def ask(
  path: str | os.PathLike,
  topology: str | None,
  cost_table: selection.CostTable | None = None,
  compare_upstream: bool = True,
  timeout: float = 600,
  **flags: Any,
) -> Answer:
  """nvshmem-opt --mode=explain on the module (flags: run_nvshmem_opt's): its
  decisions, counts, topology and, with compare_upstream, upstream's answers.
  Where it could not run, an Answer of exit status -1 saying why."""
  try:
    return run_nvshmem_opt(
      path,
      topology,
      cost_table,
      mode="explain",
      compare_upstream=compare_upstream,
      timeout=timeout,
      **flags,
    )
  except FileNotFoundError as e:
    return Answer(-1, None, str(e))
  except subprocess.TimeoutExpired:
    return Answer(-1, None, f"nvshmem-opt did not finish within {timeout} s")
  except (OSError, subprocess.SubprocessError) as e:
    return Answer(-1, None, f"nvshmem-opt could not run: {e}")


def explain_report(
  path: str | os.PathLike,
  topology_spec: str | None,
  cost_table: selection.CostTable | None,
  num_partitions: int | None = None,
  backends: str | None = None,
  timeout: float = 600,
  module_config: str | None = None,
) -> tuple[Report | None, str | None]:
  """(report, None) of nvshmem-opt --mode=explain --compare-upstream on the module,
  or (None, one line saying why there is none: the driver's own error message, or
  why it could not run)."""
  answer = ask(
    path,
    topology_spec,
    cost_table,
    num_partitions=num_partitions,
    backends=backends,
    timeout=timeout,
    module_config=module_config,
  )
  return answer.report, why_no_report(answer)


def derived(path: str | os.PathLike, answer: Answer) -> str:
  """The topology spec the driver derived for the module at `path` (its report's
  "spec"), or InputError with the driver's one-line message when it could not."""
  if answer.report is not None:
    return answer.report["spec"]
  if answer.rc == -1:
    raise InputError(
      f"{path}: no --topology given and the driver cannot derive one: {answer.message}"
    )
  raise InputError(answer.message or f"{path}: nvshmem-opt exit {answer.rc}")


def placed_topology(report: Report) -> selection.Topology:
  """The topology the driver decided on, built by the core from the report's facts
  (`placed`, with its partition_to_device; the process layout as the driver
  resolved it for its backend set): the same one, never a spec parsed again."""
  placed = report["placed"]
  return selection.Topology.create(
    slices=placed["slices"],
    hosts_per_slice=placed["hosts_per_slice"],
    gpus_per_host=placed["gpus_per_host"],
    nvlink_domain_size=placed["nvlink_domain_size"],
    partition_to_device=report["partition_to_device"],
    device_to_process=placed["device_to_process"],
    gpus_per_process=0 if placed["device_to_process"] else placed["gpus_per_process"],
  )


def placement(report: Report) -> str | None:
  """Where the report's device map came from ("the module's device assignment
  (CONFIG)", "the topology's map"), None where the driver knew no map."""
  where = report.get("placement")
  return None if where in (None, "", "unknown") else where


def why_no_report(answer: Answer) -> str | None:
  """Why the answer carries no report (its message), None when it does."""
  if answer.report is not None:
    return None
  if answer.rc > 0:
    return answer.message or f"nvshmem-opt exited with status {answer.rc} and said nothing"
  return answer.message


def upstream_from_report(report: Report | None) -> dict:
  """{(computation, instruction): backend} from a driver report made with
  --compare-upstream (its decisions name the input's instructions)."""
  decisions = report["decisions"] if report is not None else []
  return {
    (d["computation"], d["instruction"]): d.get("upstream") for d in decisions if d.get("upstream")
  }
