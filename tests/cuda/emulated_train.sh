#!/usr/bin/env bash
# `memwall train` on the emulated GPU (tests/cuda/emulation; the binary is memwall-emulated-gpu): a small GPT
# with parameters and optimizer states on NVMe, --device cuda against --device cpu. Checks: per-step losses
# within 1e-4 relative (the emulated kernels are the CPU's; only the loss's summation order differs); a
# checkpoint written on the GPU and resumed on the CPU continues with the uninterrupted run's losses; the
# GPU run writes a trace; with --gpu-matmul bf16 the loss stays within 3e-2 of fp32's and falls; given
# mpirun, two ranks on the GPU path match two CPU ranks, with the collectives on (emulated) NCCL and through
# MPI on host copies (--gpu-collectives host); --device auto picks the GPU; a GPU that is not there and
# activations or a plan that do not fit the GPU are one-line errors, and a GPU that holds the activations
# and the plan's tier (but not the activations twice) trains; calibrate --device cuda writes a spec of the
# GPU that loads; with gradient_clipping the GPU's norms and losses follow the CPU's; so do they on GPT-2 BPE
# tokens; ZeRO stages 0, 1 and 2 on two GPU ranks follow the same runs on two CPU ranks, and the delayed
# parameter update on the GPU the one on the host; so do a Llama-shaped model and a Mixtral-shaped one
# (picked by --device auto) with NVMe offload, and a DeepSeek-V3-shaped one (auto too) whose correction bias
# the bias rule steps on the GPU.
# Usage: emulated_train.sh MEMWALL_EMULATED_GPU_BINARY SOURCE_DIR [MPIEXEC]
set -euo pipefail
BIN=$1
SRC=$2
MPIEXEC=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$SRC/README.md" "$SRC"/docs/*.md >"$work/corpus.txt"
mkdir -p "$work/nvme"
base=(train --hardware dgx2 --model gpt-mini --model-set '{"n_layer": 2, "n_embd": 64, "n_head": 4}'
  --data "$work/corpus.txt" --eval-batches 1 --json --nvme-path "$work/nvme")
nvme_set='"train_micro_batch_size_per_gpu": 2, "memwall.sequence_length": 32,
          "zero_optimization.offload_param.device": "nvme", "zero_optimization.offload_param.max_in_cpu": 0,
          "zero_optimization.offload_optimizer.device": "nvme", "zero_optimization.sub_group_size": 40000'
common=("${base[@]}" --set "{$nvme_set}")
run() {  # $1: output name, then extra arguments
  local out=$1
  shift
  "$BIN" "${common[@]}" "$@" >"$work/$out.jsonl" 2>"$work/$out.err" || {
    echo "FAILED: memwall ${common[*]} $*"
    cat "$work/$out.err"
    exit 1
  }
}
run cpu --steps 6 --device cpu
run cuda --steps 6 --device cuda --gpu-matmul fp32 --trace "$work/trace.json"
run cudasync --steps 6 --device cuda --gpu-matmul fp32 --gpu-sync
run bf16 --steps 6 --device cuda  # bf16 GEMMs, the default on a GPU
run first --steps 3 --device cuda --gpu-matmul fp32 --checkpoint-dir "$work/ckpt"
# A driver that will not page-lock host memory: a warning, and the same losses through pageable copies.
MEMWALL_EMULATED_NO_PINNING=1 run unpinned --steps 6 --device cuda --gpu-matmul fp32
grep -q "warning: the GPU driver would not page-lock" "$work/unpinned.err" || { echo "FAILED: no warning about page-locking"; exit 1; }
run resumed --steps 6 --device cpu --checkpoint-dir "$work/ckpt" --resume
# Gradient accumulation, 2 micro-batches per step: the optimizer on NVMe with its gradients summed in CPU
# memory (the default where they fit) and on NVMe (read back and added), and the optimizer on the CPU (each
# micro-batch's device gradients staged and added), on the GPU and on the CPU.
gas_run() {  # $1: output name, $2: run keys, then extra arguments
  local out=$1 keys=$2
  shift 2
  "$BIN" "${base[@]}" --set "{$keys, \"gradient_accumulation_steps\": 2}" --steps 3 "$@" >"$work/$out.jsonl" \
    2>"$work/$out.err" || { echo "FAILED: gradient accumulation run $out"; cat "$work/$out.err"; exit 1; }
}
cpu_opt_set='"train_micro_batch_size_per_gpu": 2, "memwall.sequence_length": 32,
             "zero_optimization.offload_optimizer.device": "cpu"'
