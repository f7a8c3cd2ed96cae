#!/usr/bin/env bash
# Builds jaxlib and the CUDA plugin of jax v0.9.1 with XLA at its pin plus the
# patch series (xla_patches/), using jax's own build (build/build.py).
#
#   scripts/build_jaxlib.sh [--work DIR] [--jax SRC] [--xla SRC] [--dry-run]
#
#   --work DIR       checkouts and wheels go here (default: ./jaxlib-build)
#   --jax SRC        jax's git repository (default https://github.com/jax-ml/jax)
#   --xla SRC        openxla/xla's (default https://github.com/openxla/xla)
#   --jax-rev REV    default jax-v0.9.1
#   --xla-rev REV    default the pin of jax-v0.9.1 (3cc8846c...)
#   --cuda-capabilities LIST   default sm_90 (H100, H200)
#   --dry-run        checkouts and `git am` only; print build.py's command
#
# SRC may be a local git directory (a clone or mirror): then no step before
# the build needs the network. The build itself downloads Bazel's
# dependencies and the hermetic CUDA. Steps:
#   1. jax at --jax-rev in DIR/jax, XLA at --xla-rev in DIR/xla (git fetch);
#   2. `git am` of every patch in DIR/xla, in order;
#   3. in DIR/jax: python build/build.py build
#        --wheels=jaxlib,jax-cuda-plugin,jax-cuda-pjrt --local_xla_path=DIR/xla
#        --cuda_major_version=12 --cuda_compute_capabilities=LIST
#        --output_path=DIR/dist
#   4. how to install the wheels and turn the pass on.
# Exit 0 on success, 1 when a step fails, 2 on bad usage.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIN=3cc8846c10052cc1c32c4db87866eac4e4cdbccd
WORK=./jaxlib-build JAX=https://github.com/jax-ml/jax XLA=https://github.com/openxla/xla
JAX_REV=jax-v0.9.1 XLA_REV=$PIN CAPS=sm_90 DRY=0
die() { echo "build_jaxlib: $*" >&2; exit "${2:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --work|--jax|--xla|--jax-rev|--xla-rev|--cuda-capabilities)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --work) WORK=$2 ;; --jax) JAX=$2 ;; --xla) XLA=$2 ;;
        --jax-rev) JAX_REV=$2 ;; --xla-rev) XLA_REV=$2 ;; --cuda-capabilities) CAPS=$2 ;;
      esac
      shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) die "unknown argument '$1' (see the header of $0)" ;;
  esac
done
PATCHES=("$ROOT"/xla_patches/[0-9][0-9][0-9][0-9]-*.patch)
[ -f "${PATCHES[0]}" ] || die "$ROOT/xla_patches: no patches"
mkdir -p "$WORK" || die "$WORK: cannot create"
WORK="$(cd "$WORK" && pwd)"
for d in jax xla; do
  [ -e "$WORK/$d" ] && die "$WORK/$d exists; use another --work"
done

# 1. Checkouts: fetch the one revision wanted (a tag, branch or commit).
checkout() {  # checkout SRC REV DIR
  git init -q "$3" && git -C "$3" fetch -q --depth 1 "$1" "$2" 2>"$WORK/fetch.log" &&
    git -C "$3" checkout -q --detach FETCH_HEAD ||
    { cat "$WORK/fetch.log" >&2; die "could not fetch $2 from $1" 1; }
  echo "checked out $2 of $1 in $3 ($(git -C "$3" rev-parse --short=12 HEAD))"
}
checkout "$JAX" "$JAX_REV" "$WORK/jax"
checkout "$XLA" "$XLA_REV" "$WORK/xla"

# 2. The series, as commits on the pin.
export GIT_COMMITTER_NAME="${GIT_COMMITTER_NAME:-jaxlib build}"
export GIT_COMMITTER_EMAIL="${GIT_COMMITTER_EMAIL:-jaxlib-build@localhost}"
git -C "$WORK/xla" am -q --keep-non-patch "${PATCHES[@]}" >"$WORK/am.log" 2>&1 ||
  { cat "$WORK/am.log" >&2; die "git am failed in $WORK/xla (is it XLA at $PIN?)" 1; }
echo "applied ${#PATCHES[@]} patches with git am"

# 3. jax's build, with the patched XLA in place of its pinned archive.
CMD=(python3 build/build.py build --wheels=jaxlib,jax-cuda-plugin,jax-cuda-pjrt
     "--local_xla_path=$WORK/xla" --cuda_major_version=12
     "--cuda_compute_capabilities=$CAPS" "--output_path=$WORK/dist")
echo "build command (in $WORK/jax): ${CMD[*]}"
if [ "$DRY" = 0 ]; then
  (cd "$WORK/jax" && "${CMD[@]}") || die "build.py failed" 1
fi

# 4. Using it.
cat <<EOF
Install the wheels (and jax itself at the same version):
  pip install jax==0.9.1 $WORK/dist/*.whl
Turn the pass on, and dump the module after it:
  XLA_FLAGS="--xla_gpu_experimental_enable_nvshmem=true \\
    --xla_gpu_experimental_enable_nvshmem_permute_rewriter=true \\
    --xla_dump_to=/tmp/xla_dump \\
    --xla_dump_hlo_pass_re=nvshmem-collective-permute-rewriter" python your_program.py
Check that it ran: the dump holds a file whose name contains
after_nvshmem-collective-permute-rewriter, and each collective-permute's
backend_config names the backend the pass chose:
  hlo-tools explain /tmp/xla_dump/*after_optimizations.txt
EOF
