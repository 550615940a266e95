// Runs kernels/cuda's own CUDA C++ on the host, for checking the kernels themselves on machines without a GPU
// (the `cuda_simt_tests` suite). tests/cuda/simt/cu2cpp.py turns each .cu file into C++ that includes this
// header first and launches kernels through memwall::simt::launch instead of `<<<...>>>`; the launch is
// queued on the emulated runtime's stream (tests/cuda/emulation), like any other GPU work.
//
// Every CUDA thread of a block is a fiber with its own stack; a block's fibers run one at a time on the
// thread that runs the stream's work, switching only at a barrier or shuffle, so the blocks of a grid run one
// after another and a static local is the block's shared memory. The next thread to run is always the first
// runnable one in the block's order, first to last in even blocks and last to first in odd ones, so the
// warps at one end race as far ahead of the others as barriers allow: a shared value read without the
// barrier that orders it after its write, or overwritten before a slower warp has read it, comes out wrong
// in one of the two orders. What it models:
//
// - __syncthreads(): every thread of the block that has not returned must arrive (threads that returned
//   count as arrived, as on current GPUs); threads waiting at different barriers, or a barrier some thread
//   never reaches, are reported as a deadlock naming the kernel;
// - __shfl_xor_sync over a full warp: all 32 lanes must take part (a lane that returned or does not exist
//   is an error), each reads its partner's value of the same call;
// - atomicAdd (one fiber runs at a time, so a plain add is atomic);
// - launch limits: at most 1024 threads per block (x, y <= 1024, z <= 64), no empty grid or block;
//   pointer arguments must point into device memory; no dynamic shared memory (the kernels use none).
//
// Not modelled: threads of a warp running in lock-step (code that relies on implicit warp synchronism
// without __syncwarp is not caught), the GPU's float rounding of expf/tanhf (the host's libm is used),
// dynamic shared memory. Races the two orders do not expose are ThreadSanitizer's to find: the
// cuda_simt_race_tests build gives TSan CUDA's happens-before edges (simt.cpp, namespace tsan).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#undef __global__
#undef __device__
#undef __shared__
#define __global__
#define __device__
// One block runs at a time: a static local is shared by the block's threads, as __shared__ memory is.
#define __shared__ static

// The built-in variables of the fiber running now.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

void __syncthreads();
float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32);
float atomicAdd(float* address, float v);
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

namespace memwall::simt {

// Runs `thread` for every thread of the grid (see the top of this file); false, with a line on stderr
// naming `kernel`, on a deadlock or a misused shuffle.
bool run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& thread);

// Checks the launch and queues run_grid on `stream`; returns 0 or a cudaError_t (also cudaGetLastError's).
int queue_grid(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
               const std::vector<const void*>& pointers, std::function<void()> thread);

template <typename... P>
class Launch {
 public:
  Launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, std::size_t shared_bytes,
         cudaStream_t stream)
      : kernel_(kernel), name_(name), grid_(grid), block_(block), shared_(shared_bytes), stream_(stream) {}

  // The arguments are converted to the kernel's parameter types and copied at launch, as CUDA does.
  template <typename... A>
  void operator()(A&&... a) const {
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    std::vector<const void*> pointers;
    std::apply([&](const auto&... v) { (add_pointer(pointers, v), ...); }, args);
    auto* kernel = kernel_;
    (void)queue_grid(name_, grid_, block_, shared_, stream_, pointers,
                     [kernel, args] { std::apply(kernel, args); });
  }

 private:
  template <typename T>
  static void add_pointer(std::vector<const void*>& out, const T& v) {
    if constexpr (std::is_pointer_v<T>) {
      if (v != nullptr) out.push_back(static_cast<const void*>(v));
    }
  }

  void (*kernel_)(P...);
  const char* name_;
  dim3 grid_, block_;
  std::size_t shared_;
  cudaStream_t stream_;
};

// `kernel<<<grid, block, shared_bytes, stream>>>(args)` becomes launch(kernel, "kernel", grid, block,
// shared_bytes, stream)(args).
template <typename... P>
Launch<P...> launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block,
                    std::size_t shared_bytes = 0, cudaStream_t stream = nullptr) {
  return Launch<P...>(kernel, name, grid, block, shared_bytes, stream);
}

}  // namespace memwall::simt
