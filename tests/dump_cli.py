"""`hlo-tools dump` as the dump tests run it (a child process with this checkout
first on its path), and the computations and loop bodies of the text it writes."""

import os
import re
import subprocess
import sys

from conftest import ROOT as ROOT_DIR

ROOT = str(ROOT_DIR)


def dump_env():
  return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def run_dump(*args):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "dump", *args],
    cwd=ROOT,
    env=dump_env(),
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )


def computations(text):
  """HLO computation name -> body text (a line-based split; enough for these checks)."""
  result, name, lines = {}, None, []
  for line in text.splitlines():
    m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{\s*$", line)
    if m:
      name, lines = m.group(1), []
    elif line.startswith("}") and name:
      result[name] = "\n".join(lines)
      name = None
    elif name:
      lines.append(line)
  return result


def while_bodies(text):
  comps = computations(text)
  names = re.findall(r"\bwhile\(.*?body=%?([\w.\-]+)", text)
  assert names, "no while loop in module"
  return [comps[n] for n in names]
