// GPT-2 decoder forward and backward on kernels/cpu.
#include "engine/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string_view>

#include "base/units.h"
#include "cpu/cast.h"
#include "cpu/gpt_ops.h"

namespace memwall::model {

namespace k = memwall::kernels;

Status validate(const GptConfig& c, int batch, int seq) {
  const std::pair<const char*, int> fields[] = {
      {"vocab", c.vocab},       {"max_seq", c.max_seq}, {"layers", c.layers}, {"heads", c.heads},
      {"channels", c.channels}, {"batch", batch},       {"seq", seq}};
  for (const auto& [name, v] : fields) {
    if (v < 1)
      return Status::invalid_argument(std::string("model: ") + name + " must be >= 1, got " +
                                      std::to_string(v));
  }
  if (c.head_dim < 0) {
    return Status::invalid_argument("model: head_dim must be >= 0 (0: channels / heads), got " +
                                    std::to_string(c.head_dim));
  }
  if (c.head_dim == 0 && c.channels % c.heads != 0) {
    return Status::invalid_argument("model: channels (" + std::to_string(c.channels) +
                                    ") must be divisible by heads (" + std::to_string(c.heads) + ")");
  }
  if (seq > c.max_seq) {
    return Status::invalid_argument("model: seq (" + std::to_string(seq) + ") exceeds max_seq (" +
                                    std::to_string(c.max_seq) + ")");
  }
  if (c.kv_heads < 0 || c.ffn < 0) {
    return Status::invalid_argument("model: kv_heads and ffn must be >= 0 (0: GPT-2's), got " +
                                    std::to_string(c.kv_heads) + " and " + std::to_string(c.ffn));
  }
  if (c.sliding_window < 0 || c.first_window_layer < 0 || c.global_every < 0) {
    return Status::invalid_argument(
        "model: sliding_window, first_window_layer and global_every must be >= 0, got " +
        std::to_string(c.sliding_window) + ", " + std::to_string(c.first_window_layer) + " and " +
        std::to_string(c.global_every));
  }
  if (!(c.attn_softcap >= 0) || !(c.final_softcap >= 0) || !(c.query_scale >= 0) ||
      !(c.rope_local_theta == 0 || c.rope_local_theta > 1)) {
    return Status::invalid_argument(
        "model: attn_softcap, final_softcap and query_scale must be >= 0 (0: none), rope_local_theta 0 or > "
        "1");
  }
  if (c.llama() && (c.opt || c.exact_gelu)) {
    return Status::invalid_argument(
        "model: OPT and the exact GELU are GPT-2's shape's variants, not the Llama shape's");
  }
  if (c.opt && c.exact_gelu) return Status::invalid_argument("model: OPT's MLP is ReLU, not GELU");
  // (StableLM 2 12B's attention and MLP side by side after one LayerNorm: the Llama shape's one.)
  const bool stablelm_parallel = c.parallel_residual && c.one_norm && c.layer_norm && c.norm_params;
  if (c.llama() &&
      (c.neox || ((c.parallel_residual || c.one_norm) && !stablelm_parallel) || c.phi || c.falcon ||
       c.no_bias || c.bigcode || c.bloom || c.mpt || c.gptj || c.starcoder2 || c.nemotron)) {
    return Status::invalid_argument(
        "model: GPT-NeoX, Phi, Falcon, GPT-BigCode, BLOOM, MPT, GPT-J, StarCoder2, Nemotron and the parallel "
        "residual are GPT-2's shape's variants, not the Llama shape's (but StableLM's: one LayerNorm, "
        "parallel_residual and one_norm)");
  }
  if ((c.neox ? 1 : 0) + (c.opt ? 1 : 0) + (c.phi ? 1 : 0) + (c.falcon ? 1 : 0) + (c.bigcode ? 1 : 0) +
          (c.bloom ? 1 : 0) + (c.mpt ? 1 : 0) + (c.gptj ? 1 : 0) + (c.starcoder2 ? 1 : 0) +
          (c.nemotron ? 1 : 0) >
      1)
    return Status::invalid_argument(
        "model: OPT, GPT-NeoX, Phi, Falcon, GPT-BigCode, BLOOM, MPT, GPT-J, StarCoder2 and Nemotron are ten "
        "variants, not one");
  if ((c.starcoder2 || c.nemotron) && c.parallel_residual) {
    return Status::invalid_argument(
        "model: StarCoder2's and Nemotron's blocks are in sequence (not parallel_residual)");
  }
  if (c.nemotron && (c.exact_gelu || c.sliding_window != 0)) {
    return Status::invalid_argument(
        "model: Nemotron's MLP is the squared ReLU, its attention without a window");
  }
  if (c.layer_norm && (!c.llama() || c.norm_unit_offset || c.sandwich_norm ||
                       (c.qk_norm && !c.qk_layernorm) || std::abs(c.norm_eps - 1e-5) > 1e-12)) {
    return Status::invalid_argument(
        "model: StableLM's LayerNorms (layer_norm) are the Llama shape's, without Gemma's or Qwen3's norms, "
        "with epsilon 1e-5 (memwall's LayerNorm kernels')");
  }
  if (!c.norm_params && (!c.layer_norm || c.post_norm || c.qk_norm)) {
    return Status::invalid_argument(
        "model: OLMo's norms without weight or bias (norm_params false) are the Llama shape's LayerNorms "
        "(layer_norm), before the attention and the MLP, without q/k norms");
  }
  if (!(c.clip_qkv >= 0 && c.clip_qkv < 1e30) || (c.clip_qkv > 0 && (!c.layer_norm || c.norm_params))) {
    return Status::invalid_argument(
        "model: clip_qkv " + strprintf("%g", c.clip_qkv) +
        " must be >= 0 (0: none), and is OLMo's (LayerNorms without weight or bias)");
  }
  if (c.post_norm && (!c.llama() || c.sandwich_norm || c.layer_norm)) {
    return Status::invalid_argument(
        "model: OLMo 2's norms after the attention and the MLP (post_norm) are the Llama shape's, with "
        "RMSNorms and without Gemma 2's norms before them");
  }
  if ((c.cohere && (!c.layer_norm || !c.norm_params || !c.parallel_residual || !c.one_norm)) ||
      !(c.logit_scale > 0 && c.logit_scale < 1e6) || (c.logit_scale != 1 && !c.cohere && !c.granite)) {
    return Status::invalid_argument(
        "model: Cohere's blocks (cohere) are the Llama shape's with one LayerNorm (layer_norm, "
        "parallel_residual, one_norm), and logit_scale " +
        strprintf("%g", c.logit_scale) + " is Cohere's and Granite's (1: none; > 0)");
  }
  if (!(c.embed_multiplier >= 0 && c.embed_multiplier < 1e6) ||
      !(c.residual_multiplier > 0 && c.residual_multiplier < 1e6) ||
      ((c.embed_multiplier > 0 || c.residual_multiplier != 1) && !c.granite) ||
      (c.granite && (!c.llama() || c.layer_norm || c.out_norms() || c.parallel_residual || c.embed_scale))) {
    return Status::invalid_argument(
        "model: Granite's multipliers (embed_multiplier " + strprintf("%g", c.embed_multiplier) +
        ", residual_multiplier " + strprintf("%g", c.residual_multiplier) +
        ": > 0) are Granite's (granite), the Llama shape's with RMSNorms before the sublayers, in sequence");
  }
  if (c.glm && (!c.llama() || c.layer_norm || c.post_norm || c.fused_names || c.granite || c.gelu_mlp ||
                c.norm_unit_offset || c.embed_scale || c.attn_softcap > 0 || c.final_softcap > 0)) {
    return Status::invalid_argument(
        "model: GLM's blocks (glm) are the Llama shape's with RMSNorms before the sublayers (GLM-4's after "
        "them too: sandwich_norm), without Gemma's parts, soft caps, Granite's multipliers or Phi-3's "
        "fused names");
  }
  if (c.experts < 0 || (c.moe() && (c.experts_per_token < 1 || c.experts_per_token > c.experts)) ||
      c.expert_ffn < 0 || c.shared_ffn < 0 || (c.shared_ffn > 0 && !c.moe()) || c.dense_layers < 0 ||
      c.moe_every < 1 || (c.moe() && c.moe_layers() == 0) || c.expert_groups < 1 ||
      (c.moe() && c.experts % c.expert_groups != 0) || c.groups_per_token < 1 ||
      c.groups_per_token > c.expert_groups || (c.expert_groups > 1 && c.experts / c.expert_groups < 2) ||
      !(c.routed_scale > 0) || (c.expert_groups > 1 && !c.sigmoid_routing && !c.group_by_best) ||
      (c.group_by_best && c.sigmoid_routing)) {
    const auto n = [](int v) { return std::to_string(v); };
    return Status::invalid_argument(
        "model: experts (" + n(c.experts) + ") must be >= 0, experts_per_token (" + n(c.experts_per_token) +
        ") 1 to experts, expert_ffn (" + n(c.expert_ffn) + ") and shared_ffn (" + n(c.shared_ffn) +
        ") >= 0 (a shared expert with experts only), dense_layers >= 0 and moe_every >= 1 leaving a layer "
        "of experts, expert_groups (" +
        n(c.expert_groups) +
        ", sigmoid routing's or group_by_best's) of 2 or more experts "
        "each, groups_per_token (" +
        n(c.groups_per_token) + ") 1 to them, routed_scale > 0");
  }
  if (c.moe() && (!c.llama() || c.layer_norm || c.gelu_mlp || c.out_norms() || c.parallel_residual ||
                  c.fused_names || c.glm || !(c.router_aux >= 0) || !(c.seq_aux_alpha >= 0))) {
    return Status::invalid_argument(
        "model: a mixture of experts (experts > 0) is the Llama shape's with RMSNorms before the sublayers, "
        "in sequence, SwiGLU experts, without Gemma's, GLM's or Phi-3's parts, router_aux and "
        "seq_aux_alpha >= 0");
  }
  if (c.moe() && c.granite &&
      (c.qk_norm || c.qkv_bias || c.shared_ffn > 0 || c.sigmoid_routing || !c.norm_topk ||
       c.dense_layers > 0 || c.moe_every > 1)) {
    return Status::invalid_argument(
        "model: Granite MoE's experts (granite with experts) are every layer's, renormalised (norm_topk), "
        "without q/k norms, q/k/v biases, shared experts or sigmoid routing");
  }
  if (c.gpt_oss &&
      (!c.moe() || c.granite || c.qk_norm || !c.qkv_bias || c.shared_ffn > 0 || c.sigmoid_routing ||
       !c.norm_topk || c.dense_layers > 0 || c.moe_every > 1 || !(c.swiglu_limit > 0))) {
    return Status::invalid_argument(
        "model: gpt-oss's shape (gpt_oss) has experts in every layer weighted by the softmax of the chosen "
        "ones' logits (norm_topk), q/k/v biases (qkv_bias), no q/k norms or shared experts, swiglu_limit > "
        "0");
  }
  if (c.mtp < 0 || c.mtp > 1 || !(c.mtp_weight >= 0) ||
      (c.mtp > 0 && (!c.llama() || c.layer_norm || c.out_norms() || c.parallel_residual || c.layers < 2))) {
    return Status::invalid_argument(
        "model: mtp " + std::to_string(c.mtp) +
        " (the next-token-prediction modules: 0 or 1, after at least one block) is the Llama shape's with "
        "RMSNorms before the sublayers, in sequence; mtp_weight >= 0");
  }
  if ((c.llama4 && (!c.moe() || c.granite || c.gpt_oss || c.mla() || c.qk_norm || c.qkv_bias ||
                    c.sigmoid_routing || c.group_by_best || c.norm_topk || c.routed_scale != 1 ||
                    c.dense_layers > 0 || (c.shared_ffn > 0 && c.shared_gate) || c.router_aux > 0 ||
                    c.seq_aux_alpha > 0 || c.expert_groups > 1)) ||
      (!c.llama4 && (c.qk_l2_norm || c.attn_temperature != 0 || c.attention_chunk != 0)) ||
      !(c.attn_temperature >= 0) || c.floor_scale < 1 || c.attention_chunk < 0) {
    return Status::invalid_argument(
        "model: Llama 4's shape (llama4) has experts every moe_every-th layer chosen by their logits, their "
        "sigmoids scaling each expert's input, a shared expert without a gate, no q/k/v biases, weighted "
        "q/k norms or balance losses; qk_l2_norm, attn_temperature (>= 0), floor_scale (>= 1) and "
        "attention_chunk (>= 0) are its");
  }
  if (c.kv_lora < 0 || c.q_lora < 0 ||
      (c.mla() && (!c.llama() || c.rope_dim < 2 || c.rope_dim % 2 != 0 || c.nope_dim() < 0 || c.v_dim < 1 ||
                   c.v_dim > c.head_size() || c.kv_head_count() != c.heads || c.qk_norm || c.qkv_bias ||
                   c.layer_norm || c.gpt_oss || c.clip_qkv > 0 || c.out_norms() || c.nope_every > 0 ||
                   c.rope_windowed_only || c.partial_rotary != 1 || c.sliding_window > 0)) ||
      (!c.mla() && (c.q_lora > 0 || c.deepseek != 0))) {
    return Status::invalid_argument(
        "model: the latent attention (kv_lora " + std::to_string(c.kv_lora) + ", q_lora " +
        std::to_string(c.q_lora) +
        ": >= 0) is the Llama shape's with RMSNorms before the sublayers, one key/value head per query "
        "head, an even rope_dim (" +
        std::to_string(c.rope_dim) + ") of 2 or more up to the head size (" + std::to_string(c.head_size()) +
        "), v_dim (" + std::to_string(c.v_dim) +
        ") 1 to the head size, without q/k norms, q/k/v biases, partial_rotary or a window; q_lora and "
        "deepseek with it only");
  }
  if (c.nope_every < 0 || (c.nope_every > 0 && !c.llama())) {
    return Status::invalid_argument(
        "model: nope_every " + std::to_string(c.nope_every) +
        " must be >= 0 (0: every layer turns), and is the Llama shape's (SmolLM3's)");
  }
  if (c.rope_windowed_only && !c.cohere && !(c.post_norm && c.qk_norm && !c.qk_norm_full)) {
    return Status::invalid_argument(
        "model: rotary positions on the windowed layers only (rope_windowed_only) are Cohere2's (cohere) and "
        "EXAONE 4's (post_norm with per-head q/k norms)");
  }
  if (c.qk_layernorm && (!c.qk_norm || !c.layer_norm || !c.norm_params || c.qk_norm_full)) {
    return Status::invalid_argument(
        "model: per-head q/k LayerNorms (qk_layernorm, StableLM 2 12B's) need qk_norm and StableLM's "
        "LayerNorms (layer_norm), not qk_norm_full");
  }
  if (c.qk_norm_full && !c.qk_norm) {
    return Status::invalid_argument(
        "model: q/k norms over all the queries and keys (qk_norm_full, OLMo 2's) "
        "need qk_norm");
  }
  if (c.gptj && (c.tied || c.no_bias)) {
    return Status::invalid_argument("model: GPT-J's head is untied, with a bias, and its MLP has biases");
  }
  if (c.codegen && (!c.gptj || c.heads % GptConfig::kCodegenGroups != 0)) {
    return Status::invalid_argument("model: CodeGen is GPT-J's block with heads (" + std::to_string(c.heads) +
                                    ") a multiple of its " + std::to_string(GptConfig::kCodegenGroups) +
                                    " groups");
  }
  if (c.falcon_alibi && !c.falcon) return Status::invalid_argument("model: falcon_alibi is Falcon's");
  if (c.bloom && (c.parallel_residual || c.exact_gelu)) {
    return Status::invalid_argument(
        "model: BLOOM's blocks are in sequence, with GELU's tanh approximation (bloom_gelu)");
  }
  if (c.mpt && (c.parallel_residual || !c.no_bias || !c.exact_gelu)) {
    return Status::invalid_argument(
        "model: MPT's blocks are in sequence, without biases (no_bias), with the exact GELU");
  }
  if (c.shared_norm() && !c.parallel_residual) {
    return Status::invalid_argument(
        "model: one norm for the attention and the MLP (Phi's, Falcon-7B's) needs them side by side "
        "(parallel_residual)");
  }
  if (!c.llama()) {
    // The rotary variants' own (GPT-NeoX's, Phi's, Falcon's): rotary settings, an untied head, another MLP
    // width.
    // (MPT's: an MLP of any width.)
    const bool neox_only = !c.tied || (c.ffn_width() != 4 * c.channels && !c.mpt) ||
                           c.partial_rotary != 1.0 || c.rope_theta != 10000 || !c.rope_scaling.none();
    const bool grouped = c.falcon || c.bigcode || c.starcoder2 || c.nemotron;
    if ((c.kv_head_count() != c.heads && !grouped) || (c.one_norm && !c.falcon) ||
        (c.no_bias && !c.falcon && !c.mpt && !c.starcoder2 && !c.nemotron) || c.qkv_bias ||
        (c.sliding_window != 0 && !c.starcoder2) || c.first_window_layer != 0 ||
        (c.head_dim != 0 && !c.nemotron) || c.qk_norm || c.gelu_mlp || (c.norm_unit_offset && !c.nemotron) ||
        c.embed_scale || c.fused_names || c.global_every != 0 || c.sandwich_norm || c.attn_softcap != 0 ||
        c.final_softcap != 0 || c.query_scale != 0 || c.rope_local_theta != 0 || (neox_only && !c.rotary())) {
      return Status::invalid_argument(
          "model: GPT-2 has kv_heads = heads, ffn = 4 * channels, heads of channels / heads, a tied head and "
          "full attention (GPT-NeoX's variant: rotary positions, any ffn, the head tied or not; Falcon's: "
          "kv_heads, one norm, no biases; GPT-BigCode's: kv_heads; MPT's: any ffn, no biases; StarCoder2's: "
          "kv_heads, a window on every layer, no biases; Nemotron's: kv_heads, LayerNorm1P, no biases); "
          "allowed: the Llama shape for others");
    }
    if (c.heads % c.kv_head_count() != 0) {
      return Status::invalid_argument("model: heads (" + std::to_string(c.heads) +
                                      ") must be a multiple of kv_heads (" + std::to_string(c.kv_heads) +
                                      ")");
    }
    if (!c.rotary()) return Status::ok();
  } else if (c.heads % c.kv_head_count() != 0) {
    return Status::invalid_argument("model: heads (" + std::to_string(c.heads) +
                                    ") must be a multiple of kv_heads (" + std::to_string(c.kv_heads) + ")");
  }
  if (!(c.partial_rotary > 0 && c.partial_rotary <= 1)) {
    return Status::invalid_argument("model: partial_rotary_factor must be in (0, 1], got " +
                                    strprintf("%g", c.partial_rotary));
  }
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() < 2) {
    if (c.partial_rotary != 1.0) {
      return Status::invalid_argument("model: rotary positions need an even number of channels >= 2, got " +
                                      std::to_string(c.rotary_dim()) + " (int(head size " +
                                      std::to_string(c.head_size()) + " x partial_rotary_factor " +
                                      strprintf("%g", c.partial_rotary) + "))");
    }
    return Status::invalid_argument("model: rotary positions need an even head size, got " +
                                    std::to_string(c.head_size()) +
                                    (c.head_dim > 0 ? " (head_dim)" : " (channels / heads)"));
  }
  if (!(c.rope_theta > 1.0) || !(c.norm_eps > 0.0)) {
    return Status::invalid_argument("model: rope_theta must be > 1 and norm_eps > 0");
  }
  if (!c.rope_scaling.supported()) {
    return Status::invalid_argument(
        "model: rope_scaling type \"" + c.rope_scaling.type +
        "\" is not supported by memwall's rotary kernels; allowed: linear, llama3, yarn, dynamic, "
        "longrope, or none");
  }
  const RopeScaling& rs = c.rope_scaling;
  if (!rs.none() && rs.type != "longrope" &&
      (!(rs.factor > 0) ||
       (rs.type == "llama3" && (rs.original_max_positions < 1 || !(rs.low_freq_factor > 0) ||
                                !(rs.high_freq_factor >= rs.low_freq_factor))) ||
       (rs.type == "yarn" &&
        (rs.original_max_positions < 1 || !(rs.beta_slow > 0) || !(rs.beta_fast >= rs.beta_slow))))) {
    return Status::invalid_argument(
        "model: rope_scaling needs factor > 0, for llama3 original_max_position_embeddings >= 1 and "
        "high_freq_factor >= low_freq_factor > 0, for yarn original_max_position_embeddings >= 1 and "
        "beta_fast >= beta_slow > 0");
  }
  if (rs.type == "longrope") {
    const std::size_t pairs = static_cast<std::size_t>(c.rotary_dim() / 2);
    if (rs.short_factor.size() != pairs || rs.long_factor.size() != pairs) {
      return Status::invalid_argument(
          "model: rope_scaling longrope has " + std::to_string(rs.short_factor.size()) +
          " short_factor and " + std::to_string(rs.long_factor.size()) +
          " long_factor values; allowed: one per rotary pair, " + std::to_string(pairs));
    }
    if (rs.original_max_positions < 1) {
      return Status::invalid_argument(
          "model: rope_scaling longrope needs original_max_position_embeddings >= 1");
    }
  }
  return Status::ok();
}

