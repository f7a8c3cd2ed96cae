#!/usr/bin/env bash
# Builds jaxlib and the CUDA plugin of a jax release with the XLA it pins plus
# the patch series for that XLA, using jax's own build (build/build.py).
#
#   scripts/build_jaxlib.sh [--jax-version V] [--work DIR] [--jax SRC] [--xla SRC] [--dry-run]
#
#   --jax-version V  0.9.1 (default: XLA 3cc8846c, the NVSHMEM rewriter series)
#                    or 0.11.0 (XLA 131bf41a, the per-permute collectives mode
#                    series, xla_patches/xla-131bf41a_jax-0.11.0/)
#   --series DIR     the patches to apply (default: the series of that version)
#   --work DIR       checkouts and wheels go here (default: ./jaxlib-build)
#   --jax SRC        jax's git repository (default https://github.com/jax-ml/jax)
#   --xla SRC        openxla/xla's (default https://github.com/openxla/xla)
#   --jax-rev REV    default jax-vV
#   --xla-rev REV    default the XLA that jax-vV pins
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
WORK=./jaxlib-build JAX=https://github.com/jax-ml/jax XLA=https://github.com/openxla/xla
JAX_VERSION=0.9.1 SERIES="" JAX_REV="" XLA_REV="" CAPS=sm_90 DRY=0
die() { echo "build_jaxlib: $*" >&2; exit "${2:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --work|--jax|--xla|--jax-rev|--xla-rev|--cuda-capabilities|--jax-version|--series)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --work) WORK=$2 ;; --jax) JAX=$2 ;; --xla) XLA=$2 ;;
        --jax-rev) JAX_REV=$2 ;; --xla-rev) XLA_REV=$2 ;; --cuda-capabilities) CAPS=$2 ;;
        --jax-version) JAX_VERSION=$2 ;; --series) SERIES=$2 ;;
      esac
      shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) die "unknown argument '$1' (see the header of $0)" ;;
  esac
done
case "$JAX_VERSION" in
  0.9.1) PIN=3cc8846c10052cc1c32c4db87866eac4e4cdbccd
         DEFAULT_SERIES="$ROOT/xla_patches/xla-3cc8846c_jax-0.9.1"
         [ -d "$DEFAULT_SERIES" ] || DEFAULT_SERIES="$ROOT/xla_patches" ;;
  0.11.0) PIN=131bf41acb4650e4391a640c3f1859c1c86ad74b
          DEFAULT_SERIES="$ROOT/xla_patches/xla-131bf41a_jax-0.11.0" ;;
  *) die "--jax-version: 0.9.1 or 0.11.0, not '$JAX_VERSION'" ;;
esac
SERIES=${SERIES:-$DEFAULT_SERIES} JAX_REV=${JAX_REV:-jax-v$JAX_VERSION} XLA_REV=${XLA_REV:-$PIN}
PATCHES=("$SERIES"/[0-9][0-9][0-9][0-9]-*.patch)
[ -f "${PATCHES[0]}" ] || die "$SERIES: no patches"
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
if [ "$JAX_VERSION" = 0.11.0 ]; then
  cat <<EOF
Install the wheels (and jax itself at the same version):
  pip install jax==0.11.0 $WORK/dist/*.whl
Mark a permute with its mode, which then wins over the flag
xla_gpu_collective_permute_mode (private, symmetric or peer):
  with jax.experimental.xla_metadata.set_xla_metadata(_xla_collectives_mode="peer"):
    y = jax.lax.ppermute(x, "cp", perm)
Check it: dump the optimized module; each permute's backend_config carries
collective_backend_config.collectives_mode:
  XLA_FLAGS="--xla_dump_to=/tmp/xla_dump" python your_program.py
  hlo-tools explain /tmp/xla_dump/*after_optimizations.txt
EOF
  exit 0
fi
cat <<EOF
Install the wheels (and jax itself at the same version):
  pip install jax==0.9.1 $WORK/dist/*.whl
Turn the pass on, and dump the module after it:
  XLA_FLAGS="--xla_gpu_experimental_enable_nvshmem=true \\
    --xla_gpu_experimental_enable_nvshmem_permute_rewriter=true \\
    --xla_gpu_experimental_nvshmem_permute_devices_per_host=8 \\
    --xla_dump_to=/tmp/xla_dump \\
    --xla_dump_hlo_pass_re=nvshmem-collective-permute-rewriter" python your_program.py
Check that it ran: the dump holds a file whose name contains
after_nvshmem-collective-permute-rewriter, and each collective-permute's
backend_config names the backend the pass chose:
  hlo-tools explain /tmp/xla_dump/*after_optimizations.txt
EOF
