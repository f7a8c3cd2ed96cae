#!/usr/bin/env bash
# The long test command's fuzzing (scripts/test_long.sh): builds the libFuzzer harnesses
# (build-fuzz/, clang + ASan/UBSan) and runs both, deterministically:
# tests/fuzz/selection_fuzzer (selection core, no XLA) and tests/fuzz/driver_fuzzer
# (nvshmem-opt's library: parse -> verify -> pass -> async -> verify -> report
# -> output spliced into the input -> reparse, against the TensorFlow wheel's XLA).
#
#   tests/fuzz/run_fuzz.sh [--runs=N] [--driver-runs=N] [--seed=S] [--sanitizers=LIST]
#                    [--no-build] [--build-only]
#
# The same inputs every run: libFuzzer's -seed=S (default 1), the committed seeds
# (tests/fuzz/make_corpus.py: the fixtures, the pass's test modules, tests/fuzz/regressions/)
# written afresh, and a fresh empty corpus directory that is deleted afterwards,
# so nothing found by an earlier run is carried into the next; address-space
# randomization off (setarch -R: absl seeds its hashes with addresses, so the
# same input took other paths from process to process) and libFuzzer's timed
# corpus re-read off (-reload=0). --runs=N (default 10000) executions per
# harness, --driver-runs=N the driver's alone (default: --runs); every seed
# runs whatever N is. Open-ended discovery (random seed, a corpus kept
# between runs, a time limit) is tests/fuzz/campaign.sh.
# --sanitizers defaults to fuzzer,address,undefined; fuzzer,undefined is the
# fallback without ASan. Needs clang++ with libFuzzer (Debian: apt-get install
# clang libclang-rt-14-dev).
# Exit status: 0 when both runs end without a crash, hang or property
# violation; crashing inputs land in build-fuzz/crashes/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$ROOT/build-fuzz"
RUNS=10000
DRIVER_RUNS=
SEED=1
SANITIZERS="fuzzer,address,undefined"
BUILD_IT=1
RUN_IT=1
for arg in "$@"; do
  case "$arg" in
    --runs=*) RUNS="${arg#--runs=}" ;;
    --driver-runs=*) DRIVER_RUNS="${arg#--driver-runs=}" ;;
    --seed=*) SEED="${arg#--seed=}" ;;
    --sanitizers=*) SANITIZERS="${arg#--sanitizers=}" ;;
    --no-build) BUILD_IT=0 ;;
    --build-only) RUN_IT=0 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "run_fuzz.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
for n in "$RUNS" "${DRIVER_RUNS:-1}" "$SEED"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "run_fuzz.sh: '$n' is not a whole number" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "run_fuzz.sh: clang++ not found" >&2; exit 2; }
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3

if [ "$BUILD_IT" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_CXX_COMPILER=clang++ -DNVSHMEM_FUZZ=ON \
    -DNVSHMEM_FUZZ_SANITIZERS="$SANITIZERS" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPython3_EXECUTABLE="$PY" >/dev/null
  cmake --build "$BUILD" --target selection_fuzzer driver_fuzzer -j"$(nproc)"
fi
[ "$RUN_IT" = 1 ] || exit 0

# Seeds written afresh (no stale file of an older checkout), an empty corpus.
rm -rf "$BUILD/seeds"
"$PY" "$ROOT/tests/fuzz/make_corpus.py" "$BUILD/seeds"
mkdir -p "$BUILD/crashes"
work=$(mktemp -d "${TMPDIR:-/tmp}/run_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"  # TF's libraries keep globals
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TF_CPP_MIN_LOG_LEVEL=3
# Same inputs, same paths: without ASLR the coverage of a run repeats exactly.
NO_ASLR=(setarch "$(uname -m)" -R)
"${NO_ASLR[@]}" true 2>/dev/null || {
  echo "run_fuzz.sh: setarch -R not permitted here; runs may differ in coverage" >&2
  NO_ASLR=()
}
status=0
for h in selection driver; do
  runs=$RUNS
  [ "$h" = selection ] || runs=${DRIVER_RUNS:-$RUNS}
  echo "== ${h}_fuzzer -runs=$runs -seed=$SEED"
  mkdir "$work/$h"
  if ! "${NO_ASLR[@]}" "$BUILD/${h}_fuzzer" -runs="$runs" -seed="$SEED" -reload=0 \
      -timeout=20 -rss_limit_mb=8192 -print_final_stats=1 -artifact_prefix="$BUILD/crashes/" \
      "$work/$h" "$BUILD/seeds/$h" > "$BUILD/$h.log" 2>&1; then
    status=1
    echo "${h}_fuzzer FAILED; see $BUILD/$h.log and $BUILD/crashes/" >&2
  fi
  grep -aE '^Done|stat::|driver_fuzzer:' "$BUILD/$h.log" || true
done
exit $status
