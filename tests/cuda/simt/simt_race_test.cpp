// The host SIMT emulation under ThreadSanitizer (cuda_simt_race_tests): the happens-before edges it gives
// TSan are CUDA's within a block (simt.cpp, namespace tsan), so correct kernels run clean while a missing
// barrier between threads of a block is reported as a data race; blocks are ordered one after another
// (the emulator's, not CUDA's, order), so races between blocks are not found. The same binary runs every
// kernel test (kernels_test.cpp) this way; ctest sets TSAN_OPTIONS=halt_on_error=1, so any race in a kernel
// fails it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "cuda/simt/sample_kernels.h"
#include "cuda/simt/simt.h"

namespace memwall::simt {
namespace {

using samples::block_sum_kernel;

__global__ void neighbour_kernel(float* out, bool sync) {
  __shared__ float slot[64];
  slot[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (sync) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

// Every thread of every block adds its input into out[0] with atomicAdd (not a race).
__global__ void total_kernel(const float* in, float* out) {
  atomicAdd(out, in[blockIdx.x * blockDim.x + threadIdx.x]);
}

// Every thread adds into out[blockIdx.x] without an atomic: a race between the threads of a block.
__global__ void racy_total_kernel(const float* in, float* out) {
  out[blockIdx.x] += in[blockIdx.x * blockDim.x + threadIdx.x];
}

// Device buffers of n floats; the grid runs at once on the legacy stream.
struct Buffers {
  explicit Buffers(std::size_t n) {
    EXPECT_EQ(cudaMalloc(&in, n * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&out, n * 4), cudaSuccess);
    std::vector<float> ones(n, 1.0f);
    EXPECT_EQ(cudaMemcpy(in, ones.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemset(out, 0, n * 4), cudaSuccess);
  }
  ~Buffers() {
    cudaFree(in);
    cudaFree(out);
  }
  float* f(void* p) { return static_cast<float*>(p); }
  void* in = nullptr;
  void* out = nullptr;
};

TEST(SimtRace, CorrectKernelsRunClean) {
  Buffers b(512);
  launch(block_sum_kernel, "block_sum_kernel", dim3(2), dim3(256))(b.f(b.in), b.f(b.out));
  launch(neighbour_kernel, "neighbour_kernel", dim3(2), dim3(64))(b.f(b.out), true);
  launch(total_kernel, "total_kernel", dim3(8), dim3(32))(b.f(b.in), b.f(b.out));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float total = 0;
  ASSERT_EQ(cudaMemcpy(&total, b.out, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(total, 1.0f + 256.0f);  // neighbour_kernel left slot 1's value there
}

class SimtRaceDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    ::setenv("TSAN_OPTIONS", "halt_on_error=1", 1);  // read by the death test's child at start-up
  }
};

TEST_F(SimtRaceDeathTest, AMissingBarrierIsADataRace) {
  Buffers b(64);
  EXPECT_DEATH(
      {
        launch(neighbour_kernel, "neighbour_kernel", dim3(1), dim3(64))(b.f(b.out), false);
        (void)cudaDeviceSynchronize();
      },
      "ThreadSanitizer: data race");
}

TEST_F(SimtRaceDeathTest, ThreadsOfABlockAddingWithoutAnAtomicIsADataRace) {
  Buffers b(64);
  EXPECT_DEATH(
      {
        launch(racy_total_kernel, "racy_total_kernel", dim3(1), dim3(64))(b.f(b.in), b.f(b.out));
        (void)cudaDeviceSynchronize();
      },
      "ThreadSanitizer: data race");
}

}  // namespace
}  // namespace memwall::simt
