// First-fit arena with coalescing.
#include "engine/host/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/units.h"

namespace memwall::host {

Arena::Arena(std::string name, std::size_t capacity)
    : name_(std::move(name)), capacity_(capacity / kAlign * kAlign) {
  if (capacity_ > 0) {
    void* p = ::mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    MW_CHECK(p != MAP_FAILED,
             name_ + ": mmap of " + std::to_string(capacity_) + " bytes: " + std::strerror(errno));
    base_ = static_cast<char*>(p);
    free_[0] = capacity_;
  }
}

Arena::Arena(std::string name, void* base, std::size_t capacity)
    : name_(std::move(name)),
      capacity_(capacity / kAlign * kAlign),
      base_(static_cast<char*>(base)),
      owned_(false) {
  MW_CHECK(reinterpret_cast<std::uintptr_t>(base) % kAlign == 0, name_ + ": base is not 256-byte aligned");
  if (capacity_ > 0) free_[0] = capacity_;
}

Arena::~Arena() {
  if (base_ != nullptr && owned_) ::munmap(base_, capacity_);
}

Result<Arena::Block> Arena::allocate(std::size_t bytes, const std::string& tag) {
  const std::size_t need = std::max<std::size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const std::size_t offset = it->first, left = it->second - need;
    free_.erase(it);
    if (left > 0) free_[offset + need] = left;
    live_[offset] = need;
    used_ += need;
    peak_ = std::max(peak_, used_);
    return Block{offset, need, base_ + offset};
  }
  return Status::out_of_memory(name_ + ": cannot allocate " + format_bytes(static_cast<double>(need)) +
                               " for " + tag + ": " + format_bytes(static_cast<double>(used_)) + " of " +
                               format_bytes(static_cast<double>(capacity_)) + " in use, largest free range " +
                               format_bytes(static_cast<double>(largest_free_locked())));
}

void Arena::release(const Block& block) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto live = live_.find(block.offset);
  MW_CHECK(live != live_.end() && live->second == block.bytes,
           name_ + ": release of a block it did not allocate");
  live_.erase(live);
  used_ -= block.bytes;
  std::size_t offset = block.offset, bytes = block.bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

std::size_t Arena::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

std::size_t Arena::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

std::size_t Arena::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return largest_free_locked();
}

std::size_t Arena::largest_free_locked() const {
  std::size_t best = 0;
  for (const auto& [offset, bytes] : free_) best = std::max(best, bytes);
  return best;
}

}  // namespace memwall::host
