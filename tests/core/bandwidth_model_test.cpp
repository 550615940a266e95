// Bandwidth model: Figure 3 from Eq. (6), the paper's required bandwidths, and per-tier bandwidth on DGX-2.
#include <gtest/gtest.h>

#include <cmath>

#include "memory/bandwidth_model.h"
#include "memory/paper_equations.h"
#include "test_support.h"

namespace memwall {
namespace {

constexpr double kPeak = 70e12;  // the paper's achievable V100 throughput for Figure 3

// The markers of Figure 3: 1 GB/s, then 1525.88 / 2^k GB/s (reference/zero-infinity.md §2.5).
double marker_Bps(int row) {
  return row == 0 ? 1e9 : 1525.88e9 / std::pow(2.0, 10 - row);
}

TEST(Figure3, ParamsAndGradsPanel) {
  // rows: bandwidth markers; columns: bsz 1, 2, 4, 8, 16; values in % as printed with one decimal.
  const double table[11][5] = {
      {1.4, 2.8, 5.5, 10.5, 19.0},    {4.2, 8.0, 14.8, 25.9, 41.1},   {8.0, 14.8, 25.9, 41.1, 58.2},
      {14.8, 25.9, 41.1, 58.2, 73.6}, {25.9, 41.1, 58.2, 73.6, 84.8}, {41.1, 58.2, 73.6, 84.8, 91.8},
      {58.2, 73.6, 84.8, 91.8, 95.7}, {73.6, 84.8, 91.8, 95.7, 97.8}, {84.8, 91.8, 95.7, 97.8, 98.9},
      {91.8, 95.7, 97.8, 98.9, 99.4}, {95.7, 97.8, 98.9, 99.4, 99.7}};
  const double bsz[] = {1, 2, 4, 8, 16};
  for (int r = 0; r < 11; ++r) {
    for (int c = 0; c < 5; ++c) {
      const double eff =
          paper::eq6_efficiency(paper::eq9_ait_params_grads(1024, bsz[c]), marker_Bps(r), kPeak);
      EXPECT_NEAR(100 * eff, table[r][c], 0.05 + 1e-9) << "bw row " << r << " bsz " << bsz[c];
    }
  }
}

TEST(Figure3, OptimizerStatesPanel) {
  const double table[11][4] = {{0.4, 0.7, 1.4, 2.8},     {1.1, 2.1, 4.2, 8.0},     {2.1, 4.2, 8.0, 14.8},
                               {4.2, 8.0, 14.8, 25.9},   {8.0, 14.8, 25.9, 41.1},  {14.8, 25.9, 41.1, 58.2},
                               {25.9, 41.1, 58.2, 73.6}, {41.1, 58.2, 73.6, 84.8}, {58.2, 73.6, 84.8, 91.8},
                               {73.6, 84.8, 91.8, 95.7}, {84.8, 91.8, 95.7, 97.8}};
  const double bsz[] = {1, 2, 4, 8};
  for (int r = 0; r < 11; ++r) {
    for (int c = 0; c < 4; ++c) {
      const double eff = paper::eq6_efficiency(paper::eq10_ait_optimizer(1024, bsz[c]), marker_Bps(r), kPeak);
      EXPECT_NEAR(100 * eff, table[r][c], 0.05 + 1e-9) << "bw row " << r << " bsz " << bsz[c];
    }
  }
}

TEST(Figure3, ActivationCheckpointPanel) {
  const double table[7][6] = {{41.3, 58.4, 73.7, 84.9, 91.8, 95.7}, {67.7, 80.7, 89.3, 94.4, 97.1, 98.5},
                              {80.7, 89.3, 94.4, 97.1, 98.5, 99.3}, {89.3, 94.4, 97.1, 98.5, 99.3, 99.6},
                              {94.4, 97.1, 98.5, 99.3, 99.6, 99.8}, {97.1, 98.5, 99.3, 99.6, 99.8, 99.9},
                              {98.5, 99.3, 99.6, 99.8, 99.9, 100.0}};
  const double hd[] = {2048, 4096, 8192, 16384, 32768, 65536};
  for (int r = 0; r < 7; ++r) {
    for (int c = 0; c < 6; ++c) {
      const double eff = paper::eq6_efficiency(paper::eq11_ait_checkpoints(hd[c], 1), marker_Bps(r), kPeak);
      EXPECT_NEAR(100 * eff, table[r][c], 0.05 + 1e-9) << "bw row " << r << " hd " << hd[c];
    }
  }
}

TEST(Figure3, RequiredBandwidthsQuotedByThePaper) {
  // "> 70 GB/s" for params/grads at bsz 1 and 50% efficiency: 68.4 GB/s.
  EXPECT_NEAR(paper::eq6_bandwidth_for(paper::eq9_ait_params_grads(1024, 1), 0.5, kPeak) / 1e9, 68.36, 0.01);
  // "nearly 1.5 TB/s" for optimizer states at bsz 2 and 90%: 1.23 TB/s.
  EXPECT_NEAR(paper::eq6_bandwidth_for(paper::eq10_ait_optimizer(1024, 2), 0.9, kPeak) / 1e12, 1.23, 0.005);
  // "2 GB/s" sustains > 50% at hidden 2K: 1.42 GB/s; beyond 8K, below 1 GB/s.
  EXPECT_NEAR(paper::eq6_bandwidth_for(paper::eq11_ait_checkpoints(2048, 1), 0.5, kPeak) / 1e9, 1.42, 0.005);
  EXPECT_LT(paper::eq6_bandwidth_for(paper::eq11_ait_checkpoints(8192, 1), 0.5, kPeak), 1e9);
  // Both directions agree.
  for (double eff : {0.1, 0.5, 0.9, 0.99}) {
    const double bw = paper::eq6_bandwidth_for(2048, eff, kPeak);
    EXPECT_NEAR(paper::eq6_efficiency(2048, bw, kPeak), eff, 1e-12);
  }
}

TEST(TierBandwidth, Dgx2MatchesFigure2bFromTopology) {
  // Figure 2b: one GPU alone reads 12 GB/s from CPU or NVMe; all 16 in parallel get 3.0 and 1.6 GB/s.
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const HostPathBandwidth cpu = cpu_to_gpu_bandwidth(hw);
  const HostPathBandwidth nvme = nvme_to_gpu_bandwidth(hw);
  EXPECT_DOUBLE_EQ(cpu.single_gpu_Bps, 12e9);
  EXPECT_DOUBLE_EQ(nvme.single_gpu_Bps, 12e9);
  EXPECT_DOUBLE_EQ(cpu.parallel_per_gpu_Bps, 3e9);
  EXPECT_NEAR(nvme.parallel_per_gpu_Bps, 1.6e9, 1e6);
  EXPECT_NE(cpu.bottleneck.find("uplink"), std::string::npos) << cpu.bottleneck;
  EXPECT_NE(nvme.bottleneck.find("NVMe"), std::string::npos) << nvme.bottleneck;
}

TEST(TierBandwidth, BandwidthCentricScalesWithRanksBroadcastDoesNot) {
  // Paper §6.1: 16-way allgather on one DGX-2 gives ~48 / ~25 GB/s from CPU / NVMe; broadcast stays ~12.
  const HardwareSpec one = testing::load_hardware_scenario("dgx2");
  EXPECT_NEAR(param_tier_bandwidth(one, Tier::kCpu, 16, Partitioning::kBandwidthCentric), 48e9, 1e6);
  EXPECT_NEAR(param_tier_bandwidth(one, Tier::kNvme, 16, Partitioning::kBandwidthCentric), 25.6e9, 1e6);
  EXPECT_DOUBLE_EQ(param_tier_bandwidth(one, Tier::kCpu, 16, Partitioning::kBroadcast), 12e9);
  // On 64 nodes the slow-memory side grows to > 1.5 TB/s but the all-gather over the network caps the
  // effective rate near one node's NIC bandwidth (8 x 12.5 GB/s).
  const HardwareSpec big = testing::load_hardware_scenario("dgx2-64n");
  const double nvme_big = param_tier_bandwidth(big, Tier::kNvme, 1024, Partitioning::kBandwidthCentric);
  EXPECT_NEAR(nvme_big, allgather_Bps(big, 1024), 1.0);
  EXPECT_NEAR(allgather_Bps(big, 1024), 100e9 * 64 / 63, 1e6);
  EXPECT_DOUBLE_EQ(param_tier_bandwidth(big, Tier::kNvme, 1024, Partitioning::kBroadcast), 12e9);
}

TEST(TierBandwidth, EfficiencyReportUsesThePlacement) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = testing::load_model_scenario("paper-1t");
  RunConfig run = testing::load_run_scenario("zero-infinity-nvme");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const BandwidthReport r = analyze_bandwidth(m, run, hw, 0.9);
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.rows[0].location, Tier::kNvme);
  EXPECT_NEAR(r.rows[0].available_Bps, 25.6e9, 1e6);
  EXPECT_DOUBLE_EQ(r.rows[0].ait, 2048);
  EXPECT_FALSE(r.rows[1].overlappable);
  // 1T on one DGX-2: the fp32 gradients do not fit in CPU memory (auto puts them on NVMe), Eq. 10 as is.
  EXPECT_DOUBLE_EQ(r.rows[1].ait, 1024.0 * run.micro_batch_per_gpu.value / 4);
  // Where they fit (memwall.optimizer_gradients auto or cpu) NVMe moves 24 of Eq. 10's 32 B per parameter.
  RunConfig cpu_grads = run;
  cpu_grads.memwall.optimizer_gradients = OptimizerGradients::kCpu;
  EXPECT_DOUBLE_EQ(analyze_bandwidth(m, cpu_grads, hw, 0.9).rows[1].ait, r.rows[1].ait * 32 / 24);
  const ModelSpec m100 = testing::load_model_scenario("paper-100b");
  RunConfig small = testing::load_run_scenario("zero-infinity-nvme");
  ASSERT_TRUE(resolve_run_config(small, m100, hw).is_ok());
  const BandwidthReport fits = analyze_bandwidth(m100, small, hw, 0.9);
  EXPECT_DOUBLE_EQ(fits.rows[1].ait, 1024.0 * small.micro_batch_per_gpu.value / 3);
  EXPECT_NE(fits.rows[1].rule.find("fp32 gradients in CPU memory"), std::string::npos) << fits.rows[1].rule;
  small.memwall.optimizer_gradients = OptimizerGradients::kNvme;
  EXPECT_DOUBLE_EQ(analyze_bandwidth(m100, small, hw, 0.9).rows[1].ait,
                   1024.0 * small.micro_batch_per_gpu.value / 4);
  EXPECT_EQ(r.rows[2].location, Tier::kCpu);
  EXPECT_DOUBLE_EQ(r.rows[2].available_Bps, 3e9);
  EXPECT_GT(r.rows[2].efficiency, 0.95);  // §5.2.3: > 80% for hidden >= 8K at ~3 GB/s
  EXPECT_LT(r.combined_efficiency, r.rows[0].efficiency);
  // Gradient accumulation: the optimizer states move once per 8 micro-batches (Eq. 10 with 8x the batch);
  // parameters, gradients and checkpoints move every micro-batch.
  RunConfig gas = run;
  gas.gradient_accumulation_steps = {false, 8};
  const BandwidthReport g = analyze_bandwidth(m, gas, hw, 0.9);
  EXPECT_DOUBLE_EQ(g.rows[1].ait, 8 * r.rows[1].ait);
  EXPECT_DOUBLE_EQ(g.rows[0].ait, r.rows[0].ait);
  EXPECT_DOUBLE_EQ(g.rows[2].ait, r.rows[2].ait);
  EXPECT_GT(g.combined_efficiency, r.combined_efficiency);
  EXPECT_DOUBLE_EQ(g.flops_per_iteration, r.flops_per_iteration);  // Eq. 7: one micro-batch
  // Broadcast is strictly worse for NVMe-resident parameters on 16 GPUs.
  run.memwall.partitioning = Partitioning::kBroadcast;
  EXPECT_LT(analyze_bandwidth(m, run, hw, 0.9).rows[0].available_Bps, r.rows[0].available_Bps);
}

