#!/usr/bin/env bash
# The test command a change needs: sets up what the tests need (idempotent,
# scripts/setup.sh --tests), then runs the C++ tests (googletest, through
# ctest), the fuzzing (fixed seed, committed seeds and regressions: the same
# inputs every run), the driver's lit tests (LLVM's lit and FileCheck,
# tests/lit/), the format checks (scripts/format.sh --check: ruff's lint and
# format over the Python, clang-format over the C++), the type check of
# hlo_tools (mypy, pyproject.toml's [tool.mypy]) and the Python tests (pytest,
# two workers). Fails when any test or check fails. Extra arguments go to
# pytest.
# The checks that build against an openxla/xla tree or install the package
# from a wheel (minutes of compiling each) are scripts/test_long.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/setup.sh --tests || exit 1
status=0 failed=
fail() { status=1; failed+=" $1"; }
took() { echo "== $1: $((SECONDS - $2)) s"; }
t0=$SECONDS
echo "== C++ tests (ctest)"
ctest --test-dir build --output-on-failure || fail ctest
took ctest "$t0"
if command -v clang++ >/dev/null; then
  # Deterministic: -seed=1 over the committed seeds and tests/fuzz/regressions/, a fresh
  # empty corpus each run. The driver's 2,000 runs reach 99.5% of the edges that
  # 10,000 reach (docs/reliability.md). Discovery is tests/fuzz/campaign.sh.
  echo "== Fuzzing: seed 1 under ASan/UBSan, 10,000 selection and 2,000 driver runs (tests/fuzz/run_fuzz.sh)"
  t0=$SECONDS
  if tests/fuzz/run_fuzz.sh --no-build --runs=10000 --driver-runs=2000 --seed=1; then
    export NVSHMEM_FUZZED=1  # pytest's shorter run of the same fuzzer is left out
  else
    fail fuzzing
  fi
  took fuzzing "$t0"
else
  echo "== Fuzzing skipped: clang++ not installed"
fi
# The driver's behaviour pinned by FileCheck files (tests/lit/lit.cfg.py).
echo "== lit tests (nvshmem-opt)"
t0=$SECONDS
.venv/bin/lit -q tests/lit || fail lit
took "lit tests" "$t0"
# Seconds each; the Bazel files' buildifier check is pytest's (test_patches.py).
echo "== format (ruff, clang-format: scripts/format.sh --check python cpp)"
t0=$SECONDS
scripts/format.sh --check python || fail ruff
scripts/format.sh --check cpp || fail clang-format
took format "$t0"
echo "== type check (mypy)"
t0=$SECONDS
.venv/bin/python -m mypy || fail mypy
took "type check" "$t0"
# Two workers (pytest-xdist), a file at a time each, the slowest files first
# (tests/conftest.py): the suite is mostly one process waiting on another.
# The series' reviewer check is scripts/test_long.sh's.
echo "== Python tests (pytest, ${NVSHMEM_TEST_WORKERS:-2} workers)"
t0=$SECONDS
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${NVSHMEM_TEST_WORKERS:-2}" \
  --durations=15 --dist loadfile --no-loadscope-reorder \
  --deselect tests/test_series_next.py::test_reviewers_check_passes "$@" || fail pytest
took pytest "$t0"
took "test.sh $([ $status = 0 ] && echo OK || echo "FAIL (failed:$failed)")" "$start"
exit $status
