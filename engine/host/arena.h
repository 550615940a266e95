// A fixed-capacity memory arena: the host-emulated "device" tier on machines without a GPU (its capacity
// is the HardwareSpec's GPU memory, so offloading is really exercised), and the bookkeeping model for a
// real device's pool. One contiguous host allocation, first-fit with coalescing free ranges, 256-byte
// alignment (what cudaMalloc guarantees). Allocation never throws: a request that does not fit returns an
// out-of-memory Status naming the request, the tag, what is in use and the largest free range, so a
// planner bug shows up as a precise error instead of a crash. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"

namespace memwall::host {

class Arena {
 public:
  static constexpr std::size_t kAlign = 256;

  struct Block {
    std::size_t offset = 0;
    std::size_t bytes = 0;  // rounded up to kAlign
    void* data = nullptr;
  };

  // `name` appears in errors (e.g. "device 0"). Backing memory is reserved lazily by the OS (untouched pages
  // cost nothing), so a 32 GiB emulated V100 does not need 32 GiB of RAM unless it is filled.
  Arena(std::string name, std::size_t capacity);
  // Bookkeeping over memory the caller owns (e.g. one cudaMalloc of a real device): blocks point into
  // [base, base + capacity); the arena never touches the bytes and does not free them.
  Arena(std::string name, void* base, std::size_t capacity);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Result<Block> allocate(std::size_t bytes, const std::string& tag);
  // Returns a block from allocate; anything else is a bug (MW_CHECK).
  void release(const Block& block);

  const std::string& name() const { return name_; }
  std::size_t capacity() const { return capacity_; }
  void* base() const { return base_; }  // the first byte of the range blocks come from
  std::size_t used() const;
  std::size_t peak() const;
  std::size_t largest_free() const;

 private:
  std::size_t largest_free_locked() const;
  std::string name_;
  std::size_t capacity_;
  char* base_ = nullptr;
  bool owned_ = true;
  mutable std::mutex mu_;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes, non-adjacent
  std::map<std::size_t, std::size_t> live_;  // offset -> bytes
  std::size_t used_ = 0, peak_ = 0;
};

}  // namespace memwall::host
