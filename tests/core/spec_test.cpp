// Spec loaders: parameter counts against published sizes, DeepSpeed config handling, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <tuple>

#include <nlohmann/json.hpp>

#include "graph/model_graph.h"
#include "spec/spec_loader.h"
#include "test_support.h"

namespace memwall {
namespace {

using testing::load_hardware_scenario;
using testing::load_model_scenario;
using testing::load_run_scenario;

TEST(ModelSpec, Gpt2ParameterCountsMatchPublishedSizes) {
  // Hugging Face reports these exact counts for the GPT-2 checkpoints (tied LM head).
  EXPECT_EQ(load_model_scenario("gpt2").total_params(), 124439808.0);
  EXPECT_EQ(load_model_scenario("gpt2-medium").total_params(), 354823168.0);
  EXPECT_EQ(load_model_scenario("gpt2-large").total_params(), 774030080.0);
  EXPECT_EQ(load_model_scenario("gpt2-xl").total_params(), 1557611200.0);
}

TEST(ModelSpec, LlamaParameterCountsMatchPublishedSizes) {
  // Llama 2 7B and 70B (SwiGLU MLP, untied head, grouped-query attention for 70B).
  EXPECT_EQ(load_model_scenario("llama-2-7b").total_params(), 6738415616.0);
  EXPECT_EQ(load_model_scenario("llama-2-70b").total_params(), 68976648192.0);
  // Llama 3.1 8B, Llama 3.2 1B and Qwen2 0.5B as published (grouped-query attention, Qwen2's q/k/v biases).
  EXPECT_EQ(load_model_scenario("llama-3.1-8b").total_params(), 8030261248.0);
  EXPECT_EQ(load_model_scenario("llama-3.2-1b").total_params(), 1235814400.0);
  EXPECT_EQ(load_model_scenario("qwen2-0.5b").total_params(), 494032768.0);
  EXPECT_EQ(load_model_scenario("mistral-7b").total_params(), 7241732096.0);
  EXPECT_EQ(load_model_scenario("mistral-7b").sliding_window, 4096);
  EXPECT_EQ(load_model_scenario("llama-3.1-8b").pretraining_positions(), 8192);
  EXPECT_EQ(load_model_scenario("llama-2-7b").pretraining_positions(), 4096);
}

// Mixtures of experts: Mixtral 8x7B (Mistral's shape, 8 experts of 14336 in every layer, 2 per token) and
// Qwen3-30B-A3B (Qwen3's, 128 experts of 768, 8 per token) read as their cards' totals and active counts;
// what the files' defaults say where they leave the keys out; patterns memwall does not model are refused
// naming the key.
TEST(ModelSpec, MixturesOfExpertsReadAsPublished) {
  const ModelSpec mixtral = load_model_scenario("mixtral-8x7b");
  EXPECT_TRUE(mixtral.moe());
  EXPECT_EQ(mixtral.experts, 8);
  EXPECT_EQ(mixtral.experts_per_token, 2);
  EXPECT_EQ(mixtral.mlp_ffn(), 14336);
  EXPECT_EQ(mixtral.total_params(), 46702792704.0);
  EXPECT_EQ(mixtral.active_params(), 12879925248.0);
  // A block: attention 41,943,040, experts 8 x 3 x 4096 x 14336, router 4096 x 8, two norms.
  EXPECT_EQ(mixtral.params_per_layer(), 41943040.0 + 8 * 3 * 4096.0 * 14336 + 4096 * 8 + 2 * 4096);
  const ModelSpec qwen = load_model_scenario("qwen3-30b-a3b");
  EXPECT_EQ(qwen.experts, 128);
  EXPECT_EQ(qwen.experts_per_token, 8);
  EXPECT_EQ(qwen.mlp_ffn(), 768);
  EXPECT_TRUE(qwen.qk_norm);
  EXPECT_EQ(qwen.total_params(), 30532122624.0);
  EXPECT_EQ(qwen.active_params(), 3353032704.0);
  // Qwen1.5-MoE-A2.7B (Qwen2's shape with q/k/v biases; 60 experts of 1408, 4 per token, and a shared expert
  // of 5632 behind a sigmoid gate in every layer): its card's 14.3B and 2.7B activated.
  const ModelSpec qwen2 = load_model_scenario("qwen1.5-moe-a2.7b");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_EQ(qwen2.shared_expert_ffn, 5632);
  EXPECT_EQ(qwen2.total_params(), 14315784192.0);
  EXPECT_EQ(qwen2.active_params(), 2689173504.0);
  // OLMoE-1B-7B (the Llama shape with OLMo 2's q/k norms over all 2048 query and key channels; 64 experts of
  // 1024, 8 per token): its card's 6.9B total, 1.3B active; Granite 3.0 1B-A400M (Granite's multipliers, 32
  // experts of 512, 8 per token, tied): 1.3B and 400M.
  const ModelSpec olmoe = load_model_scenario("olmoe-1b-7b");
  EXPECT_TRUE(olmoe.qk_norm && olmoe.qk_norm_full && !olmoe.post_norm);
  EXPECT_EQ(olmoe.experts, 64);
  EXPECT_EQ(olmoe.experts_per_token, 8);
  EXPECT_EQ(olmoe.mlp_ffn(), 1024);
  EXPECT_EQ(olmoe.params_per_layer(),
            4 * 2048.0 * 2048 + 2 * 2048 + 64 * 3 * 2048.0 * 1024 + 2048 * 64 + 2 * 2048);
  EXPECT_EQ(olmoe.total_params(), 6919161856.0);
  EXPECT_EQ(olmoe.active_params(), 1282017280.0);
  const ModelSpec granite_moe = load_model_scenario("granite-3.0-1b-a400m");
  EXPECT_EQ(granite_moe.experts, 32);
  EXPECT_EQ(granite_moe.mlp_ffn(), 512);
  EXPECT_EQ(granite_moe.embed_multiplier, 12.0);
  EXPECT_EQ(granite_moe.logit_scale, 1.0 / 6);
  EXPECT_EQ(granite_moe.total_params(), 1334628352.0);
  EXPECT_EQ(granite_moe.active_params(), 428658688.0);
  EXPECT_TRUE(granite_moe.moe());
  // gpt-oss-20b and -120b: biases on q, k, v and o, a sink logit per head, 32 and 128 experts of 2880 with
  // biases (and the router's), 4 per token: OpenAI's card's 20.91B and 116.83B total; its 3.61B and 5.13B
  // active leave the token embedding out, memwall counts it.
  const ModelSpec oss = load_model_scenario("gpt-oss-20b");
  EXPECT_TRUE(oss.linear_bias && oss.attn_bias && oss.attn_sinks && oss.expert_bias);
  EXPECT_EQ(oss.experts, 32);
  EXPECT_EQ(oss.experts_per_token, 4);
  EXPECT_EQ(oss.sliding_window, 128);
  EXPECT_EQ(oss.global_every, 2);
  EXPECT_EQ(oss.rope_scaling.type, "yarn");
  EXPECT_FALSE(oss.rope_scaling.truncate);
  const double attention = 2 * 2880.0 * 4096 + 2 * 2880.0 * 512 + 4096 + 2 * 512 + 2880 + 64;
  const double expert = 3 * 2880.0 * 2880 + 2 * 2880 + 2880;
  EXPECT_EQ(oss.params_per_layer(), attention + 32 * expert + 2880 * 32 + 32 + 2 * 2880);
  EXPECT_EQ(oss.total_params(), 20914757184.0);
  EXPECT_NEAR(oss.active_params() - 201088.0 * 2880, 3.61e9, 0.005e9);
  const ModelSpec oss120 = load_model_scenario("gpt-oss-120b");
  EXPECT_EQ(oss120.total_params(), 116829156672.0);
  EXPECT_NEAR(oss120.active_params() - 201088.0 * 2880, 5.13e9, 0.005e9);
  // GLM-4.5-Air: a dense first block (an MLP of 10944), then 45 of 128 experts of 1408 (8 per token) beside
  // a shared expert of 1408 without a gate: its card's 106B total, 12B active without the token embedding.
  const ModelSpec air = load_model_scenario("glm-4.5-air");
  EXPECT_EQ(air.dense_layers, 1);
  EXPECT_EQ(air.moe_layers(), 45);
  EXPECT_FALSE(air.moe_layer(0));
  EXPECT_TRUE(air.moe_layer(1));
  EXPECT_EQ(air.shared_expert_ffn, 1408);
  EXPECT_FALSE(air.shared_expert_gate);
  EXPECT_TRUE(air.qkv_bias && !air.linear_bias && !air.qk_norm);
  const double air_attention = 2 * 4096.0 * 12288 + 12288 + 2 * (4096.0 * 1024 + 1024) + 2 * 4096;
  const double air_expert = 3 * 4096.0 * 1408;
  EXPECT_EQ(air.total_params(), 2 * 151552.0 * 4096 + 46 * air_attention + 3 * 4096.0 * 10944 +
                                    45 * (4096.0 * 128 + 129 * air_expert) + 4096);
  EXPECT_EQ(air.active_params(), 2 * 151552.0 * 4096 + 46 * air_attention + 3 * 4096.0 * 10944 +
                                     45 * (4096.0 * 128 + 9 * air_expert) + 4096);
  EXPECT_NEAR(air.total_params(), 106e9, 1e9);
  EXPECT_NEAR(air.active_params() - 151552.0 * 4096, 12e9, 0.9e9);
  // GLM-4.5: 3 dense blocks, 89 of 160 experts of 1536 with per-head q/k norms: 352.8B of its card's 355B
  // (its next-token-prediction layer, some 4B, not counted), 32.9B active without the token embedding.
  const ModelSpec glm45 = load_model_scenario("glm-4.5");
  EXPECT_EQ(glm45.moe_layers(), 89);
  EXPECT_TRUE(glm45.qk_norm);
  const double glm45_attention = 2 * 5120.0 * 12288 + 12288 + 2 * (5120.0 * 1024 + 1024) + 2 * 128 + 2 * 5120;
  const double glm45_expert = 3 * 5120.0 * 1536;
  EXPECT_EQ(glm45.total_params(), 2 * 151552.0 * 5120 + 92 * glm45_attention + 3 * 3 * 5120.0 * 12288 +
                                      89 * (5120.0 * 160 + 161 * glm45_expert) + 5120);
  EXPECT_NEAR(glm45.total_params(), 355e9, 3e9);
  EXPECT_NEAR(glm45.active_params() - 151552.0 * 5120, 32e9, 0.9e9);
  // Dense models: every parameter active.
  EXPECT_EQ(load_model_scenario("mistral-7b").active_params(), 7241732096.0);
  // The large open models their cards count: Llama 3.1 70B and 405B, Qwen3-235B-A22B, Qwen3-Coder-480B-A35B,
  // Mixtral 8x22B (total, and active where experts route).
  for (const auto& [name, total, active] :
       {std::tuple{"llama-3.1-70b", 70.6e9, 70.6e9}, std::tuple{"llama-3.1-405b", 405.9e9, 405.9e9},
        std::tuple{"qwen3-235b-a22b", 235.1e9, 22.2e9}, std::tuple{"qwen3-coder-480b-a35b", 480.2e9, 35.5e9},
        std::tuple{"mixtral-8x22b", 140.6e9, 39.2e9}, std::tuple{"mistral-large-2407", 122.6e9, 122.6e9},
        std::tuple{"qwen2.5-72b", 72.7e9, 72.7e9}, std::tuple{"gemma-3-27b", 27.0e9, 27.0e9}}) {
    const ModelSpec big = load_model_scenario(name);
    EXPECT_NEAR(big.total_params(), total, 0.05e9) << name;
    EXPECT_NEAR(big.active_params(), active, 0.05e9) << name;
  }
  // Gemma 3 27B's language model: 62 layers of q, k, v, o (32 and 16 heads of 128), q/k norms, a GeGLU MLP of
  // 21504 and four norms, a tied embedding.
  EXPECT_EQ(load_model_scenario("gemma-3-27b").total_params(),
            62 * (2 * 5376.0 * 4096 + 2 * 5376.0 * 2048 + 256 + 3 * 5376.0 * 21504 + 4 * 5376) +
                262208.0 * 5376 + 5376);
  const ModelSpec l405 = load_model_scenario("llama-3.1-405b");
  EXPECT_EQ(l405.total_params(),
            126 * (2 * 16384.0 * 16384 + 2 * 16384.0 * 1024 + 3 * 16384.0 * 53248 + 2 * 16384) +
                2 * 128256.0 * 16384 + 16384);

  Diagnostics diag;
  const std::string base = R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 256, )";
  auto defaults = parse_model(base + R"("model_type": "qwen3_moe"})", "qwen3moe.json", diag);
  ASSERT_TRUE(defaults.is_ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->experts, 128);
  EXPECT_EQ(defaults->experts_per_token, 8);
  EXPECT_EQ(defaults->mlp_ffn(), 768);
  auto mixtral_defaults = parse_model(base + R"("model_type": "mixtral"})", "mixtral.json", diag);
  ASSERT_TRUE(mixtral_defaults.is_ok());
  EXPECT_EQ(mixtral_defaults->experts, 8);
  EXPECT_EQ(mixtral_defaults->mlp_ffn(), 128);
  auto olmoe_defaults = parse_model(base + R"("model_type": "olmoe"})", "olmoe.json", diag);
  ASSERT_TRUE(olmoe_defaults.is_ok());
  EXPECT_EQ(olmoe_defaults->experts, 64);  // OlmoeConfig's
  EXPECT_EQ(olmoe_defaults->experts_per_token, 8);
  EXPECT_EQ(olmoe_defaults->mlp_ffn(), 128);
  EXPECT_EQ(olmoe_defaults->norm_eps, 1e-5);
  auto oss_defaults = parse_model(base + R"("model_type": "gpt_oss"})", "gpt_oss.json", diag);
  ASSERT_TRUE(oss_defaults.is_ok()) << oss_defaults.status().to_string();
  EXPECT_EQ(oss_defaults->experts, 128);  // GptOssConfig's
  EXPECT_EQ(oss_defaults->experts_per_token, 4);
  EXPECT_EQ(oss_defaults->head_size, 64);
  EXPECT_EQ(oss_defaults->sliding_window, 128);
  EXPECT_EQ(oss_defaults->attention_window(0), 128);
  EXPECT_EQ(oss_defaults->attention_window(1), 0);
  auto granite_defaults = parse_model(base + R"("model_type": "granitemoe"})", "granitemoe.json", diag);
  ASSERT_TRUE(granite_defaults.is_ok());
  EXPECT_EQ(granite_defaults->experts, 8);  // GraniteMoeConfig's
  EXPECT_EQ(granite_defaults->experts_per_token, 2);
  // Qwen-MoE's dense MLPs (of intermediate_size) between the layers of experts (decoder_sparse_step), or in
  // the first layers (mlp_only_layers from 0): the same count as a layer of each kind.
  auto sparse = parse_model(base + R"("model_type": "qwen3_moe", "decoder_sparse_step": 2})", "s.json", diag);
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().to_string();
  EXPECT_FALSE(sparse->moe_layer(0));
  EXPECT_TRUE(sparse->moe_layer(1));
  auto first_dense =
      parse_model(base + R"("model_type": "qwen3_moe", "mlp_only_layers": [0]})", "f.json", diag);
  ASSERT_TRUE(first_dense.is_ok()) << first_dense.status().to_string();
  EXPECT_EQ(first_dense->dense_layers, 1);
  EXPECT_EQ(sparse->total_params(), first_dense->total_params());
  EXPECT_EQ(graph_param_stats(*sparse, 1, 1, 0).total_elements, sparse->total_params());
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  for (const auto& [extra, needle] :
       {std::pair{
            R"("model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 5})",
            "key 'num_experts_per_tok': 5 is more than the 4 experts (num_local_experts); allowed: 1 to 4"},
        std::pair{
            R"("model_type": "qwen3_moe", "mlp_only_layers": [1]})",
            "key 'mlp_only_layers': [1] (dense MLPs in layers other than the first ones) is not supported; "
            "allowed: [], or [0, 1, ..., k - 1]"}}) {
    auto bad = parse_model(base + extra, "moe.json", diag);
    ASSERT_FALSE(bad.is_ok()) << extra;
    EXPECT_NE(bad.status().to_string().find(needle), std::string::npos) << bad.status().to_string();
  }
}

