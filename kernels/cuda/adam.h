// Fused Adam / AdamW step on the GPU over fp32 master parameters, momentum and variance with fp32 gradients,
// optionally writing the updated parameters as bf16 (the 16-bit copy the forward pass reads). The same IEEE
// operations in the same order as kernels/cpu/adam.h's scalar reference (compiled without FMA contraction),
// so both agree bitwise. Device pointers; returns the launch's cudaError_t as int (0 = success).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/adam.h"

namespace memwall::kernels::cuda {

struct AdamDeviceArrays {
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const float* grads = nullptr;
  std::uint16_t* params_bf16 = nullptr;  // optional
  std::size_t n = 0;
};

int adam_step(const AdamDeviceArrays& a, const AdamHyper& h, void* stream);

// *out = the sum of squares of x[0, n) in double, bitwise kernels::sum_of_squares (kernels/cpu/adam.h):
// one block of kSquaresSplit threads per chunk, then one block over the chunks' sums. `partials` holds
// kSquaresSplit doubles of device scratch (the launches on one stream may share it). Device pointers.
int sum_of_squares(const float* x, std::size_t n, double* partials, double* out, void* stream);

}  // namespace memwall::kernels::cuda
