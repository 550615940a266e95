// The device tier on a real GPU: one cudaMalloc'd arena per rank (host::Arena bookkeeping over it, no caching
// allocator: the planner decides every buffer, so nothing is allocated or freed on the hot path), streams for
// compute, host-to-device, device-to-host and collectives, events for the Schedule's cross-stream
// dependencies, and page-locking of host buffers (cudaHostRegister) for the I/O library's pinned pool, so
// NVMe -> pinned -> GPU copies are truly asynchronous. Compiled only with CUDA (MEMWALL_HAVE_CUDA); every
// CUDA error becomes a Status naming the call.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/host/arena.h"

namespace memwall::gpu {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
};

// Usable GPUs: 0 without a driver, without a device or on error (the reason in `why` when given).
int device_count(std::string* why = nullptr);

class Stream {
 public:
  static Result<Stream> create();  // a non-blocking stream on the current device
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&&) = delete;
  ~Stream();
  void* get() const { return s_; }  // cudaStream_t
  Status synchronize() const;

 private:
  explicit Stream(void* s) : s_(s) {}
  void* s_ = nullptr;
};

// A completion marker: record() on the stream that produces, wait() on the stream that consumes.
class Event {
 public:
  static Result<Event> create(bool timing = false);  // without timing: the cheapest to wait on
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&&) = delete;
  ~Event();
  Status record(const Stream& on);
  Status wait(const Stream& on) const;  // `on` waits for the last record(), without blocking the host
  Status synchronize() const;           // the host waits
  bool done() const;
  // Milliseconds between two completed records of timing events (on any streams of one device).
  static Result<double> elapsed_ms(const Event& from, const Event& to);

 private:
  explicit Event(void* e) : e_(e) {}
  void* e_ = nullptr;
};

class Device {
 public:
  // Selects GPU `ordinal` for this thread, reserves `arena_bytes` with one cudaMalloc and creates the
  // streams. Fails (out of memory naming what is free) when the arena does not fit.
  static Result<std::unique_ptr<Device>> open(int ordinal, std::size_t arena_bytes);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  host::Arena& arena() { return *arena_; }
  const Stream& compute() const { return compute_; }
  const Stream& h2d() const { return h2d_; }
  const Stream& d2h() const { return d2h_; }
  const Stream& comm() const { return comm_; }

  // Asynchronous copies on `on` (host memory should be registered or pinned for real asynchrony).
  Status copy_to_device(void* dst, const void* src, std::size_t bytes, const Stream& on);
  Status copy_to_host(void* dst, const void* src, std::size_t bytes, const Stream& on);
  Status synchronize();  // every stream of this device

 private:
  Device(DeviceInfo info, void* base, std::unique_ptr<host::Arena> arena, Stream compute, Stream h2d,
         Stream d2h, Stream comm);
  DeviceInfo info_;
  void* base_ = nullptr;
  std::unique_ptr<host::Arena> arena_;
  Stream compute_, h2d_, d2h_, comm_;
};

// Page-locks [p, p + bytes) for the GPU (cudaHostRegister) / undoes it.
Status register_host(void* p, std::size_t bytes);
void unregister_host(void* p, std::size_t bytes);

}  // namespace memwall::gpu
