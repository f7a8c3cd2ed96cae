# lit configuration for nvshmem-opt's FileCheck tests.
#
#   .venv/bin/lit -v tests/lit
#
# Each *.test file runs the driver on committed HLO from JAX/XLA
# (tests/fixtures/) and checks its output with LLVM's FileCheck.
# NVSHMEM_OPT_BUILD_DIR names the CMake build holding nvshmem-opt (default:
# build/ at the repository root); FILECHECK names a FileCheck binary (default:
# the newest /usr/lib/llvm-*/bin/FileCheck, else the one on PATH).
# mypy: ignore-errors
import glob
import os
import re
import shutil
import sys

import lit.formats

config.name = "nvshmem-opt"  # noqa: F821 (lit defines config)
# lit's own shell: `not`, `diff` and the pipes behave the same on every host.
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".test"]  # noqa: F821

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
build = os.path.abspath(
    os.environ.get("NVSHMEM_OPT_BUILD_DIR") or os.path.join(root, "build"))
config.test_source_root = here  # noqa: F821
# Temporary files (%t) go under the build directory, not the source tree.
config.test_exec_root = os.path.join(build, "lit-tests")  # noqa: F821

driver = os.path.join(build, "nvshmem-opt")
if not os.access(driver, os.X_OK):
    lit_config.fatal(  # noqa: F821
        f"{driver}: not built (cmake --build build --target nvshmem-opt, "
        "or set NVSHMEM_OPT_BUILD_DIR)")


def _version(path: str) -> int:
    match = re.search(r"llvm-(\d+)", path)
    return int(match.group(1)) if match else 0


filecheck = os.environ.get("FILECHECK") or next(
    iter(sorted(glob.glob("/usr/lib/llvm-*/bin/FileCheck"), key=_version,
                reverse=True)), None) or shutil.which("FileCheck")
if not filecheck:
    lit_config.fatal(  # noqa: F821
        "FileCheck not found (Debian's llvm-14-tools; or set FILECHECK)")

# A tool's name is replaced only where it stands as a word of its own, so the
# paths and the messages that contain it are left alone.
def _word(name: str) -> str:
    return r"(?<![\w/.%-])" + re.escape(name) + r"(?![\w/.-])"


config.substitutions.append(("%fixtures", os.path.join(root, "tests", "fixtures")))  # noqa: F821
config.substitutions.append((_word("nvshmem-opt"), driver))  # noqa: F821
config.substitutions.append((_word("FileCheck"), filecheck))  # noqa: F821
config.substitutions.append(("%python", sys.executable))  # noqa: F821
