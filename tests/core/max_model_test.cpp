// Largest trainable model: monotone in every capacity, strategies ordered as placements imply.
#include <gtest/gtest.h>

#include "memory/max_model.h"
#include "test_support.h"

namespace memwall {
namespace {

double max_params(Strategy s, const HardwareSpec& hw) {
  const ModelSpec templ = testing::load_model_scenario("paper-1t");
  const RunConfig base = testing::load_run_scenario("zero-infinity-nvme");
  Result<ShapeFamily> family = parse_family("paper");
  EXPECT_TRUE(family.is_ok());
  const MaxModelResult r = find_max_model(s, *family, templ, base, hw);
  return r.found ? r.model.total_params() : 0;
}

TEST(MaxModel, MoreGpuMemoryNeverShrinksTheLargestModel) {
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  for (Strategy s : all_strategies()) {
    double previous = 0;
    for (double gib : {16.0, 24.0, 32.0, 48.0, 80.0}) {
      hw.gpu.memory_bytes = gib * (1ull << 30);
      const double p = max_params(s, hw);
      EXPECT_GE(p, previous) << strategy_name(s) << " at " << gib << " GiB";
      previous = p;
    }
  }
}

TEST(MaxModel, MoreCpuMemoryOrNvmeNeverShrinksTheLargestModel) {
  const HardwareSpec base = testing::load_hardware_scenario("dgx2");
  for (Strategy s : {Strategy::kZeroOffload, Strategy::kZeroInfCpu, Strategy::kZeroInfNvme}) {
    double previous = 0;
    for (double scale : {0.25, 0.5, 1.0, 2.0}) {
      HardwareSpec hw = base;
      hw.cpu.memory_bytes *= scale;
      hw.nvme.drive_capacity_bytes *= scale;
      const double p = max_params(s, hw);
      EXPECT_GE(p, previous) << strategy_name(s) << " at scale " << scale;
      previous = p;
    }
  }
}

TEST(MaxModel, OneDgx2NodeOrdersStrategiesByWhatTheyPartitionAndOffload) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const double dp = max_params(Strategy::kDataParallel, hw);
  const double z2 = max_params(Strategy::kZero2, hw);
  const double offload = max_params(Strategy::kZeroOffload, hw);
  const double z3 = max_params(Strategy::kZero3, hw);
  const double inf_cpu = max_params(Strategy::kZeroInfCpu, hw);
  const double inf_nvme = max_params(Strategy::kZeroInfNvme, hw);
  EXPECT_GT(dp, 0);
  EXPECT_LT(dp, z2);
  EXPECT_LT(z2, offload);
  EXPECT_LT(offload, z3);
  EXPECT_LT(z3, inf_cpu);
  EXPECT_LT(inf_cpu, inf_nvme);
  // Sanity bounds from capacities alone: data parallel is below 32 GiB / 20 B; NVMe below 28 TiB / 18 B.
  EXPECT_LT(dp, 32.0 * (1ull << 30) / 20);
  EXPECT_LT(inf_nvme, 16 * 3.84e12 * 8 / 18 / 16 * 16 / 8);
  EXPECT_GT(inf_nvme, 1e12);  // the paper trains 1T on one node with NVMe offload
}

// On 32 DGX-2 nodes the untiled ZeRO-Infinity NVMe model is stopped by the GPU working memory of its
// largest operator (Eq. 4 grows with hd^2); memory-centric tiling lifts that limit until CPU or NVMe
// capacity stops it. The other strategies keep the run's tiling.
TEST(MaxModel, MemoryCentricTilingLiftsTheGpuLimitOfZeroInfinity) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2-32n");
  const ModelSpec templ = testing::load_model_scenario("paper-1t");
  const RunConfig base = testing::load_run_scenario("zero-infinity-nvme");
  const ShapeFamily family = parse_family("paper").value();
  const MaxModelResult untiled = find_max_model(Strategy::kZeroInfNvme, family, templ, base, hw, 1);
  const MaxModelResult tiled = find_max_model(Strategy::kZeroInfNvme, family, templ, base, hw);
  ASSERT_TRUE(untiled.found && tiled.found);
  EXPECT_EQ(untiled.tiling_factor, 1);
  EXPECT_EQ(untiled.limiting_tier, Tier::kGpu);
  EXPECT_GT(tiled.tiling_factor, 1);
  EXPECT_NE(tiled.limiting_tier, Tier::kGpu) << tiled.next_failure;
  EXPECT_GT(tiled.model.total_params(), 4 * untiled.model.total_params());
  EXPECT_EQ(tiled.model.hidden % tiled.tiling_factor, 0);
  // The smallest factor that fits: half of it does not.
  RunConfig half = apply_strategy(base, Strategy::kZeroInfNvme, hw);
  half.memwall.tiling_factor = tiled.tiling_factor / 2;
  ASSERT_TRUE(resolve_run_config(half, tiled.model, hw).is_ok());
  EXPECT_FALSE(estimate_memory(tiled.model, half, hw).fits);
  const MaxModelResult z3 = find_max_model(Strategy::kZero3, family, templ, base, hw);
  EXPECT_EQ(z3.tiling_factor, 1);
  EXPECT_EQ(z3.model.total_params(),
            find_max_model(Strategy::kZero3, family, templ, base, hw, 1).model.total_params());
}