gas_run gas_nvme_cpu "$nvme_set" --device cpu
gas_run gas_nvme_cuda "$nvme_set" --device cuda --gpu-matmul fp32
sums_set="$nvme_set, \"memwall.optimizer_gradients\": \"nvme\""
gas_run gas_sums_cpu "$sums_set" --device cpu
gas_run gas_sums_cuda "$sums_set" --device cuda --gpu-matmul fp32
gas_run gas_opt_cpu "$cpu_opt_set" --device cpu
gas_run gas_opt_cuda "$cpu_opt_set" --device cuda --gpu-matmul fp32
# Gradient clipping with the optimizer on the GPU: the norm is taken from the device's fp32 gradients.
clip_set='"train_micro_batch_size_per_gpu": 2, "memwall.sequence_length": 32, "gradient_clipping": 0.5'
for d in cpu cuda; do
  args=(--device cpu)
  [ "$d" = cuda ] && args=(--device cuda --gpu-matmul fp32)
  "$BIN" "${base[@]}" --set "{$clip_set}" --steps 3 "${args[@]}" >"$work/clip_$d.jsonl" 2>"$work/clip_$d.err" \
    || { echo "FAILED: gradient clipping on $d"; cat "$work/clip_$d.err"; exit 1; }
done
# GPT-2 BPE tokens (a 657-token vocabulary): the GPU's embedding, head and cross-entropy over it follow the CPU's.
for d in cpu cuda; do
  args=(--device cpu)
  [ "$d" = cuda ] && args=(--device cuda --gpu-matmul fp32)
  "$BIN" "${base[@]}" --tokenizer "$SRC/tests/data/tiny-bpe" --set '{"memwall.sequence_length": 32}' --steps 3 \
    "${args[@]}" >"$work/bpe_$d.jsonl" 2>"$work/bpe_$d.err" || { echo "FAILED: BPE run on $d"; cat "$work/bpe_$d.err"; exit 1; }
done
# --device auto picks the (emulated) GPU; bad GPU requests are one-line errors with exit code 2.
run auto --steps 1 --device auto
expect_error() {  # $1: what the message must say, then the command's environment and extra arguments
  local want=$1
  shift
  local rc=0
  env "$@" >"$work/err.out" 2>&1 || rc=$?
  if [ "$rc" != 2 ] || ! grep -q -- "$want" "$work/err.out" || [ "$(wc -l <"$work/err.out")" != 1 ]; then
    echo "FAILED: expected one line saying '$want' and exit 2, got exit $rc:"
    cat "$work/err.out"
    exit 1
  fi
}
expect_error "--gpu 3: this machine has 1 GPU" "$BIN" "${common[@]}" --steps 1 --device cuda --gpu 3
expect_error "activations on the GPU need" MEMWALL_EMULATED_GPU_BYTES=500000 "$BIN" "${common[@]}" --steps 1 \
  --device cuda
