// Adam: every SIMD path bitwise against the scalar reference (all gradient and output types, odd sizes,
// unaligned pointers, thread counts), PyTorch's formula in double precision, the overflow check, and the
// scalar fp16 conversions against the F16C instructions.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/adam.h"
#include "cpu/half.h"

namespace memwall::kernels {
namespace {

struct State {
  std::vector<float> p, m, v;
  std::vector<float> g32;
  std::vector<std::uint16_t> g16, out;
};

State make_state(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  State s;
  s.p.resize(n + 1);
  s.m.resize(n + 1);
  s.v.resize(n + 1);
  s.g32.resize(n + 1);
  s.g16.resize(n + 1);
  s.out.resize(n + 1);
  for (std::size_t i = 0; i <= n; ++i) {
    s.p[i] = d(rng);
    s.m[i] = 0.1f * d(rng);
    s.v[i] = std::fabs(0.01f * d(rng));
    s.g32[i] = 100.0f * d(rng);
  }
  return s;
}

AdamArrays arrays(State& s, std::size_t n, std::size_t shift, DType grad, bool out16, DType out_type) {
  AdamArrays a;
  a.params = s.p.data() + shift;
  a.exp_avg = s.m.data() + shift;
  a.exp_avg_sq = s.v.data() + shift;
  a.n = n;
  a.grad_type = grad;
  if (grad == DType::kF32) {
    a.grads = s.g32.data() + shift;
  } else {
    for (std::size_t i = 0; i < s.g32.size(); ++i) {
      s.g16[i] = grad == DType::kF16 ? float_to_half(s.g32[i] / 100.0f) : static_cast<std::uint16_t>([&] {
        std::uint32_t b;
        std::memcpy(&b, &s.g32[i], 4);
        return b >> 16;
      }());
    }
    a.grads = s.g16.data() + shift;
  }
  if (out16) {
    a.params_out = s.out.data() + shift;
    a.out_type = out_type;
  }
  return a;
}

TEST(Adam, SimdPathsMatchTheScalarReferenceBitwise) {
  const Isa best = best_isa();
  std::vector<Isa> isas = {Isa::kAvx2};
  if (best == Isa::kAvx512) isas.push_back(Isa::kAvx512);
  if (best == Isa::kScalar) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  AdamHyper hypers[4];
  hypers[1].decoupled = true;
  hypers[1].weight_decay = 0.01f;
  hypers[2].weight_decay = 0.01f;  // L2 (Adam)
  hypers[3].grad_scale = 1024.0f;
  hypers[3].step = 1000;
  for (Isa isa : isas) {
    for (DType grad : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int out = 0; out < 3; ++out) {
        for (const AdamHyper& h : hypers) {
          for (std::size_t n : {0, 1, 7, 15, 16, 17, 1000, 4099, 70001}) {  // the last: 3 threads' ranges
            for (std::size_t shift : {0, 1}) {
              for (int threads : {1, 3}) {
                State ref = make_state(n, static_cast<unsigned>(n) + 7), simd = ref;
                const DType out_type = out == 2 ? DType::kF16 : DType::kBF16;
                ASSERT_TRUE(
                    adam_step_isa(Isa::kScalar, arrays(ref, n, shift, grad, out > 0, out_type), h, 1));
                ASSERT_TRUE(adam_step_isa(isa, arrays(simd, n, shift, grad, out > 0, out_type), h, threads));
                const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n);
                EXPECT_EQ(std::memcmp(ref.p.data(), simd.p.data(), ref.p.size() * 4), 0) << where;
                EXPECT_EQ(std::memcmp(ref.m.data(), simd.m.data(), ref.m.size() * 4), 0) << where;
                EXPECT_EQ(std::memcmp(ref.v.data(), simd.v.data(), ref.v.size() * 4), 0) << where;
                EXPECT_EQ(std::memcmp(ref.out.data(), simd.out.data(), ref.out.size() * 2), 0) << where;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Adam, FollowsPyTorchsFormula) {
  // torch.optim.Adam / AdamW in double precision over 10 steps.
  for (bool decoupled : {false, true}) {
    const std::size_t n = 257;
    State s = make_state(n, 3);
    std::vector<double> p(s.p.begin(), s.p.end()), m(s.m.begin(), s.m.end()), v(s.v.begin(), s.v.end());
    AdamHyper h;
    h.lr = 1e-3f;
    h.weight_decay = 0.05f;
    h.decoupled = decoupled;
    for (long t = 1; t <= 10; ++t) {
      h.step = t;
      ASSERT_TRUE(adam_step(arrays(s, n, 0, DType::kF32, false, DType::kBF16), h, 2));
      for (std::size_t i = 0; i < n; ++i) {
        double g = s.g32[i];
        if (!decoupled) g += 0.05 * p[i];
        if (decoupled) p[i] *= 1.0 - 1e-3 * 0.05;
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
        p[i] -= 1e-3 / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(s.p[i], p[i], 1e-5 * std::max(1.0, std::fabs(p[i]))) << i;
    }
  }
}

TEST(Adam, SkipsTheStepWhenAGradientOverflows) {
  const std::size_t n = 100;
  State s = make_state(n, 5);
  s.g32[37] = std::numeric_limits<float>::infinity();
  const State before = s;
  AdamHyper h;
  EXPECT_FALSE(adam_step(arrays(s, n, 0, DType::kF32, false, DType::kBF16), h, 2, /*check_finite=*/true));
  EXPECT_EQ(s.p, before.p);
  EXPECT_EQ(s.m, before.m);
  s.g32[37] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(grads_finite(s.g32.data(), DType::kF32, n, 1.0f, 3));
  s.g32[37] = 1.0f;
  EXPECT_TRUE(grads_finite(s.g32.data(), DType::kF32, n, 1.0f, 3));
  EXPECT_TRUE(adam_step(arrays(s, n, 0, DType::kF32, false, DType::kBF16), h, 2, true));
  // In the last of three threads' ranges.
  const std::size_t big = 70001;
  State l = make_state(big, 6);
  l.g32[big - 2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(grads_finite(l.g32.data(), DType::kF32, big, 1.0f, 3));
  l.g32[big - 2] = 0.5f;
  EXPECT_TRUE(grads_finite(l.g32.data(), DType::kF32, big, 1.0f, 3));
}

// Gradient clipping's sum of squares: the same bits on any number of threads, within rounding of the plain
// sum, exact on small integers.
TEST(Adam, SumOfSquaresIsThreadCountIndependent) {
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{3}, std::size_t{1000}, (std::size_t{1} << 20) + 977}) {
    std::mt19937 rng(static_cast<std::uint32_t>(n));
    std::normal_distribution<float> d(0.0f, 2.0f);
    std::vector<float> x(n);
    double plain = 0;
    for (float& v : x) {
      v = d(rng);
      plain += static_cast<double>(v) * static_cast<double>(v);
    }
    const double one = sum_of_squares(x.data(), n, 1);
    for (int threads : {2, 3, 7}) {
      const double many = sum_of_squares(x.data(), n, threads);
      EXPECT_EQ(std::memcmp(&one, &many, sizeof(double)), 0) << "n " << n << ", " << threads << " threads";
    }
    EXPECT_NEAR(one, plain, 1e-12 * plain) << "n " << n;
  }
  const std::vector<float> small = {1, -2, 3};
  EXPECT_EQ(sum_of_squares(small.data(), small.size()), 14.0);
}

TEST(Half, ScalarConversionsMatchF16c) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float hw = _cvtsh_ss(static_cast<unsigned short>(h));
    const float sw = half_to_float(static_cast<std::uint16_t>(h));
    std::uint32_t a, b;
    std::memcpy(&a, &hw, 4);
    std::memcpy(&b, &sw, 4);
    EXPECT_EQ(a, b) << std::hex << h;
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x8000ffffu) | ((100u + rng() % 60u) << 23);  // mostly in half's range
    float f;
    std::memcpy(&f, &bits, 4);
    EXPECT_EQ(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT), float_to_half(f)) << std::hex << bits;
  }
}

}  // namespace
}  // namespace memwall::kernels
