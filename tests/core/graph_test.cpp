// ModelGraph: op order, parameter counts, tiling equivalence, tensor parallelism.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "graph/model_graph.h"
#include "test_support.h"

namespace memwall {
namespace {

GraphOptions options(int tiling, int mp) {
  GraphOptions o;
  o.micro_batch = 2;
  o.sequence_length = 1024;
  o.tiling = tiling;
  o.model_parallel = mp;
  return o;
}

TEST(ModelGraph, GptOpsInExecutionOrder) {
  const ModelSpec m = testing::load_model_scenario("gpt2");
  const ModelGraph g = build_model_graph(m, options(1, 1));
  ASSERT_EQ(g.ops.size(), 1 + 12 * 8 + 3u);
  const char* block[] = {"L0.ln1", "L0.qkv", "L0.attn", "L0.proj", "L0.ln2", "L0.fc1", "L0.gelu", "L0.fc2"};
  EXPECT_EQ(g.ops[0].name, "embed");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(g.ops[1 + i].name, block[i]);
  EXPECT_TRUE(g.ops[1].block_start);
  EXPECT_EQ(g.ops[g.ops.size() - 3].name, "final_norm");
  EXPECT_EQ(g.ops[g.ops.size() - 2].name, "lm_head");
  EXPECT_EQ(g.ops.back().name, "loss");
  // The tied head gathers the embedding's parameter.
  EXPECT_EQ(g.ops[g.ops.size() - 2].params[0], g.ops[0].params[0]);
}

TEST(ModelGraph, ParameterCountMatchesTheModelSpec) {
  for (const char* name :
       {"gpt2", "gpt2-xl", "llama-2-7b", "llama-2-70b", "fig2a-1t", "qwen3-0.6b", "qwen3-8b", "mistral-7b",
        "gemma-7b", "phi-3-mini", "gemma-2-27b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b",
        "deepseek-v2-lite", "llama-4-scout", "llama-4-maverick", "qwen3-next-80b-a3b"}) {
    const ModelSpec m = testing::load_model_scenario(name);
    EXPECT_EQ(build_model_graph(m, options(1, 1)).total_param_elements(), m.total_params()) << name;
    EXPECT_EQ(build_model_graph(m, options(4, 1)).total_param_elements(), m.total_params()) << name;
    const GraphParamStats st = graph_param_stats(m, 4, 1, 1e5);
    EXPECT_EQ(st.total_elements, m.total_params()) << name;
  }
}

// Stage 3's persistence as DeepSpeed marks it: in parameter order, a tensor of at most the parameter
// threshold stays whole while the total stays within stage3_model_persistence_threshold (one that would pass
// it is partitioned, and later smaller ones may still fit). The analytic stats (one block standing for every
// one) give the full graph's persistent elements and partitioned tensors, for caps that bind partway through
// the blocks, bind at once or never.
TEST(ModelGraph, ModelPersistenceThresholdCapsThePersistentTotal) {
  // (And a mixture of experts in every other block of 7 after a dense first one, as Llama 4 Maverick
  // interleaves them: the stats' repeated unit is then a pair of blocks.)
  ModelSpec interleaved = testing::load_model_scenario("mixtral-8x7b");
  interleaved.name = "interleaved";
  interleaved.layers = 7;
  interleaved.dense_layers = 1;
  interleaved.moe_every = 2;
  std::vector<ModelSpec> models;
  for (const char* name : {"gpt2", "llama-2-7b", "mixtral-8x7b"})
    models.push_back(testing::load_model_scenario(name));
  models.push_back(interleaved);
  for (const ModelSpec& m : models) {
    SCOPED_TRACE(m.name);
    for (const int tiling : {1, 4}) {
      const ModelGraph g = build_model_graph(m, options(tiling, 1));
      const double small = graph_param_stats(m, tiling, 1, 1e5).persistent_elements;
      ASSERT_GT(small, 0);
      for (const double cap : {0.0, 3e4, small / 3, small - 1, small, 1e30}) {
        SCOPED_TRACE("tiling " + std::to_string(tiling) + ", cap " + std::to_string(cap));
        const std::vector<char> keep = persistent_params(g, 1e5, cap);
        ASSERT_EQ(keep.size(), g.params.size());
        double total = 0, partitioned_elements = 0;
        bool skipped_a_small_one = false;
        for (std::size_t i = 0; i < keep.size(); ++i) {
          const double n = g.params[i].elements;
          if (keep[i]) {
            EXPECT_LE(n, 1e5);
            total += n;
          } else {
            partitioned_elements += n;
            // Partitioned though small: only because it would have taken the total past the cap.
            if (n <= 1e5) {
              EXPECT_GT(total + n, cap) << g.params[i].name;
              skipped_a_small_one = true;
            }
          }
        }
        EXPECT_LE(total, cap);
        EXPECT_EQ(skipped_a_small_one, cap < small);
        const GraphParamStats st = graph_param_stats(m, tiling, 1, 1e5, cap);
        EXPECT_EQ(st.persistent_elements, total);
        double stats_partitioned = 0;
        for (const auto& [elements, copies] : st.partitioned_tensors) stats_partitioned += elements * copies;
        EXPECT_EQ(stats_partitioned, partitioned_elements);
        EXPECT_EQ(st.persistent_elements + stats_partitioned, st.total_elements);
      }
    }
  }
}

// DeepSeek's multi-token-prediction module (memwall.mtp): a last block with its input norms and eh_proj,
// then after the model's loss the module's norm, the shared head (the same parameter) and a second loss; the
// graph's parameters are the spec's, its FLOPs one block and one head pass more.
TEST(ModelGraph, MultiTokenPredictionAddsABlockAndASharedHeadPass) {
  ModelSpec m = testing::load_model_scenario("deepseek-v2-lite");
  m.mtp_in_file = 1;
  const ModelSpec mtp = with_mtp(m);
  const ModelGraph base = build_model_graph(m, options(1, 1)), g = build_model_graph(mtp, options(1, 1));
  EXPECT_EQ(g.total_param_elements(), mtp.total_params());
  EXPECT_EQ(graph_param_stats(mtp, 2, 1, 0).total_elements, mtp.total_params());
  const auto find = [&](const std::string& name) {
    for (const GraphOp& o : g.ops)
      if (o.name == name) return o;
    return GraphOp{};
  };
  EXPECT_EQ(find("L27.mtp_eh_proj").layer, 27);
  EXPECT_EQ(find("L26.mtp_eh_proj").name, "");
  const GraphOp head = find("lm_head"), mtp_head = find("mtp0.lm_head");
  ASSERT_EQ(mtp_head.name, "mtp0.lm_head");
  EXPECT_EQ(mtp_head.params, head.params);  // the shared head
  EXPECT_EQ(g.ops.back().name, "mtp0.loss");
  EXPECT_EQ(g.ops.back().kind, OpKind::kLoss);
  double block = 0;
  for (const GraphOp& o : base.ops) block += o.layer == 26 ? o.fwd_flops : 0;
  const double eh = 2 * 2048.0 * 2 * 2048 * 2048, extra = g.total_fwd_flops() - base.total_fwd_flops();
  EXPECT_NEAR(extra,
              block + eh + head.fwd_flops + find("loss").fwd_flops + find("mtp0.norm").fwd_flops +
                  find("L27.mtp_enorm").fwd_flops + find("L27.mtp_hnorm").fwd_flops,
              1e-6 * extra);
}

// Qwen3-Next's layers: three Gated DeltaNets (in_proj, the convolution, the delta rule, the gated norm,
// out_proj; no scores kept) to one softmax attention whose q_proj also gives the output gate (the gate op
// kept for o_proj). The delta rule's FLOPs per token and value head: 2 C (3 dk + 2 dv) + 6 dk dv + 2 C^2 / 3.
TEST(ModelGraph, Qwen3NextInterleavesGatedDeltaNetsWithGatedAttention) {
  const ModelSpec m = testing::load_model_scenario("qwen3-next-80b-a3b");
  const ModelGraph g = build_model_graph(m, options(1, 1));
  const double T = 2 * 1024;
  const auto op = [&](const std::string& name) {  // (a default op, named "", where there is none)
    for (const GraphOp& o : g.ops)
      if (o.name == name) return o;
    return GraphOp{};
  };
  const GraphOp delta = op("L0.deltanet");
  ASSERT_EQ(delta.name, "L0.deltanet");
  EXPECT_EQ(delta.kind, OpKind::kLinearAttention);
  EXPECT_DOUBLE_EQ(delta.fwd_flops,
                   T * 32 * (2 * 64 * (3 * 128 + 2 * 128) + 6 * 128 * 128 + 2 * 64 * 64 / 3.0));
  EXPECT_EQ(op("L0.attn").name, "");
  EXPECT_EQ(op("L0.conv1d").kind, OpKind::kConv);
  EXPECT_DOUBLE_EQ(op("L0.in_proj").fwd_flops, 2 * T * 2048 * (2 * 2048 + 2 * 4096 + 64));
  EXPECT_EQ(op("L3.deltanet").name, "");
  // (queries and their gate, keys and values)
  EXPECT_DOUBLE_EQ(op("L3.qkv").fwd_flops, 2 * T * 2048 * (2 * 16 * 256 + 2 * 2 * 256));
  EXPECT_GT(op("L3.gate").saved_bytes, 0);
  EXPECT_EQ(g.total_param_elements(), m.total_params());
}

// Qwen3-0.6B's heads of their own size: queries and the attention's output are 16 x 128 = 2048 channels over
// a hidden size of 1024, so q_proj is 2048 x 1024, o_proj 1024 x 2048 and the attention's FLOPs and bytes
// are twice a 1024-channel attention's; q_norm and k_norm are one op of 2 x 128 weights.
// A mixture of experts: after ln2 the router, then each expert's fc1 (gate and up), product and fc2, each
// expert gathering its own parameters and running on its share of the tokens (experts_per_token / experts
// with balanced routing): the block's MLP FLOPs are those of the active parameters, its saved activations
// each token's inner features in experts_per_token experts.
TEST(ModelGraph, MixtureOfExpertsRunsEachExpertOnItsShareOfTheTokens) {
  const ModelSpec m = testing::load_model_scenario("mixtral-8x7b");
  const ModelGraph g = build_model_graph(m, options(1, 1));
  const double T = 2 * 1024, hd = 4096, ffn = 14336;
  double expert_flops = 0, expert_saved = 0, router_flops = -1;
  int experts_seen = 0;
  for (const GraphOp& o : g.ops) {
    if (o.layer != 0) continue;
    if (o.name == "L0.router") router_flops = o.fwd_flops;
    if (o.name.rfind("L0.expert", 0) != 0) continue;
    if (o.kind == OpKind::kLinear) {
      expert_flops += o.fwd_flops;
      double elements = 0;
      for (int id : o.params) elements += g.params[static_cast<std::size_t>(id)].elements;
      EXPECT_EQ(elements, 2 * hd * ffn / (o.name.find(".fc1") != std::string::npos ? 1 : 2)) << o.name;
    }
    expert_saved += o.saved_bytes;
    if (o.name.find(".fc2") != std::string::npos) ++experts_seen;
  }
  EXPECT_EQ(experts_seen, 8);
  EXPECT_DOUBLE_EQ(router_flops, 2 * T * hd * 8);
  // 2 FLOPs per token and active expert parameter: 2 experts of 3 x hd x ffn.
  EXPECT_DOUBLE_EQ(expert_flops, 2 * T * 2 * 3 * hd * ffn);
  EXPECT_DOUBLE_EQ(expert_saved, 2.0 * T * 2 * (2 * ffn));  // gate and up of 2 experts per token, 2 B each
  // The analytic model's largest gathered op: one expert's gate and up (117M) are less than the untied
  // head (131M), not the whole layer's experts (940M).
  EXPECT_EQ(graph_param_stats(m, 1, 1, 1e5).largest_op_elements, std::max(2 * hd * ffn, 32000 * hd));
  ModelSpec small_vocab = m;
  small_vocab.vocab = 1000;
  EXPECT_EQ(graph_param_stats(small_vocab, 1, 1, 1e5).largest_op_elements, 2 * hd * ffn);
}

// Expert parallelism 4 on Mixtral's 8 experts: each rank runs 2 experts per layer, each on the tokens of the
// group's 4 ranks routed to it (4 x T x 2 / 8), so its expert FLOPs and saved activations are unchanged;
// an all-to-all of the rank's routed tokens (T x 2 x hidden, 2 B) brings them and another returns them.
TEST(ModelGraph, ExpertParallelismKeepsARanksShareOfTheExpertsAndExchangesTokens) {
  const ModelSpec m = testing::load_model_scenario("mixtral-8x7b");
  GraphOptions o = options(1, 1);
  const ModelGraph whole = build_model_graph(m, o);
  o.expert_parallel = 4;
  const ModelGraph g = build_model_graph(m, o);
  const double T = 2 * 1024, hd = 4096, ffn = 14336;
  const auto layer0 = [](const ModelGraph& graph, OpKind kind, const std::string& prefix) {
    std::vector<const GraphOp*> ops;
    for (const GraphOp& op : graph.ops) {
      if (op.layer == 0 && op.kind == kind && op.name.rfind(prefix, 0) == 0) ops.push_back(&op);
    }
    return ops;
  };
  double flops = 0, whole_flops = 0, saved = 0, whole_saved = 0;
  for (const GraphOp* op : layer0(g, OpKind::kLinear, "L0.expert")) {
    flops += op->fwd_flops;
    saved += op->saved_bytes;
    for (int id : op->params) EXPECT_EQ(g.params[static_cast<std::size_t>(id)].expert_parallel, 4);
  }
  for (const GraphOp* op : layer0(whole, OpKind::kLinear, "L0.expert")) {
    whole_flops += op->fwd_flops;
    whole_saved += op->saved_bytes;
  }
  EXPECT_EQ(layer0(g, OpKind::kLinear, "L0.expert").size(), 2 * 2u);  // 2 experts: fc1, fc2
  EXPECT_DOUBLE_EQ(flops, whole_flops);
  EXPECT_DOUBLE_EQ(flops, 2 * T * 2 * 3 * hd * ffn);
  EXPECT_DOUBLE_EQ(saved, whole_saved);
  const auto exchanges = layer0(g, OpKind::kAllToAll, "L0.");
  ASSERT_EQ(exchanges.size(), 2u);
  EXPECT_EQ(exchanges[0]->name, "L0.dispatch");
  EXPECT_EQ(exchanges[1]->name, "L0.combine");
  for (const GraphOp* x : exchanges) {
    EXPECT_EQ(x->group, 4);
    EXPECT_DOUBLE_EQ(x->out_bytes, 2.0 * T * 2 * hd);
  }
  EXPECT_TRUE(layer0(whole, OpKind::kAllToAll, "L0.").empty());
  // With imbalanced routing (memwall.expert_load 1.5) the busiest rank's experts run 1.5x the tokens and its
  // all-to-alls carry 1.5x the bytes; without expert parallelism the load changes nothing (the rank runs
  // every expert on its own tokens).
  GraphOptions busy = o;
  busy.expert_load = 1.5;
  const ModelGraph loaded = build_model_graph(m, busy);
  double loaded_flops = 0;
  for (const GraphOp* op : layer0(loaded, OpKind::kLinear, "L0.expert")) loaded_flops += op->fwd_flops;
  EXPECT_DOUBLE_EQ(loaded_flops, 1.5 * flops);
  for (const GraphOp* x : layer0(loaded, OpKind::kAllToAll, "L0."))
    EXPECT_DOUBLE_EQ(x->out_bytes, 1.5 * 2.0 * T * 2 * hd);
  GraphOptions single = options(1, 1);
  single.expert_load = 1.5;
  double single_flops = 0;
  const ModelGraph one = build_model_graph(m, single);
  for (const GraphOp* op : layer0(one, OpKind::kLinear, "L0.expert")) single_flops += op->fwd_flops;
  EXPECT_DOUBLE_EQ(single_flops, whole_flops);
  // The rank's parameters: the dense ones and a quarter of the routed experts'.
  EXPECT_DOUBLE_EQ(g.total_param_elements(), m.total_params() - 0.75 * m.routed_expert_params());
  for (const GraphParam& p : g.params) {
    EXPECT_EQ(p.expert_parallel, p.name.find(".expert") != std::string::npos ? 4 : 1) << p.name;
  }
}

TEST(ModelGraph, HeadsOfTheirOwnSizeWidenTheAttention) {
  const ModelSpec m = testing::load_model_scenario("qwen3-0.6b");
  ASSERT_EQ(m.q_width(), 2048);
  const ModelGraph g = build_model_graph(m, options(1, 1));
  const double T = 2 * 1024;
  std::map<std::string, double> params;
  for (const auto& p : g.params) {
    if (p.layer == 0) params[p.name] = p.elements;
  }
  EXPECT_EQ(params["L0.qkv.w0"], 2048.0 * 1024);
  EXPECT_EQ(params["L0.qkv.w1"], 2.0 * 1024 * 1024);
  EXPECT_EQ(params["L0.qk_norm.w"], 256.0);
  EXPECT_EQ(params["L0.proj.w"], 1024.0 * 2048);
  const auto attn =
      std::find_if(g.ops.begin(), g.ops.end(), [](const GraphOp& o) { return o.name == "L0.attn"; });
  ASSERT_NE(attn, g.ops.end());
  EXPECT_EQ(attn->fwd_flops, 4 * T * 1024 * 2048);
  EXPECT_EQ(attn->out_bytes, 2 * T * 2048);
}

TEST(ModelGraph, TilingKeepsFlopsAndBytesAndDividesTheLargestOp) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const ModelGraph g1 = build_model_graph(m, options(1, 1));
  for (int t : {2, 4, 16}) {
    const ModelGraph gt = build_model_graph(m, options(t, 1));
    EXPECT_NEAR(gt.total_fwd_flops(), g1.total_fwd_flops(), 1e-9 * g1.total_fwd_flops()) << t;
    EXPECT_NEAR(gt.total_bwd_flops(), g1.total_bwd_flops(), 1e-9 * g1.total_bwd_flops()) << t;
    double out1 = 0, outt = 0, saved1 = 0, savedt = 0;
    for (const auto& o : g1.ops) out1 += o.out_bytes, saved1 += o.saved_bytes;
    for (const auto& o : gt.ops) outt += o.out_bytes, savedt += o.saved_bytes;
    EXPECT_NEAR(outt, out1, 1e-9 * out1);
    EXPECT_NEAR(savedt, saved1, 1e-9 * saved1);
    EXPECT_EQ(gt.total_param_elements(), g1.total_param_elements());
    // The fc1 weight (4hd x hd) is the largest block tensor; tiles split it t ways.
    const double fc1 = 4.0 * m.hidden * m.hidden;
    EXPECT_EQ(graph_param_stats(m, t, 1, 0).largest_param_elements,
              std::max(fc1 / t, static_cast<double>(m.vocab) * m.hidden));
  }
}

TEST(ModelGraph, SavedActivationsPerBlockFollowEquationFive) {
  const ModelSpec m = testing::load_model_scenario("fig2a-1t");
  const ModelGraph g = build_model_graph(m, options(1, 1));
  double saved = 0;
  for (const auto& o : g.ops) {
    if (o.layer == 0) saved += o.saved_bytes;
  }
  const double tokens = 2 * 1024;
  EXPECT_DOUBLE_EQ(saved, tokens * (16.0 * m.hidden + 2.0 * m.heads * 1024));
}

// Gemma 2's: two more norm ops a layer (the attention's and the MLP's outputs, one weight each); soft-capped
// scores make the unfused backward recompute QK^T (2.5 x the forward's FLOPs, not 2) and move the scores
// twice more; capped logits add a pass over them each way. The flash attention's traffic is unchanged (its
// tiles are capped on chip); a window on every other layer only.
TEST(ModelGraph, Gemma2AddsOutputNormsAndSoftCapping) {
  const ModelSpec m = testing::load_model_scenario("gemma-2-2b");
  ModelSpec plain = m;
  plain.attn_softcap = plain.final_softcap = 0;
  const ModelGraph g = build_model_graph(m, options(1, 1)), p = build_model_graph(plain, options(1, 1));
  ASSERT_EQ(g.ops.size(), p.ops.size());
  int norms = 0, attentions = 0;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const GraphOp &o = g.ops[i], &u = p.ops[i];
    if (o.name.find("_post") != std::string::npos) ++norms;
    if (o.kind == OpKind::kAttention) {
      ++attentions;
      const double T = 2.0 * 1024, S = 2 * T * m.heads * 1024;  // bf16 scores of micro-batch 2 x 1024
      EXPECT_DOUBLE_EQ(o.bwd_flops, 2.5 * o.fwd_flops) << o.name;
      EXPECT_DOUBLE_EQ(u.bwd_flops, 2 * u.fwd_flops) << o.name;
      EXPECT_GT(o.bwd_mem_bytes - u.bwd_mem_bytes, 2 * S) << o.name;
    } else if (o.kind == OpKind::kLoss) {
      EXPECT_GT(o.fwd_mem_bytes, u.fwd_mem_bytes);
    } else {
      EXPECT_EQ(o.bwd_mem_bytes, u.bwd_mem_bytes) << o.name;
    }
  }
  EXPECT_EQ(norms, 2 * m.layers);
  EXPECT_EQ(attentions, m.layers);
  GraphOptions fo = options(1, 1);
  fo.flash_attention = true;
  fo.sequence_length = 8192;  // twice the window
  const ModelGraph f = build_model_graph(m, fo), fp = build_model_graph(plain, fo);
  std::vector<double> fraction;
  for (std::size_t i = 0; i < f.ops.size(); ++i) {
    if (f.ops[i].kind != OpKind::kAttention) continue;
    EXPECT_EQ(f.ops[i].bwd_mem_bytes, fp.ops[i].bwd_mem_bytes);
    fraction.push_back(f.ops[i].exec_fraction);
  }
  // Layer 0 attends over a window of 4096 of the 8192 positions, layer 1 over all (causal: about half).
  ASSERT_GE(fraction.size(), 2u);
  EXPECT_LT(fraction[0], 0.45);
  EXPECT_NEAR(fraction[1], 0.5, 0.01);
}

