// The GPT on the GPU against the same GPT on the CPU: one forward + backward (loss and every gradient), and
// 10 training steps (model + Adam on each side) whose losses agree. Skipped without a GPU. Tolerances: loss
// 1e-5 relative and gradients 1e-4 relative + 1e-6 absolute after one step (cuBLAS and the CPU GEMMs sum in
// different orders); per-step losses over 10 Adam steps 1e-3 relative (the rounding differences feed back
// through the updates).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "cpu/adam.h"
#include "cuda/adam.h"
#include "cuda/small_gpt.h"
#include "engine/cuda/device.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_cuda.h"
#include "model_shapes.h"

namespace memwall::model {
namespace {

struct Batch {
  std::vector<int> tokens, targets;
};

Batch make_batch(int B, int T, int V, int seed) {
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back((i * 7 + seed * 13) % V);
    b.targets.push_back((i * 11 + seed * 5 + 3) % V);
  }
  return b;
}

template <typename T>
T* device_copy(gpu::Device& d, const std::vector<T>& h, std::vector<host::Arena::Block>& blocks) {
  auto b = d.arena().allocate(h.size() * sizeof(T), "test");
  EXPECT_TRUE(b.is_ok());
  blocks.push_back(*b);
  EXPECT_TRUE(d.copy_to_device(b->data, h.data(), h.size() * sizeof(T), d.compute()).is_ok());
  return static_cast<T*>(b->data);
}

template <typename T>
std::vector<T> host_copy(gpu::Device& d, const T* p, std::size_t n) {
  std::vector<T> h(n);
  EXPECT_TRUE(d.copy_to_host(h.data(), p, n * sizeof(T), d.compute()).is_ok());
  EXPECT_TRUE(d.compute().synchronize().is_ok());
  return h;
}

class CudaGpt : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << why;
    auto d = gpu::Device::open(0, 512u << 20);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    dev_ = std::move(d).value();
  }
  void TearDown() override {
    if (dev_ != nullptr) {
      for (const auto& b : blocks_) dev_->arena().release(b);
    }
  }
  std::unique_ptr<gpu::Device> dev_;
  std::vector<host::Arena::Block> blocks_;
};

using cuda_test::small_gpt;
using cuda_test::small_llama;
constexpr int kB = 2, kT = 32;

// Losses of 10 steps of model + Adam on the CPU and on the GPU from the same initialisation.
struct Losses {
  std::vector<float> cpu, gpu;
};

