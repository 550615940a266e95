// Precision casts between fp32 and bfloat16 on raw arrays (scalar reference; SIMD paths come later).
// bf16 is stored as uint16_t. fp32 -> bf16 rounds to nearest even; NaN stays NaN (quiet).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memwall::kernels {

void cast_f32_to_bf16_ref(const float* in, std::uint16_t* out, std::size_t n);
void cast_bf16_to_f32_ref(const std::uint16_t* in, float* out, std::size_t n);

}  // namespace memwall::kernels
