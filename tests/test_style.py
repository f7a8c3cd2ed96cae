"""The C++ is in Google style, as XLA's: clang-format with the repository's
.clang-format finds nothing to change (skipped when clang-format is not
installed; scripts/setup.sh installs it). The Bazel files' buildifier check is
in test_patches.py."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLANG_FORMAT = shutil.which("clang-format")


def tracked(*patterns):
  out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=REPO,
                       capture_output=True, text=True, check=True).stdout
  return [name for name in out.split("\0") if name]


@pytest.mark.skipif(CLANG_FORMAT is None, reason="clang-format not installed")
def test_cpp_is_clang_formatted():
  files = tracked("*.cc", "*.h", "*.inc")
  assert files
  proc = subprocess.run([CLANG_FORMAT, "--dry-run", "--Werror", *files], cwd=REPO,
                        capture_output=True, text=True)
  unformatted = sorted({line.split(":", 1)[0] for line in proc.stderr.splitlines()
                        if ": error:" in line})
  assert proc.returncode == 0, f"run clang-format -i on: {' '.join(unformatted)}"

