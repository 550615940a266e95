// Memory model: the paper's Figure 2a reproduced through the full model, ZeRO stage accounting, tiling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/units.h"
#include "graph/model_graph.h"
#include "memory/memory_model.h"
#include "memory/paper_equations.h"
#include "plan/planner.h"
#include "test_support.h"

namespace memwall {
namespace {

using testing::load_model_scenario;
using testing::simple_hardware;

// A resolved run of one rank (dp = mp = 1) with fp16 mixed precision and Adam.
RunConfig one_rank_run(int stage, double micro_batch, bool checkpointing, const ModelSpec& m,
                       const HardwareSpec& hw) {
  RunConfig run;
  run.name = "test";
  run.precision = Precision::kFp16;
  run.zero.stage = stage;
  run.micro_batch_per_gpu = {false, micro_batch};
  run.activation_checkpointing.enabled = checkpointing;
  run.activation_checkpointing.interval = 1;
  run.memwall.data_parallel = 1;
  Status s = resolve_run_config(run, m, hw);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return run;
}

double model_state_bytes(const MemoryEstimate& e, Tier t) {
  double sum = 0;
  for (MemCategory c :
       {MemCategory::kParams16, MemCategory::kGrads16, MemCategory::kMasterParams32, MemCategory::kMomentum32,
        MemCategory::kVariance32, MemCategory::kGrads32, MemCategory::kPersistentParams}) {
    sum += e.bytes(t, c);
  }
  return sum;
}

struct Fig2aRow {
  const char* model;
  double model_states_tb;  // TB per model (2^40)
  double act_tb;           // TB per node, no checkpointing, 64 sequences per node
  double ckpt_tb;          // TB per node, ci = 1, 32 sequences per node
  double mswm_gb;          // GB per GPU (2^30)
  double awm_gb;           // GB per GPU, 4 sequences per GPU
};

// Figure 2a as printed (reference/zero-infinity.md §1.3). The 0.10T MSWM cell prints 1.95; Eq. (4)
// gives 16 hd^2 = 1.5625 GiB for hd = 10K, as for every other row, so memwall asserts 1.56 there
// (docs/memory-model.md explains the anomaly).
const Fig2aRow kFig2a[] = {
    {"fig2a-0.1t", 1.83, 2.03, 0.05, 1.56, 1.63},        {"fig2a-0.5t", 9.16, 3.91, 0.12, 6.25, 2.50},
    {"fig2a-1t", 18.31, 7.13, 0.20, 9.77, 3.56},         {"fig2a-10t", 182.81, 24.38, 0.76, 64.00, 8.00},
    {"fig2a-100t", 1845.70, 88.59, 3.08, 400.00, 18.00},
};

// Printed values have two decimals: equal within half a unit of the last digit.
void expect_printed(double value, double printed, const char* what, const char* model) {
  EXPECT_LE(std::fabs(value - printed), 0.005 + 1e-9) << model << " " << what << ": " << value;
}

TEST(MemoryModel, ReproducesFigure2a) {
  const HardwareSpec hw = simple_hardware(1, 1e15);
  for (const Fig2aRow& row : kFig2a) {
    const ModelSpec m = load_model_scenario(row.model);
    // Model states: 20 bytes per parameter (stage 0, everything on the one GPU).
    const MemoryEstimate states = estimate_memory(m, one_rank_run(0, 1, true, m, hw), hw);
    expect_printed(model_state_bytes(states, Tier::kGpu) / kTiB, row.model_states_tb, "model states",
                   row.model);
    // Full activations for a node's 64 sequences, no checkpointing.
    const MemoryEstimate act = estimate_memory(m, one_rank_run(0, 64, false, m, hw), hw);
    expect_printed(act.bytes(Tier::kGpu, MemCategory::kActivations) / kTiB, row.act_tb, "activations",
                   row.model);
    // Checkpoints for a node's 32 sequences, ci = 1.
    const MemoryEstimate ckpt = estimate_memory(m, one_rank_run(0, 32, true, m, hw), hw);
    expect_printed(ckpt.bytes(Tier::kGpu, MemCategory::kActivationCheckpoints) / kTiB, row.ckpt_tb,
                   "checkpoints", row.model);
    // Working memory per GPU: stage 3 gathers the largest operator; 4 sequences per GPU recomputed.
    const MemoryEstimate work = estimate_memory(m, one_rank_run(3, 4, true, m, hw), hw);
    expect_printed(work.bytes(Tier::kGpu, MemCategory::kModelStateWorking) / kGiB, row.mswm_gb, "MSWM",
                   row.model);
    expect_printed(work.bytes(Tier::kGpu, MemCategory::kActivationWorking) / kGiB, row.awm_gb, "AWM",
                   row.model);
  }
}

TEST(MemoryModel, PaperAnomalyIsNotEquationFour) {
  // The printed 1.95 GB for the 0.10T row is not 16 hd^2 for hd = 10K; it would be hd = 11.4K.
  EXPECT_NEAR(paper::eq4_mswm_bytes(10240) / kGiB, 1.5625, 1e-12);
  EXPECT_GT(std::fabs(paper::eq4_mswm_bytes(10240) / kGiB - 1.95), 0.3);
}

TEST(MemoryModel, EveryStageKeepsTwentyBytesPerParameterInTotal) {
  const ModelSpec m = load_model_scenario("gpt2-xl");
  const HardwareSpec hw = simple_hardware(8, 1e15);
  for (int stage = 0; stage <= 3; ++stage) {
    RunConfig run;
    run.precision = Precision::kBf16;
    run.zero.stage = stage;
    run.zero.param_persistence_threshold = {false, 0};
    ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
    const MemoryEstimate e = estimate_memory(m, run, hw);
    const double P = m.total_params();
    const double per_rank = model_state_bytes(e, Tier::kGpu);
    // Stage 0: 20P per rank; stage 1: 4P + 16P/8; stage 2: 2P + 18P/8; stage 3: 20P/8.
    const double expected[] = {20 * P, 4 * P + 16 * P / 8, 2 * P + 18 * P / 8, 20 * P / 8};
    EXPECT_NEAR(per_rank / expected[stage], 1.0, 1e-12) << "stage " << stage;
  }
}

// Pipeline stages (predict only): each of pp stages holds 1/pp of the model states, and (1F1B keeping pp
// micro-batches in flight on the first stage, each with nl/pp layers) a whole micro-batch's checkpoints.
TEST(MemoryModel, PipelineStagesDivideTheModelStatesNotTheCheckpoints) {
  const ModelSpec m = load_model_scenario("gpt2-xl");
  const HardwareSpec hw = simple_hardware(8, 1e15);
  RunConfig one;
  one.precision = Precision::kBf16;
  one.zero.stage = 1;
  one.memwall.data_parallel = 2;
  one.zero.param_persistence_threshold = {false, 0};
  RunConfig four = one;
  four.memwall.pipeline_parallel = 4;
  ASSERT_TRUE(resolve_run_config(one, m, hw).is_ok());
  ASSERT_TRUE(resolve_run_config(four, m, hw).is_ok());
  const MemoryEstimate a = estimate_memory(m, one, hw), b = estimate_memory(m, four, hw);
  EXPECT_EQ(a.ranks, 2);
  EXPECT_EQ(b.ranks, 8);
  EXPECT_NEAR(model_state_bytes(a, Tier::kGpu) / model_state_bytes(b, Tier::kGpu), 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(a.bytes(Tier::kGpu, MemCategory::kActivationCheckpoints),
                   b.bytes(Tier::kGpu, MemCategory::kActivationCheckpoints));
  // The data-parallel degree left by default, and what does not fit.
  RunConfig rest = four;
  rest.memwall.data_parallel = 0;
  ASSERT_TRUE(resolve_run_config(rest, m, hw).is_ok());
  EXPECT_EQ(rest.memwall.data_parallel, 2);
  RunConfig too_many = four;
  too_many.memwall.pipeline_parallel = 16;
  const Status s = resolve_run_config(too_many, m, hw);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("memwall.pipeline_parallel"), std::string::npos) << s.message();
  // memwall's schedule has no stages: planning refuses, naming the key.
  auto planned = plan_iteration(m, four, hw);
  ASSERT_FALSE(planned.is_ok());
  EXPECT_NE(planned.status().message().find("memwall.pipeline_parallel"), std::string::npos);
}

TEST(MemoryModel, OffloadMovesStatesOffTheGpuAndMatchesDeepSpeedsEstimatorCore) {
  // DeepSpeed's ZeRO-3 estimator (offload param and optimizer to cpu, zero_init) puts 18 B/param x
  // gpus_per_node / total_gpus per node on the CPU, before its 1.5x buffer factor.
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2-4n");
  const ModelSpec m = load_model_scenario("paper-100b");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const MemoryEstimate e = estimate_memory(m, run, hw);
  const double P = m.total_params();
  double cpu_states = 0;
  for (MemCategory c : {MemCategory::kParams16, MemCategory::kMasterParams32, MemCategory::kMomentum32,
                        MemCategory::kVariance32, MemCategory::kGrads32}) {
    cpu_states += e.bytes(Tier::kCpu, c);
  }
  const double persistent = e.bytes(Tier::kGpu, MemCategory::kPersistentParams) / 4;  // elements (2 B + 2 B)
  EXPECT_NEAR(cpu_states * e.ranks_per_node, (18 * P - 2 * persistent) * 16 / 64, 1e-6 * P);
  EXPECT_EQ(e.bytes(Tier::kGpu, MemCategory::kMasterParams32), 0);
  EXPECT_EQ(e.bytes(Tier::kGpu, MemCategory::kGrads16), 0);
}

TEST(MemoryModel, TilingDividesModelStateWorkingMemory) {
  const ModelSpec m = load_model_scenario("fig2a-10t");
  const HardwareSpec hw = simple_hardware(1, 1e15);
  RunConfig run = one_rank_run(3, 1, true, m, hw);
  const double untiled = estimate_memory(m, run, hw).bytes(Tier::kGpu, MemCategory::kModelStateWorking);
  run.memwall.tiling_factor = 16;
  const double tiled = estimate_memory(m, run, hw).bytes(Tier::kGpu, MemCategory::kModelStateWorking);
  EXPECT_DOUBLE_EQ(untiled / tiled, 16.0);
}

TEST(MemoryModel, CheckpointOffloadAndIntervalFollowEquationsThreeAndFive) {
  const ModelSpec m = load_model_scenario("paper-1t");
  const HardwareSpec hw = simple_hardware(1, 1e15);
  RunConfig run = one_rank_run(3, 2, true, m, hw);
  run.activation_checkpointing.interval = 4;
  run.activation_checkpointing.cpu_checkpointing = true;
  const MemoryEstimate e = estimate_memory(m, run, hw);
  EXPECT_EQ(e.bytes(Tier::kGpu, MemCategory::kActivationCheckpoints), 0);
  EXPECT_DOUBLE_EQ(e.bytes(Tier::kCpu, MemCategory::kActivationCheckpoints),
                   paper::eq3_checkpoint_bytes(2, 1024, m.hidden, m.layers, 4));
  EXPECT_DOUBLE_EQ(e.bytes(Tier::kGpu, MemCategory::kActivationWorking),
                   paper::eq5_awm_bytes(2, 1024, 4, m.hidden, m.heads));
}

// Eq. (5) is what one block keeps for its backward, as the planner's graph saves it: for GPT 16 hd bytes per
// token plus the probabilities; for Llama 2's gated MLP (gate and up) and 70B's grouped-query attention
// (K and V of 8 of 64 heads) the same tensors in their shapes, with and without flash attention; for
// DeepSeek's latent attention Q, K, V, the output and the latents.
TEST(MemoryModel, ActivationWorkingMemoryIsWhatTheGraphSavesPerBlock) {
  const HardwareSpec hw = simple_hardware(1, 1e15);
  for (const char* name :
       {"paper-1t", "gpt2", "llama-2-7b", "llama-2-70b", "mixtral-8x7b", "qwen1.5-moe-a2.7b",
        "deepseek-v2-lite", "deepseek-v3", "llama-4-maverick", "qwen3-next-80b-a3b"}) {
    for (const bool flash : {false, true}) {
      const ModelSpec m = load_model_scenario(name);
      RunConfig run = one_rank_run(3, 2, true, m, hw);
      if (flash) run.memwall.attention = AttentionKernel::kFlash;
      const MemoryEstimate e = estimate_memory(m, run, hw);
      GraphOptions o;
      o.micro_batch = 2;
      o.sequence_length = run.memwall.sequence_length;
      o.flash_attention = flash;
      const ModelGraph g = build_model_graph(m, o);
      // (DeepSeek's dense first blocks, Llama 4 Maverick's between, Qwen3-Next's linear-attention layers: the
      // largest block's.)
      std::vector<double> per_layer(static_cast<std::size_t>(m.layers));
      for (const GraphOp& op : g.ops) {
        if (op.layer >= 0 && op.layer < m.layers)
          per_layer[static_cast<std::size_t>(op.layer)] += op.saved_bytes;
      }
      const double saved = *std::max_element(per_layer.begin(), per_layer.end());
      EXPECT_NEAR(e.bytes(Tier::kGpu, MemCategory::kActivationWorking), saved, 1e-9 * saved)
          << name << (flash ? " flash" : "");
    }
  }
  // Llama 2 70B keeps 2 x (2 x 8192 + 2 x 1024 + 2 x 28672) bytes per token and block besides the
  // probabilities: 1.16 x GPT's 16 hd.
  const ModelSpec m = load_model_scenario("llama-2-70b");
  RunConfig run = one_rank_run(3, 1, true, m, hw);
  run.memwall.attention = AttentionKernel::kFlash;
  const double per_token = estimate_memory(m, run, hw).bytes(Tier::kGpu, MemCategory::kActivationWorking) /
                               run.memwall.sequence_length -
                           4.0 * m.heads;
  EXPECT_DOUBLE_EQ(per_token, 2.0 * (2 * 8192 + 2 * 1024 + 2 * 28672));
}

// memwall.attention "flash": Eq. (5)'s 2 heads x seq bytes of probabilities per token become an fp32
// log-sum-exp per head; nothing else moves.
TEST(MemoryModel, FlashAttentionReplacesTheProbabilitiesInEquationFive) {
  const ModelSpec m = load_model_scenario("paper-1t");
  const HardwareSpec hw = simple_hardware(1, 1e15);
  RunConfig run = one_rank_run(3, 2, true, m, hw);
  run.activation_checkpointing.interval = 4;
  const MemoryEstimate unfused = estimate_memory(m, run, hw);
  run.memwall.attention = AttentionKernel::kFlash;
  const MemoryEstimate flash = estimate_memory(m, run, hw);
  EXPECT_DOUBLE_EQ(flash.bytes(Tier::kGpu, MemCategory::kActivationWorking),
                   paper::eq5_awm_bytes(2, 1024, 4, m.hidden, 0) + 2 * 1024 * 4 * 4.0 * m.heads);
  EXPECT_DOUBLE_EQ(unfused.bytes(Tier::kGpu, MemCategory::kActivationWorking) -
                       flash.bytes(Tier::kGpu, MemCategory::kActivationWorking),
                   2 * 1024 * 4 * (2.0 * m.heads * 1024 - 4.0 * m.heads));
  EXPECT_EQ(flash.bytes(Tier::kGpu, MemCategory::kActivationCheckpoints),
            unfused.bytes(Tier::kGpu, MemCategory::kActivationCheckpoints));
  EXPECT_EQ(flash.bytes(Tier::kGpu, MemCategory::kLogits), unfused.bytes(Tier::kGpu, MemCategory::kLogits));
}

TEST(MemoryModel, NvmeOffloadPlacesStatesOnNvmeAndPinnedBuffersOnCpu) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = load_model_scenario("paper-1t");
  RunConfig run = testing::load_run_scenario("zero-infinity-nvme");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const MemoryEstimate e = estimate_memory(m, run, hw);
  const double shard = m.total_params() / 16;
  EXPECT_DOUBLE_EQ(e.bytes(Tier::kNvme, MemCategory::kMomentum32), 4 * shard);
  EXPECT_DOUBLE_EQ(e.bytes(Tier::kNvme, MemCategory::kGrads32), 4 * shard);
  // buffer_count 5 x buffer_size 1e8 x 2 B (params) + 4 x 1e8 x 4 B + 1e8 x 2 B (optimizer, no pipelining).
  EXPECT_DOUBLE_EQ(e.bytes(Tier::kCpu, MemCategory::kPinnedSwapBuffers), 5 * 1e8 * 2 + 4 * 1e8 * 4 + 1e8 * 2);
  EXPECT_TRUE(e.fits);
  EXPECT_EQ(e.limiting_tier, Tier::kNvme);
  // Node totals are per-rank bytes times 16 ranks.
  EXPECT_NEAR(e.tier(Tier::kNvme).used_bytes,
              16 * (e.bytes(Tier::kNvme, MemCategory::kParams16) + 16 * shard +
                    e.bytes(Tier::kNvme, MemCategory::kNvmeFilePadding)),
              1.0);
}

TEST(MemoryModel, DoesNotFitIsAResultNamingTheTier) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = load_model_scenario("paper-1t");
  RunConfig run = testing::load_run_scenario("data-parallel");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const MemoryEstimate e = estimate_memory(m, run, hw);
  EXPECT_FALSE(e.fits);
  EXPECT_EQ(e.limiting_tier, Tier::kGpu);
  EXPECT_NE(e.shortfall().find("short by"), std::string::npos) << e.shortfall();
}

}  // namespace
}  // namespace memwall