// Llama 4: experts of intermediate_size beside a shared one without a gate, in every block (Scout) or every
// other one (Maverick, dense MLPs of intermediate_size_mlp between), counted against their cards.
TEST(ModelSpec, Llama4ExpertsInterleavedWithDenseBlocks) {
  const ModelSpec scout = load_model_scenario("llama-4-scout");
  EXPECT_EQ(scout.model_type, "llama4");
  EXPECT_EQ(scout.experts, 16);
  EXPECT_EQ(scout.experts_per_token, 1);
  EXPECT_EQ(scout.moe_layers(), 48);
  EXPECT_EQ(scout.mlp_ffn(), 8192);
  EXPECT_EQ(scout.shared_expert_ffn, 8192);
  EXPECT_FALSE(scout.shared_expert_gate || scout.qk_norm || scout.tied_embeddings);
  EXPECT_EQ(scout.nope_every, 4);
  EXPECT_EQ(scout.rope_scaling.type, "llama3");
  EXPECT_EQ(scout.rope_scaling.high_freq_factor, scout.rope_scaling.low_freq_factor);
  EXPECT_EQ(scout.norm_eps, 1e-5);
  // (what memwall train computes: weightless q/k norms on the rotary layers, tempered queries on the others)
  EXPECT_TRUE(scout.qk_l2_norm);
  EXPECT_EQ(scout.attn_temperature, 0.1);
  EXPECT_EQ(scout.floor_scale, 8192);
  EXPECT_EQ(scout.attention_chunk, 8192);
  const double attention = 2 * 5120.0 * 5120 + 2 * 5120.0 * 1024 + 2 * 5120;
  const double expert = 3 * 5120.0 * 8192, embeddings = 2 * 202048.0 * 5120 + 5120;
  EXPECT_EQ(scout.total_params(), embeddings + 48 * (attention + 16 * 5120.0 + 17 * expert));
  EXPECT_EQ(scout.active_params(), embeddings + 48 * (attention + 16 * 5120.0 + 2 * expert));
  EXPECT_NEAR(scout.active_params(), 17e9, 0.2e9);
  const ModelSpec maverick = load_model_scenario("llama-4-maverick");
  EXPECT_EQ(maverick.moe_every, 2);
  EXPECT_FALSE(maverick.moe_layer(0));
  EXPECT_TRUE(maverick.moe_layer(1));
  EXPECT_FALSE(maverick.moe_layer(46));
  EXPECT_TRUE(maverick.moe_layer(47));
  EXPECT_EQ(maverick.moe_layers(), 24);
  EXPECT_EQ(maverick.total_params(),
            embeddings + 48 * attention + 24 * 3 * 5120.0 * 16384 + 24 * (128 * 5120.0 + 129 * expert));
  EXPECT_NEAR(maverick.total_params(), 400e9, 1e9);
  EXPECT_NEAR(maverick.active_params(), 17e9, 0.2e9);
  // The rotary layers' rope: a llama3 scaling whose factors are equal divides the long wavelengths and
  // keeps the others, with no blend between.
  const std::vector<double> f = rope_inv_freq(128, 500000, scout.rope_scaling);
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double base = std::pow(500000.0, -2.0 * static_cast<double>(i) / 128);
    const bool divided = 2 * std::numbers::pi / base > 8192;
    EXPECT_DOUBLE_EQ(f[i], divided ? base / 16 : base) << i;
  }
  // Llama4TextConfig's defaults; moe_layers other than every step-th block refused.
  Diagnostics diag;
  const std::string base = R"({"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 256, )";
  // (a list past num_hidden_layers, as Maverick's file cut to 4 layers keeps it: those entries name no block)
  auto d =
      parse_model(base + R"("interleave_moe_layer_step": 2, "moe_layers": [1, 3, 5, 7]})", "l4.json", diag);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->experts, 16);
  EXPECT_EQ(d->ffn_hidden, 16384);
  EXPECT_EQ(d->head_dim(), 128);
  EXPECT_EQ(d->rope_theta, 500000);
  EXPECT_EQ(d->moe_layers(), 2);
  EXPECT_TRUE(d->qk_l2_norm);
  EXPECT_EQ(d->attn_temperature, 0.1);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  auto plain =
      parse_model(base + R"("use_qk_norm": false, "attn_temperature_tuning": false, "attn_scale": 0.3,
      "floor_scale": 100})",
                  "plain.json", diag);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_FALSE(plain->qk_l2_norm);
  EXPECT_EQ(plain->attn_temperature, 0);
  EXPECT_EQ(plain->floor_scale, 100);
  auto bad = parse_model(base + R"("interleave_moe_layer_step": 2, "moe_layers": [0, 2]})", "bad.json", diag);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().to_string().find("key 'moe_layers': [0,2] is a pattern memwall does not compute; "
                                          "allowed: every interleave_moe_layer_step-th block ([1,3])"),
            std::string::npos)
      << bad.status().to_string();
}

// Qwen3-Next: three Gated DeltaNet layers to one softmax attention layer (whose q_proj also gives the output
// gate), 512 experts of 512 and a gated shared expert in every layer: its card's 80B.
TEST(ModelSpec, Qwen3NextLinearAttentionLayers) {
  const ModelSpec m = load_model_scenario("qwen3-next-80b-a3b");
  EXPECT_EQ(m.full_attn_every, 4);
  EXPECT_TRUE(m.linear_attention(0) && m.linear_attention(2) && !m.linear_attention(3));
  EXPECT_EQ(m.softmax_attention_layers(), 12);
  EXPECT_TRUE(m.attn_output_gate && m.qk_norm && m.norm_unit_offset && m.shared_expert_gate);
  EXPECT_EQ(m.partial_rotary_factor, 0.25);
  const double hd = 2048;
  const double deltanet = hd * (2 * 2048 + 2 * 4096) + hd * 64 + 8192 * 4 + 64 + 128 + 4096 * hd;
  const double softmax = hd * 2 * 4096 + 2 * hd * 512 + 2 * 256 + 4096 * hd;
  const double expert = 3 * hd * 512, moe = 512 * hd + 513 * expert + hd;
  const double rest = 36 * deltanet + 12 * softmax + 48 * 2 * hd + 2 * 151936 * hd + hd;
  EXPECT_EQ(m.total_params(), rest + 48 * moe);
  EXPECT_EQ(m.active_params(), rest + 48 * (512 * hd + 11 * expert + hd));
  EXPECT_NEAR(m.total_params(), 80e9, 0.5e9);
  EXPECT_NEAR(m.active_params() - 2 * 151936 * hd, 3.25e9, 0.1e9);
  // Qwen3NextConfig's defaults; a layer_types other than every fourth layer full_attention refused.
  Diagnostics diag;
  const std::string base = R"({"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 256, )";
  auto d = parse_model(base + R"("layer_types": ["linear_attention", "linear_attention", "linear_attention",
      "full_attention"]})",
                       "next.json", diag);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->experts, 512);
  EXPECT_EQ(d->experts_per_token, 10);
  EXPECT_EQ(d->mlp_ffn(), 512);
  EXPECT_EQ(d->shared_expert_ffn, 512);
  EXPECT_EQ(d->head_dim(), 256);
  EXPECT_EQ(d->la_value_heads, 32);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  auto bad = parse_model(base + R"("layer_types": ["full_attention", "linear_attention", "linear_attention",
      "linear_attention"]})",
                         "bad.json", diag);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(
      bad.status().to_string().find("bad.json: key 'layer_types': is a pattern memwall does not compute; "
                                    "allowed: every full_attention_interval-th layer (4)"),
      std::string::npos)
      << bad.status().to_string();
}

// DeepSeek's latent attention and experts, counted tensor by tensor against their cards' totals.
TEST(ModelSpec, DeepSeekLatentAttentionAndExperts) {
  // DeepSeek-V3: per layer q_a (7168 -> 1536), its norm, q_b (1536 -> 128 x 192), kv_a (7168 -> 512 + 64),
  // its norm, kv_b (512 -> 128 x (128 + 128)), o_proj (128 x 128 -> 7168), two norms; 3 dense MLPs of 18432,
  // then 58 blocks of 256 experts of 2048 and a shared one without a gate: its card's 671B and 37B active.
  const ModelSpec v3 = load_model_scenario("deepseek-v3");
  EXPECT_TRUE(v3.mla() && v3.moe());
  EXPECT_EQ(v3.head_dim(), 192);
  EXPECT_EQ(v3.v_head_dim(), 128);
  EXPECT_EQ(v3.o_width(), 128 * 128);
  EXPECT_EQ(v3.kv_heads, 128);
  EXPECT_EQ(v3.dense_layers, 3);
  EXPECT_EQ(v3.shared_expert_ffn, 2048);
  EXPECT_FALSE(v3.shared_expert_gate);
  EXPECT_EQ(v3.rope_scaling.type, "yarn");
  const auto mla = [](double hd, double heads, double q_lora) {
    const double q = q_lora > 0 ? q_lora * hd + q_lora + heads * 192 * q_lora : heads * 192 * hd;
    return q + 576 * hd + 512 + heads * 256 * 512 + hd * heads * 128 + 2 * hd;
  };
  const double v3_expert = 3 * 7168.0 * 2048;
  const double v3_rest = 2 * 129280.0 * 7168 + 61 * mla(7168, 128, 1536) + 3 * 3 * 7168.0 * 18432 + 7168;
  EXPECT_EQ(v3.total_params(), v3_rest + 58 * (256 * 7168.0 + 257 * v3_expert));
  EXPECT_EQ(v3.active_params(), v3_rest + 58 * (256 * 7168.0 + 9 * v3_expert));
  EXPECT_NEAR(v3.total_params(), 671e9, 0.5e9);
  EXPECT_NEAR(v3.active_params(), 37e9, 0.6e9);
  // With its multi-token-prediction module (memwall.mtp): one more expert block, eh_proj (2 x 7168 -> 7168)
  // and three norms, the embedding and head shared: 682.6B (its checkpoint's 685B stores the shared embedding
  // and head a second time, 1.85B); counted alike by the graph's stats.
  EXPECT_EQ(v3.mtp_in_file, 1);
  EXPECT_EQ(v3.mtp_modules, 0);
  const ModelSpec v3_mtp = with_mtp(v3);
  EXPECT_EQ(v3_mtp.layers, 62);
  EXPECT_EQ(v3_mtp.main_layers(), 61);
  EXPECT_EQ(v3_mtp.total_params() - v3.total_params(),
            mla(7168, 128, 1536) + 256 * 7168.0 + 257 * v3_expert + 2 * 7168.0 * 7168 + 3 * 7168);
  EXPECT_NEAR(v3_mtp.total_params() + 2 * 129280.0 * 7168, 685e9, 1e9);
  EXPECT_EQ(graph_param_stats(v3_mtp, 1, 1, 0).total_elements, v3_mtp.total_params());
  EXPECT_EQ(with_mtp(v3_mtp).total_params(), v3_mtp.total_params());  // (applied once)
  // DeepSeek-V2 (two shared experts, one dense block): 236B, 21B active; V2-Lite's queries by one q_proj.
  const ModelSpec v2 = load_model_scenario("deepseek-v2");
  EXPECT_EQ(v2.shared_expert_ffn, 2 * 1536);
  EXPECT_NEAR(v2.total_params(), 236e9, 0.5e9);
  EXPECT_NEAR(v2.active_params(), 21e9, 0.5e9);
  const ModelSpec lite = load_model_scenario("deepseek-v2-lite");
  EXPECT_EQ(lite.q_lora_rank, 0);
  const double lite_expert = 3 * 2048.0 * 1408;
  EXPECT_EQ(lite.total_params(), 2 * 102400.0 * 2048 + 27 * mla(2048, 16, 0) + 3 * 2048.0 * 10944 +
                                     26 * (64 * 2048.0 + 66 * lite_expert) + 2048);
  EXPECT_NEAR(lite.total_params(), 15.7e9, 0.05e9);
  // Kimi K2: DeepSeek-V3's architecture with 384 experts, 64 heads, one dense block: 1T total, 32B active.
  const ModelSpec k2 = load_model_scenario("kimi-k2");
  EXPECT_EQ(k2.experts, 384);
  EXPECT_EQ(k2.dense_layers, 1);
  EXPECT_EQ(k2.rope_scaling.beta_fast, 1.0);
  EXPECT_NEAR(k2.total_params(), 1.03e12, 0.01e12);
  EXPECT_NEAR(k2.active_params(), 32.5e9, 0.5e9);
  // Their routing as their files give it: V3's sigmoid scores in 8 groups, the best 4 (noaux_tc), weights
  // renormalised x 2.5; V2's softmax among the best 3 of 8 groups scored by their best (group_limited_greedy)
  // x 16; V2-Lite's softmax, plain weights; Kimi K2's sigmoid in one group x 2.827.
  for (const auto& [m, sigmoid, groups, per_token, by_best, scale, norm] :
       {std::tuple{load_model_scenario("deepseek-v3"), true, 8, 4, false, 2.5, true},
        std::tuple{v2, false, 8, 3, true, 16.0, false}, std::tuple{lite, false, 1, 1, false, 1.0, false},
        std::tuple{k2, true, 1, 1, false, 2.827, true}}) {
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.sigmoid_routing, sigmoid);
    EXPECT_EQ(m.expert_groups, groups);
    EXPECT_EQ(m.groups_per_token, per_token);
    EXPECT_EQ(m.group_by_best, by_best);
    EXPECT_EQ(m.routed_scale, scale);
    EXPECT_EQ(m.norm_topk_prob, norm);
  }

  // DeepseekV3Config's defaults and DeepseekV2Config's; a dense DeepSeek (n_routed_experts null); what is
  // not modelled refused naming the key.
  Diagnostics diag;
  const std::string base = R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
      "num_attention_heads": 4, "vocab_size": 256, )";
  auto d3 = parse_model(base + R"("model_type": "deepseek_v3"})", "v3.json", diag);
  ASSERT_TRUE(d3.is_ok()) << d3.status().to_string();
  EXPECT_EQ(d3->kv_lora_rank, 512);
  EXPECT_EQ(d3->q_lora_rank, 1536);
  EXPECT_EQ(d3->head_dim(), 192);
  EXPECT_EQ(d3->experts, 256);
  EXPECT_EQ(d3->experts_per_token, 8);
  EXPECT_EQ(d3->mlp_ffn(), 2048);
  EXPECT_EQ(d3->dense_layers, 3);
  EXPECT_TRUE(d3->sigmoid_routing);  // (DeepseekV3Config's routing: noaux_tc, 8 groups, the best 4, x 2.5)
  EXPECT_EQ(d3->expert_groups, 8);
  EXPECT_EQ(d3->groups_per_token, 4);
  EXPECT_EQ(d3->routed_scale, 2.5);
  EXPECT_TRUE(d3->norm_topk_prob);
  auto d2 = parse_model(base + R"("model_type": "deepseek_v2", "num_experts_per_tok": 2,
      "head_dim": 64})",
                        "v2.json", diag);
  ASSERT_TRUE(d2.is_ok()) << d2.status().to_string();
  EXPECT_EQ(d2->experts, 64);
  EXPECT_EQ(d2->mlp_ffn(), 1407);
  EXPECT_EQ(d2->shared_expert_ffn, 2 * 1407);
  EXPECT_EQ(d2->dense_layers, 0);
  EXPECT_EQ(d2->head_dim(), 192);     // (transformers' head_dim, the rotary part, not taken as the head's)
  EXPECT_FALSE(d2->sigmoid_routing);  // (DeepseekV2Config's: softmax, greedy, plain weights, x 1)
  EXPECT_EQ(d2->expert_groups, 1);
  EXPECT_EQ(d2->routed_scale, 1.0);
  EXPECT_FALSE(d2->norm_topk_prob);
  auto dense = parse_model(base + R"("model_type": "deepseek_v2", "n_routed_experts": null,
      "q_lora_rank": null, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
      "kv_lora_rank": 32})",
                           "dense.json", diag);
  ASSERT_TRUE(dense.is_ok()) << dense.status().to_string();
  EXPECT_FALSE(dense->moe());
  EXPECT_EQ(dense->total_params(),
            2 * 256.0 * 64 + 64 +
                4 * (4 * 24 * 64.0 + 40 * 64 + 32 + 4 * 32 * 32 + 64 * 64 + 2 * 64 + 3 * 64 * 128));
  EXPECT_EQ(graph_param_stats(*dense, 1, 1, 0).total_elements, dense->total_params());
  // A quantized checkpoint's quantization_config (DeepSeek-V3's fp8 blocks): counted at a run's precision,
  // with a warning.
  EXPECT_TRUE(diag.warnings.empty());
  auto fp8 = parse_model(base + R"("model_type": "deepseek_v3", "quantization_config": {"fmt": "e4m3"}})",
                         "fp8.json", diag);
  ASSERT_TRUE(fp8.is_ok()) << fp8.status().to_string();
  EXPECT_EQ(fp8->total_params(), d3->total_params());
  ASSERT_EQ(diag.warnings.size(), 1u);
  EXPECT_NE(diag.warnings[0].find("fp8.json: quantization_config: the file's quantized weights are not "
                                  "modelled"),
            std::string::npos);
  for (const auto& [text, needle] :
       {std::pair{std::string(R"("model_type": "deepseek_v2"})"),
                  "key 'num_experts_per_tok': is missing (required)"},
        std::pair{std::string(R"("model_type": "deepseek_v3", "moe_layer_freq": 2})"),
                  "key 'moe_layer_freq': 2 (dense MLPs between the blocks of experts) is not supported"},
        std::pair{std::string(R"("model_type": "deepseek_v3", "topk_method": "random"})"),
                  "key 'topk_method'"},
        std::pair{std::string(R"("model_type": "deepseek_v3", "n_group": 7})"),
                  "key 'n_group': 7 does not divide the 256 experts"},
        std::pair{std::string(R"("model_type": "kimi_k2", "attention_bias": true})"),
                  "key 'attention_bias': true (biases on the latent attention's projections) is not "
                  "supported; allowed: false"}}) {
    auto bad = parse_model(base + text, "bad.json", diag);
    ASSERT_FALSE(bad.is_ok()) << text;
    EXPECT_NE(bad.status().to_string().find(needle), std::string::npos) << bad.status().to_string();
  }
}

