// fp32 <-> bf16 reference casts: exact values, round-to-nearest-even, NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cast.h"

namespace memwall::kernels {
namespace {

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(Cast, RoundTripsValuesExactlyRepresentableInBf16) {
  const std::vector<float> in = {0.0f, -0.0f, 1.0f, -2.5f, 65536.0f, 0.15625f, 3.0e38f};
  std::vector<std::uint16_t> mid(in.size());
  std::vector<float> out(in.size());
  cast_f32_to_bf16_ref(in.data(), mid.data(), in.size());
  cast_bf16_to_f32_ref(mid.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size() - 1; ++i) EXPECT_EQ(out[i], in[i]) << i;
  EXPECT_NEAR(out.back(), in.back(), static_cast<double>(in.back()) * 1e-2);
}

TEST(Cast, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to the even mantissa (1.0).
  const float in[] = {from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0x3f808001u)};
  std::uint16_t out[3];
  cast_f32_to_bf16_ref(in, out, 3);
  EXPECT_EQ(out[0], 0x3f80u);
  EXPECT_EQ(out[1], 0x3f82u);  // halfway above an odd mantissa rounds up to even
  EXPECT_EQ(out[2], 0x3f81u);  // just above halfway rounds up
}

TEST(Cast, KeepsNanAndInfinities) {
  const float in[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(), from_bits(0x7f800001u)};
  std::uint16_t mid[4];
  float out[4];
  cast_f32_to_bf16_ref(in, mid, 4);
  cast_bf16_to_f32_ref(mid, out, 4);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[2], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(out[3]));  // a signalling NaN with low mantissa bits must not become infinity
}

TEST(Cast, VectorCastsMatchTheReferencesBitwise) {
  std::mt19937 rng(3);
  for (std::size_t n : {0, 1, 7, 8, 15, 16, 17, 100, 1037}) {
    std::vector<float> f(n + 1);
    std::vector<std::uint16_t> h(n + 1);
    for (std::size_t i = 0; i <= n; ++i) {
      std::uint32_t bits = rng();
      if (i % 3) bits = (bits & 0x8000ffffu) | ((100u + rng() % 60u) << 23);
      std::memcpy(&f[i], &bits, 4);
      h[i] = static_cast<std::uint16_t>(rng());
    }
    for (std::size_t shift : {0, 1}) {  // unaligned too
      const std::size_t m = n - (shift && n ? 1 : 0);
      std::vector<std::uint16_t> a(n + 1), b(n + 1);
      std::vector<float> x(n + 1), y(n + 1);
      cast_f32_to_bf16(f.data() + shift, a.data(), m);
      cast_f32_to_bf16_ref(f.data() + shift, b.data(), m);
      EXPECT_EQ(a, b) << n;
      cast_f32_to_f16(f.data() + shift, a.data(), m);
      cast_f32_to_f16_ref(f.data() + shift, b.data(), m);
      EXPECT_EQ(a, b) << n;
      cast_bf16_to_f32(h.data() + shift, x.data(), m);
      cast_bf16_to_f32_ref(h.data() + shift, y.data(), m);
      EXPECT_EQ(std::memcmp(x.data(), y.data(), m * 4), 0) << n;
      cast_f16_to_f32(h.data() + shift, x.data(), m);
      cast_f16_to_f32_ref(h.data() + shift, y.data(), m);
      EXPECT_EQ(std::memcmp(x.data(), y.data(), m * 4), 0) << n;
    }
  }
}

TEST(Cast, ZeroLengthIsANoOp) {
  cast_f32_to_bf16_ref(nullptr, nullptr, 0);
  cast_bf16_to_f32_ref(nullptr, nullptr, 0);
}

}  // namespace
}  // namespace memwall::kernels
