"""Every command block of docs/commands.md runs as printed.

Each ```sh block runs as one bash script (`set -e -o pipefail`: any command that
fails fails the block) in a fresh directory that holds links to the checkout's
`.venv/`, `core/` and `tests/`, the paths the blocks name relative to the
repository root, where a reader runs them. No text of a block is changed; what
differs from a reader's shell is listed in SUBSTITUTIONS. A block that does not
run here is in SKIPPED, with why; a block in neither, or an entry that names no
block, fails the test.

Where a block quotes what a command prints (comment lines under it, `#   ...`),
each quoted line without an elision ("...") must appear in what the block
printed, white space aside.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import NVSHMEM_OPT, ROOT

pytestmark = pytest.mark.long


DOC = ROOT / "docs" / "commands.md"

# What differs from a reader's shell at the repository root, and nothing else.
SUBSTITUTIONS = {
  "working directory": "a fresh temporary directory with links to .venv/, core/ and tests/ "
  "(the blocks write out/, which must not land in the checkout)",
  "PATH": ".venv/bin first, as after the first block's `source .venv/bin/activate`, which "
  "the later blocks assume",
}

# Blocks that do not run here, by their first line.
SKIPPED = {
  "scripts/run_main.sh": "the three scripts: the main job and the test suites, minutes each "
  "(scripts/test.sh runs this test)",
  "nvshmem-opt INPUT [-o OUT]": "a synopsis: INPUT, OUT and the bracketed options are "
  "placeholders, not a command",
}

TIMEOUT = 600


def _blocks() -> list[tuple[str, int, str]]:
  """(section heading, line, text) of every ```sh block of the page."""
  blocks, heading, body, start = [], "", None, 0
  for number, line in enumerate(DOC.read_text().splitlines(), 1):
    if body is None and line.startswith("#"):
      heading = line.lstrip("# ").strip()
    elif body is None and line.strip() == "```sh":
      body, start = [], number + 1
    elif body is not None and line.strip() == "```":
      blocks.append((heading, start, "\n".join(body) + "\n"))
      body = None
    elif body is not None:
      body.append(line)
  return blocks


BLOCKS = _blocks()


def _first_line(text: str) -> str:
  return text.strip().splitlines()[0]


def _skip_reason(text: str) -> str | None:
  first = _first_line(text)
  return next((why for start, why in SKIPPED.items() if first.startswith(start)), None)


def _quoted(text: str) -> list[str]:
  """The lines a block quotes as output: comment lines of their own under a
  command, less their marker, where nothing of them is elided."""
  quoted = []
  for line in text.splitlines():
    match = re.match(r"^#\s{3,}(.*)$", line)
    if match and "..." not in match.group(1):
      quoted.append(match.group(1))
  return quoted


def _squeezed(text: str) -> str:
  return " ".join(text.split())


def test_every_block_is_run_or_skipped_with_a_reason():
  assert len(BLOCKS) >= 6, [b[:2] for b in BLOCKS]
  firsts = [_first_line(text) for _, _, text in BLOCKS]
  for start in SKIPPED:
    assert any(f.startswith(start) for f in firsts), f"SKIPPED names no block: {start}"


@pytest.mark.parametrize(
  "heading,line,text", BLOCKS, ids=[f"line{line}-{heading}" for heading, line, _ in BLOCKS]
)
def test_block_runs_as_printed(heading, line, text, tmp_path):
  why = _skip_reason(text)
  if why:
    pytest.skip(why)
  if not NVSHMEM_OPT.exists():
    pytest.skip("nvshmem-opt is not built (scripts/setup.sh)")
  for name in (".venv", "core", "tests"):
    (tmp_path / name).symlink_to(ROOT / name)
  venv_bin = str(ROOT / ".venv" / "bin")
  env = dict(os.environ, PATH=venv_bin + os.pathsep + os.environ.get("PATH", ""))
  env.pop("NVSHMEM_REPORT_DIR", None)
  proc = subprocess.run(
    ["bash", "-c", "set -e -o pipefail\n" + text],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=TIMEOUT,
    check=False,
  )
  where = f"docs/commands.md:{line} ({heading}): exit {proc.returncode}\n{proc.stderr[-4000:]}"
  assert proc.returncode == 0, where
  printed = _squeezed(proc.stdout + proc.stderr)
  for quoted in _quoted(text):
    assert _squeezed(quoted) in printed, f"{where}\nquoted, not printed: {quoted}"
