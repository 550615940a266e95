// Scalar fp32 <-> bf16 casts: the reference the vectorised and CUDA casts are tested against.
#include "cpu/cast.h"

#include <cstring>

namespace memwall::kernels {

void cast_f32_to_bf16_ref(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
      out[i] = static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
      continue;
    }
    const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
    out[i] = static_cast<std::uint16_t>((bits + rounding) >> 16);
  }
}

void cast_bf16_to_f32_ref(const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof bits);
  }
}

}  // namespace memwall::kernels