// Earlier open models, as their checkpoints count: OPT (learned positions with 2 extra rows, ReLU), BLOOM
// (ALiBi, a norm of the embeddings), Falcon (multi-query, one norm for attention and MLP side by side),
// Pythia (GPT-NeoX: partial rotary, an untied head), Phi-2 (one norm, an untied head with a bias).
TEST(ModelSpec, EarlierOpenModelsCountAsTheirCheckpoints) {
  EXPECT_EQ(load_model_scenario("bloom-176b").total_params(), 176247271424.0);
  EXPECT_EQ(load_model_scenario("bloom-560m").total_params(), 559214592.0);
  EXPECT_EQ(load_model_scenario("falcon-7b").total_params(), 6921720704.0);
  EXPECT_EQ(load_model_scenario("pythia-12b").total_params(), 11846072320.0);
  EXPECT_EQ(load_model_scenario("phi-2").total_params(), 2779683840.0);
  // OPT-175B by the same rule as OPT-125m and OPT-1.3B below: the OPT paper's 175B.
  EXPECT_EQ(load_model_scenario("opt-175b").total_params(), 174604468224.0);
  // Falcon-40B: 8 key/value heads of 64 and two norms per block (the new decoder architecture).
  const ModelSpec falcon40 = load_model_scenario("falcon-40b");
  EXPECT_EQ(falcon40.kv_heads, 8);
  EXPECT_FALSE(falcon40.block_norm_shared);
  EXPECT_EQ(falcon40.params_per_layer(),
            8192.0 * (8192 + 2 * 8 * 64) + 8192.0 * 8192 + 2 * 4 * 8192.0 * 8192 + 4 * 8192);
  EXPECT_EQ(load_model_scenario("pythia-12b").partial_rotary_factor, 0.25);
  EXPECT_EQ(load_model_scenario("bloom-176b").max_positions, 2048);  // the run's default sequence
  // MPT-7B: no biases anywhere (its LayerNorms' included), ALiBi, an MLP of expansion_ratio x d_model.
  const ModelSpec mpt = load_model_scenario("mpt-7b");
  EXPECT_EQ(mpt.total_params(), 50432.0 * 4096 + 32 * (12 * 4096.0 * 4096 + 2 * 4096) + 4096);
  EXPECT_EQ(mpt.total_params(), 6649286656.0);
  EXPECT_FALSE(mpt.norm_bias);
  EXPECT_FALSE(mpt.linear_bias);
  EXPECT_EQ(mpt.position, PositionKind::kNone);
  EXPECT_EQ(mpt.mlp_act, "gelu");
  // GPT-J-6B: rotary on 64 of 256 channels, biases on the MLP only, an untied head with a bias.
  const ModelSpec gptj = load_model_scenario("gpt-j-6b");
  EXPECT_EQ(gptj.total_params(), 2 * 50400.0 * 4096 + 50400 +
                                     28 * (2 * 4096 + 4 * 4096.0 * 4096 + 2 * 4096.0 * 16384 + 16384 + 4096) +
                                     2 * 4096);
  EXPECT_EQ(gptj.partial_rotary_factor, 0.25);
  EXPECT_FALSE(gptj.attn_bias);
  EXPECT_TRUE(gptj.block_norm_shared);
  // CodeGen-350M-mono: GPT-J's block of 1024 channels, rotary on 32 of 64, a vocabulary of 51200.
  EXPECT_EQ(load_model_scenario("codegen-350m-mono").total_params(),
            2 * 51200.0 * 1024 + 51200 +
                20 * (2 * 1024 + 4 * 1024.0 * 1024 + 8 * 1024.0 * 1024 + 4096 + 1024) + 2 * 1024);
  EXPECT_EQ(load_model_scenario("codegen-350m-mono").total_params(), 356712448.0);
  // StableLM-3B-4E1T: the Llama shape with LayerNorms (weight and bias), an untied head.
  const ModelSpec stablelm = load_model_scenario("stablelm-3b-4e1t");
  EXPECT_EQ(stablelm.total_params(),
            2 * 50304.0 * 2560 + 32 * (4 * 2560 + 4 * 2560.0 * 2560 + 3 * 2560.0 * 6912) + 2 * 2560);
  EXPECT_EQ(stablelm.total_params(), 2795443200.0);
  EXPECT_EQ(stablelm.partial_rotary_factor, 0.25);
  // StableLM 2 12B: one LayerNorm a block (use_parallel_residual), a LayerNorm of each of the 32 query and 8
  // key heads of 160 with its own weight (qk_layernorm).
  const ModelSpec stablelm12 = load_model_scenario("stablelm-2-12b");
  EXPECT_TRUE(stablelm12.block_norm_shared && stablelm12.qk_norm && stablelm12.qk_norm_head_weights);
  EXPECT_EQ(stablelm12.qk_norm_elements(), 40 * 160.0);
  EXPECT_EQ(stablelm12.total_params(),
            2 * 100352.0 * 5120 +
                40 * (2 * 5120 + 2 * 5120.0 * 5120 + 2 * 5120.0 * 1280 + 3 * 5120.0 * 13824 + 40 * 160) +
                2 * 5120);
  EXPECT_EQ(stablelm12.total_params(), 12143185920.0);
  // Command R: one LayerNorm without bias a block (and the final one), a tied head; Command R+ with 8
  // key/value heads and a LayerNorm of each query and key head (96 + 8 weights of 128 a layer).
  const ModelSpec command_r = load_model_scenario("command-r-35b");
  EXPECT_TRUE(command_r.block_norm_shared && !command_r.norm_bias && command_r.tied_embeddings);
  EXPECT_FALSE(command_r.qk_norm);
  EXPECT_EQ(command_r.logit_scale, 0.0625);
  EXPECT_EQ(command_r.total_params(),
            256000.0 * 8192 + 40 * (8192 + 4 * 8192.0 * 8192 + 3 * 8192.0 * 22528) + 8192);
  EXPECT_EQ(command_r.total_params(), 34980831232.0);
  const ModelSpec command_r_plus = load_model_scenario("command-r-plus-104b");
  EXPECT_TRUE(command_r_plus.qk_norm && command_r_plus.qk_norm_head_weights);
  EXPECT_EQ(command_r_plus.qk_norm_elements(), 104 * 128.0);
  EXPECT_EQ(command_r_plus.total_params(), 103810674688.0);
  // Command R7B and Command A (Cohere2): Cohere's block with 8 key/value heads, a 4096-token window on all
  // layers but every fourth, rotary on those only (nothing to count).
  const ModelSpec r7b = load_model_scenario("command-r7b");
  EXPECT_EQ(r7b.model_type, "cohere2");
  EXPECT_TRUE(r7b.rope_windowed_only && r7b.block_norm_shared && !r7b.norm_bias && !r7b.qk_norm);
  EXPECT_EQ(r7b.sliding_window, 4096);
  EXPECT_EQ(r7b.global_every, 4);
  EXPECT_EQ(r7b.logit_scale, 0.25);
  EXPECT_EQ(
      r7b.total_params(),
      256000.0 * 4096 + 32 * (4096 + 2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336) + 4096);
  EXPECT_EQ(r7b.total_params(), 8028033024.0);
  EXPECT_EQ(load_model_scenario("command-a-111b").total_params(), 111057580032.0);
  // SmolLM3-3B: the Llama shape, tied, every fourth layer without rotary positions (nothing to count).
  const ModelSpec smol = load_model_scenario("smollm3-3b");
  EXPECT_EQ(smol.model_type, "smollm3");
  EXPECT_EQ(smol.nope_every, 4);
  EXPECT_TRUE(smol.tied_embeddings);
  EXPECT_EQ(smol.rope_theta, 5e6);
  EXPECT_EQ(
      smol.total_params(),
      128256.0 * 2048 + 36 * (2 * 2048 + 2 * 2048.0 * 2048 + 2 * 2048.0 * 512 + 3 * 2048.0 * 11008) + 2048);
  EXPECT_EQ(smol.total_params(), 3075098624.0);
  // Granite 3.3 8B: the Llama shape, tied; its multipliers count nothing (attention_multiplier 1/128 kept as
  // query_scale 128^2, logits_scaling 16 as logit_scale 1/16).
  const ModelSpec granite = load_model_scenario("granite-3.3-8b");
  EXPECT_EQ(granite.model_type, "granite");
  EXPECT_EQ(granite.embed_multiplier, 12.0);
  EXPECT_EQ(granite.residual_multiplier, 0.22);
  EXPECT_EQ(granite.query_scale, 16384.0);
  EXPECT_EQ(granite.logit_scale, 0.0625);
  EXPECT_EQ(
      granite.total_params(),
      49159.0 * 4096 + 40 * (2 * 4096 + 2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 12800) + 4096);
  EXPECT_EQ(granite.total_params(), 8170864640.0);
  // EXAONE 4.0 32B: OLMo 2's norms after the sublayers, a norm of each query and key head (128 weights each),
  // untied; "LLLG": every fourth layer global, rotary on the windowed layers only.
  const ModelSpec exaone = load_model_scenario("exaone-4.0-32b");
  EXPECT_EQ(exaone.model_type, "exaone4");
  EXPECT_TRUE(exaone.post_norm && exaone.qk_norm && !exaone.qk_norm_full && exaone.rope_windowed_only);
  EXPECT_EQ(exaone.global_every, 4);
  EXPECT_EQ(exaone.total_params(),
            2 * 102400.0 * 5120 +
                64 * (2 * 5120 + 2 * 128 + 2 * 5120.0 * 5120 + 2 * 5120.0 * 1024 + 3 * 5120.0 * 27392) +
                5120);
  EXPECT_EQ(exaone.total_params(), 32003216384.0);
  const std::string e4 = R"({"model_type": "exaone4", "num_hidden_layers": 4, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100, )";
  Diagnostics e4_diag;
  auto e4_default = parse_model(e4 + R"("max_position_embeddings": 64})", "e4/config.json", e4_diag);
  ASSERT_TRUE(e4_default.is_ok()) << e4_default.status().to_string();
  EXPECT_EQ(e4_default->sliding_window, 4096);  // Exaone4Config's window and pattern
  EXPECT_EQ(e4_default->global_every, 4);
  auto e4_null =
      parse_model(e4 + R"("sliding_window": null, "sliding_window_pattern": 0})", "e4/config.json", e4_diag);
  ASSERT_TRUE(e4_null.is_ok()) << e4_null.status().to_string();
  EXPECT_EQ(e4_null->sliding_window, 0);  // no window: every layer turns
  EXPECT_FALSE(e4_null->rope_windowed_only);
  auto e4_full = parse_model(e4 + R"("sliding_window": 8, "layer_types": ["full_attention", "full_attention",
      "full_attention", "full_attention"]})",
                             "e4/config.json", e4_diag);
  ASSERT_TRUE(e4_full.is_ok()) << e4_full.status().to_string();
  EXPECT_EQ(e4_full->sliding_window, 0);  // a window on no layer, and (as transformers) no layer turning
  EXPECT_TRUE(e4_full->rope_windowed_only);
  EXPECT_TRUE(e4_diag.warnings.empty()) << e4_diag.warnings.front();
  auto e4_bad = parse_model(e4 + R"("sliding_window_pattern": "LGLL"})", "e4/config.json", e4_diag);
  ASSERT_FALSE(e4_bad.is_ok());
  EXPECT_NE(e4_bad.status().message().find("\"LGLL\" is a pattern memwall does not compute"),
            std::string::npos)
      << e4_bad.status().message();
  // OLMo 3 7B: OLMo 2's parameters; a 4096-token window on three layers of four, which turn by rope_theta
  // without YaRN (rope_local_theta), the fourth with it.
  const ModelSpec olmo3 = load_model_scenario("olmo-3-7b");
  EXPECT_EQ(olmo3.model_type, "olmo3");
  EXPECT_TRUE(olmo3.post_norm && olmo3.qk_norm_full);
  EXPECT_EQ(olmo3.sliding_window, 4096);
  EXPECT_EQ(olmo3.global_every, 4);
  EXPECT_EQ(olmo3.rope_local_theta, olmo3.rope_theta);
  EXPECT_EQ(olmo3.rope_scaling.type, "yarn");
  EXPECT_EQ(olmo3.total_params(),
            2 * 100278.0 * 4096 + 32 * (4 * 4096 + 4 * 4096.0 * 4096 + 3 * 4096.0 * 11008) + 4096);
  EXPECT_EQ(olmo3.total_params(), 7298011136.0);
  // StarCoder2 3B: GPT-2's block (LayerNorms with biases, biases on every linear, a plain MLP) with 2
  // key/value heads, rotary positions, a 4096-token window on every layer, tied.
  const ModelSpec sc3 = load_model_scenario("starcoder2-3b");
  EXPECT_EQ(sc3.model_type, "starcoder2");
  EXPECT_TRUE(sc3.linear_bias && sc3.norm_bias && !sc3.gated_mlp && sc3.tied_embeddings);
  EXPECT_EQ(sc3.position, PositionKind::kRotary);
  EXPECT_EQ(sc3.sliding_window, 4096);
  EXPECT_EQ(sc3.total_params(), 49152.0 * 3072 +
                                    30 * (4 * 3072 + 2 * (3072.0 * 3072 + 3072) + 2 * (3072.0 * 256 + 256) +
                                          2 * 3072.0 * 12288 + 12288 + 3072) +
                                    2 * 3072);
  EXPECT_EQ(sc3.total_params(), 3030371328.0);
  EXPECT_EQ(load_model_scenario("starcoder2-7b").total_params(), 7173923840.0);
  // Starcoder2Config's defaults (2 key/value heads, no window, tied); use_bias false drops the linears'
  // biases only.
  const std::string sc_text = R"({"model_type": "starcoder2", "num_hidden_layers": 2, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100, "sliding_window": null)";
  Diagnostics sc_diag;
  auto sc = parse_model(sc_text + "}", "sc/config.json", sc_diag);
  ASSERT_TRUE(sc.is_ok()) << sc.status().to_string();
  EXPECT_EQ(sc->kv_heads, 2);
  EXPECT_EQ(sc->sliding_window, 0);
  EXPECT_TRUE(sc->tied_embeddings);
  EXPECT_EQ(sc->mlp_act, "gelu_pytorch_tanh");
  auto sc_unbiased = parse_model(sc_text + R"(, "use_bias": false})", "sc/config.json", sc_diag);
  ASSERT_TRUE(sc_unbiased.is_ok()) << sc_unbiased.status().to_string();
  EXPECT_EQ(sc->total_params() - sc_unbiased->total_params(), 2 * (64 + 32 + 32 + 64 + 128 + 64.0));
  EXPECT_TRUE(sc_diag.warnings.empty()) << sc_diag.warnings.front();
  // Nemotron-Mini-4B: LayerNorms with a bias (1 + weight), rotary on half of each head, a plain squared-ReLU
  // MLP, no biases on the linears, untied; attention_bias without mlp_bias refused.
  const ModelSpec nemotron = load_model_scenario("nemotron-mini-4b");
  EXPECT_TRUE(nemotron.norm == NormKind::kLayerNorm && nemotron.norm_bias && !nemotron.gated_mlp &&
              !nemotron.linear_bias && !nemotron.tied_embeddings);
  EXPECT_EQ(nemotron.mlp_act, "relu2");
  EXPECT_TRUE(nemotron.norm_unit_offset);  // LayerNorm1P
  EXPECT_EQ(nemotron.partial_rotary_factor, 0.5);
  EXPECT_EQ(nemotron.total_params(),
            2 * 256000.0 * 3072 +
                32 * (4 * 3072 + 2 * 3072.0 * 3072 + 2 * 3072.0 * 1024 + 2 * 3072.0 * 9216) + 2 * 3072);
  EXPECT_EQ(nemotron.total_params(), 4190509056.0);
  // Minitron-8B: 48 heads of 128 over 4096 channels (q_proj 6144 x 4096), an MLP of 16384.
  const ModelSpec minitron = load_model_scenario("minitron-8b");
  EXPECT_EQ(minitron.q_width(), 6144);
  EXPECT_EQ(minitron.total_params(),
            32 * (2 * 4096.0 * 6144 + 2 * 4096.0 * 1024 + 2 * 4096.0 * 16384 + 4 * 4096) +
                2 * 256000.0 * 4096 + 2 * 4096);
  Diagnostics nemotron_diag;
  auto half_biased =
      parse_model(R"({"model_type": "nemotron", "attention_bias": true})", "n/config.json", nemotron_diag);
  ASSERT_FALSE(half_biased.is_ok());
  EXPECT_NE(half_biased.status().message().find("key 'mlp_bias': false beside attention_bias true"),
            std::string::npos)
      << half_biased.status().message();
  // Seed-OSS-36B: biases on q, k and v only (attention_out_bias false), 80 query heads of 128 over 5120
  // channels, untied; biases on o_proj or the MLP refused naming the key.
  const ModelSpec seed = load_model_scenario("seed-oss-36b");
  EXPECT_TRUE(seed.qkv_bias && !seed.linear_bias);
  EXPECT_EQ(seed.q_width(), 10240);
  EXPECT_EQ(seed.total_params(), 2 * 155136.0 * 5120 +
                                     64 * (2 * 5120 + 2 * 5120.0 * 10240 + 10240 +
                                           2 * (5120.0 * 1024 + 1024) + 3 * 5120.0 * 27648) +
                                     5120);
  EXPECT_EQ(seed.total_params(), 36151104512.0);
  for (const char* key : {"attention_out_bias", "mlp_bias"}) {
    Diagnostics seed_diag;
    auto biased = parse_model(R"({"model_type": "seed_oss", "num_hidden_layers": 2, "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100, ")" +
                                  std::string(key) + R"(": true})",
                              "seed/config.json", seed_diag);
    ASSERT_FALSE(biased.is_ok()) << key;
    EXPECT_NE(biased.status().message().find("key '" + std::string(key) + "': true"), std::string::npos)
        << biased.status().message();
  }
  // GLM-4-9B-0414: biases on q, k and v only (not o), four RMSNorms a layer (Gemma 2's), heads of 128 with
  // rotary on neighbouring pairs of their first half (nothing to count), untied.
  const ModelSpec glm4 = load_model_scenario("glm-4-9b-0414");
  EXPECT_EQ(glm4.model_type, "glm4");
  EXPECT_TRUE(glm4.qkv_bias && !glm4.linear_bias && glm4.sandwich_norm && !glm4.tied_embeddings);
  EXPECT_EQ(glm4.partial_rotary_factor, 0.5);
  EXPECT_EQ(glm4.total_params(),
            2 * 151552.0 * 4096 +
                40 * (4 * 4096 + 2 * 4096.0 * 4096 + 4096 + 2 * (4096.0 * 256 + 256) + 3 * 4096.0 * 13696) +
                4096);
  EXPECT_EQ(glm4.total_params(), 9400279040.0);
  EXPECT_EQ(load_model_scenario("glm-4-32b-0414").total_params(), 32566487552.0);
  EXPECT_EQ(load_model_scenario("glm-4-9b-chat-hf").total_params(), 9400279040.0 - 40 * 2 * 4096);
  // GlmConfig's defaults: biases on q, k and v, heads of 128, rotary on half of each, RMSNorm eps
  // 1.5625e-7; GLM (glm) with two norms a layer, attention_bias false without biases.
  const std::string glm_text = R"({"model_type": "glm", "num_hidden_layers": 2, "hidden_size": 256,
      "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)";
  Diagnostics glm_diag;
  auto glm = parse_model(glm_text + "}", "glm/config.json", glm_diag);
  ASSERT_TRUE(glm.is_ok()) << glm.status().to_string();
  EXPECT_TRUE(glm->qkv_bias && !glm->linear_bias && !glm->sandwich_norm);
  EXPECT_EQ(glm->head_size, 128);
  EXPECT_EQ(glm->partial_rotary_factor, 0.5);
  EXPECT_EQ(glm->norm_eps, 1.5625e-7);
  EXPECT_EQ(glm->total_params(),
            2 * 100.0 * 256 +
                2 * (2 * 256 + 2 * 256.0 * 512 + 512 + 2 * (256.0 * 256 + 256) + 3 * 256.0 * 512) + 256);
  auto glm_unbiased = parse_model(glm_text + R"(, "attention_bias": false})", "glm/config.json", glm_diag);
  ASSERT_TRUE(glm_unbiased.is_ok()) << glm_unbiased.status().to_string();
  EXPECT_FALSE(glm_unbiased->qkv_bias || glm_unbiased->linear_bias);
  EXPECT_TRUE(glm_diag.warnings.empty()) << glm_diag.warnings.front();
  Diagnostics granite_diag;  // GraniteConfig's defaults: every multiplier 1 (scores times 1, not 1/sqrt(hs))
  auto plain_granite = parse_model(R"({"model_type": "granite", "num_hidden_layers": 2, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100})",
                                   "g/config.json", granite_diag);
  ASSERT_TRUE(plain_granite.is_ok()) << plain_granite.status().to_string();
  EXPECT_EQ(plain_granite->query_scale, 1.0);
  EXPECT_EQ(plain_granite->embed_multiplier, 1.0);
  EXPECT_EQ(plain_granite->logit_scale, 1.0);
  Diagnostics cohere_diag;
  auto biased =
      parse_model(R"({"model_type": "cohere", "attention_bias": true})", "cohere/config.json", cohere_diag);
  ASSERT_FALSE(biased.is_ok());
  EXPECT_NE(
      biased.status().message().find("attention_bias': true (biases on q, k, v and o) is not supported"),
      std::string::npos)
      << biased.status().message();
  // Cohere2's defaults (Cohere2Config's: a 4096 window, every fourth layer global), a null window (none, nor
  // rotary), layer_types over sliding_window_pattern, the first Cohere configs' keys ignored without a
  // warning, q/k norms refused.
  const std::string c2 = R"({"model_type": "cohere2", "num_hidden_layers": 8, "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "use_parallel_block": true, "rotary_pct": 1.0, )";
  Diagnostics c2_diag;
  auto c2_default = parse_model(c2 + R"("vocab_size": 100})", "c2/config.json", c2_diag);
  ASSERT_TRUE(c2_default.is_ok()) << c2_default.status().to_string();
  EXPECT_TRUE(c2_diag.warnings.empty()) << c2_diag.warnings.front();
  EXPECT_EQ(c2_default->sliding_window, 4096);
  EXPECT_EQ(c2_default->global_every, 4);
  EXPECT_TRUE(c2_default->rope_windowed_only);
  EXPECT_EQ(c2_default->logit_scale, 0.0625);
  auto c2_null = parse_model(c2 + R"("sliding_window": null})", "c2/config.json", c2_diag);
  ASSERT_TRUE(c2_null.is_ok()) << c2_null.status().to_string();
  EXPECT_EQ(c2_null->sliding_window, 0);
  EXPECT_EQ(c2_null->global_every, 0);
  auto c2_types = parse_model(c2 + R"("sliding_window": 16, "sliding_window_pattern": 4, "layer_types":
      ["full_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
       "sliding_attention", "sliding_attention", "sliding_attention"]})",
                              "c2/config.json", c2_diag);
  ASSERT_TRUE(c2_types.is_ok()) << c2_types.status().to_string();
  EXPECT_EQ(c2_types->first_window_layer, 2);
  EXPECT_EQ(c2_types->global_every, 0);
  auto c2_qk = parse_model(c2 + R"("use_qk_norm": true})", "c2/config.json", c2_diag);
  ASSERT_FALSE(c2_qk.is_ok());
  EXPECT_NE(c2_qk.status().message().find("use_qk_norm': true (q/k norms, which Cohere2ForCausalLM"),
            std::string::npos)
      << c2_qk.status().message();
  // SmolLM3's no_rope_layers: derived from no_rope_layer_interval (4) when absent; a list longer than the
  // layers read to their count; every layer 0 is every layer unturned; other patterns, and a window (on the
  // layers without positions), refused.
  const std::string s3 = R"({"model_type": "smollm3", "num_hidden_layers": 6, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100, )";
  Diagnostics s3_diag;
  auto s3_default = parse_model(s3 + R"("no_rope_layer_interval": 3})", "s3/config.json", s3_diag);
  ASSERT_TRUE(s3_default.is_ok()) << s3_default.status().to_string();
  EXPECT_EQ(s3_default->nope_every, 3);
  EXPECT_EQ(s3_default->rope_theta, 2e6);
  auto s3_list =
      parse_model(s3 + R"("no_rope_layers": [1, 0, 1, 0, 1, 0, 1, 1]})", "s3/config.json", s3_diag);
  ASSERT_TRUE(s3_list.is_ok()) << s3_list.status().to_string();
  EXPECT_EQ(s3_list->nope_every, 2);
  auto s3_none = parse_model(s3 + R"("no_rope_layers": [0, 0, 0, 0, 0, 0]})", "s3/config.json", s3_diag);
  ASSERT_TRUE(s3_none.is_ok()) << s3_none.status().to_string();
  EXPECT_EQ(s3_none->nope_every, 1);
  auto s3_all = parse_model(s3 + R"("no_rope_layers": [1, 1, 1, 1, 1, 1]})", "s3/config.json", s3_diag);
  ASSERT_TRUE(s3_all.is_ok()) << s3_all.status().to_string();
  EXPECT_EQ(s3_all->nope_every, 0);
  EXPECT_TRUE(s3_diag.warnings.empty()) << s3_diag.warnings.front();
  for (const auto& [text, needle] :
       {std::pair{s3 + R"("no_rope_layers": [0, 1, 1, 1, 1, 1]})", "is a pattern memwall does not compute"},
        std::pair{s3 + R"("no_rope_layers": [1, 1, 0]})", "must list at least num_hidden_layers (6)"},
        std::pair{s3 + R"("use_sliding_window": true, "sliding_window": 8})",
                  "use_sliding_window': true (a window on the layers without positions) is not supported"}}) {
    auto bad = parse_model(text, "s3/config.json", s3_diag);
    ASSERT_FALSE(bad.is_ok()) << text;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
  }
  // OLMo-7B: the Llama shape with LayerNorms that have no parameters at all; OLMo-2-1124-7B: RMSNorms (after
  // the sublayers: Llama's two a layer) and q/k norms over every query and key channel (4096 + 4096 weights a
  // layer, not Qwen3's 2 x 128).
  const ModelSpec olmo = load_model_scenario("olmo-7b");
  EXPECT_EQ(olmo.total_params(), 2 * 50304.0 * 4096 + 32 * (4 * 4096.0 * 4096 + 3 * 4096.0 * 11008));
  EXPECT_EQ(olmo.total_params(), 6888095744.0);
  EXPECT_FALSE(olmo.norm_weight);
  EXPECT_EQ(olmo.clip_qkv, 0);  // (null)
  const ModelSpec olmo17 = load_model_scenario("olmo-1.7-7b");
  EXPECT_EQ(olmo17.clip_qkv, 8);
  EXPECT_EQ(olmo17.total_params(), olmo.total_params());  // (a clamp has nothing to count)
  EXPECT_EQ(olmo.norm, NormKind::kLayerNorm);
  const ModelSpec olmo2 = load_model_scenario("olmo-2-7b");
  EXPECT_EQ(olmo2.total_params(),
            2 * 100352.0 * 4096 + 32 * (4 * 4096 + 4 * 4096.0 * 4096 + 3 * 4096.0 * 11008) + 4096);
  EXPECT_EQ(olmo2.total_params(), 7298617344.0);
  EXPECT_EQ(olmo2.qk_norm_elements(), 2 * 4096.0);
  EXPECT_EQ(olmo2.norm_eps, 1e-6);
  // OLMo 2 with grouped-query attention (8 key/value heads of 128): k_norm over the keys' 1024 channels.
  Diagnostics olmo_diag;
  auto olmo2_gqa = parse_model(R"({"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 100352})",
                               "olmo2-gqa/config.json", olmo_diag);
  ASSERT_TRUE(olmo2_gqa.is_ok()) << olmo2_gqa.status().to_string();
  EXPECT_EQ(olmo2_gqa->qk_norm_elements(), 4096.0 + 1024);
  EXPECT_EQ(olmo2_gqa->norm_eps, 1e-5);  // Olmo2Config's default
  // OLMo 2 32B's file: 40 query heads on 8 key/value heads of 128.
  const ModelSpec olmo2_32b = load_model_scenario("olmo-2-32b");
  EXPECT_EQ(olmo2_32b.kv_heads, 8);
  EXPECT_EQ(olmo2_32b.qk_norm_elements(), 5120.0 + 1024);
  EXPECT_EQ(olmo2_32b.total_params(),
            2 * 100352.0 * 5120 +
                64 * (3 * 5120 + 1024 + 2 * 5120.0 * 5120 + 2 * 5120.0 * 1024 + 3 * 5120.0 * 27648) + 5120);
  EXPECT_EQ(olmo2_32b.total_params(), 32234279936.0);

  Diagnostics diag;
  // OPT-125m and OPT-1.3B's config.json (HF: 125,239,296 and 1,315,758,080); Pythia-70m's (70,426,624).
  const std::string opt =
      R"({"model_type": "opt", "activation_function": "relu", "do_layer_norm_before": true,
      "enable_bias": true, "max_position_embeddings": 2048, "vocab_size": 50272, )";
  auto opt125 = parse_model(opt + R"("hidden_size": 768, "ffn_dim": 3072, "num_attention_heads": 12,
      "num_hidden_layers": 12, "word_embed_proj_dim": 768})",
                            "opt-125m/config.json", diag);
  ASSERT_TRUE(opt125.is_ok()) << opt125.status().to_string();
  EXPECT_EQ(opt125->total_params(), 125239296.0);
  EXPECT_EQ(opt125->mlp_act, "relu");
  EXPECT_EQ(load_model_scenario("opt-125m").total_params(), 125239296.0);  // its file, by name
  auto opt13 = parse_model(opt + R"("hidden_size": 2048, "ffn_dim": 8192, "num_attention_heads": 32,
      "num_hidden_layers": 24})",
                           "opt-1.3b/config.json", diag);
  ASSERT_TRUE(opt13.is_ok()) << opt13.status().to_string();
  EXPECT_EQ(opt13->total_params(), 1315758080.0);
  auto pythia = parse_model(R"({"model_type": "gpt_neox", "hidden_size": 512, "intermediate_size": 2048,
      "num_attention_heads": 8, "num_hidden_layers": 6, "vocab_size": 50304, "rotary_pct": 0.25,
      "max_position_embeddings": 2048, "tie_word_embeddings": false, "use_parallel_residual": true})",
                            "pythia-70m/config.json", diag);
  ASSERT_TRUE(pythia.is_ok()) << pythia.status().to_string();
  EXPECT_EQ(pythia->total_params(), 70426624.0);
  // StableLM 2 1.6B's shape (q, k and v biases, a vocabulary of 100352): its biases counted.
  auto stablelm2 = parse_model(R"({"model_type": "stablelm", "hidden_size": 2048, "intermediate_size": 5632,
      "num_attention_heads": 32, "num_hidden_layers": 24, "vocab_size": 100352, "use_qkv_bias": true})",
                               "stablelm-2-1_6b/config.json", diag);
  ASSERT_TRUE(stablelm2.is_ok()) << stablelm2.status().to_string();
  EXPECT_EQ(stablelm2->params_per_layer(), 4 * 2048 + 4 * 2048.0 * 2048 + 3 * 2048 + 3 * 2048.0 * 5632);
  EXPECT_EQ(stablelm2->total_params(), 1644515328.0);
  // MPT with biases (no_bias false: on every linear and LayerNorm), learned positions and a ratio of 2.5.
  auto mpt_bias = parse_model(R"({"model_type": "mpt", "d_model": 64, "n_heads": 4, "n_layers": 2,
      "expansion_ratio": 2.5, "max_seq_len": 32, "vocab_size": 100, "no_bias": false,
      "attn_config": {"alibi": false, "attn_type": "multiquery_attention"}})",
                              "mpt-tiny/config.json", diag);
  ASSERT_TRUE(mpt_bias.is_ok()) << mpt_bias.status().to_string();
  EXPECT_EQ(mpt_bias->ffn_hidden, 160);
  EXPECT_EQ(mpt_bias->kv_heads, 1);
  EXPECT_EQ(
      mpt_bias->total_params(),
      132.0 * 64 + 2 * (64 * (64 + 2 * 16 + 64 + 2 * 160) + (64 + 2 * 16) + 64 + 160 + 64 + 4 * 64) + 2 * 64);
  // The graph the planner runs has the same parameters.
  for (const char* name : {"bloom-176b",
                           "bloom-560m",
                           "falcon-7b",
                           "falcon-40b",
                           "pythia-12b",
                           "phi-2",
                           "opt-175b",
                           "mpt-7b",
                           "gpt-j-6b",
                           "codegen-350m-mono",
                           "stablelm-3b-4e1t",
                           "stablelm-2-12b",
                           "olmo-7b",
                           "olmo-2-7b",
                           "olmo-2-32b",
                           "command-r-35b",
                           "command-r-plus-104b",
                           "command-r7b",
                           "command-a-111b",
                           "smollm3-3b",
                           "granite-3.3-8b",
                           "exaone-4.0-32b",
                           "olmo-3-7b",
                           "glm-4-9b-0414",
                           "glm-4-32b-0414",
                           "glm-4-9b-chat-hf",
                           "starcoder2-3b",
                           "starcoder2-7b",
                           "olmoe-1b-7b",
                           "granite-3.0-1b-a400m",
                           "gpt-oss-20b",
                           "gpt-oss-120b",
                           "seed-oss-36b",
                           "nemotron-mini-4b",
                           "minitron-8b",
                           "llama-3.1-405b",
                           "qwen3-235b-a22b",
                           "qwen3-coder-480b-a35b",
                           "mixtral-8x22b",
                           "glm-4.5-air",
                           "glm-4.5",
                           "llama-4-scout",
                           "llama-4-maverick",
                           "qwen3-next-80b-a3b",
                           "deepseek-v3",
                           "deepseek-v2",
                           "deepseek-v2-lite",
                           "kimi-k2"}) {
    const ModelSpec m = load_model_scenario(name);
    EXPECT_EQ(graph_param_stats(m, 1, 1, 0).total_elements, m.total_params()) << name;
  }
  // What memwall does not model is refused naming the key.
  for (const auto& [text, needle] :
       {std::pair{opt + R"("hidden_size": 1024, "ffn_dim": 4096, "num_attention_heads": 16,
            "num_hidden_layers": 24, "word_embed_proj_dim": 512})",
                  "key 'word_embed_proj_dim': 512 (embeddings projected to and from 1024, OPT-350m's) is not "
                  "supported; allowed: hidden_size"},
        std::pair{opt + R"("do_layer_norm_before": false})",
                  "key 'do_layer_norm_before': false (norms after"},
        std::pair{std::string(R"({"model_type": "phi", "qk_layernorm": true})"),
                  "key 'qk_layernorm': true (norms of queries and keys) is not supported; allowed: false"},
        std::pair{
            std::string(R"({"model_type": "bloom", "apply_residual_connection_post_layernorm": true})"),
            "key 'apply_residual_connection_post_layernorm': true (the residual taken after the norm) is "
            "not supported; allowed: false"},
        std::pair{std::string(R"({"model_type": "gpt_neox", "attention_bias": false})"),
                  "key 'attention_bias': false (biases on the MLP only) is not supported; allowed: true"},
        std::pair{std::string(R"({"model_type": "gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 32})"),
                  "key 'rotary_dim': 32 is not supported; allowed: an even number up to the head size 16"},
        std::pair{std::string(R"({"model_type": "mpt", "attn_config": {"clip_qkv": 6}})"),
                  "key 'attn_config.clip_qkv': (q, k and v clamped) is not supported; allowed: null"},
        std::pair{std::string(R"({"model_type": "mpt", "attn_config": {"alibi_bias_max": 16}})"),
                  "key 'attn_config.alibi_bias_max': 16 is not supported"},
        std::pair{std::string(R"({"model_type": "mpt", "expansion_ratio": 0.33, "d_model": 16})"),
                  "key 'expansion_ratio': 0.33 x d_model 16 is not a whole number of MLP features"},
        std::pair{std::string(R"({"model_type": "mpt", "ffn_config": {"ffn_type": "mptglu"}})"),
                  "key 'ffn_config.ffn_type': \"mptglu\" is not supported; allowed: mptmlp"},
        std::pair{opt + R"("layer_norm_elementwise_affine": false})",
                  "key 'layer_norm_elementwise_affine': false is not supported; allowed: true"}}) {
    auto bad = parse_model(text, "bad.json", diag);
    ASSERT_FALSE(bad.is_ok()) << text;
    EXPECT_NE(bad.status().to_string().find(needle), std::string::npos) << bad.status().to_string();
  }
}