void train_side_by_side(gpu::Device& dev, std::vector<host::Arena::Block>& blocks, int tiling, bool bf16,
                        Losses& out, bool flash = false, const GptConfig& c = small_gpt()) {
  const std::size_t n = gpt_num_params(c);
  std::vector<float> params(n), grads(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  gpt_init(c, params.data(), 1);
  GptModel cpu(c, kB, kT, tiling);
  auto gm = CudaGptModel::create(c, kB, kT, tiling, dev, bf16, 0, flash);
  ASSERT_TRUE(gm.is_ok()) << gm.status().message();
  CudaGptModel& gpu = **gm;
  float* d_params = device_copy(dev, params, blocks);
  float* d_grads = device_copy(dev, grads, blocks);
  kernels::cuda::AdamDeviceArrays a;
  a.params = d_params;
  a.exp_avg = device_copy(dev, m, blocks);
  a.exp_avg_sq = device_copy(dev, v, blocks);
  a.grads = d_grads;
  a.n = n;
  kernels::AdamHyper h;
  h.lr = 1e-3f;
  for (int step = 1; step <= 10; ++step) {
    const Batch b = make_batch(kB, kT, c.vocab, 1);  // one batch, so the loss must fall
    std::fill(grads.begin(), grads.end(), 0.0f);
    out.cpu.push_back(cpu.forward(params.data(), b.tokens.data(), b.targets.data()));
    cpu.backward(params.data(), grads.data());
    h.step = step;
    kernels::adam_step(kernels::fp32_arrays(params.data(), m.data(), v.data(), grads.data(), n), h, 1);
    ASSERT_EQ(cudaMemsetAsync(d_grads, 0, n * 4, static_cast<cudaStream_t>(dev.compute().get())),
              cudaSuccess);
    auto lg = gpu.forward(d_params, b.tokens.data(), b.targets.data());
    ASSERT_TRUE(lg.is_ok()) << lg.status().message();
    ASSERT_TRUE(gpu.backward(d_params, d_grads).is_ok());
    ASSERT_EQ(kernels::cuda::adam_step(a, h, dev.compute().get()), 0);
    out.gpu.push_back(*lg);
  }
}

// The GPU's flash attention trains `c` as the CPU's unfused model does: 10 losses within 1e-3.
void expect_flash_trains_like_the_cpu(gpu::Device& dev, std::vector<host::Arena::Block>& blocks, int tiling,
                                      const GptConfig& c, const char* what) {
  Losses l;
  train_side_by_side(dev, blocks, tiling, false, l, true, c);
  ASSERT_EQ(l.gpu.size(), 10u);
  for (std::size_t s = 0; s < l.cpu.size(); ++s)
    EXPECT_NEAR(l.gpu[s], l.cpu[s], 1e-3f * l.cpu[s]) << what << ", step " << s + 1;
}

void forward_backward_and_ten_steps(gpu::Device& dev, std::vector<host::Arena::Block>& blocks, int tiling,
                                    const GptConfig& c) {
  const std::size_t n = gpt_num_params(c);
  std::vector<float> params(n), grads(n, 0.0f);
  gpt_init(c, params.data(), 1);
  GptModel cpu(c, kB, kT, tiling);
  auto gm = CudaGptModel::create(c, kB, kT, tiling, dev);
  ASSERT_TRUE(gm.is_ok()) << gm.status().message();
  CudaGptModel& gpu = **gm;
  float* d_params = device_copy(dev, params, blocks);
  float* d_grads = device_copy(dev, grads, blocks);
  const Batch b0 = make_batch(kB, kT, c.vocab, 0);
  const float loss = cpu.forward(params.data(), b0.tokens.data(), b0.targets.data());
  cpu.backward(params.data(), grads.data());
  auto gl = gpu.forward(d_params, b0.tokens.data(), b0.targets.data());
  ASSERT_TRUE(gl.is_ok()) << gl.status().message();
  ASSERT_TRUE(gpu.backward(d_params, d_grads).is_ok());
  EXPECT_NEAR(*gl, loss, 1e-5f * loss);
  const auto g = host_copy(dev, d_grads, n);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += std::fabs(g[i] - grads[i]) > 1e-6f + 1e-4f * std::fabs(grads[i]);
  EXPECT_EQ(bad, 0u) << "gradients differing beyond tolerance, tiling " << tiling;

  Losses l;
  train_side_by_side(dev, blocks, tiling, false, l, false, c);
  ASSERT_EQ(l.gpu.size(), 10u);
  for (std::size_t s = 0; s < l.cpu.size(); ++s)
    EXPECT_NEAR(l.gpu[s], l.cpu[s], 1e-3f * l.cpu[s]) << "step " << s + 1 << ", tiling " << tiling;
}

// `c` on the GPU against the CPU with the unfused attention kernels, then with the fused ones.
void expect_unfused_and_flash_match_the_cpu(gpu::Device& dev, std::vector<host::Arena::Block>& blocks,
                                            int tiling, const GptConfig& c, const char* what) {
  forward_backward_and_ten_steps(dev, blocks, tiling, c);
  expect_flash_trains_like_the_cpu(dev, blocks, tiling, c, what);
}

TEST_P(CudaGpt, ForwardBackwardAndTenAdamStepsMatchTheCpu) {
  forward_backward_and_ten_steps(*dev_, blocks_, GetParam(), small_gpt());
}

// OPT's variant of the GPT-2 shape (ReLU, positions from row 2 of the table), and GPT-2's with the exact
// GELU, at GPT-2's tolerances.
TEST_P(CudaGpt, OptShapeAndExactGeluMatchTheCpu) {
  GptConfig opt = small_gpt(), exact = small_gpt();
  opt.opt = true;
  forward_backward_and_ten_steps(*dev_, blocks_, GetParam(), opt);
  exact.exact_gelu = true;
  forward_backward_and_ten_steps(*dev_, blocks_, GetParam(), exact);
}

// GPT-NeoX's variant (Pythia's): rotary positions on a quarter of each head, attention and MLP side by side,
// an untied head; and one after the other with rotary on every channel; unfused and flash.
TEST_P(CudaGpt, NeoxShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig neox = small_gpt();
  neox.neox = neox.parallel_residual = neox.exact_gelu = true;
  neox.partial_rotary = 0.25;
  neox.tied = false;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, neox, "neox");
  GptConfig sequential = small_gpt();
  sequential.neox = true;
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, sequential);
}

