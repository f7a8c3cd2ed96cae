"""The machine and software versions a benchmark ran on (printed with every result).

Timings mean little without them: the same run on another CPU, core count or XLA
gives other numbers, so `hlo-tools bench` records these next to its figures.
"""

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def _meminfo_kb(key: str) -> int | None:
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith(key + ":"):
          return int(line.split()[1])
  except OSError:
    pass
  return None


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def machine() -> dict[str, Any]:
  """Cores (all, and those this process may use), memory, CPU model, OS."""
  usable: int | None
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    usable = os.cpu_count()
  mem_kb = _meminfo_kb("MemTotal")
  return {
    "cpu_model": _cpu_model(),
    "cpu_count": os.cpu_count(),
    "cpus_usable": usable,
    "mem_total_gb": mem_kb / 2**20 if mem_kb else 0.0,
    "platform": platform.platform(),
    "python": platform.python_version(),
  }


def versions() -> dict[str, str | None]:
  """jax, jaxlib, tensorflow (nvshmem-opt's XLA comes from it) and our git commit."""
  from importlib import metadata  # pylint: disable=import-outside-toplevel

  out: dict[str, str | None] = {}
  for name in ("jax", "jaxlib", "tensorflow"):
    try:
      out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      out[name] = None
  root = str(Path(__file__).resolve().parents[3])  # the checkout holding hlo_tools/
  try:
    commit = subprocess.run(
      ["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
    # Uncommitted changes make the commit alone an incomplete description.
    dirty = subprocess.run(
      ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
    out["hlo_tools_commit"] = commit + ("-dirty" if dirty else "")
  except (OSError, subprocess.CalledProcessError):
    out["hlo_tools_commit"] = None
  return out