# A GPU smaller than the hardware file says: the plan is made for what the GPU has left beside the model's
# activations (about 1 MB here), and refused when that is too little. The activations and the hardware file's
# 1 GiB runtime reserve are not counted again inside the tier: a 2 MB GPU (under 0.7 MB left for the tier)
# runs, where the plan's whole GPU peak, reserve and activation estimate included, is far more. (Every
# parameter partitioned onto NVMe here: the run's persistence threshold would keep this model's small
# tensors, 0.8 MB, whole on the GPU.)
partitioned=("${base[@]}" --set "{$nvme_set, \"zero_optimization.stage3_param_persistence_threshold\": 0}")
expect_error "GPU (besides the activations): the schedule needs" MEMWALL_EMULATED_GPU_BYTES=1500000 "$BIN" \
  "${partitioned[@]}" --steps 1 --device cuda
MEMWALL_EMULATED_GPU_BYTES=2000000 "$BIN" "${partitioned[@]}" --steps 1 --device cuda \
  --trace "$work/small-trace.json" >"$work/small.jsonl" 2>"$work/small.err" || {
  echo "FAILED: the 2 MB GPU"
  cat "$work/small.err"
  exit 1
}
# Without --hardware a GPU run's device tier is what the GPU has (a 40 GB one here), not the default dgx2
# file's 32 GB; with the file, the file caps it.
for hw in own file; do
  hwargs=()
  [ "$hw" = file ] && hwargs=(--hardware dgx2)
  MEMWALL_EMULATED_GPU_BYTES=40000000000 "$BIN" train "${hwargs[@]}" --model gpt-mini \
    --model-set '{"n_layer": 2, "n_embd": 64, "n_head": 4}' --data "$work/corpus.txt" --eval-batches 1 --json \
    --set '{"train_micro_batch_size_per_gpu": 2, "memwall.sequence_length": 32}' --steps 1 --device cuda \
    >"$work/big_$hw.jsonl" 2>"$work/big_$hw.err" || { echo "FAILED: the 40 GB GPU ($hw)"; cat "$work/big_$hw.err"; exit 1; }
done
# memwall calibrate --device cuda writes a spec of the (emulated) GPU that predict then loads.
"$BIN" calibrate --device cuda --gemm-size 128 --size 4M --path "$work/nvme" --out "$work/gpu.json" \
  >"$work/cal.out" 2>&1 || { echo "FAILED: memwall calibrate --device cuda"; cat "$work/cal.out"; exit 1; }
"$BIN" predict --hardware "$work/gpu.json" --model gpt-mini >"$work/predict.out" 2>&1 \
  || { echo "FAILED: memwall predict on the calibrated GPU spec"; cat "$work/predict.out"; exit 1; }
grep -q "host emulation of a GPU" "$work/predict.out" || { echo "FAILED: the spec does not name the GPU"; exit 1; }
ranks2=skipped
if [ -n "$MPIEXEC" ]; then
  for d in cpu cuda nccl; do
    args=(--device cuda --gpu-matmul fp32 --gpu-collectives host)
    [ "$d" = cpu ] && args=(--device cpu)
    [ "$d" = nccl ] && args=(--device cuda --gpu-matmul fp32 --gpu-collectives nccl)
    if ! "$MPIEXEC" -n 2 "$BIN" "${common[@]}" --steps 4 "${args[@]}" \
      >"$work/mpi_$d.jsonl" 2>"$work/mpi_$d.err"; then
      if grep -q -e "listener thread failed to start" -e "unable to find network interfaces" "$work/mpi_$d.err"; then
        echo "two ranks: skipped (mpirun cannot start here)"
        break
      fi
      echo "FAILED: $MPIEXEC -n 2 memwall train ${args[*]}"
      cat "$work/mpi_$d.err"
      exit 1
    fi
    ranks2=ran
  done
