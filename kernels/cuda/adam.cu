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

}  // namespace

int adam_step(const AdamDeviceArrays& a, const AdamHyper& h, void* stream) {
  if (a.n == 0) return 0;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((a.n + threads - 1) / threads);
  adam_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(a, detail::adam_consts(h));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace memwall::kernels::cuda
