// Families' shapes on a small Llama-shaped base of 4 heads, shared by the CPU model's tests
// (tests/engine/gpt_model_test.cpp) and the GPU model's (tests/cuda/model_test.cpp), which differ in the
// base's sizes and the experts' widths.
#pragma once

#include "engine/model/gpt.h"

namespace memwall::test_shapes {

// DeepSeek's latent attention (dense: DeepSeek-V3's shape without experts): 4 heads whose queries come from a
// latent of 8 and whose keys and values from one of 8, heads of 6 + 4 rotary (turned on neighbouring pairs),
// values of 6 (the kernels' heads of 10 padded), scores scaled by 7^-1/2 (yarn's mscale_all_dim's form).
inline model::GptConfig deepseek_dense(model::GptConfig c) {
  c.kv_heads = 0;
  c.deepseek = 3;
  c.kv_lora = 8;
  c.q_lora = 8;
  c.rope_dim = 4;
  c.head_dim = 10;
  c.v_dim = 6;
  c.query_scale = 7;
  c.norm_eps = 1e-5;  // (the latents' norms keep their 1e-6)
  return c;
}

// GLM-4.5's experts on `c`: the first of 3 layers dense, then 8 experts of `ffn` in 4 groups, 2 a token from
// the best 2 groups by sigmoid score plus the correction bias, weighted by their renormalised scores x 2.5,
// beside an ungated shared expert of `ffn`.
inline model::GptConfig glm45_experts(model::GptConfig c, int ffn) {
  c.layers = 3;
  c.experts = 8;
  c.experts_per_token = 2;
  c.expert_ffn = ffn;
  c.shared_ffn = ffn;
  c.shared_gate = false;
  c.dense_layers = 1;
  c.sigmoid_routing = c.norm_topk = true;
  c.expert_groups = 4;
  c.groups_per_token = 2;
  c.routed_scale = 2.5;
  return c;
}

// DeepSeek-V3's: that attention with GLM-4.5's experts (the routing is the same); DeepSeek's balance loss per
// sequence at 0.05 (its scores the sigmoid scores over their sum).
inline model::GptConfig deepseek_v3(const model::GptConfig& base, int ffn) {
  model::GptConfig c = glm45_experts(deepseek_dense(base), ffn);
  c.seq_aux_alpha = 0.05;  // (DeepSeek's balance loss, per sequence)
  return c;
}

// DeepSeek-V2's (V2-Lite's q_proj without a query latent, values as wide as the heads) from V3's: softmax
// routing of 8 experts in 4 groups, 2 a token from the 2 groups whose best expert is most probable
// (group_limited_greedy), their probabilities x 2, beside two ungated shared experts (2 x V3's `ffn`); the
// first layer dense; the balance loss over the micro-batch (seq_aux false), of the softmax's probabilities.
inline model::GptConfig deepseek_v2(const model::GptConfig& base, int ffn) {
  model::GptConfig c = deepseek_v3(base, ffn);
  c.deepseek = 2;
  c.q_lora = 0;
  c.v_dim = c.head_dim;
  c.query_scale = 0;
  c.sigmoid_routing = c.norm_topk = false;
  c.group_by_best = true;
  c.shared_ffn = 2 * ffn;
  c.routed_scale = 2;
  c.seq_aux = false;  // (over the micro-batch)
  return c;
}

// Llama 4's: 4 layers of grouped-query heads turning neighbouring pairs but the last (nope_every 4), their
// query and key heads normed without weights after the turn and attending within chunks of 3 positions, the
// last one's queries tempered from position 2 on over all keys (floor_scale 3, attn_scale 0.5); experts in
// layers 1 and 3 (moe_every 2), 4 of `ffn`, 2 a token chosen by logit, their sigmoids scaling each expert's
// input, beside a shared expert of `ffn` without a gate; the base's dense MLPs between.
inline model::GptConfig llama4(model::GptConfig c, int ffn) {
  c.layers = 4;
  c.llama4 = c.qk_l2_norm = true;
  c.nope_every = 4;
  c.attn_temperature = 0.5;
  c.floor_scale = 3;
  c.attention_chunk = 3;
  c.experts = 4;
  c.experts_per_token = 2;
  c.expert_ffn = ffn;
  c.shared_ffn = ffn;
  c.shared_gate = false;
  c.moe_every = 2;
  return c;
}

}  // namespace memwall::test_shapes
