// The host SIMT emulation itself (tests/cuda/simt): barriers, shuffles, the thread orders that expose a
// missing barrier, deadlocks, launch limits, and the emulated cuBLAS's argument checks. Kernels here are
// CUDA C++ compiled for the host through simt.h, as cu2cpp.py makes of kernels/cuda.
#include "cuda/simt/simt.h"

#include <gtest/gtest.h>

#include <vector>

#include "cuda/simt/sample_kernels.h"

namespace memwall::simt {
namespace {

using samples::block_sum_kernel;

TEST(Simt, ShufflesAndBarriersSumEachBlock) {
  const unsigned blocks = 3, threads = 256;
  std::vector<float> in(blocks * threads), out(blocks, -1.0f);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);
  const float* ip = in.data();
  float* op = out.data();
  ASSERT_TRUE(run_grid("block_sum_kernel", dim3(blocks), dim3(threads), [=] { block_sum_kernel(ip, op); }));
  for (unsigned b = 0; b < blocks; ++b) {
    float want = 0;
    for (unsigned t = 0; t < threads; ++t) want += in[b * threads + t];
    EXPECT_EQ(out[b], want) << "block " << b;
  }
}

// Each thread publishes its index, then reads its right neighbour's; `sync` says whether a barrier orders
// the read after the write.
__global__ void neighbour_kernel(unsigned* out, bool sync) {
  __shared__ unsigned slot[64];
  slot[threadIdx.x] = threadIdx.x + 1000 * blockIdx.x;
  if (sync) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

TEST(Simt, AMissingBarrierGivesStaleSharedValues) {
  for (const bool sync : {true, false}) {
    std::vector<unsigned> out(2 * 64, 0);
    unsigned* op = out.data();
    ASSERT_TRUE(run_grid("neighbour_kernel", dim3(2), dim3(64), [=] { neighbour_kernel(op, sync); }));
    std::size_t wrong = 0;
    for (unsigned b = 0; b < 2; ++b) {
      for (unsigned t = 0; t < 64; ++t) wrong += out[b * 64 + t] != (t + 1) % 64 + 1000 * b ? 1 : 0;
    }
    if (sync) {
      EXPECT_EQ(wrong, 0u);
    } else {
      EXPECT_GT(wrong, 0u) << "without the barrier every thread read a value already written";
    }
  }
}

// Threads of one block at different barriers: half return early, the rest wait forever behind a shuffle
// of a warp whose other lanes are waiting at __syncthreads.
__global__ void divergent_kernel(float* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  }
}

__global__ void partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<float>(threadIdx.x), 1);
}

__global__ void early_return_kernel(float* out) {
  if (threadIdx.x >= 16) return;  // returned threads count as arrived at the barrier
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

TEST(Simt, DeadlocksAndPartialWarpShufflesAreReported) {
  std::vector<float> out(64, 0.0f);
  float* op = out.data();
  EXPECT_FALSE(run_grid("divergent_kernel", dim3(1), dim3(64), [=] { divergent_kernel(op); }));
  EXPECT_FALSE(run_grid("partial_warp_kernel", dim3(1), dim3(40), [=] { partial_warp_kernel(op); }));
  EXPECT_TRUE(run_grid("early_return_kernel", dim3(1), dim3(64), [=] { early_return_kernel(op); }));
  EXPECT_EQ(out[15], 1.0f);
}

__global__ void grid_kernel(unsigned* out) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * gridDim.x * blockDim.x + x] = x + 100 * y;
}

TEST(Simt, TwoDimensionalGridsCoverEveryThreadOnce) {
  const dim3 grid(3, 2), block(4, 5);
  std::vector<unsigned> out(3 * 4 * 2 * 5, 0xffffffffu);
  unsigned* op = out.data();
  ASSERT_TRUE(run_grid("grid_kernel", grid, block, [=] { grid_kernel(op); }));
  for (unsigned y = 0; y < 10; ++y) {
    for (unsigned x = 0; x < 12; ++x) EXPECT_EQ(out[y * 12 + x], x + 100 * y);
  }
}

TEST(Simt, LaunchLimitsAndHostPointersAreErrors) {
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 1024), cudaSuccess);
  auto* d = static_cast<float*>(dev);
  std::vector<float> host(64);
  float* h = host.data();
  (void)cudaGetLastError();
  launch(partial_warp_kernel, "partial_warp_kernel", dim3(1), dim3(2048))(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch(partial_warp_kernel, "partial_warp_kernel", dim3(0), dim3(32))(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch(partial_warp_kernel, "partial_warp_kernel", dim3(1), dim3(32))(h);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevicePointer);
  launch(partial_warp_kernel, "partial_warp_kernel", dim3(1), dim3(32))(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dev);
}

__global__ void fill_kernel(float* out, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.0f;
}

TEST(SimtDeathTest, AKernelWritingPastItsAllocationIsStopped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 1000), cudaSuccess);  // 250 floats; the pages end 24 bytes later
  auto* d = static_cast<float*>(dev);
  launch(fill_kernel, "fill_kernel", dim3(1), dim3(256))(d, 250u);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // One float too many lands in the alignment slack (found after the kernel), many reach the guard page.
  EXPECT_DEATH(
      {
        launch(fill_kernel, "fill_kernel", dim3(1), dim3(256))(d, 251u);
        (void)cudaDeviceSynchronize();
      },
      "fill_kernel wrote past the end of the 1000-byte cudaMalloc allocation");
  EXPECT_DEATH(
      {
        launch(fill_kernel, "fill_kernel", dim3(2), dim3(256))(d, 300u);
        (void)cudaDeviceSynchronize();
      },
      "bytes past the end of a 1000-byte cudaMalloc allocation");
  cudaFree(dev);
}

TEST(Simt, EmulatedCublasChecksItsArguments) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 6 * 4), cudaSuccess);   // 2 x 3
  ASSERT_EQ(cudaMalloc(&b, 12 * 4), cudaSuccess);  // 3 x 4
  ASSERT_EQ(cudaMalloc(&c, 8 * 4), cudaSuccess);   // 2 x 4
  const std::vector<float> ha{1, 2, 3, 4, 5, 6}, hb{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  ASSERT_EQ(cudaMemcpy(a, ha.data(), 24, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b, hb.data(), 48, cudaMemcpyHostToDevice), cudaSuccess);
  const float one = 1.0f, zero = 0.0f;
  // Column-major C[2x4] = A[2x3] . B[3x4]: B's columns pick A's columns, the last sums them.
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 3, &one, a, CUDA_R_32F, 2, b, CUDA_R_32F, 3,
                         &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> hc(8);
  ASSERT_EQ(cudaMemcpy(hc.data(), c, 32, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(hc, (std::vector<float>{1, 2, 3, 4, 5, 6, 9, 12}));
  // A leading dimension below the rows, an operand larger than its allocation, mixed types.
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 3, &one, a, CUDA_R_32F, 1, b, CUDA_R_32F, 3,
                         &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 4, &one, a, CUDA_R_32F, 2, b, CUDA_R_32F, 4,
                         &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 3, &one, a, CUDA_R_16BF, 2, b, CUDA_R_32F, 3,
                         &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  (void)cudaGetLastError();
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

}  // namespace
}  // namespace memwall::simt