fi
# The delayed parameter update (stage 2, the CPU optimizer stepping on the last step's gradients while the
# GPU computes) on the GPU and on the host.
for v in dpu_cpu dpu_cuda; do
  args=(--device cpu)
  [ "$v" = dpu_cuda ] && args=(--device cuda --gpu-matmul fp32)
  "$BIN" "${base[@]}" --steps 3 "${args[@]}" --set '{"train_micro_batch_size_per_gpu": 2,
    "memwall.sequence_length": 32, "zero_optimization.stage": 2, "zero_optimization.offload_optimizer.device":
    "cpu", "memwall.delayed_parameter_update": true}' >"$work/$v.jsonl" 2>"$work/$v.err" \
    || { echo "FAILED: $v"; cat "$work/$v.err"; exit 1; }
done
# `train` of 3 steps on the host and on the GPU, as $1_cpu and $1_cuda; $2: the GPU run's --device (cuda or
# auto), then the runs' own arguments.
side_by_side() {
  local name=$1 gpu=$2
  shift 2
  for v in "${name}_cpu" "${name}_cuda"; do
    local args=(--device cpu)
    [ "$v" = "${name}_cuda" ] && args=(--device "$gpu" --gpu-matmul fp32)
    "$BIN" train --hardware dgx2 --data "$work/corpus.txt" --eval-batches 1 --json --steps 3 "$@" "${args[@]}" \
      >"$work/$v.jsonl" 2>"$work/$v.err" || { echo "FAILED: $v"; cat "$work/$v.err"; exit 1; }
  done
}
# The Llama shape (RMSNorm, rotary positions, 4 query heads on 2 key/value heads, SwiGLU, an untied head)
# with its parameters and optimizer states on NVMe, on the GPU and on the host.
side_by_side llama cuda --model llama-mini --model-set '{"num_hidden_layers": 2, "hidden_size": 64,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176}' --nvme-path "$work/nvme" \
  --set "{$nvme_set}"
# Mixtral's shape (4 experts of 48, 2 a token) with NVMe offload; --device auto takes the GPU for it.
side_by_side moe auto --model mixtral-8x7b --model-set '{"num_hidden_layers": 2, "hidden_size": 64,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "num_local_experts": 4,
  "num_experts_per_tok": 2}' --nvme-path "$work/nvme" --set "{$nvme_set}"
# DeepSeek-V3's shape (the latent attention; sigmoid routing in groups, a shared expert, a dense first
# layer, its next-token-prediction module) with its bias rule stepping the correction bias, whose states are
# on the GPU: its load errors and bias go to the host and back. --device auto takes the GPU for it. The
# held-out loss (the main model's alone) too.
side_by_side ds auto --model deepseek-v3 --model-set '{"num_hidden_layers": 2, "hidden_size": 64,
  "num_attention_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
  "v_head_dim": 8, "intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 8,
  "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1}' --set '{
  "train_micro_batch_size_per_gpu": 2, "memwall.sequence_length": 32, "memwall.router_bias_update_speed": 0.01,
  "memwall.mtp": true}'
# ZeRO stages 1 and 2 on two ranks: the whole parameters on each GPU, all-gathered after the optimizer step
# (stage 1 all-reduces whole gradients: with the optimizer on the device, on NCCL; stage 2 with the optimizer
# on the CPU, ZeRO-Offload: reduce-scatters, gradients to the host and parameters back, NCCL and host
# collectives), and stage 0 (every rank steps all of the states; its gradients all-reduced whole, by an NCCL
# all-reduce or through the host), against the same runs on --device cpu.
if [ "$ranks2" = ran ]; then
  for v in z0_cpu z0_nccl z0_host z1_cpu z1_nccl z2off_cpu z2off_nccl z2off_host; do
    case $v in
      z0_*) stage_set='"zero_optimization.stage": 0' ;;
      z1_*) stage_set='"zero_optimization.stage": 1' ;;
      *) stage_set='"zero_optimization.stage": 2, "zero_optimization.offload_optimizer.device": "cpu"' ;;
    esac
    case $v in
      *_cpu) args=(--device cpu) ;;
      *_nccl) args=(--device cuda --gpu-matmul fp32 --gpu-collectives nccl) ;;
      *) args=(--device cuda --gpu-matmul fp32 --gpu-collectives host) ;;
    esac
    "$MPIEXEC" -n 2 "$BIN" "${base[@]}" --steps 3 "${args[@]}" \
      --set "{\"train_micro_batch_size_per_gpu\": 2, \"memwall.sequence_length\": 32, $stage_set}" \
      >"$work/$v.jsonl" 2>"$work/$v.err" || { echo "FAILED: two ranks, $v"; cat "$work/$v.err"; exit 1; }
  done