// Fused (flash) attention: the same forward FLOPs, backward recomputing QK^T; it keeps the output and an
// fp32 log-sum-exp per row and head instead of the probabilities, and moves Q, K, V, O (and their gradients
// and dO in backward) but no scores. Only the attention op changes.
TEST(ModelGraph, FlashAttentionSavesNoProbabilitiesAndMovesNoScores) {
  const ModelSpec m = testing::load_model_scenario("gpt2");
  GraphOptions fo = options(1, 1);
  fo.flash_attention = true;
  const ModelGraph g = build_model_graph(m, options(1, 1)), f = build_model_graph(m, fo);
  ASSERT_EQ(g.ops.size(), f.ops.size());
  const double T = 2 * 1024, C = m.hidden, b = 2;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const GraphOp &u = g.ops[i], &o = f.ops[i];
    if (o.kind != OpKind::kAttention) {
      EXPECT_EQ(o.saved_bytes, u.saved_bytes) << o.name;
      EXPECT_EQ(o.fwd_mem_bytes, u.fwd_mem_bytes) << o.name;
      EXPECT_EQ(o.bwd_flops, u.bwd_flops) << o.name;
      EXPECT_EQ(o.exec_fraction, 1) << o.name;
      continue;
    }
    EXPECT_EQ(o.fwd_flops, u.fwd_flops);
    EXPECT_DOUBLE_EQ(o.bwd_flops, 2.5 * o.fwd_flops);
    // Causal tiles of 128 keys: 8 per sequence of 1024, query tile i computing i + 1 of them.
    EXPECT_DOUBLE_EQ(o.exec_fraction, 9.0 / 16);
    EXPECT_EQ(u.exec_fraction, 1);
    EXPECT_DOUBLE_EQ(o.saved_bytes, b * T * C + 4.0 * T * m.heads);
    EXPECT_DOUBLE_EQ(o.fwd_mem_bytes, b * 4 * T * C);
    EXPECT_DOUBLE_EQ(o.bwd_mem_bytes, b * 8 * T * C);
    EXPECT_LT(o.saved_bytes * 16, u.saved_bytes);  // at 1024 tokens the probabilities are 94% of it
  }
  // GPT-2's attention is memory-bound on a V100 unfused, compute-bound fused.
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  for (const auto& o : f.ops) {
    if (o.kind == OpKind::kAttention) {
      EXPECT_LT(o.fwd_mem_bytes / hw.gpu.hbm_Bps, o.fwd_flops * o.exec_fraction / hw.gpu.achievable_flops)
          << o.name;
    }
  }
}

