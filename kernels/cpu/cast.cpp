// Scalar casts (the references) and the run-time dispatch to the vector versions.
#include "cpu/cast.h"

#include <cstring>

#include "cpu/adam.h"
#include "cpu/half.h"

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

void cast_f32_to_f16_ref(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
}

void cast_f16_to_f32_ref(const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
}

namespace {
bool has_avx512() {
  return best_isa() == Isa::kAvx512;
}
bool has_f16c() {
  return best_isa() != Isa::kScalar;
}  // AVX2 and AVX-512 paths both require F16C
}  // namespace

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::size_t n) {
  if (has_avx512()) return detail::cast_f32_to_bf16_avx512(in, out, n);
  cast_f32_to_bf16_ref(in, out, n);
}
void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::size_t n) {
  if (has_avx512()) return detail::cast_bf16_to_f32_avx512(in, out, n);
  cast_bf16_to_f32_ref(in, out, n);
}
void cast_f32_to_f16(const float* in, std::uint16_t* out, std::size_t n) {
  if (has_f16c()) return detail::cast_f32_to_f16_f16c(in, out, n);
  cast_f32_to_f16_ref(in, out, n);
}
void cast_f16_to_f32(const std::uint16_t* in, float* out, std::size_t n) {
  if (has_f16c()) return detail::cast_f16_to_f32_f16c(in, out, n);
  cast_f16_to_f32_ref(in, out, n);
}

}  // namespace memwall::kernels