Status validate_tiling(const GptConfig& c, int tiling, const std::string& what) {
  if (c.moe() && tiling != 1) {
    return Status::invalid_argument(what + " " + std::to_string(tiling) +
                                    " is not supported with a mixture of experts (its experts' linears are "
                                    "not tiled); allowed: 1");
  }
  // Each matrix a tile splits, and its output rows.
  std::vector<std::pair<const char*, int>> rows = {
      {c.rotary() ? "channels (hidden_size)" : "channels (n_embd)", c.channels}};
  if (c.q_width() != c.channels) rows.push_back({"the query width heads x head_dim", c.q_width()});
  if (c.mla()) {  // the latents' down and up projections
    if (c.q_lora > 0) rows.push_back({"q_lora_rank", c.q_lora});
    rows.push_back({"kv_lora_rank + qk_rope_head_dim", c.kv_lora + c.rope_dim});
    rows.push_back({"kv_b_proj's rows heads x (qk_nope_head_dim + v_head_dim)", c.kv_b_width()});
  }
  // (Grouped-query attention's key/value rows: GPT-BigCode's and Falcon's too.)
  if (c.split_qkv() && !c.mla()) rows.push_back({"2 x the key/value width", 2 * c.kv_width()});
  rows.push_back({"the MLP's inner size", c.ffn_width()});  // (GPT-2's 4C: divided wherever C is)
  if (!c.tied) rows.push_back({"the vocabulary", c.vocab});
  for (const auto& [rows_of, n] : rows) {
    if (tiling < 1 || n % tiling != 0) {
      return Status::invalid_argument(what + " " + std::to_string(tiling) + " must divide " + rows_of + " (" +
                                      std::to_string(n) + "); allowed: a divisor of it");
    }
  }
  return Status::ok();
}

namespace {
// StableLM 2 12B's per-head q/k LayerNorms' module names: every query head's, then every key head's.
std::vector<std::string> qk_layernorm_names(const GptConfig& c) {
  std::vector<std::string> out;
  for (int h = 0; h < c.heads; ++h) out.push_back("self_attn.q_layernorm.norms." + std::to_string(h));
  for (int h = 0; h < c.kv_head_count(); ++h)
    out.push_back("self_attn.k_layernorm.norms." + std::to_string(h));
  return out;
}

// Where a block's shared expert lives: Qwen2-MoE's mlp.shared_expert, GLM-4.5's mlp.shared_experts.
std::string shared_expert_stem(const GptConfig& c) {
  return c.shared_gate ? "mlp.shared_expert." : "mlp.shared_experts.";
}
}  // namespace

std::vector<ParamTensor> gpt_param_layout(const GptConfig& c) {
  std::vector<ParamTensor> out;
  std::size_t offset = 0;
  auto add = [&](std::string name, std::vector<int> shape) {
    std::size_t n = 1;
    for (int d : shape) n *= static_cast<std::size_t>(d);
    out.push_back({std::move(name), offset, n, std::move(shape)});
    offset += n;
  };
  const int C = c.channels;
  if (c.llama()) {
    const int kv = c.kv_width(), F = c.ffn_width(), Q = c.q_width();
    add("model.embed_tokens.weight", {c.vocab, C});
    // A block's tensors (layer l's).
    const auto block = [&](int l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      // (OLMo 2 has no norm before the attention, OLMo's norms no tensors; StableLM's LayerNorms a bias.)
      if (!c.post_norm && c.norm_params) add(h + "input_layernorm.weight", {C});
      if (c.norm_bias()) add(h + "input_layernorm.bias", {C});
      if (c.mla()) {  // the latent attention's, in the graph's order
        if (c.q_lora > 0) {
          add(h + "self_attn.q_a_proj.weight", {c.q_lora, C});
          add(h + "self_attn.q_a_layernorm.weight", {c.q_lora});
          add(h + "self_attn.q_b_proj.weight", {Q, c.q_lora});
        } else {
          add(h + "self_attn.q_proj.weight", {Q, C});
        }
        add(h + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora + c.rope_dim, C});
        add(h + "self_attn.kv_a_layernorm.weight", {c.kv_lora});
        add(h + "self_attn.kv_b_proj.weight", {c.kv_b_width(), c.kv_lora});
      } else {
        // q, k, v back to back: the graph's fused qkv weight (or its q and kv weights) is one block of rows.
        add(h + "self_attn.q_proj.weight", {Q, C});
        add(h + "self_attn.k_proj.weight", {kv, C});
        add(h + "self_attn.v_proj.weight", {kv, C});
      }
      if (c.qkv_bias) {  // back to back too
        add(h + "self_attn.q_proj.bias", {Q});
        add(h + "self_attn.k_proj.bias", {kv});
        add(h + "self_attn.v_proj.bias", {kv});
      }
      if (c.qk_layernorm && c.cohere) {  // each head's row of q_norm, then of k_norm
        add(h + "self_attn.q_norm.weight", {c.heads, c.head_size()});
        add(h + "self_attn.k_norm.weight", {c.kv_head_count(), c.head_size()});
      } else if (c.qk_layernorm) {  // each head's own, back to back: the graph's one qk_norm weight
        for (const auto& name : qk_layernorm_names(c)) add(h + name + ".weight", {c.head_size()});
      } else if (c.qk_norm) {  // back to back too (OLMo 2's over all queries and keys)
        add(h + "self_attn.q_norm.weight", {c.qk_norm_width()});
        add(h + "self_attn.k_norm.weight", {c.qk_norm_kv_width()});
      }
      add(h + "self_attn.o_proj.weight", {C, c.attn_out_width()});
      if (c.gpt_oss) {  // o_proj's bias and the sink logits (gpt-oss's)
        add(h + "self_attn.o_proj.bias", {C});
        add(h + "self_attn.sinks", {c.heads});
      }
      // (Gemma 2's and OLMo 2's: the attention output's norm; none with StableLM's one norm.)
      if (c.norm_params && !c.shared_norm()) add(h + "post_attention_layernorm.weight", {C});
      if (c.norm_bias() && !c.shared_norm()) add(h + "post_attention_layernorm.bias", {C});
      if (c.sandwich_norm) add(h + "pre_feedforward_layernorm.weight", {C});
      if (c.moe_layer(l)) {  // the router, then each expert's gate, up and down (the graph's order)
        const int E = c.expert_width();
        const auto expert = [&](int e) { return h + "mlp.experts." + std::to_string(e) + "."; };
        if (c.gpt_oss) {  // router and bias; all gates and ups, their biases; all downs, their biases
          add(h + "mlp.router.weight", {c.experts, C});
          add(h + "mlp.router.bias", {c.experts});
          for (const char* kind : {"weight", "bias"}) {
            const bool w = kind[0] == 'w';
            for (int e = 0; e < c.experts; ++e) {
              for (const char* proj : {"gate_proj.", "up_proj."})
                add(expert(e) + proj + kind, w ? std::vector<int>{E, C} : std::vector<int>{E});
            }
          }
          for (int e = 0; e < c.experts; ++e) add(expert(e) + "down_proj.weight", {C, E});
          for (int e = 0; e < c.experts; ++e) add(expert(e) + "down_proj.bias", {C});
          return;  // (validate() refuses output norms with experts)
        }
        add(h + "mlp.gate.weight", {c.experts, C});
        // (Granite MoE's and Llama 4's every expert's down after all their gates and ups: Granite's
        // input_linear and output_linear tensors, Llama 4's gate_up_proj and down_proj)
        const bool downs_after = c.granite || c.llama4;
        if (c.sigmoid_routing) add(h + "mlp.gate.e_score_correction_bias", {c.experts});
        for (int e = 0; e < c.experts; ++e) {
          add(expert(e) + "gate_proj.weight", {E, C});
          add(expert(e) + "up_proj.weight", {E, C});
          if (!downs_after) add(expert(e) + "down_proj.weight", {C, E});
        }
        for (int e = 0; e < c.experts && downs_after; ++e) add(expert(e) + "down_proj.weight", {C, E});
        if (c.shared_ffn > 0) {  // then the shared expert's gate, up and down, and its gate (Qwen2-MoE's)
          const std::string x = h + shared_expert_stem(c);
          add(x + "gate_proj.weight", {c.shared_ffn, C});
          add(x + "up_proj.weight", {c.shared_ffn, C});
          add(x + "down_proj.weight", {C, c.shared_ffn});
          if (c.shared_gate) add(h + "mlp.shared_expert_gate.weight", {1, C});
        }
      } else {
        add(h + "mlp.gate_proj.weight", {F, C});
        add(h + "mlp.up_proj.weight", {F, C});
        add(h + "mlp.down_proj.weight", {C, F});
      }
      if (c.out_norms()) add(h + "post_feedforward_layernorm.weight", {C});
    };
    for (int l = 0; l < c.main_layers(); ++l) block(l);
    if (c.norm_params) add("model.norm.weight", {C});
    if (c.norm_bias()) add("model.norm.bias", {C});
    if (!c.tied) add("lm_head.weight", {c.vocab, C});
    // The next-token-prediction module after them (the decoder reads the main model's tensors alone): its
    // inputs' norms and eh_proj, its block, its head's norm.
    for (int l = c.main_layers(); l < c.layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      add(h + "enorm.weight", {C});
      add(h + "hnorm.weight", {C});
      add(h + "eh_proj.weight", {C, 2 * C});
      block(l);
      add(h + "shared_head.norm.weight", {C});
    }
    return out;
  }
  const int F = c.ffn_width(), kv = c.kv_width(), Q = c.q_width();
  const bool bias = c.attn_bias(), mlp_bias = c.mlp_bias();
  add("wte.weight", {c.vocab, C});
  if (c.learned_positions()) add("wpe.weight", {c.position_rows(), C});
  if (c.bloom) {  // the embedding's LayerNorm
    add("ln_emb.weight", {C});
    add("ln_emb.bias", {C});
  }
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C});
    if (c.norm_bias()) add(h + "ln_1.bias", {C});
    if (c.split_qkv()) {  // grouped-query (Falcon's): the graph's q and kv matrices, back to back
      add(h + "attn.c_attn_q.weight", {Q, C});  // (Q: C, or Nemotron's heads x head_dim)
      add(h + "attn.c_attn_kv.weight", {2 * kv, C});
      if (bias) {
        add(h + "attn.c_attn_q.bias", {Q});
        add(h + "attn.c_attn_kv.bias", {2 * kv});
      }
    } else {
      add(h + "attn.c_attn.weight", {3 * C, C});
      if (bias) add(h + "attn.c_attn.bias", {3 * C});
    }
    add(h + "attn.c_proj.weight", {C, Q});
    if (bias) add(h + "attn.c_proj.bias", {C});
    if (!c.shared_norm()) {  // (else the MLP reads ln_1's output)
      add(h + "ln_2.weight", {C});
      if (c.norm_bias()) add(h + "ln_2.bias", {C});
    }
    add(h + "mlp.c_fc.weight", {F, C});
    if (mlp_bias) add(h + "mlp.c_fc.bias", {F});
    add(h + "mlp.c_proj.weight", {C, F});
    if (mlp_bias) add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  if (c.norm_bias()) add("ln_f.bias", {C});
  if (!c.tied) add("lm_head.weight", {c.vocab, C});  // GPT-NeoX's embed_out
  if (c.head_bias()) add("lm_head.bias", {c.vocab});
  return out;
}

namespace {
// A family's names for GPT-2's layout: the tensors outside the blocks by `outside`, a block's
// "h.L.<stem>.<weight|bias>" as prefix + L + "." + stems[stem] + "." + weight|bias; with split_qkv (OPT's,
// whose linears are separate q_proj, k_proj and v_proj) c_attn's rows and bias as three tensors, each back
// to back in the flat array (grouped-query attention's c_attn_q as q_proj, c_attn_kv's halves as k_proj and
// v_proj).
struct FamilyNames {
  std::map<std::string, std::string> outside, stems;
  std::string prefix;
  bool split_qkv = false;
  std::string qkv_prefix = "self_attn.";  // where split q_proj, k_proj and v_proj live in a block
};

std::vector<ParamTensor> renamed_layout(const std::vector<ParamTensor>& layout, const FamilyNames& names) {
  std::vector<ParamTensor> out;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const ParamTensor& t = layout[i];
    ParamTensor o = t;
    if (const auto it = names.outside.find(t.name); it != names.outside.end()) {
      o.name = it->second;
      out.push_back(std::move(o));
      continue;
    }
    const auto d1 = t.name.find('.', 2), d2 = t.name.rfind('.');
    const std::string layer = t.name.substr(2, d1 - 2), stem = t.name.substr(d1 + 1, d2 - d1 - 1),
                      kind = t.name.substr(d2 + 1);
    const std::string prefix = names.prefix + layer + ".";
    // Grouped-query attention's q rows and the k and v rows after them: one tensor, as c_attn.
    if (stem == "attn.c_attn_q" && names.split_qkv) {  // q_proj, then c_attn_kv's halves: k_proj, v_proj
      MW_CHECK(i + 1 < layout.size() && layout[i + 1].name == "h." + layer + ".attn.c_attn_kv." + kind,
               "hf_param_layout: " + t.name + " without its key/value rows after it");
      o.name = prefix + names.qkv_prefix + "q_proj." + kind;
      out.push_back(std::move(o));
      const char* parts[] = {"k_proj", "v_proj"};
      for (std::size_t k = 0; k < 2; ++k) {
        ParamTensor kv = layout[i + 1];
        kv.numel /= 2;
        kv.shape[0] /= 2;
        kv.offset += k * kv.numel;
        kv.name = prefix + names.qkv_prefix + parts[k] + "." + kind;
        out.push_back(std::move(kv));
      }
      ++i;
      continue;
    }
    if (stem == "attn.c_attn_q") {
      MW_CHECK(i + 1 < layout.size() && layout[i + 1].name == "h." + layer + ".attn.c_attn_kv." + kind,
               "hf_param_layout: " + t.name + " without its key/value rows after it");
      o.name = prefix + names.stems.at("attn.c_attn") + "." + kind;
      o.numel += layout[i + 1].numel;
      o.shape[0] += layout[i + 1].shape[0];
      out.push_back(std::move(o));
      ++i;
      continue;
    }
    if (stem == "attn.c_attn" && names.split_qkv) {
      const std::size_t rows = static_cast<std::size_t>(t.shape[0] / 3), each = t.numel / 3;
      const char* parts[] = {"q_proj", "k_proj", "v_proj"};
      for (std::size_t k = 0; k < 3; ++k) {
        ParamTensor q = t;
        q.name = prefix + names.qkv_prefix + parts[k] + "." + kind;
        q.offset = t.offset + k * each;
        q.numel = each;
        q.shape[0] = static_cast<int>(rows);
        out.push_back(std::move(q));
      }
      continue;
    }
    const auto it = names.stems.find(stem);
    MW_CHECK(it != names.stems.end(), "hf_param_layout: unexpected tensor " + t.name);
    o.name = prefix + it->second + "." + kind;
    out.push_back(std::move(o));
  }
  return out;
}

// OPTForCausalLM's names (all nn.Linear [out, in]).
const FamilyNames& opt_names() {
  static const FamilyNames names{{{"wte.weight", "model.decoder.embed_tokens.weight"},
                                  {"wpe.weight", "model.decoder.embed_positions.weight"},
                                  {"ln_f.weight", "model.decoder.final_layer_norm.weight"},
                                  {"ln_f.bias", "model.decoder.final_layer_norm.bias"}},
                                 {{"ln_1", "self_attn_layer_norm"},
                                  {"attn.c_proj", "self_attn.out_proj"},
                                  {"ln_2", "final_layer_norm"},
                                  {"mlp.c_fc", "fc1"},
                                  {"mlp.c_proj", "fc2"}},
                                 "model.decoder.layers.",
                                 true};
  return names;
}

// GPTNeoXForCausalLM's (nn.Linear [out, in]; query_key_value's rows interleaved, hf_interleaved).
const FamilyNames& neox_names() {
  static const FamilyNames names{{{"wte.weight", "gpt_neox.embed_in.weight"},
                                  {"ln_f.weight", "gpt_neox.final_layer_norm.weight"},
                                  {"ln_f.bias", "gpt_neox.final_layer_norm.bias"},
                                  {"lm_head.weight", "embed_out.weight"}},
                                 {{"ln_1", "input_layernorm"},
                                  {"attn.c_attn", "attention.query_key_value"},
                                  {"attn.c_proj", "attention.dense"},
                                  {"ln_2", "post_attention_layernorm"},
                                  {"mlp.c_fc", "mlp.dense_h_to_4h"},
                                  {"mlp.c_proj", "mlp.dense_4h_to_h"}},
                                 "gpt_neox.layers.",
                                 false};
  return names;
}

// FalconForCausalLM's (nn.Linear [out, in]; query_key_value's rows grouped by key/value head,
// hf_interleaved): its norms named by the block's shape, input_layernorm alone (one norm), ln_attn and ln_mlp
// (side by side: the new decoder architecture), input_layernorm and post_attention_layernorm (in sequence).
FamilyNames falcon_names(const GptConfig& c) {
  const bool two_side_by_side = c.parallel_residual && !c.shared_norm();
  return {{{"wte.weight", "transformer.word_embeddings.weight"},
           {"ln_f.weight", "transformer.ln_f.weight"},
           {"ln_f.bias", "transformer.ln_f.bias"},
           {"lm_head.weight", "lm_head.weight"}},
          {{"ln_1", two_side_by_side ? "ln_attn" : "input_layernorm"},
           {"ln_2", two_side_by_side ? "ln_mlp" : "post_attention_layernorm"},
           {"attn.c_attn", "self_attention.query_key_value"},
           {"attn.c_proj", "self_attention.dense"},
           {"mlp.c_fc", "mlp.dense_h_to_4h"},
           {"mlp.c_proj", "mlp.dense_4h_to_h"}},
          "transformer.h.",
          false};
}

// GPTBigCodeForCausalLM's: GPT-2's names, grouped-query attention's q and kv rows joined as c_attn.
const FamilyNames& bigcode_names() {
  static const FamilyNames names{{{"wte.weight", "wte.weight"},
                                  {"wpe.weight", "wpe.weight"},
                                  {"ln_f.weight", "ln_f.weight"},
                                  {"ln_f.bias", "ln_f.bias"}},
                                 {{"ln_1", "ln_1"},
                                  {"attn.c_attn", "attn.c_attn"},
                                  {"attn.c_proj", "attn.c_proj"},
                                  {"ln_2", "ln_2"},
                                  {"mlp.c_fc", "mlp.c_fc"},
                                  {"mlp.c_proj", "mlp.c_proj"}},
                                 "h.",
                                 false};
  return names;
}

