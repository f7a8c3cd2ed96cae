"""hlo_tools: read, dump, diff, verify and explain XLA HLO around the NVSHMEM pass."""

import os as _os

__version__ = "0.1.0"

# Where a binding of the core built for another interpreter may sit
# (scripts/build_core_py312.sh): searched after the package's own folder, where
# Python finds no binding of this interpreter's ABI there. At import, so that
# every module that reads the core's facts (the input bounds among them) finds
# it whatever is imported first.
CORE_DIRS_ENV = "NVSHMEM_OPT_CORE_DIR"
CARRY_DIRS = (".carry_py312",)


def add_core_dirs() -> None:
  """Adds $NVSHMEM_OPT_CORE_DIR's folders and the checkout's carried binding folders
  to the package's search path (each once)."""
  root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
  dirs = [d for d in _os.environ.get(CORE_DIRS_ENV, "").split(_os.pathsep) if d]
  for d in dirs + [_os.path.join(root, d) for d in CARRY_DIRS]:
    if _os.path.isdir(d) and d not in __path__:
      __path__.append(d)


add_core_dirs()
