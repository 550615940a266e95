// A host emulation of the slice of the CUDA runtime memwall uses, for checking the GPU code paths' plumbing
// on machines without a GPU (the `cuda_emulated_tests` suite). It is strict where real GPUs are forgiving:
//
// - device memory (cudaMalloc) is mapped PROT_NONE except while emulated GPU work runs, so host code that
//   reads or writes device memory directly crashes instead of working by accident;
// - work on a stream is queued, not run: it runs only when the host waits for it (cudaStreamSynchronize,
//   cudaEventSynchronize / Query, cudaDeviceSynchronize, a synchronous copy) or when another stream's queued
//   work waits on one of its events, so a missing synchronisation shows up as stale data;
// - every kernel's pointer arguments must lie inside one device allocation, and copies must go the way
//   their cudaMemcpyKind says.
//
// MEMWALL_EMULATED_GPUS (default 1) devices share MEMWALL_EMULATED_GPU_BYTES (default 2 GiB) of memory; each
// process has its own emulation, so MPI ranks are separate machines (NCCL over MPI: nccl.cpp).
//
// The "kernels" are the kernels/cpu operators (tests/cuda/emulation/kernels.cpp), so results match the CPU
// model closely; what this checks is everything around the kernels, not the kernels themselves (those are
// checked against the CPU references on a real GPU by cuda_tests).
#pragma once

#include <cstddef>
#include <functional>

namespace memwall::emulated_gpu {

// Queues `work` on `stream` (null: the legacy default stream, which runs it at once). Returns 0.
int enqueue(void* stream, std::function<void()> work);
// 0 when [p, p + bytes) lies inside one device allocation; else an error code, with a line on stderr naming
// `what`.
int check_device(const void* p, std::size_t bytes, const char* what);

}  // namespace memwall::emulated_gpu
