// DeepSpeed's memory estimator as memwall reproduces it, against the worked examples of DeepSpeed's docs.
#include <gtest/gtest.h>

#include <cmath>

#include "base/units.h"
#include "memory/deepspeed_estimate.h"
#include "spec/model_spec.h"

namespace memwall {
namespace {

// t5-3b as DeepSpeed's docs estimate it: 2851M parameters (2,851,598,336), the largest layer its shared
// 32128 x 1024 embedding (32,899,072), one node of 8 GPUs. Their tables print GB meaning GiB, two decimals.
constexpr double kT5Params = 2851598336;
constexpr double kT5Largest = 32899072;

double gib(double bytes) {
  return bytes / kGiB;
}

TEST(DeepSpeedEstimate, Zero3MatchesTheDocsWorkedExample) {
  const DeepSpeedEstimate both = deepspeed_zero3_estimate(kT5Params, kT5Largest, 8, 1, true, true);
  EXPECT_NEAR(gib(both.per_cpu_bytes), 71.71, 0.005);
  EXPECT_NEAR(gib(both.per_gpu_bytes), 0.12, 0.005);
  const DeepSpeedEstimate optimizer = deepspeed_zero3_estimate(kT5Params, kT5Largest, 8, 1, true, false);
  EXPECT_NEAR(gib(optimizer.per_cpu_bytes), 63.74, 0.005);
  EXPECT_NEAR(gib(optimizer.per_gpu_bytes), 0.79, 0.005);
  const DeepSpeedEstimate none = deepspeed_zero3_estimate(kT5Params, kT5Largest, 8, 1, false, false);
  EXPECT_NEAR(gib(none.per_cpu_bytes), 1.47, 0.005);
  EXPECT_NEAR(gib(none.per_gpu_bytes), 6.10, 0.005);
  // Without zero.Init every process materialises the fp32 model first: at least 4 B x 8 per parameter.
  const DeepSpeedEstimate cold = deepspeed_zero3_estimate(kT5Params, kT5Largest, 8, 1, true, true, false);
  EXPECT_DOUBLE_EQ(cold.per_cpu_bytes, kT5Params * 32 * 1.5);
  // Two nodes halve each node's share of the offloaded states (gpus_factor 1/2).
  EXPECT_DOUBLE_EQ(deepspeed_zero3_estimate(kT5Params, kT5Largest, 8, 2, true, true).per_cpu_bytes,
                   both.per_cpu_bytes / 2);
}

TEST(DeepSpeedEstimate, Zero2MatchesTheDocsOffloadExampleAndTheCurrentCode) {
  const DeepSpeedEstimate offload = deepspeed_zero2_estimate(kT5Params, 8, 1, true);
  EXPECT_NEAR(gib(offload.per_cpu_bytes), 127.48, 0.005);
  EXPECT_NEAR(gib(offload.per_gpu_bytes), 5.31, 0.005);
  const DeepSpeedEstimate none = deepspeed_zero2_estimate(kT5Params, 8, 1, false);
  EXPECT_DOUBLE_EQ(none.per_gpu_bytes, 2 * kT5Params + std::floor(18 * kT5Params / 8));
  EXPECT_DOUBLE_EQ(none.per_cpu_bytes, kT5Params * 4 * 8 * 1.5);
}

TEST(DeepSpeedEstimate, LargestModuleIsAWeightWithItsBiasOrAnEmbedding) {
  ModelSpec gpt2;
  gpt2.layers = 12;
  gpt2.hidden = 768;
  gpt2.heads = 12;
  gpt2.kv_heads = 12;
  gpt2.ffn_hidden = 3072;
  gpt2.vocab = 50257;
  gpt2.max_positions = 1024;
  EXPECT_DOUBLE_EQ(largest_module_params(gpt2), 50257.0 * 768);  // wte, not wte + wpe
  gpt2.vocab = 512;
  EXPECT_DOUBLE_EQ(largest_module_params(gpt2), 3072.0 * 768 + 3072);  // c_fc: weight and bias
}

}  // namespace
}  // namespace memwall
