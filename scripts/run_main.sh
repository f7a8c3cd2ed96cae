#!/usr/bin/env bash
# Sets everything up (idempotent), then runs the main job on its embedded
# default: `hlo-tools report` (ring attention with Llama-3-8B attention shapes,
# 128K tokens, compiled for 2 hosts x 4 H200s on this CPU, through the pass,
# verify and diff). Extra arguments go to `hlo-tools report`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/hlo-tools report "$@"
