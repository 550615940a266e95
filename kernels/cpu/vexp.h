// Vectorised exp over an array, in place: AVX-512 (range reduction to 2^n * exp(r), |r| <= ln2/2, degree-6
// polynomial; relative error below 2e-7) when the CPU has it, std::exp otherwise. Inputs are clamped to
// [-87.3, 88.7] so the result stays finite and normal.
#pragma once

#include <cstddef>

namespace memwall::kernels {

void exp_inplace(float* data, std::size_t n);

namespace detail {
void exp_inplace_avx512(float* data, std::size_t n);
}

}  // namespace memwall::kernels
