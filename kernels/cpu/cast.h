// Precision casts on raw arrays: fp32 <-> bfloat16 and fp32 <-> IEEE half, round to nearest even, NaN kept
// (quiet), bf16/fp16 stored as uint16_t. `cast_*` pick AVX-512 or F16C at run time; `*_ref` are the scalar
// references they are tested against bitwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memwall::kernels {

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::size_t n);
void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::size_t n);
void cast_f32_to_f16(const float* in, std::uint16_t* out, std::size_t n);
void cast_f16_to_f32(const std::uint16_t* in, float* out, std::size_t n);

void cast_f32_to_bf16_ref(const float* in, std::uint16_t* out, std::size_t n);
void cast_bf16_to_f32_ref(const std::uint16_t* in, float* out, std::size_t n);
void cast_f32_to_f16_ref(const float* in, std::uint16_t* out, std::size_t n);
void cast_f16_to_f32_ref(const std::uint16_t* in, float* out, std::size_t n);

namespace detail {
void cast_f32_to_bf16_avx512(const float* in, std::uint16_t* out, std::size_t n);
void cast_bf16_to_f32_avx512(const std::uint16_t* in, float* out, std::size_t n);
void cast_f32_to_f16_f16c(const float* in, std::uint16_t* out, std::size_t n);
void cast_f16_to_f32_f16c(const std::uint16_t* in, float* out, std::size_t n);
}  // namespace detail

}  // namespace memwall::kernels
