// Adam dispatcher, the scalar reference body, and the finite-gradient check.
#include "cpu/adam.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "cpu/half.h"

namespace memwall::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "scalar";
}

Isa best_isa() {
  static const Isa kBest = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
      return Isa::kAvx2;
    }
    return Isa::kScalar;
  }();
  return kBest;
}

namespace detail {

float load_grad(const void* grads, DType type, std::size_t i) {
  switch (type) {
    case DType::kF32:
      return static_cast<const float*>(grads)[i];
    case DType::kBF16: {
      const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(grads)[i])
                                 << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kF16:
      return half_to_float(static_cast<const std::uint16_t*>(grads)[i]);
  }
  return 0;
}

namespace {
std::uint16_t to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
}  // namespace

void adam_range_scalar(const AdamArrays& a, const AdamConsts& c, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    float g = load_grad(a.grads, a.grad_type, i) * c.inv_scale;
    float p = a.params[i];
    if (c.l2 != 0.0f) g = std::fma(c.l2, p, g);
    const float m = std::fma(c.beta1, a.exp_avg[i], c.one_minus_beta1 * g);
    const float v = std::fma(c.beta2, a.exp_avg_sq[i], (c.one_minus_beta2 * g) * g);
    const float denom = std::fma(std::sqrt(v), c.inv_sqrt_bc2, c.eps);
    p = p * c.decay;
    p = std::fma(c.neg_step_size, m / denom, p);
    a.params[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    if (a.params_out) {
      auto* out = static_cast<std::uint16_t*>(a.params_out);
      out[i] = a.out_type == DType::kF16 ? float_to_half(p) : to_bf16(p);
    }
  }
}

AdamConsts adam_consts(const AdamHyper& h) {
  AdamConsts c;
  c.inv_scale = 1.0f / h.grad_scale;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = 1.0f - h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta2 = 1.0f - h.beta2;
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = h.eps;
  c.neg_step_size = static_cast<float>(-static_cast<double>(h.lr) / bc1);
  c.decay = h.decoupled ? 1.0f - h.lr * h.weight_decay : 1.0f;
  c.l2 = h.decoupled ? 0.0f : h.weight_decay;
  return c;
}

}  // namespace detail

namespace {

// Elements per thread: an even split in 64-element-aligned ranges, but at least 32K elements (half a MiB of
// states), so that a small tensor does not start more threads than its work is worth.
std::size_t chunk_of(std::size_t n, int threads) {
  const std::size_t t = static_cast<std::size_t>(std::max(1, threads));
  return std::max<std::size_t>(((n + t - 1) / t + 63) / 64 * 64, std::size_t{1} << 15);
}

// Runs body(begin, end) over [0, n) on up to `threads` threads, in chunk_of(n, threads) ranges.
template <typename Body>
void parallel_ranges(std::size_t n, int threads, Body body) {
  const std::size_t t = static_cast<std::size_t>(std::max(1, threads));
  const std::size_t chunk = chunk_of(n, threads);
  std::vector<std::thread> pool;
  for (std::size_t k = 1; k < t && k * chunk < n; ++k) {
    pool.emplace_back([&, k] { body(k * chunk, std::min(n, (k + 1) * chunk)); });
  }
  body(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

}  // namespace

bool grads_finite(const void* grads, DType type, std::size_t n, float scale, int threads) {
  std::vector<char> ok(static_cast<std::size_t>(std::max(1, threads)) + 1, 1);
  const float inv = 1.0f / scale;
  const std::size_t chunk = chunk_of(n, threads);
  parallel_ranges(n, threads, [&](std::size_t b, std::size_t e) {
    bool fine = true;
    for (std::size_t i = b; i < e && fine; ++i) fine = std::isfinite(detail::load_grad(grads, type, i) * inv);
    if (!fine) ok[chunk ? b / chunk : 0] = 0;
  });
  return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
}

namespace {
// The pairwise sum of v[0, kSquaresSplit) (v is overwritten), as a CUDA block's shared-memory tree.
double tree_sum(double* v) {
  for (int h = kSquaresSplit / 2; h > 0; h >>= 1) {
    for (int t = 0; t < h; ++t) v[t] += v[t + h];
  }
  return v[0];
}
}  // namespace

double sum_of_squares(const float* x, std::size_t n, int threads) {
  constexpr auto kS = static_cast<std::size_t>(kSquaresSplit);
  const std::size_t chunk = (n + kS - 1) / kS;
  double chunks[kSquaresSplit];
  parallel_ranges(kS, n >= (std::size_t{1} << 20) ? threads : 1, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t b = b0; b < b1; ++b) {
      double acc[kSquaresSplit] = {};
      const std::size_t begin = std::min(n, b * chunk), end = std::min(n, begin + chunk);
      for (std::size_t i = begin; i < end; ++i) {
        const auto v = static_cast<double>(x[i]);
        acc[(i - begin) % kS] += v * v;
      }
      chunks[b] = tree_sum(acc);
    }
  });
  return tree_sum(chunks);
}

bool adam_step_isa(Isa isa, const AdamArrays& a, const AdamHyper& h, int threads, bool check_finite) {
  if (check_finite && !grads_finite(a.grads, a.grad_type, a.n, h.grad_scale, threads)) return false;
  const detail::AdamConsts c = detail::adam_consts(h);
  auto body = isa == Isa::kAvx512 ? detail::adam_range_avx512
                                  : (isa == Isa::kAvx2 ? detail::adam_range_avx2 : detail::adam_range_scalar);
  parallel_ranges(a.n, threads, [&](std::size_t b, std::size_t e) { body(a, c, b, e); });
  return true;
}

Isa adam_isa() {
  static const Isa kChosen = [] {
    if (best_isa() != Isa::kAvx512) return best_isa();
    // 4M parameters (64 MiB of state): larger than the caches, like a real optimizer step.
    const std::size_t n = std::size_t{1} << 22;
    std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 1e-3f);
    const AdamArrays a = fp32_arrays(p.data(), m.data(), v.data(), g.data(), n);
    const int threads = static_cast<int>(std::max(1u, std::min(2u, std::thread::hardware_concurrency())));
    auto time_of = [&](Isa isa) {
      double best = 1e30;
      for (int r = 0; r < 3; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        adam_step_isa(isa, a, AdamHyper{}, threads);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    return time_of(Isa::kAvx2) <= time_of(Isa::kAvx512) ? Isa::kAvx2 : Isa::kAvx512;
  }();
  return kChosen;
}

bool adam_step(const AdamArrays& a, const AdamHyper& h, int threads, bool check_finite) {
  return adam_step_isa(adam_isa(), a, h, threads, check_finite);
}

}  // namespace memwall::kernels
