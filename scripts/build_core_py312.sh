#!/usr/bin/env bash
# Builds the selection core's Python binding for another CPython (default 3.12)
# into an ignored folder that can travel to a machine without TensorFlow or
# network (the JAX hook, hlo_tools/hook/decide.py, looks there when the package has
# no binding):
#
#   scripts/build_core_py312.sh [PYTHON] [OUT_DIR]
#
# PYTHON defaults to python3.12, OUT_DIR to .carry_py312. pybind11 comes from the
# local package index into a throw-away virtual environment; the compiler is the
# system g++, absl and protobuf the system's (copied beside the binding). The folder is added to
# .git/info/exclude so that it stays ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3.12}
OUT=${2:-.carry_py312}
if ! "$PY" -c '' 2>/dev/null; then
  # pyenv installs versions it does not put on PATH by default.
  for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
    [[ -x $cand ]] && PY=$cand
  done
fi
"$PY" -c '' 2>/dev/null || { echo "build_core_py312: $PY not found" >&2; exit 2; }
VENV=$(mktemp -d /tmp/core_py_venv.XXXXXX)
trap 'rm -rf "$VENV"' EXIT
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q pybind11
SUFFIX=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
INCLUDES=$("$VENV/bin/python" -m pybind11 --includes)
mkdir -p "$OUT"
CORE=core/xla/backends/gpu/transforms/collectives
# The cost tables' C++ from the system's protoc, for the system's protobuf.
GEN="$VENV/generated"
mkdir -p "$GEN"
/usr/bin/protoc -I core --cpp_out="$GEN" "$CORE/backend_cost_table.proto" \
  core/tool_layer/cost_table.proto
PKG=${CORE#core/}
SRC="$CORE/cluster_topology.cc $CORE/backend_cost_table.cc $CORE/permute_backend_selection.cc
  core/tool_layer/backends.cc core/tool_layer/table_text.cc core/tool_layer/decide.cc
  core/tool_layer/topology_spec.cc core/tool_layer/partitions.cc
  $GEN/$PKG/backend_cost_table.pb.cc $GEN/tool_layer/cost_table.pb.cc"
TMP="$VENV/_selection_core$SUFFIX"
# shellcheck disable=SC2086  # INCLUDES is a list of -I flags
# absl and protobuf from the system (Debian's libabsl-dev, libprotobuf-dev);
# their shared libraries travel in the folder, found through $ORIGIN (Debian's
# static ones are not PIC); each one is a direct dependency, so none is looked
# for on the system.
ABSL_LIBS="$(pkg-config --libs absl_statusor absl_status absl_str_format absl_strings) -lprotobuf"
# shellcheck disable=SC2086  # ABSL_LIBS is a list of -l flags
g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden $INCLUDES -Icore -I. -I"$GEN" -Icompat/system \
  core/bindings/selection_core_pybind.cc $SRC -o "$TMP" -Wl,--no-as-needed $ABSL_LIBS -Wl,-rpath,'$ORIGIN'
ldd "$TMP" | awk '/libabsl_|libprotobuf/ {print $3}' | xargs -r cp -f -t "$OUT"
mv -f "$TMP" "$OUT/_selection_core$SUFFIX"
# The binding loads alone (no hlo_tools import needed for this check).
(cd "$OUT" && "$VENV/bin/python" -c 'import _selection_core as c; print(c.Topology.parse("1x1x2"))') >/dev/null
EXCLUDE=$(git rev-parse --git-path info/exclude)
grep -qxF "/$OUT/" "$EXCLUDE" 2>/dev/null || echo "/$OUT/" >> "$EXCLUDE"
echo "$OUT/_selection_core$SUFFIX"