// A sliding window (Mistral 7B's 4096 at 32768 positions) leaves fused attention the key tiles each query
// tile sees: of 256 tiles of 128, query tile i computes min(i + 1, 33) (32 tiles of window plus the one its
// first row's first key falls in), 7920 of 65536; unfused attention computes every score. Qwen2's window
// from layer 1 on leaves layer 0 causal.
TEST(ModelGraph, FlashAttentionSkipsTheTilesOutsideASlidingWindow) {
  ModelSpec m = testing::load_model_scenario("gpt2");
  m.layers = 2;
  m.sliding_window = 4096;
  GraphOptions fo = options(1, 1);
  fo.sequence_length = 32768;
  fo.flash_attention = true;
  std::vector<double> fractions;
  for (const auto& o : build_model_graph(m, fo).ops) {
    if (o.kind == OpKind::kAttention) fractions.push_back(o.exec_fraction);
  }
  EXPECT_EQ(fractions, (std::vector<double>{7920.0 / 65536, 7920.0 / 65536}));
  m.first_window_layer = 1;
  fractions.clear();
  for (const auto& o : build_model_graph(m, fo).ops) {
    if (o.kind == OpKind::kAttention) fractions.push_back(o.exec_fraction);
  }
  EXPECT_EQ(fractions, (std::vector<double>{257.0 / 512, 7920.0 / 65536}));
  fo.flash_attention = false;
  for (const auto& o : build_model_graph(m, fo).ops) {
    if (o.kind == OpKind::kAttention) {
      EXPECT_EQ(o.exec_fraction, 1) << o.name;
    }
  }
}