TEST(ModelSpec, Qwen2BiasesAreOnQKeyAndValueOnly) {
  // Qwen2-0.5B's shape: 24 layers of 896 channels, 14 query heads on 2 key/value heads, an MLP of 4864, a
  // vocabulary of 151936 tied to the head, biases on q, k and v only: 494,032,768 parameters, the count of
  // its published checkpoint (988,065,536 bytes of bf16 tensors). With biases on o as well (attention_bias
  // read as Llama's) it would be 21,504 more.
  const std::string text = R"({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
      "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
      "max_position_embeddings": 32768, "tie_word_embeddings": true, "rms_norm_eps": 1e-6,
      "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": false})";
  Diagnostics diag;
  auto m = parse_model(text, "qwen2/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->total_params(), 494032768.0);
  EXPECT_TRUE(m->qkv_bias);
  EXPECT_FALSE(m->linear_bias);
  EXPECT_EQ(m->sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(m->rope_theta, 1e6);
  EXPECT_EQ(m->norm_eps, 1e-6);
}

// Gemma: GeGLU (GELU's tanh approximation whatever hidden_act says, unless hidden_activation names another),
// RMSNorm by 1 + weight, a scaled embedding, head_dim 256 by default, a tied head by default. Gemma 2B and 7B
// read as their published counts.
TEST(ModelSpec, GemmaReadsAsPublished) {
  const ModelSpec two = load_model_scenario("gemma-2b");
  EXPECT_EQ(two.model_type, "gemma");
  EXPECT_EQ(two.mlp_act, "gelu_pytorch_tanh");
  EXPECT_TRUE(two.norm_unit_offset);
  EXPECT_TRUE(two.embed_scale);
  EXPECT_TRUE(two.tied_embeddings);
  EXPECT_EQ(two.kv_heads, 1);
  EXPECT_EQ(two.head_dim(), 256);
  EXPECT_EQ(two.total_params(), 2506172416.0);
  const ModelSpec seven = load_model_scenario("gemma-7b");
  EXPECT_EQ(seven.q_width(), 4096);
  EXPECT_EQ(seven.total_params(), 8537680896.0);
  // A file without head_dim or tie_word_embeddings takes GemmaConfig's defaults; hidden_activation is read.
  Diagnostics diag;
  auto m = parse_model(R"({"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,
      "num_hidden_layers": 28, "num_attention_heads": 16, "vocab_size": 256000,
      "hidden_activation": "gelu"})",
                       "gemma/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->total_params(), 8537680896.0);
  EXPECT_EQ(m->mlp_act, "gelu");
  // Llama keeps its hidden_act and its plain norms; GPT-2 its activation_function.
  const ModelSpec llama = load_model_scenario("llama-3.2-1b");
  EXPECT_EQ(llama.mlp_act, "silu");
  EXPECT_EQ(load_model_scenario("gpt2").mlp_act, "gelu_new");
  EXPECT_FALSE(llama.norm_unit_offset || llama.embed_scale);
}

