#!/usr/bin/env bash
# Open-ended fuzzing for discovery (not part of the test command): a random
# seed each run, a corpus kept between runs in build-fuzz/corpus/HARNESS/
# (grown from the committed seeds and tests/fuzz/regressions/), and a time limit.
#
#   tests/fuzz/campaign.sh [--time=SECONDS] [--harness=driver|selection|both] [--no-build]
#
# --time (default 600) per harness; --harness (default both). Findings (crash,
# hang, property violation) land in build-fuzz/crashes/ and the run exits 1;
# driver_fuzzer prints the nvshmem-opt command that replays its finding (the
# crash file is a module nvshmem-opt reads as it is).
#
# A finding is not done until it is a regression: fix its cause, copy the input
# to tests/fuzz/regressions/ (keeping its leading "/* driver_fuzzer ... */" comment),
# add a line to tests/fuzz/regressions/README.md and a test that fails without the fix
# (tests/test_fuzz_regressions.py). From then on tests/fuzz/run_fuzz.sh, the test
# command's fixed-seed fuzzing, replays it on every run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$ROOT/build-fuzz"
TIME=600
HARNESSES="selection driver"
BUILD_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --time=*) TIME="${arg#--time=}" ;;
    --harness=both) HARNESSES="selection driver" ;;
    --harness=driver|--harness=selection) HARNESSES="${arg#--harness=}" ;;
    --no-build) BUILD_ARGS+=(--no-build) ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "campaign.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
if [ ${#BUILD_ARGS[@]} -eq 0 ]; then
  "$ROOT/tests/fuzz/run_fuzz.sh" --build-only
fi
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3
rm -rf "$BUILD/seeds"
"$PY" "$ROOT/tests/fuzz/make_corpus.py" "$BUILD/seeds"
mkdir -p "$BUILD/crashes"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TF_CPP_MIN_LOG_LEVEL=3
status=0
for h in $HARNESSES; do
  mkdir -p "$BUILD/corpus/$h"
  log="$BUILD/campaign_$h.log"
  echo "== ${h}_fuzzer -max_total_time=$TIME (random seed, corpus $BUILD/corpus/$h)"
  if ! "$BUILD/${h}_fuzzer" -max_total_time="$TIME" -timeout=20 -rss_limit_mb=8192 \
      -print_final_stats=1 -artifact_prefix="$BUILD/crashes/" \
      "$BUILD/corpus/$h" "$BUILD/seeds/$h" > "$log" 2>&1; then
    status=1
    echo "${h}_fuzzer found something; see $log and $BUILD/crashes/" >&2
    grep -a 'PROPERTY VIOLATED\|^replay:\|ERROR:' "$log" | head -5 >&2 || true
  fi
  grep -aE '^Done|stat::|Seed:|driver_fuzzer:' "$log" || true
done
exit $status
