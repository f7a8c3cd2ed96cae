#!/usr/bin/env bash
# One set-up path for a fresh machine; idempotent (skips what is done).
#   .venv/ with pinned tensorflow (XLA headers + libraries), jax, the CUDA
#   plugin for deviceless GPU compiles, test tools; the C++ build (CMake, -j2);
#   nvshmem-opt on the venv's PATH; hlo_tools installed editable.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PY=$VENV/bin/python
log() { echo "[setup] $*" >&2; }

if [ ! -x "$PY" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi

# Pinned versions. tensorflow and the CUDA plugin come without their
# dependencies: we need the XLA headers/libraries and the deviceless compiler,
# not TensorFlow's or CUDA's Python stacks.
NODEPS=(tensorflow==2.21.0 jax-cuda13-plugin==0.10.2 jax-cuda13-pjrt==0.10.2)
DEPS=(jax==0.10.2 jaxlib==0.10.2 absl-py==2.5.1 pytest==9.2.0 hypothesis==6.170.17
      pybind11==3.1.0 numpy==2.4.6 setuptools==80.9.0 matplotlib==3.11.2)
stamp=$VENV/.pins
want=$(printf '%s\n' "${NODEPS[@]}" "${DEPS[@]}" | sha1sum | cut -c1-12)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python packages"
  "$PY" -m pip install -q --no-deps "${NODEPS[@]}"
  "$PY" -m pip install -q "${DEPS[@]}"
  echo "$want" > "$stamp"
fi

# Debian packages: googletest for the C++ tests, Chromium for the report's
# page test (CI runs as root).
missing=()
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
command -v cmake >/dev/null || missing+=(cmake)
command -v chromium >/dev/null || missing+=(chromium)
# clang with libFuzzer and the sanitizers, for the fuzzing campaign (fuzz/).
command -v clang++ >/dev/null || missing+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
  || missing+=(libclang-rt-14-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    log "missing Debian packages: ${missing[*]}"
    [[ " ${missing[*]} " == *" libgtest-dev "* ]] && exit 1
  fi
fi
# buildifier checks the Bazel files (npm registry); optional.
if ! command -v buildifier >/dev/null && command -v npm >/dev/null; then
  log "installing buildifier (npm @bazel/buildifier)"
  npm install -g -s @bazel/buildifier@8.2.1 >/dev/null 2>&1 || log "buildifier not installed; its check will be skipped"
fi

log "building C++ (CMake, -j2)"
cmake -S "$ROOT" -B "$ROOT/build" -DPython3_EXECUTABLE="$PY" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$ROOT/build" -j2 2>&1 | grep -E "error|warning: |Error" >&2 || true
[ -x "$ROOT/build/nvshmem-opt" ] || { log "C++ build failed"; exit 1; }
ln -sf "$ROOT/build/nvshmem-opt" "$VENV/bin/nvshmem-opt"

if ! "$PY" -c "import hlo_tools.cli" 2>/dev/null || [ ! -x "$VENV/bin/hlo-tools" ]; then
  log "installing hlo_tools (editable)"
  "$PY" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"
fi
log "ready: $VENV/bin/hlo-tools, $VENV/bin/nvshmem-opt"
