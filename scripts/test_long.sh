#!/usr/bin/env bash
# The second test command: the checks that build what others build, minutes of
# compiling each, and the long Python tests. Sets up what they need
# (scripts/setup.sh --long: what scripts/test.sh needs, the fuzzers built with
# clang, tf-nightly in .venv-next/ and .venv-main/), then
#   * each patch series as a reviewer checks it, at the openxla/xla commit it
#     is for (xla_patches/xla-COMMIT_*/): the pinned series (xla-3cc8846c_*) by
#     scripts/check_patches_upstream.sh, every other series by
#     scripts/check_series_upstream.sh --series DIR;
#   * one target for each generated file of the build (scripts/check_build_race.py)
#     and the mutation check of the selection core (scripts/mutation_check_core.py);
#   * the mutation check of the pinned series (scripts/mutation_check_series.py):
#     each safety rule of its decision and runtime checks broken in turn, each
#     killed by the series' own tests or series_decision_diff_test;
#   * the fuzzing (tests/fuzz/run_fuzz.sh: fixed seed, the committed seeds and
#     regressions, under ASan/UBSan);
#   * the Python tests marked `long` (pytest -m long): end to end runs, the
#     benchmarks' quick runs, the driver's invariants on every fixture, the
#     fuzzers' replays, the base wheel, and the driver's distribution with the
#     base package as `pip install` builds them (tests/test_packaging.py): both
#     wheels built and installed into a fresh environment beside the series
#     checks, which compile one file at a time and leave a core to it.
# After the build-race check (one round), two lanes of about equal length run
# at once, one core each: the core's mutation check, a series after the pin and
# half the pinned series' mutants; the pinned series, the other series after
# the pin, the other half and the fuzzing. Each check's output is printed whole
# when it ends. Then the long Python tests, two workers.
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

# check NAME COMMAND...: runs one check into build/long/NAME.log, then prints
# the log whole (one lane at a time) with its time; a failure is noted in
# build/long/failed.
mkdir -p build/long
rm -f build/long/*.log build/long/failed
check() {
  local name=$1 t0=$SECONDS log="build/long/${1//\//-}.log" verdict
  shift
  if "$@" > "$log" 2>&1; then
    verdict="$((SECONDS - t0)) s"
  else
    verdict="FAILED, $((SECONDS - t0)) s"
    echo "$name" >> build/long/failed
  fi
  {
    flock 9
    echo "== $name (${1##*/})"
    cat "$log"
    echo "== $name: $verdict"
  } 9>build/long/.print
}
series_check() {
  case "${1##*/}" in
    xla-3cc8846c_*) check "${1##*/}" scripts/check_patches_upstream.sh "$PIN_DIR" ;;
    *) check "${1##*/}" scripts/check_series_upstream.sh --series "$1" "$NEXT_DIR" ;;
  esac
}
# The build's generated files, one target each (a race at -j2 otherwise), alone:
# it rebuilds build/ at -j8. Then build/'s differential test, which the series'
# mutation check links from, before anything reads it.
check "build race" .venv/bin/python scripts/check_build_race.py build --rounds 1
check "differential test build" cmake --build build -j2 --target series_decision_diff_test
# Then two lanes, one core each (their compiles are one file at a time), of
# about equal length: the core's safety rules, each removed in turn, then the
# first series after the pin; the pinned series as a reviewer checks it, then
# the other series after the pin; then half the pinned series' safety rules
# each, each removed in turn.
pinned=(xla_patches/xla-3cc8846c_*/) next=()
for series in xla_patches/xla-*_*/; do
  series=${series%/}
  case "${series##*/}" in xla-3cc8846c_*) ;; *) next+=("$series") ;; esac
done
(
  check "mutation check of the core" .venv/bin/python scripts/mutation_check_core.py
  series_check "${next[0]}"
  check "mutation check of the pinned series, half 1" \
    .venv/bin/python scripts/mutation_check_series.py --no-build --shard 1/2
) &
lane=$!
series_check "${pinned[0]%/}"
for series in "${next[@]:1}"; do series_check "$series"; done
check "mutation check of the pinned series, half 2" \
  .venv/bin/python scripts/mutation_check_series.py --no-build --shard 2/2
# Deterministic: -seed=1 over the committed seeds and tests/fuzz/regressions/, a
# fresh empty corpus each run. The driver's 2,000 runs reach 99.5% of the edges
# that 10,000 reach (docs/reliability.md). Discovery is tests/fuzz/campaign.sh.
if command -v clang++ >/dev/null; then
  check "fuzzing: seed 1 under ASan/UBSan, 10,000 selection and 2,000 driver runs" \
    tests/fuzz/run_fuzz.sh --no-build --runs=10000 --driver-runs=2000 --seed=1
else
  echo "fuzzing: clang++ not installed" >> build/long/failed
fi
wait "$lane"
# pytest's shorter run of the selection fuzzer is left out after a whole run.
grep -qs '^fuzzing' build/long/failed || export NVSHMEM_FUZZED=1
if [ -s build/long/failed ]; then
  status=1
  mapfile -t failed < build/long/failed
fi

t0=$SECONDS
wait "$wheel_pid"
if [ -f "$work/installed" ]; then
  export NVSHMEM_TEST_WHEELS="$work/dist" NVSHMEM_TEST_VENV="$work/venv"
else
  echo "== The wheels did not build or install (build/wheel.log); the packaging test does it again"
fi
# The Python tests marked `long` (end to end runs, the benchmarks' quick runs,
# the driver's invariants on every fixture, the fuzzers' replays, the base wheel
# and the driver's distribution from the wheels built above), two workers.
echo "== Python tests marked long (pytest, 2 workers), the packaging test among them"
NVSHMEM_TEST_PACKAGE=1 .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 -m long \
  --durations=15 --dist loadfile --no-loadscope-reorder || { status=1; failed+=("pytest -m long"); }
echo "== pytest -m long: $((SECONDS - t0)) s after the series checks"
if [ $status = 0 ]; then
  echo "== test_long: OK, $((SECONDS - start)) s"
else
  echo "== test_long: FAIL ($(IFS=,; echo "${failed[*]}")), $((SECONDS - start)) s"
fi
exit $status
