// Parameter tensors and counts of GPT-2 / Llama style decoders.
#include "spec/model_spec.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace memwall {

std::vector<double> rope_inv_freq(int rotary_dim, double theta, const RopeScaling& scaling, int context) {
  std::vector<double> f(static_cast<std::size_t>(rotary_dim / 2));
  for (std::size_t i = 0; i < f.size(); ++i) {
    f[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
  }
  if (scaling.type == "longrope") {
    // Each pair divided by its factor; pairs beyond a short list (a file validate() refuses) kept.
    const std::vector<double>& by =
        context > scaling.original_max_positions ? scaling.long_factor : scaling.short_factor;
    for (std::size_t i = 0; i < f.size() && i < by.size(); ++i) f[i] /= by[i];
  } else if (scaling.type == "linear") {
    for (double& x : f) x /= scaling.factor;
  } else if (scaling.type == "llama3") {
    const double old_context = scaling.original_max_positions;
    const double low_wavelen = old_context / scaling.low_freq_factor;    // longer: divided by factor
    const double high_wavelen = old_context / scaling.high_freq_factor;  // shorter: kept
    for (double& x : f) {
      const double wavelen = 2.0 * std::numbers::pi / x;
      if (wavelen > low_wavelen) {
        x /= scaling.factor;
      } else if (wavelen >= high_wavelen && scaling.high_freq_factor > scaling.low_freq_factor) {
        // the band between: a blend, 0 at low_wavelen, 1 at high_wavelen (none where the two are equal)
        const double smooth = (old_context / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        x = (1.0 - smooth) * x / scaling.factor + smooth * x;
      }
    }
  } else if (scaling.type == "yarn") {
    // The pair index at which a frequency turns `rotations` times within the original context.
    const double dim = rotary_dim, base = theta;
    const auto pair_of = [&](double rotations) {
      return dim * std::log(scaling.original_max_positions / (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(base));
    };
    double low = pair_of(scaling.beta_fast), high = pair_of(scaling.beta_slow);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (std::size_t i = 0; i < f.size(); ++i) {
      // keep: 1 below the ramp (fast pairs, kept), 0 above it (slow pairs, divided by factor).
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double keep = 1.0 - ramp;
      f[i] = f[i] / scaling.factor * (1.0 - keep) + f[i] * keep;
    }
  }
  return f;
}

double rope_attention_scale(const RopeScaling& scaling) {
  if (scaling.type == "longrope") {
    if (scaling.attention_factor > 0) return scaling.attention_factor;
    if (scaling.factor <= 1 || scaling.original_max_positions <= 1) return 1.0;
    return std::sqrt(1.0 + std::log(scaling.factor) / std::log(scaling.original_max_positions));
  }
  if (scaling.type != "yarn") return 1.0;
  if (scaling.attention_factor > 0) return scaling.attention_factor;
  const auto mscale = [](double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  if (scaling.mscale > 0 && scaling.mscale_all_dim > 0)
    return mscale(scaling.factor, scaling.mscale) / mscale(scaling.factor, scaling.mscale_all_dim);
  return mscale(scaling.factor, 1.0);
}

std::vector<ParamTensorGroup> ModelSpec::param_tensors() const {
  std::vector<ParamTensorGroup> t;
  const double hd = hidden;
  const double kv = static_cast<double>(kv_heads) * head_dim();
  const double q = q_width();
  const int L = layers;
  if (vocab > 0) t.push_back({"embed.tokens", static_cast<double>(vocab), hd, 1, true});
  if (position == PositionKind::kLearned && max_positions > 0) {
    t.push_back({"embed.positions", static_cast<double>(max_positions + position_offset), hd, 1, false});
  }
  if (embed_norm) {
    t.push_back({"embed.norm.weight", hd, 1, 1, false});
    t.push_back({"embed.norm.bias", hd, 1, 1, false});
  }
  const bool ln = norm == NormKind::kLayerNorm && norm_bias;     // (a LayerNorm's bias)
  const bool has_norm = norm != NormKind::kNone && norm_weight;  // (a norm's weight)
  const bool pre_norm = has_norm && !post_norm;                  // (before the attention and the MLP)
  const bool out_norm = sandwich_norm || post_norm;              // (after them)
  if (pre_norm) t.push_back({"block.norm1.weight", hd, 1, L, false});
  if (ln) t.push_back({"block.norm1.bias", hd, 1, L, false});
  // Softmax attention in A of the layers (all but Qwen3-Next's linear-attention ones).
  const int A = softmax_attention_layers(), linear = L - A;
  if (mla()) {  // the latents' down projections and norms, then up to every head
    const double rope = rope_head_size, kv_lora = kv_lora_rank, q_lora = q_lora_rank;
    const double up = static_cast<double>(heads) * (head_dim() - rope_head_size + v_head_dim());
    if (q_lora_rank > 0) {
      t.push_back({"block.attn.q_a.weight", q_lora, hd, A, true});
      t.push_back({"block.attn.q_a_norm.weight", q_lora, 1, A, false});
      t.push_back({"block.attn.q_b.weight", q, q_lora, A, true});
    } else {
      t.push_back({"block.attn.q.weight", q, hd, A, true});
    }
    t.push_back({"block.attn.kv_a.weight", kv_lora + rope, hd, A, true});
    t.push_back({"block.attn.kv_a_norm.weight", kv_lora, 1, A, false});
    t.push_back({"block.attn.kv_b.weight", up, kv_lora, A, true});
  } else if (kv == hd && q == hd && !attn_output_gate) {
    t.push_back({"block.attn.qkv.weight", 3 * hd, hd, A, true});
    if ((linear_bias && attn_bias) || qkv_bias) t.push_back({"block.attn.qkv.bias", 3 * hd, 1, A, false});
  } else {  // grouped-query attention (or heads of their own size): separate q and kv projections
    t.push_back({"block.attn.q.weight", attn_output_gate ? 2 * q : q, hd, A, true});  // (and the gate)
    t.push_back({"block.attn.kv.weight", 2 * kv, hd, A, true});
    if ((linear_bias && attn_bias) || qkv_bias) t.push_back({"block.attn.qkv.bias", q + 2 * kv, 1, A, false});
  }
  if (qk_norm) t.push_back({"block.attn.qk_norm.weight", qk_norm_elements(), 1, A, false});
  if (attn_sinks) t.push_back({"block.attn.sinks", static_cast<double>(heads), 1, A, false});
  t.push_back({"block.attn.proj.weight", hd, static_cast<double>(o_width()), A, true});
  if (linear_bias && attn_bias) t.push_back({"block.attn.proj.bias", hd, 1, A, false});
  if (linear > 0) {  // Gated DeltaNet
    const double keys = la_key_width(), values = la_value_width(), vh = la_value_heads;
    t.push_back({"block.linear_attn.in_proj_qkvz.weight", 2 * keys + 2 * values, hd, linear, true});
    t.push_back({"block.linear_attn.in_proj_ba.weight", 2 * vh, hd, linear, true});
    t.push_back({"block.linear_attn.conv1d.weight", la_conv_width(), static_cast<double>(la_conv_kernel),
                 linear, false});
    t.push_back({"block.linear_attn.dt_bias_A_log", 2 * vh, 1, linear, false});
    t.push_back({"block.linear_attn.norm.weight", static_cast<double>(la_value_dim), 1, linear, false});
    t.push_back({"block.linear_attn.out_proj.weight", hd, values, linear, true});
  }
  if (out_norm) t.push_back({"block.attn.norm_out.weight", hd, 1, L, false});
  if (pre_norm && !block_norm_shared) t.push_back({"block.norm2.weight", hd, 1, L, false});
  if (ln && !block_norm_shared) t.push_back({"block.norm2.bias", hd, 1, L, false});
  const double ffn = mlp_ffn();
  // (A mixture of experts in the blocks after the dense_layers first; a dense MLP in those, or in all.)
  const int ML = moe_layers(), dense = L - ML;
  if (moe()) {  // the router, then each expert's gate, up and down (count: its blocks x experts)
    const int E = ML * experts;
    t.push_back({"block.moe.router.weight", static_cast<double>(experts), hd, ML, true});
    if (expert_bias) t.push_back({"block.moe.router.bias", static_cast<double>(experts), 1, ML, false});
    t.push_back({"block.moe.expert.gate.weight", ffn, hd, E, true});
    t.push_back({"block.moe.expert.up.weight", ffn, hd, E, true});
    if (expert_bias) t.push_back({"block.moe.expert.gate_up.bias", 2 * ffn, 1, E, false});
    t.push_back({"block.moe.expert.down.weight", hd, ffn, E, true});
    if (expert_bias) t.push_back({"block.moe.expert.down.bias", hd, 1, E, false});
    if (shared_expert_ffn > 0) {
      const double shared = shared_expert_ffn;
      t.push_back({"block.moe.shared.gate.weight", shared, hd, ML, true});
      t.push_back({"block.moe.shared.up.weight", shared, hd, ML, true});
      t.push_back({"block.moe.shared.down.weight", hd, shared, ML, true});
      if (shared_expert_gate) t.push_back({"block.moe.shared_gate.weight", 1, hd, ML, true});
    }
  }
  if (dense > 0) {
    const double width = ffn_hidden;
    if (gated_mlp) {
      t.push_back({"block.mlp.gate.weight", width, hd, dense, true});
      t.push_back({"block.mlp.up.weight", width, hd, dense, true});
      if (linear_bias) t.push_back({"block.mlp.gate_up.bias", 2 * width, 1, dense, false});
    } else {
      t.push_back({"block.mlp.fc1.weight", width, hd, dense, true});
      if (linear_bias) t.push_back({"block.mlp.fc1.bias", width, 1, dense, false});
    }
    t.push_back({"block.mlp.fc2.weight", hd, width, dense, true});
    if (linear_bias) t.push_back({"block.mlp.fc2.bias", hd, 1, dense, false});
  }
  if (out_norm) t.push_back({"block.mlp.norm_out.weight", hd, 1, L, false});
  if (mtp_modules > 0) {  // each module's eh_proj and enorm, hnorm and its head's norm
    t.push_back({"mtp.eh_proj.weight", hd, 2 * hd, mtp_modules, true});
    t.push_back({"mtp.norms.weight", 3 * hd, 1, mtp_modules, false});
  }
  if (has_norm) t.push_back({"final_norm.weight", hd, 1, 1, false});
  if (ln) t.push_back({"final_norm.bias", hd, 1, 1, false});
  if (vocab > 0 && !tied_embeddings) t.push_back({"lm_head.weight", static_cast<double>(vocab), hd, 1, true});
  if (vocab > 0 && !tied_embeddings && head_bias)
    t.push_back({"lm_head.bias", static_cast<double>(vocab), 1, 1, false});
  return t;
}

ModelSpec with_mtp(const ModelSpec& m) {
  ModelSpec out = m;
  out.layers += m.mtp_in_file - m.mtp_modules;
  out.mtp_modules = m.mtp_in_file;
  return out;
}

double ModelSpec::total_params() const {
  double n = 0;
  for (const auto& g : param_tensors()) n += g.elements() * g.count;
  return n;
}

double ModelSpec::params_per_layer() const {
  double n = 0;
  for (const auto& g : param_tensors()) {  // a block's tensors: `layers` of each (an expert's: x experts)
    if (g.name.rfind("block.", 0) == 0) n += g.elements() * g.count / layers;
  }
  return n;
}

double ModelSpec::active_params() const {
  double n = 0;
  for (const auto& g : param_tensors()) {
    // A routed expert's tensors (layers x experts of them): experts_per_token in each layer used.
    const bool routed = g.name.rfind("block.moe.expert.", 0) == 0;
    n += g.elements() * (routed ? static_cast<double>(g.count / experts) * experts_per_token : g.count);
  }
  return n;
}

double ModelSpec::routed_expert_params() const {
  double n = 0;
  for (const auto& g : param_tensors()) {
    if (g.name.rfind("block.moe.expert.", 0) == 0) n += g.elements() * g.count;
  }
  return n;
}

double ModelSpec::embedding_params() const {
  return total_params() - layers * params_per_layer();
}

double ModelSpec::largest_linear_elements() const {
  double largest = 0;
  for (const auto& g : param_tensors()) {
    if (g.is_linear) largest = std::max(largest, g.elements());
  }
  return largest;
}

}  // namespace memwall
