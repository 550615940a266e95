// Scalar fp16 <-> fp32 conversions (IEEE binary16, round to nearest even, subnormals, inf and NaN): the
// reference for the F16C and AVX-512 paths.
#pragma once

#include <cstdint>
#include <cstring>

namespace memwall::kernels {

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0);  // inf, or quiet NaN
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet it and keep the top payload bits, as F16C does
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs & 0x7fffffu) >> 13));
  }
  if (abs == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {               // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    const std::uint32_t half_ulp = 1u << (shift - 1);
    std::uint32_t r = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1);
    if (rest > half_ulp || (rest == half_ulp && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const std::uint32_t rest = r & 0x1fffu;
  r >>= 13;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

}  // namespace memwall::kernels