// BloomForCausalLM's (nn.Linear [out, in]; query_key_value's rows interleaved head by head, hf_interleaved).
const FamilyNames& bloom_names() {
  static const FamilyNames names{{{"wte.weight", "transformer.word_embeddings.weight"},
                                  {"ln_emb.weight", "transformer.word_embeddings_layernorm.weight"},
                                  {"ln_emb.bias", "transformer.word_embeddings_layernorm.bias"},
                                  {"ln_f.weight", "transformer.ln_f.weight"},
                                  {"ln_f.bias", "transformer.ln_f.bias"},
                                  {"lm_head.weight", "lm_head.weight"}},
                                 {{"ln_1", "input_layernorm"},
                                  {"attn.c_attn", "self_attention.query_key_value"},
                                  {"attn.c_proj", "self_attention.dense"},
                                  {"ln_2", "post_attention_layernorm"},
                                  {"mlp.c_fc", "mlp.dense_h_to_4h"},
                                  {"mlp.c_proj", "mlp.dense_4h_to_h"}},
                                 "transformer.h.",
                                 false};
  return names;
}

// MptForCausalLM's (nn.Linear [out, in]; Wqkv's rows every q, then every k, then every v, as c_attn's).
const FamilyNames& mpt_names() {
  static const FamilyNames names{{{"wte.weight", "transformer.wte.weight"},
                                  {"ln_f.weight", "transformer.norm_f.weight"},
                                  {"ln_f.bias", "transformer.norm_f.bias"}},
                                 {{"ln_1", "norm_1"},
                                  {"attn.c_attn", "attn.Wqkv"},
                                  {"attn.c_proj", "attn.out_proj"},
                                  {"ln_2", "norm_2"},
                                  {"mlp.c_fc", "ffn.up_proj"},
                                  {"mlp.c_proj", "ffn.down_proj"}},
                                 "transformer.blocks.",
                                 false};
  return names;
}

// GPTJForCausalLM's (nn.Linear [out, in]; q, k and v as separate tensors under attn., q_proj's and k_proj's
// rotary rows reordered, hf_interleaved); CodeGenForCausalLM's the same with q, k and v as one qkv_proj (its
// rows grouped, hf_interleaved).
FamilyNames gptj_names(const GptConfig& c) {
  FamilyNames names{{{"wte.weight", "transformer.wte.weight"},
                     {"ln_f.weight", "transformer.ln_f.weight"},
                     {"ln_f.bias", "transformer.ln_f.bias"},
                     {"lm_head.weight", "lm_head.weight"},
                     {"lm_head.bias", "lm_head.bias"}},
                    {{"ln_1", "ln_1"},
                     {"attn.c_proj", "attn.out_proj"},
                     {"mlp.c_fc", "mlp.fc_in"},
                     {"mlp.c_proj", "mlp.fc_out"}},
                    "transformer.h.",
                    !c.codegen,
                    "attn."};
  if (c.codegen) names.stems["attn.c_attn"] = "attn.qkv_proj";
  return names;
}

// Starcoder2ForCausalLM's (nn.Linear [out, in]; q, k and v as separate tensors, as OPT's, also beside
// grouped-query attention's c_attn_q and c_attn_kv).
const FamilyNames& starcoder2_names() {
  static const FamilyNames names{{{"wte.weight", "model.embed_tokens.weight"},
                                  {"ln_f.weight", "model.norm.weight"},
                                  {"ln_f.bias", "model.norm.bias"},
                                  {"lm_head.weight", "lm_head.weight"}},
                                 {{"ln_1", "input_layernorm"},
                                  {"attn.c_proj", "self_attn.o_proj"},
                                  {"ln_2", "post_attention_layernorm"},
                                  {"mlp.c_fc", "mlp.c_fc"},
                                  {"mlp.c_proj", "mlp.c_proj"}},
                                 "model.layers.",
                                 true};
  return names;
}

// NemotronForCausalLM's: StarCoder2's names with the MLP's up_proj and down_proj.
const FamilyNames& nemotron_names() {
  static const FamilyNames names = [] {
    FamilyNames n = starcoder2_names();
    n.stems["mlp.c_fc"] = "mlp.up_proj";
    n.stems["mlp.c_proj"] = "mlp.down_proj";
    return n;
  }();
  return names;
}

// PhiForCausalLM's (nn.Linear [out, in]; q, k and v as separate tensors, as OPT's).
const FamilyNames& phi_names() {
  static const FamilyNames names{{{"wte.weight", "model.embed_tokens.weight"},
                                  {"ln_f.weight", "model.final_layernorm.weight"},
                                  {"ln_f.bias", "model.final_layernorm.bias"},
                                  {"lm_head.weight", "lm_head.weight"},
                                  {"lm_head.bias", "lm_head.bias"}},
                                 {{"ln_1", "input_layernorm"},
                                  {"attn.c_proj", "self_attn.dense"},
                                  {"mlp.c_fc", "mlp.fc1"},
                                  {"mlp.c_proj", "mlp.fc2"}},
                                 "model.layers.",
                                 true};
  return names;
}

// Tensors named prefix + part + suffix for each part, back to back: one tensor prefix + whole + suffix.
struct JoinedTensors {
  std::vector<std::string> parts;
  std::string whole;
};
const JoinedTensors kGateUp{{"gate_proj.", "up_proj."}, "gate_up_proj."};
std::vector<ParamTensor> joined_layout(const std::vector<ParamTensor>& layout,
                                       const std::vector<JoinedTensors>& groups) {
  std::vector<ParamTensor> out;
  for (std::size_t i = 0; i < layout.size();) {
    bool joined = false;
    for (const JoinedTensors& g : groups) {
      const std::string& name = layout[i].name;
      const auto at = name.find(g.parts[0]);
      if (at == std::string::npos || i + g.parts.size() > layout.size()) continue;
      const std::string prefix = name.substr(0, at), suffix = name.substr(at + g.parts[0].size());
      ParamTensor t = layout[i];
      t.name = prefix + g.whole + suffix;
      for (std::size_t k = 1; k < g.parts.size(); ++k) {
        const ParamTensor& next = layout[i + k];
        MW_CHECK(next.name == prefix + g.parts[k] + suffix && next.offset == t.offset + t.numel,
                 "hf_param_layout: " + next.name + " does not follow " + name);
        t.numel += next.numel;
        t.shape[0] += next.shape[0];
      }
      out.push_back(std::move(t));
      i += g.parts.size();
      joined = true;
      break;
    }
    if (!joined) out.push_back(layout[i++]);
  }
  return out;
}

// Each tensor's name with the first of `names`' parts it holds (in their order) replaced by its own.
void rename_parts(std::vector<ParamTensor>& layout,
                  std::initializer_list<std::pair<std::string_view, std::string_view>> names) {
  for (ParamTensor& t : layout) {
    for (const auto& [ours, theirs] : names) {
      if (const auto at = t.name.find(ours); at != std::string::npos) {
        t.name.replace(at, ours.size(), theirs);
        break;
      }
    }
  }
}

// GLM's: gate and up joined; GLM-4's four norms by its names (Gemma 2's post_attention_layernorm is its
// post_self_attn_layernorm, pre_feedforward_layernorm its post_attention_layernorm).
std::vector<ParamTensor> glm_layout(const std::vector<ParamTensor>& layout, bool sandwich) {
  std::vector<ParamTensor> out = joined_layout(layout, {kGateUp});
  if (!sandwich) return out;
  rename_parts(out, {{".post_attention_layernorm.", ".post_self_attn_layernorm."},
                     {".pre_feedforward_layernorm.", ".post_attention_layernorm."},
                     {".post_feedforward_layernorm.", ".post_mlp_layernorm."}});
  return out;
}
// Granite MoE's names for the experts: the router block_sparse_moe.router.layer, every expert's gate and up
// as one block_sparse_moe.input_linear [experts, 2F, C], their downs as one output_linear [experts, C, F]
// (gpt_param_layout keeps them in that order).
std::vector<ParamTensor> granite_moe_layout(const GptConfig& c, const std::vector<ParamTensor>& layout) {
  std::vector<ParamTensor> out;
  const auto E = static_cast<std::size_t>(c.experts);
  for (std::size_t i = 0; i < layout.size();) {
    const std::string& name = layout[i].name;
    const auto at = name.find(".mlp.");
    if (at == std::string::npos) {
      out.push_back(layout[i++]);
      continue;
    }
    const std::string block = name.substr(0, at) + ".block_sparse_moe.";
    ParamTensor t = layout[i];
    std::size_t n = 1;
    if (name.find(".mlp.gate.") == at) {
      t.name = block + "router.layer.weight";
    } else {
      const bool fc1 = name.find(".gate_proj.") != std::string::npos;
      n = fc1 ? 2 * E : E;  // every expert's gate and up, or every down
      MW_CHECK(i + n <= layout.size(), "granite_moe_layout: " + name + " is not followed by its experts'");
      for (std::size_t k = 1; k < n; ++k) t.numel += layout[i + k].numel;
      t.name = block + (fc1 ? "input_linear.weight" : "output_linear.weight");
      t.shape = fc1 ? std::vector<int>{c.experts, 2 * layout[i].shape[0], layout[i].shape[1]}
                    : std::vector<int>{c.experts, layout[i].shape[0], layout[i].shape[1]};
    }
    out.push_back(std::move(t));
    i += n;
  }
  return out;
}

// gpt-oss's and Llama 4's names for the experts: per layer every expert's gate and up weights as one
// mlp.experts.gate_up_proj [experts, C, 2F], their biases (gpt-oss's) as gate_up_proj_bias [experts, 2F],
// the downs as down_proj [experts, F, C] and theirs as down_proj_bias [experts, C] (gpt_param_layout keeps
// each group together; hf_reorder interleaves or joins, and transposes them).
std::vector<ParamTensor> joined_experts_layout(const GptConfig& c, const std::vector<ParamTensor>& layout) {
  std::vector<ParamTensor> out;
  const auto E = static_cast<std::size_t>(c.experts);
  const int F = c.expert_width(), C = c.channels;
  for (std::size_t i = 0; i < layout.size();) {
    const std::string& name = layout[i].name;
    const auto at = name.find(".mlp.experts.");
    if (at == std::string::npos) {
      out.push_back(layout[i++]);
      continue;
    }
    const bool down = name.find(".down_proj.") != std::string::npos, bias = name.ends_with(".bias");
    const std::size_t n = down ? E : 2 * E;
    MW_CHECK(i + n <= layout.size(), "joined_experts_layout: " + name + " is not followed by its experts'");
    ParamTensor t = layout[i];
    for (std::size_t k = 1; k < n; ++k) t.numel += layout[i + k].numel;
    t.name =
        name.substr(0, at) + ".mlp.experts." + (down ? "down_proj" : "gate_up_proj") + (bias ? "_bias" : "");
    t.shape = down ? (bias ? std::vector<int>{c.experts, C} : std::vector<int>{c.experts, F, C})
                   : (bias ? std::vector<int>{c.experts, 2 * F} : std::vector<int>{c.experts, C, 2 * F});
    out.push_back(std::move(t));
    i += n;
  }
  return out;
}

// Llama 4's names: the MLPs under feed_forward, the router feed_forward.router, the shared expert
// feed_forward.shared_expert, the experts joined as gpt-oss's.
std::vector<ParamTensor> llama4_layout(const GptConfig& c, const std::vector<ParamTensor>& layout) {
  std::vector<ParamTensor> out = joined_experts_layout(c, layout);
  rename_parts(out, {{".mlp.gate.", ".feed_forward.router."},
                     {".mlp.shared_experts.", ".feed_forward.shared_expert."},
                     {".mlp.", ".feed_forward."}});
  return out;
}

// Mixtral's names for the experts: the router block_sparse_moe.gate, an expert's gate, up and down w1, w3
// and w2.
std::vector<ParamTensor> mixtral_layout(std::vector<ParamTensor> layout) {
  rename_parts(layout, {{".mlp.", ".block_sparse_moe."}});
  rename_parts(layout, {{".gate_proj.", ".w1."}, {".up_proj.", ".w3."}, {".down_proj.", ".w2."}});
  return layout;
}
}  // namespace

std::vector<ParamTensor> hf_param_layout(const GptConfig& c) {
  std::vector<ParamTensor> layout = gpt_param_layout(c);
  if (c.opt) return renamed_layout(layout, opt_names());
  if (c.neox) return renamed_layout(layout, neox_names());
  if (c.phi) return renamed_layout(layout, phi_names());
  if (c.bigcode) return renamed_layout(layout, bigcode_names());
  if (c.falcon) return renamed_layout(layout, falcon_names(c));
  if (c.bloom) return renamed_layout(layout, bloom_names());
  if (c.mpt) return renamed_layout(layout, mpt_names());
  if (c.gptj) return renamed_layout(layout, gptj_names(c));
  if (c.starcoder2) return renamed_layout(layout, starcoder2_names());
  if (c.nemotron) return renamed_layout(layout, nemotron_names());
  if (c.glm) return glm_layout(layout, c.sandwich_norm);
  if (c.mixtral()) return mixtral_layout(std::move(layout));
  if (c.moe() && c.granite) return granite_moe_layout(c, layout);
  if (c.gpt_oss) return joined_experts_layout(c, layout);
  if (c.llama4) return llama4_layout(c, layout);
  if (!c.fused_names) return layout;
  return joined_layout(layout, {{{"q_proj.", "k_proj.", "v_proj."}, "qkv_proj."}, kGateUp});
}

std::size_t gpt_num_params(const GptConfig& c) {
  const auto layout = gpt_param_layout(c);
  return layout.back().offset + layout.back().numel;
}

void gpt_rope_tables(const GptConfig& c, int T, std::vector<float>& cos, std::vector<float>& sin) {
  const int rot = c.rotary_dim();
  const std::size_t table = static_cast<std::size_t>(T) * static_cast<std::size_t>(rot / 2);
  cos.resize(c.rope_tables_floats(T));
  sin.resize(cos.size());
  k::rope_table(cos.data(), sin.data(), T, rot, c.rope_inv_freq(T).data(), 0, c.rope_attention_scale());
  if (c.rope_local_theta > 0) {  // Gemma 3's local base, without rope_scaling
    k::rope_table(cos.data() + table, sin.data() + table, T, rot, c.rope_local_inv_freq().data(), 0, 1.0);
  }
}

float GptConfig::embedding_scale() const {
  if (embed_multiplier > 0) return static_cast<float>(embed_multiplier);  // (Granite's)
  return embed_scale ? static_cast<float>(std::sqrt(static_cast<double>(channels))) : 1.0f;
}

bool is_gelu_tanh(const std::string& act) {
  return act == "gelu_pytorch_tanh" || act == "gelu_new";
}

namespace {
// Whether memwall's rotary kernels compute the model file's rope_scaling; else one line naming its type.
Status check_rope_scaling(const ModelSpec& m, const std::string& where, const std::string& tool) {
  if (m.rope_scaling.supported()) return Status::ok();
  return Status::invalid_argument(where + "rope_scaling type \"" + m.rope_scaling.type +
                                  "\" is not supported by " + tool +
                                  "; allowed: linear, llama3, yarn, dynamic, longrope, or none");
}
// Whether the model file's LayerNorm epsilon (under `key`) is memwall's LayerNorm kernels' 1e-5.
Status check_layer_norm_eps(const ModelSpec& m, const char* key, const std::string& where,
                            const std::string& tool) {
  if (std::abs(m.norm_eps - 1e-5) <= 1e-12) return Status::ok();
  return Status::invalid_argument(where + key + " " + strprintf("%g", m.norm_eps) + " is not supported by " +
                                  tool + "; allowed: 1e-05 (its LayerNorm's)");
}
}  // namespace

