#!/usr/bin/env bash
# Sets everything up (idempotent), then runs the main job on its embedded
# default: `hlo-tools report` (ring attention with Llama-3-8B attention shapes at
# 4K and 128K tokens on 1x1x8 and 1x2x4, and the Llama-3-8B-shaped train step on
# 1x1x8 (cp 4 x tp 2) and 1x2x8 (cp 2 x tp 8; and the seed's layout tp 2 x cp 8, the
# ring inside each host, at 64K, 128K and 256K tokens), each compiled for H200s on
# this CPU, through the pass, verify and diff). Extra arguments go to
# `hlo-tools report`.
# The report goes to $NVSHMEM_REPORT_DIR (default: nvshmem-opt/report under
# the user's cache directory), outside the repository, unless --out is given.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=()
case " $* " in
  *" --out "* | *" --out="*) ;;
  *)
    dir=${NVSHMEM_REPORT_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/nvshmem-opt/report}
    mkdir -p "$(dirname "$dir")"
    echo "[main] report directory: $dir" >&2
    out=(--out="$dir")
    ;;
esac
exec .venv/bin/hlo-tools report "${out[@]}" "$@"
