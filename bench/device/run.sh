#!/bin/bash
# Device checks on a machine with an NVIDIA GPU (docs/PERFORMANCE.md, "Device checks"): builds
# trainscope against a CUDA libtorch (a pip torch's, found through python), then runs
#   trainscope selftest device --quick          the GPU's health, matmul peak, memory bandwidth
#   trainscope selftest comm --backend nccl     NCCL collectives, exact checks, busbw
#   trainscope selftest train --device cuda     the reference trainer on the GPU: converges,
#                                               tokens/s, MFU, device memory
# each with --json, and prints their figures and a one-line summary per check. Bounded: about
# 8 minutes in all (TS_DEVICE_BUDGET_S), each step with its own share.
#
# Without a CUDA libtorch the trainer check is skipped with the reason and how to get one; the
# other two run on a build against Debian's libtorch (their GPU code needs only the CUDA
# toolkit: cuBLAS and NCCL are loaded at run time).
#
# Environment:
#   TS_TORCH_PYTHON     the python whose torch to build against (default: python3)
#   TS_DEVICE_BUILD     build directory (default: build-device; build-device-cpu without CUDA torch)
#   TS_DEVICE_BUDGET_S  total time budget in seconds (default 480)
#   OUT                 where the JSON reports and logs go (default: build-device-reports)
# Exit status: 0 when every check that ran passed, 1 when one failed, 2 when nothing could be
# built (what is missing is printed).
set -u
cd "$(dirname "$0")/../.." || exit 2
SRC=$(pwd)
START=$(date +%s)
BUDGET=${TS_DEVICE_BUDGET_S:-480}
OUT_DIR=${OUT:-$SRC/build-device-reports}
mkdir -p "$OUT_DIR"
PY=${TS_TORCH_PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
[ "$JOBS" -gt 16 ] && JOBS=16

say() { echo "device-check: $*"; }
# Seconds left for a step: its share, never past the whole budget.
left() {
  local share=$1 remaining=$((BUDGET - ($(date +%s) - START)))
  [ "$remaining" -lt "$share" ] && share=$remaining
  [ "$share" -lt 1 ] && share=1
  echo "$share"
}

# ---- what is there --------------------------------------------------------------------------
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || { say "missing: $tool (apt-get install $tool)"; exit 2; }
done
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader |
    sed 's/^/device-check: gpu /'
  NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
else
  say "nvidia-smi not found: no NVIDIA driver on this machine"
  NGPUS=0
fi
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
say "nvcc: ${NVCC:-not found}"

# A CUDA libtorch: the torch of $PY, when it is a CUDA build with the C++11 ABI (trainscope
# links Debian's libraries, all built with it).
TORCH_INFO=$("$PY" -c 'import torch
print(torch.utils.cmake_prefix_path)
print(torch.__version__)
print(torch.version.cuda or "")
print(torch.cuda.is_available())
print(torch._C._GLIBCXX_USE_CXX11_ABI)' 2>&1)
TORCH_RC=$?
TORCH_OK=0
if [ $TORCH_RC -ne 0 ]; then
  WHY="$PY cannot import torch: $(echo "$TORCH_INFO" | tail -1)"
else
  readarray -t T <<<"$TORCH_INFO"
  say "torch ${T[1]} at ${T[0]} (CUDA ${T[2]:-none}, GPU visible: ${T[3]}, C++11 ABI: ${T[4]})"
  if [ -z "${T[2]}" ]; then
    WHY="$PY's torch ${T[1]} is a CPU-only build (pip install torch from the CUDA index, or set TS_TORCH_PYTHON)"
  elif [ "${T[3]}" != "True" ]; then
    WHY="$PY's torch ${T[1]} sees no GPU (torch.cuda.is_available() is False: driver, CUDA_VISIBLE_DEVICES)"
  elif [ "${T[4]}" != "True" ]; then
    WHY="$PY's torch ${T[1]} uses the pre-C++11 ABI; trainscope links Debian's C++11-ABI libraries: use a torch >= 2.7 wheel or the cxx11-abi libtorch zip"
  else
    TORCH_OK=1
  fi
fi

# ---- build ----------------------------------------------------------------------------------
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTS_BUILD_BENCH=OFF)
if [ "$TORCH_OK" = 1 ]; then
  BUILD=${TS_DEVICE_BUILD:-$SRC/build-device}
  CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=${T[0]}")
  [ -n "$NVCC" ] && CMAKE_ARGS+=("-DCMAKE_CUDA_COMPILER=$NVCC")
  say "building against the CUDA libtorch in $BUILD"
else
  BUILD=${TS_DEVICE_BUILD:-$SRC/build-device-cpu}
  say "no CUDA libtorch: $WHY"
  say "building against Debian's libtorch in $BUILD (selftest train --device cuda will be skipped)"
fi
BUILD_S=$(left 300)
if ! timeout "$BUILD_S" cmake -S "$SRC" -B "$BUILD" "${CMAKE_ARGS[@]}" >"$OUT_DIR/cmake.log" 2>&1; then
  say "cmake failed (log: $OUT_DIR/cmake.log):"
  tail -20 "$OUT_DIR/cmake.log"
  exit 2
fi
grep -E "^-- (train|comm|device):" "$OUT_DIR/cmake.log" | sed 's/^-- /device-check: cmake: /'
if ! timeout "$(left "$BUILD_S")" cmake --build "$BUILD" -j "$JOBS" --target trainscope trainscope-torch \
    >"$OUT_DIR/build.log" 2>&1; then
  say "build failed or ran out of time (log: $OUT_DIR/build.log):"
  grep -E "error|FAILED" "$OUT_DIR/build.log" | head -20
  exit 2
fi
BIN=$(find "$BUILD" -maxdepth 2 -type f -name trainscope -perm -u+x | head -1)
say "built $BIN in $(($(date +%s) - START)) s"

# ---- checks ---------------------------------------------------------------------------------
FAILED=0
# run NAME SHARE_S CMD...: runs with --json into $OUT_DIR/NAME.json, then summarize.py.
run() {
  local name=$1 share=$2
  shift 2
  local t0
  t0=$(date +%s)
  timeout "$(left "$share")" "$@" --json >"$OUT_DIR/$name.json" 2>"$OUT_DIR/$name.stderr"
  local rc=$?
  say "$name: exit $rc after $(($(date +%s) - t0)) s ($*)"
  python3 "$SRC/bench/device/summarize.py" "$name" "$OUT_DIR/$name.json" "$rc" ||
    tail -5 "$OUT_DIR/$name.stderr"
  [ "$rc" -ne 0 ] && FAILED=1
}

run selftest_device 60 "$BIN" selftest device --quick
if [ "$NGPUS" -ge 1 ]; then
  # One rank per GPU (NCCL refuses two ranks on one device); 1 MB .. 1 GB in steps of 4.
  run selftest_comm_nccl 90 "$BIN" selftest comm --backend nccl -n "$NGPUS" \
    --ops all_reduce,all_gather,reduce_scatter --min-bytes 1M --max-bytes 1G --factor 4 \
    --seconds-per-size 0.5
else
  say "selftest_comm_nccl: skipped: no GPU"
fi
if [ "$TORCH_OK" = 1 ]; then
  run selftest_train_cuda 120 "$BIN" selftest train --quick --device cuda
else
  say "selftest_train_cuda: skipped: $WHY"
fi
say "done in $(($(date +%s) - START)) s of a ${BUDGET} s budget; reports in $OUT_DIR"
exit $FAILED