// Phi-3: the Llama shape with Mistral's window in every layer (its tensors' fused names are the engine's
// concern); Phi-3-mini-4k reads as 3,821,079,552 parameters. A longrope file keeps the context it stretches
// (original_max_position_embeddings beside rope_scaling); Phi-4-mini's partial rotary factor is read.
TEST(ModelSpec, Phi3ReadsAsPublished) {
  const ModelSpec mini = load_model_scenario("phi-3-mini");
  EXPECT_EQ(mini.model_type, "phi3");
  EXPECT_EQ(mini.sliding_window, 2047);
  EXPECT_EQ(mini.first_window_layer, 0);
  EXPECT_FALSE(mini.tied_embeddings);
  EXPECT_EQ(mini.total_params(), 3821079552.0);
  Diagnostics diag;
  auto m = parse_model(R"({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
      "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32064, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75, "sliding_window": 262144,
      "rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}})",
                       "phi3-128k/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->rope_scaling.type, "longrope");
  EXPECT_EQ(m->pretraining_positions(), 4096);
  EXPECT_EQ(m->partial_rotary_factor, 0.75);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  // Phi-3.5-mini's longrope: 48 pairs of its heads of 96; a stretch of 131072 / 4096 = 32 (Phi3Config's
  // original context, 4096, where the file leaves it out), so the cosines and sines are scaled by
  // sqrt(1 + ln 32 / ln 4096) = 1.190238...; a pair's frequency is theta^(-2i/96) over short_factor[i] for
  // sequences of up to 4096 positions, over long_factor[i] beyond.
  std::string shorts, longs;
  for (int i = 0; i < 48; ++i) {
    shorts += (i ? ", " : "") + std::to_string(1.0 + 0.01 * i);
    longs += (i ? ", " : "") + std::to_string(1.0 + 1.5 * i);
  }
  auto phi35 = parse_model(R"({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
      "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32064, "max_position_embeddings": 131072,
      "rope_scaling": {"type": "longrope", "short_factor": [)" +
                               shorts + R"(], "long_factor": [)" + longs + "]}}",
                           "phi-3.5-mini/config.json", diag);
  ASSERT_TRUE(phi35.is_ok()) << phi35.status().to_string();
  const RopeScaling& rs = phi35->rope_scaling;
  EXPECT_EQ(rs.original_max_positions, 4096);
  EXPECT_EQ(rs.factor, 32);
  EXPECT_NEAR(rope_attention_scale(rs), 1.1902380714238083, 1e-12);
  const std::vector<double> within = rope_inv_freq(96, 10000.0, rs, 4096),
                            beyond = rope_inv_freq(96, 10000.0, rs, 4097);
  ASSERT_EQ(within.size(), 48u);
  for (int i : {0, 17, 47}) {
    const double plain = std::pow(10000.0, -2.0 * i / 96);
    EXPECT_NEAR(within[static_cast<std::size_t>(i)], plain / (1.0 + 0.01 * i), 1e-15);
    EXPECT_NEAR(beyond[static_cast<std::size_t>(i)], plain / (1.0 + 1.5 * i), 1e-15);
  }
  // A given attention_factor is kept.
  auto given = parse_model(R"({"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256, "max_position_embeddings": 512,
      "original_max_position_embeddings": 128, "rope_scaling": {"type": "longrope", "attention_factor": 1.5,
      "long_factor": [1], "short_factor": [1]}})",
                           "given.json", diag);
  ASSERT_TRUE(given.is_ok()) << given.status().to_string();
  EXPECT_EQ(given->rope_scaling.factor, 4);
  EXPECT_EQ(rope_attention_scale(given->rope_scaling), 1.5);
}

TEST(ModelSpec, Qwen3HeadsOfTheirOwnSizeAndQueryKeyNorms) {
  // Qwen3-0.6B: 28 layers of 1024 channels, 16 query heads on 8 key/value heads of head_dim 128 (queries of
  // 2048 channels), q_norm and k_norm of 128 each, an MLP of 3072, 151936 tokens tied to the head:
  // 440,466,432 parameters in the blocks (its card's 0.44B non-embedding), 596,049,920 in all.
  const ModelSpec small = load_model_scenario("qwen3-0.6b");
  EXPECT_EQ(small.head_dim(), 128);
  EXPECT_EQ(small.q_width(), 2048);
  EXPECT_TRUE(small.qk_norm);
  EXPECT_FALSE(small.qkv_bias);
  EXPECT_EQ(small.sliding_window, 0);
  EXPECT_EQ(small.layers * small.params_per_layer(), 440466432.0);
  EXPECT_EQ(small.total_params(), 596049920.0);
  // Qwen3-8B: head_dim 128 x 32 heads is its hidden size: 6,946,071,552 in the blocks (6.95B), 8.19B in all.
  const ModelSpec big = load_model_scenario("qwen3-8b");
  EXPECT_EQ(big.head_size, 0);
  EXPECT_EQ(big.layers * big.params_per_layer(), 6946071552.0);
  EXPECT_EQ(big.total_params(), 8190735360.0);
  // Mistral Nemo's 32 heads of 128 over 5120 channels: 12,247,782,400 parameters.
  const std::string nemo = R"({"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336,
      "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "vocab_size": 131072, "max_position_embeddings": 1024000, "rope_theta": 1000000.0,
      "sliding_window": null, "tie_word_embeddings": false})";
  Diagnostics diag;
  auto m = parse_model(nemo, "nemo/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->q_width(), 4096);
  EXPECT_FALSE(m->qk_norm);
  EXPECT_EQ(m->total_params(), 12247782400.0);
  // Neither head_dim nor a hidden size the heads divide: one line.
  m = parse_model(R"({"model_type": "llama", "hidden_size": 100, "intermediate_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 3, "vocab_size": 10})",
                  "odd/config.json", diag);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(
      m.status().message().find("hidden size 100 is not a multiple of the head count 3 (and no head_dim"),
      std::string::npos)
      << m.status().message();
}

TEST(ModelSpec, SlidingWindowsAndTheLayersTheyApplyTo) {
  // Mistral-7B-v0.1's config.json: 32 layers of 4096 channels, 32 query heads on 8 key/value heads, an MLP
  // of 14336, 32000 tokens, an untied head: 7,241,732,096 parameters, its published count; every layer
  // attends over the last 4096 positions.
  const std::string mistral = R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
      "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false, "hidden_act": "silu"})";
  Diagnostics diag;
  auto m = parse_model(mistral, "mistral-7b/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->total_params(), 7241732096.0);
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_EQ(m->first_window_layer, 0);
  // Mistral v0.2's null window: full attention.
  std::string v02 = mistral;
  v02.replace(v02.find("\"sliding_window\": 4096"), 22, "\"sliding_window\": null");
  m = parse_model(v02, "mistral-7b-v0.2/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->sliding_window, 0);
  // Qwen2 with use_sliding_window: the layers from max_window_layers on; or as layer_types lists them.
  const std::string qwen = R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "use_sliding_window": true,
      "sliding_window": 16, )";
  m = parse_model(qwen + R"("max_window_layers": 3})", "qwen/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->sliding_window, 16);
  EXPECT_EQ(m->first_window_layer, 3);
  m = parse_model(qwen + R"("max_window_layers": 4})", "qwen/config.json", diag);  // no layer has it
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->sliding_window, 0);
  m = parse_model(qwen + R"("layer_types": ["full_attention", "sliding_attention", "sliding_attention",
      "sliding_attention"]})",
                  "qwen/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->first_window_layer, 1);
  // Windows interleaved with full layers, every n-th layer full (Gemma 2's and 3's pattern).
  m = parse_model(qwen + R"("layer_types": ["sliding_attention", "full_attention", "sliding_attention",
      "full_attention"]})",
                  "qwen/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->global_every, 2);
  EXPECT_EQ(m->first_window_layer, 0);
  EXPECT_EQ(m->attention_window(0), 16);
  EXPECT_EQ(m->attention_window(1), 0);
  m = parse_model(qwen + R"("layer_types": ["sliding_attention", "sliding_attention", "full_attention",
      "sliding_attention"]})",
                  "qwen/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->global_every, 3);
  EXPECT_EQ(m->attention_window(2), 0);
  EXPECT_EQ(m->attention_window(3), 16);
  // Any other pattern, or a list of another length: one line.
  for (const char* types :
       {R"(["full_attention", "sliding_attention", "sliding_attention", "full_attention"])",
        R"(["full_attention", "sliding_attention"])"}) {
    m = parse_model(qwen + R"("layer_types": )" + types + "}", "qwen/config.json", diag);
    ASSERT_FALSE(m.is_ok()) << types;
    EXPECT_NE(m.status().message().find("qwen/config.json: key 'layer_types': "), std::string::npos)
        << m.status().message();
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
  }
}

