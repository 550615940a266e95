// A host emulation of the slice of the CUDA runtime memwall uses, for checking the GPU code paths' plumbing
// on machines without a GPU (the `cuda_emulated_tests` suite). It is strict where real GPUs are forgiving:
//
// - device memory (cudaMalloc) is mapped PROT_NONE except while emulated GPU work runs, so host code that
//   reads or writes device memory directly crashes instead of working by accident;
// - work on a stream is queued, not run: it runs only when the host waits for it (cudaStreamSynchronize,
//   cudaEventSynchronize / Query, cudaDeviceSynchronize, a synchronous copy) or when another stream's queued
//   work waits on one of its events, so a missing synchronisation shows up as stale data;
// - every kernel's pointer arguments must lie inside one device allocation, and copies must go the way
//   their cudaMemcpyKind says;
// - work on two streams that touches the same device bytes (one of them writing) must be ordered by an event
//   wait or a host synchronisation: vector clocks per stream and one for the host (all host threads
//   together: the emulator sees their calls in one real-time order) find such races when the second piece
//   of work is queued, whatever order the lazy streams later run in.
//
// MEMWALL_EMULATED_NO_PINNING makes cudaHostRegister fail, as some sandboxed drivers do.
// MEMWALL_EMULATED_GPUS (default 1) devices share MEMWALL_EMULATED_GPU_BYTES (default 2 GiB) of memory; each
// process has its own emulation, so MPI ranks are separate machines (NCCL over MPI: nccl.cpp).
//
// In cuda_emulated_tests and memwall-emulated-gpu the "kernels" are the kernels/cpu operators
// (tests/cuda/emulation/kernels.cpp), so results match the CPU model closely and what is checked is
// everything around the kernels; cuda_simt_tests runs kernels/cuda's own kernels on this runtime instead
// (tests/cuda/simt), and cuda_tests runs them on a real GPU.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace memwall::emulated_gpu {

// A range of device memory that queued work reads or writes.
struct Access {
  const void* p;
  std::size_t bytes;
  bool write;
};

// Queues `work` on `stream` (null: the legacy default stream, which runs it at once), which reads and
// writes the device memory `access` lists. Returns 0, or an error (with a line on stderr) when the work
// races with earlier work of another stream: they touch the same bytes, one of them writes, and no event or
// host synchronisation orders them.
int enqueue(void* stream, std::function<void()> work, const std::vector<Access>& access = {},
            const char* what = "work");
// 0 when [p, p + bytes) lies inside one device allocation; else an error code, with a line on stderr naming
// `what`.
int check_device(const void* p, std::size_t bytes, const char* what);
// Records `error` (a cudaError_t) for cudaGetLastError with a line on stderr; returns it.
int report(int error, const std::string& what);

}  // namespace memwall::emulated_gpu