// Falcon's variant: Falcon-7B's one key/value head after one norm without biases, and the new architecture's
// two key/value heads after two norms with an untied head; Falcon-RW's ALiBi; unfused and flash.
TEST_P(CudaGpt, FalconShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig falcon7b = small_gpt();
  falcon7b.falcon = falcon7b.parallel_residual = falcon7b.one_norm = falcon7b.no_bias = true;
  falcon7b.exact_gelu = true;
  falcon7b.kv_heads = 1;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, falcon7b, "falcon-7b");
  GptConfig falcon40b = falcon7b;
  falcon40b.one_norm = false;
  falcon40b.kv_heads = 2;
  falcon40b.tied = false;
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, falcon40b);
  // Falcon-RW's: in sequence with biases, ALiBi (added before the score scale) instead of rotary positions.
  GptConfig falcon_rw = small_gpt();
  falcon_rw.falcon = falcon_rw.falcon_alibi = true;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, falcon_rw, "falcon-rw");
}

// GPT-BigCode's: multi-query attention with learned positions (the key and value repeated without rotary
// positions), unfused and flash.
TEST_P(CudaGpt, BigcodeShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig bigcode = small_gpt();
  bigcode.bigcode = true;
  bigcode.kv_heads = 1;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, bigcode, "bigcode");
}

// StarCoder2's: GPT-2's block with two key/value heads, rotary positions on every channel, a 5-token window
// on every layer, an untied head; and without biases on the linears; unfused and flash.
TEST_P(CudaGpt, StarCoder2ShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig starcoder2 = small_gpt();
  starcoder2.starcoder2 = true;
  starcoder2.kv_heads = 2;
  starcoder2.sliding_window = 5;
  starcoder2.tied = false;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, starcoder2, "starcoder2");
  GptConfig unbiased = starcoder2;
  unbiased.no_bias = true;
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, unbiased);
}

// Nemotron's: GPT-2's block with two key/value heads, rotary positions on half of each head, LayerNorm1P
// (1 + weight) and the squared ReLU, an untied head; without biases on the linears; with heads of their own
// size; unfused and flash.
TEST_P(CudaGpt, NemotronShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig nemotron = small_gpt();
  nemotron.nemotron = nemotron.norm_unit_offset = true;
  nemotron.kv_heads = 2;
  nemotron.partial_rotary = 0.5;
  nemotron.tied = false;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, nemotron, "nemotron");
  GptConfig unbiased = nemotron;
  unbiased.no_bias = true;
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, unbiased);
  GptConfig wide = nemotron;  // Minitron-8B's heads of their own size: 4 of 32 over 64 channels
  wide.head_dim = 32;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, wide, "nemotron, head_dim 32");
}

// BLOOM's: ALiBi's biases on the scores (the heads' slopes) instead of positions, the embedding's LayerNorm;
// unfused and flash.
TEST_P(CudaGpt, BloomShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig bloom = small_gpt();
  bloom.bloom = true;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, bloom, "bloom");
}

// MPT's: ALiBi as BLOOM's without the embedding's norm, no biases (the LayerNorms' too), an MLP of 3C, the
// exact GELU; unfused and flash.
TEST_P(CudaGpt, MptShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig mpt = small_gpt();
  mpt.mpt = mpt.no_bias = mpt.exact_gelu = true;
  mpt.ffn = 3 * mpt.channels;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, mpt, "mpt");
}

// Phi's variant (one norm before the attention and the MLP side by side, a bias on the untied head, rotary
// on 10 of each head's 16 channels), and GPT-J's (that without attention biases), unfused and flash.
TEST_P(CudaGpt, PhiShapeMatchesTheCpu) {
  const int tiling = GetParam();
  GptConfig phi = small_gpt();
  phi.phi = phi.parallel_residual = true;
  phi.partial_rotary = 0.625;
  phi.tied = false;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, phi, "phi");
  GptConfig gptj = phi;  // GPT-J's: the same block with biases on the MLP only
  gptj.phi = false;
  gptj.gptj = true;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, gptj, "gptj");
}

