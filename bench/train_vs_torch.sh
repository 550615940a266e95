#!/usr/bin/env bash
# `memwall train` step time against PyTorch training the same GPT-2 architecture and shapes on the same
# machine (Adam, same thread count), medians over the steps after 3 warm-up steps, alternating rounds.
# PRECISION fp32: PyTorch in its best fp32 configuration here, OpenBLAS with OPENBLAS_CORETYPE=SkylakeX (see
# bench/block_vs_torch.sh), against `memwall train` (fp32 GEMMs); bf16: PyTorch's bf16 autocast (its matmuls
# on oneDNN) against `memwall train --cpu-matmul bf16`. With ARCH=llama in the environment both train the Llama
# shape instead (llama-mini's: HEADS/2 key/value heads, a SwiGLU MLP of 8/3 CHANNELS rounded up to 16, untied
# head; bench/torch_llama.py); with ARCH=mixtral Mixtral's mixture of experts instead of the MLP (EXPERTS=8
# experts of that width, TOPK=2 a token, renormalised; mixtral-8x7b's file cut to these shapes, against
# transformers' MixtralSparseMoeBlock loop in bench/torch_llama.py); with ARCH=gpt_oss gpt-oss's (those experts
# with biases and the clamped SwiGLU, sink logits, biases on q, k, v, o, a WINDOW=T/2 on every other layer;
# gpt-oss-20b's file cut to these shapes, against transformers' GptOssExperts loop); with ARCH=deepseek
# DeepSeek-V3's (the latent attention with queries from a latent of CHANNELS/2, keys and values from one of
# CHANNELS/4, heads of 2/3 nope and 1/3 rotary, values as wide as the nope part; EXPERTS experts of that MLP
# width, TOPK a token from the best 2 of 4 groups by sigmoid score, a shared expert, the first layer dense;
# deepseek-v3's file cut to these shapes without the balance loss, against bench/torch_llama.py's
# DeepseekV3Attention and DeepseekV3MoE equations; MTP=1: with its next-token-prediction module on both sides); with ARCH=llama4 Llama 4's (EXPERTS=8 experts of the MLP
# width, TOPK=1 a token chosen by logit, their sigmoids scaling the inputs, a shared expert, in every
# MOE_EVERY=1-th layer, dense MLPs of twice that width between; rotary on neighbouring pairs with weightless
# q/k norms, every fourth layer without; llama-4-scout's file cut to these shapes, against
# bench/torch_llama.py's Llama4 with its experts looped over their tokens). Needs
# `bash scripts/setup.sh --bench`.
# Usage: [ARCH=gpt2|llama|mixtral|gpt_oss|deepseek|llama4] [EXPERTS=8] [TOPK=2] [WINDOW=T/2] [MOE_EVERY=1] [MTP=0] bash bench/train_vs_torch.sh [LAYERS=4] [CHANNELS=256] [HEADS=4] [B=2] [T=256] [STEPS=20] [THREADS=2] [ROUNDS=2] [PRECISION=fp32]
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:-4}; C=${2:-256}; NH=${3:-4}; B=${4:-2}; T=${5:-256}; S=${6:-20}; TH=${7:-2}; R=${8:-2}; P=${9:-fp32}
[ "$P" = fp32 ] || [ "$P" = bf16 ] || { echo "PRECISION must be fp32 or bf16, got '$P'" >&2; exit 2; }
PY=/usr/bin/python3
MW=./build/cli/memwall
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "needs python3-torch: bash scripts/setup.sh --bench" >&2; exit 1; }
ARCH=${ARCH:-gpt2}
KV=$((NH / 2 > 0 ? NH / 2 : 1)); FF=$(( (8 * C / 3 + 15) / 16 * 16 ))
case "$ARCH" in
  gpt2) model="{\"n_layer\":$L,\"n_embd\":$C,\"n_head\":$NH,\"n_positions\":$T}"; base=gpt-mini; extra=() ;;
  llama) model="{\"num_hidden_layers\":$L,\"hidden_size\":$C,\"num_attention_heads\":$NH,\"num_key_value_heads\":$KV,\"intermediate_size\":$FF,\"max_position_embeddings\":$T}"
         base=llama-mini; extra=(llama "$KV" "$FF") ;;
  mixtral) E=${EXPERTS:-8}; K=${TOPK:-2}
         model="{\"num_hidden_layers\":$L,\"hidden_size\":$C,\"num_attention_heads\":$NH,\"num_key_value_heads\":$KV,\"intermediate_size\":$FF,\"max_position_embeddings\":$T,\"vocab_size\":256,\"num_local_experts\":$E,\"num_experts_per_tok\":$K,\"rope_theta\":10000,\"rms_norm_eps\":1e-5}"
         base=mixtral-8x7b; extra=(mixtral "$KV" "$FF" "$E" "$K") ;;
  gpt_oss) E=${EXPERTS:-8}; K=${TOPK:-2}; W=${WINDOW:-$((T / 2))}
         types=$(for l in $(seq 0 $((L - 1))); do [ $((l % 2)) = 0 ] && echo '"sliding_attention"' || echo '"full_attention"'; done | paste -sd,)
         model="{\"num_hidden_layers\":$L,\"layer_types\":[$types],\"hidden_size\":$C,\"num_attention_heads\":$NH,\"num_key_value_heads\":$KV,\"head_dim\":$((C / NH)),\"intermediate_size\":$FF,\"max_position_embeddings\":$T,\"vocab_size\":256,\"num_local_experts\":$E,\"num_experts_per_tok\":$K,\"sliding_window\":$W,\"rope_theta\":10000,\"rope_scaling\":null}"
         base=gpt-oss-20b; extra=(gpt_oss "$KV" "$FF" "$E" "$K" "$W") ;;
  deepseek) E=${EXPERTS:-8}; K=${TOPK:-2}; HD=$((C / NH)); QL=$((C / 2)); KVL=$((C / 4)); NOPE=$((2 * HD / 3 / 2 * 2)); ROPE=$((HD - NOPE))
         model="{\"num_hidden_layers\":$L,\"hidden_size\":$C,\"num_attention_heads\":$NH,\"q_lora_rank\":$QL,\"kv_lora_rank\":$KVL,\"qk_nope_head_dim\":$NOPE,\"qk_rope_head_dim\":$ROPE,\"v_head_dim\":$NOPE,\"intermediate_size\":$FF,\"moe_intermediate_size\":$FF,\"n_routed_experts\":$E,\"num_experts_per_tok\":$K,\"n_group\":4,\"topk_group\":2,\"n_shared_experts\":1,\"first_k_dense_replace\":1,\"max_position_embeddings\":$T,\"vocab_size\":256,\"rope_theta\":10000,\"rope_scaling\":null,\"rms_norm_eps\":1e-5,\"aux_loss_alpha\":0}"
         base=deepseek-v3; extra=(deepseek "$FF" "$QL" "$KVL" "$NOPE" "$ROPE" "$NOPE" "$E" "$K" 4 2 "${MTP:-0}") ;;
  llama4) E=${EXPERTS:-8}; K=${TOPK:-1}; ME=${MOE_EVERY:-1}
         model=$(printf '"text_config.%s":%s,' num_hidden_layers "$L" hidden_size "$C" num_attention_heads "$NH" num_key_value_heads "$KV" head_dim $((C / NH)) intermediate_size "$FF" intermediate_size_mlp $((2 * FF)) num_local_experts "$E" num_experts_per_tok "$K" interleave_moe_layer_step "$ME" max_position_embeddings "$T" vocab_size 256 rope_theta 10000 rope_scaling null rms_norm_eps 1e-5)
         model="{${model%,}}"
         base=llama-4-scout; extra=(llama4 "$KV" "$FF" "$((2 * FF))" "$E" "$K" "$ME") ;;
  *) echo "ARCH must be gpt2, llama, mixtral, gpt_oss, deepseek or llama4, got '$ARCH'" >&2; exit 2 ;;
