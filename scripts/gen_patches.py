#!/usr/bin/env python3
"""Makes the patch series for jax v0.9.1's XLA with git (xla_patches/xla-3cc8846c_jax-0.9.1/).

    scripts/gen_patches.py [--xla GIT_DIR]             rewrite the series
    scripts/gen_patches.py --check [--xla GIT_DIR]     exit 1 if they are stale
    scripts/gen_patches.py --edit DIR [--xla GIT_DIR]  the series as commits in DIR
    scripts/gen_patches.py --from DIR [--xla GIT_DIR]  the series from DIR's commits

GIT_DIR: a git directory holding openxla/xla's commit PIN (default $XLA_PIN). Sources: the
series' own files in its src/ (XLA's paths), which each patch adds byte for byte (a new one goes
to the first patch adding files in its folder; one gone from there leaves its patch); the
committed patches for the rest (messages, authors, edits of upstream files): on the pin's files
they change, `git am`, each commit amended to add its source files, `git format-patch`. To change
an upstream edit or a message: --edit DIR, change DIR's commits with git, --from DIR. Without
GIT_DIR, --check compares src/ with the files the series creates (the tools' core/ is not in it).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = "3cc8846c10052cc1c32c4db87866eac4e4cdbccd"
PATCH_DIR = ROOT / "xla_patches" / f"xla-{PIN[:8]}_jax-0.9.1"
SRC = ROOT / "xla_patches" / "xla-3cc8846c_jax-0.9.1" / "src"  # The files the series adds.
AUTHOR = ("NVSHMEM ring-attention pass developers", "nvshmem-ring-pass@users.noreply.github.com")
ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
       "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1], "GIT_COMMITTER_NAME": AUTHOR[0],
       "GIT_COMMITTER_EMAIL": AUTHOR[1], "GIT_COMMITTER_DATE": "Thu, 1 Jan 2026 00:00:00 +0000"}


class Fail(Exception):
  """An error reported in one line."""


def git(*args, cwd=None, binary=False):
  r = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True)
  if r.returncode:
    raise Fail(f"git {' '.join(args[:3])}: {r.stderr.decode().strip()}")
  return r.stdout if binary else r.stdout.decode()


def committed_patches(series=PATCH_DIR):
  return sorted(series.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def created(patch, mode=" create mode "):
  """Paths the patch creates (or, mode "", changes), as `git apply` lists them."""
  lines = git("apply", "--summary", "--numstat", str(patch), cwd=ROOT).splitlines()
  return [l.split()[-1] for l in lines if l.startswith(mode) and ("\t" in l) == (not mode)]


def build(xla, patches, repo, pin=PIN, whole=True):
  """The series as commits in repo on the pin's files; whole: SRC adds and drops files."""
  upstream = {p for q in patches for p in created(q, "")} - {p for q in patches for p in created(q)}
  git("init", "-q", str(repo))
  for path in sorted(upstream | {".clang-format"}):
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(git("--git-dir", xla, "show", f"{pin}:{path}", binary=True))
  git("add", "-A", cwd=repo)
  git("commit", "-q", "-m", f"openxla/xla {pin[:8]}: the files the series changes", cwd=repo)
  git("tag", "pin", cwd=repo)
  adds = [created(patch) for patch in patches]
  for i, patch in enumerate(patches):  # each adds its SRC files
    git("am", "-q", "--keep-non-patch", str(patch), cwd=repo)
    for path in adds[i] + (new_files(adds, i) if whole else []):
      if whole:
        (repo / path).unlink(missing_ok=True)  # gone from SRC: not added
      if (SRC / path).is_file():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SRC / path, repo / path)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "--amend", "--no-edit", "--allow-empty", cwd=repo)


def new_files(adds, i):
  """SRC files no patch adds that patch i takes: it adds the first of their folder."""
  added = {p for a in adds for p in a}
  folder = {os.path.dirname(p) for p in adds[i]}
  first = lambda p: next((j for j, a in enumerate(adds)  # noqa: E731
                          if any(os.path.dirname(q) == os.path.dirname(p) for q in a)), 0)
  out = git("ls-files", "-co", "--exclude-standard", "xla", cwd=SRC).split()
  return [p for p in out if p not in added and first(p) == i and
          (os.path.dirname(p) in folder or i == 0)]


def format_patches(repo, out):
  git("format-patch", "-q", "--zero-commit", "--no-signature", "-o", str(out), "pin..HEAD",
      cwd=repo)
  return sorted(out.glob("*.patch"))


def check_offline(tmp):
  """The files the series creates equal SRC's (git apply, no upstream file)."""
  for patch in committed_patches():
    if created(patch):
      git("apply", *[f"--include={p}" for p in created(patch)], str(patch), cwd=tmp)
  return compare(SRC / "xla", tmp / "xla", f"{SRC.relative_to(ROOT)}/ is not what the series adds",
                 "ok (without the pin: the files the series adds)")


def compare(old, new, stale, ok):
  r = subprocess.run(["git", "diff", "--no-index", "--stat", str(old), str(new)], env=ENV,
                     capture_output=True, text=True)
  print(r.stdout + (f"stale: {stale}; regenerate: scripts/gen_patches.py --xla GIT_DIR"
                    if r.returncode else ok))
  return 1 if r.returncode else 0


def parse_args(doc, xla):
  ap = argparse.ArgumentParser(description=doc.split("\n")[0])
  ap.add_argument("--xla", default=xla, help="git dir holding the pin")
  mode = ap.add_mutually_exclusive_group()
  mode.add_argument("--check", action="store_true")
  mode.add_argument("--edit", metavar="DIR", type=Path)
  mode.add_argument("--from", dest="from_dir", metavar="DIR", type=Path)
  return ap.parse_args()


def run(args, tmp, series, pin, whole=True):
  """Builds series on pin (from --from's commits, if given), then --edit, --check or writes."""
  git("--git-dir", args.xla, "cat-file", "-e", f"{pin}^{{commit}}")
  patches = (format_patches(args.from_dir, tmp / "from") if args.from_dir
             else committed_patches(series))
  if not patches:
    raise Fail(f"{series}: no NNNN-*.patch files")
  build(args.xla, patches, args.edit or tmp / "repo", pin, whole)
  if args.edit:
    print(f"{args.edit}: {len(patches)} commits on tag 'pin'; edit, then --from {args.edit}")
    return 0
  made = format_patches(tmp / "repo", tmp / "new")
  if args.check:
    old = shutil.ignore_patterns("*.md", "*.bazel", "xla-*", "src")  # the patches only
    shutil.copytree(series, tmp / "old", ignore=old)
    return compare(tmp / "old", tmp / "new", f"{series.name} is not what the sources make",
                   f"ok: {len(made)} patches are what the sources make")
  series.mkdir(parents=True, exist_ok=True)
  for p in committed_patches(series):
    p.unlink()
  for p in made:
    shutil.copy(p, series)
  print(f"wrote {len(made)} patches to {series}")
  return 0


def main():
  args = parse_args(__doc__, os.environ.get("XLA_PIN"))
  with tempfile.TemporaryDirectory() as tmp:
    if args.check and not args.xla:
      return check_offline(Path(tmp))
    if not args.xla:
      raise Fail("needs openxla/xla at the pin: --xla GIT_DIR or $XLA_PIN")
    return run(args, Path(tmp), PATCH_DIR, PIN)


if __name__ == "__main__":
  try:
    sys.exit(main())
  except (Fail, OSError) as e:
    print(f"gen_patches: {e}", file=sys.stderr)
    sys.exit(2)
