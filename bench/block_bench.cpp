// One GPT-2 transformer block, forward and backward, built from memwall's CPU operators: median ms per
// forward+backward. Usage: memwall-block-bench [fp32|bf16] [B=4] [T=512] [C=1024] [NH=16] [iters=5]
// bf16: every matmul (forward and backward) runs on bf16 operands with fp32 accumulation, like PyTorch's
// bf16 autocast; everything else stays fp32.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/cast.h"
#include "cpu/gpt_ops.h"

using namespace memwall::kernels;

namespace {
std::vector<float> randn(std::size_t n, unsigned seed, float s) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
struct Bf16 {
  std::vector<std::uint16_t> v;
  const std::uint16_t* of(const std::vector<float>& f) {
    v.resize(f.size());
    cast_f32_to_bf16(f.data(), v.data(), f.size());
    return v.data();
  }
};
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "fp32";
  const int B = argc > 2 ? std::atoi(argv[2]) : 4, T = argc > 3 ? std::atoi(argv[3]) : 512,
            C = argc > 4 ? std::atoi(argv[4]) : 1024, NH = argc > 5 ? std::atoi(argv[5]) : 16,
            iters = argc > 6 ? std::atoi(argv[6]) : 5;
  if (mode != "fp32" && mode != "bf16") {
    std::fprintf(stderr, "memwall-block-bench: mode must be fp32 or bf16, got '%s'\n", mode.c_str());
    return 2;
  }
  if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0 || iters < 1) {
    std::fprintf(stderr, "memwall-block-bench: need B,T,C,NH,ITERS >= 1 and C divisible by NH\n");
    return 2;
  }
  const bool bf16 = mode == "bf16";
  const int N = B * T, F = 4 * C;
  // Parameters.
  auto ln1w = std::vector<float>(C, 1.0f), ln1b = std::vector<float>(C, 0.0f), ln2w = ln1w, ln2b = ln1b;
  auto wqkv = randn(3 * C * C, 1, 0.02f), bqkv = std::vector<float>(3 * C, 0.0f);
  auto wproj = randn(C * C, 2, 0.02f), bproj = std::vector<float>(C, 0.0f);
  auto wfc1 = randn(F * C, 3, 0.02f), bfc1 = std::vector<float>(F, 0.0f);
  auto wfc2 = randn(C * F, 4, 0.02f), bfc2 = std::vector<float>(C, 0.0f);
  // Gradients.
  std::vector<float> g_ln1w(C), g_ln1b(C), g_ln2w(C), g_ln2b(C), g_wqkv(wqkv.size()), g_bqkv(3 * C),
      g_wproj(wproj.size()), g_bproj(C), g_wfc1(wfc1.size()), g_bfc1(F), g_wfc2(wfc2.size()), g_bfc2(C);
  // Activations.
  auto x = randn(static_cast<std::size_t>(N) * C, 5, 1.0f);
  const auto dy = randn(static_cast<std::size_t>(N) * C, 6, 1.0f);
  std::vector<float> ln1(N * C), m1(N), r1(N), qkv(static_cast<std::size_t>(N) * 3 * C),
      att(static_cast<std::size_t>(B) * NH * T * T), atty(N * C), proj(N * C), res(N * C), ln2(N * C), m2(N),
      r2(N), fc1(static_cast<std::size_t>(N) * F), gel(static_cast<std::size_t>(N) * F), fc2(N * C), y(N * C);
  std::vector<float> d_res(N * C), d_gel(static_cast<std::size_t>(N) * F),
      d_fc1(static_cast<std::size_t>(N) * F), d_ln2(N * C), d_atty(N * C),
      d_qkv(static_cast<std::size_t>(N) * 3 * C), d_ln1(N * C), d_x(N * C);
  Bf16 a16, w16, d16;
  auto linear = [&](float* out, const std::vector<float>& in, const std::vector<float>& w,
                    const std::vector<float>& b, int ic, int oc) {
    if (bf16) {
      matmul_forward_bf16(out, a16.of(in), w16.of(w), b.data(), N, ic, oc);
    } else {
      matmul_forward(out, in.data(), w.data(), b.data(), N, ic, oc);
    }
  };
  auto linear_back = [&](float* din, std::vector<float>& dw, std::vector<float>& db,
                         const std::vector<float>& dout, const std::vector<float>& in,
                         const std::vector<float>& w, int ic, int oc) {
    if (bf16) {
      matmul_backward_bf16(din, dw.data(), db.data(), dout.data(), d16.of(dout), a16.of(in), w16.of(w), N, ic,
                           oc);
    } else {
      matmul_backward(din, dw.data(), db.data(), dout.data(), in.data(), w.data(), N, ic, oc);
    }
  };
  std::vector<double> ms;
  for (int it = 0; it <= iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    // forward
    layernorm_forward(ln1.data(), m1.data(), r1.data(), x.data(), ln1w.data(), ln1b.data(), N, C);
    linear(qkv.data(), ln1, wqkv, bqkv, C, 3 * C);
    attention_forward(atty.data(), att.data(), qkv.data(), B, T, C, NH);
    linear(proj.data(), atty, wproj, bproj, C, C);
    for (std::size_t i = 0; i < res.size(); ++i) res[i] = x[i] + proj[i];
    layernorm_forward(ln2.data(), m2.data(), r2.data(), res.data(), ln2w.data(), ln2b.data(), N, C);
    linear(fc1.data(), ln2, wfc1, bfc1, C, F);
    gelu_forward(gel.data(), fc1.data(), gel.size());
    linear(fc2.data(), gel, wfc2, bfc2, F, C);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = res[i] + fc2[i];
    // backward (dy into y; residuals pass gradients through)
    std::copy(dy.begin(), dy.end(), d_res.begin());
    std::fill(d_gel.begin(), d_gel.end(), 0.0f);
    linear_back(d_gel.data(), g_wfc2, g_bfc2, dy, gel, wfc2, F, C);
    std::fill(d_fc1.begin(), d_fc1.end(), 0.0f);
    gelu_backward(d_fc1.data(), fc1.data(), d_gel.data(), d_fc1.size());
    std::fill(d_ln2.begin(), d_ln2.end(), 0.0f);
    linear_back(d_ln2.data(), g_wfc1, g_bfc1, d_fc1, ln2, wfc1, C, F);
    layernorm_backward(d_res.data(), g_ln2w.data(), g_ln2b.data(), d_ln2.data(), res.data(), ln2w.data(),
                       m2.data(), r2.data(), N, C);
    std::fill(d_atty.begin(), d_atty.end(), 0.0f);
    linear_back(d_atty.data(), g_wproj, g_bproj, d_res, atty, wproj, C, C);
    std::fill(d_qkv.begin(), d_qkv.end(), 0.0f);
    attention_backward(d_qkv.data(), d_atty.data(), qkv.data(), att.data(), B, T, C, NH);
    std::fill(d_ln1.begin(), d_ln1.end(), 0.0f);
    linear_back(d_ln1.data(), g_wqkv, g_bqkv, d_qkv, ln1, wqkv, C, 3 * C);
    std::copy(d_res.begin(), d_res.end(), d_x.begin());
    layernorm_backward(d_x.data(), g_ln1w.data(), g_ln1b.data(), d_ln1.data(), x.data(), ln1w.data(),
                       m1.data(), r1.data(), N, C);
    const double dt =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (it > 0) ms.push_back(dt);
  }
  std::sort(ms.begin(), ms.end());
  // bf16 on a CPU without bf16 GEMM kernels widens the operands to fp32 (said, since it times fp32 GEMMs).
  const std::string matmul = std::string(matmul_backend()) +
                             (mode == "bf16" && !matmul_bf16_native() ? " (bf16 widened to fp32)" : "");
  std::printf("{\"mode\": \"%s\", \"matmul\": \"%s\", \"B\": %d, \"T\": %d, \"C\": %d, \"ms\": %.2f}\n",
              mode.c_str(), matmul.c_str(), B, T, C, ms[ms.size() / 2]);
  return 0;
}