Status check_model_file(const ModelSpec& m, const std::string& tool) {
  const std::string where = "model " + m.name + ": ";
  if (m.mla() && m.rope_head_size % 2 != 0) {
    return Status::invalid_argument(where + "qk_rope_head_dim " + std::to_string(m.rope_head_size) +
                                    " is not supported by " + tool +
                                    "; allowed: an even number (rotary pairs)");
  }
  if (m.mla() && m.rope_head_size == 0) {
    return Status::invalid_argument(where + "qk_rope_head_dim 0 is not supported by " + tool +
                                    "; allowed: 2 or more (the latent attention's rotary key part)");
  }
  if (m.mla() && m.v_head_dim() > m.head_dim()) {
    return Status::invalid_argument(where + "v_head_dim " + std::to_string(m.v_head_dim()) +
                                    " is not supported by " + tool + "; allowed: up to qk_nope_head_dim + " +
                                    "qk_rope_head_dim (" + std::to_string(m.head_dim()) + ")");
  }
  if (m.mtp_modules > 1) {
    return Status::invalid_argument(where + "num_nextn_predict_layers " + std::to_string(m.mtp_modules) +
                                    " with memwall.mtp is not supported by " + tool +
                                    "; allowed: 1 (DeepSeek-V3's and GLM-4.5's), or memwall.mtp false");
  }
  if (m.full_attn_every > 1 || m.attn_output_gate) {
    return Status::invalid_argument(
        where +
        "Qwen3-Next's linear-attention (Gated DeltaNet) layers and gated attention "
        "output are not supported by " +
        tool + "; memwall predict and simulate take it");
  }
  if (m.moe()) {  // routed SwiGLU experts in the Llama shape's blocks (its other checks below)
    const std::string also = "; memwall predict and simulate take it";
    // (Their readers set what each has: Qwen2-MoE's gated shared expert, GLM-4.5's ungated ones and sigmoid
    // routing, Qwen's and GLM-4.5's dense layers.)
    if (m.model_type != "mixtral" && m.model_type != "qwen3_moe" && m.model_type != "olmoe" &&
        m.model_type != "qwen2_moe" && m.model_type != "glm4_moe" && m.model_type != "granitemoe" &&
        m.model_type != "gpt_oss" && m.model_type != "llama4" && m.model_type != "llama4_text" && !m.mla()) {
      return Status::invalid_argument(
          where + m.model_type + "'s mixture of experts is not supported by " + tool +
          "; allowed: mixtral, qwen2_moe, qwen3_moe, olmoe, glm4_moe, granitemoe, gpt_oss, deepseek_v2, "
          "deepseek_v3, kimi_k2, llama4" +
          also);
    }
    if (m.group_by_best && m.sigmoid_routing) {
      return Status::invalid_argument(where + "topk_method group_limited_greedy with scoring_func sigmoid " +
                                      "is not supported by " + tool + "; allowed: softmax scores with it");
    }
    if (m.model_type == "gpt_oss" &&
        !m.linear_bias) {  // (its attention's biases: memwall's gpt-oss has them)
      return Status::invalid_argument(where + "attention_bias false is not supported by " + tool +
                                      " for gpt-oss; allowed: true (GptOssConfig's)");
    }
    if (m.clip_qkv > 0) {  // (OLMoE clamps q and k after its q/k norms, OLMo 1.7 before: memwall's kernels)
      return Status::invalid_argument(where + "clip_qkv " + strprintf("%g", m.clip_qkv) +
                                      " is not supported by " + tool + " for OLMoE; allowed: null");
    }
  }
  if (m.model_type == "nemotron") {  // GPT-2's shape with grouped-query heads, LayerNorm1P and relu2
    if (m.mlp_act != "relu2") {
      return Status::invalid_argument(where + "hidden_act \"" + m.mlp_act + "\" is not supported by " + tool +
                                      " for Nemotron; allowed: relu2 (the squared ReLU)");
    }
    MW_RETURN_IF_ERROR(check_rope_scaling(m, where, tool));
    return check_layer_norm_eps(m, "norm_eps", where, tool);
  }
  const bool stablelm = m.model_type == "stablelm", olmo = m.model_type == "olmo",
             cohere = m.model_type == "cohere" || m.model_type == "cohere2";
  if (stablelm || olmo || cohere) {  // the Llama shape with LayerNorms (OLMo's without parameters, Cohere's
                                     // without biases)
    const std::string family = stablelm ? "StableLM" : olmo ? "OLMo" : "Cohere";
    if (m.linear_bias) {
      return Status::invalid_argument(where + "attention_bias true is not supported by " + tool + " for " +
                                      family + "; allowed: false");
    }
    MW_RETURN_IF_ERROR(check_layer_norm_eps(m, "layer_norm_eps", where, tool));
    if (m.mlp_act != "silu") {
      return Status::invalid_argument(where + "hidden_act \"" + m.mlp_act + "\" is not supported by " + tool +
                                      " for " + family + "; allowed: silu");
    }
    return check_rope_scaling(m, where, tool);
  }
  const bool neox = m.model_type == "gpt_neox", phi = m.model_type == "phi",
             falcon = m.model_type == "falcon", codegen = m.model_type == "codegen",
             gptj = m.model_type == "gptj" || codegen, starcoder2 = m.model_type == "starcoder2";
  if (neox || phi || falcon || gptj || starcoder2) {  // the reader has refused what their configs cannot be
    const std::string family = neox      ? "GPT-NeoX"
                               : phi     ? "Phi"
                               : falcon  ? "Falcon"
                               : codegen ? "CodeGen"
                               : gptj    ? "GPT-J"
                                         : "StarCoder2";
    if (codegen && m.heads % GptConfig::kCodegenGroups != 0) {
      return Status::invalid_argument(where + "n_head " + std::to_string(m.heads) + " is not supported by " +
                                      tool + " for CodeGen; allowed: a multiple of " +
                                      std::to_string(GptConfig::kCodegenGroups) +
                                      " (its qkv_proj splits the heads into that many groups)");
    }
    MW_RETURN_IF_ERROR(check_rope_scaling(m, where, tool));
    if (m.mlp_act != "gelu" && !is_gelu_tanh(m.mlp_act)) {
      return Status::invalid_argument(where + "hidden_act \"" + m.mlp_act + "\" is not supported by " + tool +
                                      " for " + family +
                                      "; allowed: gelu (exact) or gelu_new (tanh approximation)");
    }
    if (phi && m.kv_heads != m.heads) {
      return Status::invalid_argument(where + "num_key_value_heads " + std::to_string(m.kv_heads) +
                                      " (grouped-query attention) is not supported by " + tool +
                                      " for Phi; allowed: num_attention_heads (" + std::to_string(m.heads) +
                                      ")");
    }
    if ((phi || gptj) && m.tied_embeddings) {
      return Status::invalid_argument(where + "tie_word_embeddings true is not supported by " + tool +
                                      " for " + family + " (its head has a bias of its own); allowed: false");
    }
    MW_RETURN_IF_ERROR(check_layer_norm_eps(m, starcoder2 ? "norm_epsilon" : "layer_norm_eps", where, tool));
    return Status::ok();
  }
  if (m.norm == NormKind::kRmsNorm || m.gated_mlp || m.position == PositionKind::kRotary) {
    // The Llama shape: all three together, without biases but Qwen2's on q, k and v.
    if (m.norm != NormKind::kRmsNorm || !m.gated_mlp || m.position != PositionKind::kRotary) {
      return Status::invalid_argument(where + tool +
                                      " takes GPT-2's shape or Llama's (RMSNorm, rotary "
                                      "positions and a SwiGLU MLP together)");
    }
    if (m.linear_bias && m.model_type != "gpt_oss") {
      return Status::invalid_argument(where +
                                      "attention_bias (biases on q, k, v and o) is not supported by " + tool +
                                      "; allowed: attention_bias false (Qwen2's q, k and v biases are)");
    }
    MW_RETURN_IF_ERROR(check_rope_scaling(m, where, tool));
    if (m.mlp_act != "silu" && m.mlp_act != "swish" && !is_gelu_tanh(m.mlp_act)) {
      return Status::invalid_argument(where + "hidden_act \"" + m.mlp_act + "\" is not supported by " + tool +
                                      "; allowed: silu (SwiGLU) or "
                                      "gelu_pytorch_tanh (GeGLU)");
    }
    return Status::ok();
  }
  if (m.model_type == "mpt") {  // the reader has refused the rest (qk_ln, clip_qkv, other ALiBi slopes, ...)
    if (m.position != PositionKind::kNone) {
      return Status::invalid_argument(where +
                                      "attn_config.alibi false (learned positions) is not supported by " +
                                      tool + " for MPT; allowed: true (MptForCausalLM's)");
    }
    if (m.linear_bias) {
      return Status::invalid_argument(where + "no_bias false is not supported by " + tool +
                                      " for MPT; allowed: true (MptForCausalLM's)");
    }
    if (m.kv_heads != m.heads) {
      return Status::invalid_argument(where + "attn_config.attn_type with " + std::to_string(m.kv_heads) +
                                      " key/value heads is not supported by " + tool +
                                      " for MPT; allowed: multihead_attention");
    }
    if (!m.tied_embeddings) {
      return Status::invalid_argument(where + "tie_word_embeddings false is not supported by " + tool +
                                      " for MPT; allowed: true");
    }
    MW_RETURN_IF_ERROR(check_layer_norm_eps(m, "layer_norm_epsilon", where, tool));
    return Status::ok();
  }
  if (m.gated_mlp)
    return Status::invalid_argument(where + "gated (SwiGLU) MLPs are not supported by " + tool);
  if (m.norm != NormKind::kLayerNorm) return Status::invalid_argument(where + tool + " needs LayerNorm");
  const bool bloom = m.model_type == "bloom";  // ALiBi instead of positions, the embedding's norm
  if (m.position != PositionKind::kLearned && !(bloom && m.position == PositionKind::kNone)) {
    return Status::invalid_argument(where + tool + " needs learned positions (n_positions)");
  }
  if (bloom) MW_RETURN_IF_ERROR(check_layer_norm_eps(m, "layer_norm_epsilon", where, tool));
  if (!m.tied_embeddings) return Status::invalid_argument(where + tool + " needs tie_word_embeddings: true");
  if (!m.linear_bias) return Status::invalid_argument(where + tool + " needs biases on linears");
  if (m.kv_heads != m.heads && !(m.model_type == "gpt_bigcode" && m.kv_heads == 1))
    return Status::invalid_argument(where + "grouped-query attention is not supported");
  const bool opt = m.model_type == "opt";
  if (m.ffn_hidden != 4 * m.hidden) {
    return Status::invalid_argument(where + tool + " needs " +
                                    (opt ? "ffn_dim = 4 * hidden_size" : "n_inner = 4 * n_embd") + ", got " +
                                    std::to_string(m.ffn_hidden));
  }
  if (opt && m.mlp_act != "relu") {
    return Status::invalid_argument(where + "activation_function \"" + m.mlp_act + "\" is not supported by " +
                                    tool + " for OPT; allowed: relu");
  }
  if (!opt && !is_gelu_tanh(m.mlp_act) && m.mlp_act != "gelu") {
    return Status::invalid_argument(where + "activation_function \"" + m.mlp_act + "\" is not supported by " +
                                    tool + "; allowed: gelu_new (tanh approximation) or gelu (exact)");
  }
  return Status::ok();
}

GptConfig gpt_config_of(const ModelSpec& m) {
  GptConfig c;
  c.vocab = m.vocab;
  c.max_seq = m.max_positions;
  c.layers = m.layers;
  c.heads = m.heads;
  c.channels = m.hidden;
  const bool cohere = m.model_type == "cohere" || m.model_type == "cohere2";
  if (m.norm == NormKind::kRmsNorm || m.model_type == "stablelm" || m.model_type == "olmo" || cohere) {
    c.arch = GptArch::kLlama;
    c.layer_norm = m.model_type == "stablelm" || m.model_type == "olmo" || cohere;
    c.cohere = cohere;
    c.logit_scale = m.logit_scale;
    c.rope_windowed_only = m.rope_windowed_only;  // (Cohere2's)
    c.nope_every = m.nope_every;                  // (SmolLM3's)
    c.granite = m.model_type == "granite" || m.model_type == "granitemoe";
    c.glm = m.model_type == "glm" || m.model_type == "glm4";
    c.embed_multiplier = m.embed_multiplier;
    c.residual_multiplier = m.residual_multiplier;
    c.norm_params = m.norm_weight;  // (OLMo's LayerNorms have none)
    c.kv_heads = m.kv_heads;
    c.ffn = m.ffn_hidden;
    c.tied = m.tied_embeddings;
    c.qkv_bias = m.qkv_bias;
    c.rope_theta = m.rope_theta;
    c.norm_eps = m.norm_eps;
    c.rope_scaling = m.rope_scaling;
    c.sliding_window = m.sliding_window;
    c.first_window_layer = m.first_window_layer;
    c.head_dim = m.head_size;
    c.qk_norm = m.qk_norm;
    c.qk_norm_full = m.qk_norm_full;          // OLMo 2's
    c.qk_layernorm = m.qk_norm_head_weights;  // StableLM 2 12B's
    c.clip_qkv = m.clip_qkv;                  // OLMo 1.7's
    c.post_norm = m.post_norm;
    c.gelu_mlp = is_gelu_tanh(m.mlp_act);
    c.norm_unit_offset = m.norm_unit_offset;
    c.embed_scale = m.embed_scale;
    c.fused_names = m.model_type == "phi3";
    c.global_every = m.global_every;
    c.sandwich_norm = m.sandwich_norm;
    c.attn_softcap = m.attn_softcap;
    c.final_softcap = m.final_softcap;
    c.query_scale = m.query_scale;
    c.rope_local_theta = m.rope_local_theta;
    c.partial_rotary = m.partial_rotary_factor;
    // StableLM's use_parallel_residual: the attention and the MLP side by side after one norm.
    c.parallel_residual = c.one_norm = m.block_norm_shared;
    c.experts = m.experts;
    c.experts_per_token = m.experts_per_token;
    c.expert_ffn = m.expert_ffn;
    c.norm_topk = m.norm_topk_prob;
    c.router_aux = m.router_aux_loss;
    c.shared_ffn = m.shared_expert_ffn;  // (Qwen2-MoE's with its gate, GLM-4.5's without)
    c.dense_layers = m.dense_layers;
    c.moe_every = m.moe_every;
    c.sigmoid_routing = m.sigmoid_routing;  // (GLM-4.5's)
    c.expert_groups = m.expert_groups;
    c.groups_per_token = m.groups_per_token;
    c.routed_scale = m.routed_scale;
    c.shared_gate = m.shared_expert_gate;
    c.gpt_oss = m.model_type == "gpt_oss";  // (its biases on q, k, v and o, sinks, experts' biases)
    if (c.gpt_oss) {
      c.qkv_bias = true;
      c.swiglu_limit = m.swiglu_limit;
    }
    // Llama 4's: routing by logits scaling the experts' inputs, rotary on neighbouring pairs, the rotary
    // layers' heads normed without weights and chunked, the others' queries tempered.
    c.llama4 = m.model_type == "llama4" || m.model_type == "llama4_text";
    if (c.llama4) {
      c.qk_l2_norm = m.qk_l2_norm;
      c.attn_temperature = m.attn_temperature;
      c.floor_scale = m.floor_scale;
      c.attention_chunk = m.attention_chunk;
    }
    c.mtp = m.mtp_modules;              // (DeepSeek-V3's and GLM-4.5's, with the run's memwall.mtp)
    c.group_by_best = m.group_by_best;  // (DeepSeek-V2's group_limited_greedy)
    c.seq_aux_alpha = m.seq_aux_alpha;  // (DeepSeek's balance loss)
    c.seq_aux = m.seq_aux;
    if (m.mla()) {  // DeepSeek's latent attention (Kimi K2's is V3's)
      c.kv_lora = m.kv_lora_rank;
      c.q_lora = m.q_lora_rank;
      c.rope_dim = m.rope_head_size;
      c.v_dim = m.v_head_dim();
      c.head_dim = m.head_dim();
      c.deepseek = m.model_type == "deepseek_v2" ? 2 : 3;
      c.rope_interleave = m.rope_interleave;
      c.partial_rotary = 1;
      c.query_scale = latent_query_scale(c.head_dim, m.rope_scaling);
      // (DeepSeek-V2 renormalises the chosen weights or scales them by routed_scaling_factor, not both.)
      if (c.deepseek == 2 && c.norm_topk) c.routed_scale = 1;
    }
  }
  c.opt = m.model_type == "opt";
  if (m.model_type == "gpt_neox" || m.model_type == "phi" || m.model_type == "falcon" ||
      m.model_type == "gptj" || m.model_type == "codegen" || m.model_type == "starcoder2" ||
      m.model_type == "nemotron") {
    c.neox = m.model_type == "gpt_neox";
    c.starcoder2 = m.model_type == "starcoder2";
    c.nemotron = m.model_type == "nemotron";
    c.norm_unit_offset = c.nemotron && m.norm_unit_offset;  // (Nemotron's LayerNorm1P: 1 + weight)
    c.phi = m.model_type == "phi";
    c.falcon = m.model_type == "falcon";
    c.gptj = m.model_type == "gptj" || m.model_type == "codegen";
    c.codegen = m.model_type == "codegen";
    // Side by side with two norms (GPT-NeoX's, Falcon's new architecture's) or one (Phi's, Falcon-7B's).
    c.parallel_residual = m.parallel_residual || m.block_norm_shared;
    c.one_norm = c.falcon && m.block_norm_shared;
    c.no_bias = (c.falcon || c.starcoder2 || c.nemotron) && !m.linear_bias;
    c.falcon_alibi = c.falcon && m.position == PositionKind::kNone;  // Falcon-RW's
    c.kv_heads = c.falcon || c.starcoder2 || c.nemotron ? m.kv_heads : 0;
    c.head_dim = c.nemotron && m.head_size * m.heads != m.hidden ? m.head_size : 0;  // (Minitron-8B's)
    c.sliding_window = c.starcoder2 ? m.sliding_window : 0;
    c.tied = m.tied_embeddings;
    c.ffn = m.ffn_hidden;
    c.rope_theta = m.rope_theta;
    c.rope_scaling = m.rope_scaling;
    c.partial_rotary = m.partial_rotary_factor;
  }
  if (m.model_type == "gpt_bigcode") {
    c.bigcode = true;
    c.kv_heads = m.kv_heads;
  }
  c.bloom = m.model_type == "bloom";
  if (m.model_type == "mpt") {
    c.mpt = true;
    c.no_bias = !m.linear_bias;
    c.ffn = m.ffn_hidden;
  }
  c.exact_gelu = !c.llama() && !c.opt && !c.bloom && m.mlp_act == "gelu";
  return c;
}

bool hf_transposed(const GptConfig& c, const ParamTensor& t) {
  return !c.bigcode && t.shape.size() == 2 && t.name.rfind("h.", 0) == 0;
}

bool hf_interleaved(const GptConfig& c, const ParamTensor& t) {
  return ((c.gpt_oss || c.llama4) &&
          (t.name.ends_with(".experts.gate_up_proj") || t.name.ends_with(".experts.gate_up_proj_bias") ||
           t.name.ends_with(".experts.down_proj"))) ||
         ((c.neox || c.falcon || c.bloom) && t.name.find(".query_key_value.") != std::string::npos) ||
         (c.bigcode && t.name.find(".attn.c_attn.") != std::string::npos) ||
         (c.gptj && (t.name.find(".attn.q_proj.") != std::string::npos ||
                     t.name.find(".attn.k_proj.") != std::string::npos ||
                     (c.codegen && t.name.find(".attn.qkv_proj.") != std::string::npos)));
}

void interleave_qkv(const GptConfig& c, const float* src, std::size_t cols, float* dst, bool to_hf) {
  if (c.gptj) {
    // A query or key head's rotary rows: memwall's row i is the file's 2i, rot / 2 + i is 2i + 1; the rest
    // kept. GPT-J: a q_proj or k_proj of heads x hs rows. CodeGen: every q, k, v row (3 x heads x hs) to its
    // row in qkv_proj, whose group g of heads / 4 heads holds their queries, values, then keys.
    const auto hs = static_cast<std::size_t>(c.head_size()),
               half = static_cast<std::size_t>(c.rotary_dim() / 2), H = static_cast<std::size_t>(c.heads),
               Q = H * hs;
    const auto channel = [&](std::size_t r) {
      return r >= 2 * half ? r : r < half ? 2 * r : 2 * (r - half) + 1;
    };
    const std::size_t per_group = H / GptConfig::kCodegenGroups * hs;  // (CodeGen's local_dim)
    const std::size_t rows = c.codegen ? 3 * Q : Q;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t part = r / Q, head = r % Q / hs, ch = r % hs;
      std::size_t theirs = head * hs + (part < 2 ? channel(ch) : ch);  // (values do not turn)
      if (c.codegen) {
        const std::size_t file_part = part == 0 ? 0 : part == 1 ? 2 : 1;  // its order: q, v, k
        theirs = theirs / per_group * 3 * per_group + file_part * per_group + theirs % per_group;
      }
      std::copy_n(src + (to_hf ? r : theirs) * cols, cols, dst + (to_hf ? theirs : r) * cols);
    }
    return;
  }
  // Key/value head g's group: its G query heads' rows, then its key's, then its value's (GPT-NeoX: G = 1).
  const auto kv = static_cast<std::size_t>(c.kv_head_count()), hs = static_cast<std::size_t>(c.head_size());
  const std::size_t G = static_cast<std::size_t>(c.heads) / kv, q_rows = G * kv * hs, kv_rows = kv * hs;
  const auto move = [&](std::size_t mine, std::size_t theirs, std::size_t rows) {
    std::copy_n(src + (to_hf ? mine : theirs) * cols, rows * cols, dst + (to_hf ? theirs : mine) * cols);
  };
  for (std::size_t g = 0; g < kv; ++g) {
    const std::size_t group = g * (G + 2) * hs;  // the group's first row in the file's order
    move(g * G * hs, group, G * hs);
    move(q_rows + g * hs, group + G * hs, hs);
    move(q_rows + kv_rows + g * hs, group + (G + 1) * hs, hs);
  }
}

void hf_reorder(const GptConfig& c, const ParamTensor& t, const float* src, float* dst, bool to_hf) {
  if (!c.gpt_oss && !c.llama4) {
    interleave_qkv(c, src, t.shape.size() > 1 ? static_cast<std::size_t>(t.shape[1]) : 1, dst, to_hf);
    return;
  }
  const auto move = [&](std::size_t mine, std::size_t theirs) {
    if (to_hf) {
      dst[theirs] = src[mine];
    } else {
      dst[mine] = src[theirs];
    }
  };
  const auto E = static_cast<std::size_t>(t.shape[0]);
  if (t.name.ends_with(".down_proj")) {  // [F, C] per expert in the file, memwall's [C, F]
    const auto F = static_cast<std::size_t>(t.shape[1]), C = static_cast<std::size_t>(t.shape[2]);
    for (std::size_t e = 0; e < E; ++e) {
      for (std::size_t ch = 0; ch < C; ++ch) {
        for (std::size_t f = 0; f < F; ++f) move(e * C * F + ch * F + f, e * F * C + f * C + ch);
      }
    }
    return;
  }
  // gate_up_proj [C, 2F] per expert (bias: [2F]), gate f at column 2f and up f at 2f + 1 (Llama 4's: gate f
  // at column f, up f at F + f); memwall's expert holds [gate F | up F] rows of C (bias: F then F).
  const bool bias = t.shape.size() == 2;
  const std::size_t C = bias ? 1 : static_cast<std::size_t>(t.shape[1]),
                    F = static_cast<std::size_t>(t.shape.back()) / 2;
  for (std::size_t e = 0; e < E; ++e) {
    for (std::size_t k = 0; k < 2; ++k) {
      for (std::size_t f = 0; f < F; ++f) {
        for (std::size_t ch = 0; ch < C; ++ch)
          move(e * 2 * F * C + (k * F + f) * C + ch,
               e * C * 2 * F + ch * 2 * F + (c.llama4 ? k * F + f : 2 * f + k));
      }
    }
  }
}

void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

