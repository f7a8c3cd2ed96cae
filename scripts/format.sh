#!/usr/bin/env bash
# Formats the tracked C++ in Google style, as XLA's (clang-format with the
# repository's .clang-format), and the Bazel files with buildifier.
#
#   scripts/format.sh            format in place
#   scripts/format.sh --check    change nothing; list what needs formatting, exit 1 if any
#
# Generated files are left alone: WORKSPACE and xla_patches/ come from
# scripts/gen_patches.py, which must run after xla_src/ changes anyway.
# Needs clang-format (Debian: apt-get install clang-format); buildifier is
# skipped when it is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "format.sh: unknown argument '$1'" >&2; exit 2 ;;
esac
command -v clang-format >/dev/null || { echo "format.sh: clang-format not found" >&2; exit 2; }

mapfile -t cpp < <(git ls-files -- '*.cc' '*.h' '*.inc')
mapfile -t bazel < <(git ls-files -- BUILD '*.bzl' '*.bazel' | grep -v '^xla_patches/' || true)
status=0
if [ "$check" = 1 ]; then
  unformatted=$(clang-format --dry-run "${cpp[@]}" 2>&1 | { grep ': warning:' || true; } | cut -d: -f1 | sort -u)
  if [ -n "$unformatted" ]; then
    echo "$unformatted" | sed 's/^/needs clang-format: /'
    status=1
  fi
  if command -v buildifier >/dev/null && [ ${#bazel[@]} -gt 0 ]; then
    buildifier --mode=check "${bazel[@]}" || status=1
  fi
  exit $status
fi
clang-format -i "${cpp[@]}"
if command -v buildifier >/dev/null && [ ${#bazel[@]} -gt 0 ]; then
  buildifier "${bazel[@]}"
fi
echo "formatted ${#cpp[@]} C++ and ${#bazel[@]} Bazel files; if xla_src/ changed, run scripts/gen_patches.py"