esac
# (an if, not `[ ] && echo` inside the assignment: its failing status would end the script under set -e)
mtp_set="" mtp_tag=""
if [ "${MTP:-0}" = 1 ]; then mtp_set=',"memwall.mtp":true'; mtp_tag=+mtp; fi
run="{\"train_micro_batch_size_per_gpu\":$B,\"activation_checkpointing\":null,\"gradient_clipping\":0$mtp_set}"  # torch's loop does not clip
mw=(); pt=()
for i in $(seq "$R"); do
  mw+=("$(OMP_NUM_THREADS=$TH $MW train --steps "$S" --json --model "$base" --model-set "$model" --set "$run" --eval-batches 1 \
          --cpu-matmul "$P" |
          $PY -c 'import json,sys; r=[json.loads(l) for l in sys.stdin if l.startswith("{")]; t=sorted(x["seconds"] for x in r if "step" in x)[3:]; print(t[len(t)//2])')")
  pt+=("$(OPENBLAS_CORETYPE=${TORCH_OPENBLAS_CORETYPE:-SkylakeX} OMP_NUM_THREADS=$TH $PY bench/train_vs_torch.py "$L" "$C" "$NH" "$B" "$T" "$S" "$TH" "$P" "${extra[@]}")")
done
$PY - "$(printf '%s\n' "${mw[@]}")" "$(printf '%s\n' "${pt[@]}")" "$P" "$ARCH$mtp_tag" <<'PY'
import json, statistics, sys
mw = [float(x) for x in sys.argv[1].split()]
pt = [json.loads(l) for l in sys.argv[2].splitlines()]
m, p = statistics.median(mw), statistics.median(r["s_per_step"] for r in pt)
what = "fp32" if sys.argv[3] == "fp32" else "bf16 GEMMs: memwall --cpu-matmul bf16, torch bf16 autocast"
arch = {"gpt2": "GPT-2", "llama": "Llama-shaped", "mixtral": "Mixtral-shaped (mixture of experts)",
        "gpt_oss": "gpt-oss-shaped (mixture of experts, sinks, windows)",
        "deepseek": "DeepSeek-V3-shaped (latent attention, grouped sigmoid routing, a shared expert)",
        "deepseek+mtp": "DeepSeek-V3-shaped with its next-token-prediction module",
        "llama4": "Llama 4-shaped (experts by logit scaling their inputs, a shared expert, q/k L2 norms)"}[sys.argv[4]]
print(f"{arch} training step ({what}, Adam), {pt[0]['params']:,} params, {len(mw)} alternating rounds; torch {pt[0]['torch']}")
print(f"memwall train   {m*1e3:8.1f} ms/step")
print(f"torch           {p*1e3:8.1f} ms/step   memwall speedup {p/m:.2f}x")
PY