namespace {
// A mixture of experts' family name, by its model_type.
const char* moe_family(const GptConfig& c) {
  static const std::map<std::string_view, const char*> names = {
      {"gpt_oss", "gpt-oss"},    {"granitemoe", "Granite MoE"},  {"glm4_moe", "GLM-4.5"},
      {"olmoe", "OLMoE"},        {"qwen3_moe", "Qwen3-MoE"},     {"qwen2_moe", "Qwen2-MoE"},
      {"mixtral", "Mixtral"},    {"deepseek_v2", "DeepSeek-V2"}, {"deepseek_v3", "DeepSeek-V3"},
      {"llama4_text", "Llama 4"}};
  return names.at(c.moe_type());
}
}  // namespace

const char* gpt_family(const GptConfig& c) {
  if (c.llama()) {
    return !c.norm_params ? "OLMo"
           : c.cohere     ? "Cohere"
           : c.moe()      ? moe_family(c)
           : c.mla()      ? (c.deepseek == 2 ? "DeepSeek-V2" : "DeepSeek-V3")
           : c.granite    ? "Granite"
           : c.glm        ? (c.sandwich_norm ? "GLM-4" : "GLM")
           : c.layer_norm ? "StableLM"
           : c.post_norm  ? (c.qk_norm && !c.qk_norm_full ? "EXAONE 4"
                             : c.sliding_window > 0       ? "OLMo 3"
                                                          : "OLMo 2")
                          : "Llama";
  }
  return c.opt          ? "OPT"
         : c.neox       ? "GPT-NeoX"
         : c.phi        ? "Phi"
         : c.falcon     ? "Falcon"
         : c.bigcode    ? "GPT-BigCode"
         : c.bloom      ? "BLOOM"
         : c.mpt        ? "MPT"
         : c.codegen    ? "CodeGen"
         : c.gptj       ? "GPT-J"
         : c.starcoder2 ? "StarCoder2"
         : c.nemotron   ? "Nemotron"
                        : "GPT-2";
}

ModelSpec gpt_model_spec(const GptConfig& c) {
  ModelSpec m;
  m.name = "memwall-gpt";
  m.model_type = "gpt2";
  m.layers = c.layers;
  m.hidden = c.channels;
  m.heads = c.heads;
  m.kv_heads = c.heads;
  m.ffn_hidden = c.ffn_width();
  m.vocab = c.vocab;
  m.max_positions = c.max_seq;
  m.tied_embeddings = true;
  m.gated_mlp = false;
  m.mlp_act = "gelu_new";
  m.linear_bias = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  if (c.llama()) {
    m.model_type = c.granite                ? "granite"
                   : c.glm                  ? (c.sandwich_norm ? "glm4" : "glm")
                   : c.nope_every > 0       ? "smollm3"
                   : c.fused_names          ? "phi3"
                   : c.sandwich_norm        ? (c.qk_norm ? "gemma3_text" : "gemma2")
                   : c.gemma()              ? "gemma"
                   : c.qk_norm              ? "qwen3"
                   : c.qkv_bias             ? "qwen2"
                   : (c.sliding_window > 0) ? "mistral"
                                            : "llama";
    m.kv_heads = c.kv_head_count();
    m.ffn_hidden = c.ffn_width();
    m.tied_embeddings = c.tied;
    m.gated_mlp = true;
    m.linear_bias = false;
    m.qkv_bias = c.qkv_bias;
    m.norm = NormKind::kRmsNorm;
    m.position = PositionKind::kRotary;
    m.rope_theta = c.rope_theta;
    m.norm_eps = c.norm_eps;
    m.rope_scaling = c.rope_scaling;
    m.sliding_window = c.sliding_window;
    m.first_window_layer = c.first_window_layer;
    m.head_size = c.head_dim;
    m.qk_norm = c.qk_norm;
    m.mlp_act = c.gelu_mlp ? "gelu_pytorch_tanh" : "silu";
    m.norm_unit_offset = c.norm_unit_offset;
    m.embed_scale = c.embed_scale;
    m.global_every = c.global_every;
    m.sandwich_norm = c.sandwich_norm;
    m.attn_softcap = c.attn_softcap;
    m.final_softcap = c.final_softcap;
    m.query_scale = c.query_scale;
    m.rope_local_theta = c.rope_local_theta;
    m.partial_rotary_factor = c.partial_rotary;
    m.nope_every = c.nope_every;
    m.embed_multiplier = c.embed_multiplier;
    m.residual_multiplier = c.residual_multiplier;
    m.logit_scale = c.logit_scale;
    if (c.layer_norm) {  // StableLM's, Cohere's without biases, or without parameters OLMo's
      m.model_type = c.rope_windowed_only ? "cohere2"
                     : c.cohere           ? "cohere"
                     : c.norm_params      ? "stablelm"
                                          : "olmo";
      m.norm = NormKind::kLayerNorm;
      m.norm_weight = c.norm_params;
      m.norm_bias = c.norm_bias();
      m.clip_qkv = c.clip_qkv;
    }
    m.qk_norm_full = c.qk_norm_full;
    m.qk_norm_head_weights = c.qk_layernorm;
    m.post_norm = c.post_norm;
    m.block_norm_shared = c.shared_norm();  // (StableLM's parallel residual)
    if (c.post_norm) {
      m.model_type = c.qk_norm && !c.qk_norm_full ? "exaone4" : c.sliding_window > 0 ? "olmo3" : "olmo2";
    }
    m.rope_windowed_only = c.rope_windowed_only;
    m.mtp_modules = m.mtp_in_file = c.mtp;
    if (c.moe()) {
      m.model_type = c.moe_type();
      m.experts = c.experts;
      m.experts_per_token = c.experts_per_token;
      m.expert_ffn = c.expert_ffn;
      m.norm_topk_prob = c.norm_topk;
      m.router_aux_loss = c.router_aux;
      m.shared_expert_ffn = c.shared_ffn;
      m.dense_layers = c.dense_layers;
      m.moe_every = c.moe_every;
      m.sigmoid_routing = m.router_bias_buffer = c.sigmoid_routing;
      m.expert_groups = c.expert_groups;
      m.groups_per_token = c.groups_per_token;
      m.routed_scale = c.routed_scale;
      m.shared_expert_gate = c.shared_gate;
      m.group_by_best = c.group_by_best;
      m.seq_aux_alpha = c.seq_aux_alpha;
      m.seq_aux = c.seq_aux;
      if (c.llama4) {  // (nothing to count, but what train computes)
        m.qk_l2_norm = c.qk_l2_norm;
        m.attn_temperature = c.attn_temperature;
        m.floor_scale = c.floor_scale;
        m.attention_chunk = c.attention_chunk;
      }
      if (c.gpt_oss) {  // biases on q, k, v, o, the router and the experts; the sink logits
        m.linear_bias = m.attn_bias = m.expert_bias = m.attn_sinks = true;
        m.swiglu_limit = c.swiglu_limit;
        m.global_every = c.global_every;
      }
    }
  }
  if (c.mla()) {  // DeepSeek's latent attention
    m.model_type = c.deepseek == 2 ? "deepseek_v2" : "deepseek_v3";
    m.kv_lora_rank = c.kv_lora;
    m.q_lora_rank = c.q_lora;
    m.rope_head_size = c.rope_dim;
    m.v_head_size = c.v_dim;
    m.rope_interleave = c.rope_interleave;
  }
  if (c.neox || c.phi || c.falcon || c.gptj || c.starcoder2 || c.nemotron) {
    m.model_type = c.neox         ? "gpt_neox"
                   : c.phi        ? "phi"
                   : c.falcon     ? "falcon"
                   : c.codegen    ? "codegen"
                   : c.gptj       ? "gptj"
                   : c.starcoder2 ? "starcoder2"
                                  : "nemotron";
    m.sliding_window = c.sliding_window;  // (StarCoder2's)
    if (c.starcoder2) m.mlp_act = "gelu_pytorch_tanh";
    if (c.nemotron) {
      m.mlp_act = "relu2";
      m.head_size = c.head_dim;  // (Minitron-8B's heads of their own size)
      m.norm_unit_offset = c.norm_unit_offset;
    }
    m.position = c.falcon_alibi ? PositionKind::kNone : PositionKind::kRotary;
    m.tied_embeddings = c.tied;
    m.rope_theta = c.rope_theta;
    m.rope_scaling = c.rope_scaling;
    m.partial_rotary_factor = c.partial_rotary;
    // Side by side after two norms (GPT-NeoX's, Falcon's new architecture's), or one (Phi's, Falcon-7B's).
    m.parallel_residual = c.parallel_residual && !c.shared_norm();
    m.block_norm_shared = c.shared_norm();
    m.head_bias = c.head_bias();
    m.kv_heads = c.kv_head_count();
    m.linear_bias = !c.no_bias;
    m.attn_bias = !c.gptj;
  }
  if (c.bigcode) {
    m.model_type = "gpt_bigcode";
    m.kv_heads = c.kv_head_count();
    m.mlp_act = "gelu_pytorch_tanh";
  }
  if (c.bloom) {
    m.model_type = "bloom";
    m.position = PositionKind::kNone;
    m.embed_norm = true;
  }
  if (c.mpt) {
    m.model_type = "mpt";
    m.position = PositionKind::kNone;
    m.linear_bias = !c.no_bias;
    m.norm_bias = c.norm_bias();
  }
  if (c.exact_gelu) m.mlp_act = "gelu";
  if (c.opt) {
    m.model_type = "opt";
    m.mlp_act = "relu";
    m.position_offset = c.position_offset();
  }
  return m;
}

