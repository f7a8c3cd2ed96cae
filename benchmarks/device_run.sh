#!/usr/bin/env bash
# Everything the GPU measurements need, in one command on the device machine.
#
#   bash benchmarks/device_run.sh OUTDIR [P2P_SIZES] [RING_SEQ_LENS]
#
# Probes the machine (GPUs, links, versions of jax, NCCL, NVSHMEM, nvshmem4py),
# installs nvshmem4py from wheels in .whl/ when they are there (the newest one
# that imports and finds libnvshmem_host), then runs benchmarks/p2p_bench.py and
# benchmarks/ring_e2e.py. OUTDIR receives probe.txt, log.txt,
# p2p.csv, p2p_copy.csv, p2p_details.json and ring/ (ring_step.csv,
# ring_e2e.json and per-mode logs).
set -u
OUTDIR=${1:?usage: device_run.sh OUTDIR [P2P_SIZES] [RING_SEQ_LENS]}
P2P_SIZES=${2:-1K:256M}
RING_SEQ_LENS=${3:-32K,64K,128K,256K}
# NVLink multicast off, in this shell and every child.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PYTHONUNBUFFERED=1
# Some headroom over NVSHMEM's default 1 GiB heap: two 256 MiB buffers and XLA's.
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-4G}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/log.txt"
exec > >(tee -a "$LOG") 2>&1

{
  echo "== date"; date -u
  echo "== nvidia-smi"; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  echo "== nvidia-smi topo -m"; nvidia-smi topo -m 2>&1 | head -20
  echo "== python"; $PY -V; which $PY
  echo "== pip show"
  $PY -m pip show jax jaxlib jax-cuda13-plugin jax-cuda13-pjrt torch cupy-cuda13x \
    nvidia-nccl-cu13 nvidia-nvshmem-cu13 cuda-core cuda-bindings cuda-pathfinder 2>/dev/null \
    | grep -E '^(Name|Version|Location):'
  echo "== NVSHMEM and NCCL libraries"
  $PY - <<'EOF'
import glob, os, site, sys
for d in site.getsitepackages():
  for pat in ("nvidia/nvshmem/lib/*", "nvidia/nccl/lib/*"):
    for f in sorted(glob.glob(os.path.join(d, pat))):
      print(f)
EOF
  echo "== jax"
  $PY - <<'EOF'
import jax, jax.extend
print("jax", jax.__version__, "devices", jax.devices())
from jax.extend import xla as jx
print("register_hlo_module_transformation:", hasattr(jx, "register_hlo_module_transformation"),
      "PipelineStage:", [s.name for s in getattr(jx, "PipelineStage", [])])
EOF
} > "$OUTDIR/probe.txt" 2>&1
cat "$OUTDIR/probe.txt"

# nvshmem4py: the newest carried wheel that imports and opens libnvshmem_host.
NVSITE=""
for whl in $(ls -r .whl/nvshmem4py*.whl 2>/dev/null); do
  dir=/tmp/nvshmem4py_$(basename "$whl" | cut -d- -f2)
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$dir" "$whl" || continue
  if PYTHONPATH="$dir" $PY -c "import nvshmem.core as nc; print('nvshmem4py ok:', nc.get_version())" \
      >> "$OUTDIR/probe.txt" 2>&1; then
    NVSITE=$dir; break
  else
    echo "nvshmem4py from $whl does not import (see probe.txt)"
  fi
done
tail -5 "$OUTDIR/probe.txt"
[ -n "$NVSITE" ] && export PYTHONPATH="$NVSITE${PYTHONPATH:+:$PYTHONPATH}"
echo "== nvshmem4py site: ${NVSITE:-none}"

echo "== p2p_bench"
timeout 230 $PY benchmarks/p2p_bench.py --out="$OUTDIR/p2p.csv" --details="$OUTDIR/p2p_details.json" \
  --sizes="$P2P_SIZES" --timeout=60
echo "p2p_bench exit $?"

echo "== ring_e2e"
timeout 560 $PY benchmarks/ring_e2e.py --out-dir="$OUTDIR/ring" --seq-lens="$RING_SEQ_LENS" \
  --modes=nccl,pass --budget-s=540
echo "ring_e2e exit $?"
ls -la "$OUTDIR"
