// Small CUDA kernels the SIMT emulation's own tests run (simt_test.cpp, and simt_race_test.cpp under
// ThreadSanitizer).
#pragma once

#include "cuda/simt/simt.h"

namespace memwall::simt::samples {

// The sum of each block's values through shuffles and shared memory (the shape of kernels/cuda's
// block_reduce), with the barriers CUDA needs, including the one before `partial` is written again.
__global__ inline void block_sum_kernel(const float* in, float* out) {
  __shared__ float partial[32];
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
  __syncthreads();  // partial is free again
  if (lane == 0) partial[warp] = -v;
}

}  // namespace memwall::simt::samples
