#!/usr/bin/env bash
# The 2-GPU measurements, one step per device call.
#
#   bash benchmarks/device_x2.sh STEP OUTDIR
#
# STEP:
#   probe            GPUs, links, versions (any jax)
#   pinned-permute   with the pinned jax (0.9.1, carried wheels in /tmp/site):
#                    the non-cyclic shift hang check (NCCL vs NVSHMEM), then the
#                    ring-permute sweep NCCL vs NVSHMEM, 1/2/4 operands, 1 KiB..256 MiB
#   pinned-permute-fine  the pinned sweep at every power of two (calibration + held-out)
#   pinned-permute-uncombined  2 and 4 buffers as separate permutes (combine threshold 0),
#                    1 KiB..256 MiB: the several-buffer NVSHMEM rows of the calibration set
#   pinned-permute-small the low-noise pinned sweep, 1 KiB..16 MiB: 8 dependent permutes
#                    per loop step, 3 compiles per point, NVSHMEM uncombined, plus
#                    one-buffer chain-1 reference points
#   pinned-permute-compute  one permute per loop step after a 64 MiB memory-bound
#                    kernel (the host queues ahead, as in a program with compute),
#                    5 compiles per point, NVSHMEM uncombined, 1 KiB..4 MiB
#   today-permute    with the image's jax (0.11.2): NCCL vs peer vs symmetric sweep,
#                    one process per GPU
#   today-permute-1proc  the same with one process driving both GPUs
# The pinned steps expect the jax 0.9.1 wheels installed in the folder
# $PINNED_SITE (default /tmp/site) and put it on PYTHONPATH. Ring attention end
# to end runs through benchmarks/ring_e2e.py directly (docs/gpu_measurements.md).
set -u
STEP=${1:?usage: device_x2.sh STEP OUTDIR}
OUT=${2:?usage: device_x2.sh STEP OUTDIR}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

pinned_env() {
  export PYTHONPATH=${PINNED_SITE:-/tmp/site} JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1
  $PY -c "import jax, jaxlib; print('pinned jax', jax.__version__, jaxlib.__version__)" \
    2>&1 | grep -v "plugin configuration" | tail -1
}

probe() {
  {
    date -u
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    nvidia-smi topo -m 2>&1 | head -8
    $PY -V
    $PY -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1
  } > "$OUT/probe_$1.txt" 2>&1
  cat "$OUT/probe_$1.txt"
}

case "$STEP" in
  probe) probe image ;;
  pinned-permute)
    pinned_env
    probe pinned
    timeout 130 $PY benchmarks/xla_permute_bench.py --hang-check --backends=nccl,nvshmem \
      --timeout=50 --out="$OUT/shift_hang_check.json"
    echo "hang check exit $?"
    timeout 420 $PY benchmarks/xla_permute_bench.py --backends=nccl,nvshmem --operands=1,2,4 \
      --sizes=1K:256M:4 --trips=50 --reps=5 --budget-s=400 \
      --out="$OUT/h200x2_xla_permute_jax091.csv" --details="$OUT/h200x2_xla_permute_jax091.json"
    echo "permute bench exit $?"
    ;;
  today-permute)
    probe today
    timeout 560 $PY benchmarks/xla_permute_bench.py --backends=nccl,peer,symmetric --operands=1,2,4 \
      --sizes=1K:256M:4 --trips=50 --reps=5 --budget-s=540 \
      --out="$OUT/h200x2_xla_permute_jax0112.csv" --details="$OUT/h200x2_xla_permute_jax0112.json"
    echo "permute bench exit $?"
    ;;
  pinned-permute-fine)
    # Every power of two, step and baseline timed alternately: the calibration set
    # (powers of four) and the held-out sizes between them.
    pinned_env
    timeout 560 $PY benchmarks/xla_permute_bench.py --backends=nccl,nvshmem --operands=1,2,4 \
      --sizes=1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M,32M,64M,128M,256M \
      --trips=100 --reps=7 --budget-s=540 \
      --out="$OUT/h200x2_xla_permute_fine_jax091.csv" \
      --details="$OUT/h200x2_xla_permute_fine_jax091.json"
    echo "permute bench exit $?"
    ;;
  pinned-permute-uncombined)
    # K separate permutes instead of one combined one: the combine threshold at 0
    # for both backends (the committed run set it through XLA_FLAGS).
    pinned_env
    timeout 560 $PY benchmarks/xla_permute_bench.py --backends=nccl,nvshmem --uncombined=nccl,nvshmem \
      --operands=2,4 --sizes=1K:256M:4 --trips=100 --reps=7 --budget-s=380 \
      --out="$OUT/h200x2_xla_permute_uncombined_jax091.csv" \
      --details="$OUT/h200x2_xla_permute_uncombined_jax091.json"
    echo "permute bench exit $?"
    ;;
  pinned-permute-small)
    # Below ~2 MiB a permute costs 10-25 us and a loop step's overhead moves by a few
    # us from compile to compile; 8 permutes per step divide that by 8, 3 compiles
    # per point show what is left. NVSHMEM without combining (several buffers =
    # several NVSHMEM permutes, what our pass's choice runs at the pin).
    pinned_env
    probe pinned
    budget=${SMALL_BUDGET_S:-500}
    timeout $((budget + 40)) $PY benchmarks/xla_permute_bench.py --backends=nccl,nvshmem --uncombined=nvshmem \
      --operands=1,2,4 --sizes=1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M \
      --chain=8 --compiles=3 --reference-operands=1 --trips=50 --reps=7 \
      --budget-s=$budget \
      --out="$OUT/h200x2_xla_permute_small_jax091.csv" \
      --details="$OUT/h200x2_xla_permute_small_jax091.json"
    echo "permute bench exit $?"
    ;;
  pinned-permute-compute)
    pinned_env
    budget=${SMALL_BUDGET_S:-300}
    timeout $((budget + 40)) $PY benchmarks/xla_permute_bench.py --backends=nccl,nvshmem --uncombined=nvshmem \
      --operands=1,2,4 --sizes=1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M \
      --chain=1 --compiles=5 --compute-bytes=64M --trips=50 --reps=7 --budget-s=$budget \
      --out="$OUT/h200x2_xla_permute_compute_jax091.csv" \
      --details="$OUT/h200x2_xla_permute_compute_jax091.json"
    echo "permute bench exit $?"
    ;;
  today-permute-1proc)
    # One process drives both GPUs: XLA's peer and symmetric permutes run only when
    # one process holds every device of the permute (else they fall back to NCCL).
    probe today
    timeout 560 $PY benchmarks/xla_permute_bench.py --single-process --backends=nccl,peer,symmetric \
      --operands=1,2,4 --sizes=1K:256M:4 --trips=100 --reps=7 --budget-s=540 \
      --out="$OUT/h200x2_xla_permute_1proc_jax0112.csv" \
      --details="$OUT/h200x2_xla_permute_1proc_jax0112.json"
    echo "permute bench exit $?"
    ;;
  *) echo "unknown step $STEP"; exit 2 ;;
esac
ls -la "$OUT"
