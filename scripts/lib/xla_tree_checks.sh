# Checks of a patch series applied in a scratch XLA tree, shared by
# check_patches_upstream.sh (the pinned series) and check_series_upstream.sh
# (the jax v0.11.0 one). Sourced; uses the caller's TREE (the patched tree),
# N (patches), VENV, TF (the wheel's tensorflow folder), GMOCK, CXX, WORK, GEN,
# EXT and step().

# 3. clang-format 17 with the tree's .clang-format: the lines the series
# changes, and every C++ file it adds ("$@"), need no change.
check_format() {
  local fmt whole=0
  fmt=$(cd "$TREE" && git clang-format --binary "$VENV/bin/clang-format" --diff "HEAD~$N" -- '*.cc' '*.h' 2>&1)
  [ $# -eq 0 ] || whole=$(cd "$TREE" && "$VENV/bin/clang-format" --dry-run "$@" 2>&1 | grep -c 'warning:')
  if [[ "$fmt" == *"did not modify"* || "$fmt" == *"no modified files"* ]] && [ "$whole" = 0 ]; then
    step ok "clang-format $("$VENV/bin/clang-format" --version | awk '{print $3}')"
  else
    echo "$fmt" | head -40 >&2; step FAIL "clang-format (changed lines; $whole warnings in added files)"
  fi
}

# 4. buildifier on the BUILD files the series changes ("$@").
check_buildifier() {
  if (cd "$TREE" && buildifier --mode=check "$@") >"$WORK/bf.log" 2>&1; then
    step ok "buildifier ($*)"
  else
    cat "$WORK/bf.log" >&2; step FAIL "buildifier"
  fi
}

# 5. protoc on demand: the proto of a missing .pb.h and its imports.
imports() {  # the closure of a proto's imports inside the tree
  local todo=("$1") seen=" " p
  while [ ${#todo[@]} -gt 0 ]; do
    p=${todo[0]}; todo=("${todo[@]:1}")
    [[ "$seen" == *" $p "* ]] && continue
    [ -f "$TREE/$p" ] || [ -f "$TREE/third_party/tsl/$p" ] || continue
    seen+="$p "; echo "$p"
    mapfile -t -O ${#todo[@]} todo < <(sed -n 's/^import \(public \)\?"\([^"]*\)";.*/\2/p' \
      "$TREE/$p" "$TREE/third_party/tsl/$p" 2>/dev/null)
  done
}
gen_proto() {
  local protos
  mapfile -t protos < <(imports "${1%.pb.h}.proto")
  [ ${#protos[@]} -gt 0 ] || return 1
  (cd "$TREE" && "$VENV/bin/protoc" -I . -I third_party/tsl -I "$VENV/include" --cpp_out="$GEN" \
    "${protos[@]}") 2>>"$WORK/protoc.log"
}

# The compile flags (into FLAGS): the tree's warnings.bazelrc copts, its headers
# first, the generated .pb.h, then the wheel's third-party headers only (its
# xla/, tsl/ and tensorflow/ are another XLA and must never stand in for the
# tree's); absl's test matchers header, newer in the tree than in the wheel,
# from compat/wheel/ (the one stand-in). Extra -isystem folders: "$@".
compile_flags() {
  local d
  for d in "$TF"/include/*; do
    case "${d##*/}" in xla|tsl|tensorflow) ;; *) ln -s "$d" "$EXT/${d##*/}" ;; esac
  done
  mkdir -p "$WORK/compat/absl/status"
  ln -s "$ROOT/compat/wheel/absl/status/status_matchers.h" "$WORK/compat/absl/status/"
  WARN=($(sed -n 's/^build:warnings --copt=\(-W[^ ]*\)$/\1/p' "$TREE/warnings.bazelrc" | sort -u))
  [[ "$CXX" == *clang* ]] || WARN=(-Wall -Werror -Wno-sign-compare)
  SCAN=(-std=c++17 -I "$TREE" -I "$TREE/third_party/tsl" -I "$GEN" -isystem "$EXT"
        -isystem "$TF/include/external/highwayhash"
        -isystem "$TF/include/external/farmhash_archive/src" -isystem "$GMOCK"
        -isystem "$WORK/compat")
  for d in "$@"; do SCAN+=(-isystem "$d"); done
  # -fsyntax-only: every parse, name lookup, overload and template instantiation
  # of a compile, and its warnings; no code generation (the objects were never
  # kept), which took about half of each file's time.
  FLAGS=(-std=c++17 -fsyntax-only "${WARN[@]}" -Wno-unknown-warning-option "${SCAN[@]:1}")
}

compile() {  # compile FILE: 0 when it compiles; generates missing .pb.h first
  local i h missing gen
  # Every .pb.h the preprocessor cannot find (-MG lists them), generated at
  # once, until none is missing: seconds a round, where each failed compile
  # parses every header up to its first missing one. A missing LLVM or MLIR
  # header ends it as the compile would end.
  for i in $(seq 20); do
    mapfile -t missing < <("$CXX" "${SCAN[@]}" -E -M -MG "$1" 2>/dev/null |
      tr -s ' \\' '\n\n' | grep -vE '^/|:$|^$' | grep -vxF "$1")
    gen=0
    for h in "${missing[@]}"; do
      if [[ "$h" =~ ^(llvm|mlir)/ ]]; then
        echo "$1: fatal error: '$h' file not found" >"$WORK/cc.log"; return 1
      fi
      [[ "$h" == *.pb.h ]] && gen_proto "$h" && gen=1
    done
    [ $gen = 1 ] || break
  done
  for i in $(seq 40); do
    "$CXX" "${FLAGS[@]}" "$1" >"$WORK/cc.log" 2>&1 && return 0
    missing=$(grep -oE "['\"]?[A-Za-z0-9_/.]+\.pb\.h['\"]? file not found|[A-Za-z0-9_/.]+\.pb\.h: No such file" \
      "$WORK/cc.log" | head -1 | grep -oE '[A-Za-z0-9_/.]+\.pb\.h')
    [ -n "$missing" ] && gen_proto "$missing" || return 1
  done
  return 1
}