// Gemma 2: Gemma's parts, plus norms after the attention and the MLP, soft-capped scores (50) and logits
// (30), query_pre_attn_scalar, a window of 4096 on every other layer from the first. Gemma 2 2B, 9B and 27B
// read as their published counts (the two extra norms a layer included).
TEST(ModelSpec, Gemma2ReadsAsPublished) {
  const ModelSpec two = load_model_scenario("gemma-2-2b");
  EXPECT_EQ(two.model_type, "gemma2");
  EXPECT_TRUE(two.sandwich_norm && two.norm_unit_offset && two.embed_scale && two.tied_embeddings);
  EXPECT_EQ(two.attn_softcap, 50.0);
  EXPECT_EQ(two.final_softcap, 30.0);
  EXPECT_EQ(two.query_scale, 256.0);
  EXPECT_EQ(two.attention_window(0), 4096);
  EXPECT_EQ(two.attention_window(1), 0);
  EXPECT_EQ(two.attention_window(24), 4096);
  EXPECT_EQ(two.total_params(), 2614341888.0);
  EXPECT_EQ(load_model_scenario("gemma-2-9b").total_params(), 9241705984.0);
  const ModelSpec big = load_model_scenario("gemma-2-27b");
  EXPECT_EQ(big.total_params(), 27227128320.0);
  EXPECT_EQ(big.query_scale, 144.0);
  EXPECT_EQ(big.head_dim(), 128);
  // Gemma2Config's defaults where a file leaves them out; null soft-capping is none.
  Diagnostics diag;
  const std::string text = R"({"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
      "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 256000)";
  auto m = parse_model(text + "}", "gemma2/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->total_params(), 2614341888.0);
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_EQ(m->global_every, 2);
  EXPECT_EQ(m->attn_softcap, 50.0);
  m = parse_model(text + R"(, "attn_logit_softcapping": null, "final_logit_softcapping": 15.0})",
                  "gemma2/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->attn_softcap, 0.0);
  EXPECT_EQ(m->final_softcap, 15.0);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  // Gemma (1) has none of them.
  const ModelSpec one = load_model_scenario("gemma-2b");
  EXPECT_FALSE(one.sandwich_norm || one.attn_softcap > 0 || one.query_scale > 0 || one.global_every > 0);
}

// Gemma 3: Gemma 2's norms, q and k norms (by 1 + weight), no soft-capping by default, a window on five
// layers of six whose rotary base is rope_local_base_freq. Gemma 3 1B reads as 999,885,952 parameters; a
// multimodal config's text_config is its language model (Gemma3TextConfig's defaults for what it leaves
// out), the vision tower named in a warning.
TEST(ModelSpec, Gemma3ReadsAsPublished) {
  const ModelSpec one = load_model_scenario("gemma-3-1b");
  EXPECT_EQ(one.model_type, "gemma3_text");
  EXPECT_TRUE(one.sandwich_norm && one.qk_norm && one.norm_unit_offset && one.embed_scale);
  EXPECT_EQ(one.attn_softcap, 0.0);
  EXPECT_EQ(one.final_softcap, 0.0);
  EXPECT_EQ(one.global_every, 6);
  EXPECT_EQ(one.rope_local_theta, 10000.0);
  EXPECT_EQ(one.rope_theta, 1e6);
  EXPECT_EQ(one.attention_window(0), 512);
  EXPECT_EQ(one.attention_window(5), 0);
  EXPECT_EQ(one.attention_window(6), 512);
  EXPECT_EQ(one.total_params(), 999885952.0);
  // Gemma 3 4B's config.json: the text model's keys that differ from the defaults, inside text_config.
  Diagnostics diag;
  auto four = parse_model(R"({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
      "mm_tokens_per_image": 256, "boi_token_index": 255999, "eoi_token_index": 256000,
      "image_token_index": 262144, "initializer_range": 0.02,
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_attention_heads": 8, "num_hidden_layers": 34, "num_key_value_heads": 4,
                      "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
      "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})",
                          "gemma-3-4b/config.json", diag);
  ASSERT_TRUE(four.is_ok()) << four.status().to_string();
  EXPECT_EQ(four->model_type, "gemma3");
  EXPECT_EQ(four->name, "gemma-3-4b");
  EXPECT_EQ(four->vocab, 262208);
  EXPECT_EQ(four->head_dim(), 256);
  EXPECT_EQ(four->rope_scaling.type, "linear");
  // 262,208 x 2560 embedding + 34 layers of (q 2048 + k, v 1024 each + o) x 2560, 512 of q/k norms, 3 x
  // 2560 x 10240 of MLP, 4 x 2560 of norms, + the final norm: 3,880,263,168 (the card's 4B with its vision
  // tower).
  EXPECT_EQ(four->total_params(), 3880263168.0);
  ASSERT_EQ(diag.warnings.size(), 1u);
  EXPECT_NE(diag.warnings[0].find("vision_config: the vision tower"), std::string::npos) << diag.warnings[0];
  // Mistral Small 3.1's config.json (Mistral3ForConditionalGeneration): its text_config is a Mistral model
  // (heads of 128 over 5120 channels) that trains as such; the Pixtral vision tower named in a warning.
  Diagnostics mistral_diag;
  auto small =
      parse_model(R"({"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
      "image_token_index": 10, "multimodal_projector_bias": false, "projector_hidden_act": "gelu",
      "spatial_merge_size": 2, "vision_feature_layer": -1,
      "text_config": {"head_dim": 128, "hidden_size": 5120, "intermediate_size": 32768,
                      "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32,
                      "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                      "rope_theta": 1000000000.0, "sliding_window": null, "vocab_size": 131072},
      "vision_config": {"hidden_size": 1024, "model_type": "pixtral"}})",
                  "mistral-small-3.1/config.json", mistral_diag);
  ASSERT_TRUE(small.is_ok()) << small.status().to_string();
  EXPECT_EQ(small->model_type, "mistral");
  EXPECT_EQ(small->sliding_window, 0);
  EXPECT_EQ(small->rope_theta, 1e9);
  EXPECT_EQ(small->total_params(),
            2 * 131072.0 * 5120 +
                40 * (2 * 5120 + 2 * 5120.0 * 4096 + 2 * 5120.0 * 1024 + 3 * 5120.0 * 32768) + 5120);
  ASSERT_EQ(mistral_diag.warnings.size(), 1u);
  EXPECT_NE(mistral_diag.warnings[0].find("vision_config"), std::string::npos);
  auto bidirectional = parse_model(R"({"model_type": "gemma3_text", "use_bidirectional_attention": true})",
                                   "embeddinggemma/config.json", diag);
  ASSERT_FALSE(bidirectional.is_ok());
  EXPECT_NE(bidirectional.status().message().find("key 'use_bidirectional_attention'"), std::string::npos);
}

// transformers 5 writes rope_theta and rope_scaling as one rope_parameters object (or one per layer type):
// Llama 3.2's file in that form reads as the file before it; Phi-3's partial_rotary_factor in it too; Gemma
// 3's and OLMo 3's per layer type give the windowed layers their own base, or the global one's turn; a
// rope_theta beside it that disagrees, a scaled windowed turn of their own, a layer type memwall does not
// read, and layer types for a family without windows are refused naming the key.
TEST(ModelSpec, Transformers5RopeParametersReadAsTheKeysBeforeThem) {
  const std::string llama = R"({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
      "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
      "max_position_embeddings": 131072, "tie_word_embeddings": true, "rms_norm_eps": 1e-5, "head_dim": 64, )";
  const std::string llama3 = R"("factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3")";
  Diagnostics diag;
  auto before = parse_model(llama + R"("rope_theta": 500000.0, "rope_scaling": {)" + llama3 + "}}",
                            "l/config.json", diag);
  auto v5 = parse_model(llama + R"("rope_parameters": {"rope_theta": 500000.0, )" + llama3 + "}}",
                        "l/config.json", diag);
  ASSERT_TRUE(before.is_ok()) << before.status().to_string();
  ASSERT_TRUE(v5.is_ok()) << v5.status().to_string();
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  EXPECT_EQ(v5->rope_theta, 500000.0);
  EXPECT_EQ(v5->rope_scaling.type, "llama3");
  EXPECT_EQ(v5->rope_scaling.factor, 32.0);
  EXPECT_EQ(v5->rope_scaling.original_max_positions, 8192);
  EXPECT_EQ(to_json_text(*v5), to_json_text(*before));
  auto plain =
      parse_model(llama + R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})", "c", diag);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_EQ(plain->rope_theta, 1e6);
  EXPECT_TRUE(plain->rope_scaling.none());
  auto phi3 = parse_model(R"({"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75}})",
                          "d", diag);
  ASSERT_TRUE(phi3.is_ok()) << phi3.status().to_string();
  EXPECT_EQ(phi3->partial_rotary_factor, 0.75);
  // GPT-NeoX's rotary_pct and GPT-J's fixed base, as transformers 5 writes them.
  auto neox = parse_model(R"({"model_type": "gpt_neox", "rope_parameters": {"rope_type": "default",
      "rope_theta": 10000.0, "partial_rotary_factor": 0.5}})",
                          "n", diag);
  ASSERT_TRUE(neox.is_ok()) << neox.status().to_string();
  EXPECT_EQ(neox->partial_rotary_factor, 0.5);
  auto gptj = parse_model(
      R"({"model_type": "gptj", "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})", "j",
      diag);
  ASSERT_TRUE(gptj.is_ok()) << gptj.status().to_string();
  EXPECT_EQ(gptj->rope_theta, 10000.0);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  // Gemma 3: the windowed layers' own base, the global ones' linear scaling; or every layer the same turn.
  const std::string gemma3 = R"({"model_type": "gemma3_text", "num_hidden_layers": 6, "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}, )";
  auto g3 = parse_model(gemma3 + R"("sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}})",
                        "e", diag);
  ASSERT_TRUE(g3.is_ok()) << g3.status().to_string();
  EXPECT_EQ(g3->rope_theta, 1e6);
  EXPECT_EQ(g3->rope_local_theta, 20000.0);
  EXPECT_EQ(g3->rope_scaling.type, "linear");
  auto g3_same = parse_model(gemma3 + R"("sliding_attention": {"rope_type": "linear", "factor": 8.0,
      "rope_theta": 1000000.0}}})",
                             "f", diag);
  ASSERT_TRUE(g3_same.is_ok()) << g3_same.status().to_string();
  EXPECT_EQ(g3_same->rope_local_theta, 0.0);  // one table for every layer
  // OLMo 3 as transformers 5.2 writes it (every layer YaRN-scaled), and as 4.57 reads it (the windowed layers
  // unscaled).
  const std::string olmo3 = R"({"model_type": "olmo3", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64,
      "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 500000.0,
      "original_max_position_embeddings": 8192}, )";
  auto o3_scaled = parse_model(olmo3 + R"("sliding_attention": {"rope_type": "yarn", "factor": 8.0,
      "rope_theta": 500000.0, "original_max_position_embeddings": 8192}}})",
                               "g", diag);
  ASSERT_TRUE(o3_scaled.is_ok()) << o3_scaled.status().to_string();
  EXPECT_EQ(o3_scaled->rope_local_theta, 0.0);
  EXPECT_EQ(o3_scaled->rope_scaling.type, "yarn");
  auto o3_unscaled = parse_model(
      olmo3 + R"("sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}}})", "h", diag);
  ASSERT_TRUE(o3_unscaled.is_ok()) << o3_unscaled.status().to_string();
  EXPECT_EQ(o3_unscaled->rope_local_theta, 500000.0);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  for (const auto& [text, needle] :
       {std::pair{llama + R"("rope_theta": 10000.0, "rope_parameters": {"rope_theta": 500000.0}})",
                  "key 'rope_parameters' gives rope_theta 500000.0 where the file's rope_theta is 10000.0"},
        std::pair{olmo3 + R"("sliding_attention": {"rope_type": "linear", "factor": 2.0}}})",
                  "key 'rope_parameters.sliding_attention.factor' 2.0 (a turn of the windowed layers' own"},
        std::pair{
            llama + R"("rope_parameters": {"full_attention": {"rope_theta": 1e4}, "chunked_attention": {}}})",
            "key 'rope_parameters.chunked_attention' is not a layer type memwall reads"},
        std::pair{std::string(R"({"model_type": "stablelm", "rope_parameters": {"full_attention": {},
               "sliding_attention": {"rope_theta": 1e4}}})"),
                  "key 'rope_parameters.sliding_attention' (the windowed layers' own rotary turn) is not "
                  "supported for model_type stablelm"},
        std::pair{llama + R"("rope_parameters": [1]})", "key 'rope_parameters' must be an object"}}) {
    auto bad = parse_model(text, "bad/config.json", diag);
    ASSERT_FALSE(bad.is_ok()) << needle;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
  }
}

TEST(ModelSpec, Llama32ReadsItsRopeScaling) {
  // Llama-3.2-1B's config.json: 16 layers of 2048 channels, 32 query heads on 8 key/value heads, an MLP of
  // 8192, a vocabulary of 128256 tied to the head: 1,235,814,400 parameters, its published count.
  const std::string text = R"({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
      "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
      "max_position_embeddings": 131072, "tie_word_embeddings": true, "rms_norm_eps": 1e-5,
      "rope_theta": 500000.0, "head_dim": 64, "mlp_bias": false, "attention_bias": false,
      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
  Diagnostics diag;
  auto m = parse_model(text, "llama-3.2-1b/config.json", diag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  EXPECT_EQ(m->total_params(), 1235814400.0);
  EXPECT_EQ(m->rope_scaling.type, "llama3");
  EXPECT_EQ(m->rope_scaling.factor, 32.0);
  EXPECT_EQ(m->rope_scaling.original_max_positions, 8192);

  // Frequencies: wavelengths under 8192 / 4 positions are kept, over 8192 / 1 divided by 32, and the band
  // between blends the two, meeting them at its ends.
  const std::vector<double> plain = rope_inv_freq(64, 500000.0, RopeScaling{});
  const std::vector<double> scaled = rope_inv_freq(64, 500000.0, m->rope_scaling);
  ASSERT_EQ(plain.size(), 32u);
  EXPECT_DOUBLE_EQ(plain[1], std::pow(500000.0, -2.0 / 64));
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 2048) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++kept;
    } else if (wavelen > 8192) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 32) << i;
      ++divided;
    } else {
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 32) << i;
      const double smooth = (8192 / wavelen - 1) / 3;  // 0 at 8192, 1 at 2048
      EXPECT_NEAR(scaled[i], plain[i] / 32 + smooth * (plain[i] - plain[i] / 32), 1e-15) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  const std::vector<double> linear = rope_inv_freq(64, 500000.0, RopeScaling{"linear", 4.0});
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_DOUBLE_EQ(linear[i], plain[i] / 4) << i;

  // Qwen2.5's long-context setting (its model card's): YaRN by 4 over its 32768 positions, head size 128 at
  // rope_theta 1e6. The ramp runs from pair floor(23.6) = 23 (32 turns within 32768 positions) to pair
  // ceil(39.65) = 40 (one turn): pairs below it kept, above it divided by 4, between blended linearly; the
  // rotated queries and keys are scaled by 0.1 ln 4 + 1.
  auto yarn = parse_model(R"({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
      "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
      "max_position_embeddings": 32768, "rope_theta": 1000000.0,
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})",
                          "qwen2.5-7b.json", diag);
  ASSERT_TRUE(yarn.is_ok()) << yarn.status().to_string();
  EXPECT_EQ(yarn->rope_scaling.type, "yarn");
  EXPECT_TRUE(yarn->rope_scaling.supported());
  EXPECT_EQ(yarn->pretraining_positions(), 32768);
  const std::vector<double> base = rope_inv_freq(128, 1e6, RopeScaling{});
  const std::vector<double> yf = rope_inv_freq(128, 1e6, yarn->rope_scaling);
  ASSERT_EQ(yf.size(), 64U);
  for (std::size_t i = 0; i < yf.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - 23.0) / 17.0, 0.0, 1.0);
    EXPECT_NEAR(yf[i], base[i] * (1 - ramp) + base[i] / 4 * ramp, 1e-15 * base[i]) << i;
  }
  EXPECT_EQ(yf[23], base[23]);
  EXPECT_EQ(yf[40], base[40] / 4);
  EXPECT_NEAR(rope_attention_scale(yarn->rope_scaling), 0.1 * std::log(4.0) + 1, 1e-15);
  EXPECT_EQ(rope_attention_scale(m->rope_scaling), 1.0);  // llama3's: none
  // Without original_max_position_embeddings, the model's max_position_embeddings; DeepSeek's mscale ratio.
  auto own = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256, "max_position_embeddings": 4096,
      "rope_scaling": {"rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 0.707,
                       "beta_fast": null}})",
                         "own.json", diag);
  ASSERT_TRUE(own.is_ok()) << own.status().to_string();
  EXPECT_EQ(own->rope_scaling.original_max_positions, 4096);
  EXPECT_EQ(own->rope_scaling.beta_fast, 32);
  EXPECT_NEAR(rope_attention_scale(own->rope_scaling),
              (0.1 * std::log(40.0) + 1) / (0.1 * 0.707 * std::log(40.0) + 1), 1e-12);
  // dynamic: no scaling within max_position_embeddings.
  auto dynamic = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
      "rope_scaling": {"type": "dynamic", "factor": 2.0}})",
                             "dynamic.json", diag);
  ASSERT_TRUE(dynamic.is_ok()) << dynamic.status().to_string();
  EXPECT_TRUE(dynamic->rope_scaling.supported());
  EXPECT_EQ(rope_inv_freq(16, 10000.0, dynamic->rope_scaling), rope_inv_freq(16, 10000.0, RopeScaling{}));

  // Other types are kept by name (predict does not need them); bad values name their key.
  auto other = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
      "rope_scaling": {"type": "su", "long_factor": [1.0], "short_factor": [1.0]}})",
                           "su.json", diag);
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  EXPECT_EQ(other->rope_scaling.type, "su");
  EXPECT_FALSE(other->rope_scaling.supported());
  // longrope outside Phi-3 without an original context: rope_scaling's factor, no stretch of the context.
  auto longrope = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256, "max_position_embeddings": 512,
      "rope_scaling": {"type": "longrope", "factor": 4.0, "long_factor": [1, 2, 3, 4, 5, 6, 7, 8],
                       "short_factor": [1, 1, 1, 1, 2, 2, 2, 2]}})",
                              "longrope.json", diag);
  ASSERT_TRUE(longrope.is_ok()) << longrope.status().to_string();
  EXPECT_TRUE(longrope->rope_scaling.supported());
  EXPECT_EQ(longrope->rope_scaling.original_max_positions, 512);
  EXPECT_NEAR(rope_attention_scale(longrope->rope_scaling), std::sqrt(1 + std::log(4.0) / std::log(512.0)),
              1e-12);
  for (const char* bad_factors :
       {R"("long_factor": [1, 2], "short_factor": [1])", R"("long_factor": [1, 0], "short_factor": [1, 1])",
        R"("long_factor": "1", "short_factor": [1])", R"("short_factor": [1])"}) {
    SCOPED_TRACE(bad_factors);
    auto bad = parse_model(std::string(R"({"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
        "rope_scaling": {"type": "longrope", )") +
                               bad_factors + "}}",
                           "bad_longrope.json", diag);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().to_string().find("bad_longrope.json: key 'rope_scaling.long_factor'"),
              std::string::npos)
        << bad.status().to_string();
  }
  auto bad_yarn = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
      "rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 1, "beta_slow": 2}})",
                              "bad_yarn.json", diag);
  ASSERT_FALSE(bad_yarn.is_ok());
  EXPECT_NE(bad_yarn.status().to_string().find("bad_yarn.json: key 'rope_scaling.beta_fast': must be at "
                                               "least beta_slow"),
            std::string::npos)
      << bad_yarn.status().to_string();
  auto bad = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                       "original_max_position_embeddings": 64}})",
                         "bad.json", diag);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().to_string().find("bad.json: key 'rope_scaling.high_freq_factor'"), std::string::npos)
      << bad.status().to_string();
  auto missing = parse_model(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 256,
      "rope_scaling": {"rope_type": "linear"}})",
                             "missing.json", diag);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().to_string().find("'rope_scaling.factor': is missing"), std::string::npos)
      << missing.status().to_string();
}

