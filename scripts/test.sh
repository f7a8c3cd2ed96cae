#!/usr/bin/env bash
# Sets everything up (idempotent), then runs every test: the C++ tests
# (googletest, through ctest), the fuzzing campaign and the Python tests
# (pytest, including `pip install .` into a fresh environment,
# tests/test_packaging.py). Fails when any test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
status=0
echo "== C++ tests (ctest)"
ctest --test-dir build --output-on-failure || status=1
if command -v clang++ >/dev/null; then
  echo "== Fuzzing: 10,000 executions per harness under ASan/UBSan (fuzz/run_fuzz.sh)"
  fuzz/run_fuzz.sh --runs=10000 || status=1
else
  echo "== Fuzzing skipped: clang++ not installed"
fi
echo "== Python tests (pytest)"
NVSHMEM_TEST_PACKAGE=${NVSHMEM_TEST_PACKAGE:-1} \
  .venv/bin/python -m pytest -q -p no:cacheprovider "$@" || status=1
exit $status
