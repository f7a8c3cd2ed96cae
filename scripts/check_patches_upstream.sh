#!/usr/bin/env bash
# Applies xla_patches/ to a pristine openxla/xla tree at the pin and compiles,
# syntax only, every C++ file the series adds or changes that can be compiled
# against the tensorflow wheel's headers. Ends with one summary line.
#
#   scripts/check_patches_upstream.sh GIT_DIR_OR_TREE
#
# GIT_DIR_OR_TREE: a git directory (bare or not) that holds the pin commit, or
# a checkout of the pin. Nothing in it is changed: the tree is copied to a
# scratch directory, committed there, and the series is applied with `git am`.
#
# Steps:
#   1. scripts/gen_patches.py --check --xla GIT_DIR_OR_TREE: the committed
#      series is what the generator makes from the sources and the pin's files;
#   2. git am of every patch, in order;
#   3. g++ -fsyntax-only, one file at a time (pin headers first, then the
#      wheel's generated .pb.h and third-party headers, then wheel_compat/ for
#      test-only headers the wheel does not ship), of each .cc the series adds
#      or changes, except the files named in NOT_COMPILABLE with the reason;
#      of gpu_compiler.cc, the registration the series adds, on its own;
#   4. when a protoc that knows protobuf editions is at hand ($PROTOC,
#      grpcio-tools, or protoc >= 27): the patched xla/xla.proto parses;
#   5. the patched CollectiveBackendAssigner, built against the wheel's XLA
#      libraries, passes scripts/upstream_checks/assigner_fix_test.cc.
#
# Environment: PYTHON (default .venv/bin/python), CXX (default g++), PROTOC,
# TF_DIR (default: the wheel of PYTHON), KEEP=1 keeps the scratch directory.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIN=3cc8846c10052cc1c32c4db87866eac4e4cdbccd
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CXX="${CXX:-g++}"

# Files the series changes that g++ cannot compile against the wheel, and why.
declare -A NOT_COMPILABLE=(
  [xla/service/gpu/gpu_compiler.cc]="includes LLVM headers (llvm/IR/Module.h), which the wheel does not ship"
  [xla/debug_options_flags.cc]="needs xla.pb.h and xla/backends/autotuner/backends.pb.h generated from the pin's (patched) protos; the wheel's xla.pb.h predates the pin, and no protoc with a C++ generator matching the wheel's protobuf runtime (31.1) is installable here"
)

die() { echo "check_patches_upstream: $*" >&2; exit 2; }