// Llama 4's chunks of 8192 at 32768 positions: of 256 tiles of 128, each of the 4 chunks' 64 query tiles
// computes the tiles of its chunk up to its own, 4 x 64 x 65 / 2 = 8320 of 65536, on the rotary layers; every
// fourth layer (no rotary turn) attends over all keys, causal: 257 / 512. At 8192 positions the chunk is the
// whole sequence; unfused attention computes every score. The shipped file reads attention_chunk_size.
TEST(ModelGraph, FlashAttentionComputesLlama4sChunksOnly) {
  ModelSpec m = testing::load_model_scenario("llama-4-scout");
  EXPECT_EQ(m.attention_chunk, 8192);
  m.layers = 4;
  m.experts = 0;  // (the attention alone matters here)
  m.shared_expert_ffn = 0;
  m.moe_every = 1;
  GraphOptions fo = options(1, 1);
  fo.sequence_length = 32768;
  fo.flash_attention = true;
  const auto fractions = [&] {
    std::vector<double> f;
    for (const auto& o : build_model_graph(m, fo).ops) {
      if (o.kind == OpKind::kAttention) f.push_back(o.exec_fraction);
    }
    return f;
  };
  const double chunked = 8320.0 / 65536, causal = 257.0 / 512;
  EXPECT_EQ(fractions(), (std::vector<double>{chunked, chunked, chunked, causal}));
  fo.sequence_length = 8192;
  EXPECT_EQ(fractions(), (std::vector<double>(4, 65.0 / 128)));
  fo.flash_attention = false;
  EXPECT_EQ(fractions(), (std::vector<double>(4, 1.0)));
}

