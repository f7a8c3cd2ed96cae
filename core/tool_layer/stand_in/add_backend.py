#!/usr/bin/env python3
"""Writes the selection core and core/tool_layer/ with a fifth backend, `stand_in`.

    add_backend.py OUT_DIR

The backend is added the way docs/architecture.md ("Adding a backend") says a
backend is added: an edit of each file its numbered list names, and of no other
file. OUT_DIR gets the core's sources under core/ and core/tool_layer/'s under
core/tool_layer/, the listed files edited; the build compiles them with
-Werror=switch and runs stand_in_backend_test.cc on them. A spot that enumerates
backends outside the listed files then fails that build or that test, and a list
in the doc that differs from the files edited here fails this script.

Exit 0 done, 1 an edit's anchor not found once or the doc's list changed,
2 bad arguments.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CORE = "core/xla/backends/gpu/transforms/collectives"
DOC = ROOT / "docs" / "architecture.md"

RECORD = """},
    {"stand_in", "stand-in memory", "DEFAULT", "COLLECTIVES_STAND_IN_MEMORY",
     "stand_in", "a test build's XLA", "one host",
     "stand-in memory (a test build): every edge of the permute inside one "
     "host.",
     "none: NCCL's numbers"}};"""

# File -> (anchor, replacement) edits; each anchor must occur exactly once.
EDITS = {
  f"{CORE}/backend_cost_table.h": [
    ("kSymmetric = 3 };", "kSymmetric = 3, kStandIn = 4 };"),
    ("kNumBackends = 4;", "kNumBackends = 5;"),
  ],
  f"{CORE}/backend_cost_table.cc": [('"symmetric"};', '"symmetric", "stand_in"};')],
  f"{CORE}/backend_cost_table.proto": [("SYMMETRIC = 4;", "SYMMETRIC = 4;\n    STAND_IN = 5;")],
  # A rule of its own, with a kind the core has: every edge inside one host.
  f"{CORE}/permute_backend_selection.cc": [
    (
      "    case Backend::kPeer:\n",
      """\
    case Backend::kStandIn:
      if (int n = EdgesLeavingHost(topology, request.device_edges)) {
        return MakeRefusal(RefusalKind::kLeavesHost, n,
                           static_cast<int>(request.device_edges.size()));
      }
      return std::nullopt;
    case Backend::kPeer:
""",
    )
  ],
  # The record goes last in kBackends: its index is its enum value.
  "core/tool_layer/backends.cc": [
    (re.compile(r"(kBackends\[kNumBackends\] = \{.*?)\}\};", re.S), lambda m: m.group(1) + RECORD)
  ],
}


class Fail(Exception):
  """An error reported in one line."""


def edit(path, text, anchor, replacement):
  if isinstance(anchor, str):
    if text.count(anchor) != 1:
      raise Fail(
        f"{path}: '{anchor}' is not in it once; the stand-in backend needs "
        "core/tool_layer/stand_in/add_backend.py updated"
      )
    return text.replace(anchor, replacement)
  new, n = anchor.subn(replacement, text)
  if n != 1:
    raise Fail(
      f"{path}: kBackends' closing '}};' not found; the stand-in backend needs "
      "core/tool_layer/stand_in/add_backend.py updated"
    )
  return new


def documented_files():
  """The files the doc's numbered list under "A backend today" names, first path of each."""
  text = DOC.read_text()
  start = text.find("\nA backend today")
  if start < 0:
    raise Fail(f"{DOC.name}: no list starting 'A backend today'")
  files = []
  for line in text[start:].splitlines()[2:]:
    item = re.match(r"\d+\. `([^`]+)`", line)
    if item:
      files.append(item.group(1).replace("core/.../", f"{CORE}/"))
    elif line and not line.startswith(" "):
      break
  return files


def sources():
  """Every file of the core and core/tool_layer/ but tests, relative to ROOT."""
  paths = []
  for folder in (CORE, "core/tool_layer"):
    for path in sorted((ROOT / folder).iterdir()):
      if (
        path.is_file()
        and path.suffix in (".h", ".cc", ".proto")
        and not path.name.endswith("_test.cc")
      ):
        paths.append(path.relative_to(ROOT).as_posix())
  return paths


def write(out, relative, text):
  """Writes atomically (every file, so that each is newer than its inputs)."""
  target = out / relative
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = target.with_suffix(target.suffix + ".tmp")
  tmp.write_text(text)
  tmp.replace(target)


def main(argv):
  if len(argv) != 2:
    print("usage: add_backend.py OUT_DIR", file=sys.stderr)
    return 2
  out = Path(argv[1])
  try:
    listed = documented_files()
    if sorted(listed) != sorted(EDITS):
      raise Fail(
        f"{DOC.name} lists {', '.join(listed)} for a new backend, and the "
        f"stand-in edits {', '.join(EDITS)}: make them agree"
      )
    for relative in sources():
      text = (ROOT / relative).read_text()
      for anchor, replacement in EDITS.get(relative, []):
        text = edit(relative, text, anchor, replacement)
      write(out, relative, text)
  except (Fail, OSError) as e:
    print(f"add_backend.py: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
