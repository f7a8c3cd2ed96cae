"""README.md's first screen shows a decision as `hlo-tools explain` prints it: the
excerpt must stay what the command prints today, line for line."""

import re
import subprocess
import sys

from conftest import FIXTURES, ROOT

FIXTURE = FIXTURES / "perm_ring_1x2x4.after_optimizations.hlo"


def _excerpt() -> list[str]:
  text = (ROOT / "README.md").read_text()
  block = re.search(r"```text\n(%collective-permute-start\n.*?)```", text, re.S)
  assert block, "README.md lost its decision excerpt"
  lines: list[str] = []
  for line in block.group(1).splitlines():
    if line.startswith("                ") and lines:  # a wrapped value continues
      lines[-1] += " " + line.strip()
    else:
      lines.append(line.rstrip())
  return lines


def test_readme_decision_is_what_explain_prints():
  out = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "explain", str(FIXTURE), "--topology=1x2x4"],
    capture_output=True,
    text=True,
    check=True,
    cwd=ROOT,
  ).stdout
  printed = [line.rstrip() for line in out.splitlines()]
  excerpt = _excerpt()
  assert len(excerpt) >= 6
  for line in excerpt:
    assert line in printed, f"README.md shows a line explain no longer prints: {line!r}"


def test_readme_first_screen_has_decision_and_sketch():
  head = (ROOT / "README.md").read_text().splitlines()[:45]
  assert any(line.startswith("  choice") for line in head)
  assert any(line.startswith("selection core") for line in head)
