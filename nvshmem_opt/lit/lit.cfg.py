# lit configuration for nvshmem-opt's FileCheck tests.
#
#   .venv/bin/lit -v nvshmem_opt/lit
#
# Each *.test file runs the driver on committed HLO from JAX/XLA
# (tests/fixtures/) and checks what it prints with LLVM's FileCheck; a *.hlo
# file is a small module of the form XLA's own pass tests use, its RUN lines
# in its comments (%s).
# NVSHMEM_OPT_BUILD_DIR names the CMake build holding nvshmem-opt (default:
# build/ at the repository root); FILECHECK names a FileCheck binary (default:
# the newest /usr/lib/llvm-*/bin/FileCheck, else the one on PATH).
# Substitutions: nvshmem-opt, FileCheck, %fixtures (tests/fixtures) and
# %python (the interpreter running lit, for json.tool).
# The CHECK lines after each RUN block are scripts/generate_lit_checks.py's
# (regenerate them with it, don't edit them); it makes the same substitutions.
import glob
import os
import re
import shutil
import sys

import lit.formats

cfg = config  # type: ignore[name-defined]  # noqa: F821 (lit defines it)
lit_cfg = lit_config  # type: ignore[name-defined]  # noqa: F821

cfg.name = "nvshmem-opt"
# lit's own shell: `not`, `diff` and pipes behave alike on every host.
cfg.test_format = lit.formats.ShTest(execute_external=False)
cfg.suffixes = [".test", ".hlo"]

here = os.path.dirname(os.path.abspath(__file__))  # nvshmem_opt/lit
root = os.path.dirname(os.path.dirname(here))
build = os.path.abspath(os.environ.get("NVSHMEM_OPT_BUILD_DIR") or os.path.join(root, "build"))
cfg.test_source_root = here
# Temporary files (%t) go under the build directory, not the source tree.
cfg.test_exec_root = os.path.join(build, "lit-tests")

driver = os.path.join(build, "nvshmem-opt")
if not os.access(driver, os.X_OK):
  lit_cfg.fatal(
    f"{driver}: not built (cmake --build build --target nvshmem-opt, or set NVSHMEM_OPT_BUILD_DIR)"
  )


def _llvm_version(path: str) -> int:
  match = re.search(r"llvm-(\d+)", path)
  return int(match.group(1)) if match else 0


installed = sorted(glob.glob("/usr/lib/llvm-*/bin/FileCheck"), key=_llvm_version, reverse=True)
filecheck = (
  os.environ.get("FILECHECK") or (installed[0] if installed else None) or shutil.which("FileCheck")
)
if not filecheck:
  lit_cfg.fatal("FileCheck not found (Debian's llvm-14-tools; or FILECHECK)")


def _word(name: str) -> str:
  # A tool's name is replaced only where it stands as a word of its own, so
  # paths and messages that contain it are left alone.
  return r"(?<![\w/.%-])" + re.escape(name) + r"(?![\w/.-])"


cfg.substitutions.append(("%fixtures", os.path.join(root, "tests", "fixtures")))
cfg.substitutions.append(("%python", sys.executable))
cfg.substitutions.append((_word("nvshmem-opt"), driver))
cfg.substitutions.append((_word("FileCheck"), filecheck))