[ $# -eq 1 ] || die "usage: $0 GIT_DIR_OR_TREE"
SRC="$1"
[ -e "$SRC" ] || die "$SRC: no such file or directory"
[ -x "$PYTHON" ] || die "$PYTHON: not found (run scripts/setup.sh or set PYTHON)"
TF_DIR="${TF_DIR:-$("$PYTHON" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("tensorflow").origin))' 2>/dev/null)}"
[ -d "$TF_DIR/include/xla" ] || die "tensorflow wheel with XLA headers not found (set TF_DIR)"
GMOCK_INC=/usr/src/googletest/googlemock/include
[ -f "$GMOCK_INC/gmock/gmock.h" ] || die "$GMOCK_INC: gmock headers not found (Debian package googletest)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/xla-pin.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then
  echo "scratch tree: $WORK/xla"
else
  trap 'rm -rf "$WORK"' EXIT
fi
TREE="$WORK/xla"
mkdir -p "$TREE"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=check GIT_AUTHOR_EMAIL=check@invalid
export GIT_COMMITTER_NAME=check GIT_COMMITTER_EMAIL=check@invalid

# 1. The committed series is what the generator makes.
if ! out=$("$PYTHON" "$ROOT/scripts/gen_patches.py" --check --xla "$SRC" 2>&1); then
  die "gen_patches.py --check --xla: ${out:-failed}"
fi

# A pristine tree: from git, every blob of the pin that is present (a partial
# mirror may lack a few large data files, which no patch touches); else a copy.
export_tree() {
  local gd="$1"
  GIT_INDEX_FILE="$WORK/index" git --git-dir="$gd" read-tree "$PIN" || return 1
  git --git-dir="$gd" ls-tree -r "$PIN" | awk '$2 == "blob" {print $3, $4}' |
    while read -r obj path; do
      git --git-dir="$gd" cat-file -e "$obj" 2>/dev/null || echo "$path"
    done > "$WORK/absent"
  if [ -s "$WORK/absent" ]; then
    GIT_INDEX_FILE="$WORK/index" git --git-dir="$gd" update-index --force-remove \
      --stdin < "$WORK/absent" || return 1
  fi
  GIT_INDEX_FILE="$WORK/index" git --git-dir="$gd" checkout-index -a --prefix="$TREE/"
}
GD=""
for cand in "$SRC" "$SRC/.git"; do
  if git --git-dir="$cand" rev-parse -q --verify "$PIN^{commit}" >/dev/null 2>&1; then
    GD="$cand"; break
  fi
done
if [ -n "$GD" ]; then
  export_tree "$GD" || die "could not export $PIN from $GD"
  absent=$(wc -l < "$WORK/absent")
else
  [ -d "$SRC/xla" ] || die "$SRC: neither a git directory with $PIN nor an XLA tree"
  (cd "$SRC" && tar --exclude=./.git -cf - .) | (cd "$TREE" && tar -xf -) || die "copy failed"
  absent=0
fi
git -C "$TREE" init -q && git -C "$TREE" add -A && git -C "$TREE" commit -qm pristine ||
  die "could not commit the pristine tree"

# 2. git am, in order.
PATCHES=("$ROOT"/xla_patches/[0-9][0-9][0-9][0-9]-*.patch)
if ! git -C "$TREE" am -q "${PATCHES[@]}" >"$WORK/am.log" 2>&1; then
  cat "$WORK/am.log" >&2
  echo "check_patches_upstream: FAIL: git am stopped (pin $PIN, ${#PATCHES[@]} patches)"
  exit 1
fi

# 3. Syntax-only compiles of the C++ files the series adds or changes.
mapfile -t FILES < <(git -C "$TREE" diff --name-only --diff-filter=AM HEAD~${#PATCHES[@]} HEAD -- '*.cc')
FLAGS=(-std=c++17 -fsyntax-only -Wno-deprecated-declarations
       -I "$TREE" -I "$TF_DIR/include"
       -isystem "$TF_DIR/include/external/highwayhash"
       -isystem "$TF_DIR/include/external/farmhash_archive/src"
       -isystem "$GMOCK_INC" -isystem "$ROOT/wheel_compat")
ok=0; failed=(); skipped=()
for f in "${FILES[@]}"; do
  if [ -n "${NOT_COMPILABLE[$f]:-}" ]; then
    echo "skip $f: ${NOT_COMPILABLE[$f]}"
    skipped+=("$f")
    continue
  fi
  if "$CXX" "${FLAGS[@]}" "$TREE/$f" >"$WORK/cc.log" 2>&1; then
    echo "ok   $f"
    ok=$((ok + 1))
  else
    grep -m 20 -E 'error' "$WORK/cc.log" >&2
    echo "FAIL $f"
    failed+=("$f")
  fi
done

# 3b. Of gpu_compiler.cc, the registration the series adds: it is what calls
# the pass's API (Options, constructor), so its body is compiled on its own
# against the real pass header and HloPassPipeline. Only the DebugOptions
# accessors of the fields the series adds to xla.proto (declared from the
# patched proto, as protoc would) and CompileOptions::slice_size stand in.
registration="not found"
GC="$TREE/xla/service/gpu/gpu_compiler.cc"
REG_FIRST="NvshmemCollectivePermuteRewriter::Options rewriter_options;"
REG_LAST="std::move(rewriter_options));"
if grep -qF "$REG_FIRST" "$GC" && grep -qF "$REG_LAST" "$GC"; then
  {
    printf '#include <cstdint>\n#include <string>\n#include <utility>\n'
    grep -E '^#include "xla/backends/gpu/transforms/collectives/nvshmem_' "$GC"
    printf '#include "xla/hlo/pass/hlo_pass_pipeline.h"\n'
    printf '#include "xla/service/hlo_module_config.h"\n'
    printf 'namespace xla::gpu {\nstruct AddedDebugOptions {\n'
    grep -oE 'optional (bool|string) xla_[a-z0-9_]+ = [0-9]+;' "$TREE/xla/xla.proto" |
      grep -F -f <(git -C "$TREE" diff HEAD~${#PATCHES[@]} HEAD -- xla/xla.proto |
                   grep -oE '^\+ *optional (bool|string) xla_[a-z0-9_]+' | awk '{print $NF}') |
      awk '{t = ($2 == "bool") ? "bool" : "const std::string&"; print "  " t " " $3 "() const;"}'
    printf '};\nstruct SliceSize {\n  int64_t slice_size = 0;\n};\n'
    printf 'void Register(HloPassPipeline& pipeline, const HloModuleConfig& config,\n'
    printf '              const AddedDebugOptions& debug_options,\n'
    printf '              const SliceSize& options) {\n'
    awk -v first="$REG_FIRST" -v last="$REG_LAST" \
      'index($0, first) {on = 1} on {print} on && index($0, last) {exit}' "$GC"
    printf '}\n}  // namespace xla::gpu\n'
  } > "$TREE/gpu_compiler_nvshmem_registration.cc"
  if "$CXX" "${FLAGS[@]}" "$TREE/gpu_compiler_nvshmem_registration.cc" >"$WORK/cc.log" 2>&1; then
    registration="compiles"
    echo "ok   xla/service/gpu/gpu_compiler.cc: the registration the series adds"
  else
    grep -m 20 -E 'error' "$WORK/cc.log" >&2
    registration="FAILS"
    echo "FAIL xla/service/gpu/gpu_compiler.cc: the registration the series adds"
    failed+=("gpu_compiler.cc (registration)")
  fi
else
  failed+=("gpu_compiler.cc (registration not found)")
fi

# 4. The patched xla.proto parses (field numbers and names unique). Its
# imports use protobuf editions, so a protoc of release 27 or later is needed:
# $PROTOC, grpcio-tools' protoc, or a protoc on PATH that passes the probe.
printf 'edition = "2023";\npackage probe;\n' > "$WORK/probe.proto"
PROTOC_CMD=()
if [ -n "${PROTOC:-}" ]; then
  read -r -a PROTOC_CMD <<< "$PROTOC"
elif "$PYTHON" -c 'import grpc_tools.protoc' 2>/dev/null; then
  PROTOC_CMD=("$PYTHON" -m grpc_tools.protoc)
elif command -v protoc >/dev/null; then
  PROTOC_CMD=(protoc)
fi
proto="xla.proto not checked (no protoc with editions support)"
if [ ${#PROTOC_CMD[@]} -gt 0 ] &&
    "${PROTOC_CMD[@]}" -I "$WORK" --descriptor_set_out=/dev/null "$WORK/probe.proto" 2>/dev/null; then
  if "${PROTOC_CMD[@]}" -I "$TREE" --descriptor_set_out=/dev/null \
      "$TREE/xla/xla.proto" 2>"$WORK/protoc.log"; then
    proto="xla.proto parses ($("${PROTOC_CMD[@]}" --version))"
  else
    cat "$WORK/protoc.log" >&2
    proto="xla.proto FAILS"
    failed+=(xla/xla.proto)
  fi
fi

# 5. The patched assigner runs: its .cc, copied out of the patched tree, is
# compiled against the wheel's headers (wheel_compat/ maps the pinned paths)
# and linked with the wheel's XLA, whose own RunImpl it replaces in the test
# binary; scripts/upstream_checks/assigner_fix_test.cc tests its rule.
assigner="not run"
ASSIGNER_CC="$TREE/xla/backends/gpu/transforms/collectives/collective_backend_assigner.cc"
RT_FLAGS=(-std=c++17 -O0 -Wno-deprecated-declarations -isystem "$ROOT/wheel_compat"
          -isystem "$TF_DIR/include" -isystem "$TF_DIR/include/external/highwayhash"
          -isystem "$TF_DIR/include/external/farmhash_archive/src")
cp "$ASSIGNER_CC" "$WORK/collective_backend_assigner.cc"
if "$CXX" "${RT_FLAGS[@]}" "$ROOT/scripts/upstream_checks/assigner_fix_test.cc" \
    "$WORK/collective_backend_assigner.cc" -o "$WORK/assigner_fix_test" \
    "$TF_DIR/libtensorflow_cc.so.2" "$TF_DIR/libtensorflow_framework.so.2" \
    -Wl,-rpath,"$TF_DIR" -lgtest -lgtest_main -pthread >"$WORK/rt.log" 2>&1 &&
   timeout 300 "$WORK/assigner_fix_test" >"$WORK/rt_run.log" 2>&1; then
  assigner="patched assigner test passes ($(grep -c '^\[       OK \]' "$WORK/rt_run.log") tests)"
  echo "ok   patched CollectiveBackendAssigner: scripts/upstream_checks/assigner_fix_test.cc"
else
  grep -h -m 20 -E 'error|Failure|FAILED|Expected|Which is|actual' "$WORK/rt.log" "$WORK/rt_run.log" \
    2>/dev/null >&2
  assigner="patched assigner test FAILS"
  echo "FAIL patched CollectiveBackendAssigner: scripts/upstream_checks/assigner_fix_test.cc"
  failed+=("assigner_fix_test")
fi

status=OK
[ ${#failed[@]} -eq 0 ] || status=FAIL
echo "check_patches_upstream: $status: pin ${PIN:0:8}, ${#PATCHES[@]} patches applied with git am," \
  "$ok/${#FILES[@]} changed .cc files compile (syntax only), ${#skipped[@]} not compilable here" \
  "(${skipped[*]##*/}; gpu_compiler.cc's registration $registration), ${#failed[@]} failed;" \
  "$proto; $assigner; $absent absent blobs left out"
[ "$status" = OK ]