// The Llama shape (RMSNorm, rotary positions, grouped-query attention, SwiGLU, an untied head; Qwen2's
// biases, YaRN, a sliding window, Qwen3's heads and norms, Gemma's, Phi-4-mini's partial longrope, StableLM's
// LayerNorms, OLMo's without parameters, OLMo 2's norms) at GPT-2's
// tolerances: fp32, flash
// attention, and bf16 GEMMs (whose second fused matrix, the kv or up weight, is rounded in scratch).
TEST_P(CudaGpt, LlamaShapeMatchesTheCpu) {
  const int tiling = GetParam();
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, small_llama());
  GptConfig qwen2 = small_llama();  // with Qwen2's q, k and v biases
  qwen2.qkv_bias = true;
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, qwen2);
  // With YaRN's rope_scaling: the GPU rotates by the CPU's table, its frequencies and attention factor.
  GptConfig scaled = small_llama();
  scaled.rope_scaling = {.type = "yarn", .factor = 8, .original_max_positions = 32};
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, scaled);
  // Mistral's sliding window (8 of the 32 positions trained) on the unfused kernels and the flash ones.
  GptConfig window = small_llama();
  window.sliding_window = 8;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, window, "window");
  // Qwen3's heads of their own width (4 x 24 query channels over 64) with per-head q and k norms, unfused
  // and flash.
  GptConfig qwen3 = small_llama();
  qwen3.head_dim = 24;
  qwen3.qk_norm = true;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, qwen3, "qwen3");
  // Gemma's GeGLU, 1 + weight norms and sqrt(C) embedding, one key/value head of its own width.
  GptConfig gemma = small_llama();
  gemma.kv_heads = 1;
  gemma.head_dim = 32;
  gemma.gelu_mlp = gemma.norm_unit_offset = gemma.embed_scale = true;
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, gemma);
  // Gemma 2's output norms, soft-capped scores and logits, query_pre_attn_scalar and a window on every other
  // layer (heads of 32, in the flash kernels' reach), unfused and flash.
  GptConfig gemma2 = gemma;
  gemma2.sandwich_norm = true;
  gemma2.attn_softcap = 5.0;
  gemma2.final_softcap = 3.0;
  gemma2.query_scale = 24;
  gemma2.sliding_window = 8;
  gemma2.global_every = 2;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, gemma2, "gemma2");
  // Gemma 3's q/k norms by 1 + weight and its windows' own rotary base (the global layers' with a linear
  // rope_scaling), without soft-capping.
  GptConfig gemma3 = gemma2;
  gemma3.qk_norm = true;
  gemma3.attn_softcap = gemma3.final_softcap = 0;
  gemma3.rope_local_theta = 100;
  gemma3.rope_scaling = {.type = "linear", .factor = 4};
  forward_backward_and_ten_steps(*dev_, blocks_, tiling, gemma3);
  // Phi-4-mini's rotary on 12 of each head's 16 channels by longrope (its long factors: the 32 positions
  // trained are beyond the original 16), Phi-3's fused tensor names; unfused and flash.
  GptConfig phi4 = small_llama();
  phi4.fused_names = true;
  phi4.partial_rotary = 0.75;
  phi4.rope_scaling = {.type = "longrope",
                       .factor = 16,
                       .original_max_positions = 16,
                       .short_factor = {1, 1.2, 1.5, 2, 3, 4},
                       .long_factor = {1, 2, 4, 8, 16, 32}};
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, phi4, "phi4");
  // StableLM's LayerNorms (weight and bias) in the Llama shape, rotary on a quarter of each head, Qwen2's
  // q, k and v biases as StableLM 2's, the attention and the MLP side by side after one norm and a LayerNorm
  // of each query and key head with its own weight as StableLM 2 12B's; unfused and flash.
  GptConfig stablelm = small_llama();
  stablelm.layer_norm = stablelm.qkv_bias = stablelm.parallel_residual = stablelm.one_norm = true;
  stablelm.qk_norm = stablelm.qk_layernorm = true;
  stablelm.partial_rotary = 0.25;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, stablelm, "stablelm");
  // OLMo 2's norms after the attention and the MLP only, q/k norms over all 4 query heads (64 channels) and
  // both key/value heads (32: OLMo 2 32B's grouped-query form).
  GptConfig olmo2 = small_llama();
  olmo2.post_norm = olmo2.qk_norm = olmo2.qk_norm_full = true;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, olmo2, "olmo2");
  // OLMo 1.7's LayerNorms without weight or bias and q, k and v clamped (at 0.15: about a third of them under
  // the init's spread of about 0.16).
  GptConfig olmo = small_llama();
  olmo.kv_heads = 4;
  olmo.layer_norm = true;
  olmo.norm_params = false;
  olmo.clip_qkv = 0.15;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, olmo, "olmo");
  // Command R+'s: one LayerNorm without bias, the attention and the MLP side by side, rotary on neighbouring
  // pairs, per-head q/k LayerNorms, a tied head, logits scaled.
  GptConfig cohere = small_llama();
  cohere.layer_norm = cohere.parallel_residual = cohere.one_norm = cohere.cohere = cohere.tied = true;
  cohere.qk_norm = cohere.qk_layernorm = true;
  cohere.logit_scale = 0.5;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, cohere, "cohere");
  // Command R7B's (Cohere2): no q/k norms, a 5-token window on every layer but each second, rotary on those
  // only.
  GptConfig cohere2 = cohere;
  cohere2.qk_norm = cohere2.qk_layernorm = false;
  cohere2.sliding_window = 5;
  cohere2.global_every = 2;
  cohere2.rope_windowed_only = true;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, cohere2, "cohere2");
  // SmolLM3's: the second layer without rotary positions.
  GptConfig smollm3 = small_llama();
  smollm3.nope_every = 2;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, smollm3, "smollm3");
  // Granite's multipliers: embedding x 3, scores x 1/8, sublayer outputs x 0.5 (tiling 2: the tiles' scaled
  // adds), logits x 0.5.
  GptConfig granite = small_llama();
  granite.granite = true;
  granite.embed_multiplier = 3;
  granite.query_scale = 64;
  granite.residual_multiplier = 0.5;
  granite.logit_scale = 0.5;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, granite, "granite");
  // EXAONE 4's: OLMo 2's norms after the sublayers with a norm of each query and key head, a 5-token window
  // on every layer but each second, rotary on those only.
  GptConfig exaone4 = small_llama();
  exaone4.post_norm = exaone4.qk_norm = exaone4.rope_windowed_only = true;
  exaone4.sliding_window = 5;
  exaone4.global_every = 2;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, exaone4, "exaone4");
  // OLMo 3's: OLMo 2's norms with a 5-token window on every layer but each second, which turns without the
  // global layers' YaRN.
  GptConfig olmo3 = small_llama();
  olmo3.post_norm = olmo3.qk_norm = olmo3.qk_norm_full = true;
  olmo3.sliding_window = 5;
  olmo3.global_every = 2;
  olmo3.rope_scaling = {.type = "yarn", .factor = 4, .original_max_positions = 16};
  olmo3.rope_local_theta = olmo3.rope_theta;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, olmo3, "olmo3");
  // GLM-4's: q/k/v biases, rotary on neighbouring pairs of the first half of each head, norms before and
  // after the sublayers.
  GptConfig glm4 = small_llama();
  glm4.glm = glm4.qkv_bias = glm4.sandwich_norm = true;
  glm4.partial_rotary = 0.5;
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, tiling, glm4, "glm4");
  Losses flash, bf16;
  train_side_by_side(*dev_, blocks_, tiling, false, flash, true, small_llama());
  train_side_by_side(*dev_, blocks_, tiling, true, bf16, false, small_llama());
  ASSERT_EQ(flash.gpu.size(), 10u);
  ASSERT_EQ(bf16.gpu.size(), 10u);
  for (std::size_t s = 0; s < flash.cpu.size(); ++s) {
    EXPECT_NEAR(flash.gpu[s], flash.cpu[s], 1e-3f * flash.cpu[s]) << "flash, step " << s + 1;
    EXPECT_NEAR(bf16.gpu[s], bf16.cpu[s], (s == 0 ? 1e-2f : 3e-2f) * bf16.cpu[s]) << "bf16, step " << s + 1;
  }
  EXPECT_LT(bf16.gpu.back(), bf16.gpu.front());
}