// Twin-Flow (offload_optimizer.ratio 0.5 over 10 sub-groups per rank): half of each rank's optimizer states
// step at the GPU's memory bandwidth and half at its share of the CPU's, one after the other, so the states'
// bandwidth is the harmonic combination of the two; more of it than on the CPU alone.
TEST(TierBandwidth, TwinFlowStepsPartOfTheStatesAtTheGpusBandwidth) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = testing::load_model_scenario("gpt2-xl");
  RunConfig run = testing::twin_flow_ready_run(m, hw);
  const int dp = run.memwall.data_parallel;
  const BandwidthReport cpu = analyze_bandwidth(m, run, hw, 0.9);
  run.zero.offload_optimizer.ratio = 0.5;
  const BandwidthReport twin = analyze_bandwidth(m, run, hw, 0.9);
  const double cpu_rank = hw.cpu.memory_Bps / hw.gpu.count;
  EXPECT_NEAR(cpu.rows[1].available_Bps, cpu_rank * dp, 1);
  const double f = 5 * run.zero.sub_group_size / (m.total_params() / dp);
  EXPECT_NEAR(twin.rows[1].available_Bps, dp / (f / hw.gpu.hbm_Bps + (1 - f) / cpu_rank),
              1e-9 * twin.rows[1].available_Bps);
  EXPECT_GT(twin.rows[1].efficiency, cpu.rows[1].efficiency);
  EXPECT_NE(twin.rows[1].rule.find("5 of 10 sub-groups"), std::string::npos) << twin.rows[1].rule;
}

