// PinnedPool: a bounded set of page-locked (mlock), 4 KiB-aligned host buffers reused for every NVMe and
// host-device transfer, so a few GB of pinned memory serve terabytes of offloaded state. An optional
// register/unregister hook pins them for the GPU too (cudaHostRegister, supplied by engine/cuda).
//
// A transfer larger than one buffer is streamed through the pool in buffer-sized chunks (write_through,
// read_through): never an assertion, as DeepSpeed's swapper does when a tensor exceeds its buffer.
// Thread-safe: acquire/release from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/status.h"
#include "engine/io/async_io.h"

namespace memwall::io {

class PinnedPool {
 public:
  struct Options {
    std::size_t buffer_bytes = 1 << 20;  // rounded up to 4 KiB
    int buffers = 4;
    std::uint64_t budget_bytes = 0;  // 0: no limit; otherwise buffers x buffer_bytes must fit it
    bool lock = true;                // mlock the buffers
    std::function<Status(void*, std::size_t)> register_fn;  // e.g. cudaHostRegister
    std::function<void(void*, std::size_t)> unregister_fn;
  };

  // A buffer on loan; returned to the pool when destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), index_(other.index_) { other.pool_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    char* data() const;
    std::size_t size() const;

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, int index) : pool_(pool), index_(index) {}
    PinnedPool* pool_;
    int index_;
  };

  static Result<std::unique_ptr<PinnedPool>> create(const Options& opt);
  // Buffer size for a plan: the largest shard it moves, rounded up to 4 KiB, but at most `max_bytes`
  // (larger shards are streamed through in chunks).
  static std::size_t buffer_size_for(std::uint64_t largest_shard_bytes, std::size_t max_bytes);
  ~PinnedPool();

  Lease acquire();                     // blocks until a buffer is free
  std::optional<Lease> try_acquire();  // nullopt when all are on loan
  int available() const;
  int buffers() const { return static_cast<int>(buffers_.size()); }
  std::size_t buffer_bytes() const { return buffer_bytes_; }
  bool locked() const { return locked_; }

 private:
  PinnedPool() = default;
  void release(int index);

  Options opt_;
  std::size_t buffer_bytes_ = 0;
  std::vector<char*> buffers_;
  std::vector<int> free_;
  bool locked_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
};

// Writes `bytes` of `src` (any memory) at `offset`, staging through pool buffers, two chunks in flight.
Status write_through(AsyncIo& io, File& file, PinnedPool& pool, const void* src, std::uint64_t bytes,
                     std::uint64_t offset);
// Reads `bytes` at `offset` into `dst` (any memory) through pool buffers.
Status read_through(AsyncIo& io, File& file, PinnedPool& pool, void* dst, std::uint64_t bytes,
                    std::uint64_t offset);

}  // namespace memwall::io
