// Parsing hardware (memwall format), model (Hugging Face config.json) and run (DeepSpeed ds_config.json)
// files into typed specs, with one-line errors and unknown-key warnings.
#include "spec/spec_loader.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "spec/json_reader.h"
#include "spec/json_text.h"

namespace memwall {

using detail::JsonObjectReader;
using nlohmann::json;

namespace {

constexpr int kHardwareFormatMajor = 1;

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

std::string stem_of(const std::string& path) {
  std::string name =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// Applies "inherits": "<relative path>" recursively: the base is loaded first, this file patches it.
Result<json> resolve_inherits(json j, const std::string& source, const ReadFileFn& read_file, int depth) {
  if (!j.contains("inherits")) return j;
  const json& ref = j.at("inherits");
  if (!ref.is_string()) {
    return Status::invalid_argument(source + ": key 'inherits': " + detail::short_dump(ref) +
                                    " is not allowed; allowed: a relative path to another hardware file");
  }
  if (depth > 8)
    return Status::invalid_argument(source + ": key 'inherits': chain deeper than 8 files (a cycle?)");
  if (!read_file) return Status::invalid_argument(source + ": key 'inherits': no file reader available");
  const std::string ref_str = ref.get<std::string>();
  const std::string base_path = ref_str.rfind('/', 0) == 0 ? ref_str : directory_of(source) + ref_str;
  Result<std::string> text = read_file(base_path);
  if (!text.is_ok()) {
    return Status::invalid_argument(source + ": key 'inherits': cannot read \"" + ref_str +
                                    "\": " + text.status().message());
  }
  Result<json> base = parse_json_object(*text, base_path);
  if (!base.is_ok()) return base.status();
  Result<json> resolved = resolve_inherits(std::move(*base), base_path, read_file, depth + 1);
  if (!resolved.is_ok()) return resolved.status();
  j.erase("inherits");
  json merged = std::move(*resolved);
  merged.merge_patch(j);
  return merged;
}

// The model_type values parse_model reads.
constexpr const char* kModelTypes =
    "gpt2, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, gemma3, "
    "phi3, opt, gpt_neox, falcon, bloom, phi, gpt_bigcode, mpt, gptj, codegen, stablelm, olmo, olmo2, "
    "olmo3, cohere, cohere2, smollm3, granite, granitemoe, exaone4, glm, glm4, starcoder2, olmoe, gpt_oss, "
    "seed_oss, mistral3, nemotron, glm4_moe, deepseek_v2, deepseek_v3, kimi_k2, llama4, llama4_text, "
    "qwen3_next, "
    "zero-infinity-paper";

Status require(JsonObjectReader& r, const char* key) {
  if (!r.has(key)) return r.error(key, "is missing (required)");
  return Status::ok();
}

// A flag memwall supports with one value only (`supported`, also its default): the other is a one-line
// error saying what it would mean (`what`, may be empty).
Status require_flag(JsonObjectReader& r, const char* key, bool supported, const std::string& what = "") {
  bool value = supported;
  MW_RETURN_IF_ERROR(r.get_bool(key, value));
  if (value == supported) return Status::ok();
  const char* name = value ? "true" : "false";
  return r.error(key, std::string(name) + (what.empty() ? "" : " (" + what + ")") +
                          " is not supported; allowed: " + (supported ? "true" : "false"));
}

// Which layers attend over the window, as transformers' layer_types lists them ("full_attention",
// "sliding_attention"), in the two forms memwall computes: a run of last layers (first_window_layer), or
// every n-th layer full (global_every: Gemma 2's alternation, Gemma 3's five local layers to one global).
Status read_layer_types(const json& lt, JsonObjectReader& r, ModelSpec& m) {
  std::vector<bool> sliding;
  bool ok = lt.is_array() && static_cast<int>(lt.size()) == m.layers;
  for (std::size_t i = 0; ok && i < lt.size(); ++i) {
    sliding.push_back(lt[i] == "sliding_attention");
    ok = sliding.back() || lt[i] == "full_attention";
  }
  if (!ok) {
    return r.error("layer_types", "must list num_hidden_layers (" + std::to_string(m.layers) +
                                      ") entries, each \"full_attention\" or \"sliding_attention\"");
  }
  const int L = m.layers;
  const auto matches = [&](auto&& is_sliding) {
    for (int i = 0; i < L; ++i) {
      if (sliding[static_cast<std::size_t>(i)] != is_sliding(i)) return false;
    }
    return true;
  };
  const int first = static_cast<int>(std::find(sliding.begin(), sliding.end(), true) - sliding.begin());
  if (matches([&](int i) { return i >= first; })) {
    m.first_window_layer = first;  // L: no layer has the window
    m.global_every = 0;
    return Status::ok();
  }
  for (int n = 2; n <= L; ++n) {
    if (matches([&](int i) { return (i + 1) % n != 0; })) {
      m.first_window_layer = 0;
      m.global_every = n;
      return Status::ok();
    }
  }
  return r.error(
      "layer_types",
      "is a pattern memwall does not compute; allowed: full_attention layers then "
      "sliding_attention ones, or every n-th layer full_attention and the others sliding_attention");
}

// Which layers have the window read into m: as layer_types lists them, when the file has it (over the
// defaults and sliding_window_pattern); then none when no layer has one (first_window_layer past the last) or
// the window is 0.
Status read_window_layers(const json& j, JsonObjectReader& r, ModelSpec& m) {
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    MW_RETURN_IF_ERROR(read_layer_types(j["layer_types"], r, m));
  }
  if (m.first_window_layer >= m.layers) m.sliding_window = 0;  // no layer has it
  if (m.sliding_window == 0) m.first_window_layer = m.global_every = 0;
  return Status::ok();
}

// SmolLM3's layers without rotary positions: no_rope_layers (1: the layer turns, 0: it does not; at least a
// layer's worth of entries), else one layer in every no_rope_layer_interval (4), as every n-th layer
// (nope_every); its window (use_sliding_window), on those layers only, is refused.
Status read_no_rope_layers(const json& j, JsonObjectReader& r, ModelSpec& m) {
  MW_RETURN_IF_ERROR(
      require_flag(r, "use_sliding_window", false, "a window on the layers without positions"));
  m.nope_every = 4;
  MW_RETURN_IF_ERROR(r.get_int("no_rope_layer_interval", m.nope_every, 1, 1 << 20));
  if (j.contains("no_rope_layers") && !j["no_rope_layers"].is_null()) {
    const json& nr = j["no_rope_layers"];
    bool ok = nr.is_array() && static_cast<int>(nr.size()) >= m.layers;
    for (std::size_t i = 0; ok && i < nr.size(); ++i) ok = nr[i] == 0 || nr[i] == 1;
    if (!ok) {
      return r.error("no_rope_layers", "must list at least num_hidden_layers (" + std::to_string(m.layers) +
                                           ") entries, each 1 (rotary) or 0 (none)");
    }
    const auto matches = [&](int n) {
      for (int i = 0; i < m.layers; ++i) {
        if ((nr[static_cast<std::size_t>(i)] == 1) != (n == 0 || (i + 1) % n != 0)) return false;
      }
      return true;
    };
    int n = 0;
    while (n <= m.layers && !matches(n)) ++n;
    if (n > m.layers) {
      return r.error("no_rope_layers",
                     "is a pattern memwall does not compute; allowed: every n-th layer 0 "
                     "and the others 1");
    }
    m.nope_every = n;
  }
  if (m.nope_every > m.layers) m.nope_every = 0;  // no layer is one
  r.ignore({"no_rope_layers"});
  return Status::ok();
}

// Granite's four multipliers (GraniteConfig's, each 1 by default): embedding_multiplier on the embedding,
// attention_multiplier the scores' scale (kept as query_scale, its -2nd power), residual_multiplier on each
// sublayer's output before its residual add, logits_scaling the logits' divisor (kept as logit_scale, its
// inverse).
Status read_granite_multipliers(JsonObjectReader& r, ModelSpec& m) {
  double attention = 1, logits = 1;
  m.embed_multiplier = 1;
  MW_RETURN_IF_ERROR(r.get_number("embedding_multiplier", m.embed_multiplier, 1e-6, 1e6));
  MW_RETURN_IF_ERROR(r.get_number("attention_multiplier", attention, 1e-6, 1e6));
  MW_RETURN_IF_ERROR(r.get_number("residual_multiplier", m.residual_multiplier, 1e-6, 1e6));
  MW_RETURN_IF_ERROR(r.get_number("logits_scaling", logits, 1e-6, 1e6));
  m.query_scale = 1.0 / (attention * attention);
  m.logit_scale = 1.0 / logits;
  return Status::ok();
}

// DeepSeek-V2's and V3's multi-head latent attention (DeepseekV3Config's defaults, V2's the same): keys and
// values from a latent of kv_lora_rank (512), queries from one of q_lora_rank (1536; null: one q_proj), heads
// of qk_nope_head_dim (128) + qk_rope_head_dim (64) for queries and keys and v_head_dim (128) for values. No
// grouped-query heads (num_key_value_heads is not used); attention_bias (on the down projections and
// o_proj) refused.
Status read_latent_attention(const json& j, JsonObjectReader& r, ModelSpec& m) {
  if (m.linear_bias) {
    return r.error("attention_bias",
                   "true (biases on the latent attention's projections) is not supported; "
                   "allowed: false");
  }
  int nope = 128;
  m.kv_lora_rank = 512;
  m.q_lora_rank = 1536;
  m.rope_head_size = 64;
  m.v_head_size = 128;
  MW_RETURN_IF_ERROR(r.get_int("kv_lora_rank", m.kv_lora_rank, 1, 1 << 20));
  if (j.contains("q_lora_rank") && j["q_lora_rank"].is_null()) m.q_lora_rank = 0;
  MW_RETURN_IF_ERROR(r.get_int("q_lora_rank", m.q_lora_rank, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("qk_nope_head_dim", nope, 0, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("qk_rope_head_dim", m.rope_head_size, 0, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("v_head_dim", m.v_head_size, 1, 1 << 20));
  if (nope + m.rope_head_size < 1)
    return r.error("qk_nope_head_dim", "and qk_rope_head_dim are both 0; allowed: a head of at least 1");
  m.head_size = nope + m.rope_head_size;
  m.kv_heads = m.heads;
  r.ignore({"num_key_value_heads"});
  return r.get_bool("rope_interleave", m.rope_interleave);
}

// DeepSeek's mixture of experts (DeepseekV3Config's defaults; DeepseekV2Config's in brackets): the first
// first_k_dense_replace (3 [0]) blocks a dense gated MLP of intermediate_size, the others n_routed_experts
// (256 [64]; null: none, every block dense) of moe_intermediate_size (2048 [1407]), num_experts_per_tok (8
// [required]) per token, beside n_shared_experts (1 [2]; null: none) shared experts of that width without a
// gate, taken as one of their summed width. Experts in every moe_layer_freq-th block only, refused. How the
// router scores and groups (scoring_func, topk_method, n_group, topk_group, routed_scaling_factor) is not
// counted; the next-token-prediction modules (num_nextn_predict_layers) only with the run's memwall.mtp.
Status read_deepseek_experts(const json& j, JsonObjectReader& r, ModelSpec& m) {
  const bool v3 = m.model_type != "deepseek_v2";
  r.ignore({"ep_size", "auto_map"});
  MW_RETURN_IF_ERROR(r.get_int("num_nextn_predict_layers", m.mtp_in_file, 0, 64));
  int freq = 1;
  MW_RETURN_IF_ERROR(r.get_int("moe_layer_freq", freq, 1, 1 << 20));
  if (freq != 1) {
    return r.error("moe_layer_freq", std::to_string(freq) +
                                         " (dense MLPs between the blocks of experts) is not supported; "
                                         "allowed: 1, experts in every block after the dense ones");
  }
  if (j.contains("n_routed_experts") && j["n_routed_experts"].is_null()) {  // a dense model
    r.ignore({"n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
              "first_k_dense_replace", "aux_loss_alpha", "seq_aux"});
    return Status::ok();
  }
  m.experts = v3 ? 256 : 64;
  MW_RETURN_IF_ERROR(r.get_int("n_routed_experts", m.experts, 1, 1 << 20));
  if (!v3) MW_RETURN_IF_ERROR(require(r, "num_experts_per_tok"));
  m.experts_per_token = 8;
  MW_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", m.experts_per_token, 1, m.experts));
  m.expert_ffn = v3 ? 2048 : 1407;
  MW_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", m.expert_ffn, 1, 1 << 26));
  int shared = v3 ? 1 : 2;
  if (j.contains("n_shared_experts") && j["n_shared_experts"].is_null()) shared = 0;
  MW_RETURN_IF_ERROR(r.get_int("n_shared_experts", shared, 0, 1 << 10));
  m.shared_expert_ffn = shared * m.expert_ffn;
  m.shared_expert_gate = false;
  m.dense_layers = v3 ? 3 : 0;
  MW_RETURN_IF_ERROR(r.get_int("first_k_dense_replace", m.dense_layers, 0, m.layers));
  // The routing (DeepseekV2Config's and V3's defaults): V2's softmax scores, the best experts (greedy) or the
  // best among the topk_group groups of n_group scored by their best expert (group_limited_greedy); V3's
  // sigmoid scores chosen with its correction bias among groups scored by their two best (noaux_tc: GLM-4.5's
  // routing); the weights renormalised with norm_topk_prob, times routed_scaling_factor. What memwall train
  // computes; predict and simulate do not depend on it.
  std::string scoring = v3 ? "sigmoid" : "softmax", method = v3 ? "noaux_tc" : "greedy";
  MW_RETURN_IF_ERROR(r.get_choice("scoring_func", scoring, {"softmax", "sigmoid"}));
  // ("gready": DeepSeek-V2's own configuration code spells the default so)
  MW_RETURN_IF_ERROR(
      r.get_choice("topk_method", method, {"greedy", "gready", "group_limited_greedy", "noaux_tc"}));
  m.sigmoid_routing = scoring == "sigmoid";
  m.group_by_best = method == "group_limited_greedy";
  const bool grouped = m.group_by_best || method == "noaux_tc";
  m.expert_groups = grouped && v3 ? 8 : 1;
  m.groups_per_token = grouped && v3 ? 4 : 1;
  if (grouped) {
    MW_RETURN_IF_ERROR(r.get_int("n_group", m.expert_groups, 1, m.experts));
    MW_RETURN_IF_ERROR(r.get_int("topk_group", m.groups_per_token, 1, m.expert_groups));
  }
  r.ignore({"n_group", "topk_group"});
  if (m.experts % m.expert_groups != 0) {
    return r.error("n_group", std::to_string(m.expert_groups) + " does not divide the " +
                                  std::to_string(m.experts) + " experts; allowed: a divisor of them");
  }
  m.routed_scale = v3 ? 2.5 : 1.0;
  MW_RETURN_IF_ERROR(r.get_number("routed_scaling_factor", m.routed_scale, 0.0, 1e6));
  m.norm_topk_prob = v3;
  MW_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", m.norm_topk_prob));
  // DeepSeek's balance loss (DeepseekV2Config's and V3's defaults: 0.001, per sequence).
  m.seq_aux_alpha = 0.001;
  MW_RETURN_IF_ERROR(r.get_number("aux_loss_alpha", m.seq_aux_alpha, 0.0, 1e3));
  return r.get_bool("seq_aux", m.seq_aux);
}

// Qwen3-Next's hybrid attention (Qwen3NextConfig's defaults): every full_attention_interval-th layer (4)
// softmax attention with an output gate, the others a Gated DeltaNet of linear_num_key_heads (16) query and
// key heads of linear_key_head_dim (128), linear_num_value_heads (32) value heads of linear_value_head_dim
// (128) and a convolution of linear_conv_kernel_dim (4) taps; layer_types, where given, must list that
// pattern. Its RMSNorms scale by 1 + weight (nothing to count).
Status read_linear_attention(const json& j, JsonObjectReader& r, ModelSpec& m) {
  m.full_attn_every = 4;
  MW_RETURN_IF_ERROR(r.get_int("full_attention_interval", m.full_attn_every, 1, m.layers));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    json expected = json::array();
    for (int l = 0; l < m.layers; ++l)
      expected.push_back(m.linear_attention(l) ? "linear_attention" : "full_attention");
    if (j["layer_types"] != expected) {
      return r.error("layer_types",
                     "is a pattern memwall does not compute; allowed: every "
                     "full_attention_interval-th layer (" +
                         std::to_string(m.full_attn_every) +
                         ") \"full_attention\", the others \"linear_attention\"");
    }
  }
  r.ignore({"layer_types", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings"});
  m.la_key_heads = 16;
  m.la_value_heads = 32;
  m.la_key_dim = m.la_value_dim = 128;
  m.la_conv_kernel = 4;
  MW_RETURN_IF_ERROR(r.get_int("linear_num_key_heads", m.la_key_heads, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("linear_num_value_heads", m.la_value_heads, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("linear_key_head_dim", m.la_key_dim, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("linear_value_head_dim", m.la_value_dim, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("linear_conv_kernel_dim", m.la_conv_kernel, 1, 1 << 10));
  if (m.la_value_heads % m.la_key_heads != 0) {
    return r.error("linear_num_value_heads", std::to_string(m.la_value_heads) +
                                                 " is not a multiple of linear_num_key_heads (" +
                                                 std::to_string(m.la_key_heads) + "); allowed: a multiple");
  }
  m.attn_output_gate = m.norm_unit_offset = true;
  return Status::ok();
}

// Llama 4's mixture of experts (Llama4TextConfig's defaults): num_local_experts (16) of intermediate_size,
// num_experts_per_tok (1) per token, beside a shared expert of intermediate_size without a gate, in every
// interleave_moe_layer_step-th block (1: every one; Maverick's 2), the others a dense gated MLP of
// intermediate_size_mlp (16384); moe_layers, where given, must list those blocks (its entries past
// num_hidden_layers name no block, as transformers reads it: a file cut to fewer layers keeps its list).
Status read_llama4_experts(const json& j, JsonObjectReader& r, ModelSpec& m) {
  m.experts = 16;
  m.experts_per_token = 1;
  MW_RETURN_IF_ERROR(r.get_int("num_local_experts", m.experts, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", m.experts_per_token, 1, m.experts));
  m.expert_ffn = m.shared_expert_ffn = m.ffn_hidden;
  m.shared_expert_gate = false;
  m.ffn_hidden = 16384;
  MW_RETURN_IF_ERROR(r.get_int("intermediate_size_mlp", m.ffn_hidden, 1, 1 << 26));
  MW_RETURN_IF_ERROR(r.get_int("interleave_moe_layer_step", m.moe_every, 1, m.layers));
  if (j.contains("moe_layers") && !j["moe_layers"].is_null()) {
    json expected = json::array();
    for (int l = 0; l < m.layers; ++l) {
      if (m.moe_layer(l)) expected.push_back(l);
    }
    json listed = json::array();
    for (const json& l : j["moe_layers"]) {
      if (!l.is_number_integer() || l.get<long long>() < m.layers) listed.push_back(l);
    }
    if (!j["moe_layers"].is_array() || listed != expected) {
      return r.error("moe_layers", detail::short_dump(j["moe_layers"]) +
                                       " is a pattern memwall does not compute; allowed: every "
                                       "interleave_moe_layer_step-th block (" +
                                       detail::short_dump(expected) + ")");
    }
  }
  r.ignore({"moe_layers", "router_aux_loss_coef", "router_jitter_noise", "output_router_logits"});
  return Status::ok();
}

// transformers 5's rope_parameters, one object of the rotary turn's settings (rope_type, rope_theta,
// partial_rotary_factor and its type's keys) or one per layer type (full_attention, sliding_attention): the
// one for every layer (or full_attention's) written into `j` as the keys the files before it had,
// rope_theta, partial_rotary_factor and (but for type "default") rope_scaling, each checked against the same
// key where the file has both; sliding_attention's, if any, into `sliding` and full_attention's into `full`
// (the Llama shape's reader applies them: apply_sliding_rope).
Status lower_rope_parameters(json& j, const std::string& source, json& full, json& sliding) {
  if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) return Status::ok();
  const json rp = j["rope_parameters"];
  const auto bad = [&](const std::string& key, const std::string& why) {
    return Status::invalid_argument(source + ": key 'rope_parameters" + key + "' " + why);
  };
  if (!rp.is_object()) {
    return bad("",
               "must be an object (rope_type, rope_theta and its type's keys, or one such object per "
               "layer type)");
  }
  full = rp;
  if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
    for (const auto& [key, value] : rp.items()) {
      if (key != "full_attention" && key != "sliding_attention")
        return bad("." + key,
                   "is not a layer type memwall reads; allowed: full_attention, sliding_attention");
      if (!value.is_object()) return bad("." + key, "must be an object (rope_type, rope_theta, ...)");
    }
    full = rp.value("full_attention", json::object());
    sliding = rp.value("sliding_attention", json());
  }
  json scaling = full;
  scaling.erase("rope_theta");
  scaling.erase("partial_rotary_factor");
  const char* type_key = scaling.contains("rope_type") ? "rope_type" : "type";
  const bool plain = !scaling.contains(type_key) || scaling[type_key] == "default";
  std::vector<std::pair<std::string, json>> keys;
  for (const char* key : {"rope_theta", "partial_rotary_factor"})
    if (full.contains(key)) keys.emplace_back(key, full[key]);
  if (!plain) keys.emplace_back("rope_scaling", scaling);
  for (const auto& [key, value] : keys) {
    if (j.contains(key) && !j[key].is_null() && j[key] != value) {
      return bad("", "gives " + key + " " + detail::short_dump(value) + " where the file's " + key + " is " +
                         detail::short_dump(j[key]) + "; allowed: the same, or one of them");
    }
    j[key] = value;
  }
  j.erase("rope_parameters");
  return Status::ok();
}

// The windowed layers' own rotary turn from transformers 5's rope_parameters.sliding_attention (`sliding`,
// null: none; `full`: full_attention's): the same object as full_attention's, one turn for every layer;
// rope_type "default", their own rope_theta without rope_scaling (rope_local_theta, Gemma 3's local table);
// another type, or other keys, refused.
Status apply_sliding_rope(const json& full, const json& sliding, const std::string& source, ModelSpec& m) {
  if (sliding.is_null()) return Status::ok();
  if (sliding == full) {
    m.rope_local_theta = 0;
    return Status::ok();
  }
  const std::string where = source + ": key 'rope_parameters.sliding_attention";
  for (const auto& [key, value] : sliding.items()) {
    const bool plain = (key == "rope_type" || key == "type") && value == "default";
    if (plain || key == "rope_theta") continue;
    return Status::invalid_argument(where + "." + key + "' " + detail::short_dump(value) +
                                    " (a turn of the windowed layers' own beyond their base) is not "
                                    "supported; allowed: rope_type default with rope_theta, or the same "
                                    "object as full_attention");
  }
  if (sliding.contains("rope_theta")) {
    const json& theta = sliding["rope_theta"];
    if (!theta.is_number() || !(theta.get<double>() > 1.0 && theta.get<double>() <= 1e12)) {
      return Status::invalid_argument(where + ".rope_theta' " + detail::short_dump(theta) +
                                      " must be a number in (1, 1e12]");
    }
    m.rope_local_theta = theta.get<double>();
  } else if (m.rope_local_theta == 0) {
    m.rope_local_theta = m.rope_theta;  // (transformers' default: the model's base)
  }
  return Status::ok();
}

// rope_scaling: null, absent or type "default": none. The type is "rope_type" (or older files' "type").
Status read_rope_scaling(JsonObjectReader& parent, const std::string& source, Diagnostics& diag,
                         RopeScaling& out) {
  Result<const json*> got = parent.get_object("rope_scaling");
  if (!got.is_ok()) return got.status();
  out = RopeScaling{};
  const json* obj = *got;
  if (obj == nullptr) return Status::ok();
  JsonObjectReader r(*obj, source, "rope_scaling", diag);
  const char* type_key = r.has("rope_type") ? "rope_type" : "type";
  MW_RETURN_IF_ERROR(require(r, type_key));
  MW_RETURN_IF_ERROR(r.get_string(type_key, out.type));
  r.ignore({"rope_type", "type"});
  if (out.type == "default") out.type.clear();
  if (out.type == "linear" || out.type == "llama3" || out.type == "yarn" || out.type == "dynamic") {
    MW_RETURN_IF_ERROR(require(r, "factor"));
    MW_RETURN_IF_ERROR(r.get_number("factor", out.factor, 1.0, 1e6));
  }
  // yarn's original_max_position_embeddings: parse_model gives it the model's max_position_embeddings
  // when absent.
  if (out.type == "yarn") {
    MW_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings", out.original_max_positions, 1, 1 << 28));
    for (auto [key, value] :
         {std::pair{"attention_factor", &out.attention_factor}, std::pair{"beta_fast", &out.beta_fast},
          std::pair{"beta_slow", &out.beta_slow}, std::pair{"mscale", &out.mscale},
          std::pair{"mscale_all_dim", &out.mscale_all_dim}}) {
      if (r.has(key) && obj->at(key).is_null()) {  // null: the default
        r.ignore({key});
        continue;
      }
      MW_RETURN_IF_ERROR(r.get_number(key, *value, 0.0, 1e6));
    }
    MW_RETURN_IF_ERROR(r.get_bool("truncate", out.truncate));
    // (Equal: a step between kept and divided pairs, as Kimi K2's 1 and 1.)
    if (!(out.beta_fast >= out.beta_slow) || !(out.beta_slow > 0)) {
      return r.error("beta_fast", "must be at least beta_slow (" + detail::short_dump(json(out.beta_slow)) +
                                      "), which must be > 0");
    }
  }
  // longrope's per-pair factors; its original context and stretch as given here (parse_model completes
  // them from the model's keys).
  if (out.type == "longrope") {
    for (const char* k : {"short_factor", "long_factor"}) MW_RETURN_IF_ERROR(require(r, k));
    MW_RETURN_IF_ERROR(r.get_number_list("short_factor", out.short_factor, 1e-6, 1e12));
    MW_RETURN_IF_ERROR(r.get_number_list("long_factor", out.long_factor, 1e-6, 1e12));
    if (out.short_factor.size() != out.long_factor.size()) {
      return r.error("long_factor",
                     "has " + std::to_string(out.long_factor.size()) + " factors and short_factor " +
                         std::to_string(out.short_factor.size()) + "; allowed: one of each per rotary pair");
    }
    out.factor = 0;  // 0: not given
    MW_RETURN_IF_ERROR(r.get_number("factor", out.factor, 1e-6, 1e6));
    MW_RETURN_IF_ERROR(r.get_number("attention_factor", out.attention_factor, 0.0, 1e6));
    MW_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings", out.original_max_positions, 1, 1 << 28));
  }
  if (out.type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      MW_RETURN_IF_ERROR(require(r, k));
    }
    MW_RETURN_IF_ERROR(r.get_number("low_freq_factor", out.low_freq_factor, 1e-6, 1e6));
    MW_RETURN_IF_ERROR(r.get_number("high_freq_factor", out.high_freq_factor, 1e-6, 1e6));
    MW_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings", out.original_max_positions, 1, 1 << 28));
    // (Equal: a step from divided to kept, as Llama 4 Scout's 1 and 1.)
    if (!(out.high_freq_factor >= out.low_freq_factor)) {
      return r.error("high_freq_factor", "must be at least low_freq_factor (" +
                                             detail::short_dump(obj->at("low_freq_factor")) + ")");
    }
  }
  if (!out.supported()) {  // another type's keys: kept by name only, and the context it stretches
    MW_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings", out.original_max_positions, 0, 1 << 28));
    return Status::ok();
  }
  r.finish();
  return Status::ok();
}

Status check_format(JsonObjectReader& r, const std::string& expected_format, int major) {
  std::string format = expected_format;
  MW_RETURN_IF_ERROR(r.get_string("format", format));
  if (format != expected_format) {
    return r.error("format", "\"" + format + "\" is not allowed; allowed: \"" + expected_format + "\"");
  }
  int version = major;
  MW_RETURN_IF_ERROR(r.get_int("version", version, 1, 1000000));
  if (version != major) {
    return r.error("version", std::to_string(version) + " is not supported; this memwall reads version " +
                                  std::to_string(major) + " (upgrade memwall or convert the file)");
  }
  return Status::ok();
}

}  // namespace

// ---- hardware ---------------------------------------------------------------------------------------

Result<HardwareSpec> parse_hardware(std::string_view text, const std::string& source, Diagnostics& diag,
                                    const ReadFileFn& read_file) {
  Result<json> parsed = parse_json_object(text, source);
  if (!parsed.is_ok()) return parsed.status();
  Result<json> doc = resolve_inherits(std::move(*parsed), source, read_file, 0);
  if (!doc.is_ok()) return doc.status();

  HardwareSpec hw;
  hw.name = stem_of(source);
  JsonObjectReader top(*doc, source, "", diag);
  MW_RETURN_IF_ERROR(check_format(top, "memwall-hardware", kHardwareFormatMajor));
  MW_RETURN_IF_ERROR(top.get_string("name", hw.name));
  MW_RETURN_IF_ERROR(top.get_string("description", hw.description));
  MW_RETURN_IF_ERROR(top.get_string_list("sources", hw.sources));
  MW_RETURN_IF_ERROR(top.get_int("nodes", hw.nodes, 1, 1 << 20));

  // gpu
  MW_RETURN_IF_ERROR(require(top, "gpu"));
  Result<const json*> gpu_obj = top.get_object("gpu");
  if (!gpu_obj.is_ok()) return gpu_obj.status();
  {
    JsonObjectReader r(**gpu_obj, source, "gpu", diag);
    for (const char* k : {"count", "memory_bytes", "peak_flops", "achievable_flops", "hbm_Bps"}) {
      MW_RETURN_IF_ERROR(require(r, k));
    }
    MW_RETURN_IF_ERROR(r.get_string("model", hw.gpu.model));
    MW_RETURN_IF_ERROR(r.get_int("count", hw.gpu.count, 1, 1024));
    MW_RETURN_IF_ERROR(r.get_number("memory_bytes", hw.gpu.memory_bytes, 1, 1e15));
    MW_RETURN_IF_ERROR(r.get_number("reserved_bytes", hw.gpu.reserved_bytes, 0, 1e15));
    MW_RETURN_IF_ERROR(r.get_number("peak_flops", hw.gpu.peak_flops, 1, 1e18));
    MW_RETURN_IF_ERROR(r.get_number("achievable_flops", hw.gpu.achievable_flops, 1, 1e18));
    MW_RETURN_IF_ERROR(r.get_number("hbm_Bps", hw.gpu.hbm_Bps, 1, 1e15));
    MW_RETURN_IF_ERROR(r.get_bool("shares_host_cpu", hw.gpu.shares_host_cpu));
    if (hw.gpu.reserved_bytes >= hw.gpu.memory_bytes) {
      return r.error("reserved_bytes", strprintf("%.0f", hw.gpu.reserved_bytes) +
                                           " is not allowed; allowed: less than gpu.memory_bytes");
    }
    if (hw.gpu.achievable_flops > hw.gpu.peak_flops) {
      return r.error("achievable_flops", strprintf("%g", hw.gpu.achievable_flops) +
                                             " is not allowed; allowed: at most gpu.peak_flops");
    }
    r.finish();
  }

  // cpu
  MW_RETURN_IF_ERROR(require(top, "cpu"));
  Result<const json*> cpu_obj = top.get_object("cpu");
  if (!cpu_obj.is_ok()) return cpu_obj.status();
  {
    JsonObjectReader r(**cpu_obj, source, "cpu", diag);
    for (const char* k : {"memory_bytes", "memory_Bps"}) MW_RETURN_IF_ERROR(require(r, k));
    MW_RETURN_IF_ERROR(r.get_string("model", hw.cpu.model));
    MW_RETURN_IF_ERROR(r.get_int("sockets", hw.cpu.sockets, 1, 64));
    MW_RETURN_IF_ERROR(r.get_int("cores", hw.cpu.cores, 1, 1 << 16));
    MW_RETURN_IF_ERROR(r.get_number("memory_bytes", hw.cpu.memory_bytes, 1, 1e18));
    MW_RETURN_IF_ERROR(r.get_number("reserved_bytes", hw.cpu.reserved_bytes, 0, 1e18));
    MW_RETURN_IF_ERROR(r.get_number("memory_Bps", hw.cpu.memory_Bps, 1, 1e15));
    if (hw.cpu.reserved_bytes >= hw.cpu.memory_bytes) {
      return r.error("reserved_bytes", "is not allowed; allowed: less than cpu.memory_bytes");
    }
    r.finish();
  }

  // nvme (optional: absent means no NVMe tier)
  Result<const json*> nvme_obj = top.get_object("nvme");
  if (!nvme_obj.is_ok()) return nvme_obj.status();
  if (*nvme_obj != nullptr) {
    JsonObjectReader r(**nvme_obj, source, "nvme", diag);
    MW_RETURN_IF_ERROR(r.get_int("drives", hw.nvme.drives, 0, 1024));
    MW_RETURN_IF_ERROR(r.get_number("drive_capacity_bytes", hw.nvme.drive_capacity_bytes, 0, 1e18));
    MW_RETURN_IF_ERROR(r.get_number("drive_read_Bps", hw.nvme.drive_read_Bps, 0, 1e13));
    MW_RETURN_IF_ERROR(r.get_number("drive_write_Bps", hw.nvme.drive_write_Bps, 0, 1e13));
    MW_RETURN_IF_ERROR(r.get_number("drive_readwrite_Bps", hw.nvme.drive_readwrite_Bps, 0, 1e13));
    MW_RETURN_IF_ERROR(r.get_number("latency_s", hw.nvme.latency_s, 0, 1));
    MW_RETURN_IF_ERROR(r.get_number("host_cpu_s_per_byte", hw.nvme.host_cpu_s_per_byte, 0, 1e-3));
    if (hw.nvme.drives > 0) {
      for (const char* k : {"drive_capacity_bytes", "drive_read_Bps", "drive_write_Bps"}) {
        MW_RETURN_IF_ERROR(require(r, k));
      }
      if (hw.nvme.drive_read_Bps <= 0 || hw.nvme.drive_write_Bps <= 0 || hw.nvme.drive_capacity_bytes <= 0) {
        return r.error("drives",
                       "NVMe drives need positive drive_capacity_bytes, drive_read_Bps and "
                       "drive_write_Bps");
      }
    }
    r.finish();
  }

  // pcie
  MW_RETURN_IF_ERROR(require(top, "pcie"));
  Result<const json*> pcie_obj = top.get_object("pcie");
  if (!pcie_obj.is_ok()) return pcie_obj.status();
  {
    JsonObjectReader r(**pcie_obj, source, "pcie", diag);
    MW_RETURN_IF_ERROR(require(r, "gpu_link_Bps"));
    MW_RETURN_IF_ERROR(r.get_number("gpu_link_Bps", hw.pcie.gpu_link_Bps, 1, 1e13));
    MW_RETURN_IF_ERROR(r.get_number("latency_s", hw.pcie.latency_s, 0, 1));
    if (r.has("switches")) {
      const json& list = (**pcie_obj).at("switches");
      r.ignore({"switches"});
      if (!list.is_array()) return r.error("switches", "is not a list of {gpus_per_switch, uplink_Bps}");
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_object())
          return r.error("switches", "entry " + std::to_string(i) + " is not an object");
        JsonObjectReader s(list[i], source, "pcie.switches[" + std::to_string(i) + "]", diag);
        PcieSwitchLevel level;
        MW_RETURN_IF_ERROR(require(s, "gpus_per_switch"));
        MW_RETURN_IF_ERROR(require(s, "uplink_Bps"));
        MW_RETURN_IF_ERROR(s.get_int("gpus_per_switch", level.gpus_per_switch, 1, 1024));
        MW_RETURN_IF_ERROR(s.get_number("uplink_Bps", level.uplink_Bps, 1, 1e13));
        if (level.gpus_per_switch > hw.gpu.count || hw.gpu.count % level.gpus_per_switch != 0) {
          return s.error("gpus_per_switch", std::to_string(level.gpus_per_switch) +
                                                " is not allowed; allowed: a divisor of gpu.count (" +
                                                std::to_string(hw.gpu.count) + ")");
        }
        s.finish();
        hw.pcie.switches.push_back(level);
      }
    }
    r.finish();
  }

  Result<const json*> nvlink_obj = top.get_object("nvlink");
  if (!nvlink_obj.is_ok()) return nvlink_obj.status();
  if (*nvlink_obj != nullptr) {
    JsonObjectReader r(**nvlink_obj, source, "nvlink", diag);
    MW_RETURN_IF_ERROR(r.get_number("gpu_Bps", hw.nvlink.gpu_Bps, 0, 1e14));
    MW_RETURN_IF_ERROR(r.get_number("latency_s", hw.nvlink.latency_s, 0, 1));
    r.finish();
  }

  Result<const json*> net_obj = top.get_object("network");
  if (!net_obj.is_ok()) return net_obj.status();
  if (*net_obj != nullptr) {
    JsonObjectReader r(**net_obj, source, "network", diag);
    MW_RETURN_IF_ERROR(r.get_int("nics", hw.network.nics, 0, 1024));
    MW_RETURN_IF_ERROR(r.get_number("nic_Bps", hw.network.nic_Bps, 0, 1e14));
    MW_RETURN_IF_ERROR(r.get_number("latency_s", hw.network.latency_s, 0, 1));
    r.finish();
  }
  if (hw.nodes > 1 && hw.network.node_Bps() <= 0) {
    return top.error("network", "a cluster of " + std::to_string(hw.nodes) +
                                    " nodes needs network.nics >= 1 and network.nic_Bps > 0");
  }
  top.finish();
  return hw;
}

// ---- model (Hugging Face config.json) -----------------------------------------------------------------

Result<RopeScaling> parse_rope_scaling(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json{{"rope_scaling", json::parse(text)}};
  } catch (const json::exception& e) {
    return Status::invalid_argument(source + ": key 'rope_scaling' is not JSON (" + e.what() + ")");
  }
  Diagnostics diag;
  JsonObjectReader r(j, source, "", diag);
  RopeScaling out;
  MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, out));
  return out;
}

// A family's names for hidden size, heads, layers and positions: read into m with the vocabulary (m holds the
// family's defaults).
struct ShapeKeys {
  const char *hidden, *heads, *layers, *positions;
};
Status read_shape(JsonObjectReader& r, const ShapeKeys& k, ModelSpec& m) {
  MW_RETURN_IF_ERROR(r.get_int(k.hidden, m.hidden, 1, 1 << 24));
  MW_RETURN_IF_ERROR(r.get_int(k.heads, m.heads, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int(k.layers, m.layers, 1, 1 << 20));
  MW_RETURN_IF_ERROR(r.get_int(k.positions, m.max_positions, 1, 1 << 28));
  return r.get_int("vocab_size", m.vocab, 0, 1 << 28);
}

// MPT's (MosaicML's MPT-7B, MPT-30B; transformers' MptConfig, whose defaults these are): GPT-2's shape with
// its own key names, an MLP of expansion_ratio x d_model, ALiBi instead of positions (attn_config.alibi;
// else a learned table), and with no_bias no biases at all, the LayerNorms' included.
Status parse_mpt(JsonObjectReader& r, const std::string& source, Diagnostics& diag, ModelSpec& m) {
  m.hidden = 2048;
  m.heads = 16;
  m.layers = 24;
  m.max_positions = 2048;
  m.vocab = 50368;
  MW_RETURN_IF_ERROR(read_shape(r, {"d_model", "n_heads", "n_layers", "max_seq_len"}, m));
  double expansion = 4;
  MW_RETURN_IF_ERROR(r.get_number("expansion_ratio", expansion, 0.0, 1 << 10));
  const double ffn = expansion * m.hidden;
  if (ffn < 1 || ffn != std::floor(ffn) || ffn > (1 << 26)) {
    return r.error("expansion_ratio", strprintf("%g", expansion) + " x d_model " + std::to_string(m.hidden) +
                                          " is not a whole number of MLP features up to 2^26; allowed: a "
                                          "ratio giving one");
  }
  m.ffn_hidden = static_cast<int>(ffn);
  m.kv_heads = m.heads;
  m.norm = NormKind::kLayerNorm;
  m.gated_mlp = false;
  m.tied_embeddings = true;  // (MptForCausalLM ties its head to wte)
  MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
  bool no_bias = true;
  MW_RETURN_IF_ERROR(r.get_bool("no_bias", no_bias));
  m.linear_bias = m.norm_bias = !no_bias;
  MW_RETURN_IF_ERROR(r.get_number("layer_norm_epsilon", m.norm_eps, 0.0, 1.0));
  m.mlp_act = "gelu";  // (nn.GELU: exact)
  std::string norm_type = "low_precision_layernorm";
  MW_RETURN_IF_ERROR(r.get_string("norm_type", norm_type));
  if (norm_type != "low_precision_layernorm" && norm_type != "layernorm") {
    return r.error("norm_type",
                   "\"" + norm_type + "\" is not supported; allowed: low_precision_layernorm or layernorm");
  }
  bool learned = true;
  MW_RETURN_IF_ERROR(r.get_bool("learned_pos_emb", learned));
  bool alibi = true;
  Result<const json*> attn = r.get_object("attn_config");
  if (!attn.is_ok()) return attn.status();
  if (*attn != nullptr) {
    JsonObjectReader a(**attn, source, "attn_config", diag);
    MW_RETURN_IF_ERROR(a.get_bool("alibi", alibi));
    double bias_max = 8;
    MW_RETURN_IF_ERROR(a.get_number("alibi_bias_max", bias_max, 0.0, 1e6));
    if (alibi && bias_max != 8) {
      return a.error("alibi_bias_max", strprintf("%g", bias_max) +
                                           " is not supported (memwall's ALiBi slopes are BLOOM's, MPT's "
                                           "with 8); allowed: 8");
    }
    std::string attn_type = "multihead_attention";
    MW_RETURN_IF_ERROR(a.get_string("attn_type", attn_type));
    if (attn_type == "multiquery_attention") {
      m.kv_heads = 1;
    } else if (attn_type == "grouped_query_attention") {
      MW_RETURN_IF_ERROR(require(a, "kv_n_heads"));
      MW_RETURN_IF_ERROR(a.get_int("kv_n_heads", m.kv_heads, 1, 1 << 20));
    } else if (attn_type != "multihead_attention") {
      return a.error("attn_type", "\"" + attn_type +
                                      "\" is not supported; allowed: multihead_attention, "
                                      "multiquery_attention or grouped_query_attention");
    }
    MW_RETURN_IF_ERROR(require_flag(a, "qk_ln", false, "LayerNorms of the queries and keys"));
    MW_RETURN_IF_ERROR(require_flag(a, "prefix_lm", false, "bidirectional attention over a prefix"));
    if (a.has("clip_qkv")) return a.error("clip_qkv", "(q, k and v clamped) is not supported; allowed: null");
    if (a.has("softmax_scale")) {
      return a.error("softmax_scale",
                     "(a score scale of its own) is not supported; allowed: null (head size^-1/2)");
    }
    a.ignore({"attn_impl", "attn_pdrop", "attn_uses_sequence_id", "clip_qkv", "softmax_scale", "kv_n_heads",
              "rope", "rope_theta", "rope_impl", "rope_dail_config", "rope_hf_config", "sliding_window_size",
              "alibi_bias_max"});
    a.finish();
  }
  m.position = alibi ? PositionKind::kNone : learned ? PositionKind::kLearned : PositionKind::kNone;
  if (r.has("logit_scale")) return r.error("logit_scale", "(logits scaled) is not supported; allowed: null");
  Result<const json*> ffn_config = r.get_object("ffn_config");
  if (!ffn_config.is_ok()) return ffn_config.status();
  if (*ffn_config != nullptr) {  // (llm-foundry's newer files)
    JsonObjectReader f(**ffn_config, source, "ffn_config", diag);
    std::string ffn_type = "mptmlp";
    MW_RETURN_IF_ERROR(f.get_string("ffn_type", ffn_type));
    if (ffn_type != "mptmlp") {
      return f.error("ffn_type", "\"" + ffn_type + "\" is not supported; allowed: mptmlp (a GELU MLP)");
    }
    f.ignore({"fc_type", "ffn_act_fn", "ffn_hidden_size"});
    f.finish();
  }
  r.ignore({"emb_pdrop", "resid_pdrop", "embedding_fraction", "init_config", "init_device", "verbose",
            "tokenizer_name", "auto_map", "logit_scale", "fc_type", "use_pad_tok_in_ffn", "return_dict",
            "output_attentions", "output_hidden_states", "use_cache"});
  return Status::ok();
}

// GPT-J's (EleutherAI's GPT-J-6B; transformers' GPTJConfig, whose defaults these are): GPT-2's key names,
// rotary positions on the first rotary_dim channels of each head (pairs of neighbouring channels), the
// attention and the MLP side by side after one LayerNorm, biases on the MLP only, an untied head with a bias.
Status parse_gptj(JsonObjectReader& r, ModelSpec& m) {
  m.vocab = 50400;
  m.max_positions = 2048;
  m.hidden = 4096;
  m.layers = 28;
  m.heads = 16;
  MW_RETURN_IF_ERROR(read_shape(r, {"n_embd", "n_head", "n_layer", "n_positions"}, m));
  m.ffn_hidden = 4 * m.hidden;
  MW_RETURN_IF_ERROR(r.get_int("n_inner", m.ffn_hidden, 1, 1 << 26));
  if (m.heads <= 0 || m.hidden % m.heads != 0) return Status::ok();  // (the common check names it)
  int rotary_dim = 64;
  MW_RETURN_IF_ERROR(r.get_int("rotary_dim", rotary_dim, 2, 1 << 20));
  const int head = m.hidden / m.heads;
  if (rotary_dim > head || rotary_dim % 2 != 0) {
    return r.error("rotary_dim", std::to_string(rotary_dim) +
                                     " is not supported; allowed: an even number up to "
                                     "the head size " +
                                     std::to_string(head));
  }
  m.partial_rotary_factor = static_cast<double>(rotary_dim) / head;
  MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));  // (transformers 5's; else 10000)
  m.kv_heads = m.heads;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kRotary;
  m.gated_mlp = false;
  m.linear_bias = true;
  m.attn_bias = false;
  m.block_norm_shared = true;
  m.tied_embeddings = false;
  MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
  m.head_bias = true;
  m.mlp_act = "gelu_new";
  MW_RETURN_IF_ERROR(r.get_string("activation_function", m.mlp_act));
  MW_RETURN_IF_ERROR(r.get_number("layer_norm_epsilon", m.norm_eps, 0.0, 1.0));
  r.ignore({"resid_pdrop", "embd_pdrop", "attn_pdrop", "n_ctx", "gradient_checkpointing",
            "scale_attn_weights", "summary_activation", "summary_first_dropout", "summary_proj_to_labels",
            "summary_type", "summary_use_proj", "tokenizer_class", "task_specific_params"});
  return Status::ok();
}

// The defaults of a Llama-shaped family with LayerNorms (StableLM's, Cohere's, and StarCoder2's shape).
struct LayerNormLlamaDefaults {
  int vocab, hidden, ffn, layers, heads, max_positions;
};

// Such a family's shape: its defaults, then hidden_size, num_attention_heads, num_hidden_layers,
// max_position_embeddings, intermediate_size and num_key_value_heads (the heads by default) as the file has
// them; LayerNorms, rotary positions, a gated MLP, no biases on the linears.
Status read_layernorm_llama(JsonObjectReader& r, const LayerNormLlamaDefaults& d, ModelSpec& m) {
  m.vocab = d.vocab;
  m.hidden = d.hidden;
  m.ffn_hidden = d.ffn;
  m.layers = d.layers;
  m.heads = d.heads;
  m.max_positions = d.max_positions;
  MW_RETURN_IF_ERROR(read_shape(
      r, {"hidden_size", "num_attention_heads", "num_hidden_layers", "max_position_embeddings"}, m));
  MW_RETURN_IF_ERROR(r.get_int("intermediate_size", m.ffn_hidden, 1, 1 << 26));
  m.kv_heads = m.heads;
  MW_RETURN_IF_ERROR(r.get_int("num_key_value_heads", m.kv_heads, 1, 1 << 20));
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kRotary;
  m.gated_mlp = true;
  m.linear_bias = false;
  return Status::ok();
}

// StableLM's (Stability AI's StableLM-3B-4E1T, StableLM 2; transformers' StableLmConfig, whose defaults these
// are): the Llama shape (a SwiGLU MLP, rotary positions, grouped-query attention, an untied head) with
// LayerNorms (weight and bias) instead of RMSNorms, rotary on partial_rotary_factor of each head, biases on
// q, k and v with use_qkv_bias, with use_parallel_residual the attention and the MLP side by side after one
// norm, and with qk_layernorm a LayerNorm (no bias) of each query and key head, each head its own weight.
Status parse_stablelm(JsonObjectReader& r, const std::string& source, Diagnostics& diag, ModelSpec& m) {
  MW_RETURN_IF_ERROR(read_layernorm_llama(r, {50304, 2560, 6912, 32, 32, 4096}, m));
  MW_RETURN_IF_ERROR(r.get_bool("use_qkv_bias", m.qkv_bias));
  MW_RETURN_IF_ERROR(r.get_bool("use_parallel_residual", m.block_norm_shared));
  MW_RETURN_IF_ERROR(r.get_bool("qk_layernorm", m.qk_norm));  // (StableLM 2 12B's: each head its own weight)
  m.qk_norm_head_weights = m.qk_norm;
  m.tied_embeddings = false;
  MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
  m.partial_rotary_factor = 0.25;
  MW_RETURN_IF_ERROR(r.get_number("partial_rotary_factor", m.partial_rotary_factor, 0.0, 1.0));
  MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
  MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
  MW_RETURN_IF_ERROR(r.get_number("layer_norm_eps", m.norm_eps, 0.0, 1.0));
  MW_RETURN_IF_ERROR(r.get_string("hidden_act", m.mlp_act));
  r.ignore({"hidden_dropout", "attention_dropout"});
  return Status::ok();
}

// StarCoder2's (BigCode's StarCoder2; transformers' Starcoder2Config, whose defaults these are): GPT-2's
// block with grouped-query attention (2 key/value heads) and rotary positions on every channel, a plain MLP
// of intermediate_size (gelu_pytorch_tanh), LayerNorms with biases (norm_epsilon), biases on every linear
// (use_bias), a window (sliding_window; null: none) on every layer, the head tied by default.
Status parse_starcoder2(const json& j, JsonObjectReader& r, const std::string& source, Diagnostics& diag,
                        ModelSpec& m) {
  MW_RETURN_IF_ERROR(read_layernorm_llama(r, {49152, 3072, 12288, 30, 24, 4096}, m));
  if (!r.has("num_key_value_heads")) m.kv_heads = 2;
  m.gated_mlp = false;
  m.linear_bias = true;
  MW_RETURN_IF_ERROR(r.get_bool("use_bias", m.linear_bias));
  m.tied_embeddings = true;
  MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
  m.mlp_act = "gelu_pytorch_tanh";
  MW_RETURN_IF_ERROR(r.get_string("hidden_act", m.mlp_act));
  MW_RETURN_IF_ERROR(r.get_number("norm_epsilon", m.norm_eps, 0.0, 1.0));
  MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
  MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
  if (!(j.contains("sliding_window") && j["sliding_window"].is_null()))
    MW_RETURN_IF_ERROR(r.get_int("sliding_window", m.sliding_window, 0, 1 << 28));
  // (Its files' layer_norm_epsilon, mlp_type and norm_type: Starcoder2Config does not read them.)
  r.ignore({"sliding_window", "attention_dropout", "residual_dropout", "embedding_dropout",
            "layer_norm_epsilon", "mlp_type", "norm_type"});
  return Status::ok();
}

// Nemotron's (NVIDIA's Nemotron-4 and Minitron; transformers' NemotronConfig, whose defaults these are):
// LayerNorms with a bias (LayerNorm1P: weight + 1, the same parameters), grouped-query attention with rotary
// positions on partial_rotary_factor (0.5) of each head of head_dim, a plain MLP (up_proj, down_proj) with
// the squared ReLU (relu2), biases with attention_bias and mlp_bias (both or neither), an untied head.
Status parse_nemotron(JsonObjectReader& r, const std::string& source, Diagnostics& diag, ModelSpec& m,
                      int& head_dim) {
  MW_RETURN_IF_ERROR(read_layernorm_llama(r, {256000, 6144, 24576, 32, 48, 4096}, m));
  m.gated_mlp = false;
  bool attention_bias = false, mlp_bias = false;
  MW_RETURN_IF_ERROR(r.get_bool("attention_bias", attention_bias));
  MW_RETURN_IF_ERROR(r.get_bool("mlp_bias", mlp_bias));
  if (attention_bias != mlp_bias) {
    return r.error("mlp_bias", std::string(mlp_bias ? "true" : "false") + " beside attention_bias " +
                                   (attention_bias ? "true" : "false") +
                                   " is not supported; allowed: the same as attention_bias");
  }
  m.linear_bias = attention_bias;
  m.norm_unit_offset = true;  // LayerNorm1P
  m.mlp_act = "relu2";
  MW_RETURN_IF_ERROR(r.get_string("hidden_act", m.mlp_act));
  MW_RETURN_IF_ERROR(r.get_number("norm_eps", m.norm_eps, 0.0, 1.0));
  m.partial_rotary_factor = 0.5;
  MW_RETURN_IF_ERROR(r.get_number("partial_rotary_factor", m.partial_rotary_factor, 0.0, 1.0));
  MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
  MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
  MW_RETURN_IF_ERROR(r.get_int("head_dim", head_dim, 1, 1 << 20));
  m.tied_embeddings = false;
  MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
  r.ignore({"attention_dropout"});
  return Status::ok();
}

// Cohere's (Command R, Command R+; transformers' CohereConfig, whose defaults these are): the Llama shape (a
// SwiGLU MLP, rotary positions, grouped-query attention, no biases) with the attention and the MLP side by
// side after one LayerNorm without bias (input_layernorm; model.norm the same), rotary on neighbouring pairs
// of channels, a tied head whose logits are multiplied by logit_scale, and with use_qk_norm a LayerNorm (no
// bias) of each query and key head, each head its own weight (q_norm [heads, head_dim], k_norm).
// Cohere2's (Command R7B, Command A; Cohere2Config, whose defaults these are): Cohere's block without q/k
// norms, with heads of head_dim, a window (sliding_window, 4096) on all layers but every
// sliding_window_pattern-th (4; or as layer_types lists them), and rotary positions on the windowed layers
// only: the global ones attend without positions (a null sliding_window: no layer has a window, nor turns).
Status parse_cohere(const json& j, JsonObjectReader& r, const std::string& source, Diagnostics& diag,
                    ModelSpec& m, int& head_dim) {
  const bool cohere2 = j.value("model_type", "") == "cohere2";
  MW_RETURN_IF_ERROR(read_layernorm_llama(r, {256000, 8192, 22528, 40, 64, 8192}, m));
  m.norm_bias = false;
  MW_RETURN_IF_ERROR(require_flag(r, "attention_bias", false, "biases on q, k, v and o"));
  m.block_norm_shared = true;
  if (cohere2) {
    MW_RETURN_IF_ERROR(
        require_flag(r, "use_qk_norm", false, "q/k norms, which Cohere2ForCausalLM does not build"));
    MW_RETURN_IF_ERROR(r.get_int("head_dim", head_dim, 1, 1 << 20));
    int window = 4096;
    if (j.contains("sliding_window") && j["sliding_window"].is_null()) window = 0;
    MW_RETURN_IF_ERROR(r.get_int("sliding_window", window, 0, 1 << 28));
    m.sliding_window = window;
    m.global_every = 4;
    MW_RETURN_IF_ERROR(r.get_int("sliding_window_pattern", m.global_every, 1, 1 << 20));
    MW_RETURN_IF_ERROR(read_window_layers(j, r, m));
    m.rope_windowed_only = true;
    // The first Cohere configs' keys, which transformers' Cohere2ForCausalLM does not read (it builds the
    // block above whatever they say), and its cache's.
    r.ignore({"use_parallel_block", "rotary_pct", "position_embedding_type", "use_gated_activation",
              "use_parallel_embedding", "use_embedding_sharing", "order_of_interleaved_layers",
              "cache_implementation", "layer_types"});  // (layer_types read above)
  } else {
    MW_RETURN_IF_ERROR(r.get_bool("use_qk_norm", m.qk_norm));
  }
  m.qk_norm_head_weights = m.qk_norm;
  m.tied_embeddings = true;
  MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
  MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
  MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
  MW_RETURN_IF_ERROR(r.get_number("layer_norm_eps", m.norm_eps, 0.0, 1.0));
  m.logit_scale = 0.0625;
  MW_RETURN_IF_ERROR(r.get_number("logit_scale", m.logit_scale, 0.0, 1e6));
  MW_RETURN_IF_ERROR(r.get_string("hidden_act", m.mlp_act));
  r.ignore({"attention_dropout"});
  return Status::ok();
}

Result<ModelSpec> parse_model(std::string_view text, const std::string& source, Diagnostics& diag) {
  Result<json> doc = parse_json_object(text, source);
  if (!doc.is_ok()) return doc.status();
  // (transformers 5's rope_parameters read as the keys before it; its sliding_attention part below.)
  json full_rope, sliding_rope;
  MW_RETURN_IF_ERROR(lower_rope_parameters(*doc, source, full_rope, sliding_rope));
  const json& j = *doc;
  JsonObjectReader r(j, source, "", diag);

  ModelSpec m;
  int head_dim = 0;  // the Llama shape's, when the file gives it
  m.name = stem_of(source);
  if (m.name == "config")
    m.name = stem_of(directory_of(source).empty()
                         ? source
                         : directory_of(source).substr(0, directory_of(source).size() - 1));
  MW_RETURN_IF_ERROR(r.get_string("name", m.name));

  std::string type;
  MW_RETURN_IF_ERROR(r.get_string("model_type", type));
  if (type.empty()) type = j.contains("n_layer") ? "gpt2" : (j.contains("num_hidden_layers") ? "llama" : "");
  if (type.empty()) {
    return r.error("model_type", std::string("is missing and cannot be inferred; allowed: ") + kModelTypes);
  }
  m.model_type = type;
  // Keys every Hugging Face config carries that do not change the parameter count or memory.
  r.ignore({"architectures", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype",
            "transformers_version", "initializer_range", "use_cache", "_name_or_path", "tokenizer_class",
            "task_specific_params", "id2label", "label2id", "dtype"});
  // A quantized checkpoint's (DeepSeek-V3's fp8 blocks): the parameters are the same, a run's precision
  // sets their bytes.
  if (r.has("quantization_config")) {
    diag.warnings.push_back(source +
                            ": quantization_config: the file's quantized weights are not modelled; memory "
                            "is counted at the run's precision");
    r.ignore({"quantization_config"});
  }

  if (type == "zero-infinity-paper") {
    // The paper's idealized model: transformer blocks of four linear weights, nothing else (Eq. 1).
    for (const char* k : {"n_layer", "n_embd", "n_head"}) MW_RETURN_IF_ERROR(require(r, k));
    MW_RETURN_IF_ERROR(r.get_int("n_layer", m.layers, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int("n_embd", m.hidden, 1, 1 << 24));
    MW_RETURN_IF_ERROR(r.get_int("n_head", m.heads, 1, 1 << 20));
    m.max_positions = 1024;
    MW_RETURN_IF_ERROR(r.get_int("n_positions", m.max_positions, 1, 1 << 28));
    m.kv_heads = m.heads;
    m.ffn_hidden = 4 * m.hidden;
    m.vocab = 0;
    m.tied_embeddings = true;
    m.gated_mlp = false;
    m.linear_bias = false;
    m.norm = NormKind::kNone;
    m.position = PositionKind::kNone;
  } else if (type == "gpt2" || type == "gpt_bigcode") {
    // GPT-BigCode (SantaCoder, StarCoder): GPT-2's keys and shape with multi-query attention (one key/value
    // head: multi_query, its default) and GPTBigCodeConfig's defaults.
    const bool bigcode = type == "gpt_bigcode";
    if (bigcode) {
      m.layers = m.heads = 12;
      m.hidden = 768;
      m.vocab = 50257;
      m.max_positions = 1024;
    } else {
      for (const char* k : {"n_layer", "n_embd", "n_head", "vocab_size"}) MW_RETURN_IF_ERROR(require(r, k));
    }
    MW_RETURN_IF_ERROR(r.get_int("n_layer", m.layers, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int("n_embd", m.hidden, 1, 1 << 24));
    MW_RETURN_IF_ERROR(r.get_int("n_head", m.heads, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int("vocab_size", m.vocab, 0, 1 << 28));
    MW_RETURN_IF_ERROR(r.get_int("n_positions", m.max_positions, 0, 1 << 28));
    if (m.max_positions == 0) MW_RETURN_IF_ERROR(r.get_int("n_ctx", m.max_positions, 0, 1 << 28));
    r.ignore({"n_ctx"});
    m.ffn_hidden = 4 * m.hidden;
    MW_RETURN_IF_ERROR(r.get_int("n_inner", m.ffn_hidden, 1, 1 << 26));
    m.tied_embeddings = true;
    MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
    std::string act = bigcode ? "gelu_pytorch_tanh" : "gelu_new";
    MW_RETURN_IF_ERROR(r.get_string("activation_function", act));
    m.mlp_act = act;
    bool multi_query = bigcode;
    if (bigcode) MW_RETURN_IF_ERROR(r.get_bool("multi_query", multi_query));
    m.kv_heads = multi_query ? 1 : m.heads;
    m.gated_mlp = false;
    m.linear_bias = true;
    m.norm = NormKind::kLayerNorm;
    m.position = PositionKind::kLearned;
    r.ignore({"layer_norm_epsilon",
              "resid_pdrop",
              "embd_pdrop",
              "attn_pdrop",
              "summary_activation",
              "summary_first_dropout",
              "summary_proj_to_labels",
              "summary_type",
              "summary_use_proj",
              "scale_attn_weights",
              "scale_attn_by_inverse_layer_idx",
              "reorder_and_upcast_attn",
              "n_special",
              "predict_special_tokens",
              "output_past",
              "gradient_checkpointing",
              "attention_softmax_in_fp32",
              "scale_attention_softmax_in_fp32",
              "inference_runner",
              "max_batch_size",
              "max_sequence_length",
              "pad_key_length",
              "pre_allocate_kv_cache",
              "validate_runner_input"});
  } else if (type == "gemma3" || type == "mistral3" || type == "llama4") {
    // Multimodal configs whose language model is their text_config: Gemma 3's (a gemma3_text config whose
    // keys default as Gemma3TextConfig's), Mistral 3's (Mistral Small 3.1 and 3.2: its own model_type,
    // mistral where it leaves it out), Llama 4's (llama4_text; its tie_word_embeddings, false, beside
    // text_config); the vision tower is not modelled.
    const bool gemma3 = type == "gemma3", llama4 = type == "llama4";
    Result<const json*> lm_config = r.get_object("text_config");
    if (!lm_config.is_ok()) return lm_config.status();
    if (*lm_config == nullptr)
      return r.error("text_config", "is missing (required for model_type " + type + ")");
    json inner = **lm_config;
    if (gemma3) inner["model_type"] = "gemma3_text";
    if (!inner.contains("model_type")) inner["model_type"] = llama4 ? "llama4_text" : "mistral";
    if (llama4 && j.contains("tie_word_embeddings") && !inner.contains("tie_word_embeddings"))
      inner["tie_word_embeddings"] = j["tie_word_embeddings"];
    if (!inner.contains("name")) inner["name"] = m.name;
    Result<ModelSpec> lm = parse_model(inner.dump(), source + " (text_config)", diag);
    if (!lm.is_ok()) return lm.status();
    r.ignore({"vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index",
              "image_token_index", "initializer_range", "multimodal_projector_bias", "projector_hidden_act",
              "spatial_merge_size", "vision_feature_layer", "tie_word_embeddings"});
    r.finish();
    if (j.contains("vision_config")) {
      diag.warnings.push_back(source +
                              ": vision_config: the vision tower and its projector are not modelled; the "
                              "parameter count and memory are the language model's");
    }
    if (gemma3 || llama4) lm->model_type = type;
    return lm;
  } else if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" || type == "gemma" ||
             type == "gemma2" || type == "gemma3_text" || type == "phi3" || type == "mixtral" ||
             type == "qwen2_moe" || type == "qwen3_moe" || type == "olmo" || type == "olmo2" ||
             type == "smollm3" || type == "granite" || type == "exaone4" || type == "olmo3" ||
             type == "glm" || type == "glm4" || type == "glm4_moe" || type == "granitemoe" ||
             type == "olmoe" || type == "gpt_oss" || type == "seed_oss" || type == "deepseek_v2" ||
             type == "deepseek_v3" || type == "kimi_k2" || type == "llama4_text" || type == "qwen3_next") {
    // Mixtral is Mistral's shape, Qwen2-MoE Qwen2's, Qwen3-MoE Qwen3's and Granite MoE Granite's, each with
    // mixture-of-experts MLPs (read below; OLMoE's: the Llama shape with OLMo 2's q/k norms).
    const std::string family = type == "mixtral"      ? "mistral"
                               : type == "qwen2_moe"  ? "qwen2"
                               : type == "qwen3_moe"  ? "qwen3"
                               : type == "qwen3_next" ? "qwen3"
                               : type == "granitemoe" ? "granite"
                                                      : type;
    const bool gemma3 = type == "gemma3_text", gemma2 = type == "gemma2" || gemma3,
               gemma = type == "gemma" || gemma2;
    if (gemma3) {  // Gemma3TextConfig's defaults (a multimodal file's text_config gives only what differs)
      m.vocab = 262208;
      m.hidden = 2304;
      m.ffn_hidden = 9216;
      m.layers = 26;
      m.heads = 8;
      m.kv_heads = 4;
      m.max_positions = 131072;
    } else {
      for (const char* k :
           {"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"}) {
        MW_RETURN_IF_ERROR(require(r, k));
      }
    }
    MW_RETURN_IF_ERROR(r.get_int("num_hidden_layers", m.layers, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int("hidden_size", m.hidden, 1, 1 << 24));
    MW_RETURN_IF_ERROR(r.get_int("intermediate_size", m.ffn_hidden, 1, 1 << 26));
    MW_RETURN_IF_ERROR(r.get_int("num_attention_heads", m.heads, 1, 1 << 20));
    if (!gemma3) m.kv_heads = m.heads;
    MW_RETURN_IF_ERROR(r.get_int("num_key_value_heads", m.kv_heads, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int("vocab_size", m.vocab, 0, 1 << 28));
    MW_RETURN_IF_ERROR(r.get_int("max_position_embeddings", m.max_positions, 0, 1 << 28));
    // Gemma's and SmolLM3's configs tie the head by default, the others do not.
    m.tied_embeddings = gemma || type == "smollm3";
    MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
    // Qwen2: biases on q, k and v only (its attention has no attention_bias key); Llama, Mistral and Qwen3:
    // attention_bias puts them on q, k, v and o, mlp_bias on the MLP's three matrices. Qwen3 normalises each
    // query and key head (q_norm, k_norm). GLM and Seed-OSS: attention_bias (true by default) puts them on q,
    // k and v only (Seed-OSS's o_proj has its own key, attention_out_bias: false; its MLP none).
    const bool glm = type == "glm" || type == "glm4" || type == "glm4_moe", gpt_oss = type == "gpt_oss",
               seed = type == "seed_oss",
               deepseek = type == "deepseek_v2" || type == "deepseek_v3" || type == "kimi_k2",
               qwen3_next = type == "qwen3_next";
    m.linear_bias = false;
    m.qkv_bias = family == "qwen2";
    bool attention_bias = glm || gpt_oss || seed;
    MW_RETURN_IF_ERROR(r.get_bool("attention_bias", attention_bias));
    bool mlp_bias = false;
    MW_RETURN_IF_ERROR(r.get_bool("mlp_bias", mlp_bias));
    if (glm || seed) {
      m.qkv_bias = attention_bias;
    } else if (family != "qwen2") {
      m.linear_bias = attention_bias;
    }
    if (seed) {
      MW_RETURN_IF_ERROR(require_flag(r, "attention_out_bias", false, "a bias on o_proj"));
      MW_RETURN_IF_ERROR(require_flag(r, "mlp_bias", false, "biases on the MLP"));
      r.ignore({"residual_dropout"});
    }
    m.qk_norm = family == "qwen3" || gemma3;  // Gemma 3's q_norm and k_norm scale by 1 + weight
    if (family != "qwen2" && !glm && !gpt_oss && !seed && mlp_bias != attention_bias) {
      diag.warnings.push_back(source +
                              ": attention_bias and mlp_bias differ; memwall counts biases on both "
                              "when attention_bias is true");
    }
    // The MLP's activation: hidden_act; Gemma's hidden_activation, else (as transformers does, whatever
    // hidden_act says) GELU's tanh approximation. Its embedding is scaled by sqrt(hidden) and its RMSNorm by
    // 1 + weight.
    std::string act = "silu";
    MW_RETURN_IF_ERROR(r.get_string("hidden_act", act));
    if (gemma) {
      act = "gelu_pytorch_tanh";
      MW_RETURN_IF_ERROR(r.get_string("hidden_activation", act));
      m.norm_unit_offset = m.embed_scale = true;
    }
    // Gemma 2 and 3: norms on the attention's and MLP's outputs too, soft-capped scores and logits (null:
    // none; Gemma 3 by default none), query_pre_attn_scalar (their configs' defaults where the file leaves
    // them out).
    if (gemma2) {
      m.sandwich_norm = true;
      m.attn_softcap = gemma3 ? 0.0 : 50.0;
      m.final_softcap = gemma3 ? 0.0 : 30.0;
      m.query_scale = 256;
      for (auto [key, cap] : {std::pair{"attn_logit_softcapping", &m.attn_softcap},
                              std::pair{"final_logit_softcapping", &m.final_softcap}}) {
        if (j.contains(key) && j[key].is_null()) *cap = 0;
        MW_RETURN_IF_ERROR(r.get_number(key, *cap, 0.0, 1e6));
      }
      MW_RETURN_IF_ERROR(r.get_number("query_pre_attn_scalar", m.query_scale, 1e-6, 1e12));
      r.ignore({"cache_implementation"});
    }
    // Gemma 3: its windowed layers turn by rope_local_base_freq without rope_scaling; five local layers to
    // one global (sliding_window_pattern); bidirectional attention (EmbeddingGemma's) is not a decoder's.
    if (gemma3) {
      m.rope_theta = 1e6;
      m.rope_local_theta = 10000;
      MW_RETURN_IF_ERROR(r.get_number("rope_local_base_freq", m.rope_local_theta, 1.0, 1e12));
      m.global_every = 6;
      MW_RETURN_IF_ERROR(r.get_int("sliding_window_pattern", m.global_every, 1, 1 << 20));
      MW_RETURN_IF_ERROR(require_flag(r, "use_bidirectional_attention", false, "an encoder's attention"));
    }
    m.mlp_act = act;
    m.gated_mlp = true;
    m.norm = NormKind::kRmsNorm;
    m.position = PositionKind::kRotary;
    // transformers' Olmo2Config's, Exaone4Config's, GlmConfig's and LlamaConfig's defaults
    m.norm_eps = type == "olmo2" || type == "olmo3" || type == "exaone4" || type == "olmoe" || gpt_oss ||
                         type == "glm4_moe" || type == "llama4_text"
                     ? 1e-5
                 : glm ? 1.5625e-7
                       : 1e-6;
    MW_RETURN_IF_ERROR(r.get_number("rms_norm_eps", m.norm_eps, 1e-12, 1.0));
    // OLMo's (OlmoForCausalLM): LayerNorms without weight or bias (eps 1e-5), clip_qkv's clamp of q, k and v
    // (no parameters, nothing to count). OLMo 2's: RMSNorms after the attention and after the MLP instead of
    // before (post_attention_layernorm, post_feedforward_layernorm: as many weights as Llama's two), and
    // RMSNorms of all the queries and of all the keys (q_norm, k_norm) before the rotary turn.
    if (type == "olmo") {
      m.norm = NormKind::kLayerNorm;
      m.norm_bias = m.norm_weight = false;
      m.norm_eps = 1e-5;
    }
    // OLMoE's (OlmoeForCausalLM): Llama's norms before the sublayers with OLMo 2's q/k norms over all the
    // queries and all the keys, clip_qkv as OLMo's.
    if (type == "olmoe") m.qk_norm = m.qk_norm_full = true;
    if (type == "olmo" || type == "olmoe")
      MW_RETURN_IF_ERROR(r.get_number("clip_qkv", m.clip_qkv, 0.0, 1e9));  // (null: none)
    // OLMo 3's (Olmo3ForCausalLM): OLMo 2's block with a window (sliding_window 4096; null: none) on all
    // layers but every fourth (or as layer_types lists them); the windowed layers turn by rope_theta without
    // rope_scaling (as transformers 4.57 and vLLM: rope_local_theta), the global ones with it.
    const bool olmo3 = type == "olmo3";
    if (type == "olmo2" || olmo3) m.qk_norm = m.qk_norm_full = m.post_norm = true;
    if (olmo3) m.global_every = 4;
    // EXAONE 4's (Exaone4ForCausalLM): OLMo 2's norms after the sublayers with Qwen3's RMSNorm of each query
    // and key head; a window (sliding_window 4096; null: none) on all layers but every
    // sliding_window_pattern-th (4, or a string of L and G, "LLLG"), and with a window rotary positions on
    // the windowed layers only (the global ones without positions).
    const bool exaone4 = type == "exaone4";
    if (exaone4) {
      m.qk_norm = m.post_norm = true;
      m.global_every = 4;
      if (j.contains("sliding_window_pattern") && j["sliding_window_pattern"].is_string()) {
        const std::string pattern = j["sliding_window_pattern"];
        const auto n = static_cast<int>(pattern.size());
        if (n < 1 || pattern.find_first_not_of('L') != pattern.size() - 1 || pattern.back() != 'G') {
          return r.error(
              "sliding_window_pattern",
              "\"" + pattern + "\" is a pattern memwall does not compute; allowed: n - 1 L then G (LLLG)");
        }
        m.global_every = n;
        r.ignore({"sliding_window_pattern"});
      } else {  // (0: what Exaone4Config writes beside a null sliding_window)
        MW_RETURN_IF_ERROR(r.get_int("sliding_window_pattern", m.global_every, 0, 1 << 20));
      }
    }
    if (type == "smollm3") {
      m.rope_theta = 2e6;  // SmolLM3Config's
      MW_RETURN_IF_ERROR(read_no_rope_layers(j, r, m));
    }
    if (family == "granite") MW_RETURN_IF_ERROR(read_granite_multipliers(r, m));
    // gpt-oss's (GptOssForCausalLM; GptOssConfig's defaults): biases on q, k, v and o (attention_bias), a
    // sink logit per head, heads of 64, a 128-token window on every other layer from the first, and (below)
    // 128 experts of intermediate_size with biases, 4 per token; its clamped SwiGLU (swiglu_limit) counts as
    // SwiGLU.
    if (gpt_oss) {
      m.attn_sinks = m.expert_bias = true;
      head_dim = 64;
      m.rope_theta = 150000;
      m.global_every = 2;
      m.swiglu_limit = 7.0;
      MW_RETURN_IF_ERROR(r.get_number("swiglu_limit", m.swiglu_limit, 1e-6, 1e6));
      r.ignore({"experts_per_token", "initial_context_length"});
    }
    // GLM's (GlmForCausalLM): rotary on neighbouring pairs of half of each head (partial_rotary_factor 0.5,
    // head_dim 128 by default; nothing to count); GLM-4's (Glm4ForCausalLM) RMSNorms of the attention's and
    // the MLP's outputs too (post_self_attn_layernorm, post_mlp_layernorm: Gemma 2's four norms).
    if (glm) {
      m.partial_rotary_factor = 0.5;
      head_dim = 128;
      m.sandwich_norm = type == "glm4";
    }
    // GLM-4.5's (Glm4MoeForCausalLM; Glm4MoeConfig's defaults): GLM's attention (norms before the sublayers,
    // rotary on half of each head) with per-head q/k norms under use_qk_norm, the first first_k_dense_replace
    // blocks a dense MLP of intermediate_size, the others n_routed_experts (128) of moe_intermediate_size
    // (1408), 8 per token, beside n_shared_experts (1) shared experts of that width without a gate. Its
    // next-token-prediction modules (num_nextn_predict_layers) are counted only with the run's memwall.mtp.
    const bool glm4_moe = type == "glm4_moe";
    if (glm4_moe) MW_RETURN_IF_ERROR(r.get_bool("use_qk_norm", m.qk_norm));
    // Llama 4's (Llama4ForCausalLM; Llama4TextConfig's defaults): heads of 128, no rotary turn on every
    // fourth layer (no_rope_layers, no_rope_layer_interval: SmolLM3's keys), an L2 norm without weights of
    // each query and key head on the rotary layers (use_qk_norm), attention within chunks of
    // attention_chunk_size (8192; null: none) on them (what fused attention computes) and a temperature on
    // the others (nothing to count), and (below) its experts.
    const bool llama4 = type == "llama4_text";
    if (llama4) {
      head_dim = 128;
      m.rope_theta = 500000;
      MW_RETURN_IF_ERROR(read_no_rope_layers(j, r, m));
      m.attention_chunk =
          j.contains("attention_chunk_size") && j["attention_chunk_size"].is_null() ? 0 : 8192;
      MW_RETURN_IF_ERROR(r.get_int("attention_chunk_size", m.attention_chunk, 0, 1 << 28));
      m.qk_l2_norm = true;
      MW_RETURN_IF_ERROR(r.get_bool("use_qk_norm", m.qk_l2_norm));
      bool tuning = true;
      MW_RETURN_IF_ERROR(r.get_bool("attn_temperature_tuning", tuning));
      m.attn_temperature = 0.1;
      MW_RETURN_IF_ERROR(r.get_number("attn_scale", m.attn_temperature, 0.0, 1e6));
      if (!tuning) m.attn_temperature = 0;
      MW_RETURN_IF_ERROR(r.get_int("floor_scale", m.floor_scale, 1, 1 << 30));
      r.ignore({"attention_chunk_size", "for_llm_compressor"});
    }
    MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
    // Mistral's and Phi-3's attention window (Qwen2's only with use_sliding_window); null or absent: none.
    bool use_window = family == "mistral" || type == "phi3" || gemma2 || exaone4 || olmo3 || gpt_oss;
    MW_RETURN_IF_ERROR(r.get_bool("use_sliding_window", use_window));
    // Gemma2Config's, Gemma3TextConfig's, Exaone4Config's and Olmo3Config's
    int window = gemma2 || exaone4 || olmo3 ? 4096 : gpt_oss ? 128 : 0;
    if ((exaone4 || olmo3) && j.contains("sliding_window") && j["sliding_window"].is_null()) window = 0;
    MW_RETURN_IF_ERROR(r.get_int("sliding_window", window, 0, 1 << 28));
    if (use_window) m.sliding_window = window;
    // Which layers: Mistral's all; Qwen2's those from max_window_layers on (transformers' default 28);
    // Gemma 2's every other one from the first (every second layer global); or as layer_types lists them.
    if (family == "qwen2" || family == "qwen3") {
      m.first_window_layer = 28;
      MW_RETURN_IF_ERROR(r.get_int("max_window_layers", m.first_window_layer, 0, 1 << 20));
    }
    if (gemma2 && !gemma3) m.global_every = 2;
    // (EXAONE 4 with a sliding_window: no layer turns but the windowed ones, if any; without one, every
    // layer)
    m.rope_windowed_only = exaone4 && m.sliding_window > 0;
    if (qwen3_next) {
      MW_RETURN_IF_ERROR(read_linear_attention(j, r, m));
    } else {
      MW_RETURN_IF_ERROR(read_window_layers(j, r, m));
    }
    if (olmo3 && m.sliding_window > 0) m.rope_local_theta = m.rope_theta;  // (rope_theta read above)
    MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
    MW_RETURN_IF_ERROR(apply_sliding_rope(full_rope, sliding_rope, source, m));
    sliding_rope = nullptr;
    // yarn's original context: the model's max_position_embeddings unless its rope_scaling says otherwise.
    if (m.rope_scaling.type == "yarn" && m.rope_scaling.original_max_positions == 0)
      m.rope_scaling.original_max_positions = m.max_positions;
    // Phi-3 keeps the context its longrope stretches beside rope_scaling (the other types memwall computes
    // carry their own, or stretch none).
    if (m.rope_scaling.type == "longrope") {
      // As transformers: a model-level original_max_position_embeddings (Phi3Config's, 4096 by default)
      // makes the stretch max_position_embeddings over it; else rope_scaling's, or no stretch.
      RopeScaling& rs = m.rope_scaling;
      int original = type == "phi3" ? 4096 : 0;
      MW_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings", original, 1, 1 << 28));
      if (original > 0) {
        rs.original_max_positions = original;
        rs.factor = static_cast<double>(m.max_positions) / original;
      } else {
        if (rs.original_max_positions == 0) rs.original_max_positions = m.max_positions;
        if (rs.factor == 0) rs.factor = 1;
      }
    } else if (!m.rope_scaling.supported() && m.rope_scaling.original_max_positions == 0) {
      MW_RETURN_IF_ERROR(
          r.get_int("original_max_position_embeddings", m.rope_scaling.original_max_positions, 0, 1 << 28));
    }
    // Rotary on a part of each head (Phi-4-mini's 0.75, Qwen3-Next's 0.25; int(head_dim x factor) channels).
    if (qwen3_next) m.partial_rotary_factor = 0.25;
    MW_RETURN_IF_ERROR(r.get_number("partial_rotary_factor", m.partial_rotary_factor, 0.0, 1.0));
    if (family == "qwen3") head_dim = qwen3_next ? 256 : 128;  // Qwen3Config's (Qwen3NextConfig's) default
    if (gemma) head_dim = 256;                                 // GemmaConfig's (and Gemma 2's, 3's)
    MW_RETURN_IF_ERROR(r.get_int("head_dim", head_dim, 1, 1 << 20));
    if (deepseek) {
      MW_RETURN_IF_ERROR(read_latent_attention(j, r, m));
      head_dim = m.head_size;  // (transformers writes its rotary part as head_dim)
    }
    // Mixture-of-experts MLPs (defaults as MixtralConfig's, Qwen2MoeConfig's, Qwen3MoeConfig's,
    // GraniteMoeConfig's and OlmoeConfig's): every layer's. Mixtral's, Granite MoE's and OLMoE's experts are
    // intermediate_size wide.
    if (deepseek) {
      MW_RETURN_IF_ERROR(read_deepseek_experts(j, r, m));
    } else if (llama4) {
      MW_RETURN_IF_ERROR(read_llama4_experts(j, r, m));
    } else if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" || type == "granitemoe" ||
               type == "olmoe" || gpt_oss || glm4_moe || qwen3_next) {
      const bool mixtral = type == "mixtral" || type == "granitemoe" || gpt_oss, qwen2 = type == "qwen2_moe",
                 olmoe = type == "olmoe";
      const char* experts_key = mixtral ? "num_local_experts" : glm4_moe ? "n_routed_experts" : "num_experts";
      m.experts = gpt_oss ? 128 : mixtral ? 8 : qwen2 ? 60 : olmoe ? 64 : qwen3_next ? 512 : 128;
      m.experts_per_token = gpt_oss ? 4 : mixtral ? 2 : qwen2 ? 4 : qwen3_next ? 10 : 8;
      MW_RETURN_IF_ERROR(r.get_int(experts_key, m.experts, 1, 1 << 20));
      MW_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", m.experts_per_token, 1, 1 << 20));
      if (m.experts_per_token > m.experts) {
        return r.error("num_experts_per_tok", std::to_string(m.experts_per_token) + " is more than the " +
                                                  std::to_string(m.experts) + " experts (" + experts_key +
                                                  "); allowed: 1 to " + std::to_string(m.experts));
      }
      // Qwen-MoE's and GLM-4.5's experts have their own width; intermediate_size is a dense layer's.
      if (!mixtral && !olmoe) {
        m.expert_ffn = qwen2 || glm4_moe ? 1408 : qwen3_next ? 512 : 768;
        MW_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", m.expert_ffn, 1, 1 << 26));
        if (qwen2 || qwen3_next) {  // and Qwen2-MoE's (Qwen3-Next's) shared expert
          m.shared_expert_ffn = qwen3_next ? 512 : 5632;
          MW_RETURN_IF_ERROR(r.get_int("shared_expert_intermediate_size", m.shared_expert_ffn, 0, 1 << 26));
        }
      }
      if (glm4_moe) {  // GLM-4.5's shared experts (no gate) and its dense first blocks
        int shared = 1;
        m.dense_layers = 1;
        MW_RETURN_IF_ERROR(r.get_int("n_shared_experts", shared, 0, 1 << 10));
        MW_RETURN_IF_ERROR(r.get_int("first_k_dense_replace", m.dense_layers, 0, m.layers));
        m.shared_expert_ffn = shared * m.expert_ffn;
        m.shared_expert_gate = false;
        m.sigmoid_routing = true;  // (Glm4MoeTopkRouter's: no load-balancing loss)
        MW_RETURN_IF_ERROR(r.get_int("n_group", m.expert_groups, 1, m.experts));
        MW_RETURN_IF_ERROR(r.get_int("topk_group", m.groups_per_token, 1, m.expert_groups));
        MW_RETURN_IF_ERROR(r.get_number("routed_scaling_factor", m.routed_scale, 0.0, 1e6));
        if (m.experts % m.expert_groups != 0 || (m.expert_groups > 1 && m.experts / m.expert_groups < 2)) {
          return r.error("n_group", std::to_string(m.expert_groups) + " does not split the " +
                                        std::to_string(m.experts) +
                                        " experts into groups of 2 or more; allowed: a divisor of them");
        }
        MW_RETURN_IF_ERROR(r.get_int("num_nextn_predict_layers", m.mtp_in_file, 0, 64));
      } else if (!mixtral && !olmoe) {  // Qwen-MoE's (and Qwen3-Next's) layers of experts
        // Experts in every decoder_sparse_step-th layer (dense MLPs of intermediate_size between), but in the
        // layers mlp_only_layers lists: the first ones only (those from layer 0 on, as dense first blocks).
        MW_RETURN_IF_ERROR(r.get_int("decoder_sparse_step", m.moe_every, 1, m.layers));
        if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
          const json& only = j["mlp_only_layers"];
          bool first = only.is_array();
          for (std::size_t i = 0; first && i < only.size(); ++i) first = only[i] == static_cast<int>(i);
          if (!first || static_cast<int>(only.size()) > m.layers) {
            return r.error("mlp_only_layers", detail::short_dump(only) +
                                                  " (dense MLPs in layers other than the first ones) is not "
                                                  "supported; allowed: [], or [0, 1, ..., k - 1]");
          }
          m.dense_layers = static_cast<int>(only.size());
        }
        r.ignore({"mlp_only_layers"});
      }
      // The routing weights (Mixtral's and Granite MoE's renormalised; the others' as norm_topk_prob says)
      // and the load-balancing loss's coefficient, where output_router_logits turns it on (defaults as each
      // config class's).
      // (gpt-oss's softmax over the chosen experts' logits: the same weights)
      m.norm_topk_prob = mixtral || glm4_moe;  // (Glm4MoeConfig's default true)
      if (!mixtral) MW_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", m.norm_topk_prob));
      bool aux = false;
      double coef = gpt_oss ? 0.9 : olmoe ? 0.01 : 0.001;
      MW_RETURN_IF_ERROR(r.get_bool("output_router_logits", aux));
      MW_RETURN_IF_ERROR(r.get_number("router_aux_loss_coef", coef, 0.0, 1e6));
      m.router_aux_loss = aux && !glm4_moe ? coef : 0;  // (GLM-4.5's model has no load-balancing loss)
      r.ignore({"router_jitter_noise", "norm_topk_prob"});
    }
    r.ignore({"pretraining_tp", "attention_dropout", "max_window_layers", "layer_types", "embd_pdrop",
              "resid_pdrop", "original_max_position_embeddings"});
  } else if (type == "opt" || type == "gpt_neox" || type == "falcon" || type == "bloom" || type == "phi") {
    // Earlier open models, for predict and simulate (memwall train refuses them): LayerNorm with biases on
    // every linear, a plain MLP; defaults as their transformers configs'. OPT: learned positions with 2 rows
    // more than max_position_embeddings (its position ids start at 2). GPT-NeoX (Pythia): rotary on
    // rotary_pct of each head, attention and MLP side by side, an untied head. Falcon: multi-query or grouped
    // attention, rotary or ALiBi, side by side with one norm (two in the new decoder architecture), no
    // biases. BLOOM: ALiBi, a LayerNorm of the embeddings. Phi (1, 1.5, 2): partial rotary, one norm for
    // attention and MLP side by side, an untied head with a bias.
    const bool opt = type == "opt", neox = type == "gpt_neox", falcon = type == "falcon",
               bloom = type == "bloom", phi = type == "phi";
    // Each family's names for the shape (BLOOM's and Falcon's older n_* names too).
    const char* layers_key = (bloom || falcon) && r.has("n_layer") ? "n_layer" : "num_hidden_layers";
    const char* heads_key = (bloom || falcon) && r.has("n_head") ? "n_head" : "num_attention_heads";
    const char* hidden_key = (bloom || falcon) && r.has("n_embed") ? "n_embed" : "hidden_size";
    m.vocab = opt ? 50272 : neox ? 50432 : falcon ? 65024 : bloom ? 250880 : 51200;
    m.hidden = opt ? 768 : neox ? 6144 : falcon ? 4544 : bloom ? 64 : 2048;
    m.layers = opt ? 12 : neox ? 44 : falcon ? 32 : bloom ? 2 : 24;
    m.heads = opt ? 12 : neox ? 64 : falcon ? 71 : bloom ? 8 : 32;
    m.max_positions = 2048;  // BLOOM (ALiBi) has no table: its training sequence, a run's default
    MW_RETURN_IF_ERROR(r.get_int(layers_key, m.layers, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int(hidden_key, m.hidden, 1, 1 << 24));
    MW_RETURN_IF_ERROR(r.get_int(heads_key, m.heads, 1, 1 << 20));
    MW_RETURN_IF_ERROR(r.get_int("vocab_size", m.vocab, 0, 1 << 28));
    if (!bloom) MW_RETURN_IF_ERROR(r.get_int("max_position_embeddings", m.max_positions, 1, 1 << 28));
    m.kv_heads = m.heads;
    m.ffn_hidden = opt ? 3072 : neox ? 24576 : phi ? 8192 : 4 * m.hidden;
    MW_RETURN_IF_ERROR(r.get_int(opt      ? "ffn_dim"
                                 : falcon ? "ffn_hidden_size"
                                 : bloom  ? "n_inner"
                                          : "intermediate_size",
                                 m.ffn_hidden, 1, 1 << 26));
    m.norm = NormKind::kLayerNorm;
    m.gated_mlp = false;
    m.linear_bias = true;
    m.tied_embeddings = !(neox || phi);
    MW_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", m.tied_embeddings));
    m.mlp_act = opt ? "relu" : (phi || bloom) ? "gelu_new" : "gelu";  // BLOOM's bloom_gelu: the tanh form
    MW_RETURN_IF_ERROR(r.get_string(opt      ? "activation_function"
                                    : falcon ? "activation"
                                             : "hidden_act",
                                    m.mlp_act));
    MW_RETURN_IF_ERROR(
        r.get_number(opt || neox || phi ? "layer_norm_eps" : "layer_norm_epsilon", m.norm_eps, 0.0, 1.0));
    m.position = bloom ? PositionKind::kNone : opt ? PositionKind::kLearned : PositionKind::kRotary;
    if (opt) {
      m.position_offset = 2;
      MW_RETURN_IF_ERROR(r.get_bool("enable_bias", m.linear_bias));
      int proj = m.hidden;
      MW_RETURN_IF_ERROR(r.get_int("word_embed_proj_dim", proj, 1, 1 << 24));
      if (proj != m.hidden) {
        return r.error("word_embed_proj_dim", std::to_string(proj) + " (embeddings projected to and from " +
                                                  std::to_string(m.hidden) +
                                                  ", OPT-350m's) is not supported; allowed: hidden_size");
      }
      MW_RETURN_IF_ERROR(require_flag(r, "do_layer_norm_before", true,
                                      "norms after each residual and no final norm, OPT-350m's"));
      MW_RETURN_IF_ERROR(require_flag(r, "layer_norm_elementwise_affine", true));
      r.ignore({"dropout", "attention_dropout", "activation_dropout", "layerdrop", "init_std",
                "scale_embedding", "prefix", "_remove_final_layer_norm", "output_projection"});
    } else if (neox) {
      MW_RETURN_IF_ERROR(r.get_number("rotary_pct", m.partial_rotary_factor, 0.0, 1.0));
      // (transformers 5's rope_parameters carries it as partial_rotary_factor.)
      MW_RETURN_IF_ERROR(r.get_number("partial_rotary_factor", m.partial_rotary_factor, 0.0, 1.0));
      MW_RETURN_IF_ERROR(r.get_number("rotary_emb_base", m.rope_theta, 1.0, 1e12));
      MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
      MW_RETURN_IF_ERROR(require_flag(r, "attention_bias", true, "biases on the MLP only"));
      MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
      m.parallel_residual = true;
      MW_RETURN_IF_ERROR(r.get_bool("use_parallel_residual", m.parallel_residual));
      r.ignore({"classifier_dropout", "attention_dropout", "hidden_dropout", "rotary_emb_base", "use_cache"});
    } else if (falcon) {
      bool new_arch = false, multi_query = true, parallel = true, alibi = false;
      MW_RETURN_IF_ERROR(r.get_bool("new_decoder_architecture", new_arch));
      MW_RETURN_IF_ERROR(r.get_bool("multi_query", multi_query));
      MW_RETURN_IF_ERROR(r.get_bool("parallel_attn", parallel));
      MW_RETURN_IF_ERROR(r.get_bool("alibi", alibi));
      m.linear_bias = false;
      MW_RETURN_IF_ERROR(r.get_bool("bias", m.linear_bias));
      // Key/value heads: num_kv_heads in the new architecture, else one (multi-query) or one per head.
      m.kv_heads = new_arch ? m.heads : multi_query ? 1 : m.heads;
      if (new_arch) {  // (n_head_kv: the name before transformers took Falcon in)
        MW_RETURN_IF_ERROR(r.get_int("n_head_kv", m.kv_heads, 1, 1 << 20));
        MW_RETURN_IF_ERROR(r.get_int("num_kv_heads", m.kv_heads, 1, 1 << 20));
      }
      // One norm before attention and MLP side by side, two in the new architecture (ln_attn, ln_mlp,
      // unless num_ln_in_parallel_attn is 1) and without side by side.
      int norms = new_arch ? 2 : parallel ? 1 : 2;
      if (new_arch) MW_RETURN_IF_ERROR(r.get_int("num_ln_in_parallel_attn", norms, 1, 2));
      m.block_norm_shared = norms == 1;
      // The new architecture's attention and MLP are side by side whatever parallel_attn says.
      m.parallel_residual = (new_arch || parallel) && norms == 2;
      m.position = alibi ? PositionKind::kNone : PositionKind::kRotary;
      MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
      MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
      r.ignore({"num_kv_heads", "num_ln_in_parallel_attn", "hidden_dropout", "attention_dropout", "n_head_kv",
                "apply_residual_connection_post_layernorm"});
    } else if (bloom) {
      MW_RETURN_IF_ERROR(require_flag(r, "apply_residual_connection_post_layernorm", false,
                                      "the residual taken after the norm"));
      m.embed_norm = true;
      // (Its training sequence, where a config gives it: a run's default, as max_position_embeddings is.)
      MW_RETURN_IF_ERROR(r.get_int("seq_length", m.max_positions, 1, 1 << 28));
      r.ignore({"attention_dropout", "hidden_dropout", "attention_softmax_in_fp32", "bias_dropout_fusion",
                "masked_softmax_fusion", "offset_alibi", "pretraining_tp", "skip_bias_add",
                "skip_bias_add_qkv", "slow_but_exact", "unk_token_id"});
    } else {  // phi
      MW_RETURN_IF_ERROR(r.get_int("num_key_value_heads", m.kv_heads, 1, 1 << 20));
      m.partial_rotary_factor = 0.5;
      MW_RETURN_IF_ERROR(r.get_number("partial_rotary_factor", m.partial_rotary_factor, 0.0, 1.0));
      MW_RETURN_IF_ERROR(r.get_number("rope_theta", m.rope_theta, 1.0, 1e12));
      MW_RETURN_IF_ERROR(read_rope_scaling(r, source, diag, m.rope_scaling));
      MW_RETURN_IF_ERROR(require_flag(r, "qk_layernorm", false, "norms of queries and keys"));
      m.block_norm_shared = true;
      m.head_bias = true;
      r.ignore({"resid_pdrop", "embd_pdrop", "attention_dropout"});
    }
  } else if (type == "mpt") {
    MW_RETURN_IF_ERROR(parse_mpt(r, source, diag, m));
  } else if (type == "stablelm") {
    MW_RETURN_IF_ERROR(parse_stablelm(r, source, diag, m));
  } else if (type == "cohere" || type == "cohere2") {
    MW_RETURN_IF_ERROR(parse_cohere(j, r, source, diag, m, head_dim));
  } else if (type == "nemotron") {
    MW_RETURN_IF_ERROR(parse_nemotron(r, source, diag, m, head_dim));
  } else if (type == "starcoder2") {
    MW_RETURN_IF_ERROR(parse_starcoder2(j, r, source, diag, m));
  } else if (type == "gptj" || type == "codegen") {  // (CodeGen: GPT-J's block and keys, its q, k, v fused)
    MW_RETURN_IF_ERROR(parse_gptj(r, m));
  } else {
    return r.error("model_type", "\"" + type + "\" is not supported; allowed: " + kModelTypes);
  }
  if (!sliding_rope.is_null()) {
    return Status::invalid_argument(source +
                                    ": key 'rope_parameters.sliding_attention' (the windowed layers' "
                                    "own rotary turn) is not supported for model_type " +
                                    type + "; allowed: one object for every layer");
  }
  // Heads of their own size (head_dim, Qwen3's and Mistral Nemo's: queries of heads x head_dim channels
  // projected back to hidden_size by o_proj), else hidden_size / num_attention_heads.
  if (head_dim != 0 && static_cast<long long>(head_dim) * m.heads > (1LL << 26)) {
    return r.error("head_dim", std::to_string(head_dim) + " x " + std::to_string(m.heads) +
                                   " heads is more than 2^26 query channels");
  }
  if (head_dim != 0 && head_dim * m.heads != m.hidden) m.head_size = head_dim;
  if (m.head_size == 0 && m.hidden % m.heads != 0) {
    return Status::invalid_argument(source + ": hidden size " + std::to_string(m.hidden) +
                                    " is not a multiple of the head count " + std::to_string(m.heads) +
                                    " (and no head_dim says the heads' size)");
  }
  if (m.heads % m.kv_heads != 0) {
    return Status::invalid_argument(source + ": key value head count " + std::to_string(m.kv_heads) +
                                    " does not divide the head count " + std::to_string(m.heads));
  }
  r.finish();
  return m;
}

// ---- run (DeepSpeed ds_config.json + "memwall") -------------------------------------------------------

namespace {

Status read_offload_device(JsonObjectReader& r, OffloadDevice& out) {
  std::string device = "none";
  MW_RETURN_IF_ERROR(r.get_choice("device", device, {"none", "cpu", "nvme"}));
  out = device == "cpu" ? OffloadDevice::kCpu
                        : (device == "nvme" ? OffloadDevice::kNvme : OffloadDevice::kNone);
  return Status::ok();
}

Status parse_zero(const json& obj, const std::string& source, Diagnostics& diag, ZeroConfig& z) {
  JsonObjectReader r(obj, source, "zero_optimization", diag);
  MW_RETURN_IF_ERROR(r.get_int("stage", z.stage, 0, 3));
  z.overlap_comm = z.stage == 3;  // DeepSpeed: None -> (stage == 3)
  MW_RETURN_IF_ERROR(r.get_bool("overlap_comm", z.overlap_comm));
  MW_RETURN_IF_ERROR(r.get_bool("contiguous_gradients", z.contiguous_gradients));
  MW_RETURN_IF_ERROR(r.get_bool("reduce_scatter", z.reduce_scatter));
  MW_RETURN_IF_ERROR(r.get_count("sub_group_size", z.sub_group_size, 1));
  MW_RETURN_IF_ERROR(r.get_auto_count("stage3_prefetch_bucket_size", z.prefetch_bucket_size, 0));
  MW_RETURN_IF_ERROR(r.get_auto_count("prefetch_bucket_size", z.prefetch_bucket_size, 0));
  MW_RETURN_IF_ERROR(r.get_count("stage3_max_live_parameters", z.max_live_parameters, 0));
  MW_RETURN_IF_ERROR(r.get_count("max_live_parameters", z.max_live_parameters, 0));
  MW_RETURN_IF_ERROR(r.get_count("stage3_max_reuse_distance", z.max_reuse_distance, 0));
  MW_RETURN_IF_ERROR(r.get_count("max_reuse_distance", z.max_reuse_distance, 0));
  MW_RETURN_IF_ERROR(
      r.get_auto_count("stage3_param_persistence_threshold", z.param_persistence_threshold, 0));
  MW_RETURN_IF_ERROR(r.get_auto_count("param_persistence_threshold", z.param_persistence_threshold, 0));
  // (DeepSpeed's default, sys.maxsize, is past get_count's 2^53.)
  MW_RETURN_IF_ERROR(r.get_number("stage3_model_persistence_threshold", z.model_persistence_threshold, 0,
                                  kUnlimitedPersistence));
  MW_RETURN_IF_ERROR(
      r.get_number("model_persistence_threshold", z.model_persistence_threshold, 0, kUnlimitedPersistence));
  MW_RETURN_IF_ERROR(r.get_auto_count("reduce_bucket_size", z.reduce_bucket_size, 1));
  MW_RETURN_IF_ERROR(r.get_count("allgather_bucket_size", z.allgather_bucket_size, 1));
  r.ignore({"allgather_partitions",
            "stage3_gather_16bit_weights_on_model_save",
            "stage3_gather_fp16_weights_on_model_save",
            "gather_16bit_weights_on_model_save",
            "round_robin_gradients",
            "elastic_checkpoint",
            "ignore_unused_parameters",
            "load_from_fp32_weights",
            "memory_efficient_linear",
            "zero_hpz_partition_size",
            "zero_quantized_weights",
            "zero_quantized_gradients",
            "zero_quantized_nontrainable_weights",
            "mics_shard_size",
            "mics_hierarchical_params_gather",
            "stage3_module_granularity_threshold",
            "use_multi_rank_bucket_allreduce",
            "legacy_stage1",
            "offload_param_config",
            "cpu_offload_use_pin_memory",
            "cpu_offload_params",
            "log_trace_cache_warnings"});

  // Legacy boolean: "cpu_offload": true == offload_optimizer.device cpu.
  bool cpu_offload = false;
  MW_RETURN_IF_ERROR(r.get_bool("cpu_offload", cpu_offload));
  if (cpu_offload) z.offload_optimizer.device = OffloadDevice::kCpu;

  Result<const json*> op = r.get_object("offload_param");
  if (!op.is_ok()) return op.status();
  if (*op != nullptr) {
    JsonObjectReader o(**op, source, "zero_optimization.offload_param", diag);
    MW_RETURN_IF_ERROR(read_offload_device(o, z.offload_param.device));
    MW_RETURN_IF_ERROR(o.get_string("nvme_path", z.offload_param.nvme_path));
    MW_RETURN_IF_ERROR(o.get_bool("pin_memory", z.offload_param.pin_memory));
    MW_RETURN_IF_ERROR(o.get_int("buffer_count", z.offload_param.buffer_count, 1, 1 << 20));
    MW_RETURN_IF_ERROR(o.get_count("buffer_size", z.offload_param.buffer_size, 1));
    MW_RETURN_IF_ERROR(o.get_count("max_in_cpu", z.offload_param.max_in_cpu, 0));
    if (z.offload_param.device != OffloadDevice::kNone && z.stage != 3) {
      return o.error("device", std::string("\"") + offload_device_name(z.offload_param.device) +
                                   "\" requires zero_optimization.stage 3 (stage is " +
                                   std::to_string(z.stage) + "); allowed with this stage: \"none\"");
    }
    o.finish();
  }
  Result<const json*> oo = r.get_object("offload_optimizer");
  if (!oo.is_ok()) return oo.status();
  if (*oo != nullptr) {
    JsonObjectReader o(**oo, source, "zero_optimization.offload_optimizer", diag);
    MW_RETURN_IF_ERROR(read_offload_device(o, z.offload_optimizer.device));
    MW_RETURN_IF_ERROR(o.get_string("nvme_path", z.offload_optimizer.nvme_path));
    MW_RETURN_IF_ERROR(o.get_bool("pin_memory", z.offload_optimizer.pin_memory));
    MW_RETURN_IF_ERROR(o.get_int("buffer_count", z.offload_optimizer.buffer_count, 1, 1 << 20));
    MW_RETURN_IF_ERROR(o.get_bool("pipeline_read", z.offload_optimizer.pipeline_read));
    MW_RETURN_IF_ERROR(o.get_bool("pipeline_write", z.offload_optimizer.pipeline_write));
    bool pipeline = false;
    MW_RETURN_IF_ERROR(o.get_bool("pipeline", pipeline));
    if (pipeline) z.offload_optimizer.pipeline_read = z.offload_optimizer.pipeline_write = true;
    MW_RETURN_IF_ERROR(o.get_bool("fast_init", z.offload_optimizer.fast_init));
    MW_RETURN_IF_ERROR(o.get_number("ratio", z.offload_optimizer.ratio, 0, 1));
    o.ignore({"super_offload", "cpuadam_cores_perc"});
    const OffloadDevice d = z.offload_optimizer.device;
    if (d == OffloadDevice::kNvme && z.stage != 3) {
      return o.error("device", "\"nvme\" requires zero_optimization.stage 3 (stage is " +
                                   std::to_string(z.stage) +
                                   "); allowed with this stage: \"none\" or \"cpu\"");
    }
    if (d == OffloadDevice::kCpu && z.stage == 0) {
      return o.error("device", "\"cpu\" requires zero_optimization.stage 1, 2 or 3 (stage is 0)");
    }
    // ZeRO-Offload++'s Twin-Flow: the first sub-groups step on the GPU, the last `ratio` of them on the CPU.
    if (const double ratio = z.offload_optimizer.ratio;
        ratio < 1 && (d != OffloadDevice::kCpu || z.stage != 3)) {
      return o.error("ratio",
                     strprintf("%g (a share of the sub-groups stepped on the GPU) needs device \"cpu\" "
                               "and zero_optimization.stage 3 (device is \"%s\", stage %d), as in "
                               "DeepSpeed; allowed here: 1",
                               ratio, offload_device_name(d), z.stage));
    }
    if (const double ratio = z.offload_optimizer.ratio;
        ratio < 1 && z.offload_param.device != OffloadDevice::kNone) {
      return o.error("ratio", strprintf("%g with offload_param.device \"%s\" is not modelled by memwall (the "
                                        "GPU sub-groups' updated parameters would go back to the host); "
                                        "allowed: 1, or offload_param.device \"none\"",
                                        ratio, offload_device_name(z.offload_param.device)));
    }
    o.finish();
  }
  r.finish();
  return Status::ok();
}

}  // namespace

Result<RunConfig> parse_run(std::string_view text, const std::string& source, Diagnostics& diag) {
  Result<json> doc = parse_json_object(text, source);
  if (!doc.is_ok()) return doc.status();
  const json& j = *doc;
  RunConfig run;
  run.name = stem_of(source);
  JsonObjectReader r(j, source, "", diag);

  MW_RETURN_IF_ERROR(r.get_auto_count("train_batch_size", run.train_batch_size, 1));
  if (!r.has("train_batch_size")) run.train_batch_size.is_auto = true;
  MW_RETURN_IF_ERROR(r.get_auto_count("train_micro_batch_size_per_gpu", run.micro_batch_per_gpu, 1));
  MW_RETURN_IF_ERROR(r.get_auto_count("gradient_accumulation_steps", run.gradient_accumulation_steps, 1));
  MW_RETURN_IF_ERROR(r.get_number("gradient_clipping", run.gradient_clipping, 0, 1e30));
  r.ignore({"steps_per_print",
            "wall_clock_breakdown",
            "zero_allow_untested_optimizer",
            "prescale_gradients",
            "gradient_predivide_factor",
            "sparse_gradients",
            "amp",
            "flops_profiler",
            "tensorboard",
            "wandb",
            "csv_monitor",
            "comms_logger",
            "dump_state",
            "memory_breakdown",
            "elasticity",
            "autotuning",
            "data_types",
            "checkpoint",
            "data_efficiency",
            "compression_training",
            "aio_config",
            "zero_force_ds_cpu_optimizer"});

  std::string comm_type;
  MW_RETURN_IF_ERROR(r.get_choice("communication_data_type", comm_type, {"fp32", "fp16", "bf16"}));
  run.fp32_gradients = comm_type == "fp32";

  // Precision
  bool fp16 = false, fp16_auto = false, bf16 = false, bf16_auto = false;
  Result<const json*> fp16_obj = r.get_object("fp16");
  if (!fp16_obj.is_ok()) return fp16_obj.status();
  if (*fp16_obj != nullptr) {
    JsonObjectReader o(**fp16_obj, source, "fp16", diag);
    fp16 = true;  // DeepSpeed: a present section without "enabled" is enabled
    MW_RETURN_IF_ERROR(o.get_auto_bool("enabled", fp16, fp16_auto));
    o.ignore({"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
              "consecutive_hysteresis", "auto_cast", "fp16_master_weights_and_grads"});
    o.finish();
  }
  Result<const json*> bf16_obj = r.get_object("bf16");
  if (!bf16_obj.is_ok()) return bf16_obj.status();
  if (*bf16_obj != nullptr) {
    JsonObjectReader o(**bf16_obj, source, "bf16", diag);
    bf16 = true;
    MW_RETURN_IF_ERROR(o.get_auto_bool("enabled", bf16, bf16_auto));
    o.ignore({"immediate_grad_update", "check_grad_overflow"});
    o.finish();
  }
  if (fp16 && !fp16_auto && bf16 && !bf16_auto) {
    return Status::invalid_argument(source +
                                    ": keys 'fp16.enabled' and 'bf16.enabled' are both true; allowed: "
                                    "at most one");
  }
  // "auto" follows the Hugging Face Trainer, which enables one of them from its own flags; memwall assumes
  // 16-bit mixed precision, bf16 unless fp16 is explicitly on.
  if (fp16 && !fp16_auto)
    run.precision = Precision::kFp16;
  else if (bf16 || bf16_auto || fp16_auto)
    run.precision = Precision::kBf16;

  Result<const json*> opt_obj = r.get_object("optimizer");
  if (!opt_obj.is_ok()) return opt_obj.status();
  if (*opt_obj != nullptr) {
    JsonObjectReader o(**opt_obj, source, "optimizer", diag);
    MW_RETURN_IF_ERROR(o.get_string("type", run.optimizer));
    std::string lower = run.optimizer;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower != "adam" && lower != "adamw" && lower != "lamb" && lower != "cpuadam" &&
        lower != "fusedadam") {
      diag.warnings.push_back(source + ": optimizer.type \"" + run.optimizer +
                              "\": memwall models Adam-style state (momentum and variance)");
    }
    Result<const json*> params = o.get_object("params");
    if (!params.is_ok()) return params.status();
    if (*params != nullptr) {
      JsonObjectReader pr(**params, source, "optimizer.params", diag);
      RunConfig::OptimizerParams& op = run.optimizer_params;
      MW_RETURN_IF_ERROR(pr.get_number("lr", op.lr, 0, 10));
      MW_RETURN_IF_ERROR(pr.get_number("eps", op.eps, 0, 1));
      MW_RETURN_IF_ERROR(pr.get_number("weight_decay", op.weight_decay, 0, 10));
      if (pr.has("betas")) {
        const json& b = (**params)["betas"];
        if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number() || b[0] < 0 ||
            b[0] >= 1 || b[1] < 0 || b[1] >= 1) {
          return pr.error("betas",
                          detail::short_dump(b) + " is not allowed; allowed: [beta1, beta2], each in [0, 1)");
        }
        op.beta1 = b[0].get<double>();
        op.beta2 = b[1].get<double>();
      }
      // DeepSpeed's Adam and AdamW both decay weights decoupled (AdamW) unless adam_w_mode is false.
      MW_RETURN_IF_ERROR(pr.get_bool("adam_w_mode", op.adam_w_mode));
      // Accepted and not used: DeepSpeed's implementation switches and the other optimizers' knobs.
      pr.ignore({"betas", "torch_adam", "fp32_optimizer_states", "amsgrad", "bias_correction", "max_coeff",
                 "min_coeff", "momentum", "freeze_step", "cuda_aware", "comm_backend_name"});
      pr.finish();
    }
    o.finish();
  }

  Result<const json*> sched_obj = r.get_object("scheduler");
  if (!sched_obj.is_ok()) return sched_obj.status();
  if (*sched_obj != nullptr) {
    JsonObjectReader o(**sched_obj, source, "scheduler", diag);
    RunConfig::LrSchedule& ls = run.scheduler;
    MW_RETURN_IF_ERROR(o.get_string("type", ls.type));
    Result<const json*> params = o.get_object("params");
    if (!params.is_ok()) return params.status();
    if (ls.implemented() && *params != nullptr) {
      // Each type's own parameters; another type's are unknown keys (a warning), as DeepSpeed would refuse
      // them.
      JsonObjectReader pr(**params, source, "scheduler.params", diag);
      const std::string& ty = ls.type;
      if (ty == "WarmupLR" || ty == "WarmupDecayLR") {
        MW_RETURN_IF_ERROR(pr.get_number("warmup_min_lr", ls.warmup_min_lr, 0, 10));
        MW_RETURN_IF_ERROR(pr.get_number("warmup_max_lr", ls.warmup_max_lr, 0, 10));
      }
      if (ty == "WarmupLR" || ty == "WarmupDecayLR" || ty == "WarmupCosineLR") {
        MW_RETURN_IF_ERROR(pr.get_count("warmup_num_steps", ls.warmup_num_steps, 0));
        MW_RETURN_IF_ERROR(pr.get_choice("warmup_type", ls.warmup_type, {"log", "linear"}));
      }
      if (ty == "WarmupDecayLR" || ty == "WarmupCosineLR") {
        MW_RETURN_IF_ERROR(pr.get_count("total_num_steps", ls.total_num_steps, 1));
      }
      if (ty == "WarmupCosineLR") {
        MW_RETURN_IF_ERROR(pr.get_number("warmup_min_ratio", ls.warmup_min_ratio, 0, 1));
        MW_RETURN_IF_ERROR(pr.get_number("cos_min_ratio", ls.cos_min_ratio, 0, 1));
      }
      if (ty == "OneCycle") {
        MW_RETURN_IF_ERROR(pr.get_number("cycle_min_lr", ls.cycle_min_lr, 0, 10));
        MW_RETURN_IF_ERROR(pr.get_number("cycle_max_lr", ls.cycle_max_lr, 0, 10));
        MW_RETURN_IF_ERROR(pr.get_number("decay_lr_rate", ls.decay_lr_rate, 0, 1e6));
        MW_RETURN_IF_ERROR(pr.get_count("cycle_first_step_size", ls.cycle_first_step_size, 1));
        if (pr.has("cycle_second_step_size")) {  // null (DeepSpeed's default): the first half's size
          MW_RETURN_IF_ERROR(pr.get_count("cycle_second_step_size", ls.cycle_second_step_size, 1));
        }
        MW_RETURN_IF_ERROR(pr.get_count("decay_step_size", ls.decay_step_size, 0));
        MW_RETURN_IF_ERROR(pr.get_bool("cycle_momentum", ls.cycle_momentum));
        MW_RETURN_IF_ERROR(pr.get_number("cycle_min_mom", ls.cycle_min_mom, 0, 1));
        MW_RETURN_IF_ERROR(pr.get_number("cycle_max_mom", ls.cycle_max_mom, 0, 1));
        MW_RETURN_IF_ERROR(pr.get_number("decay_mom_rate", ls.decay_mom_rate, 0, 1e6));
        // DeepSpeed's OneCycle takes the stair counts but does not use them.
        pr.ignore({"cycle_second_step_size", "cycle_first_stair_count", "cycle_second_stair_count"});
      }
      if (ty == "LRRangeTest") {
        MW_RETURN_IF_ERROR(pr.get_number("lr_range_test_min_lr", ls.lr_range_test_min_lr, 0, 10));
        MW_RETURN_IF_ERROR(pr.get_count("lr_range_test_step_size", ls.lr_range_test_step_size, 1));
        MW_RETURN_IF_ERROR(pr.get_number("lr_range_test_step_rate", ls.lr_range_test_step_rate, 0, 1e6));
        MW_RETURN_IF_ERROR(pr.get_bool("lr_range_test_staircase", ls.lr_range_test_staircase));
      }
      pr.ignore({"last_batch_iteration"});
      pr.finish();
    }
    if ((ls.type == "WarmupDecayLR" || ls.type == "WarmupCosineLR") && ls.total_num_steps <= 0) {
      return Status::invalid_argument(
          source +
          ": key 'scheduler.params.total_num_steps': missing; allowed: the run's total optimizer steps (" +
          ls.type +
          (ls.type == "WarmupDecayLR" ? " decays to warmup_min_lr there)"
                                      : " ends its cosine at cos_min_ratio there)"));
    }
    if (ls.type == "OneCycle" && (ls.cycle_min_lr < 0 || ls.cycle_max_lr < 0)) {
      return Status::invalid_argument(source + ": key 'scheduler.params." +
                                      (ls.cycle_min_lr < 0 ? "cycle_min_lr" : "cycle_max_lr") +
                                      "': missing; allowed: OneCycle's learning-rate bounds (0 to 10)");
    }
    // Other names are not DeepSpeed schedulers memwall knows: their parameters are not checked, and memwall
    // train says it keeps the optimizer's rate.
    o.ignore({"params"});
    o.finish();
  }

  Result<const json*> zero_obj = r.get_object("zero_optimization");
  if (!zero_obj.is_ok()) return zero_obj.status();
  if (*zero_obj != nullptr) MW_RETURN_IF_ERROR(parse_zero(**zero_obj, source, diag, run.zero));

  Result<const json*> aio_obj = r.get_object("aio");
  if (!aio_obj.is_ok()) return aio_obj.status();
  if (*aio_obj != nullptr) {
    JsonObjectReader o(**aio_obj, source, "aio", diag);
    MW_RETURN_IF_ERROR(o.get_count("block_size", run.aio.block_size, 512));
    if (static_cast<long long>(run.aio.block_size) % 512 != 0) {
      return o.error("block_size", strprintf("%.0f", run.aio.block_size) +
                                       " is not allowed; allowed: a multiple of 512 bytes");
    }
    MW_RETURN_IF_ERROR(o.get_int("queue_depth", run.aio.queue_depth, 1, 65536));
    MW_RETURN_IF_ERROR(o.get_int("thread_count", run.aio.intra_op_parallelism, 1, 1024));
    MW_RETURN_IF_ERROR(o.get_int("intra_op_parallelism", run.aio.intra_op_parallelism, 1, 1024));
    MW_RETURN_IF_ERROR(o.get_bool("single_submit", run.aio.single_submit));
    MW_RETURN_IF_ERROR(o.get_bool("overlap_events", run.aio.overlap_events));
    o.ignore({"use_gds"});
    o.finish();
  }

  Result<const json*> ac_obj = r.get_object("activation_checkpointing");
  if (!ac_obj.is_ok()) return ac_obj.status();
  if (*ac_obj != nullptr) {
    JsonObjectReader o(**ac_obj, source, "activation_checkpointing", diag);
    ActivationCheckpointConfig& ac = run.activation_checkpointing;
    ac.enabled = true;
    MW_RETURN_IF_ERROR(o.get_bool("enabled", ac.enabled));
    MW_RETURN_IF_ERROR(o.get_int("interval", ac.interval, 1, 1 << 20));
    MW_RETURN_IF_ERROR(o.get_bool("cpu_checkpointing", ac.cpu_checkpointing));
    MW_RETURN_IF_ERROR(o.get_bool("partition_activations", ac.partition_activations));
    MW_RETURN_IF_ERROR(o.get_bool("contiguous_memory_optimization", ac.contiguous_memory_optimization));
    o.ignore({"number_checkpoints", "synchronize_checkpoint_boundary", "profile"});
    o.finish();
  }

  Result<const json*> mw_obj = r.get_object("memwall");
  if (!mw_obj.is_ok()) return mw_obj.status();
  if (*mw_obj != nullptr) {
    JsonObjectReader o(**mw_obj, source, "memwall", diag);
    MemwallRunConfig& mw = run.memwall;
    MW_RETURN_IF_ERROR(o.get_int("tiling_factor", mw.tiling_factor, 1, 4096));
    if (o.has("data_parallel") && !((**mw_obj).at("data_parallel").is_string() &&
                                    (**mw_obj).at("data_parallel").get<std::string>() == "auto")) {
      MW_RETURN_IF_ERROR(o.get_int("data_parallel", mw.data_parallel, 1, 1 << 24));
    }
    o.ignore({"data_parallel"});
    MW_RETURN_IF_ERROR(o.get_int("model_parallel", mw.model_parallel, 1, 4096));
    MW_RETURN_IF_ERROR(o.get_int("pipeline_parallel", mw.pipeline_parallel, 1, 1 << 20));
    MW_RETURN_IF_ERROR(o.get_int("expert_parallel", mw.expert_parallel, 1, 1 << 20));
    MW_RETURN_IF_ERROR(o.get_number("expert_load", mw.expert_load, 1.0, 1e6));
    MW_RETURN_IF_ERROR(o.get_bool("mtp", mw.mtp));
    MW_RETURN_IF_ERROR(o.get_number("mtp_loss_weight", mw.mtp_weight, 0.0, 1e3));
    MW_RETURN_IF_ERROR(o.get_int("sequence_length", mw.sequence_length, 1, 1 << 28));
    std::string attention = attention_kernel_name(mw.attention);
    MW_RETURN_IF_ERROR(o.get_choice("attention", attention, {"unfused", "flash"}));
    mw.attention = attention == "flash" ? AttentionKernel::kFlash : AttentionKernel::kUnfused;
    std::string part = "bandwidth-centric";
    MW_RETURN_IF_ERROR(o.get_choice("partitioning", part, {"bandwidth-centric", "broadcast"}));
    mw.partitioning = part == "broadcast" ? Partitioning::kBroadcast : Partitioning::kBandwidthCentric;
    MW_RETURN_IF_ERROR(o.get_bool("prefetch", mw.prefetch));
    MW_RETURN_IF_ERROR(o.get_bool("optimizer_prefetch", mw.optimizer_prefetch));
    MW_RETURN_IF_ERROR(o.get_bool("delayed_parameter_update", mw.delayed_parameter_update));
    MW_RETURN_IF_ERROR(
        o.get_int("delayed_parameter_update_warmup", mw.delayed_parameter_update_warmup, 0, 1 << 30));
    std::string decay = mw.decay_matrices_only ? "matrices" : "all";
    MW_RETURN_IF_ERROR(o.get_choice("weight_decay_params", decay, {"all", "matrices"}));
    mw.decay_matrices_only = decay == "matrices";
    MW_RETURN_IF_ERROR(o.get_number("router_bias_update_speed", mw.router_bias_update, 0.0, 1.0));
    if (mw.delayed_parameter_update && (run.zero.offload_optimizer.device != OffloadDevice::kCpu ||
                                        run.zero.stage < 1 || run.zero.stage > 2)) {
      return o.error(
          "delayed_parameter_update",
          "true requires ZeRO-Offload: zero_optimization.offload_optimizer.device \"cpu\" with stage 1 "
          "or 2 (stage is " +
              std::to_string(run.zero.stage) + ", optimizer on \"" +
              offload_device_name(run.zero.offload_optimizer.device) + "\"); allowed: false otherwise");
    }
    // Where an NVMe optimizer's gradients wait for the step; other placements have one place for them, and
    // the key is ignored there (so tune and sweep may move the optimizer without editing it).
    std::string grads = optimizer_gradients_name(mw.optimizer_gradients);
    MW_RETURN_IF_ERROR(o.get_choice("optimizer_gradients", grads, {"auto", "cpu", "nvme"}));
    mw.optimizer_gradients = grads == "cpu"    ? OptimizerGradients::kCpu
                             : grads == "nvme" ? OptimizerGradients::kNvme
                                               : OptimizerGradients::kAuto;
    std::string order = mw.memory_in_program_order ? "program" : "dependencies";
    MW_RETURN_IF_ERROR(o.get_choice("memory_order", order, {"dependencies", "program"}));
    mw.memory_in_program_order = order == "program";
    MW_RETURN_IF_ERROR(o.get_string("strategy", mw.strategy));
    o.finish();
  }
  r.finish();
  return run;
}

// ---- loading from files -------------------------------------------------------------------------------

namespace {
template <typename T, typename Parse>
Result<T> load_with(const std::string& path, const ReadFileFn& read_file, Parse parse) {
  Result<std::string> text = read_file(path);
  if (!text.is_ok()) return text.status();
  return parse(*text);
}
}  // namespace

Result<HardwareSpec> load_hardware(const std::string& path, const ReadFileFn& read_file, Diagnostics& diag) {
  return load_with<HardwareSpec>(
      path, read_file, [&](const std::string& t) { return parse_hardware(t, path, diag, read_file); });
}
Result<ModelSpec> load_model(const std::string& path, const ReadFileFn& read_file, Diagnostics& diag) {
  return load_with<ModelSpec>(path, read_file,
                              [&](const std::string& t) { return parse_model(t, path, diag); });
}
Result<RunConfig> load_run(const std::string& path, const ReadFileFn& read_file, Diagnostics& diag) {
  return load_with<RunConfig>(path, read_file,
                              [&](const std::string& t) { return parse_run(t, path, diag); });
}

// ---- resolved specs as JSON ---------------------------------------------------------------------------

std::string to_json_text(const HardwareSpec& hw) {
  json j;
  j["format"] = "memwall-hardware";
  j["version"] = kHardwareFormatMajor;
  j["name"] = hw.name;
  j["description"] = hw.description;
  j["sources"] = hw.sources;
  j["nodes"] = hw.nodes;
  j["gpu"] = {{"model", hw.gpu.model},
              {"count", hw.gpu.count},
              {"memory_bytes", hw.gpu.memory_bytes},
              {"reserved_bytes", hw.gpu.reserved_bytes},
              {"peak_flops", hw.gpu.peak_flops},
              {"achievable_flops", hw.gpu.achievable_flops},
              {"hbm_Bps", hw.gpu.hbm_Bps},
              {"shares_host_cpu", hw.gpu.shares_host_cpu}};
  j["cpu"] = {{"model", hw.cpu.model},
              {"sockets", hw.cpu.sockets},
              {"cores", hw.cpu.cores},
              {"memory_bytes", hw.cpu.memory_bytes},
              {"reserved_bytes", hw.cpu.reserved_bytes},
              {"memory_Bps", hw.cpu.memory_Bps}};
  j["nvme"] = {{"drives", hw.nvme.drives},
               {"drive_capacity_bytes", hw.nvme.drive_capacity_bytes},
               {"drive_read_Bps", hw.nvme.drive_read_Bps},
               {"drive_write_Bps", hw.nvme.drive_write_Bps},
               {"drive_readwrite_Bps", hw.nvme.drive_readwrite_Bps},
               {"latency_s", hw.nvme.latency_s},
               {"host_cpu_s_per_byte", hw.nvme.host_cpu_s_per_byte}};
  json switches = json::array();
  for (const auto& s : hw.pcie.switches) {
    switches.push_back({{"gpus_per_switch", s.gpus_per_switch}, {"uplink_Bps", s.uplink_Bps}});
  }
  j["pcie"] = {
      {"gpu_link_Bps", hw.pcie.gpu_link_Bps}, {"latency_s", hw.pcie.latency_s}, {"switches", switches}};
  j["nvlink"] = {{"gpu_Bps", hw.nvlink.gpu_Bps}, {"latency_s", hw.nvlink.latency_s}};
  j["network"] = {
      {"nics", hw.network.nics}, {"nic_Bps", hw.network.nic_Bps}, {"latency_s", hw.network.latency_s}};
  return j.dump();
}

std::string to_json_text(const ModelSpec& m) {
  json j = {{"name", m.name},
            {"model_type", m.model_type},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"ffn_hidden", m.ffn_hidden},
            {"vocab", m.vocab},
            {"max_positions", m.max_positions},
            {"tied_embeddings", m.tied_embeddings},
            {"gated_mlp", m.gated_mlp},
            {"linear_bias", m.linear_bias},
            {"qkv_bias", m.qkv_bias},
            {"head_dim", m.head_dim()},
            {"qk_norm", m.qk_norm},
            {"mlp_act", m.mlp_act},
            {"norm_unit_offset", m.norm_unit_offset},
            {"embed_scale", m.embed_scale},
            {"sliding_window", m.sliding_window},
            {"first_window_layer", m.first_window_layer},
            {"global_every", m.global_every},
            {"sandwich_norm", m.sandwich_norm},
            {"attn_softcap", m.attn_softcap},
            {"final_softcap", m.final_softcap},
            {"query_scale", m.query_scale},
            {"rope_local_theta", m.rope_local_theta},
            {"partial_rotary_factor", m.partial_rotary_factor},
            {"position_offset", m.position_offset},
            {"block_norm_shared", m.block_norm_shared},
            {"parallel_residual", m.parallel_residual},
            {"embed_norm", m.embed_norm},
            {"norm_bias", m.norm_bias},
            {"norm_weight", m.norm_weight},
            {"clip_qkv", m.clip_qkv},
            {"qk_norm_full", m.qk_norm_full},
            {"qk_norm_head_weights", m.qk_norm_head_weights},
            {"logit_scale", m.logit_scale},
            {"rope_windowed_only", m.rope_windowed_only},
            {"nope_every", m.nope_every},
            {"attention_chunk", m.attention_chunk},
            {"qk_l2_norm", m.qk_l2_norm},
            {"attn_temperature", m.attn_temperature},
            {"floor_scale", m.floor_scale},
            {"embed_multiplier", m.embed_multiplier},
            {"residual_multiplier", m.residual_multiplier},
            {"post_norm", m.post_norm},
            {"attn_bias", m.attn_bias},
            {"head_bias", m.head_bias},
            {"experts", m.experts},
            {"experts_per_token", m.experts_per_token},
            {"expert_ffn", m.moe() ? m.mlp_ffn() : 0},
            {"shared_expert_ffn", m.shared_expert_ffn},
            {"expert_bias", m.expert_bias},
            {"attn_sinks", m.attn_sinks},
            {"swiglu_limit", m.swiglu_limit},
            {"dense_layers", m.dense_layers},
            {"moe_every", m.moe_every},
            {"shared_expert_gate", m.shared_expert_gate},
            {"norm_topk_prob", m.norm_topk_prob},
            {"router_aux_loss", m.router_aux_loss},
            {"seq_aux_alpha", m.seq_aux_alpha},
            {"seq_aux", m.seq_aux},
            {"sigmoid_routing", m.sigmoid_routing},
            {"expert_groups", m.expert_groups},
            {"groups_per_token", m.groups_per_token},
            {"group_by_best", m.group_by_best},
            {"routed_scale", m.routed_scale},
            {"kv_lora_rank", m.kv_lora_rank},
            {"q_lora_rank", m.q_lora_rank},
            {"rope_head_size", m.rope_head_size},
            {"v_head_size", m.v_head_dim()},
            {"full_attn_every", m.full_attn_every},
            {"linear_attention",
             {{"key_heads", m.la_key_heads},
              {"value_heads", m.la_value_heads},
              {"key_dim", m.la_key_dim},
              {"value_dim", m.la_value_dim},
              {"conv_kernel", m.la_conv_kernel}}},
            {"attn_output_gate", m.attn_output_gate},
            {"mtp_in_file", m.mtp_in_file},
            {"mtp_modules", m.mtp_modules},
            {"norm", m.norm == NormKind::kLayerNorm ? "layernorm"
                                                    : (m.norm == NormKind::kRmsNorm ? "rmsnorm" : "none")},
            {"position", m.position == PositionKind::kLearned
                             ? "learned"
                             : (m.position == PositionKind::kRotary ? "rotary" : "none")},
            {"params", m.total_params()},
            {"active_params", m.active_params()},
            {"params_eq1", m.paper_params()}};
  return j.dump();
}

std::string to_json_text(const RunConfig& run) {
  const ZeroConfig& z = run.zero;
  auto count = [](const AutoCount& c) { return c.is_auto ? json("auto") : json(c.value); };
  json j;
  j["name"] = run.name;
  j["train_batch_size"] = count(run.train_batch_size);
  j["train_micro_batch_size_per_gpu"] = count(run.micro_batch_per_gpu);
  j["gradient_accumulation_steps"] = count(run.gradient_accumulation_steps);
  j["precision"] = precision_name(run.precision);
  if (run.fp32_gradients) j["communication_data_type"] = "fp32";
  j["optimizer"] = run.optimizer;
  {
    const RunConfig::OptimizerParams& op = run.optimizer_params;
    json params = json::object();
    if (op.lr >= 0) params["lr"] = op.lr;
    if (op.beta1 >= 0) params["betas"] = {op.beta1, op.beta2};
    if (op.eps >= 0) params["eps"] = op.eps;
    if (op.weight_decay >= 0) params["weight_decay"] = op.weight_decay;
    if (!op.adam_w_mode) params["adam_w_mode"] = false;
    if (!params.empty()) j["optimizer_params"] = params;
  }
  if (run.gradient_clipping > 0) j["gradient_clipping"] = run.gradient_clipping;
  j["zero_optimization"] = {{"stage", z.stage},
                            {"overlap_comm", z.overlap_comm},
                            {"contiguous_gradients", z.contiguous_gradients},
                            {"reduce_scatter", z.reduce_scatter},
                            {"sub_group_size", z.sub_group_size},
                            {"stage3_prefetch_bucket_size", count(z.prefetch_bucket_size)},
                            {"stage3_max_live_parameters", z.max_live_parameters},
                            {"stage3_max_reuse_distance", z.max_reuse_distance},
                            {"stage3_param_persistence_threshold", count(z.param_persistence_threshold)},
                            {"stage3_model_persistence_threshold", z.model_persistence_threshold},
                            {"reduce_bucket_size", count(z.reduce_bucket_size)},
                            {"allgather_bucket_size", z.allgather_bucket_size},
                            {"offload_param",
                             {{"device", offload_device_name(z.offload_param.device)},
                              {"nvme_path", z.offload_param.nvme_path},
                              {"pin_memory", z.offload_param.pin_memory},
                              {"buffer_count", z.offload_param.buffer_count},
                              {"buffer_size", z.offload_param.buffer_size},
                              {"max_in_cpu", z.offload_param.max_in_cpu}}},
                            {"offload_optimizer",
                             {{"device", offload_device_name(z.offload_optimizer.device)},
                              {"nvme_path", z.offload_optimizer.nvme_path},
                              {"pin_memory", z.offload_optimizer.pin_memory},
                              {"buffer_count", z.offload_optimizer.buffer_count},
                              {"pipeline_read", z.offload_optimizer.pipeline_read},
                              {"pipeline_write", z.offload_optimizer.pipeline_write},
                              {"fast_init", z.offload_optimizer.fast_init},
                              {"ratio", z.offload_optimizer.ratio}}}};
  j["aio"] = {{"block_size", run.aio.block_size},
              {"queue_depth", run.aio.queue_depth},
              {"intra_op_parallelism", run.aio.intra_op_parallelism},
              {"single_submit", run.aio.single_submit},
              {"overlap_events", run.aio.overlap_events}};
  const auto& ac = run.activation_checkpointing;
  j["activation_checkpointing"] = {{"enabled", ac.enabled},
                                   {"interval", ac.interval},
                                   {"cpu_checkpointing", ac.cpu_checkpointing},
                                   {"partition_activations", ac.partition_activations},
                                   {"contiguous_memory_optimization", ac.contiguous_memory_optimization}};
  const auto& mw = run.memwall;
  j["memwall"] = {
      {"tiling_factor", mw.tiling_factor},
      {"data_parallel", mw.data_parallel},
      {"model_parallel", mw.model_parallel},
      {"pipeline_parallel", mw.pipeline_parallel},
      {"expert_parallel", mw.expert_parallel},
      {"expert_load", mw.expert_load},
      {"mtp", mw.mtp},
      {"mtp_loss_weight", mw.mtp_weight},
      {"sequence_length", mw.sequence_length},
      {"attention", attention_kernel_name(mw.attention)},
      {"partitioning", mw.partitioning == Partitioning::kBroadcast ? "broadcast" : "bandwidth-centric"},
      {"prefetch", mw.prefetch},
      {"optimizer_prefetch", mw.optimizer_prefetch},
      {"delayed_parameter_update", mw.delayed_parameter_update},
      {"delayed_parameter_update_warmup", mw.delayed_parameter_update_warmup},
      {"weight_decay_params", mw.decay_matrices_only ? "matrices" : "all"},
      {"router_bias_update_speed", mw.router_bias_update},
      {"optimizer_gradients", optimizer_gradients_name(mw.optimizer_gradients)},
      {"memory_order", mw.memory_in_program_order ? "program" : "dependencies"},
      {"strategy", mw.strategy}};
  return j.dump();
}

Result<json> parse_json_object(std::string_view text, const std::string& source) {
  try {
    json j = json::parse(text.begin(), text.end());
    if (!j.is_object()) return Status::invalid_argument(source + ": top level is not a JSON object");
    return j;
  } catch (const json::exception& e) {  // (a syntax error, or a number past a double's range)
    return Status::invalid_argument(source + ": not valid JSON: " + json_error_text(e));
  }
}

std::string json_error_text(const json::exception& e) {
  // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
  const std::string what = e.what();
  const auto pos = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && pos != std::string::npos ? what.substr(pos + 2) : what;
}

}  // namespace memwall
