#!/usr/bin/env bash
# The test command a change needs, at most ten minutes on two idle cores: sets
# up what the tests need (idempotent, scripts/setup.sh --tests), then runs the
# C++ tests (googletest, through ctest), the driver's lit tests (LLVM's lit and
# FileCheck, nvshmem_opt/lit/), the format checks (scripts/format.sh --check: ruff's
# lint and format over the Python, clang-format over the C++), the type check
# of hlo_tools (mypy, pyproject.toml's [tool.mypy]) and the Python tests but
# those marked `long` (pytest, two workers). Fails when any test or check
# fails. Extra arguments go to pytest.
# The longer checks are scripts/test_long.sh's: the Python tests marked `long`
# (end to end runs, the benchmarks' quick runs, the driver's invariants on every
# fixture, the wheels), the fuzzing, and the checks that build against an
# openxla/xla tree (minutes of compiling each).
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
# The driver's behaviour pinned by FileCheck files (nvshmem_opt/lit/lit.cfg.py).
echo "== lit tests (nvshmem-opt)"
t0=$SECONDS
.venv/bin/lit -q nvshmem_opt/lit || fail lit
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
  -m "not long" --durations=15 --dist loadfile --no-loadscope-reorder \
  --deselect tests/test_series_next.py::test_reviewers_check_passes "$@" || fail pytest
took pytest "$t0"
took "test.sh $([ $status = 0 ] && echo OK || echo "FAIL (failed:$failed)")" "$start"
exit $status