fi
python3 - "$work" "$ranks2" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    with open(f"{work}/{name}.jsonl") as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "step" in r}
cpu, cuda, cudasync, bf16, first, resumed, unpinned = (
    losses(n) for n in ("cpu", "cuda", "cudasync", "bf16", "first", "resumed", "unpinned"))
bad = []
def near(what, a, b, rel):
    if abs(a - b) > rel * abs(b):
        bad.append(f"{what}: {a} vs {b} (tolerance {rel} relative)")
assert sorted(cpu) == list(range(1, 7)) and sorted(cuda) == sorted(cpu), (cpu, cuda)
for s in cpu:
    near(f"step {s}, cuda vs cpu", cuda[s], cpu[s], 1e-4)
    near(f"step {s}, cuda with --gpu-sync vs cpu", cudasync[s], cpu[s], 1e-4)
    near(f"step {s}, cuda without page-locked memory vs cpu", unpinned[s], cpu[s], 1e-4)
    near(f"step {s}, bf16 GEMMs vs fp32", bf16[s], cpu[s], 3e-2)
if not bf16[6] < bf16[1]:
    bad.append(f"bf16 GEMMs: the loss did not fall ({bf16[1]} -> {bf16[6]})")
for s in (1, 2, 3):
    near(f"step {s}, first half on cuda", first[s], cpu[s], 1e-4)
if sorted(resumed) != [4, 5, 6]:
    bad.append(f"the resumed run logged steps {sorted(resumed)}, not 4..6")
for s in resumed:
    near(f"step {s}, resumed on cpu from a cuda checkpoint", resumed[s], cpu[s], 1e-4)
def follows(what, run, reference):  # three steps each, the losses within 1e-4 relative
    a, b = losses(run), losses(reference)
    if sorted(a) != [1, 2, 3] or sorted(b) != [1, 2, 3]:
        bad.append(f"{what}: {run} logged steps {sorted(a)}, {reference} {sorted(b)}")
    for s in b:
        if s in a:
            near(f"step {s}, {what}: {run} vs {reference}", a[s], b[s], 1e-4)
for dev_run, host_run in (("gas_nvme_cuda", "gas_nvme_cpu"), ("gas_sums_cuda", "gas_sums_cpu"),
                          ("gas_sums_cpu", "gas_nvme_cpu"), ("gas_opt_cuda", "gas_opt_cpu")):
    follows("gradient accumulation", dev_run, host_run)
follows("BPE tokens", "bpe_cuda", "bpe_cpu")
follows("delayed update", "dpu_cuda", "dpu_cpu")
follows("Llama shape", "llama_cuda", "llama_cpu")
follows("Mixtral shape", "moe_cuda", "moe_cpu")
follows("DeepSeek-V3 shape with the bias rule", "ds_cuda", "ds_cpu")
def norms(name):
    with open(f"{work}/{name}.jsonl") as f:
        return {r["step"]: r["grad_norm"] for r in map(json.loads, f) if "step" in r}
clip_cpu, clip_cuda = norms("clip_cpu"), norms("clip_cuda")
if sorted(clip_cpu) != [1, 2, 3] or sorted(clip_cuda) != [1, 2, 3] or None in clip_cpu.values() \
        or None in clip_cuda.values():
    bad.append(f"gradient clipping: norms {clip_cpu} (cpu), {clip_cuda} (cuda)")
