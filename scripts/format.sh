#!/usr/bin/env bash
# Formats the tracked sources, or checks them (--check): the C++ with
# clang-format 17.0.6 (the version XLA checks with), the Python with ruff (lint
# and format; [tool.ruff] in pyproject.toml), the Bazel files with buildifier.
# scripts/setup.sh --tests installs clang-format and ruff in .venv at their
# pinned versions. Each C++ file takes the nearest .clang-format: Google style
# at the top, XLA's own settings in core/ (the tools' core) and in
# xla_patches/xla-3cc8846c_jax-0.9.1/src/ (the sources the pinned patch series adds).
#
#   scripts/format.sh [KIND...]            format in place: the imports' order
#                                          and layout; other lint findings are
#                                          left to fix by hand
#   scripts/format.sh --check [KIND...]    change nothing; list what needs
#                                          formatting or fixing, exit 1 if any
#
# KIND: cpp, python, bazel; all three when none is named. scripts/test.sh runs
# `--check python` and `--check cpp`.
#
# The patch files in xla_patches/ are left alone: after
# xla_patches/xla-3cc8846c_jax-0.9.1/src/ changes, run scripts/gen_patches.py.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0 kinds=()
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    cpp|python|bazel) kinds+=("$arg") ;;
    *) echo "format.sh: unknown argument '$arg' (--check, cpp, python, bazel)" >&2; exit 2 ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(cpp python bazel)
wants() { [[ " ${kinds[*]} " == *" $1 "* ]]; }

CF=.venv/bin/clang-format
RUFF=.venv/bin/ruff
if wants cpp; then
  "$CF" --version 2>/dev/null | grep -q ' 17\.0\.6 ' ||
    { echo "format.sh: clang-format 17.0.6 not in .venv (run scripts/setup.sh --tests)" >&2; exit 2; }
fi
if wants python; then
  [ "$("$RUFF" --version 2>/dev/null)" = "ruff 0.17.6" ] ||
    { echo "format.sh: ruff 0.17.6 not in .venv (run scripts/setup.sh --tests)" >&2; exit 2; }
fi
if wants bazel; then
  command -v buildifier >/dev/null || { echo "format.sh: buildifier not found" >&2; exit 2; }
fi

# Every tracked C++ file: core/, nvshmem_opt/, tests/ (fuzz/, series_diff/),
# compat/ (our own stand-ins of upstream headers, compiled into the build),
# scripts/lib/ and the pinned series' sources.
mapfile -t cpp < <(git ls-files -- '*.cc' '*.h' '*.inc')
# ruff leaves out what [tool.ruff] excludes (tests/fixtures/) even when named.
mapfile -t python < <(git ls-files -- '*.py' '*.pyi')
mapfile -t bazel < <(git ls-files -- WORKSPACE BUILD '*.bzl' '*.bazel')

if [ "$check" = 1 ]; then
  status=0
  if wants cpp; then
    if ! out=$("$CF" --dry-run -Werror "${cpp[@]}" 2>&1); then
      unformatted=$(echo "$out" | { grep ': error: code should be clang-formatted' || true; } |
        cut -d: -f1 | sort -u)
      # Anything else (a bad .clang-format, a missing file) is shown as it is.
      if [ -n "$unformatted" ]; then echo "$unformatted" | sed 's/^/needs clang-format: /'
      else echo "$out"; fi
      status=1
    fi
  fi
  if wants python; then
    "$RUFF" check --quiet --output-format concise --force-exclude "${python[@]}" || status=1
    "$RUFF" format --check --quiet --output-format concise --force-exclude "${python[@]}" || status=1
  fi
  if wants bazel; then
    buildifier --mode=check "${bazel[@]}" || status=1
  fi
  exit $status
fi
if wants cpp; then
  "$CF" -i "${cpp[@]}"
  echo "formatted ${#cpp[@]} C++ files; if xla_patches/xla-3cc8846c_jax-0.9.1/src/ changed, run scripts/gen_patches.py"
fi
if wants python; then
  "$RUFF" check --quiet --force-exclude --select I --fix "${python[@]}" || true
  "$RUFF" format --quiet --force-exclude "${python[@]}"
  echo "formatted ${#python[@]} Python files (imports and layout; scripts/format.sh --check python lists what is left)"
fi
if wants bazel; then
  buildifier "${bazel[@]}"
  echo "formatted ${#bazel[@]} Bazel files"
fi