TEST(ModelSpec, Gpt3And175BWithinOnePercent) {
  const double p = load_model_scenario("gpt3-175b").total_params();
  EXPECT_NEAR(p / 175e9, 1.0, 0.01) << p;
}

TEST(ModelSpec, PaperModelsFollowEquationOne) {
  // Figure 2a / Table 1 labels: 12 nl hd^2 rounds to the printed sizes.
  EXPECT_NEAR(load_model_scenario("fig2a-100t").paper_params() / 1e12, 101.47, 0.005);
  EXPECT_NEAR(load_model_scenario("fig2a-10t").paper_params() / 1e12, 10.05, 0.005);
  EXPECT_NEAR(load_model_scenario("paper-20t").paper_params() / 1e12, 19.98, 0.005);
  // Figure 2a's idealized blocks are exactly Eq. 1; a real GPT-2 of the same shape adds biases, norms and
  // embeddings (13 hd per layer + 2 hd + (vocab + positions) hd).
  for (const char* name : {"fig2a-0.1t", "fig2a-1t", "fig2a-100t"}) {
    const ModelSpec m = load_model_scenario(name);
    EXPECT_EQ(m.total_params(), m.paper_params()) << name;
  }
  const ModelSpec t = load_model_scenario("paper-1t");
  EXPECT_EQ(t.total_params() - t.paper_params(),
            13.0 * t.hidden * t.layers + 2.0 * t.hidden + (50257.0 + 1024.0) * t.hidden);
}

TEST(ModelSpec, ParamTensorsSumToTotal) {
  for (const char* name : {"gpt2", "llama-2-70b", "paper-1t"}) {
    const ModelSpec m = load_model_scenario(name);
    double sum = 0;
    for (const auto& g : m.param_tensors()) sum += g.elements() * g.count;
    EXPECT_EQ(sum, m.total_params()) << name;
    EXPECT_EQ(m.embedding_params() + m.layers * m.params_per_layer(), m.total_params()) << name;
  }
}

TEST(Scenarios, EveryShippedFileLoadsWithoutWarnings) {
  namespace fs = std::filesystem;
  int count = 0;
  for (const char* kind : {"hardware", "models", "runs"}) {
    for (const auto& e : fs::directory_iterator(std::string(MEMWALL_TEST_SCENARIOS_DIR) + "/" + kind)) {
      const std::string stem = e.path().stem().string();
      if (std::string(kind) == "hardware") load_hardware_scenario(stem);
      if (std::string(kind) == "models") load_model_scenario(stem);
      if (std::string(kind) == "runs") load_run_scenario(stem);
      ++count;
    }
  }
  EXPECT_GE(count, 30);
}

TEST(HardwareSpec, InheritsAppliesTheChildOverTheBase) {
  const HardwareSpec base = load_hardware_scenario("dgx2");
  const HardwareSpec c = load_hardware_scenario("dgx2-32n");
  EXPECT_EQ(c.nodes, 32);
  EXPECT_EQ(c.name, "dgx2-32n");
  EXPECT_EQ(c.gpu.count, base.gpu.count);
  EXPECT_EQ(c.total_gpus(), 512);
  const HardwareSpec h200 = load_hardware_scenario("dgx-h200");
  EXPECT_EQ(h200.gpu.memory_bytes, 141e9);
  EXPECT_EQ(h200.gpu.count, 8);  // kept from dgx-h100.json
}

TEST(RunConfig, DeepSpeedDefaultsAndScientificNotation) {
  Diagnostics diag;
  Result<RunConfig> r = parse_run(R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e9,
      "stage3_max_live_parameters": 1e9}, "aio": {"thread_count": 4}})",
                                  "t.json", diag);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->zero.sub_group_size, 1e9);
  EXPECT_TRUE(r->zero.overlap_comm);  // DeepSpeed: default true for stage 3
  EXPECT_EQ(r->zero.prefetch_bucket_size.value, 5e7);
  EXPECT_EQ(r->zero.param_persistence_threshold.value, 1e5);
  EXPECT_EQ(r->aio.intra_op_parallelism, 4);  // old name thread_count
  EXPECT_EQ(r->aio.queue_depth, 8);
  EXPECT_EQ(r->zero.offload_param.buffer_count, 5);
  EXPECT_EQ(r->zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(r->zero.model_persistence_threshold, kUnlimitedPersistence);  // sys.maxsize
  EXPECT_TRUE(diag.warnings.empty());
  // stage3_model_persistence_threshold is read (DeepSpeed's sys.maxsize as printed by its config dump too).
  for (const auto& [text, want] : {std::pair{"9223372036854775807", kUnlimitedPersistence}, {"2e6", 2e6}}) {
    Diagnostics d;
    auto capped = parse_run(
        std::string(R"({"zero_optimization": {"stage": 3, "stage3_model_persistence_threshold": )") + text +
            "}}",
        "t.json", d);
    ASSERT_TRUE(capped.is_ok()) << capped.status().message();
    EXPECT_EQ(capped->zero.model_persistence_threshold, want);
    EXPECT_TRUE(d.warnings.empty());
  }
}

TEST(RunConfig, AutoValuesResolveFromTheModel) {
  Diagnostics diag;
  Result<RunConfig> r = parse_run(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto"}})",
                                  "auto.json", diag);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  RunConfig run = *r;
  const ModelSpec m = load_model_scenario("gpt2");
  ASSERT_TRUE(resolve_run_config(run, m, testing::simple_hardware(4, 32e9)).is_ok());
  EXPECT_EQ(run.zero.reduce_bucket_size.value, 768.0 * 768);
  EXPECT_EQ(run.zero.prefetch_bucket_size.value, std::floor(0.9 * 768 * 768));
  EXPECT_EQ(run.zero.param_persistence_threshold.value, 7680);
  EXPECT_EQ(run.micro_batch_per_gpu.value, 1);
  EXPECT_EQ(run.train_batch_size.value, 4);  // 1 x 1 x 4 ranks
  EXPECT_EQ(run.precision, Precision::kBf16);
  EXPECT_EQ(run.memwall.sequence_length, 1024);
}

TEST(RunConfig, OptimizerGradientsKeyRoundTripsAndDefaultsToAuto) {
  Diagnostics diag;
  Result<RunConfig> empty = parse_run("{}", "runs/empty.json", diag);
  ASSERT_TRUE(empty.is_ok()) << empty.status().message();
  EXPECT_EQ(empty->memwall.optimizer_gradients, OptimizerGradients::kAuto);
  for (const OptimizerGradients g :
       {OptimizerGradients::kAuto, OptimizerGradients::kCpu, OptimizerGradients::kNvme}) {
    const std::string text =
        std::string(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}, )") +
        R"("memwall": {"optimizer_gradients": ")" + optimizer_gradients_name(g) + "\"}}";
    Result<RunConfig> run = parse_run(text, "runs/grads.json", diag);
    ASSERT_TRUE(run.is_ok()) << run.status().message();
    EXPECT_EQ(run->memwall.optimizer_gradients, g);
    EXPECT_EQ(run->gradients_device(),
              g == OptimizerGradients::kNvme ? OffloadDevice::kNvme : OffloadDevice::kCpu);
    const auto j = nlohmann::json::parse(to_json_text(*run));
    EXPECT_EQ(j.at("memwall").at("optimizer_gradients"), optimizer_gradients_name(g));
  }
  EXPECT_TRUE(diag.warnings.empty());
}

TEST(RunConfig, AttentionKeyRoundTripsAndDefaultsToUnfused) {
  Diagnostics diag;
  Result<RunConfig> empty = parse_run("{}", "runs/empty.json", diag);
  ASSERT_TRUE(empty.is_ok()) << empty.status().message();
  EXPECT_EQ(empty->memwall.attention, AttentionKernel::kUnfused);
  Result<RunConfig> flash = parse_run(R"({"memwall": {"attention": "flash"}})", "runs/flash.json", diag);
  ASSERT_TRUE(flash.is_ok()) << flash.status().message();
  EXPECT_EQ(flash->memwall.attention, AttentionKernel::kFlash);
  EXPECT_EQ(nlohmann::json::parse(to_json_text(*flash)).at("memwall").at("attention"), "flash");
  EXPECT_TRUE(diag.warnings.empty());
}

// DeepSpeed's optimizer.params and gradient_clipping are read (memwall train uses them); absent, nothing is
// set and clipping is off.
TEST(RunConfig, OptimizerParamsAndGradientClippingAreRead) {
  Diagnostics diag;
  Result<RunConfig> empty = parse_run("{}", "runs/empty.json", diag);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(empty->gradient_clipping, 0);
  EXPECT_LT(empty->optimizer_params.lr, 0);
  EXPECT_TRUE(empty->optimizer_params.adam_w_mode);
  Result<RunConfig> run = parse_run(
      R"({"gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95],
          "eps": 1e-8, "weight_decay": 0.1, "adam_w_mode": false, "torch_adam": true}}})",
      "runs/opt.json", diag);
  ASSERT_TRUE(run.is_ok()) << run.status().message();
  EXPECT_EQ(run->gradient_clipping, 1.0);
  EXPECT_EQ(run->optimizer_params.lr, 6e-4);
  EXPECT_EQ(run->optimizer_params.beta1, 0.9);
  EXPECT_EQ(run->optimizer_params.beta2, 0.95);
  EXPECT_EQ(run->optimizer_params.eps, 1e-8);
  EXPECT_EQ(run->optimizer_params.weight_decay, 0.1);
  EXPECT_FALSE(run->optimizer_params.adam_w_mode);
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  const auto j = nlohmann::json::parse(to_json_text(*run));
  EXPECT_EQ(j.at("gradient_clipping"), 1.0);
  EXPECT_EQ(j.at("optimizer_params").at("betas"), nlohmann::json::array({0.9, 0.95}));
  // A key of another optimizer that memwall does not know is reported, not an error.
  Result<RunConfig> other =
      parse_run(R"({"optimizer": {"type": "Adam", "params": {"lrr": 1}}})", "runs/o.json", diag);
  ASSERT_TRUE(other.is_ok());
  ASSERT_FALSE(diag.warnings.empty());
  EXPECT_NE(diag.warnings.back().find("optimizer.params.lrr"), std::string::npos) << diag.warnings.back();
}

// DeepSpeed's WarmupLR and WarmupDecayLR at last_batch_iteration = step: log or linear warm-up over at least
// 2 steps, then constant or a linear decay to 0 at total_num_steps; anything else keeps the rate.
TEST(RunConfig, LearningRateSchedulesFollowDeepSpeed) {
  RunConfig::LrSchedule s;
  EXPECT_EQ(scheduled_lr(s, 5, 0.1), 0.1);  // none
  s.type = "CyclicLR";
  EXPECT_EQ(scheduled_lr(s, 5, 0.1), 0.1);  // not one of DeepSpeed's
  s.type = "WarmupLR";
  s.warmup_min_lr = 0.001;
  s.warmup_max_lr = 0.011;
  s.warmup_num_steps = 1000;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0, 0.1), 0.001);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 9, 0.1), 0.001 + 0.01 / 3);  // log(10) / log(1000)
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1000, 0.1), 0.011);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 5000, 0.1), 0.011);
  s.warmup_type = "linear";
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 250, 0.1), 0.001 + 0.01 / 4);
  s.type = "WarmupDecayLR";
  s.total_num_steps = 2000;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1500, 0.1), 0.001 + 0.01 / 2);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 2000, 0.1), 0.001);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 2500, 0.1), 0.001);  // never below the minimum
  s.warmup_num_steps = 1;                               // DeepSpeed warms up over at least 2 steps
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1, 0.1), 0.001 + 0.01 / 2);
  // WarmupCosineLR: fractions of the optimizer's rate (0.1 here), from warmup_min_ratio up over the warm-up,
  // then (1 + cos(pi * (step - warmup + 1) / (total - warmup))) / 2 scaled into [cos_min_ratio, 1]; it stays
  // at cos_min_ratio after total_num_steps (DeepSpeed's cosine would rise again).
  RunConfig::LrSchedule c;
  c.type = "WarmupCosineLR";
  c.warmup_num_steps = 10;
  c.warmup_type = "linear";
  c.warmup_min_ratio = 0.2;
  c.cos_min_ratio = 0.1;
  c.total_num_steps = 110;
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 0, 0.1), 0.1 * 0.2);
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 5, 0.1), 0.1 * (0.2 + 0.8 * 0.5));
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 59, 0.1), 0.1 * (0.1 + 0.9 * 0.5));  // half-way: cos(pi / 2) = 0
  EXPECT_NEAR(scheduled_lr(c, 109, 0.1), 0.1 * 0.1, 1e-15);             // the end: cos(pi) = -1
  EXPECT_NEAR(scheduled_lr(c, 500, 0.1), 0.1 * 0.1, 1e-15);
  for (long step = 10; step < 109; ++step)
    EXPECT_LT(scheduled_lr(c, step + 1, 0.1), scheduled_lr(c, step, 0.1));
  // OneCycle, as DeepSpeed computes it at last_batch_iteration = step: up over 4 steps, down over 6 (b = step
  // + 1 into a cycle of 10), then divided by 1 + 0.5 x (steps after it) / 2; beta1 inversely between 0.9 and
  // 0.8, then times 1 + 0.1 x ...; beta2 0.99 while momentum cycles.
  RunConfig::LrSchedule o;
  o.type = "OneCycle";
  o.cycle_min_lr = 0.001;
  o.cycle_max_lr = 0.011;
  o.cycle_first_step_size = 4;
  o.cycle_second_step_size = 6;
  o.decay_step_size = 2;
  o.decay_lr_rate = 0.5;
  o.decay_mom_rate = 0.1;
  const std::pair<long, std::pair<double, double>> cases[] = {{0, {0.001 + 0.01 * 0.25, 0.9 - 0.1 * 0.25}},
                                                              {3, {0.011, 0.8}},
                                                              {6, {0.001 + 0.01 * 0.5, 0.85}},
                                                              {9, {0.001, 0.9}},
                                                              {10, {0.001 / 1.25, 0.9 * 1.05}},
                                                              {13, {0.001 / 2, 0.9 * 1.2}}};
  for (const auto& [step, want] : cases) {
    EXPECT_NEAR(scheduled_lr(o, step, 0.1), want.first, 1e-15) << "step " << step;
    const auto [b1, b2] = scheduled_betas(o, step, 0.95, 0.999);
    EXPECT_NEAR(b1, want.second, 1e-15) << "step " << step;
    EXPECT_EQ(b2, 0.99);
  }
  o.cycle_momentum = false;
  EXPECT_EQ(scheduled_betas(o, 3, 0.95, 0.999), std::make_pair(0.95, 0.999));
  o.decay_step_size = 0;  // no decay after the cycle
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 50, 0.1), 0.001);
  EXPECT_EQ(scheduled_betas(s, 3, 0.95, 0.999), std::make_pair(0.95, 0.999));  // other schedules keep them
  // LRRangeTest: min_lr x (1 + rate x (step + 1) / size), continuous or in stairs.
  RunConfig::LrSchedule range;
  range.type = "LRRangeTest";
  range.lr_range_test_min_lr = 0.001;
  range.lr_range_test_step_size = 4;
  range.lr_range_test_step_rate = 2;
  EXPECT_DOUBLE_EQ(scheduled_lr(range, 0, 0.1), 0.001 * (1 + 2 * 0.25));
  EXPECT_DOUBLE_EQ(scheduled_lr(range, 9, 0.1), 0.001 * (1 + 2 * 2.5));
  range.lr_range_test_staircase = true;
  EXPECT_DOUBLE_EQ(scheduled_lr(range, 0, 0.1), 0.001);
  EXPECT_DOUBLE_EQ(scheduled_lr(range, 9, 0.1), 0.001 * (1 + 2 * 2));
  // Read from a run file, defaults where params leave them out.
  Diagnostics diag;
  Result<RunConfig> run = parse_run(
      R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.002}}})", "runs/sched.json", diag);
  ASSERT_TRUE(run.is_ok()) << run.status().message();
  EXPECT_EQ(run->scheduler.type, "WarmupLR");
  EXPECT_EQ(run->scheduler.warmup_max_lr, 0.002);
  EXPECT_EQ(run->scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(run->scheduler.warmup_type, "log");
  Result<RunConfig> cosine = parse_run(
      R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 500, "cos_min_ratio": 0.05}}})",
      "runs/cosine.json", diag);
  ASSERT_TRUE(cosine.is_ok()) << cosine.status().message();
  EXPECT_EQ(cosine->scheduler.cos_min_ratio, 0.05);
  EXPECT_EQ(cosine->scheduler.warmup_min_ratio, 0);
  EXPECT_EQ(cosine->scheduler.total_num_steps, 500);
  Result<RunConfig> cycle = parse_run(
      R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.0001, "cycle_max_lr": 0.001, )"
      R"("cycle_first_step_size": 100, "cycle_second_step_size": null, "cycle_first_stair_count": 0}}})",
      "runs/cycle.json", diag);
  ASSERT_TRUE(cycle.is_ok()) << cycle.status().message();
  EXPECT_EQ(cycle->scheduler.cycle_first_step_size, 100);
  EXPECT_EQ(cycle->scheduler.cycle_second_step_size, 0);  // null: the first half's
  EXPECT_TRUE(cycle->scheduler.cycle_momentum);
  EXPECT_TRUE(diag.warnings.empty());
  // Another type's parameter is an unknown key for this one (and left as it was).
  Result<RunConfig> mixed = parse_run(
      R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.002, "cos_min_ratio": 0.5}}})",
      "runs/mixed.json", diag);
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().message();
  EXPECT_EQ(mixed->scheduler.cos_min_ratio, 0.0001);
  ASSERT_EQ(diag.warnings.size(), 1u);
  EXPECT_NE(diag.warnings[0].find("scheduler.params.cos_min_ratio"), std::string::npos) << diag.warnings[0];
}