else:
    for s in clip_cpu:
        near(f"step {s}, gradient norm on cuda vs cpu", clip_cuda[s], clip_cpu[s], 1e-4)
        near(f"step {s}, clipped loss on cuda vs cpu", losses("clip_cuda")[s], losses("clip_cpu")[s], 1e-4)
    if not clip_cpu[1] > 0.5:
        bad.append(f"gradient clipping: the first norm {clip_cpu[1]} is under the bound, nothing was clipped")
if sys.argv[2] == "ran":
    two_cpu = losses("mpi_cpu")
    for name in ("mpi_cuda", "mpi_nccl"):
        two = losses(name)
        if sorted(two) != [1, 2, 3, 4] or sorted(two_cpu) != sorted(two):
            bad.append(f"two ranks logged steps {sorted(two_cpu)} (cpu) and {sorted(two)} ({name})")
        for s in two_cpu:
            if s in two:
                near(f"two ranks, step {s}, {name} vs cpu", two[s], two_cpu[s], 1e-4)
    for dev_run, host_run in (("z0_nccl", "z0_cpu"), ("z0_host", "z0_cpu"), ("z1_nccl", "z1_cpu"),
                              ("z2off_nccl", "z2off_cpu"), ("z2off_host", "z2off_cpu")):
        follows("two ranks", dev_run, host_run)
def summary(name):
    with open(f"{work}/{name}.jsonl") as f:
        return [r for r in map(json.loads, f) if "summary" in r][0]["summary"]
near("DeepSeek-V3 shape's held-out loss", summary("ds_cuda")["val_loss"], summary("ds_cpu")["val_loss"], 1e-4)
runs = [("cpu", "host-emulated"), ("cuda", "CUDA"), ("bf16", "CUDA"), ("auto", "CUDA"), ("llama_cuda", "CUDA"),
        ("moe_cuda", "CUDA"), ("ds_cuda", "CUDA")]
if sys.argv[2] == "ran":
    runs += [("mpi_cuda", "CUDA"), ("mpi_nccl", "CUDA"), ("z0_nccl", "CUDA"), ("z1_nccl", "CUDA"),
             ("z2off_host", "CUDA")]
for name, want in runs:
    if want not in summary(name).get("device", ""):
        bad.append(f"the {name} run computed on {summary(name).get('device')!r}, not {want}")
with open(f"{work}/trace.json") as f:
    trace = json.load(f)
events = trace.get("traceEvents", trace.get("events", []))
if not events:
    bad.append("the cuda run's trace holds no events")
big_own = summary("big_own")["capacity_bytes"]["gpu"]
big_file = summary("big_file")["capacity_bytes"]["gpu"]
if not (big_own > 34e9 and big_file <= 32 * 2**30):
    bad.append(f"a 40 GB GPU trained with {big_own:.4g} bytes (no --hardware) and {big_file:.4g} (dgx2)")
# The 2 MB GPU's trace shows the runtime's real share (what the trainer's one allocation of 95% of the free
# memory left), not the hardware file's 1 GiB reserve.
with open(f"{work}/small-trace.json") as f:
    small = json.load(f)
reserved = max((e["args"].get("runtime_reserved", 0) for e in small.get("traceEvents", [])
                if e.get("ph") == "C" and e.get("name") == "memory gpu"), default=-1)
if not 0 < reserved <= 0.05 * 2000000 + 4096:
    bad.append(f"the 2 MB GPU's trace shows {reserved} bytes reserved for the runtime")
print("\n".join(bad) if bad else f"ok: 6 steps on the emulated GPU match the CPU (last loss {cuda[6]:.4f}); "
      f"a cuda checkpoint resumes on the cpu; bf16 GEMMs {bf16[1]:.4f} -> {bf16[6]:.4f}; trace of {len(events)} events; "
      f"two ranks: {sys.argv[2]}")
sys.exit(1 if bad else 0)
PY