// The roofline (compute_seconds) and its inverse for calibration: operators timed at a rate come back to it.
TEST(Roofline, CalibrationRecoversTheRateThatTimedTheOperators) {
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  EXPECT_DOUBLE_EQ(compute_seconds(hw, 7e13, 0), 1.0);
  EXPECT_DOUBLE_EQ(compute_seconds(hw, 7e13, 1.8e12), 2.0);  // memory-bound: 1.8 TB at 900 GB/s
  const std::vector<std::pair<double, double>> ops = {{7e13, 1e9}, {1e9, 9e11}, {3.5e13, 4.5e11}, {0, 9e10}};
  for (double rate : {35e12, 70e12, 140e12}) {
    hw.gpu.achievable_flops = rate;
    double seconds = 0;
    for (const auto& [f, m] : ops) seconds += compute_seconds(hw, f, m);
    EXPECT_NEAR(roofline_flops_for(ops, hw.gpu.hbm_Bps, seconds), rate, 1e-6 * rate);
    // Plain FLOPs over time understates the rate by the memory-bound operators' share.
    EXPECT_LT((7e13 + 1e9 + 3.5e13) / seconds, rate);
  }
  // Memory alone takes longer than the measured time: no rate explains it.
  EXPECT_EQ(roofline_flops_for(ops, hw.gpu.hbm_Bps, 1.0), 0);
  EXPECT_EQ(roofline_flops_for({}, hw.gpu.hbm_Bps, 1.0), 0);
}

}  // namespace
}  // namespace memwall