// With bf16 GEMM operands (fp32 accumulation) the GPU rounds every matmul input to bf16, which the CPU model
// does not: losses stay within 1e-2 relative of the CPU's for one step and 3e-2 over 10 Adam steps, and fall.
TEST_P(CudaGpt, Bf16MatmulsStayCloseToTheCpu) {
  const int tiling = GetParam();
  Losses l;
  train_side_by_side(*dev_, blocks_, tiling, true, l);
  ASSERT_EQ(l.gpu.size(), 10u);
  for (std::size_t s = 0; s < l.cpu.size(); ++s)
    EXPECT_NEAR(l.gpu[s], l.cpu[s], (s == 0 ? 1e-2f : 3e-2f) * l.cpu[s])
        << "step " << s + 1 << ", tiling " << tiling;
  EXPECT_LT(l.gpu.back(), l.gpu.front());
}

// The fused attention kernels on the GPU against the CPU's unfused model: the fp32 tolerances, and the GPU
// keeps B x heads x T log-sum-exps per layer instead of B x heads x T x T probabilities.
TEST_P(CudaGpt, FlashAttentionTrainsLikeTheCpusUnfusedModel) {
  const int tiling = GetParam();
  Losses l;
  train_side_by_side(*dev_, blocks_, tiling, false, l, true);
  ASSERT_EQ(l.gpu.size(), 10u);
  for (std::size_t s = 0; s < l.cpu.size(); ++s)
    EXPECT_NEAR(l.gpu[s], l.cpu[s], 1e-3f * l.cpu[s]) << "step " << s + 1 << ", tiling " << tiling;
  auto unfused = CudaGptModel::create(small_gpt(), kB, kT, tiling, *dev_);
  auto flash = CudaGptModel::create(small_gpt(), kB, kT, tiling, *dev_, false, 0, true);
  ASSERT_TRUE(unfused.is_ok() && flash.is_ok());
  EXPECT_LT((*flash)->activation_bytes(), (*unfused)->activation_bytes());
}