namespace {
// The tensors of the flat layout a graph parameter (its name without a tile suffix) stands for: one, or
// several back to back in the layout (a fused weight: GPT-2's c_attn is one tensor, the Llama shape's fused
// qkv is q_proj, k_proj and v_proj). Empty when the name has no counterpart.
std::vector<std::string> layout_names(const std::string& name, const GptConfig& c) {
  if (!c.llama()) {
    if (name == "embed.tokens") return {"wte.weight"};
    if (name == "embed.positions") return {"wpe.weight"};
    if (name == "embed_norm.w") return {"ln_emb.weight"};
    if (name == "embed_norm.b") return {"ln_emb.bias"};
    if (name == "final_norm.w") return {"ln_f.weight"};
    if (name == "final_norm.b") return {"ln_f.bias"};
    if (name == "lm_head.w") return {"lm_head.weight"};
    if (name == "lm_head.b") return {"lm_head.bias"};
  } else {
    if (name == "embed.tokens") return {"model.embed_tokens.weight"};
    if (name == "final_norm.w") return {"model.norm.weight"};
    if (name == "final_norm.b") return {"model.norm.bias"};
    if (name == "lm_head.w") return {"lm_head.weight"};
  }
  if (name == "mtp0.norm.w" && c.mtp > 0)  // (the next-token-prediction module's head's own norm)
    return {"model.layers." + std::to_string(c.main_layers()) + ".shared_head.norm.weight"};
  const auto d1 = name.find('.'), d2 = name.rfind('.');
  if (name.size() < 2 || name[0] != 'L' || d1 == std::string::npos) return {};
  const std::string layer = name.substr(1, d1 - 1);
  if (c.gpt_oss && name.substr(d1) == ".sinks") return {"model.layers." + layer + ".self_attn.sinks"};
  if (d2 == d1) return {};
  const std::string op = name.substr(d1 + 1, d2 - d1 - 1), wb = name.substr(d2 + 1);
  if (!c.llama()) {
    static const std::map<std::string, std::string> stems = {{"ln1", "ln_1"},        {"ln2", "ln_2"},
                                                             {"qkv", "attn.c_attn"}, {"proj", "attn.c_proj"},
                                                             {"fc1", "mlp.c_fc"},    {"fc2", "mlp.c_proj"}};
    if (op == "qkv" && wb.size() == 2) {  // grouped-query: q (w0, b0) and k with v (w1, b1)
      return {"h." + layer + ".attn.c_attn_" + (wb[1] == '0' ? "q" : "kv") +
              (wb[0] == 'w' ? ".weight" : ".bias")};
    }
    const auto stem = stems.find(op);
    if (stem == stems.end() || (wb != "w" && wb != "b")) return {};
    return {"h." + layer + "." + stem->second + (wb == "w" ? ".weight" : ".bias")};
  }
  // Graph weights: ".w", or ".w0" and ".w1" for two matrices fused in one op.
  static const std::map<std::string, std::vector<std::string>> llama = {
      {"ln1.w", {"input_layernorm"}},
      {"ln1.b", {"input_layernorm"}},  // (StableLM's LayerNorms)
      {"mtp_enorm.w", {"enorm"}},      // (the next-token-prediction module's)
      {"mtp_hnorm.w", {"hnorm"}},
      {"mtp_eh_proj.w", {"eh_proj"}},
      {"ln2.w", {"post_attention_layernorm"}},
      {"ln2.b", {"post_attention_layernorm"}},
      {"qkv.w", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
      {"qkv.w0", {"self_attn.q_proj"}},
      {"qkv.w1", {"self_attn.k_proj", "self_attn.v_proj"}},
      {"qkv.b", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
      {"qkv.b0", {"self_attn.q_proj"}},
      {"qkv.b1", {"self_attn.k_proj", "self_attn.v_proj"}},
      {"qk_norm.w", {"self_attn.q_norm", "self_attn.k_norm"}},
      {"q.w", {"self_attn.q_proj"}},  // (the latent attention's)
      {"q_a.w", {"self_attn.q_a_proj"}},
      {"q_a_norm.w", {"self_attn.q_a_layernorm"}},
      {"q_b.w", {"self_attn.q_b_proj"}},
      {"kv_a.w", {"self_attn.kv_a_proj_with_mqa"}},
      {"kv_a_norm.w", {"self_attn.kv_a_layernorm"}},
      {"kv_b.w", {"self_attn.kv_b_proj"}},
      {"proj.w", {"self_attn.o_proj"}},
      {"proj.b", {"self_attn.o_proj"}},  // (gpt-oss's biases: o_proj's, and its experts')
      {"fc1.w0", {"mlp.gate_proj"}},
      {"fc1.b0", {"mlp.gate_proj"}},
      {"fc1.w1", {"mlp.up_proj"}},
      {"fc1.b1", {"mlp.up_proj"}},
      {"fc2.w", {"mlp.down_proj"}},
      {"fc2.b", {"mlp.down_proj"}}};
  // Gemma 2's four norms: its post_attention_layernorm is the attention output's, the MLP's input norm is
  // pre_feedforward_layernorm (OLMo 2's two: the outputs' norms alone).
  static const std::map<std::string, std::vector<std::string>> sandwich = {
      {"ln1_post.w", {"post_attention_layernorm"}},
      {"ln2.w", {"pre_feedforward_layernorm"}},
      {"ln2_post.w", {"post_feedforward_layernorm"}}};
  if (op == "router" && (wb == "w" || wb == "b")) {  // (gpt-oss's mlp.router, with a bias)
    return {"model.layers." + layer + (c.gpt_oss ? ".mlp.router." : ".mlp.gate.") +
            (wb == "w" ? "weight" : "bias")};
  }
  if (op == "router" && wb == "cb") return {"model.layers." + layer + ".mlp.gate.e_score_correction_bias"};
  if (op == "shared_gate" && wb == "w") return {"model.layers." + layer + ".mlp.shared_expert_gate.weight"};
  // An expert's (or the shared expert's) linears under `stem`, as a dense MLP's: gate, up, down.
  const auto expert_names = [&](const std::string& stem, const std::string& key) -> std::vector<std::string> {
    const auto it = llama.find(key);
    if (!key.starts_with("fc") || it == llama.end()) return {};
    const std::string proj = it->second[0].substr(4);  // ("mlp.gate_proj": "gate_proj")
    return {"model.layers." + layer + "." + stem + proj + (wb[0] == 'b' ? ".bias" : ".weight")};
  };
  if (op == "shared.fc1" || op == "shared.fc2")
    return expert_names(shared_expert_stem(c), op.substr(7) + "." + wb);
  if (int e = -1, n = 0; std::sscanf(op.c_str(), "expert%d.%n", &e, &n) == 1 && n > 0 && e >= 0) {
    return expert_names("mlp.experts." + std::to_string(e) + ".",
                        op.substr(static_cast<std::size_t>(n)) + "." + wb);
  }
  const std::string key = op + "." + wb;
  const auto& table = c.out_norms() && sandwich.count(key) > 0 ? sandwich : llama;
  const auto it = table.find(key);
  if (it == table.end()) return {};
  std::vector<std::string> out;
  const char* kind = wb[0] == 'b' ? ".bias" : ".weight";
  const auto stems = key == "qk_norm.w" && c.qk_layernorm && !c.cohere ? qk_layernorm_names(c) : it->second;
  for (const auto& stem : stems) out.push_back("model.layers." + layer + "." + stem + kind);
  return out;
}
}  // namespace

Result<std::vector<ParamSlice>> map_graph_params(const ModelGraph& g, const GptConfig& c) {
  std::map<std::string, const ParamTensor*> by_name;
  const auto layout = gpt_param_layout(c);
  for (const auto& t : layout) by_name[t.name] = &t;
  std::vector<ParamSlice> out;
  for (const auto& gp : g.params) {
    // Names: "embed.tokens", "embed.positions", "final_norm.w", "L3.fc1.w", "L3.fc1.b[2/4]", "L3.qkv.w1".
    std::string name = gp.name;
    int tile = 0, tiles = 1;
    if (const auto br = name.find('['); br != std::string::npos) {
      if (std::sscanf(name.c_str() + br, "[%d/%d]", &tile, &tiles) != 2 || tile < 1 || tile > tiles) {
        return Status::invalid_argument("graph parameter " + gp.name + ": unreadable tile suffix");
      }
      --tile;
      name.resize(br);
    }
    const std::vector<std::string> names = layout_names(name, c);
    // The tensors, back to back: one block of rows of `numel` elements.
    std::size_t offset = 0, numel = 0;
    int rows = 0;
    for (const auto& n : names) {
      const auto it = by_name.find(n);
      if (it == by_name.end() || (numel > 0 && it->second->offset != offset + numel)) {
        return Status::invalid_argument("graph parameter " + gp.name +
                                        " has no counterpart in the GPT model");
      }
      if (numel == 0) offset = it->second->offset;
      numel += it->second->numel;
      rows += it->second->shape[0];
    }
    if (names.empty()) {
      return Status::invalid_argument("graph parameter " + gp.name + " has no counterpart in the GPT model");
    }
    if (rows % tiles != 0) {
      return Status::invalid_argument("graph parameter " + gp.name + ": " + std::to_string(rows) +
                                      " rows do not split into " + std::to_string(tiles) + " tiles");
    }
    const std::size_t part = numel / static_cast<std::size_t>(tiles);
    if (static_cast<double>(part) != gp.elements) {
      return Status::invalid_argument("graph parameter " + gp.name + " has " + std::to_string(gp.elements) +
                                      " elements; the model's " + names.front() + " slice has " +
                                      std::to_string(part));
    }
    out.push_back({offset + static_cast<std::size_t>(tile) * part, part});
  }
  return out;
}

namespace {
// splitmix64: a counter-based generator, so element i's value does not depend on which elements a rank holds.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// A standard normal from two uniforms derived from (seed, i) (Box-Muller, in double).
float normal_at(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t a = mix(seed ^ mix(2 * i)), b = mix(seed ^ mix(2 * i + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53,
               u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
}  // namespace

void gpt_init_range(const GptConfig& c, float* out, std::size_t begin, std::size_t end, std::uint64_t seed) {
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
  for (const auto& t : gpt_param_layout(c)) {
    const std::size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const auto ends_with = [&](const char* s) {
      const std::string suffix(s);
      return t.name.size() >= suffix.size() &&
             t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    float* p = out + (lo - begin);
    if (ends_with("bias")) {
      std::fill(p, p + (hi - lo), 0.0f);
    } else if (t.shape.size() == 1 && !ends_with("sinks")) {  // a norm's weight: 1, or Gemma's 0 (it scales
                                                              // by 1 + weight); gpt-oss's sinks as weights
      std::fill(p, p + (hi - lo), c.norm_unit_offset ? 0.0f : 1.0f);
    } else {
      const float sd = !c.llama() && ends_with("c_proj.weight") ? proj_std : 0.02f;
      // Counter-based: element i depends on (seed, i) only, so the loop splits over threads freely.
#pragma omp parallel for schedule(static)
      for (std::size_t i = lo; i < hi; ++i) p[i - lo] = sd * normal_at(seed, i);
    }
  }
}

void gpt_init(const GptConfig& c, float* params, std::uint64_t seed) {
  gpt_init_range(c, params, 0, gpt_num_params(c), seed);
}

GptGraph make_gpt_graph(const GptConfig& c, int B, int T, int tiling, bool flash_attention) {
  MW_CHECK(validate(c, B, T).is_ok(), "GptModel: invalid configuration (call validate first)");
  MW_CHECK(validate_tiling(c, tiling).is_ok(), "GptModel: tiling must divide every linear's output rows");
  GraphOptions opt;
  opt.tiling = tiling;
  opt.micro_batch = B;
  opt.sequence_length = T;
  opt.element_bytes = 4;
  opt.flash_attention = flash_attention;
  GptGraph out;
  out.graph = build_model_graph(gpt_model_spec(c), opt);
  auto slices = map_graph_params(out.graph, c);
  MW_CHECK(slices.is_ok(), slices.status().message());
  out.slices = std::move(slices).value();
  const std::map<std::string, GptRole> roles = {{"ln1", GptRole::kLn1},
                                                {"qkv", GptRole::kQkv},
                                                {"qk_norm", GptRole::kQkNorm},
                                                {"attn", GptRole::kAttn},
                                                {"proj", GptRole::kProj},
                                                {"ln2", GptRole::kLn2},
                                                {"fc1", GptRole::kFc1},
                                                {"gelu", GptRole::kGelu},
                                                {"fc2", GptRole::kFc2},
                                                {"ln1_post", GptRole::kLn1Post},
                                                {"ln2_post", GptRole::kLn2Post},
                                                {"q_a", GptRole::kQA},
                                                {"q_a_norm", GptRole::kQANorm},
                                                {"q_b", GptRole::kQB},
                                                {"q", GptRole::kQB},
                                                {"kv_a", GptRole::kKvA},
                                                {"kv_a_norm", GptRole::kKvANorm},
                                                {"kv_b", GptRole::kKvB},
                                                {"mtp_enorm", GptRole::kMtpENorm},
                                                {"mtp_hnorm", GptRole::kMtpHNorm},
                                                {"mtp_eh_proj", GptRole::kMtpEhProj}};
  const std::map<std::string, GptRole> shared_roles = {{"shared.fc1", GptRole::kSharedFc1},
                                                       {"shared.gelu", GptRole::kSharedAct},
                                                       {"shared.fc2", GptRole::kSharedFc2},
                                                       {"shared_gate", GptRole::kSharedGate}};
  for (const auto& op : out.graph.ops) {
    GptOp o{GptRole::kEmbed, op.layer, op.tile, op.tiles};
    std::string name = op.name.substr(0, op.name.find('['));
    if (name == "embed") {
      o.role = GptRole::kEmbed;
    } else if (name == "embed_norm") {
      o.role = GptRole::kEmbedNorm;
    } else if (name == "final_norm") {
      o.role = GptRole::kFinalNorm;
    } else if (name == "lm_head") {
      o.role = GptRole::kHead;
    } else if (name == "loss") {
      o.role = GptRole::kLoss;
    } else if (name == "mtp0.norm" || name == "mtp0.lm_head" || name == "mtp0.loss") {
      o.role = name == "mtp0.norm"   ? GptRole::kMtpNorm
               : name == "mtp0.loss" ? GptRole::kMtpLoss
                                     : GptRole::kMtpHead;
    } else if (int e = -1, n = 0;
               std::sscanf(name.c_str() + name.find('.') + 1, "expert%d.%n", &e, &n) == 1 && n > 0) {
      const std::string stem = name.substr(name.find('.') + 1 + static_cast<std::size_t>(n));
      MW_CHECK(stem == "fc1" || stem == "gelu" || stem == "fc2", "GptModel: unexpected graph op " + op.name);
      o.role = stem == "fc1"    ? GptRole::kExpertFc1
               : stem == "gelu" ? GptRole::kExpertAct
                                : GptRole::kExpertFc2;
      o.expert = e;
    } else if (name.substr(name.find('.') + 1) == "router") {
      o.role = GptRole::kRouter;
    } else if (const auto shared = shared_roles.find(name.substr(name.find('.') + 1));
               shared != shared_roles.end()) {
      o.role = shared->second;
    } else {
      const auto it = roles.find(name.substr(name.find('.') + 1));
      MW_CHECK(it != roles.end(), "GptModel: unexpected graph op " + op.name);
      o.role = it->second;
    }
    out.ops.push_back(o);
  }
  return out;
}

namespace {
// GPT-2's linears and Qwen2's q, k, v have biases: [w, b] per matrix; the Llama shape's others [w], or
// [w0, w1] for two fused matrices.
bool linear_bias(const GptConfig& c, const GptOp& o) {
  if (o.role == GptRole::kHead || o.role == GptRole::kMtpHead) return c.head_bias();  // (Phi's, GPT-J's)
  if (!c.llama()) return o.role == GptRole::kQkv || o.role == GptRole::kProj ? c.attn_bias() : c.mlp_bias();
  if (o.role == GptRole::kQkv) return c.qkv_bias;
  // gpt-oss's o_proj, router and experts
  return c.gpt_oss && (o.role == GptRole::kProj || o.role == GptRole::kRouter ||
                       o.role == GptRole::kExpertFc1 || o.role == GptRole::kExpertFc2);
}
}  // namespace

bool is_linear(const GptOp& o) {
  return o.role == GptRole::kQkv || o.role == GptRole::kProj || o.role == GptRole::kFc1 ||
         o.role == GptRole::kFc2 || o.role == GptRole::kHead || o.role == GptRole::kRouter ||
         o.role == GptRole::kExpertFc1 || o.role == GptRole::kExpertFc2 || o.role == GptRole::kSharedFc1 ||
         o.role == GptRole::kSharedFc2 || o.role == GptRole::kSharedGate || o.role == GptRole::kQA ||
         o.role == GptRole::kQB || o.role == GptRole::kKvA || o.role == GptRole::kKvB ||
         o.role == GptRole::kMtpEhProj || o.role == GptRole::kMtpHead;
}

bool linear_weight(const GptConfig& c, const GptOp& o, int k) {
  // (the router's second parameter: GLM-4.5's correction bias, or gpt-oss's bias)
  if (o.role == GptRole::kRouter) return k == 0;
  return is_linear(o) && (!linear_bias(c, o) || k % 2 == 0);
}

int linear_parts(const GptConfig& c, const GptOp& o, const float* const* p, float* const* g,
                 LinearPart* parts, const std::uint16_t* const* p16) {
  const int C = c.channels;
  const bool bias = linear_bias(c, o);
  // The matrix whose weight is p[k] (and its bias p[k + 1]), rows from col0.
  const auto part = [&](int k, int col0, int rows) {
    return LinearPart{p[k],
                      bias ? p[k + 1] : nullptr,
                      g != nullptr ? g[k] : nullptr,
                      g != nullptr && bias ? g[k + 1] : nullptr,
                      col0,
                      rows,
                      p16 != nullptr ? p16[k] : nullptr};
  };
  const auto one = [&](int rows) {
    parts[0] = part(0, 0, rows);
    return 1;
  };
  const auto two = [&](int rows0, int rows1) {
    parts[0] = part(0, 0, rows0);
    parts[1] = part(bias ? 2 : 1, rows0, rows1);
    return 2;
  };
  switch (o.role) {
    case GptRole::kQkv:
      return c.split_qkv() ? two(c.q_width(), 2 * c.kv_width()) : one(c.qkv_width());
    case GptRole::kFc1:
      return c.llama() ? two(c.ffn_width(), c.ffn_width()) : one(c.ffn_width());
    case GptRole::kHead:  // the token embedding's rows when tied; a bias (Phi's) or not
    case GptRole::kMtpHead:
      return one(c.vocab);
    case GptRole::kRouter:
      return one(c.experts);
    case GptRole::kExpertFc1:
      return two(c.expert_width(), c.expert_width());
    case GptRole::kSharedFc1:
      return two(c.shared_ffn, c.shared_ffn);
    case GptRole::kSharedGate:
      return one(1);
    case GptRole::kQA:
      return one(c.q_lora);
    case GptRole::kQB:
      return one(c.q_width());
    case GptRole::kKvA:
      return one(c.kv_lora + c.rope_dim);
    case GptRole::kKvB:
      return one(c.kv_b_width());
    default:  // kProj, kFc2
      return one(C);
  }
}

GptModel::GptModel(const GptConfig& c, int B, int T, int tiling, bool flash_attention, int activation_slots)
    : c_(c),
      B_(B),
      T_(T),
      flash_(flash_attention),
      slots_(activation_slots > 0 ? std::min(activation_slots, c.layers) : c.layers) {
  GptGraph gg = make_gpt_graph(c, B, T, tiling, flash_attention);
  graph_ = std::move(gg.graph);
  slices_ = std::move(gg.slices);
  info_ = std::move(gg.ops);
  const std::size_t N = static_cast<std::size_t>(B) * T, C = static_cast<std::size_t>(c.channels);
  const auto Wq = static_cast<std::size_t>(c.qkv_width()), Wf = static_cast<std::size_t>(c.fc_width()),
             F = static_cast<std::size_t>(c.ffn_width()), Q = static_cast<std::size_t>(c.q_width());
  const std::size_t att = static_cast<std::size_t>(B) * c.heads * T * (flash_attention ? 1 : T);
  auto per_layer = [&](std::vector<std::vector<float>>& v, std::size_t n, int count) {
    v.assign(static_cast<std::size_t>(count), std::vector<float>(n));
  };
  // The residual stream at every layer boundary (the checkpoints); the rest of a layer's activations in one
  // of slots_ slots, layer l in slot l % slots_.
  // (With the next-token-prediction module one more: the main model's output, then its block's input.)
  per_layer(resid_, N * C, c.layers + 1 + c.mtp);
  const int S = slots_;
  for (auto* v : {&ln1_, &res1_, &ln2_}) per_layer(*v, N * C, S);
  per_layer(atty_, N * Q, S);
  for (auto* v : {&m1_, &r1_, &m2_, &r2_}) per_layer(*v, N, S);
  per_layer(qkv_, c.mla() ? 0 : N * Wq, S);  // (the latent attention keeps its own)
  if (c.out_norms()) {
    for (auto* v : {&ao_, &mo_}) per_layer(*v, N * C, S);
    for (auto* v : {&rao_, &rmo_}) per_layer(*v, N, S);
  }
  if (c.out_norms() || c.scaled_branches()) dpost_.resize(N * C);
  if (c.qk_norm) {
    per_layer(qkn_, N * Wq, S);
    per_layer(rqk_, N * static_cast<std::size_t>(c.heads + c.kv_head_count()), S);
    if (c.qk_layernorm) per_layer(mqk_, N * static_cast<std::size_t>(c.heads + c.kv_head_count()), S);
    dqkn_.resize(N * Wq);
  }
  per_layer(att_, att, S);
  per_layer(fc_, N * Wf, S);
  per_layer(gel_, N * F, S);
  lnf_.resize(N * C);
  mf_.resize(N);
  rf_.resize(N);
  logits_.resize(N * static_cast<std::size_t>(c.vocab));
  probs_.resize(logits_.size());
  if (c.mtp > 0) {
    for (auto* v : {&emb_next_, &mtpe_, &mtph_, &lnm_, &dmtp_, &dmain_, &dhalf_, &demb_next_})
      v->resize(N * C);
    for (auto* v : {&rmtpe_, &rmtph_, &rmn_}) v->resize(N);
    for (auto* v : {&ehin_, &dehin_}) v->resize(2 * N * C);
    logits2_.resize(logits_.size());
    probs2_.resize(logits_.size());
  }
  for (auto* v : {&dx_, &dres_, &dln_}) v->resize(N * C);
  datty_.resize(N * Q);
  dqkv_.resize(c.mla() ? 0 : N * Wq);
  if (c.mla()) {
    const auto ql = static_cast<std::size_t>(c.q_lora), kvl = static_cast<std::size_t>(c.kv_lora),
               kva = kvl + static_cast<std::size_t>(c.rope_dim),
               kvb = static_cast<std::size_t>(c.kv_b_width()),
               O = static_cast<std::size_t>(c.attn_out_width());
    if (ql > 0) {
      for (auto* v : {&qa_, &qan_}) per_layer(*v, N * ql, S);
      per_layer(rqa_, N, S);
      for (auto* v : {&dqa_, &dqan_}) v->resize(N * ql);
    }
    per_layer(q_, N * Q, S);
    per_layer(kva_, N * kva, S);
    per_layer(kvn_, N * kvl, S);
    per_layer(rkv_, N, S);
    per_layer(kvb_, N * kvb, S);
    per_layer(atto_, N * O, S);
    for (auto* v : {&kvc_, &dkvc_, &dkvn_}) v->resize(N * kvl);
    dq_.resize(N * Q);
    dkva_.resize(N * kva);
    dkvb_.resize(N * kvb);
    datto_.resize(N * O);
  }
  dfc_.resize(N * Wf);
  dgel_.resize(N * F);
  dlogits_.resize(logits_.size());
  if (c.expanded_attention()) {
    qf_.resize(N * 3 * Q);
    dqf_.resize(N * 3 * Q);
  }
  if (c.qk_l2_norm) qkr_.resize(N * 2 * static_cast<std::size_t>(c.heads));
  temper_ = c.query_temperatures(T);
  if (c.rotary()) gpt_rope_tables(c, T, rope_cos_, rope_sin_);
  if (c.moe()) {
    const auto E = static_cast<std::size_t>(c.experts), K = static_cast<std::size_t>(c.experts_per_token);
    router_ = MoeRouter(c, B, T, S);
    const auto FE = static_cast<std::size_t>(c.expert_width()),
               Fmax = std::max<std::size_t>(FE, c.shared_ffn);
    per_layer(efc_, N * K * 2 * FE, S);
    per_layer(egel_, N * K * FE, S);
    per_layer(eout_, N * K * C, S);
    // (scratch for one expert's rows, at most N: reserved so that it never reallocates)
    for (auto* v : {&ein_, &dein_, &dy_}) v->reserve(N * C);
    degel_.reserve(N * Fmax);
    defc_.reserve(N * 2 * Fmax);
    for (auto* v : {&rlogit_, &drlogit_}) v->resize(N * E);
    drw_.resize(N * K);
    if (c.shared_ffn > 0) {
      const auto Fs = static_cast<std::size_t>(c.shared_ffn);
      per_layer(sfc_, N * 2 * Fs, S);
      per_layer(sgel_, N * Fs, S);
      per_layer(sout_, N * C, S);
      per_layer(sgate_, N, S);
      dsout_.resize(N * C);
      glogit_.resize(N);
    }
  }
  if (c.bloom) {
    for (auto* v : {&emb_, &demb_}) v->resize(N * C);
    for (auto* v : {&me_, &re_}) v->resize(N);
  }
}

void GptModel::set_batch(const int* tokens, const int* targets) {
  const auto n = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_);
  tokens_.assign(tokens, tokens + n);
  targets_.assign(targets, targets + n);
}

void GptModel::params_of(int op, const float* base, float* gbase, std::vector<const float*>& p,
                         std::vector<float*>& g) const {
  p.clear();
  g.clear();
  for (int id : graph_.ops[static_cast<std::size_t>(op)].params) {
    const auto off = slices_[static_cast<std::size_t>(id)].offset;
    p.push_back(base + off);
    g.push_back(gbase != nullptr ? gbase + off : nullptr);
  }
}

float GptModel::forward(const float* params, const int* tokens, const int* targets) {
  MW_CHECK(slots_ >= c_.layers, "GptModel: whole passes keep every layer's activations; this model keeps " +
                                    std::to_string(slots_) + " of " + std::to_string(c_.layers));
  set_batch(tokens, targets);
  for (int op = 0; op < static_cast<int>(graph_.ops.size()); ++op) {
    params_of(op, params, nullptr, p_, g_);
    forward_op(op, p_.data());
  }
  return loss_;
}

void GptModel::backward(const float* params, float* grads) {
  MW_CHECK(slots_ >= c_.layers, "GptModel: whole passes keep every layer's activations");
  for (int op = static_cast<int>(graph_.ops.size()) - 1; op >= 0; --op) {
    params_of(op, params, grads, p_, g_);
    backward_op(op, p_.data(), g_.data());
  }
}

void GptModel::mm_forward(float* out, const float* in, const float* w, const float* b, int N, int IC, int OC,
                          int ld_out, bool cast_in, const std::uint16_t* w16) {
  if (!bf16_) {
    k::matmul_forward(out, in, w, b, N, IC, OC, ld_out);
    return;
  }
  k::matmul_forward_bf16(out, in16_.data(), bf16_operands(in, w, w16, N, IC, OC, cast_in), b, N, IC, OC,
                         ld_out);
}

const std::uint16_t* GptModel::bf16_operands(const float* in, const float* w, const std::uint16_t* w16, int N,
                                             int IC, int OC, bool cast_in) {
  if (cast_in) {
    const auto n_in = static_cast<std::size_t>(N) * static_cast<std::size_t>(IC);
    in16_.resize(n_in);
    k::cast_f32_to_bf16(in, in16_.data(), n_in);
  }
  if (w16 != nullptr) return w16;
  const auto n_w = static_cast<std::size_t>(OC) * static_cast<std::size_t>(IC);
  w16_.resize(n_w);
  k::cast_f32_to_bf16(w, w16_.data(), n_w);
  return w16_.data();
}

void GptModel::mm_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                           const float* w, int N, int IC, int OC, int ld_dout, bool cast_in,
                           const std::uint16_t* w16) {
  if (!bf16_) {
    k::matmul_backward(din, dw, db, dout, in, w, N, IC, OC, ld_dout);
    return;
  }
  const std::uint16_t* weight = bf16_operands(in, w, w16, N, IC, OC, cast_in);
  const auto rows = static_cast<std::size_t>(N), cols = static_cast<std::size_t>(OC);
  dout16_.resize(rows * cols);
  if (ld_dout == 0 || ld_dout == OC) {
    k::cast_f32_to_bf16(dout, dout16_.data(), rows * cols);
  } else {  // OC columns of a wider array, row by row into a dense copy
    for (std::size_t r = 0; r < rows; ++r)
      k::cast_f32_to_bf16(dout + r * static_cast<std::size_t>(ld_dout), dout16_.data() + r * cols, cols);
  }
  k::matmul_backward_bf16(din, dw, db, dout, dout16_.data(), in16_.data(), weight, N, IC, OC, ld_dout);
}

// out[:, this tile's columns of each part] (row stride out_width) = in . w^T + b (+ residual there): each
// part's GEMM writes its columns in place (the input cast to bf16 once for all parts).
void GptModel::linear_forward(float* out, int out_width, const float* in, int in_width, const Part* parts,
                              int n, const OpInfo& o, const float* residual, int rows_in) {
  const int N = rows_in > 0 ? rows_in : B_ * T_;
  const auto rows = static_cast<std::size_t>(N), width = static_cast<std::size_t>(out_width);
  for (int k = 0; k < n; ++k) {
    const Part& pt = parts[k];
    const int cols = pt.rows / o.tiles, col0 = pt.col0 + o.tile * cols;
    mm_forward(out + col0, in, pt.w, pt.b, N, in_width, cols, out_width, k == 0, pt.w16);
    if (residual == nullptr) continue;
    const auto s = static_cast<float>(c_.residual_multiplier);  // (Granite's; else 1)
    if (cols == out_width) {
      for (std::size_t j = 0; j < rows * width; ++j) out[j] = s * out[j] + residual[j];
      continue;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      float* dst = out + r * width + static_cast<std::size_t>(col0);
      const float* add = residual + r * width + static_cast<std::size_t>(col0);
      for (int j = 0; j < cols; ++j) dst[j] = s * dst[j] + add[j];
    }
  }
}

// din += dout[:, cols] . w; dw += dout[:, cols]^T . in; db += column sums; for each part, dout read in place.
void GptModel::linear_backward(float* din, const float* dout, int out_width, const float* in, int in_width,
                               const Part* parts, int n, const OpInfo& o, int rows) {
  const int N = rows > 0 ? rows : B_ * T_;
  for (int k = 0; k < n; ++k) {
    const Part& pt = parts[k];
    const int cols = pt.rows / o.tiles, col0 = pt.col0 + o.tile * cols;
    mm_backward(din, pt.dw, pt.db, dout + col0, in, pt.w, N, in_width, cols, out_width, k == 0, pt.w16);
  }
}

void GptModel::expand_qkv(const float* qkv, int layer) {
  const int N = B_ * T_, Q = c_.q_width();
  k::repeat_kv(qf_.data(), qkv, N, Q, c_.heads, c_.kv_head_count());
  temper_queries(qf_.data(), layer);
  if (!c_.rotary_at(layer)) return;  // (GPT-BigCode's learned positions, Cohere2's global layers)
  // q and k: 2 x heads heads of hs from the start of each 3Q row.
  const std::size_t at = c_.rope_table_offset(layer, T_);
  k::rope_apply(qf_.data(), B_, T_, 3 * Q, 2 * c_.heads, c_.head_size(), rope_cos_.data() + at,
                rope_sin_.data() + at, false, c_.rotary_dim(), c_.rope_pairs());
  if (c_.l2_norm_at(layer)) {  // (Llama 4's, after the turn)
    k::l2_norm_heads(qf_.data(), qkr_.data(), N, 3 * Q, 2 * c_.heads, c_.head_size(),
                     static_cast<float>(c_.norm_eps));
  }
}

void GptModel::collapse_dqkv(int layer) {
  const int N = B_ * T_, Q = c_.q_width();
  const std::size_t at = c_.rope_table_offset(layer, T_);
  if (c_.l2_norm_at(layer))  // (qf_ holds the normed heads expand_qkv left)
    k::l2_norm_heads_backward(dqf_.data(), qf_.data(), qkr_.data(), N, 3 * Q, 2 * c_.heads, c_.head_size());
  if (c_.rotary_at(layer)) {
    k::rope_apply(dqf_.data(), B_, T_, 3 * Q, 2 * c_.heads, c_.head_size(), rope_cos_.data() + at,
                  rope_sin_.data() + at, true, c_.rotary_dim(), c_.rope_pairs());
  }
  temper_queries(dqf_.data(), layer);
  k::sum_kv(dqkv_.data(), dqf_.data(), N, Q, c_.heads, c_.kv_head_count());
}

void GptModel::temper_queries(float* rows, int layer) const {
  if (!c_.tempered(layer)) return;
  k::scale_rows_by_position(rows, B_ * T_, T_, 3 * c_.q_width(), c_.q_width(), temper_.data());
}

double latent_query_scale(int head_dim, const RopeScaling& rs) {
  // (DeepseekV3Attention's softmax_scale: head_dim^-1/2 x mscale^2, so query_scale = head_dim / mscale^4)
  if (rs.type != "yarn" || !(rs.mscale_all_dim > 0) || !(rs.factor > 1)) return 0;
  const double ms = 0.1 * rs.mscale_all_dim * std::log(rs.factor) + 1.0;
  return head_dim / (ms * ms * ms * ms);
}

void mla_values(const GptConfig& c, int N, float* wide, float* narrow, bool to_narrow) {
  const std::size_t rows = static_cast<std::size_t>(N) * static_cast<std::size_t>(c.heads);
  if (to_narrow) {
    k::narrow_heads(narrow, wide, rows, c.head_size(), c.v_dim);
  } else {
    k::widen_heads(wide, narrow, rows, c.head_size(), c.v_dim);
  }
}

void GptModel::assemble_mla(std::size_t a, int layer) {
  const auto Q = static_cast<std::size_t>(c_.q_width());
  k::mla_assemble(qf_.data(), q_[a].data(), kva_[a].data(), kvb_[a].data(), B_ * T_, c_.heads, c_.head_size(),
                  c_.rope_dim, c_.v_dim, c_.kv_lora);
  const std::size_t at = c_.rope_table_offset(layer, T_);
  k::rope_apply(qf_.data(), B_, T_, 3 * static_cast<int>(Q), 2 * c_.heads, c_.head_size(),
                rope_cos_.data() + at, rope_sin_.data() + at, false, c_.rope_dim, c_.rope_pairs());
}

void GptModel::scatter_mla(int layer) {
  const int Q = c_.q_width();
  const std::size_t at = c_.rope_table_offset(layer, T_);
  k::rope_apply(dqf_.data(), B_, T_, 3 * Q, 2 * c_.heads, c_.head_size(), rope_cos_.data() + at,
                rope_sin_.data() + at, true, c_.rope_dim, c_.rope_pairs());
  k::mla_scatter(dq_.data(), dkva_.data(), dkvb_.data(), dqf_.data(), B_ * T_, c_.heads, c_.head_size(),
                 c_.rope_dim, c_.v_dim, c_.kv_lora);
}

namespace {
// Columns [col0, col0 + width) of each of n rows of `stride` floats in `src` into dst [n][width], or (back)
// src [n][width] into those columns of dst's rows.
void copy_columns(float* dst, const float* src, int n, int stride, int col0, int width) {
  for (int r = 0; r < n; ++r) {
    std::copy_n(src + static_cast<std::size_t>(r) * static_cast<std::size_t>(stride) + col0, width,
                dst + static_cast<std::size_t>(r) * static_cast<std::size_t>(width));
  }
}
void uncopy_columns(float* dst, const float* src, int n, int stride, int col0, int width) {
  for (int r = 0; r < n; ++r) {
    std::copy_n(src + static_cast<std::size_t>(r) * static_cast<std::size_t>(width), width,
                dst + static_cast<std::size_t>(r) * static_cast<std::size_t>(stride) + col0);
  }
}

}  // namespace

void GptModel::norm_forward(float* out, float* mean, float* rstd, const float* in, const float* const* p) {
  const int N = B_ * T_, C = c_.channels;
  if (c_.rms_norm()) {
    k::rmsnorm_forward(out, rstd, in, p[0], N, C, static_cast<float>(c_.norm_eps), c_.norm_offset());
  } else {  // (OLMo's: no weight or bias)
    k::layernorm_forward(out, mean, rstd, in, c_.norm_params ? p[0] : nullptr,
                         c_.norm_bias() ? p[1] : nullptr, N, C, c_.norm_offset());
  }
}

void GptModel::norm_backward(float* din, float* const* g, const float* dout, const float* in,
                             const float* const* p, const float* mean, const float* rstd) {
  const int N = B_ * T_, C = c_.channels;
  if (c_.rms_norm()) {
    k::rmsnorm_backward(din, g[0], dout, in, p[0], rstd, N, C, c_.norm_offset());
  } else {
    k::layernorm_backward(din, c_.norm_params ? g[0] : nullptr, c_.norm_bias() ? g[1] : nullptr, dout, in,
                          c_.norm_params ? p[0] : nullptr, mean, rstd, N, C, c_.norm_offset());
  }
}

// Granite's: the gradient of a sublayer's output, residual_multiplier x the residual stream's (dpost_).
void GptModel::scale_branch(const std::vector<float>& d) {
  const auto s = static_cast<float>(c_.residual_multiplier);
  for (std::size_t i = 0; i < d.size(); ++i) dpost_[i] = s * d[i];
}

// Gemma 2's norm of a sublayer's output, then the residual add: out = residual + rmsnorm(in).
void GptModel::post_norm_forward(float* out, const float* residual, const float* in, float* rstd,
                                 const float* const* p) {
  norm_forward(out, nullptr, rstd, in, p);
  const std::size_t n = static_cast<std::size_t>(B_) * T_ * static_cast<std::size_t>(c_.channels);
  for (std::size_t i = 0; i < n; ++i) out[i] += residual[i];
}

void GptModel::route(std::size_t l, std::size_t a, const float* bias) {
  router_.route(l, a, rlogit_.data(), bias);
  // The experts add their weighted outputs to the attention's residual sum.
  std::copy(res1_[a].begin(), res1_[a].end(), resid_[rin(l) + 1].begin());
}

float* GptModel::expert_rows(std::vector<std::vector<float>>& v, std::size_t a, std::size_t e,
                             std::size_t width) {
  return v[a].data() + router_.first(a, e) * width;
}

void GptModel::gather_expert_input(std::size_t a, int e, const float* src) {
  const auto& rows = router_.rows(a, static_cast<std::size_t>(e));
  ein_.resize(rows.size() * static_cast<std::size_t>(c_.channels));
  // (Llama 4's: the weight scales the input)
  k::gather_rows(ein_.data(), src, rows.data(), c_.llama4 ? router_.weights(a) : nullptr,
                 static_cast<int>(rows.size()), c_.channels, c_.experts_per_token);
}

bool GptModel::bf16_weight(int op, int k) const {
  return bf16_ && linear_weight(c_, info_[static_cast<std::size_t>(op)], k);
}

void GptModel::forward_op(int op, const float* const* p, const std::uint16_t* const* p16) {
  const OpInfo& o = info_[static_cast<std::size_t>(op)];
  const int N = B_ * T_, C = c_.channels, F = c_.ffn_width(), Q = c_.q_width();
  const auto l = static_cast<std::size_t>(std::max(0, std::min(o.layer, c_.layers - 1)));
  const std::size_t a = l % static_cast<std::size_t>(slots_);  // the layer's activation slot
  const std::size_t ri = rin(l);                               // the layer's input in the residual stream
  Part parts[2];
  const auto linear = [&](float* out, int out_width, const float* in, int in_width, const float* residual,
                          int rows = 0) {
    const int n = linear_parts(c_, o, p, nullptr, parts, bf16_ ? p16 : nullptr);
    linear_forward(out, out_width, in, in_width, parts, n, o, residual, rows);
  };
  const auto e = static_cast<std::size_t>(std::max(0, o.expert));
  const int routed = c_.moe() && o.expert >= 0 ? static_cast<int>(router_.rows(a, e).size()) : 0;
  const int FE = c_.expert_width();
  // (Granite MoE's residual_multiplier on the experts' sum; else 1)
  const auto branch = static_cast<float>(c_.residual_multiplier);
  switch (o.role) {
    case Role::kEmbed:  // (BLOOM's goes through its norm, kEmbedNorm, into the residual stream)
      k::embedding_forward(c_.bloom ? emb_.data() : resid_[0].data(), tokens_.data(), p[0],
                           c_.learned_positions() ? p[1] + c_.position0() : nullptr, B_, T_, C,
                           c_.embedding_scale());
      if (c_.mtp > 0) {  // each position's next token (its target), for the next-token-prediction module
        k::embedding_forward(emb_next_.data(), targets_.data(), p[0], nullptr, B_, T_, C,
                             c_.embedding_scale());
      }
      break;
    case Role::kEmbedNorm:
      k::layernorm_forward(resid_[0].data(), me_.data(), re_.data(), emb_.data(), p[0], p[1], N, C);
      break;
    case Role::kLn1:
      norm_forward(ln1_[a].data(), m1_[a].data(), r1_[a].data(), resid_[ri].data(), p);
      break;
    case Role::kQkv:
      linear(qkv_[a].data(), c_.qkv_width(), attn_input(l, a), C, nullptr);
      if (c_.clip_qkv > 0) {
        k::clamp_forward(qkv_[a].data(),
                         static_cast<std::size_t>(N) * static_cast<std::size_t>(c_.qkv_width()),
                         static_cast<float>(c_.clip_qkv));
      }
      break;
    case Role::kQkNorm:
      if (c_.qk_layernorm) {  // StableLM 2 12B's
        k::head_layernorm_forward(qkn_[a].data(), mqk_[a].data(), rqk_[a].data(), qkv_[a].data(), p[0], N,
                                  c_.qkv_width(), c_.heads + c_.kv_head_count(), c_.head_size(),
                                  static_cast<float>(c_.norm_eps));
        break;
      }
      k::head_rmsnorm_forward(qkn_[a].data(), rqk_[a].data(), qkv_[a].data(), p[0], N, c_.qkv_width(),
                              c_.qk_norm_heads(), c_.qk_norm_kv_heads(), c_.qk_norm_width(),
                              c_.qk_norm_kv_width(), static_cast<float>(c_.norm_eps), c_.norm_offset());
      break;
    case Role::kAttn: {
      const float* qkv = (c_.qk_norm ? qkn_ : qkv_)[a].data();
      if (c_.mla()) {
        assemble_mla(a, o.layer);
        qkv = qf_.data();
      } else if (c_.expanded_attention()) {
        expand_qkv(qkv, o.layer);
        qkv = qf_.data();
      }
      const float* sinks = c_.gpt_oss ? p[0] : nullptr;  // (gpt-oss's sink logits)
      if (flash_) {
        k::flash_attention_forward(atty_[a].data(), att_[a].data(), qkv, B_, T_, Q, c_.heads,
                                   c_.attention_span(l), c_.score_scale(), c_.score_cap(), c_.alibi_scale(),
                                   sinks, attention_values());
      } else {
        k::attention_forward(atty_[a].data(), att_[a].data(), qkv, B_, T_, Q, c_.heads, c_.attention_span(l),
                             c_.score_scale(), c_.score_cap(), c_.alibi_scale(), sinks, attention_values());
      }
      if (c_.mla()) mla_values(c_, N, atty_[a].data(), atto_[a].data(), true);
      break;
    }
    case Role::kProj:  // the residual added here, or (out_norms) after the output's norm
      if (c_.out_norms()) {
        linear(ao_[a].data(), C, attn_output(a), c_.attn_out_width(), nullptr);
      } else {
        linear(res1_[a].data(), C, attn_output(a), c_.attn_out_width(), resid_[ri].data());
      }
      break;
    case Role::kQA:
      linear(qa_[a].data(), c_.q_lora, attn_input(l, a), C, nullptr);
      break;
    case Role::kQANorm:
      k::rmsnorm_forward(qan_[a].data(), rqa_[a].data(), qa_[a].data(), p[0], N, c_.q_lora,
                         GptConfig::kLatentNormEps);
      break;
    case Role::kQB:  // (q_proj without a query latent)
      if (c_.q_lora > 0) {
        linear(q_[a].data(), Q, qan_[a].data(), c_.q_lora, nullptr);
      } else {
        linear(q_[a].data(), Q, attn_input(l, a), C, nullptr);
      }
      break;
    case Role::kKvA:
      linear(kva_[a].data(), c_.kv_lora + c_.rope_dim, attn_input(l, a), C, nullptr);
      break;
    case Role::kKvANorm:  // the latent's first kv_lora columns (the rest: the rotary key part)
      copy_columns(kvc_.data(), kva_[a].data(), N, c_.kv_lora + c_.rope_dim, 0, c_.kv_lora);
      k::rmsnorm_forward(kvn_[a].data(), rkv_[a].data(), kvc_.data(), p[0], N, c_.kv_lora,
                         GptConfig::kLatentNormEps);
      break;
    case Role::kKvB:
      linear(kvb_[a].data(), c_.kv_b_width(), kvn_[a].data(), c_.kv_lora, nullptr);
      break;
    case Role::kLn1Post:
      post_norm_forward(res1_[a].data(), resid_[ri].data(), ao_[a].data(), rao_[a].data(), p);
      break;
    case Role::kLn2:  // the attention's output added, or (parallel_residual) the block's input
      norm_forward(ln2_[a].data(), m2_[a].data(), r2_[a].data(), mlp_input(l, a), p);
      break;
    case Role::kFc1:
      linear(fc_[a].data(), c_.fc_width(), fc1_input(a), C, nullptr);
      break;
    case Role::kGelu:
      if (c_.gelu_mlp) {
        k::geglu_forward(gel_[a].data(), fc_[a].data(), N, F);
      } else if (c_.llama()) {
        k::swiglu_forward(gel_[a].data(), fc_[a].data(), N, F);
      } else if (c_.opt) {
        k::relu_forward(gel_[a].data(), fc_[a].data(), gel_[a].size());
      } else if (c_.nemotron) {
        k::relu2_forward(gel_[a].data(), fc_[a].data(), gel_[a].size());
      } else if (c_.exact_gelu) {
        k::gelu_exact_forward(gel_[a].data(), fc_[a].data(), gel_[a].size());
      } else {
        k::gelu_forward(gel_[a].data(), fc_[a].data(), gel_[a].size());
      }
      break;
    case Role::kFc2:
      if (c_.out_norms()) {
        linear(mo_[a].data(), C, gel_[a].data(), F, nullptr);
      } else {
        linear(resid_[ri + 1].data(), C, gel_[a].data(), F, res1_[a].data());
      }
      break;
    case Role::kLn2Post:
      post_norm_forward(resid_[ri + 1].data(), res1_[a].data(), mo_[a].data(), rmo_[a].data(), p);
      break;
    case Role::kRouter:
      linear(rlogit_.data(), c_.experts, fc1_input(a), C, nullptr);
      route(l, a, c_.sigmoid_routing ? p[1] : nullptr);  // (GLM-4.5's correction bias)
      break;
    case Role::kExpertFc1:
      if (routed == 0) break;
      gather_expert_input(a, o.expert, fc1_input(a));
      linear(expert_rows(efc_, a, e, 2 * FE), 2 * FE, ein_.data(), C, nullptr, routed);
      break;
    case Role::kExpertAct:
      if (routed == 0) break;
      if (c_.gpt_oss) {
        k::clamped_swiglu_forward(expert_rows(egel_, a, e, FE), expert_rows(efc_, a, e, 2 * FE), routed, FE,
                                  GptConfig::kSwigluAlpha, static_cast<float>(c_.swiglu_limit));
      } else {
        k::swiglu_forward(expert_rows(egel_, a, e, FE), expert_rows(efc_, a, e, 2 * FE), routed, FE);
      }
      break;
    case Role::kExpertFc2: {  // its output, kept for the routing weight's gradient, weighted into the block's
      if (routed == 0) break;
      linear(expert_rows(eout_, a, e, C), C, expert_rows(egel_, a, e, FE), FE, nullptr, routed);
      // (Llama 4's weighted the input)
      k::scatter_add_rows(resid_[ri + 1].data(), expert_rows(eout_, a, e, C), router_.rows(a, e).data(),
                          c_.llama4 ? nullptr : router_.weights(a), branch, routed, C, c_.experts_per_token);
      break;
    }
    case Role::kSharedFc1:
      linear(sfc_[a].data(), 2 * c_.shared_ffn, fc1_input(a), C, nullptr);
      break;
    case Role::kSharedAct:
      k::swiglu_forward(sgel_[a].data(), sfc_[a].data(), N, c_.shared_ffn);
      break;
    case Role::kSharedFc2:  // (GLM-4.5's, without a gate, added to the block's output here)
      linear(sout_[a].data(), C, sgel_[a].data(), c_.shared_ffn, nullptr);
      if (!c_.shared_gate) {
        float* dst = resid_[ri + 1].data();
        const float* y = sout_[a].data();
        for (std::size_t i = 0; i < resid_[ri + 1].size(); ++i) dst[i] += branch * y[i];
      }
      break;
    case Role::kSharedGate: {  // sigmoid(gate . x) times the shared expert's output, added to the block's
      linear(glogit_.data(), 1, fc1_input(a), C, nullptr);
      k::gated_add_forward(resid_[ri + 1].data(), sgate_[a].data(), glogit_.data(), sout_[a].data(), branch,
                           N, C);
      break;
    }
    case Role::kFinalNorm:  // (the main model's output: before the next-token-prediction module's)
      norm_forward(lnf_.data(), mf_.data(), rf_.data(),
                   resid_[static_cast<std::size_t>(c_.main_layers())].data(), p);
      break;
    case Role::kMtpENorm:  // the next tokens' embedding, normed (RMSNorms: no means)
      norm_forward(mtpe_.data(), nullptr, rmtpe_.data(), emb_next_.data(), p);
      break;
    case Role::kMtpHNorm:  // the main model's output, normed
      norm_forward(mtph_.data(), nullptr, rmtph_.data(), resid_[ri - 1].data(), p);
      break;
    case Role::kMtpEhProj:  // [enorm | hnorm] projected: the module's block input
      uncopy_columns(ehin_.data(), mtpe_.data(), N, 2 * C, 0, C);
      uncopy_columns(ehin_.data(), mtph_.data(), N, 2 * C, C, C);
      linear(resid_[ri].data(), C, ehin_.data(), 2 * C, nullptr);
      break;
    case Role::kMtpNorm:  // the module's output (the stream's last), through its own norm
      norm_forward(lnm_.data(), nullptr, rmn_.data(), resid_.back().data(), p);
      break;
    case Role::kMtpLoss: {  // position t of each sequence predicts target t + 1 (the token after the next)
      mtp_loss_ = 0;
      if (T_ < 2) break;
      const auto V = static_cast<std::size_t>(c_.vocab), T = static_cast<std::size_t>(T_);
      for (std::size_t b = 0; b < static_cast<std::size_t>(B_); ++b) {
        mtp_loss_ += static_cast<double>(
                         k::crossentropy_forward(probs2_.data() + b * T * V, logits2_.data() + b * T * V,
                                                 targets_.data() + b * T + 1, T_ - 1, c_.vocab)) /
                     B_;
      }
      loss_ += static_cast<float>(c_.mtp_weight * mtp_loss_);
      break;
    }
    case Role::kHead:  // the token embedding's rows when tied (kMtpHead: the module's, the same weights)
    case Role::kMtpHead:
      linear((o.role == Role::kHead ? logits_ : logits2_).data(), c_.vocab,
             (o.role == Role::kHead ? lnf_ : lnm_).data(), C, nullptr);
      break;
    case Role::kLoss:  // Cohere and Granite scale the logits, Gemma 2 caps them first (in place: backward
                       // takes the cap's derivative from them)
      if (c_.logit_scale != 1)
        k::scale_values(logits_.data(), logits_.size(), static_cast<float>(c_.logit_scale));
      if (c_.final_softcap > 0)
        k::softcap_forward(logits_.data(), logits_.size(), static_cast<float>(c_.final_softcap));
      loss_ = k::crossentropy_forward(probs_.data(), logits_.data(), targets_.data(), N, c_.vocab);
      router_.add_losses(loss_);
      break;
  }
}

void GptModel::backward_op(int op, const float* const* p, float* const* g, const std::uint16_t* const* p16) {
  const OpInfo& o = info_[static_cast<std::size_t>(op)];
  const int N = B_ * T_, C = c_.channels, F = c_.ffn_width(), Q = c_.q_width();
  const auto l = static_cast<std::size_t>(std::max(0, std::min(o.layer, c_.layers - 1)));
  const std::size_t a = l % static_cast<std::size_t>(slots_);  // the layer's activation slot
  const std::size_t ri = rin(l);                               // the layer's input in the residual stream
  const auto zero = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); };
  // Backward visits the tiles of a linear last-first: the first visit starts the input gradient.
  const bool first_tile = o.tile == o.tiles - 1;
  Part parts[2];
  const auto linear = [&](float* din, const float* dout, int out_width, const float* in, int in_width,
                          int rows = 0) {
    const int n = linear_parts(c_, o, p, g, parts, bf16_ ? p16 : nullptr);
    linear_backward(din, dout, out_width, in, in_width, parts, n, o, rows);
  };
  const auto e = static_cast<std::size_t>(std::max(0, o.expert));
  const int routed = c_.moe() && o.expert >= 0 ? static_cast<int>(router_.rows(a, e).size()) : 0;
  const int FE = c_.expert_width();
  // (Granite MoE's residual_multiplier on the experts' sum; else 1)
  const auto branch = static_cast<float>(c_.residual_multiplier);
  const auto W = static_cast<std::size_t>(C);
  // A mixture of experts' first op backward: the block's residual branch, no gradients at its input yet.
  const auto moe_block_backward = [&] {
    dres_ = dx_;
    zero(dln_);
    zero(drw_);
  };
  switch (o.role) {
    case Role::kLoss:
      zero(dlogits_);
      k::crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(), N, c_.vocab);
      if (c_.final_softcap > 0) {
        k::softcap_backward(dlogits_.data(), logits_.data(), dlogits_.size(),
                            static_cast<float>(c_.final_softcap));
      }
      if (c_.logit_scale != 1)
        k::scale_values(dlogits_.data(), dlogits_.size(), static_cast<float>(c_.logit_scale));
      break;
    case Role::kHead:
    case Role::kMtpHead:  // (the module's loss backward has just written dlogits_)
      if (first_tile) zero(dln_);
      linear(dln_.data(), dlogits_.data(), c_.vocab, (o.role == Role::kHead ? lnf_ : lnm_).data(), C);
      break;
    case Role::kFinalNorm:
      zero(dx_);
      norm_backward(dx_.data(), g, dln_.data(), resid_[static_cast<std::size_t>(c_.main_layers())].data(), p,
                    mf_.data(), rf_.data());
      if (c_.mtp > 0) {  // the module's block backward next: its output's gradient; the main output's aside
        dmain_ = dx_;
        dx_ = dmtp_;
      }
      break;
    case Role::kMtpLoss: {  // mtp_weight x the mean over the B x (T - 1) predicting positions
      zero(dlogits_);
      if (T_ < 2) break;
      const auto V = static_cast<std::size_t>(c_.vocab), T = static_cast<std::size_t>(T_);
      for (std::size_t b = 0; b < static_cast<std::size_t>(B_); ++b) {
        k::crossentropy_backward(dlogits_.data() + b * T * V, probs2_.data() + b * T * V,
                                 targets_.data() + b * T + 1, T_ - 1, c_.vocab);
      }
      k::scale_values(dlogits_.data(), dlogits_.size(), static_cast<float>(c_.mtp_weight / B_));
      break;
    }
    case Role::kMtpNorm:
      zero(dmtp_);
      norm_backward(dmtp_.data(), g, dln_.data(), resid_.back().data(), p, nullptr, rmn_.data());
      break;
    case Role::kMtpEhProj:  // dx_: the block input's gradient
      if (first_tile) zero(dehin_);
      linear(dehin_.data(), dx_.data(), C, ehin_.data(), 2 * C);
      break;
    case Role::kMtpHNorm:  // into the main model's output's gradient, which the main blocks' backward takes
      copy_columns(dhalf_.data(), dehin_.data(), N, 2 * C, C, C);
      norm_backward(dmain_.data(), g, dhalf_.data(), resid_[ri - 1].data(), p, nullptr, rmtph_.data());
      dx_ = dmain_;
      break;
    case Role::kMtpENorm:  // into the next tokens' embedding's gradient (added to the table's at the
                           // embedding)
      copy_columns(dhalf_.data(), dehin_.data(), N, 2 * C, 0, C);
      zero(demb_next_);
      norm_backward(demb_next_.data(), g, dhalf_.data(), emb_next_.data(), p, nullptr, rmtpe_.data());
      break;
    case Role::kLn2Post:  // dx_: the residual stream's gradient, its branch and the normed output's
      dres_ = dx_;
      zero(dpost_);
      norm_backward(dpost_.data(), g, dx_.data(), mo_[a].data(), p, nullptr, rmo_[a].data());
      break;
    case Role::kFc2:
      if (first_tile) {
        zero(dgel_);
        if (!c_.out_norms()) dres_ = dx_;  // the MLP's residual branch
        if (c_.scaled_branches()) scale_branch(dx_);
      }
      linear(dgel_.data(), (c_.out_norms() || c_.scaled_branches() ? dpost_ : dx_).data(), C, gel_[a].data(),
             F);
      break;
    case Role::kSharedGate: {
      moe_block_backward();
      // The gated output's gradients: s dx at the shared expert's output, s (1 - s) dx . output at the logit.
      k::gated_add_backward(dsout_.data(), glogit_.data(), dx_.data(), sout_[a].data(), sgate_[a].data(),
                            branch, N, C);
      linear(dln_.data(), glogit_.data(), 1, fc1_input(a), C);
      break;
    }
    case Role::kSharedFc2:
      if (!c_.shared_gate) {  // the block's first op backward: the output's gradient as it is
        moe_block_backward();
        dsout_ = dx_;
        if (branch != 1) k::scale_values(dsout_.data(), dsout_.size(), branch);
      }
      degel_.assign(static_cast<std::size_t>(N) * static_cast<std::size_t>(c_.shared_ffn), 0.0f);
      linear(degel_.data(), dsout_.data(), C, sgel_[a].data(), c_.shared_ffn);
      break;
    case Role::kSharedAct:
      defc_.assign(static_cast<std::size_t>(N) * 2 * static_cast<std::size_t>(c_.shared_ffn), 0.0f);
      k::swiglu_backward(defc_.data(), sfc_[a].data(), degel_.data(), N, c_.shared_ffn);
      break;
    case Role::kSharedFc1:
      linear(dln_.data(), defc_.data(), 2 * c_.shared_ffn, fc1_input(a), C);
      break;
    case Role::kExpertFc2: {
      // (the block's first op backward without a shared expert)
      if (o.expert == c_.experts - 1 && c_.shared_ffn == 0) moe_block_backward();
      if (routed == 0) break;
      // The weighted output's gradients: w dx at the output, dx . output at the weight (Llama 4's weight is
      // the input's: ExpertFc1's).
      const auto& rows = router_.rows(a, e);
      dy_.resize(rows.size() * W);
      k::scatter_add_rows_backward(
          dy_.data(), c_.llama4 ? nullptr : drw_.data(), dx_.data(), expert_rows(eout_, a, e, C), rows.data(),
          c_.llama4 ? nullptr : router_.weights(a), branch, routed, C, c_.experts_per_token);
      degel_.assign(rows.size() * static_cast<std::size_t>(FE), 0.0f);
      linear(degel_.data(), dy_.data(), C, expert_rows(egel_, a, e, FE), FE, routed);
      break;
    }
    case Role::kExpertAct:
      if (routed == 0) break;
      defc_.assign(static_cast<std::size_t>(routed) * 2 * static_cast<std::size_t>(FE), 0.0f);
      if (c_.gpt_oss) {
        k::clamped_swiglu_backward(defc_.data(), expert_rows(efc_, a, e, 2 * FE), degel_.data(), routed, FE,
                                   GptConfig::kSwigluAlpha, static_cast<float>(c_.swiglu_limit));
      } else {
        k::swiglu_backward(defc_.data(), expert_rows(efc_, a, e, 2 * FE), degel_.data(), routed, FE);
      }
      break;
    case Role::kExpertFc1: {  // into the rows of the MLP input's gradient its tokens read
      if (routed == 0) break;
      gather_expert_input(a, o.expert, fc1_input(a));
      dein_.assign(ein_.size(), 0.0f);
      linear(dein_.data(), defc_.data(), 2 * FE, ein_.data(), C, routed);
      const int* rows = router_.rows(a, e).data();
      // (Llama 4's input w x: w din into the input's gradient, din . x into the weight's)
      k::scatter_add_rows(dln_.data(), dein_.data(), rows, c_.llama4 ? router_.weights(a) : nullptr, 1.0f,
                          routed, C, c_.experts_per_token);
      if (c_.llama4)
        k::add_row_dots(drw_.data(), dein_.data(), fc1_input(a), rows, routed, C, c_.experts_per_token);
      break;
    }
    case Role::kRouter:
      router_.backward(a, drw_.data(), drlogit_.data());
      linear(dln_.data(), drlogit_.data(), c_.experts, fc1_input(a), C);
      // (each expert's load error, for the correction bias's rule)
      if (bias_update_ && c_.sigmoid_routing) router_.add_load_error(a, g[1]);
      break;
    case Role::kGelu:
      zero(dfc_);
      if (c_.gelu_mlp) {
        k::geglu_backward(dfc_.data(), fc_[a].data(), dgel_.data(), N, F);
      } else if (c_.llama()) {
        k::swiglu_backward(dfc_.data(), fc_[a].data(), dgel_.data(), N, F);
      } else if (c_.opt) {
        k::relu_backward(dfc_.data(), fc_[a].data(), dgel_.data(), dfc_.size());
      } else if (c_.nemotron) {
        k::relu2_backward(dfc_.data(), fc_[a].data(), dgel_.data(), dfc_.size());
      } else if (c_.exact_gelu) {
        k::gelu_exact_backward(dfc_.data(), fc_[a].data(), dgel_.data(), dfc_.size());
      } else {
        k::gelu_backward(dfc_.data(), fc_[a].data(), dgel_.data(), dfc_.size());
      }
      break;
    case Role::kFc1:  // (post_norm: the MLP reads res1 itself, whose gradient dres_ holds the branch's)
      if (first_tile && !c_.post_norm) zero(dln_);
      linear((c_.post_norm ? dres_ : dln_).data(), dfc_.data(), c_.fc_width(), fc1_input(a), C);
      break;
    case Role::kLn2:  // into res1's gradient, all of which the block's input also gets (kProj); or
                      // (parallel_residual) into the block input's, which holds the output's (res1's) already
      norm_backward((c_.parallel_residual ? dx_ : dres_).data(), g, dln_.data(), mlp_input(l, a), p,
                    m2_[a].data(), r2_[a].data());
      break;
    case Role::kLn1Post:
      dx_ = dres_;  // the attention's residual branch
      zero(dpost_);
      norm_backward(dpost_.data(), g, dres_.data(), ao_[a].data(), p, nullptr, rao_[a].data());
      break;
    case Role::kProj:
      if (first_tile) {
        zero(datty_);
        // The attention's residual branch (parallel_residual: dx_ holds it, and the MLP's norm's gradient).
        if (!c_.out_norms() && !c_.parallel_residual) dx_ = dres_;
        if (c_.scaled_branches()) scale_branch(dres_);
      }
      if (first_tile && c_.mla()) zero(datto_);
      linear((c_.mla() ? datto_ : datty_).data(),
             (c_.out_norms() || c_.scaled_branches() ? dpost_ : dres_).data(), C, attn_output(a),
             c_.attn_out_width());
      break;
    case Role::kAttn: {
      // The expanded shapes recompute their expanded, rotated qkv rather than keeping it per layer.
      const float* qkv = (c_.qk_norm ? qkn_ : qkv_)[a].data();
      const float* sinks = c_.gpt_oss ? p[0] : nullptr;  // (gpt-oss's sink logits, and their gradients)
      float* dsinks = c_.gpt_oss ? g[0] : nullptr;
      float* dqkv = dqkv_.data();
      if (c_.mla()) {  // (the output's gradient padded back to whole heads)
        mla_values(c_, N, datty_.data(), datto_.data(), false);
        assemble_mla(a, o.layer);
        qkv = qf_.data();
        dqkv = dqf_.data();
        zero(dqf_);
      } else if (c_.expanded_attention()) {
        expand_qkv(qkv, o.layer);
        qkv = qf_.data();
        dqkv = dqf_.data();
        zero(dqf_);
      } else {
        zero(dqkv_);
      }
      if (flash_) {
        k::flash_attention_backward(dqkv, datty_.data(), qkv, atty_[a].data(), att_[a].data(), B_, T_, Q,
                                    c_.heads, c_.attention_span(l), c_.score_scale(), c_.score_cap(),
                                    c_.alibi_scale(), sinks, dsinks, attention_values());
      } else {
        k::attention_backward(dqkv, datty_.data(), qkv, att_[a].data(), B_, T_, Q, c_.heads,
                              c_.attention_span(l), c_.score_scale(), c_.score_cap(), sinks, dsinks,
                              attention_values());
      }
      if (c_.mla()) {
        scatter_mla(o.layer);
      } else if (c_.expanded_attention()) {
        collapse_dqkv(o.layer);
      }
      break;
    }
    case Role::kKvB:
      if (first_tile) zero(dkvn_);
      linear(dkvn_.data(), dkvb_.data(), c_.kv_b_width(), kvn_[a].data(), c_.kv_lora);
      break;
    case Role::kKvANorm:  // into the latent's columns of kv_a_proj's output gradient (scatter_mla wrote the
                          // rest)
      copy_columns(kvc_.data(), kva_[a].data(), N, c_.kv_lora + c_.rope_dim, 0, c_.kv_lora);
      zero(dkvc_);
      k::rmsnorm_backward(dkvc_.data(), g[0], dkvn_.data(), kvc_.data(), p[0], rkv_[a].data(), N, c_.kv_lora);
      uncopy_columns(dkva_.data(), dkvc_.data(), N, c_.kv_lora + c_.rope_dim, 0, c_.kv_lora);
      break;
    case Role::kKvA:  // the attention input's gradient starts here (the latents' first linear backward)
      if (first_tile) zero(dln_);
      linear(dln_.data(), dkva_.data(), c_.kv_lora + c_.rope_dim, attn_input(l, a), C);
      break;
    case Role::kQB:
      if (c_.q_lora == 0) {
        linear(dln_.data(), dq_.data(), Q, attn_input(l, a), C);
        break;
      }
      if (first_tile) zero(dqan_);
      linear(dqan_.data(), dq_.data(), Q, qan_[a].data(), c_.q_lora);
      break;
    case Role::kQANorm:
      zero(dqa_);
      k::rmsnorm_backward(dqa_.data(), g[0], dqan_.data(), qa_[a].data(), p[0], rqa_[a].data(), N, c_.q_lora);
      break;
    case Role::kQA:
      linear(dln_.data(), dqa_.data(), c_.q_lora, attn_input(l, a), C);
      break;
    case Role::kQkNorm:  // dqkv_ holds the normed heads' gradient: turned into the linear's output's
      dqkn_ = dqkv_;
      if (c_.qk_layernorm) {
        k::head_layernorm_backward(dqkv_.data(), g[0], dqkn_.data(), qkv_[a].data(), p[0], mqk_[a].data(),
                                   rqk_[a].data(), N, c_.qkv_width(), c_.heads + c_.kv_head_count(),
                                   c_.head_size());
        break;
      }
      k::head_rmsnorm_backward(dqkv_.data(), g[0], dqkn_.data(), qkv_[a].data(), p[0], rqk_[a].data(), N,
                               c_.qkv_width(), c_.qk_norm_heads(), c_.qk_norm_kv_heads(), c_.qk_norm_width(),
                               c_.qk_norm_kv_width(), c_.norm_offset());
      break;
    case Role::kQkv:  // (one norm, Phi's or Falcon-7B's: dln_ holds the MLP's input gradient already;
                      // post_norm: the block's input itself, whose gradient dx_ holds the residual branch's)
      if (first_tile && !c_.shared_norm() && !c_.post_norm) zero(dln_);
      if (c_.clip_qkv > 0) {  // (the clipped outputs pass no gradient)
        k::clamp_backward(dqkv_.data(), qkv_[a].data(),
                          static_cast<std::size_t>(N) * static_cast<std::size_t>(c_.qkv_width()),
                          static_cast<float>(c_.clip_qkv));
      }
      linear((c_.post_norm ? dx_ : dln_).data(), dqkv_.data(), c_.qkv_width(), attn_input(l, a), C);
      break;
    case Role::kLn1:
      norm_backward(dx_.data(), g, dln_.data(), resid_[ri].data(), p, m1_[a].data(), r1_[a].data());
      break;
    case Role::kEmbedNorm:
      zero(demb_);
      k::layernorm_backward(demb_.data(), g[0], g[1], dx_.data(), emb_.data(), p[0], me_.data(), re_.data(),
                            N, C);
      break;
    case Role::kEmbed:
      k::embedding_backward(g[0], c_.learned_positions() ? g[1] + c_.position0() : nullptr,
                            (c_.bloom ? demb_ : dx_).data(), tokens_.data(), B_, T_, C, c_.embedding_scale());
      if (c_.mtp > 0) {  // (the next tokens' rows, read by the next-token-prediction module)
        k::embedding_backward(g[0], nullptr, demb_next_.data(), targets_.data(), B_, T_, C,
                              c_.embedding_scale());
      }
      break;
  }
}

}  // namespace memwall::model
