// fp32 <-> bf16 casts on the GPU (round to nearest even), checked against kernels/cpu/cast.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/cast.h"

namespace memwall::kernels::cuda {

namespace {
__global__ void cast_f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}
__global__ void cast_bf16_to_f32_kernel(const __nv_bfloat16* in, float* out, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}
}  // namespace

int cast_bf16_to_f32(const void* in, float* out, size_t n, void* stream) {
  if (n == 0) return 0;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  cast_bf16_to_f32_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(in), out, n);
  return static_cast<int>(cudaGetLastError());
}

int cast_f32_to_bf16(const float* in, void* out, size_t n, void* stream) {
  if (n == 0) return 0;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  cast_f32_to_bf16_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, static_cast<__nv_bfloat16*>(out), n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace memwall::kernels::cuda
