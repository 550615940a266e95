// One GPU, no offload: the GPT on kernels/cuda (fp32 or bf16 GEMMs on cuBLAS) for a few training steps of
// model + fused Adam, timed with the device synchronised around each step. Prints the step time and achieved
// TFLOP/s (6 x params x tokens + the attention's 12 x L x B x T^2 x C, the convention of the paper's Eq. 7
// without recomputation) and the device memory used. Used by scripts/gpu-check.sh.
// Usage: memwall-cuda-gpt-bench [layers=20] [channels=2048] [heads=16] [batch=4] [seq=1024] [steps=5]
// [fp32|bf16] [unfused|flash]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda/adam.h"
#include "engine/cuda/device.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_cuda.h"

using namespace memwall;

int main(int argc, char** argv) {
  auto arg = [&](int i, int d) { return argc > i ? std::atoi(argv[i]) : d; };
  model::GptConfig c;
  c.layers = arg(1, 20);
  c.channels = arg(2, 2048);
  c.heads = arg(3, 16);
  const int B = arg(4, 4), T = arg(5, 1024), steps = arg(6, 5);
  const bool bf16 = argc > 7 && std::string(argv[7]) == "bf16";
  const bool flash = argc > 8 && std::string(argv[8]) == "flash";
  c.vocab = 50304;
  c.max_seq = T;
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::fprintf(stderr, "memwall-cuda-gpt-bench: %s\n", why.c_str());
    return 2;
  }
  const std::size_t n = model::gpt_num_params(c);
  // The device tier: 90% of what is free (parameters, gradients and Adam moments take 16 bytes per
  // parameter; the rest holds the activations).
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaSetDevice(0);
  cudaMemGetInfo(&free_bytes, &total_bytes);
  auto dev = gpu::Device::open(0, free_bytes / 10 * 9);
  if (!dev.is_ok()) {
    std::fprintf(stderr, "memwall-cuda-gpt-bench: %s\n", dev.status().message().c_str());
    return 1;
  }
  gpu::Device& d = **dev;
  auto model = model::CudaGptModel::create(c, B, T, 1, d, bf16, 0, flash);
  if (!model.is_ok()) {
    std::fprintf(stderr, "memwall-cuda-gpt-bench: %s\n", model.status().message().c_str());
    return 1;
  }
  std::vector<float> host(n);
  model::gpt_init(c, host.data(), 1);
  auto alloc = [&](const char* what) {
    auto b = d.arena().allocate(n * 4, what);
    if (!b.is_ok()) {
      std::fprintf(stderr, "memwall-cuda-gpt-bench: %s\n", b.status().message().c_str());
      std::exit(1);
    }
    return static_cast<float*>(b->data);
  };
  float *p = alloc("params"), *g = alloc("grads"), *m = alloc("exp_avg"), *v = alloc("exp_avg_sq");
  cudaMemcpy(p, host.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemset(m, 0, n * 4);
  cudaMemset(v, 0, n * 4);
  std::vector<int> tok(static_cast<std::size_t>(B) * T), tgt(tok.size());
  for (std::size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int>((i * 7919) % static_cast<std::size_t>(c.vocab));
    tgt[i] = static_cast<int>((i * 104729 + 1) % static_cast<std::size_t>(c.vocab));
  }
  const double tokens = static_cast<double>(B) * T;
  const double flops = 6.0 * static_cast<double>(n) * tokens +
                       12.0 * c.layers * static_cast<double>(B) * T * static_cast<double>(T) * c.channels;
  kernels::AdamHyper h;
  h.lr = 1e-4f;
  std::vector<double> times;
  float loss = 0;
  for (int s = 0; s <= steps; ++s) {
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    cudaMemsetAsync(g, 0, n * 4, static_cast<cudaStream_t>(d.compute().get()));
    auto l = (*model)->forward(p, tok.data(), tgt.data());
    Status st = l.is_ok() ? (*model)->backward(p, g) : l.status();
    kernels::cuda::AdamDeviceArrays a{p, m, v, g, nullptr, n};
    h.step = s + 1;
    if (st.is_ok() && kernels::cuda::adam_step(a, h, d.compute().get()) != 0)
      st = Status::internal("adam launch");
    if (st.is_ok()) st = d.synchronize();
    if (!st.is_ok()) {
      std::fprintf(stderr, "memwall-cuda-gpt-bench: step %d: %s\n", s, st.message().c_str());
      return 1;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) times.push_back(dt);  // step 0 warms cuBLAS up
    loss = *l;
  }
  double mean = 0;
  for (double t : times) mean += t / static_cast<double>(times.size());
  std::printf("GPU                 %s (sm_%d%d, %d SMs)\n", d.info().name.c_str(), d.info().sm_major,
              d.info().sm_minor, d.info().multiprocessors);
  std::printf("model               %.3f B parameters: %d layers, %d channels, %d heads, vocab %d\n", n / 1e9,
              c.layers, c.channels, c.heads, c.vocab);
  std::printf("batch               %d x %d tokens, %s GEMMs (cuBLAS), %s, fused Adam on the GPU\n", B, T,
              bf16 ? "bf16 (fp32 accumulation)" : "fp32 (no TF32)",
              flash ? "flash attention (fp32 fused kernels)"
                    : (bf16 ? "unfused attention (TF32 GEMMs)" : "unfused attention (fp32 GEMMs)"));
  std::printf("step                %.1f ms (mean of %zu after a warm-up), last loss %.4f\n", mean * 1e3,
              times.size(), static_cast<double>(loss));
  std::printf("achieved            %.1f TFLOP/s (%.3g FLOP per step)\n", flops / mean / 1e12, flops);
  std::printf("device memory       %.2f GiB used of the %.2f GiB arena (activations %.2f GiB)\n",
              static_cast<double>(d.arena().peak()) / (1u << 30),
              static_cast<double>(d.arena().capacity()) / (1u << 30),
              static_cast<double>((*model)->activation_bytes()) / (1u << 30));
  return 0;
}