// Mixtures of experts (which take no tiling): the routing on the host from the GPU's router logits, each
// expert's rows gathered, its GEMMs on them and its weighted output scattered back, at GPT-2's tolerances
// with the unfused attention (the first parameter) and the flash kernels (the second). Mixtral's (its
// load-balancing loss), Qwen2-MoE's (a shared expert behind its sigmoid gate, experts on every other layer,
// q/k/v biases), GLM-4.5's (sigmoid routing in groups with the correction bias, routed_scale, an ungated
// shared expert, a dense first layer), Granite MoE's (the residual multiplier on the experts' sum) and
// Qwen3-MoE's (per-head q/k norms, heads of their own width). The tolerances hold while no token's k-th and
// (k+1)-th experts score within rounding of each other (a flipped choice would move the loss by far more).
TEST_P(CudaGpt, MixturesOfExpertsMatchTheCpu) {
  GptConfig mixtral = small_llama();
  mixtral.experts = 4;
  mixtral.experts_per_token = 2;
  mixtral.expert_ffn = 40;
  mixtral.norm_topk = true;
  mixtral.router_aux = 0.02;
  GptConfig qwen3_moe = mixtral;
  qwen3_moe.router_aux = 0;
  qwen3_moe.head_dim = 24;
  qwen3_moe.qk_norm = true;
  if (GetParam() == 2) {
    expect_flash_trains_like_the_cpu(*dev_, blocks_, 1, mixtral, "mixtral");
    expect_flash_trains_like_the_cpu(*dev_, blocks_, 1, qwen3_moe, "qwen3-moe");
    GptConfig oss = mixtral;  // (gpt-oss's sinks in the fused kernels, below)
    oss.gpt_oss = oss.qkv_bias = true;
    oss.sliding_window = 8;
    oss.global_every = 2;
    oss.swiglu_limit = 1.0;
    expect_flash_trains_like_the_cpu(*dev_, blocks_, 1, oss, "gpt-oss");
    return;
  }
  forward_backward_and_ten_steps(*dev_, blocks_, 1, mixtral);
  GptConfig qwen2_moe = mixtral;
  qwen2_moe.norm_topk = false;
  qwen2_moe.qkv_bias = true;
  qwen2_moe.shared_ffn = 48;
  qwen2_moe.moe_every = 2;
  forward_backward_and_ten_steps(*dev_, blocks_, 1, qwen2_moe);
  GptConfig glm45 = mixtral;
  glm45.router_aux = 0;
  glm45.sigmoid_routing = true;
  glm45.expert_groups = 2;
  glm45.routed_scale = 2.5;
  glm45.shared_ffn = 2 * glm45.expert_ffn;
  glm45.shared_gate = false;
  glm45.dense_layers = 1;
  glm45.layers = 3;
  forward_backward_and_ten_steps(*dev_, blocks_, 1, glm45);
  GptConfig granite_moe = mixtral;
  granite_moe.granite = true;
  granite_moe.embed_multiplier = 12;
  granite_moe.query_scale = 256;
  granite_moe.residual_multiplier = 0.22;
  granite_moe.logit_scale = 0.25;
  forward_backward_and_ten_steps(*dev_, blocks_, 1, granite_moe);
  forward_backward_and_ten_steps(*dev_, blocks_, 1, qwen3_moe);
  // gpt-oss's: biases on q, k, v, o, the router and the experts, sink logits, a window of 8 on every other
  // layer, the clamped SwiGLU at a limit of 1 (which the activations cross both ways).
  GptConfig oss = mixtral;
  oss.gpt_oss = oss.qkv_bias = true;
  oss.sliding_window = 8;
  oss.global_every = 2;
  oss.router_aux = 0.05;
  oss.swiglu_limit = 1.0;
  forward_backward_and_ten_steps(*dev_, blocks_, 1, oss);
}

