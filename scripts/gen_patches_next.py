#!/usr/bin/env python3
"""Makes the patch series for jax v0.11.0's XLA (xla_patches/xla-131bf41a_jax-0.11.0/).

    scripts/gen_patches_next.py [--xla GIT_DIR]             rewrite the series
    scripts/gen_patches_next.py --check [--xla GIT_DIR]     exit 1 if it is stale
    scripts/gen_patches_next.py --edit DIR [--xla GIT_DIR]  the series as commits in DIR
    scripts/gen_patches_next.py --from DIR [--xla GIT_DIR]  the series from DIR's commits

GIT_DIR: a git directory holding openxla/xla's commit PIN (default $XLA_NEXT,
then $XLA_PIN). The series' sources are its committed patches (messages,
authors, edits of upstream files) and, for a file a patch adds, xla_src/: the
selection core is one set of files for both series. Otherwise as
scripts/gen_patches.py, whose git steps this reuses: on a commit of the pin's
files the series changes, `git am`, each commit amended so that the files it
adds are xla_src/'s, `git format-patch`.
"""

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_patches as gp  # noqa: E402  (the pinned series' generator)

PIN = "131bf41acb4650e4391a640c3f1859c1c86ad74b"
SERIES = gp.ROOT / "xla_patches" / "xla-131bf41a_jax-0.11.0"


def committed():
  return sorted(SERIES.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def format_patches(repo, out):
  gp.git("format-patch", "-q", "--zero-commit", "--no-signature", "-o", str(out), "pin..HEAD",
         cwd=repo)
  return sorted(out.glob("*.patch"))


def build(xla, patches, repo):
  """The series as commits in repo, on a commit of the pin's files."""
  changed = {p for q in patches for p in gp.created(q, "")}
  added = {p for q in patches for p in gp.created(q)}
  gp.git("init", "-q", str(repo))
  for path in sorted((changed - added) | {".clang-format"}):
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(gp.git("--git-dir", xla, "show", f"{PIN}:{path}", binary=True))
  gp.git("add", "-A", cwd=repo)
  gp.git("commit", "-q", "-m", f"openxla/xla {PIN[:8]}: the files the series changes", cwd=repo)
  gp.git("tag", "pin", cwd=repo)
  for patch in patches:
    gp.git("am", "-q", "--keep-non-patch", str(patch), cwd=repo)
    for path in gp.created(patch):
      if (gp.ROOT / "xla_src" / path).is_file():
        shutil.copyfile(gp.ROOT / "xla_src" / path, repo / path)
    gp.git("add", "-A", cwd=repo)
    gp.git("commit", "-q", "--amend", "--no-edit", "--allow-empty", cwd=repo)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--xla", default=os.environ.get("XLA_NEXT") or os.environ.get("XLA_PIN"),
                  help="git dir holding the pin")
  mode = ap.add_mutually_exclusive_group()
  mode.add_argument("--check", action="store_true")
  mode.add_argument("--edit", metavar="DIR", type=Path)
  mode.add_argument("--from", dest="from_dir", metavar="DIR", type=Path)
  args = ap.parse_args()
  if not args.xla:
    raise gp.Fail("needs openxla/xla at the pin: --xla GIT_DIR or $XLA_NEXT")
  gp.git("--git-dir", args.xla, "cat-file", "-e", f"{PIN}^{{commit}}")
  with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    patches = format_patches(args.from_dir, tmp / "from") if args.from_dir else committed()
    if not patches:
      raise gp.Fail(f"{SERIES}: no NNNN-*.patch files")
    build(args.xla, patches, args.edit or tmp / "repo")
    if args.edit:
      print(f"{args.edit}: {len(patches)} commits on tag 'pin'; edit, then --from {args.edit}")
      return 0
    made = format_patches(tmp / "repo", tmp / "new")
    if args.check:
      (tmp / "old").mkdir()
      for p in committed():
        shutil.copy(p, tmp / "old")
      return gp.compare(tmp / "old", tmp / "new", f"{SERIES.name} is not what the sources make",
                        f"ok: {len(made)} patches are what the sources make")
    SERIES.mkdir(parents=True, exist_ok=True)
    for p in committed():
      p.unlink()
    for p in made:
      shutil.copy(p, SERIES)
    print(f"wrote {len(made)} patches to {SERIES}")
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except (gp.Fail, OSError) as e:
    print(f"gen_patches_next: {e}", file=sys.stderr)
    sys.exit(2)