// Each op's device memory traffic (the roofline's bytes), counted by hand for GPT-2 small: 2 x 1024 tokens,
// 16-bit activations, hidden 768, 12 heads, vocabulary 50257.
TEST(ModelGraph, OpsCountTheDeviceMemoryTheyReadAndWrite) {
  const ModelSpec m = testing::load_model_scenario("gpt2");
  const ModelGraph g = build_model_graph(m, options(1, 1));
  const double T = 2 * 1024, C = m.hidden, b = 2, S = T * m.heads * 1024, V = m.vocab;
  auto op = [&](const std::string& name) -> const GraphOp& {
    for (const auto& o : g.ops) {
      if (o.name == name) return o;
    }
    ADD_FAILURE() << name;
    return g.ops[0];
  };
  // Token and position rows read, their sum written; backward adds the gradient into both tables.
  EXPECT_DOUBLE_EQ(op("embed").fwd_mem_bytes, b * 3 * T * C);
  EXPECT_DOUBLE_EQ(op("embed").bwd_mem_bytes, b * 5 * T * C);
  // Layernorm: x read, y written, weight and bias read; backward reads dy and x, writes dx and dw, db.
  EXPECT_DOUBLE_EQ(op("L0.ln1").fwd_mem_bytes, b * (2 * T * C + 2 * C));
  EXPECT_DOUBLE_EQ(op("L0.ln1").bwd_mem_bytes, b * (3 * T * C + 4 * C));
  EXPECT_DOUBLE_EQ(op("L0.gelu").fwd_mem_bytes, b * 2 * T * 4 * C);
  EXPECT_DOUBLE_EQ(op("L0.gelu").bwd_mem_bytes, b * 3 * T * 4 * C);
  // fc1: x (T x C) and W (C x 4C) read, y (T x 4C) written; backward twice that.
  EXPECT_DOUBLE_EQ(op("L0.fc1").fwd_mem_bytes, b * (T * C + C * 4 * C + T * 4 * C));
  EXPECT_DOUBLE_EQ(op("L0.fc1").bwd_mem_bytes, 2 * op("L0.fc1").fwd_mem_bytes);
  // Attention: scores written and read, probabilities written and read; Q, K, V read and the output written.
  EXPECT_DOUBLE_EQ(op("L0.attn").fwd_mem_bytes, b * (4 * S + 4 * T * C));
  EXPECT_DOUBLE_EQ(op("L0.attn").bwd_mem_bytes, b * (7 * S + 8 * T * C));
  EXPECT_DOUBLE_EQ(op("loss").fwd_mem_bytes, b * 2 * T * V);
  EXPECT_DOUBLE_EQ(op("loss").bwd_mem_bytes, (b + 4) * T * V);
  // On a V100 (70 TFLOP/s, 900 GB/s) the elementwise ops and attention are memory-bound, the GEMMs are not.
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  for (const auto& o : g.ops) {
    const bool memory_bound = o.fwd_mem_bytes / hw.gpu.hbm_Bps > o.fwd_flops / hw.gpu.achievable_flops;
    const bool expected = o.kind != OpKind::kLinear;
    EXPECT_EQ(memory_bound, expected) << o.name;
  }
  // Tiling splits the GEMMs' weights and outputs, each tile reading the whole input: more bytes in all.
  const ModelGraph g4 = build_model_graph(m, options(4, 1));
  double b1 = 0, b4 = 0;
  for (const auto& o : g.ops) b1 += o.fwd_mem_bytes;
  for (const auto& o : g4.ops) b4 += o.fwd_mem_bytes;
  EXPECT_GT(b4, b1);
}

TEST(ModelGraph, ModelParallelShardsLinearsAndAddsAllReduces) {
  const ModelSpec m = testing::load_model_scenario("gpt3-175b");
  const ModelGraph g1 = build_model_graph(m, options(1, 1));
  const ModelGraph g4 = build_model_graph(m, options(1, 4));
  int allreduces = 0;
  for (const auto& o : g4.ops) allreduces += o.kind == OpKind::kAllReduce;
  EXPECT_EQ(allreduces, 2 * m.layers);
  // Linear FLOPs split four ways; parameters nearly so (norms and positions stay replicated).
  EXPECT_NEAR(g4.total_fwd_flops() / g1.total_fwd_flops(), 0.25, 0.01);
  EXPECT_NEAR(g4.total_param_elements() / g1.total_param_elements(), 0.25, 0.01);
}

}  // namespace
}  // namespace memwall
