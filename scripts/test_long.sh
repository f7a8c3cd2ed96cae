#!/usr/bin/env bash
# The second test command: the checks that build what others build, minutes of
# compiling each. Sets up what they need (scripts/setup.sh --long: clang,
# buildifier, the test tools, tf-nightly in .venv-next/ and .venv-main/), then
#   * each patch series as a reviewer checks it, at the openxla/xla commit it
#     is for (xla_patches/xla-COMMIT_*/): the pinned series (xla-3cc8846c_*) by
#     scripts/check_patches_upstream.sh, every other series by
#     scripts/check_series_upstream.sh --series DIR;
#   * one target for each generated file of the build (scripts/check_build_race.py)
#     and the mutation check of the selection core (scripts/mutation_check_core.py);
#   * the mutation check of the pinned series (scripts/mutation_check_series.py):
#     each safety rule of its decision and runtime checks broken in turn, each
#     killed by the series' own tests or series_decision_diff_test;
#   * the driver's distribution with the base package, as `pip install`
#     builds them (tests/test_packaging.py): both wheels built and installed
#     into a fresh environment beside the series checks, which compile one
#     file at a time and leave a core to it.
#
#   scripts/test_long.sh [GIT_DIR]
#
#   GIT_DIR  a git directory (bare or not) holding the openxla/xla commits the
#            series name; default $XLA_PIN, and $XLA_NEXT (then $XLA_PIN) for
#            the series after the pin. Nothing in it is changed.
#
# Prints each check's time. Exit 0 when every check passes, 1 when one fails,
# 2 when no tree is given or set-up fails.
set -uo pipefail
cd "$(dirname "$0")/.."
die() { echo "test_long: $*" >&2; exit 2; }
[ $# -le 1 ] || die "usage: $0 [GIT_DIR] (or set XLA_PIN, and XLA_NEXT for newer series)"
PIN_DIR=${1:-${XLA_PIN:-}}
NEXT_DIR=${1:-${XLA_NEXT:-${XLA_PIN:-}}}
[ -n "$PIN_DIR" ] ||
  die "no openxla/xla tree: give GIT_DIR or set XLA_PIN (and XLA_NEXT for newer series)"
scripts/setup.sh --long || exit 2
status=0
failed=()
start=$SECONDS

# The wheels as a user builds them (`pip wheel . ./nvshmem_opt`, isolated, with the
# declared build requirements), installed with their dependencies into a fresh
# venv: the base package with its extra `xla`, the driver.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== Building the wheels and installing them into a fresh environment, in the background (build/wheel.log)"
(.venv/bin/python -m pip wheel --no-deps --progress-bar off -w "$work/dist" . ./nvshmem_opt &&
 .venv/bin/python tests/test_packaging.py "$work"/dist/hlo_tools-*.whl \
   "$work"/dist/nvshmem_opt-*.whl "$work/venv" &&
 touch "$work/installed") > build/wheel.log 2>&1 &
wheel_pid=$!

# check NAME COMMAND...: runs one check and prints its time.
check() {
  local name=$1 t0=$SECONDS
  shift
  echo "== $name (${1##*/})"
  if "$@"; then
    echo "== $name: $((SECONDS - t0)) s"
  else
    status=1
    failed+=("$name")
    echo "== $name: FAILED, $((SECONDS - t0)) s"
  fi
}
# The build's generated files, one target each (a race at -j2 otherwise), and
# the core's safety rules, each removed in turn, each killed by a test.
check "build race" .venv/bin/python scripts/check_build_race.py build
check "mutation check of the core" .venv/bin/python scripts/mutation_check_core.py
for series in xla_patches/xla-*_*/; do
  series=${series%/}
  case "${series##*/}" in
    xla-3cc8846c_*) check "${series##*/}" scripts/check_patches_upstream.sh "$PIN_DIR" ;;
    *) check "${series##*/}" scripts/check_series_upstream.sh --series "$series" "$NEXT_DIR" ;;
  esac
done
check "mutation check of the pinned series" .venv/bin/python scripts/mutation_check_series.py

t0=$SECONDS
wait "$wheel_pid"
if [ -f "$work/installed" ]; then
  export NVSHMEM_TEST_WHEELS="$work/dist" NVSHMEM_TEST_VENV="$work/venv"
else
  echo "== The wheels did not build or install (build/wheel.log); the packaging test does it again"
fi
echo "== The driver's distribution from its wheel (tests/test_packaging.py)"
NVSHMEM_TEST_PACKAGE=1 .venv/bin/python -m pytest -q -p no:cacheprovider -rs \
  tests/test_packaging.py || { status=1; failed+=("packaging"); }
echo "== packaging: $((SECONDS - t0)) s after the series checks"
# The failed checks' names last: CI shows only the output's tail.
if [ $status = 0 ]; then
  echo "== test_long: OK, $((SECONDS - start)) s"
else
  echo "== test_long: FAIL ($(IFS=,; echo "${failed[*]}")), $((SECONDS - start)) s"
fi
exit $status