// 3D parallelism is tensor slicing in a node and a pipeline stage per node: its largest model grows with
// the nodes (the stages share the model states), and stays below ZeRO-Infinity's.
TEST(MaxModel, ThreeDParallelismGrowsWithPipelineStages) {
  const double one = max_params(Strategy::k3D, testing::load_hardware_scenario("dgx2"));
  const HardwareSpec cluster = testing::load_hardware_scenario("dgx2-32n");
  const double many = max_params(Strategy::k3D, cluster);
  EXPECT_GT(many, 16 * one);
  EXPECT_LT(many, max_params(Strategy::kZeroInfNvme, cluster) / 10);
}

TEST(MaxModel, MoreNodesNeverShrinkZero3) {
  double previous = 0;
  for (const char* name : {"dgx2", "dgx2-4n", "dgx2-16n"}) {
    const double p = max_params(Strategy::kZero3, testing::load_hardware_scenario(name));
    EXPECT_GT(p, previous) << name;
    previous = p;
  }
}

TEST(MaxModel, FamiliesParseAndGrow) {
  for (const char* f : {"paper", "gpt3", "llama", "layers=10", "hidden=4096"}) {
    Result<ShapeFamily> fam = parse_family(f);
    ASSERT_TRUE(fam.is_ok()) << f;
    const ModelSpec templ = testing::load_model_scenario("gpt2");
    EXPECT_LT(fam->member(templ, 4 * fam->step()).total_params(),
              fam->member(templ, 64 * fam->step()).total_params())
        << f;
  }
  // The paper family goes through the paper's Figure 2a shapes.
  const ModelSpec m = parse_family("paper")->member(testing::load_model_scenario("gpt2"), 25600);
  EXPECT_EQ(m.layers, 128);
  EXPECT_EQ(parse_family("gpt3")->member(testing::load_model_scenario("gpt2"), 12288).layers, 96);
  // The llama family goes through Llama 2's and Llama 3's shapes; a Llama template keeps its style: 70B's
  // member at 8192 is Llama 2 70B itself, at 16384 Llama 3 405B's depth with 70B's ratios.
  const ModelSpec l70 = testing::load_model_scenario("llama-2-70b");
  const ModelSpec same = parse_family("llama")->member(l70, 8192);
  EXPECT_EQ(same.layers, 80);
  EXPECT_EQ(same.heads, 64);
  EXPECT_EQ(same.kv_heads, 8);
  EXPECT_EQ(same.ffn_hidden, 28672);
  EXPECT_TRUE(same.gated_mlp);
  EXPECT_DOUBLE_EQ(same.total_params(), l70.total_params());
  const ModelSpec big = parse_family("llama")->member(l70, 16384);
  EXPECT_EQ(big.layers, 126);
  EXPECT_EQ(big.kv_heads, 16);  // 128 heads of 128, kv in 70B's ratio of 8
  EXPECT_EQ(parse_family("llama")->member(l70, 5120).layers, 40);
  EXPECT_FALSE(parse_family("tall").is_ok());
  EXPECT_FALSE(parse_family("layers=0").is_ok());
  EXPECT_FALSE(parse_family("hidden=100").is_ok());
}

TEST(MaxHidden, TilingNeverShrinksTheLargestHiddenSize) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-nvme");
  run.memwall.sequence_length = 1024;
  const auto results = find_max_hidden(run, hw, 2.0 * (1ull << 30), {1, 2, 4, 8, 16});
  ASSERT_EQ(results.size(), 5u);
  for (size_t i = 1; i < results.size(); ++i) EXPECT_GE(results[i].max_hidden, results[i - 1].max_hidden);
  EXPECT_GT(results.back().max_hidden, 2 * results.front().max_hidden);
  // Untiled, the gathered fc1 weight (8 hd^2 bytes) is the first tensor to exceed a 2 GiB chunk: hd = 16K.
  EXPECT_EQ(results.front().max_hidden, 16384);
  EXPECT_NE(results.front().limit.find("contiguous"), std::string::npos) << results.front().limit;
}

}  // namespace
}  // namespace memwall
