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

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_patches as gp  # noqa: E402  (the pinned series' generator)

PIN = "131bf41acb4650e4391a640c3f1859c1c86ad74b"
SERIES = gp.ROOT / "xla_patches" / "xla-131bf41a_jax-0.11.0"


def main():
  args = gp.parse_args(__doc__, os.environ.get("XLA_NEXT") or os.environ.get("XLA_PIN"))
  if not args.xla:
    raise gp.Fail("needs openxla/xla at the pin: --xla GIT_DIR or $XLA_NEXT")
  with tempfile.TemporaryDirectory() as tmp:
    return gp.run(args, Path(tmp), SERIES, PIN, whole=False)  # xla_src/ only for added files


if __name__ == "__main__":
  try:
    sys.exit(main())
  except (gp.Fail, OSError) as e:
    print(f"gen_patches_next: {e}", file=sys.stderr)
    sys.exit(2)
