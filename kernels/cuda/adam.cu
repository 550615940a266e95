// Fused Adam / AdamW on the GPU (see adam.h). Built with -fmad=false: every fused multiply-add here is an
// explicit fmaf, as in the CPU reference.
#include <cuda_runtime.h>

#include "cuda/adam.h"

namespace memwall::kernels::cuda {

namespace {

// Round to nearest even; NaN kept quiet (the CPU reference's rule).
__device__ std::uint16_t to_bf16(float f) {
  const unsigned bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__global__ void adam_kernel(AdamDeviceArrays a, detail::AdamConsts c) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= a.n) return;
  float g = a.grads[i] * c.inv_scale;
  float p = a.params[i];
  if (c.l2 != 0.0f) g = fmaf(c.l2, p, g);
  const float m = fmaf(c.beta1, a.exp_avg[i], c.one_minus_beta1 * g);
  const float v = fmaf(c.beta2, a.exp_avg_sq[i], (c.one_minus_beta2 * g) * g);
  const float denom = fmaf(sqrtf(v), c.inv_sqrt_bc2, c.eps);
  p = p * c.decay;
  p = fmaf(c.neg_step_size, m / denom, p);
  a.params[i] = p;
  a.exp_avg[i] = m;
  a.exp_avg_sq[i] = v;
  if (a.params_bf16 != nullptr) a.params_bf16[i] = to_bf16(p);
}

// The pairwise sum of the block's values in s[0, kSquaresSplit) (tree_sum in kernels/cpu/adam.cpp).
__device__ double block_tree_sum(double* s) {
  for (int h = kSquaresSplit / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
  return s[0];
}

// Block b: its chunk's squares, thread t adding elements t, t + kSquaresSplit, ... of it.
__global__ void squares_kernel(const float* x, std::size_t n, std::size_t chunk, double* partials) {
  __shared__ double s[kSquaresSplit];
  const std::size_t first = blockIdx.x * chunk, begin = first < n ? first : n,
                    end = begin + chunk < n ? begin + chunk : n;
  double acc = 0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += kSquaresSplit) {
    const auto v = static_cast<double>(x[i]);
    acc += v * v;
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  const double sum = block_tree_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void squares_total_kernel(const double* partials, double* out) {
  __shared__ double s[kSquaresSplit];
  s[threadIdx.x] = partials[threadIdx.x];
  __syncthreads();
  const double sum = block_tree_sum(s);
  if (threadIdx.x == 0) *out = sum;
}

}  // namespace

int sum_of_squares(const float* x, std::size_t n, double* partials, double* out, void* stream) {
  const auto S = static_cast<std::size_t>(kSquaresSplit);
  auto* s = static_cast<cudaStream_t>(stream);
  squares_kernel<<<kSquaresSplit, kSquaresSplit, 0, s>>>(x, n, (n + S - 1) / S, partials);
  squares_total_kernel<<<1, kSquaresSplit, 0, s>>>(partials, out);
  return static_cast<int>(cudaGetLastError());
}

int adam_step(const AdamDeviceArrays& a, const AdamHyper& h, void* stream) {
  if (a.n == 0) return 0;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((a.n + threads - 1) / threads);
  adam_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(a, detail::adam_consts(h));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace memwall::kernels::cuda
