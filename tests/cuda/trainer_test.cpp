// memwall train's ZeRO-3 trainer on a real GPU (--device cuda) against the same trainer on the host-emulated
// device: the same schedule, 10 steps, losses within 1e-3 relative per step (fp32 compute on cuBLAS against
// oneDNN; both widen the same bf16 parameters), in thirteen configurations: everything on the GPU (with the
// lanes running ahead on CUDA events, with every task waited for, with activation checkpointing: the GPU
// then keeps one layer's activations and recomputes each layer before its backward, also with the
// checkpoints offloaded to the CPU and back, with flash attention (the fused kernels on each side) and with
// bf16 GEMMs taking the gathered bf16 weights as they are, within 3e-2), optimizer on the CPU, parameters and
// optimizer on the CPU, both on NVMe, ZeRO stages 0 and 1, and ZeRO-Offload (stage 2) with and without its
// delayed parameter update. Then gradient accumulation and checkpoints to and from the GPU. Skipped without a
// GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cuda/small_gpt.h"
#include "engine/comm/comm.h"
#include "engine/cuda/device.h"
#include "engine/train/zero3.h"

namespace memwall::train {
namespace {

// The tests' trainer options: sequences of 32 tokens, an emulated hardware file with room for the plan.
Zero3Options test_options(int micro_batch) {
  Zero3Options o;
  o.micro_batch = micro_batch;
  o.seq = 32;
  o.adam.lr = 3e-3f;
  o.hw = emulated_hardware(256 << 20, 1 << 30, 1 << 30);
  return o;
}

// n tokens and targets, the same every call (so repeated steps on them must lower the loss).
void fixed_batch(const model::GptConfig& c, std::size_t n, std::vector<int>& tok, std::vector<int>& tgt) {
  tok.resize(n);
  tgt.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    tok[i] = static_cast<int>((7 * i + 1) % static_cast<std::size_t>(c.vocab));
    tgt[i] = static_cast<int>((5 * i + 2) % static_cast<std::size_t>(c.vocab));
  }
}

std::vector<float> losses_of(const model::GptConfig& c, const Zero3Options& o, int steps) {
  auto local = comm::make_local_comm();
  auto z = Zero3Trainer::create(c, o, *local);
  EXPECT_TRUE(z.is_ok()) << z.status().to_string();
  std::vector<float> out;
  if (!z.is_ok()) return out;
  std::vector<int> tok, tgt;
  fixed_batch(c, static_cast<std::size_t>(o.micro_batch * o.seq), tok, tgt);
  for (int s = 0; s < steps; ++s) {
    auto l = z->step(tok.data(), tgt.data());
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    if (!l.is_ok()) break;
    out.push_back(*l);
  }
  return out;
}

// ZeRO-Offload++'s Twin-Flow: the optimizer on the CPU, the first half of its sub-groups of 20000 elements
// stepped on the GPU (their states, gradients and Adam there).
void twin_flow(Zero3Options& o) {
  o.run.zero.offload_optimizer.device = OffloadDevice::kCpu;
  o.run.zero.offload_optimizer.ratio = 0.5;
  o.run.zero.sub_group_size = 20000;
}

TEST(CudaTrainer, TenStepsMatchTheHostEmulatedDevice) {
  std::string why;
  if (gpu::device_count(&why) == 0) GTEST_SKIP() << why;
  const model::GptConfig c = cuda_test::small_gpt();
  const Zero3Options base = test_options(2);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("memwall-cuda-trainer-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::vector<std::pair<std::string, std::function<void(Zero3Options&)>>> variants = {
      {"everything on the GPU", [](Zero3Options&) {}},
      {"everything on the GPU, bf16 GEMMs (train's default on a GPU)",
       [](Zero3Options& o) { o.gpu_bf16_matmuls = true; }},
      {"everything on the GPU, each task waited for", [](Zero3Options& o) { o.gpu_async = false; }},
      {"everything on the GPU, flash attention with activation checkpointing",
       [](Zero3Options& o) {
         o.run.memwall.attention = AttentionKernel::kFlash;
         o.run.activation_checkpointing.enabled = true;
       }},
      {"everything on the GPU, activation checkpointing (one layer's activations kept, recomputed)",
       [](Zero3Options& o) {
         o.run.activation_checkpointing.enabled = true;
         o.run.activation_checkpointing.interval = 1;
       }},
      {"everything on the GPU, activation checkpoints offloaded to the CPU (scrubbed on the GPU until they "
       "come back)",
       [](Zero3Options& o) {
         o.run.activation_checkpointing.enabled = true;
         o.run.activation_checkpointing.interval = 1;
         o.run.activation_checkpointing.cpu_checkpointing = true;
         o.scrub_offloaded_checkpoints = true;
       }},
      {"optimizer on CPU",
       [](Zero3Options& o) { o.run.zero.offload_optimizer.device = OffloadDevice::kCpu; }},
      {"parameters and optimizer on CPU",
       [](Zero3Options& o) {
         o.run.zero.offload_param.device = OffloadDevice::kCpu;
         o.run.zero.offload_optimizer.device = OffloadDevice::kCpu;
       }},
      {"parameters and optimizer on NVMe",
       [&dir](Zero3Options& o) {
         o.swap_dir = dir;
         o.run.zero.offload_param.device = OffloadDevice::kNvme;
         o.run.zero.offload_param.max_in_cpu = 0;
         o.run.zero.offload_optimizer.device = OffloadDevice::kNvme;
         o.run.zero.sub_group_size = 20000;
       }},
      {"Twin-Flow: optimizer on CPU, half of its sub-groups stepped on the GPU", twin_flow},
      {"ZeRO stage 0 (plain data parallelism: all of the states on the GPU)",
       [](Zero3Options& o) { o.run.zero.stage = 0; }},
      {"ZeRO stage 1 (whole parameters and gradients on the GPU)",
       [](Zero3Options& o) { o.run.zero.stage = 1; }},
      {"ZeRO-Offload: stage 2, optimizer on CPU",
       [](Zero3Options& o) {
         o.run.zero.stage = 2;
         o.run.zero.offload_optimizer.device = OffloadDevice::kCpu;
       }},
      {"ZeRO-Offload with the delayed parameter update",
       [](Zero3Options& o) {
         o.run.zero.stage = 2;
         o.run.zero.offload_optimizer.device = OffloadDevice::kCpu;
         o.run.memwall.delayed_parameter_update = true;
       }},
  };
  const auto check = [&base](const model::GptConfig& model, const std::function<void(Zero3Options&)>& apply) {
    Zero3Options o = base;
    apply(o);
    const std::vector<float> cpu = losses_of(model, o, 10);
    o.device = ComputeDevice::kCuda;
    const std::vector<float> gpu = losses_of(model, o, 10);
    ASSERT_EQ(cpu.size(), 10u);
    ASSERT_EQ(gpu.size(), cpu.size());
    EXPECT_LT(gpu.back(), gpu.front());
    // bf16 GEMM operands (and TF32 attention) against the host's fp32: as the model test's bf16 bound.
    const float rel = o.gpu_bf16_matmuls ? 3e-2f : 1e-3f;
    for (std::size_t s = 0; s < cpu.size(); ++s)
      EXPECT_NEAR(gpu[s], cpu[s], rel * cpu[s]) << "step " << s + 1;
  };
  for (const auto& [name, apply] : variants) {
    SCOPED_TRACE(name);
    check(c, apply);
  }
  // The Llama shape: everything on the GPU (fp32 and bf16 GEMMs), its activations recomputed, its
  // parameters and optimizer on CPU, and tiled in 2.
  for (const std::size_t v : {0, 1, 4, 6}) {
    SCOPED_TRACE("Llama shape, " + variants[v].first);
    check(cuda_test::small_llama(), variants[v].second);
  }
  SCOPED_TRACE("Llama shape, tiling 2");
  check(cuda_test::small_llama(), [](Zero3Options& o) { o.tiling = 2; });
  std::filesystem::remove_all(dir);
}

// Gradient accumulation (2 micro-batches per step) and checkpoints written from and read into the device
// (the states staged through host memory piece by piece) on the GPU: losses as on the host-emulated device,
// and a checkpoint taken on the GPU resumed there, and on the host, continues as the run that wrote it.
TEST(CudaTrainer, GradientAccumulationAndCheckpointsMatchTheHost) {
  std::string why;
  if (gpu::device_count(&why) == 0) GTEST_SKIP() << why;
  const model::GptConfig c = cuda_test::small_gpt();
  Zero3Options base = test_options(1);
  base.run.gradient_accumulation_steps = {false, 2};  // planned for 2 micro-batches a step
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("memwall-cuda-ckpt-" + std::to_string(::getpid()))).string();
  std::vector<int> tok, tgt;
  fixed_batch(c, static_cast<std::size_t>(2 * base.seq), tok, tgt);
  const std::vector<std::pair<std::string, std::function<void(Zero3Options&)>>> variants = {
      {"everything on the GPU", [](Zero3Options&) {}},
      {"optimizer on CPU",
       [](Zero3Options& o) { o.run.zero.offload_optimizer.device = OffloadDevice::kCpu; }},
      {"Twin-Flow", twin_flow},
  };
  for (const auto& [name, apply] : variants) {
    SCOPED_TRACE(name);
    Zero3Options host = base;
    apply(host);
    Zero3Options dev = host;
    dev.device = ComputeDevice::kCuda;
    auto local = comm::make_local_comm();
    auto on_host = Zero3Trainer::create(c, host, *local);
    auto on_gpu = Zero3Trainer::create(c, dev, *local);
    ASSERT_TRUE(on_host.is_ok()) << on_host.status().to_string();
    ASSERT_TRUE(on_gpu.is_ok()) << on_gpu.status().to_string();
    std::vector<float> gpu_losses;
    for (int s = 0; s < 5; ++s) {
      if (s == 3) {
        std::filesystem::remove_all(dir);
        ASSERT_TRUE(on_gpu->save(dir).is_ok());
      }
      auto a = on_host->step(tok.data(), tgt.data(), 2);
      auto b = on_gpu->step(tok.data(), tgt.data(), 2);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      EXPECT_NEAR(*b, *a, 1e-3f * *a) << "step " << s + 1;
      gpu_losses.push_back(*b);
    }
    EXPECT_LT(gpu_losses.back(), gpu_losses.front());
    for (const ComputeDevice d : {ComputeDevice::kCuda, ComputeDevice::kCpu}) {
      Zero3Options o = host;
      o.device = d;
      auto resumed = Zero3Trainer::create(c, o, *local);
      ASSERT_TRUE(resumed.is_ok()) << resumed.status().to_string();
      auto at = resumed->load(dir);
      ASSERT_TRUE(at.is_ok()) << at.status().to_string();
      EXPECT_EQ(*at, 3);
      for (int s = 3; s < 5; ++s) {
        auto l = resumed->step(tok.data(), tgt.data(), 2);
        ASSERT_TRUE(l.is_ok()) << l.status().to_string();
        EXPECT_NEAR(*l, gpu_losses[static_cast<std::size_t>(s)],
                    1e-3f * gpu_losses[static_cast<std::size_t>(s)])
            << (d == ComputeDevice::kCuda ? "on the GPU" : "on the host") << ", step " << s + 1;
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memwall::train