// ---- bad input: every case names the file and key and says what is allowed ----

struct BadRun {
  const char* json;
  const char* key;      // must appear in the message
  const char* allowed;  // must appear in the message
};

class BadRunInput : public ::testing::TestWithParam<BadRun> {};

TEST_P(BadRunInput, IsRejectedWithFileKeyAndAllowedValues) {
  Diagnostics diag;
  Result<RunConfig> r = parse_run(GetParam().json, "runs/bad.json", diag);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("runs/bad.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find(GetParam().key), std::string::npos) << msg;
  EXPECT_NE(msg.find(GetParam().allowed), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadRunInput,
    ::testing::Values(
        BadRun{R"({"zero_optimization": {"stage": "three"}})", "zero_optimization.stage", "0..3"},
        BadRun{R"({"gradient_clipping": -1})", "gradient_clipping", "allowed: 0 to"},
        BadRun{R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001}}})",
               "scheduler.params.cycle_max_lr", "missing"},
        BadRun{R"({"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10}}})",
               "scheduler.params.total_num_steps", "cos_min_ratio"},
        BadRun{
            R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "cos_min_ratio": 2}}})",
            "scheduler.params.cos_min_ratio", "0 to 1"},
        BadRun{R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 0.1}}})",
               "scheduler.params.total_num_steps", "total optimizer steps"},
        BadRun{R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
               "scheduler.params.warmup_type", "log, linear"},
        BadRun{R"({"optimizer": {"type": "AdamW", "params": {"lr": "fast"}}})", "optimizer.params.lr",
               "allowed"},
        BadRun{R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})", "optimizer.params.betas",
               "[beta1, beta2], each in [0, 1)"},
        BadRun{R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})",
               "optimizer.params.betas", "each in [0, 1)"},
        BadRun{R"({"zero_optimization": {"stage": 5}})", "zero_optimization.stage", "0..3"},
        BadRun{R"({"train_micro_batch_size_per_gpu": -1})", "train_micro_batch_size_per_gpu", ">= 1"},
        BadRun{R"({"train_micro_batch_size_per_gpu": 2.5})", "train_micro_batch_size_per_gpu", "integer"},
        BadRun{R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
               "zero_optimization.offload_param.device", "stage 3"},
        BadRun{R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})",
               "zero_optimization.offload_optimizer.device", "\"cpu\""},
        BadRun{R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}}})",
               "zero_optimization.offload_param.device", "none, cpu, nvme"},
        BadRun{R"({"zero_optimization": {"stage": 3, "sub_group_size": -5}})", "sub_group_size", ">= 1"},
        BadRun{R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "bf16.enabled", "at most one"},
        BadRun{R"({"aio": {"block_size": 1000}})", "aio.block_size", "multiple of 512"},
        BadRun{R"({"aio": {"queue_depth": 0}})", "aio.queue_depth", "1..65536"},
        BadRun{R"({"memwall": {"partitioning": "scatter"}})", "memwall.partitioning", "bandwidth-centric"},
        BadRun{R"({"memwall": {"tiling_factor": 0}})", "memwall.tiling_factor", "1..4096"},
        BadRun{R"({"memwall": {"memory_order": "fifo"}})", "memwall.memory_order", "program"},
        BadRun{R"({"memwall": {"attention": "fused"}})", "memwall.attention", "unfused, flash"},
        BadRun{R"({"memwall": {"optimizer_gradients": "disk"}})", "memwall.optimizer_gradients",
               "auto, cpu, nvme"},
        BadRun{R"({"zero_optimization": [1, 2]})", "zero_optimization", "not an object"},
        BadRun{R"({"zero_optimization": {"stage": 3,)", "bad.json", "not valid JSON"}),
    [](const ::testing::TestParamInfo<BadRun>& param_info) {
      std::string name = std::to_string(param_info.index) + "_" + param_info.param.key;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(RunConfig, UnknownKeysWarnButDoNotFail) {
  Diagnostics diag;
  Result<RunConfig> r =
      parse_run(R"({"zero_optimization": {"stage": 3, "stage3_param_persitance_threshold": 1e5},
      "my_extension": 1})",
                "runs/x.json", diag);
  ASSERT_TRUE(r.is_ok());
  ASSERT_EQ(diag.warnings.size(), 2u);
  EXPECT_NE(diag.warnings[0].find("zero_optimization.stage3_param_persitance_threshold"), std::string::npos);
  EXPECT_NE(diag.warnings[1].find("my_extension"), std::string::npos);
}

TEST(HardwareSpec, BadValuesAreRejected) {
  struct Case {
    const char* patch;
    const char* key;
  };
  const Case cases[] = {
      {R"("gpu": {"count": 0, "memory_bytes": 1e9, "peak_flops": 1e12, "achievable_flops": 1e12, "hbm_Bps": 1e9})",
       "gpu.count"},
      {R"("gpu": {"count": 8, "memory_bytes": -1, "peak_flops": 1e12, "achievable_flops": 1e12, "hbm_Bps": 1e9})",
       "gpu.memory_bytes"},
      {R"("gpu": {"count": 8, "memory_bytes": 1e9, "peak_flops": 1e12, "achievable_flops": 2e12, "hbm_Bps": 1e9})",
       "gpu.achievable_flops"},
      {R"("gpu": {"count": 8, "memory_bytes": 1e9, "peak_flops": 1e12, "hbm_Bps": 1e9})",
       "gpu.achievable_flops"},
      {R"("gpu": {"count": 8, "memory_bytes": "lots", "peak_flops": 1e12, "achievable_flops": 1e12, "hbm_Bps": 1e9})",
       "gpu.memory_bytes"},
      {R"("gpu": {"count": 8, "memory_bytes": 1e9, "peak_flops": 1e12, "achievable_flops": 1e12, "hbm_Bps": 1e9,
                  "shares_host_cpu": "yes"})",
       "gpu.shares_host_cpu"},
      {R"("gpu": {"count": 8, "memory_bytes": 1e9, "peak_flops": 1e12, "achievable_flops": 1e12, "hbm_Bps": 1e9},
          "nvme": {"drives": 1, "drive_capacity_bytes": 1e12, "drive_read_Bps": 1e9, "drive_write_Bps": 1e9,
                   "host_cpu_s_per_byte": -1e-9})",
       "nvme.host_cpu_s_per_byte"},
  };
  for (const Case& c : cases) {
    const std::string text =
        std::string(R"({"format": "memwall-hardware", "version": 1, )") + c.patch +
        R"(, "cpu": {"memory_bytes": 1e11, "memory_Bps": 1e10}, "pcie": {"gpu_link_Bps": 1e10}})";
    Diagnostics diag;
    Result<HardwareSpec> r = parse_hardware(text, "hw.json", diag, nullptr);
    ASSERT_FALSE(r.is_ok()) << c.patch;
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status().message();
  }
}

// The host-contention keys calibrate writes survive a write and a read.
TEST(HardwareSpec, HostContentionKeysRoundTrip) {
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  EXPECT_FALSE(hw.gpu.shares_host_cpu);
  EXPECT_DOUBLE_EQ(hw.nvme.readwrite_Bps(),
                   hw.nvme.drives * std::max(hw.nvme.drive_read_Bps, hw.nvme.drive_write_Bps));
  hw.gpu.shares_host_cpu = true;
  hw.nvme.host_cpu_s_per_byte = 7e-10;
  hw.nvme.drive_readwrite_Bps = 5e9;
  Diagnostics diag;
  Result<HardwareSpec> back = parse_hardware(to_json_text(hw), "hw.json", diag, nullptr);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(back->gpu.shares_host_cpu);
  EXPECT_DOUBLE_EQ(back->nvme.host_cpu_s_per_byte, 7e-10);
  EXPECT_DOUBLE_EQ(back->nvme.readwrite_Bps(), back->nvme.drives * 5e9);
}

TEST(HardwareSpec, UnknownMajorVersionIsRejectedWithAHint) {
  Diagnostics diag;
  Result<HardwareSpec> r =
      parse_hardware(R"({"format": "memwall-hardware", "version": 2})", "hw.json", diag, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("version 1"), std::string::npos) << r.status().message();
}

TEST(HardwareSpec, MissingInheritedFileNamesIt) {
  Diagnostics diag;
  Result<HardwareSpec> r =
      parse_hardware(R"({"inherits": "nope.json"})", "dir/hw.json", diag, ReadFileFn(testing::read_file));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nope.json"), std::string::npos) << r.status().message();
}

TEST(ModelSpec, BadConfigsAreRejected) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 100, "n_head": 3, "vocab_size": 10})", "multiple"},
      {R"({"model_type": "bert", "num_hidden_layers": 2})", "bert"},
      {R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 10})", "n_layer"},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 10})",
       "key value head"},
      {R"({"hidden": 3})", "model_type"},
  };
  for (const auto& [text, needle] : cases) {
    Diagnostics diag;
    Result<ModelSpec> r = parse_model(text, "m/config.json", diag);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("m/config.json"), std::string::npos) << r.status().message();
  }
}

TEST(RunConfig, CrossFileInconsistenciesAreRejected) {
  const ModelSpec gpt2 = load_model_scenario("gpt2");  // 12 heads
  const HardwareSpec dgx2 = load_hardware_scenario("dgx2");
  HardwareSpec no_nvme = dgx2;
  no_nvme.nvme = {};
  struct Case {
    const char* json;
    const HardwareSpec* hw;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"memwall": {"model_parallel": 5}})", &dgx2, "model_parallel"},
      {R"({"memwall": {"data_parallel": 32}})", &dgx2, "more than the 16 GPUs"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})", &no_nvme, "no NVMe"},
      {R"({"train_batch_size": 7, "train_micro_batch_size_per_gpu": 1})", &dgx2, "train_batch_size"},
      {R"({"activation_checkpointing": {"interval": 13}})", &dgx2, "activation_checkpointing.interval"},
  };
  for (const Case& c : cases) {
    Diagnostics diag;
    Result<RunConfig> r = parse_run(c.json, "run.json", diag);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    RunConfig run = *r;
    Status s = resolve_run_config(run, gpt2, *c.hw);
    ASSERT_FALSE(s.is_ok()) << c.json;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
}

// ZeRO-Offload++'s Twin-Flow ratio: read where DeepSpeed takes it (a CPU optimizer in stage 3), refused with
// the key and what is allowed elsewhere, and with offloaded parameters (not modelled).
TEST(RunConfig, OffloadRatioNeedsAStage3CpuOptimizer) {
  Diagnostics diag;
  Result<RunConfig> ok = parse_run(
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})",
      "r.json", diag);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_DOUBLE_EQ(ok->zero.offload_optimizer.ratio, 0.3);
  const char* bad[] = {
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})",
      R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "ratio": 0.3}}})",
      R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})",
  };
  for (const char* json : bad) {
    Result<RunConfig> r = parse_run(json, "r.json", diag);
    ASSERT_FALSE(r.is_ok()) << json;
    EXPECT_NE(r.status().message().find("r.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("offload_optimizer.ratio"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("allowed"), std::string::npos) << r.status().message();
  }
}

// Every kind of file a user writes, damaged: each value (and each object) replaced by odd values of every
// JSON type, and bytes flipped, cut and repeated. Each parses or is one line naming the file, never an
// exception or a crash (scripts/sanitize.sh runs this under ASan and UBSan); a model that parses counts its
// parameters finitely and computes its rotary frequencies.
TEST(Specs, DamagedFilesNeverCrash) {
  const std::pair<const char*, const char*> files[] = {
      {"models", "llama-3.1-8b"}, {"models", "gpt2"},       {"models", "qwen2-0.5b"},
      {"models", "qwen3-0.6b"},   {"models", "mistral-7b"}, {"runs", "zero-infinity-nvme"},
      {"runs", "3d-parallel"},    {"runs", "train-gpt"},    {"hardware", "dgx2"},
      {"hardware", "dgx-h200"}};
  const nlohmann::json odd[] = {nullptr,
                                -1,
                                0,
                                1e300,
                                -1e300,
                                3.5,
                                9223372036854775807LL,
                                "x",
                                "",
                                true,
                                nlohmann::json::array(),
                                nlohmann::json::array({1, 2}),
                                nlohmann::json::object(),
                                nlohmann::json{{"a", 1}}};
  int parsed = 0, refused = 0;
  const auto parse = [&](const std::string& kind, const std::string& text) {
    Diagnostics diag;
    Status st = Status::ok();
    if (kind == "models") {
      auto m = parse_model(text, "damaged.json", diag);
      st = m.status();
      if (m.is_ok()) {
        EXPECT_TRUE(std::isfinite(m->total_params()));
        (void)m->param_tensors();
        (void)m->pretraining_positions();
        if (m->heads > 0 && m->rope_scaling.supported())
          (void)rope_inv_freq(m->head_dim(), m->rope_theta, m->rope_scaling);
      }
    } else if (kind == "runs") {
      st = parse_run(text, "damaged.json", diag).status();
    } else {
      st = parse_hardware(text, "damaged.json", diag, ReadFileFn(testing::read_file)).status();
    }
    if (st.is_ok()) {
      ++parsed;
    } else {
      ++refused;
      EXPECT_NE(st.message().find("damaged.json"), std::string::npos) << st.message();
      EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
    }
  };
  testing::XorShift next{0x2545F4914F6CDD1Dull};  // the same cases on every run
  for (const auto& [kind, name] : files) {
    SCOPED_TRACE(std::string(kind) + "/" + name);
    auto text = testing::read_file(testing::scenario_path(kind, name));
    ASSERT_TRUE(text.is_ok());
    const nlohmann::json doc = nlohmann::json::parse(*text);
    // Every value and every object in the file, each replaced by every odd value.
    std::vector<nlohmann::json::json_pointer> where;
    const nlohmann::json flat = doc.flatten();
    for (const auto& [path, value] : flat.items()) {
      (void)value;
      for (nlohmann::json::json_pointer p(path); !p.empty(); p = p.parent_pointer()) {
        if (std::find(where.begin(), where.end(), p) == where.end()) where.push_back(p);
      }
    }
    for (const auto& p : where) {
      for (const nlohmann::json& v : odd) {
        nlohmann::json bad = doc;
        bad[p] = v;
        EXPECT_NO_THROW(parse(kind, bad.dump())) << p.to_string() << " = " << v.dump();
      }
    }
    for (int k = 0; k < 200; ++k) {  // bytes
      std::string bad = *text;
      testing::damage_bytes(bad, next, bad.size(), 16);
      EXPECT_NO_THROW(parse(kind, bad)) << bad.substr(0, 200);
    }
  }
  std::printf("%d damaged spec files parsed, %d refused\n", parsed, refused);
  EXPECT_GT(refused, parsed / 4);
}

}  // namespace
}  // namespace memwall
