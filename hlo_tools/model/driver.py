"""nvshmem-opt, the C++ driver: finding it, running it, and upstream's answer from it.

Upstream XLA's CollectiveBackendAssigner runs only inside the driver (the real pass
from the XLA it links, `--compare-upstream`); Python never re-implements its rule.
"""

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from hlo_tools import selection
from hlo_tools.errors import InputError

# nvshmem-opt processes this process started, by --mode: a hook for the test that
# each input goes to the driver once (tests/test_parse_once.py).
RUNS = collections.Counter()

# What those processes parsed ("topology", "cost_table_reads", "cost_table_parses"),
# summed from the line each prints when NVSHMEM_OPT_COUNT_PARSES=1 is set.
PARSES = collections.Counter()
_PARSES_RE = re.compile(r"^nvshmem-opt parses: (.*)$", re.M)

# The driver's own log lines (TensorFlow/absl start-up noise, its parse counts, its
# note on an inferred partition count, which the tools print from its report) are
# not messages.
_NOISE_RE = re.compile(r"^(WARNING: All log messages|[IWE]\d{4} |nvshmem-opt parses: |\s*$"
                       r"|nvshmem-opt: .* gives no num_partitions .*\(--num-partitions=N "
                       r"overrides\)$)")


def find_nvshmem_opt():
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
                    tmp_dir=None, annotate=False, backends=None, devices_per_host=None):
  """Runs the driver; returns (exit status, report dict or None, error line).

  topology: a spec, or None to let the driver derive it from the module (hosts of
  devices_per_host GPUs, the driver's default when None; the report's "topology").
  cost_table: a file, or a table already read (selection.CostTable), which goes to
  the driver as its text on stdin so that the file is read once.
  backends: the set the target XLA offers ("nccl,peer"), else the cost table's.

  The driver's JSON report goes to a temporary file in tmp_dir (default: the system's
  temporary directory), named with our pid so that a later run can remove it when a
  kill left it behind.
  """
  exe = find_nvshmem_opt()
  if exe is None:
    env = os.environ.get("NVSHMEM_OPT")
    raise FileNotFoundError(
        f"nvshmem-opt is not built at $NVSHMEM_OPT={env} (not an executable file)" if env
        else "nvshmem-opt is not built (run scripts/setup.sh)")
  tmp_dir = tmp_dir or tempfile.gettempdir()
  _clean_stale_reports(tmp_dir)
  fd, report_path = tempfile.mkstemp(prefix=f"{_REPORT_PREFIX}{os.getpid()}-",
                                     suffix=".json", dir=tmp_dir)
  os.close(fd)
  try:
    cmd = [exe, os.fspath(path), f"--mode={mode}", f"--report={report_path}"]
    if topology:
      cmd.append(f"--topology={topology}")
    elif devices_per_host is not None:
      cmd.append(f"--devices-per-host={devices_per_host}")
    table_text = None
    if isinstance(cost_table, (str, os.PathLike)):
      if os.fspath(cost_table):
        cmd.append(f"--cost-table={os.fspath(cost_table)}")
    elif cost_table is not None:
      table_text = str(cost_table)
      cmd.append("--cost-table=-")
    if backends:
      cmd.append(f"--backends={backends}")
    if compare_upstream:
      cmd.append("--compare-upstream")
    if num_partitions:
      cmd.append(f"--num-partitions={num_partitions}")
    if annotate:
      cmd.append("--annotate")  # decisions also in frontend attributes
    if out:
      cmd += ["-o", os.fspath(out)]
    RUNS[mode] += 1
    proc = subprocess.run(cmd, env=driver_env(), capture_output=True, text=True,
                          input=table_text, timeout=timeout, check=False)
    for counts in _PARSES_RE.findall(proc.stderr):
      PARSES.update({k: int(v) for k, v in (kv.split("=") for kv in counts.split())})
    report = None
    if proc.returncode == 0:
      try:
        with open(report_path) as f:
          report = _in_core_order(json.load(f))
      except (OSError, ValueError):
        report = None
    return proc.returncode, report, first_message(proc.stderr)
  finally:
    os.unlink(report_path)


def _in_core_order(report):
  """The report with each decision's per-backend times and refusals and
  per-link-class edge counts (JSON objects keyed by the core's names, in no set
  order) in the core's order, "chosen" last, so that what is printed from them
  reads the same every run."""
  for d in report.get("decisions", ()):
    for key, names in (("modeled_us", selection.BACKENDS + ("chosen",)),
                       ("refused", selection.BACKENDS),
                       ("edges_by_class", selection.LINK_CLASSES)):
      given = d.get(key)
      if isinstance(given, dict):
        d[key] = {**{n: given[n] for n in names if n in given}, **given}
  return report


def derived_topology(path, devices_per_host=None, num_partitions=None):
  """The topology spec the driver (and so the pass) derives from the module at `path`.

  Raises InputError with the driver's one-line message when it cannot."""
  try:
    rc, report, message = run_nvshmem_opt(path, None, num_partitions=num_partitions,
                                          devices_per_host=devices_per_host)
  except (FileNotFoundError, OSError, subprocess.SubprocessError) as e:
    raise InputError(f"{path}: no --topology given and the driver cannot derive one: "
                     f"{e}") from None
  if rc != 0 or not report:
    raise InputError(message or f"{path}: nvshmem-opt exit {rc}")
  # A derived topology states no process layout: the driver printed the set's
  # default, which the same set gives again when the spec is parsed.
  return ":".join(o for o in report["topology"].split(":")
                  if not o.startswith("gpus_per_process="))



def explain_report(path, topology_spec, cost_table, num_partitions=None, backends=None,
                   timeout=600):
  """nvshmem-opt --mode=explain --compare-upstream on the module: its decisions,
  counts and upstream's answers, and why there are none.

  Returns (report, None), or (None, one line saying why: the driver's own error
  message, or why it could not run)."""
  try:
    rc, report, message = run_nvshmem_opt(path, topology_spec, cost_table, mode="explain",
                                          compare_upstream=True, num_partitions=num_partitions,
                                          backends=backends, timeout=timeout)
  except FileNotFoundError as e:
    return None, str(e)
  except subprocess.TimeoutExpired:
    return None, f"nvshmem-opt did not finish within {timeout} s"
  except (OSError, subprocess.SubprocessError) as e:
    return None, f"nvshmem-opt could not run: {e}"
  if rc != 0 or report is None:
    return None, message or f"nvshmem-opt exited with status {rc} and said nothing"
  return report, None


def upstream_from_report(report):
  """{(computation, instruction): backend} from a driver report made with
  --compare-upstream (its decisions name the input's instructions)."""
  return {(d.get("computation"), d.get("instruction")): d.get("upstream")
          for d in (report or {}).get("decisions", []) if d.get("upstream")}
