// safetensors: u64 little-endian header length, a JSON header of {name: {dtype, shape, data_offsets}},
// padded with spaces to 8 bytes, then the raw little-endian tensor bytes.
#include "engine/model/export.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "cpu/cast.h"
#include "engine/io/atomic_file.h"

namespace memwall::model {

nlohmann::ordered_json hf_rope_scaling(const RopeScaling& s) {
  if (s.none()) return nullptr;
  if (s.type == "longrope") {
    // The attention factor as computed (transformers would derive it from max_position_embeddings, which
    // an export of a shorter run changes); factor only where it is a stretch (transformers wants >= 1).
    nlohmann::ordered_json j = {{"rope_type", s.type}};
    if (s.factor >= 1) j["factor"] = s.factor;
    j["original_max_position_embeddings"] = s.original_max_positions;
    j["attention_factor"] = rope_attention_scale(s);
    j["short_factor"] = s.short_factor;
    j["long_factor"] = s.long_factor;
    return j;
  }
  nlohmann::ordered_json j = {{"rope_type", s.type}, {"factor", s.factor}};
  if (s.type == "llama3") {
    j["low_freq_factor"] = s.low_freq_factor;
    j["high_freq_factor"] = s.high_freq_factor;
    j["original_max_position_embeddings"] = s.original_max_positions;
  }
  if (s.type == "yarn") {
    j["original_max_position_embeddings"] = s.original_max_positions;
    j["beta_fast"] = s.beta_fast;
    j["beta_slow"] = s.beta_slow;
    if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
    if (s.mscale > 0) j["mscale"] = s.mscale;
    if (s.mscale_all_dim > 0) j["mscale_all_dim"] = s.mscale_all_dim;
    if (!s.truncate) j["truncate"] = false;
  }
  return j;
}

namespace {
// A config.json of GPT-2's variants: the architecture and model_type, the shape under the names OPT,
// GPT-NeoX, Falcon and Phi share (vocab_size, hidden_size, num_hidden_layers, num_attention_heads), the
// family's own keys, then torch_dtype.
std::string family_config(const char* architecture, const char* model_type, const GptConfig& c,
                          const nlohmann::ordered_json& own, const char* torch_dtype) {
  nlohmann::ordered_json config = {{"architectures", {architecture}},
                                   {"model_type", model_type},
                                   {"vocab_size", c.vocab},
                                   {"hidden_size", c.channels},
                                   {"num_hidden_layers", c.main_layers()},
                                   {"num_attention_heads", c.heads}};
  for (const auto& [key, value] : own.items()) config[key] = value;
  config["torch_dtype"] = torch_dtype;
  return config.dump(2) + "\n";
}

// A config.json of the Llama shape's LayerNorm and OLMo families: family_config with the keys they share
// (intermediate_size, num_key_value_heads, hidden_act, max_position_embeddings, rope_theta, rope_scaling),
// the family's own, then attention_dropout and tie_word_embeddings.
std::string llama_family_config(const char* architecture, const char* model_type, const GptConfig& c,
                                const nlohmann::ordered_json& own, const char* torch_dtype) {
  nlohmann::ordered_json keys = {{"intermediate_size", c.ffn_width()},
                                 {"num_key_value_heads", c.kv_head_count()},
                                 {"hidden_act", "silu"},
                                 {"max_position_embeddings", c.max_seq},
                                 {"rope_theta", c.rope_theta},
                                 {"rope_scaling", hf_rope_scaling(c.rope_scaling)}};
  for (const auto& [key, value] : own.items()) keys[key] = value;
  keys["attention_dropout"] = 0.0;
  keys["tie_word_embeddings"] = c.tied;
  return family_config(architecture, model_type, c, keys, torch_dtype);
}

// Each layer's attention as transformers' layer_types lists them: "sliding_attention" or "full_attention".
nlohmann::ordered_json layer_types(const GptConfig& c) {
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (int l = 0; l < c.layers; ++l)
    types.push_back(c.attention_window(l) > 0 ? "sliding_attention" : "full_attention");
  return types;
}

// Cohere2's and EXAONE 4's window keys after sliding_window: the older sliding_window_pattern where it says
// which layers (every n-th layer global, from the first), and layer_types (transformers 4.53 on).
void add_window_layers(nlohmann::ordered_json& own, const GptConfig& c) {
  if (c.sliding_window > 0 && c.global_every > 0 && c.first_window_layer == 0)
    own["sliding_window_pattern"] = c.global_every;
  own["layer_types"] = layer_types(c);
}

// Whether the Llama shape has parts beyond its plain form, which StableLM's, OLMo's and OLMo 2's configs
// cannot hold: a window, heads of their own width, Gemma's, Gemma 2's or Gemma 3's parts, Phi-3's fused
// names, longrope. (Cohere2's config holds a window and heads of their own width: `windowed`.)
bool beyond_plain_llama(const GptConfig& c, bool windowed = false) {
  return (!windowed && (c.sliding_window > 0 || c.head_dim > 0)) || c.gelu_mlp || c.norm_unit_offset ||
         c.embed_scale || c.fused_names || c.attn_softcap > 0 || c.final_softcap > 0 || c.query_scale > 0 ||
         c.rope_local_theta > 0 || c.rope_scaling.type == "longrope";
}
// The refusal of a `family` model with such parts (or the family's own `more`) in `architecture`'s config.
Status no_config_form(const std::string& dir, const char* family, const char* more,
                      const char* architecture) {
  return Status::invalid_argument(dir + ": " + family +
                                  " with a window, heads of their own width, Gemma's parts, fused names or "
                                  "longrope" +
                                  more + " has no config.json form (" + architecture + " has none of them)");
}

// config.json's text for this model (transformers' architecture and keys), or why it has none.
Result<std::string> hf_config(const GptConfig& c, const std::string& dir, ExportDtype dtype) {
  const char* torch_dtype = dtype == ExportDtype::kF32    ? "float32"
                            : dtype == ExportDtype::kBF16 ? "bfloat16"
                                                          : "float16";
  if (c.mtp > 0 && c.deepseek != 3 && !(c.sigmoid_routing && !c.mla())) {
    return Status::invalid_argument(dir +
                                    ": a next-token-prediction module has a config.json form only as "
                                    "DeepseekV3Config's or Glm4MoeConfig's num_nextn_predict_layers");
  }
  if (c.granite) {  // GraniteConfig's keys: the plain Llama shape with its four multipliers
                    // (GraniteMoeConfig's with its experts: their width as intermediate_size)
    const bool moe = c.moe();
    const char* architecture = moe ? "GraniteMoeForCausalLM" : "GraniteForCausalLM";
    if (c.sliding_window > 0 || c.head_dim > 0 || c.gelu_mlp || c.norm_unit_offset || c.fused_names ||
        c.attn_softcap > 0 || c.final_softcap > 0 || c.rope_local_theta > 0 ||
        c.rope_scaling.type == "longrope" || c.qkv_bias || c.partial_rotary != 1.0 || c.qk_norm ||
        c.nope_every > 0) {
      return no_config_form(dir, moe ? "Granite MoE" : "Granite",
                            ", q/k/v biases, partial rotary, q/k norms or NoPE layers", architecture);
    }
    nlohmann::ordered_json own = {
        {"rms_norm_eps", c.norm_eps},
        {"embedding_multiplier", c.embed_multiplier > 0 ? c.embed_multiplier : 1.0},
        {"attention_multiplier",
         1.0 / std::sqrt(c.query_scale > 0 ? c.query_scale : static_cast<double>(c.head_size()))},
        {"residual_multiplier", c.residual_multiplier},
        {"logits_scaling", 1.0 / c.logit_scale},
        {"attention_bias", false}};
    if (moe) {
      own["intermediate_size"] = c.expert_width();
      own["num_local_experts"] = c.experts;
      own["num_experts_per_tok"] = c.experts_per_token;
      own["output_router_logits"] = c.router_aux > 0;
      own["router_aux_loss_coef"] = c.router_aux > 0 ? c.router_aux : 0.001;
    } else {
      own["mlp_bias"] = false;
    }
    return llama_family_config(architecture, moe ? c.moe_type() : "granite", c, own, torch_dtype);
  }
  if (c.glm) {  // GlmConfig's keys, or with the norms after the sublayers too Glm4Config's
    const char* family = c.sandwich_norm ? "GLM-4" : "GLM";
    const char* architecture = c.sandwich_norm ? "Glm4ForCausalLM" : "GlmForCausalLM";
    if (beyond_plain_llama(c, true) || c.sliding_window > 0 || c.qk_norm || c.nope_every > 0)
      return no_config_form(dir, family, " (but head_dim), q/k norms or NoPE layers", architecture);
    return llama_family_config(architecture, c.sandwich_norm ? "glm4" : "glm", c,
                               {{"head_dim", c.head_size()},
                                {"partial_rotary_factor", c.partial_rotary},
                                {"rms_norm_eps", c.norm_eps},
                                {"attention_bias", c.qkv_bias}},
                               torch_dtype);
  }
  if (c.llama4) {  // Llama4TextConfig's keys (validate() has refused what Llama 4's shape does not have)
    if (beyond_plain_llama(c, true) || c.sliding_window > 0 || c.partial_rotary != 1.0 ||
        c.shared_ffn != c.expert_width()) {
      return no_config_form(dir, "Llama 4",
                            " (but head_dim), partial rotary or a shared expert not as wide as an expert",
                            "Llama4ForCausalLM");
    }
    nlohmann::ordered_json turns = nlohmann::ordered_json::array();
    for (int l = 0; l < c.layers; ++l) turns.push_back(c.rotary_at(l) ? 1 : 0);
    const bool tempered = c.attn_temperature > 0;
    return llama_family_config("Llama4ForCausalLM", c.moe_type(), c,
                               {{"intermediate_size", c.expert_width()},
                                {"intermediate_size_mlp", c.ffn_width()},
                                {"head_dim", c.head_size()},
                                {"rms_norm_eps", c.norm_eps},
                                {"attention_bias", false},
                                {"num_local_experts", c.experts},
                                {"num_experts_per_tok", c.experts_per_token},
                                {"interleave_moe_layer_step", c.moe_every},
                                {"use_qk_norm", c.qk_l2_norm},
                                {"no_rope_layers", turns},
                                {"no_rope_layer_interval", c.nope_every > 0 ? c.nope_every : 4},
                                {"attention_chunk_size",
                                 c.attention_chunk > 0 ? nlohmann::ordered_json(c.attention_chunk) : nullptr},
                                {"attn_temperature_tuning", tempered},
                                {"floor_scale", c.floor_scale},
                                {"attn_scale", tempered ? c.attn_temperature : 0.1},
                                {"output_router_logits", false},
                                {"router_aux_loss_coef", 0.001}},
                               torch_dtype);
  }
  if (c.nope_every > 0) {  // SmolLM3Config's keys: the plain Llama shape with every n-th layer unturned
    if (beyond_plain_llama(c) || c.qkv_bias || c.partial_rotary != 1.0 || c.qk_norm || c.layer_norm ||
        c.post_norm) {
      return no_config_form(dir, "SmolLM3", ", q/k/v biases, partial rotary, q/k norms or other norms",
                            "SmolLM3ForCausalLM");
    }
    nlohmann::ordered_json turns = nlohmann::ordered_json::array();
    for (int l = 0; l < c.layers; ++l) turns.push_back(c.rotary_at(l) ? 1 : 0);
    return llama_family_config("SmolLM3ForCausalLM", "smollm3", c,
                               {{"rms_norm_eps", c.norm_eps},
                                {"no_rope_layers", turns},
                                {"no_rope_layer_interval", c.nope_every},
                                {"use_sliding_window", false},
                                {"sliding_window", nullptr},
                                {"attention_bias", false},
                                {"mlp_bias", false}},
                               torch_dtype);
  }
  if (c.layer_norm && !c.norm_params) {  // OlmoConfig's keys (validate() has refused q/k norms with it)
    if (beyond_plain_llama(c) || c.qkv_bias || c.partial_rotary != 1.0)
      return no_config_form(dir, "OLMo", ", q/k/v biases or partial rotary", "OlmoForCausalLM");
    return llama_family_config("OlmoForCausalLM", "olmo", c,
                               {{"attention_bias", false},
                                {"clip_qkv", c.clip_qkv > 0 ? nlohmann::ordered_json(c.clip_qkv) : nullptr}},
                               torch_dtype);
  }
  if (c.rope_windowed_only && c.cohere) {  // Cohere2Config's keys (validate() has made it Cohere's block)
    if (beyond_plain_llama(c, true) || c.qkv_bias || c.partial_rotary != 1.0 || c.qk_layernorm) {
      return no_config_form(dir, "Cohere2",
                            " (but a window and head_dim), q/k/v biases, partial rotary or q/k norms",
                            "Cohere2ForCausalLM");
    }
    nlohmann::ordered_json own = {
        {"head_dim", c.head_size()},
        {"layer_norm_eps", 1e-5},
        {"logit_scale", c.logit_scale},
        {"sliding_window", c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr}};
    add_window_layers(own, c);
    own["attention_bias"] = false;
    return llama_family_config("Cohere2ForCausalLM", "cohere2", c, own, torch_dtype);
  }
  if (c.cohere) {  // CohereConfig's keys (validate() has put one LayerNorm before both sublayers)
    if (beyond_plain_llama(c) || c.qkv_bias || c.partial_rotary != 1.0)
      return no_config_form(dir, "Cohere", ", q/k/v biases or partial rotary", "CohereForCausalLM");
    return llama_family_config("CohereForCausalLM", "cohere", c,
                               {{"layer_norm_eps", 1e-5},
                                {"logit_scale", c.logit_scale},
                                {"use_qk_norm", c.qk_layernorm},
                                {"attention_bias", false}},
                               torch_dtype);
  }
  if (c.layer_norm) {  // StableLmConfig's keys (validate() has refused Gemma's and Qwen3's norms with it)
    if (beyond_plain_llama(c)) return no_config_form(dir, "StableLM", "", "StableLmForCausalLM");
    return llama_family_config("StableLmForCausalLM", "stablelm", c,
                               {{"layer_norm_eps", 1e-5},
                                {"partial_rotary_factor", c.partial_rotary},
                                {"use_qkv_bias", c.qkv_bias},
                                {"qk_layernorm", c.qk_layernorm},
                                {"use_parallel_residual", c.parallel_residual},
                                {"hidden_dropout", 0.0}},
                               torch_dtype);
  }
  // Exaone4Config's keys: OLMo 2's block with per-head q/k norms.
  if (c.post_norm && c.qk_norm && !c.qk_norm_full) {
    if (beyond_plain_llama(c, true) || c.qkv_bias || c.partial_rotary != 1.0 ||
        (c.sliding_window > 0 && !c.rope_windowed_only)) {
      return no_config_form(
          dir, "EXAONE 4",
          " (but a window and head_dim), q/k/v biases, partial rotary or a window with every "
          "layer turning",
          "Exaone4ForCausalLM");
    }
    // With a window (sliding_window), the global layers do not turn; without one every layer does. (A
    // window on no layer and no layer turning: a sliding_window with every layer full_attention.)
    nlohmann::ordered_json own = {
        {"rms_norm_eps", c.norm_eps},
        {"head_dim", c.head_size()},
        {"sliding_window", c.sliding_window > 0   ? nlohmann::ordered_json(c.sliding_window)
                           : c.rope_windowed_only ? nlohmann::ordered_json(4096)
                                                  : nullptr}};
    add_window_layers(own, c);
    return llama_family_config("Exaone4ForCausalLM", "exaone4", c, own, torch_dtype);
  }
  if (c.post_norm && c.qk_norm_full && c.sliding_window > 0) {  // Olmo3Config's keys: OLMo 2's with a window
    // (Its windowed layers turn without rope_scaling: rope_local_theta is rope_theta, or none is needed.)
    const bool local_ok =
        c.rope_local_theta == 0 ? c.rope_scaling.none() : c.rope_local_theta == c.rope_theta;
    if (c.head_dim > 0 || c.gelu_mlp || c.norm_unit_offset || c.embed_scale || c.fused_names ||
        c.attn_softcap > 0 || c.final_softcap > 0 || c.query_scale > 0 || c.rope_scaling.type == "longrope" ||
        c.qkv_bias || c.partial_rotary != 1.0 || !local_ok) {
      return no_config_form(dir, "OLMo 3",
                            " (but a window), q/k/v biases, partial rotary or a local rotary base of its own",
                            "Olmo3ForCausalLM");
    }
    return llama_family_config("Olmo3ForCausalLM", "olmo3", c,
                               {{"rms_norm_eps", c.norm_eps},
                                {"attention_bias", false},
                                {"sliding_window", c.sliding_window},
                                {"layer_types", layer_types(c)}},
                               torch_dtype);
  }
  if (c.mla()) {  // DeepseekV2Config's or DeepseekV3Config's keys (Kimi K2's are V3's)
    const bool v2 = c.deepseek == 2;
    const char* architecture = v2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM";
    const int E = c.expert_width();
    // (Its score scale is head_dim^-1/2, or yarn's mscale_all_dim's: nothing else has a key.)
    if (c.sliding_window > 0 || c.gelu_mlp || c.norm_unit_offset || c.embed_scale || c.fused_names ||
        c.attn_softcap > 0 || c.final_softcap > 0 || c.rope_local_theta > 0 ||
        c.rope_scaling.type == "longrope" ||
        c.query_scale != latent_query_scale(c.head_size(), c.rope_scaling) || c.moe_every > 1 ||
        (c.moe() && (c.shared_gate || c.shared_ffn % E != 0)) ||
        (v2 && (c.sigmoid_routing || !c.rope_interleave))) {
      return no_config_form(
          dir, gpt_family(c),
          ", a score scale other than yarn's, experts every n-th layer, a gated shared expert "
          "or one not a whole number of experts wide, or (V2) sigmoid routing or rotary halves",
          architecture);
    }
    const auto or_null = [](bool has, int v) { return has ? nlohmann::ordered_json(v) : nullptr; };
    nlohmann::ordered_json own = {{"rms_norm_eps", c.norm_eps},
                                  {"attention_bias", false},
                                  {"q_lora_rank", or_null(c.q_lora > 0, c.q_lora)},
                                  {"kv_lora_rank", c.kv_lora},
                                  {"qk_nope_head_dim", c.nope_dim()},
                                  {"qk_rope_head_dim", c.rope_dim},
                                  {"v_head_dim", c.v_dim}};
    if (!v2) own["rope_interleave"] = c.rope_interleave;
    own["n_routed_experts"] = or_null(c.moe(), c.experts);  // (null: dense, no routing keys)
    if (!c.moe())
      return llama_family_config(architecture, v2 ? "deepseek_v2" : "deepseek_v3", c, own, torch_dtype);
    own["num_experts_per_tok"] = c.experts_per_token;
    own["moe_intermediate_size"] = E;
    own["n_shared_experts"] = or_null(c.shared_ffn > 0, c.shared_ffn / E);
    own["first_k_dense_replace"] = c.dense_layers;
    own["moe_layer_freq"] = 1;
    own["scoring_func"] = c.sigmoid_routing ? "sigmoid" : "softmax";
    own["topk_method"] = c.sigmoid_routing ? "noaux_tc" : c.group_by_best ? "group_limited_greedy" : "greedy";
    own["n_group"] = c.expert_groups;
    own["topk_group"] = c.groups_per_token;
    own["routed_scaling_factor"] = c.routed_scale;
    own["norm_topk_prob"] = c.norm_topk;
    own["aux_loss_alpha"] = c.seq_aux_alpha;
    own["seq_aux"] = c.seq_aux;
    if (!v2) own["num_nextn_predict_layers"] = c.mtp;  // (its module: model.layers.<num_hidden_layers>)
    return llama_family_config(architecture, v2 ? "deepseek_v2" : "deepseek_v3", c, own, torch_dtype);
  }
  if (c.gpt_oss) {  // GptOssConfig's keys (validate() has refused what gpt-oss's shape does not have)
    if (beyond_plain_llama(c, true) || c.partial_rotary != 1.0 || c.first_window_layer > 0)
      return no_config_form(dir, "gpt-oss", ", partial rotary or windows from a later layer",
                            "GptOssForCausalLM");
    return llama_family_config("GptOssForCausalLM", c.moe_type(), c,
                               {{"intermediate_size", c.expert_width()},
                                {"rms_norm_eps", c.norm_eps},
                                {"head_dim", c.head_size()},
                                {"attention_bias", true},
                                {"sliding_window", c.sliding_window},
                                {"layer_types", layer_types(c)},
                                {"num_local_experts", c.experts},
                                {"num_experts_per_tok", c.experts_per_token},
                                {"experts_per_token", c.experts_per_token},
                                {"swiglu_limit", c.swiglu_limit},
                                {"output_router_logits", c.router_aux > 0},
                                {"router_aux_loss_coef", c.router_aux > 0 ? c.router_aux : 0.9}},
                               torch_dtype);
  }
  if (c.sigmoid_routing) {  // Glm4MoeConfig's keys
    if (beyond_plain_llama(c, true) || c.sliding_window > 0 || c.qk_norm_full || c.moe_every > 1 ||
        c.shared_gate || (c.shared_ffn > 0 && c.shared_ffn % c.expert_width() != 0)) {
      return no_config_form(
          dir, "GLM-4.5",
          ", norms of all the queries and keys, experts every n-th layer, a gated shared expert "
          "or one not a whole number of experts wide",
          "Glm4MoeForCausalLM");
    }
    return llama_family_config("Glm4MoeForCausalLM", c.moe_type(), c,
                               {{"rms_norm_eps", c.norm_eps},
                                {"head_dim", c.head_size()},
                                {"partial_rotary_factor", c.partial_rotary},
                                {"attention_bias", c.qkv_bias},
                                {"use_qk_norm", c.qk_norm},
                                {"n_routed_experts", c.experts},
                                {"num_experts_per_tok", c.experts_per_token},
                                {"moe_intermediate_size", c.expert_width()},
                                {"n_shared_experts", c.shared_ffn / c.expert_width()},
                                {"first_k_dense_replace", c.dense_layers},
                                {"n_group", c.expert_groups},
                                {"topk_group", c.groups_per_token},
                                {"routed_scaling_factor", c.routed_scale},
                                {"norm_topk_prob", c.norm_topk},
                                {"num_nextn_predict_layers", c.mtp}},
                               torch_dtype);
  }
  if (c.moe()) {  // MixtralConfig's, Qwen2MoeConfig's, Qwen3MoeConfig's or OlmoeConfig's keys
    const std::string_view type = c.moe_type();
    const bool olmoe = type == "olmoe", qwen3 = type == "qwen3_moe", mixtral = type == "mixtral",
               qwen2 = type == "qwen2_moe";
    const char* family = gpt_family(c);
    const char* architecture = olmoe     ? "OlmoeForCausalLM"
                               : qwen3   ? "Qwen3MoeForCausalLM"
                               : mixtral ? "MixtralForCausalLM"
                                         : "Qwen2MoeForCausalLM";
    if (c.shared_ffn > 0 && (!c.qkv_bias || c.qk_norm)) {
      return Status::invalid_argument(dir +
                                      ": a shared expert has a config.json form only with q, k and v biases "
                                      "and no q/k norms (Qwen2MoeForCausalLM)");
    }
    if (qwen2 && c.shared_ffn == 0) {
      return Status::invalid_argument(dir +
                                      ": Qwen2-MoE's experts without its shared expert have no config.json "
                                      "form (Qwen2MoeForCausalLM always has one)");
    }
    if (beyond_plain_llama(c, !olmoe) || c.partial_rotary != 1.0 || c.first_window_layer > 0 ||
        c.global_every > 0 || ((olmoe || qwen3) && c.sliding_window > 0)) {
      return no_config_form(dir, family, ", partial rotary or windows on some layers", architecture);
    }
    if (c.qkv_bias && !qwen2) {
      return Status::invalid_argument(dir + ": q, k and v biases have no " + family + " config.json form");
    }
    if ((mixtral || olmoe) && (c.dense_layers > 0 || c.moe_every > 1)) {
      return Status::invalid_argument(dir + ": dense MLP layers among the experts have no " + family +
                                      " config.json form (" + architecture + " has experts in every layer)");
    }
    if (mixtral && !c.norm_topk) {
      return Status::invalid_argument(dir +
                                      ": experts weighted by their plain probabilities have no Mixtral "
                                      "config.json form (MixtralForCausalLM renormalises them)");
    }
    nlohmann::ordered_json own = {{"rms_norm_eps", c.norm_eps},
                                  {mixtral ? "num_local_experts" : "num_experts", c.experts},
                                  {"num_experts_per_tok", c.experts_per_token},
                                  {"output_router_logits", c.router_aux > 0},
                                  {"router_aux_loss_coef", c.router_aux > 0 ? c.router_aux : 0.001}};
    if (!mixtral) own["norm_topk_prob"] = c.norm_topk;
    if (qwen3 || qwen2) {  // the experts' width apart from a dense layer's (intermediate_size), and which are
      own["moe_intermediate_size"] = c.expert_width();
      own["decoder_sparse_step"] = c.moe_every;
      nlohmann::ordered_json dense = nlohmann::ordered_json::array();  // (the first layers, dense)
      for (int l = 0; l < c.dense_layers && l < c.layers; ++l) dense.push_back(l);
      own["mlp_only_layers"] = dense;
      if (qwen2) {
        own["shared_expert_intermediate_size"] = c.shared_ffn;
      } else {
        own["head_dim"] = c.head_size();
        own["attention_bias"] = false;
      }
    } else {
      own["intermediate_size"] = c.expert_width();
    }
    if (mixtral) {
      own["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
      if (c.head_dim > 0) own["head_dim"] = c.head_dim;
    }
    if (olmoe) {
      own["clip_qkv"] = nullptr;  // (validate() refuses OLMo's clip_qkv with experts)
      own["attention_bias"] = false;
    }
    return llama_family_config(architecture, c.moe_type(), c, own, torch_dtype);
  }
  if (c.post_norm) {  // Olmo2Config's keys (validate() has refused Gemma 2's norms and LayerNorms with it)
    if (beyond_plain_llama(c) || c.qkv_bias || c.partial_rotary != 1.0 || !c.qk_norm_full)
      return no_config_form(dir, "OLMo 2", ", q/k/v biases, partial rotary or per-head q/k norms",
                            "Olmo2ForCausalLM");
    return llama_family_config("Olmo2ForCausalLM", "olmo2", c,
                               {{"rms_norm_eps", c.norm_eps}, {"attention_bias", false}}, torch_dtype);
  }
  if (c.llama()) {
    // A sliding window makes the Llama shape Mistral's (every layer windowed); Qwen2 and Qwen3 say which
    // layers. Qwen3 is the shape with per-head query and key norms.
    // Gemma 2 and 3 add output norms to Gemma's parts (Gemma 3 q/k norms too).
    const bool sandwich = c.sandwich_norm, gemma3 = sandwich && c.qk_norm, gemma2 = sandwich && !gemma3,
               gemma = c.gemma() && !sandwich, qwen3 = c.qk_norm && !sandwich, qwen2 = !qwen3 && c.qkv_bias,
               qwen = qwen2 || qwen3;
    const bool phi3 = c.fused_names, mistral = !qwen && !phi3 && !sandwich && c.sliding_window > 0;
    // Gemma 2's and 3's parts: with Gemma's, and only in their config.json (soft-capping and
    // query_pre_attn_scalar are their configs' keys, rope_local_base_freq Gemma 3's).
    if ((sandwich && (!c.gemma() || c.qkv_bias || phi3)) ||
        (!sandwich && (c.attn_softcap > 0 || c.final_softcap > 0 || c.query_scale > 0))) {
      return Status::invalid_argument(
          dir +
          ": Gemma 2's output norms, soft-capping and query_pre_attn_scalar have a "
          "config.json form only with Gemma's parts, without biases "
          "(Gemma2ForCausalLM, or with q/k norms Gemma3ForCausalLM)");
    }
    if ((c.rope_local_theta > 0 && !gemma3) ||
        (gemma3 && c.rope_local_theta == 0 && !c.rope_scaling.none())) {
      return Status::invalid_argument(dir +
                                      ": a local rotary base has a config.json form only for Gemma 3, whose "
                                      "rope_scaling applies to its global layers only");
    }
    // Windows on all layers but every n-th: Gemma 2's (any pattern: its layer_types lists them), Qwen's (in
    // layer_types too); not Mistral's, Phi-3's or Gemma's.
    const bool interleaved = c.sliding_window > 0 && c.global_every > 0;
    if (interleaved && !sandwich && (!qwen || c.first_window_layer > 0)) {
      return Status::invalid_argument(dir + ": a window on all layers but one in every " +
                                      std::to_string(c.global_every) +
                                      " has a config.json form only for Gemma 2 and Qwen (layer_types), from "
                                      "the first layer");
    }
    if (phi3 && (qwen || c.gelu_mlp || c.norm_unit_offset || c.embed_scale || c.head_dim > 0)) {
      return Status::invalid_argument(dir +
                                      ": Phi-3's fused tensor names with another family's parts have no "
                                      "config.json form (Phi3ForCausalLM is the plain Llama shape)");
    }
    if (phi3 && c.sliding_window > 0 && c.first_window_layer > 0) {
      return Status::invalid_argument(dir + ": a sliding window from layer " +
                                      std::to_string(c.first_window_layer) +
                                      " on has no Phi-3 config.json form (Phi-3 windows every layer)");
    }
    if ((c.gelu_mlp || c.norm_unit_offset || c.embed_scale) && !sandwich &&
        (!gemma || c.qkv_bias || c.qk_norm || c.sliding_window > 0)) {
      return Status::invalid_argument(dir +
                                      ": Gemma's GeGLU, 1 + weight norms and scaled embedding have a "
                                      "config.json form only together, without biases, q/k norms or "
                                      "windows (GemmaForCausalLM)");
    }
    if (qwen3 && c.qkv_bias) {
      return Status::invalid_argument(dir +
                                      ": q, k and v biases with per-head q/k norms have no Qwen3 "
                                      "config.json form (its attention_bias puts biases on o_proj too)");
    }
    if (c.partial_rotary != 1.0 && !phi3) {
      return Status::invalid_argument(dir +
                                      ": rotary on part of each head has a config.json form only for Phi-3 "
                                      "(partial_rotary_factor, Phi3ForCausalLM)");
    }
    if (mistral && c.first_window_layer > 0) {
      return Status::invalid_argument(dir + ": a sliding window from layer " +
                                      std::to_string(c.first_window_layer) +
                                      " on has no Mistral config.json form (Mistral windows every layer)");
    }
    nlohmann::ordered_json config = {
        {"architectures",
         {phi3      ? "Phi3ForCausalLM"
          : gemma3  ? "Gemma3ForCausalLM"
          : gemma2  ? "Gemma2ForCausalLM"
          : gemma   ? "GemmaForCausalLM"
          : qwen3   ? "Qwen3ForCausalLM"
          : qwen2   ? "Qwen2ForCausalLM"
          : mistral ? "MistralForCausalLM"
                    : "LlamaForCausalLM"}},
        {"model_type", phi3      ? "phi3"
                       : gemma3  ? "gemma3_text"
                       : gemma2  ? "gemma2"
                       : gemma   ? "gemma"
                       : qwen3   ? "qwen3"
                       : qwen2   ? "qwen2"
                       : mistral ? "mistral"
                                 : "llama"},
        {"vocab_size", c.vocab},
        {"max_position_embeddings", c.max_seq},
        {"hidden_size", c.channels},
        {"intermediate_size", c.ffn_width()},
        {"num_hidden_layers", c.main_layers()},
        {"num_attention_heads", c.heads},
        {"num_key_value_heads", c.kv_head_count()},
        {"hidden_act", gemma || sandwich ? "gelu_pytorch_tanh" : "silu"},
        {"rms_norm_eps", c.norm_eps},
        {"rope_theta", c.rope_theta},
        {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"tie_word_embeddings", c.tied},
        {"torch_dtype", torch_dtype},
    };
    // Qwen3's and Gemma's configs default head_dim to 128 and 256: always written for them; for others where
    // it is not C / heads.
    if (qwen3 || gemma || sandwich || c.head_dim > 0) config["head_dim"] = c.head_size();
    if (gemma || sandwich) config["hidden_activation"] = "gelu_pytorch_tanh";
    if (sandwich) {
      const auto cap = [](double v) {
        return v > 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
      };
      config["attn_logit_softcapping"] = cap(c.attn_softcap);
      config["final_logit_softcapping"] = cap(c.final_softcap);
      config["query_pre_attn_scalar"] =
          c.query_scale > 0 ? c.query_scale : static_cast<double>(c.head_size());
      // Their configs always have a window (on every other layer, one in six): without one, every layer is
      // listed full.
      config["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : 4096;
    }
    if (gemma3) {
      config["rope_local_base_freq"] = c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta;
      if (c.global_every > 0 && c.first_window_layer == 0) config["sliding_window_pattern"] = c.global_every;
    }
    if (sandwich || interleaved) {  // as transformers (4.53 on) lists them
      config["layer_types"] = layer_types(c);
    }
    // longrope picks its factors by the original context, a model-level key in transformers' configs.
    if (c.rope_scaling.type == "longrope")
      config["original_max_position_embeddings"] = c.rope_scaling.original_max_positions;
    if (phi3) config["partial_rotary_factor"] = c.partial_rotary;
    if (mistral) config["sliding_window"] = c.sliding_window;
    if (phi3)
      config["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
    if (qwen) {
      config["use_sliding_window"] = c.sliding_window > 0;
      config["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
      config["max_window_layers"] = c.sliding_window > 0 ? c.first_window_layer : c.layers;
    }
    return config.dump(2) + "\n";
  }
  if (c.opt) {  // OPTConfig's keys: pre-LN (every OPT but 350m), no projection of the embeddings
    return family_config("OPTForCausalLM", "opt", c,
                         {
                             {"ffn_dim", c.ffn_width()},
                             {"max_position_embeddings", c.max_seq},
                             {"word_embed_proj_dim", c.channels},
                             {"do_layer_norm_before", true},
                             {"activation_function", "relu"},
                             {"enable_bias", true},
                             {"layer_norm_elementwise_affine", true},
                             {"dropout", 0.0},
                             {"attention_dropout", 0.0},
                             {"activation_dropout", 0.0},
                             {"layerdrop", 0.0},
                             {"tie_word_embeddings", true},
                         },
                         torch_dtype);
  }
  if (c.neox) {  // GPTNeoXConfig's keys (its older rotary_emb_base, transformers' newer rope_theta)
    return family_config("GPTNeoXForCausalLM", "gpt_neox", c,
                         {
                             {"intermediate_size", c.ffn_width()},
                             {"hidden_act", c.exact_gelu ? "gelu" : "gelu_new"},
                             {"rotary_pct", c.partial_rotary},
                             {"rotary_emb_base", c.rope_theta},
                             {"rope_theta", c.rope_theta},
                             {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
                             {"max_position_embeddings", c.max_seq},
                             {"layer_norm_eps", 1e-5},
                             {"use_parallel_residual", c.parallel_residual},
                             {"attention_bias", true},
                             {"attention_dropout", 0.0},
                             {"hidden_dropout", 0.0},
                             {"tie_word_embeddings", c.tied},
                         },
                         torch_dtype);
  }
  if (c.falcon) {  // FalconConfig's keys: the new decoder architecture for grouped-query attention or two
                   // norms side by side, else multi-query (one key/value head) or one per head
    const int kv = c.kv_head_count();
    const bool two_side_by_side = c.parallel_residual && !c.shared_norm();
    const bool new_arch = two_side_by_side || (kv != 1 && kv != c.heads);
    if (new_arch && !c.parallel_residual) {
      return Status::invalid_argument(dir + ": Falcon's grouped-query attention (" + std::to_string(kv) +
                                      " key/value heads) with the attention and the MLP in sequence has no "
                                      "config.json form (its new decoder architecture is side by side)");
    }
    return family_config("FalconForCausalLM", "falcon", c,
                         {
                             {"num_kv_heads", kv},
                             {"new_decoder_architecture", new_arch},
                             {"multi_query", !new_arch && kv == 1},
                             {"parallel_attn", c.parallel_residual},
                             {"num_ln_in_parallel_attn", c.shared_norm() ? 1 : 2},
                             {"bias", !c.no_bias},
                             {"alibi", c.falcon_alibi},
                             {"ffn_hidden_size", c.ffn_width()},
                             {"activation", c.exact_gelu ? "gelu" : "gelu_new"},
                             {"max_position_embeddings", c.max_seq},
                             {"rope_theta", c.rope_theta},
                             {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
                             {"layer_norm_epsilon", 1e-5},
                             {"hidden_dropout", 0.0},
                             {"attention_dropout", 0.0},
                             {"tie_word_embeddings", c.tied},
                         },
                         torch_dtype);
  }
  if (c.starcoder2) {  // Starcoder2Config's keys (a window on every layer, or null)
    if (c.partial_rotary != 1.0) {
      return Status::invalid_argument(dir +
                                      ": StarCoder2 with rotary on part of each head has no config.json form "
                                      "(Starcoder2ForCausalLM turns every channel)");
    }
    return family_config(
        "Starcoder2ForCausalLM", "starcoder2", c,
        {
            {"intermediate_size", c.ffn_width()},
            {"num_key_value_heads", c.kv_head_count()},
            {"hidden_act", c.exact_gelu ? "gelu" : "gelu_pytorch_tanh"},
            {"max_position_embeddings", c.max_seq},
            {"rope_theta", c.rope_theta},
            {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
            {"sliding_window", c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr},
            {"norm_epsilon", 1e-5},
            {"use_bias", !c.no_bias},
            {"attention_dropout", 0.0},
            {"residual_dropout", 0.0},
            {"embedding_dropout", 0.0},
            {"tie_word_embeddings", c.tied},
        },
        torch_dtype);
  }
  if (c.nemotron) {  // NemotronConfig's keys (biases on every linear or none)
    return family_config("NemotronForCausalLM", "nemotron", c,
                         {
                             {"intermediate_size", c.ffn_width()},
                             {"num_key_value_heads", c.kv_head_count()},
                             {"head_dim", c.head_size()},
                             {"hidden_act", "relu2"},
                             {"max_position_embeddings", c.max_seq},
                             {"norm_eps", 1e-5},
                             {"rope_theta", c.rope_theta},
                             {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
                             {"partial_rotary_factor", c.partial_rotary},
                             {"attention_bias", !c.no_bias},
                             {"mlp_bias", !c.no_bias},
                             {"attention_dropout", 0.0},
                             {"tie_word_embeddings", c.tied},
                         },
                         torch_dtype);
  }
  if (c.phi) {  // PhiConfig's keys
    return family_config("PhiForCausalLM", "phi", c,
                         {
                             {"intermediate_size", c.ffn_width()},
                             {"num_key_value_heads", c.heads},
                             {"hidden_act", c.exact_gelu ? "gelu" : "gelu_new"},
                             {"max_position_embeddings", c.max_seq},
                             {"layer_norm_eps", 1e-5},
                             {"rope_theta", c.rope_theta},
                             {"rope_scaling", hf_rope_scaling(c.rope_scaling)},
                             {"partial_rotary_factor", c.partial_rotary},
                             {"qk_layernorm", false},
                             {"resid_pdrop", 0.0},
                             {"embd_pdrop", 0.0},
                             {"attention_dropout", 0.0},
                             {"tie_word_embeddings", false},
                         },
                         torch_dtype);
  }
  if (c.gptj) {  // GPTJConfig's (CodeGenConfig's) keys, GPT-2's names; the rotary base is fixed at 10000
    if (c.rope_theta != 10000 || !c.rope_scaling.none()) {
      return Status::invalid_argument(dir + (c.codegen ? ": CodeGen" : ": GPT-J") + " with rope_theta " +
                                      strprintf("%g", c.rope_theta) +
                                      (c.rope_scaling.none() ? "" : " and rope_scaling") +
                                      " has no config.json form (its rotary base is 10000, unscaled)");
    }
    nlohmann::ordered_json config = {
        {"architectures", {c.codegen ? "CodeGenForCausalLM" : "GPTJForCausalLM"}},
        {"model_type", c.codegen ? "codegen" : "gptj"},
        {"vocab_size", c.vocab},
        {"n_embd", c.channels},
        {"n_layer", c.layers},
        {"n_head", c.heads},
        {"n_inner", c.ffn_width()},
        {"n_positions", c.max_seq},
        {"n_ctx", c.max_seq},
        {"rotary_dim", c.rotary_dim()},
        {"activation_function", c.exact_gelu ? "gelu" : "gelu_new"},
        {"layer_norm_epsilon", 1e-5},
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},
        {"tie_word_embeddings", false},
        {"torch_dtype", torch_dtype},
    };
    return config.dump(2) + "\n";
  }
  if (c.mpt) {  // MptConfig's keys (d_model, n_heads, attn_config); max_seq_len: ALiBi's table length
    if (c.ffn_width() % c.channels != 0) {
      return Status::invalid_argument(dir + ": MPT's MLP of " + std::to_string(c.ffn_width()) +
                                      " features is not a whole expansion_ratio of d_model " +
                                      std::to_string(c.channels) + " (MptForCausalLM's must be)");
    }
    nlohmann::ordered_json config = {
        {"architectures", {"MptForCausalLM"}},
        {"model_type", "mpt"},
        {"vocab_size", c.vocab},
        {"d_model", c.channels},
        {"n_layers", c.layers},
        {"n_heads", c.heads},
        {"expansion_ratio", c.ffn_width() / c.channels},
        {"max_seq_len", c.max_seq},
        {"no_bias", true},
        {"norm_type", "low_precision_layernorm"},
        {"layer_norm_epsilon", 1e-5},
        {"learned_pos_emb", true},
        {"logit_scale", nullptr},
        {"attn_config",
         {{"alibi", true},
          {"alibi_bias_max", 8},
          {"attn_type", "multihead_attention"},
          {"attn_impl", "torch"},
          {"attn_pdrop", 0.0},
          {"clip_qkv", nullptr},
          {"qk_ln", false},
          {"prefix_lm", false},
          {"softmax_scale", nullptr}}},
        {"emb_pdrop", 0.0},
        {"resid_pdrop", 0.0},
        {"tie_word_embeddings", true},
        {"torch_dtype", torch_dtype},
    };
    return config.dump(2) + "\n";
  }
  if (c.bloom) {  // BloomConfig's keys (n_layer, n_head); ALiBi has no position limit to write
    nlohmann::ordered_json config = {
        {"architectures", {"BloomForCausalLM"}},
        {"model_type", "bloom"},
        {"vocab_size", c.vocab},
        {"hidden_size", c.channels},
        {"n_layer", c.layers},
        {"n_head", c.heads},
        {"layer_norm_epsilon", 1e-5},
        {"apply_residual_connection_post_layernorm", false},
        {"hidden_dropout", 0.0},
        {"attention_dropout", 0.0},
        {"pretraining_tp", 1},
        {"slow_but_exact", false},
        {"tie_word_embeddings", true},
        {"torch_dtype", torch_dtype},
    };
    return config.dump(2) + "\n";
  }
  if (c.bigcode) {  // GPTBigCodeConfig's keys: GPT-2's, with multi-query attention
    if (c.kv_head_count() != 1 && c.kv_head_count() != c.heads) {
      return Status::invalid_argument(
          dir + ": GPT-BigCode with " + std::to_string(c.kv_head_count()) +
          " key/value heads has no config.json form (multi_query: one, or one per "
          "query head)");
    }
    nlohmann::ordered_json config = {
        {"architectures", {"GPTBigCodeForCausalLM"}},
        {"model_type", "gpt_bigcode"},
        {"vocab_size", c.vocab},
        {"n_positions", c.max_seq},
        {"n_embd", c.channels},
        {"n_layer", c.layers},
        {"n_head", c.heads},
        {"n_inner", c.ffn_width()},
        {"multi_query", c.kv_head_count() == 1},
        {"activation_function", c.exact_gelu ? "gelu" : "gelu_pytorch_tanh"},
        {"layer_norm_epsilon", 1e-5},
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},
        {"tie_word_embeddings", true},
        {"torch_dtype", torch_dtype},
    };
    return config.dump(2) + "\n";
  }
  nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab},
      {"n_positions", c.max_seq},
      {"n_ctx", c.max_seq},
      {"n_embd", c.channels},
      {"n_layer", c.layers},
      {"n_head", c.heads},
      {"n_inner", nullptr},
      {"activation_function", c.exact_gelu ? "gelu" : "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"tie_word_embeddings", true},
      {"torch_dtype", torch_dtype},
  };
  return config.dump(2) + "\n";
}

}  // namespace

Status export_hf(const GptConfig& c, const float* params, const std::string& dir, ExportDtype dtype) {
  return export_hf(
      c,
      [params](std::size_t offset, std::size_t n, float* out) {
        std::copy(params + offset, params + offset + n, out);
        return Status::ok();
      },
      dir, dtype);
}

Status export_hf(const GptConfig& c, const ParamReader& read, const std::string& dir, ExportDtype dtype) {
  const std::size_t eb = dtype == ExportDtype::kF32 ? 4 : 2;
  const char* dtype_name = dtype == ExportDtype::kF32 ? "F32" : dtype == ExportDtype::kBF16 ? "BF16" : "F16";
  MW_RETURN_IF_ERROR(validate(c, 1, 1));
  // The config first: a model without a config.json form is refused before any file is written.
  const Result<std::string> config = hf_config(c, dir, dtype);
  if (!config.is_ok()) return config.status();
  std::vector<ParamTensor> layout = hf_param_layout(c);
  if (c.mtp > 0) {
    // The next-token-prediction module's copies of the embedding and the head, under its layer as DeepSeek's
    // and GLM-4.5's files keep them (what vLLM's and SGLang's MTP loaders read; memwall reads the model's
    // own).
    const std::string h = "model.layers." + std::to_string(c.main_layers()) + ".";
    std::vector<ParamTensor> copies;
    for (const auto& t : layout) {
      if (t.name == "model.embed_tokens.weight")
        copies.push_back({h + "embed_tokens.weight", t.offset, t.numel, t.shape});
      if (t.name == (c.tied ? "model.embed_tokens.weight" : "lm_head.weight"))
        copies.push_back({h + "shared_head.head.weight", t.offset, t.numel, t.shape});
    }
    layout.insert(layout.end(), copies.begin(), copies.end());
  }
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"producer", "memwall"}};
  std::size_t at = 0, largest = 0;
  for (const auto& t : layout) {
    std::vector<int> shape = t.shape;
    if (hf_transposed(c, t)) shape = {t.shape[1], t.shape[0]};  // memwall stores [out, in]; Conv1D [in, out]
    const std::size_t bytes = t.numel * eb;
    header[t.name] = {{"dtype", dtype_name}, {"shape", shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
    largest = std::max(largest, t.numel);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>((static_cast<std::uint64_t>(h.size()) >> (8 * i)) & 0xff);
  // Tensor by tensor: the file is written without the model ever being in memory whole.
  auto file = io::AtomicFile::create(dir + "/model.safetensors");
  if (!file.is_ok()) return file.status();
  MW_RETURN_IF_ERROR(file->append(len, 8));
  MW_RETURN_IF_ERROR(file->append(h.data(), h.size()));
  std::vector<float> src(largest), reordered;
  std::vector<std::uint16_t> half(eb == 2 ? largest : 0);
  for (const auto& t : layout) {
    MW_RETURN_IF_ERROR(read(t.offset, t.numel, src.data()));
    const float* data = src.data();
    if (hf_transposed(c, t)) {
      reordered.resize(t.numel);  // [out, in] -> Conv1D's [in, out]
      transpose(src.data(), static_cast<std::size_t>(t.shape[0]), static_cast<std::size_t>(t.shape[1]),
                reordered.data());
      data = reordered.data();
    } else if (hf_interleaved(c, t)) {
      reordered.resize(t.numel);  // every q, k, v -> head by head (GPT-NeoX's)
      hf_reorder(c, t, src.data(), reordered.data(), true);
      data = reordered.data();
    }
    if (dtype == ExportDtype::kF32) {
      MW_RETURN_IF_ERROR(file->append(data, t.numel * sizeof(float)));
      continue;
    }
    if (dtype == ExportDtype::kBF16) {
      kernels::cast_f32_to_bf16(data, half.data(), t.numel);
    } else {
      kernels::cast_f32_to_f16(data, half.data(), t.numel);
    }
    MW_RETURN_IF_ERROR(file->append(half.data(), t.numel * 2));
  }
  MW_RETURN_IF_ERROR(file->commit());

  return io::write_file_atomic(dir + "/config.json", {*config});
}

}  // namespace memwall::model
