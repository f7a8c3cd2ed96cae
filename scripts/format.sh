#!/usr/bin/env bash
# Formats the tracked C++ with clang-format 17.0.6 (the version XLA checks
# with; scripts/setup.sh --tests installs it in .venv) and the Bazel files with
# buildifier. Each C++ file takes the nearest .clang-format: Google style at
# the top, XLA's own settings in core/ (the tools' core) and in
# xla_patches/xla-3cc8846c_jax-0.9.1/src/ (the sources the pinned patch series adds).
#
#   scripts/format.sh            format in place
#   scripts/format.sh --check    change nothing; list what needs formatting, exit 1 if any
#
# xla_patches/ is left alone: after xla_patches/xla-3cc8846c_jax-0.9.1/src/ changes, run scripts/gen_patches.py.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "format.sh: unknown argument '$1'" >&2; exit 2 ;;
esac
CF=.venv/bin/clang-format
"$CF" --version 2>/dev/null | grep -q ' 17\.0\.6 ' ||
  { echo "format.sh: clang-format 17.0.6 not in .venv (run scripts/setup.sh --tests)" >&2; exit 2; }
command -v buildifier >/dev/null || { echo "format.sh: buildifier not found" >&2; exit 2; }

mapfile -t cpp < <(git ls-files -- '*.cc' '*.h' '*.inc')
mapfile -t bazel < <(git ls-files -- WORKSPACE BUILD '*.bzl' '*.bazel')
if [ "$check" = 1 ]; then
  status=0
  unformatted=$("$CF" --dry-run "${cpp[@]}" 2>&1 | { grep ': warning:' || true; } | cut -d: -f1 | sort -u)
  if [ -n "$unformatted" ]; then
    echo "$unformatted" | sed 's/^/needs clang-format: /'
    status=1
  fi
  buildifier --mode=check "${bazel[@]}" || status=1
  exit $status
fi
"$CF" -i "${cpp[@]}"
buildifier "${bazel[@]}"
echo "formatted ${#cpp[@]} C++ and ${#bazel[@]} Bazel files; if xla_patches/xla-3cc8846c_jax-0.9.1/src/ changed, run scripts/gen_patches.py"
