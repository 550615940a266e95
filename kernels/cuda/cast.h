// CUDA casts on device pointers. Returns the cudaError_t of the launch as int (0 = success);
// `stream` is a cudaStream_t (nullptr = default stream). Kept free of CUDA headers for C++ callers.
#pragma once

#include <cstddef>

namespace memwall::kernels::cuda {

int cast_f32_to_bf16(const float* in, void* out, std::size_t n, void* stream);
int cast_bf16_to_f32(const void* in, float* out, std::size_t n, void* stream);

}  // namespace memwall::kernels::cuda
