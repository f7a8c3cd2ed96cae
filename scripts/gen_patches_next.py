#!/usr/bin/env python3
"""Makes the patch series for XLA newer than the pin (collectives modes per permute):

    xla_patches/xla-183fa00c_openxla-main/   openxla/xla 183fa00c (main, 2026-08-22)
    xla_patches/xla-131bf41a_jax-0.11.0/     openxla/xla 131bf41a (jax v0.11.0), its backport

    scripts/gen_patches_next.py [--series S] [--xla GIT_DIR]             rewrite the series
    scripts/gen_patches_next.py [--series S] --check [--xla GIT_DIR]     exit 1 if one is stale
    scripts/gen_patches_next.py --series S --edit DIR [--xla GIT_DIR]    S as commits in DIR
    scripts/gen_patches_next.py --series S --from DIR [--xla GIT_DIR]    S from DIR's commits

S: a series' folder name or its commit's first 8 hex digits (default: both).
GIT_DIR: a git directory holding both commits (default $XLA_NEXT, then $XLA_PIN).
The series' sources are their committed patches (messages, authors, edits);
they add no core/ file. As scripts/gen_patches.py, whose git steps this
reuses: on a commit of the files a series changes, `git am`, `git format-patch`.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_patches as gp  # noqa: E402  (the pinned series' generator)

SERIES = {
  "xla-183fa00c_openxla-main": "183fa00cb5d82384463a1a7aed1ab06bc9026974",
  "xla-131bf41a_jax-0.11.0": "131bf41acb4650e4391a640c3f1859c1c86ad74b",
}


def parse_args() -> argparse.Namespace:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--xla", default=os.environ.get("XLA_NEXT") or os.environ.get("XLA_PIN"))
  ap.add_argument("--series", help="a folder name of xla_patches/ or its commit's 8 hex digits")
  mode = ap.add_mutually_exclusive_group()
  mode.add_argument("--check", action="store_true")
  mode.add_argument("--edit", metavar="DIR", type=Path)
  mode.add_argument("--from", dest="from_dir", metavar="DIR", type=Path)
  return ap.parse_args()


def chosen(name: str | None) -> list[str]:
  if name is None:
    return list(SERIES)
  found = [s for s in SERIES if name in (s, s[4:12]) or Path(name).name == s]
  if not found:
    raise gp.Fail(f"--series {name}: not one of {', '.join(SERIES)}")
  return found


def main() -> int:
  args = parse_args()
  if not args.xla:
    raise gp.Fail("needs openxla/xla's commits: --xla GIT_DIR or $XLA_NEXT")
  names = chosen(args.series)
  if (args.edit or args.from_dir) and len(names) != 1:
    raise gp.Fail("--edit and --from take one --series")
  status = 0
  for name in names:
    with tempfile.TemporaryDirectory() as tmp:
      status |= gp.run(args, Path(tmp), gp.ROOT / "xla_patches" / name, SERIES[name], whole=False)
  return status


if __name__ == "__main__":
  try:
    sys.exit(main())
  except (gp.Fail, OSError) as e:
    print(f"gen_patches_next: {e}", file=sys.stderr)
    sys.exit(2)