// DeepSeek's latent attention: 4 heads of 6 + 4 rotary channels (neighbouring pairs) from a query latent of 8
// and a key/value latent of 8, values of 6 (padded to the kernels' heads of 10, and narrowed back for
// o_proj), scores scaled by 7^-1/2; unfused and flash at each tiling, at GPT-2's tolerances. Then (no tiling)
// DeepSeek-V3's whole block: a dense first layer, sigmoid routing of 8 experts in 4 groups with the
// correction bias, an ungated shared expert, the per-sequence balance loss; and V2-Lite's (q_proj without a
// query latent, values as wide as the heads, softmax routing by the groups' best, the balance loss over the
// micro-batch).
TEST_P(CudaGpt, LatentAttentionMatchesTheCpu) {
  expect_unfused_and_flash_match_the_cpu(*dev_, blocks_, GetParam(),
                                         test_shapes::deepseek_dense(small_llama()), "deepseek dense");
  if (GetParam() != 1) return;
  forward_backward_and_ten_steps(*dev_, blocks_, 1, test_shapes::deepseek_v3(small_llama(), 24));
  forward_backward_and_ten_steps(*dev_, blocks_, 1, test_shapes::deepseek_v2(small_llama(), 24));
}

// Llama 4's: 4 layers of grouped-query heads turning neighbouring pairs but the last (nope_every 4), their
// query and key heads normed without weights after the turn and attending within chunks of 3 positions, the
// last layer's queries tempered by position; experts on every other layer, chosen by the sigmoid of their
// logit, the routing weight scaling the expert's input, beside an ungated shared expert. Unfused (the first
// parameter) and flash (the second; experts take no tiling).
TEST_P(CudaGpt, Llama4ShapeMatchesTheCpu) {
  const GptConfig llama4 = test_shapes::llama4(small_llama(), 24);
  if (GetParam() == 1) {
    forward_backward_and_ten_steps(*dev_, blocks_, 1, llama4);
  } else {
    expect_flash_trains_like_the_cpu(*dev_, blocks_, 1, llama4, "llama4");
  }
}

// DeepSeek-V3's next-token-prediction module (memwall.mtp: its block after the main model's, reading the
// next tokens' embedding and the main output, predicting the token after the next), on a Llama shape and on
// DeepSeek-V3's, at GPT-2's tolerances (its loss weighted 0.3 into the total).
TEST_P(CudaGpt, NextTokenPredictionMatchesTheCpu) {
  GptConfig mtp = small_llama();
  mtp.layers = 3;
  mtp.mtp = 1;
  mtp.mtp_weight = 0.3;
  forward_backward_and_ten_steps(*dev_, blocks_, GetParam(), mtp);
  if (GetParam() != 1) return;  // (experts take no tiling)
  GptConfig v3 = test_shapes::deepseek_v3(small_llama(), 24);
  v3.layers = 4;  // (3 and the module's)
  v3.mtp = 1;
  forward_backward_and_ten_steps(*dev_, blocks_, 1, v3);
}

INSTANTIATE_TEST_SUITE_P(Tiling, CudaGpt, ::testing::Values(1, 2));

}  // namespace
}  // namespace memwall::model
