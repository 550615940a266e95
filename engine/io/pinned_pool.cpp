// Pinned buffer pool and chunked streaming through it.
#include "engine/io/pinned_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "base/units.h"

namespace memwall::io {

namespace {
constexpr std::size_t kPage = 4096;
std::size_t round_up(std::size_t n) {
  return (std::max<std::size_t>(n, 1) + kPage - 1) / kPage * kPage;
}
}  // namespace

std::size_t PinnedPool::buffer_size_for(std::uint64_t largest_shard_bytes, std::size_t max_bytes) {
  return round_up(static_cast<std::size_t>(std::min<std::uint64_t>(largest_shard_bytes, max_bytes)));
}

Result<std::unique_ptr<PinnedPool>> PinnedPool::create(const Options& opt) {
  if (opt.buffers < 1) return Status::invalid_argument("pinned pool: at least one buffer is needed");
  std::unique_ptr<PinnedPool> p(new PinnedPool());
  p->opt_ = opt;
  p->buffer_bytes_ = round_up(opt.buffer_bytes);
  const double need = static_cast<double>(p->buffer_bytes_) * opt.buffers;
  if (opt.budget_bytes > 0 && need > static_cast<double>(opt.budget_bytes)) {
    return Status::out_of_memory(
        strprintf("pinned pool needs %d x %s = %s, more than its budget of %s; lower the "
                  "buffer count or size, or raise the budget",
                  opt.buffers, format_bytes(static_cast<double>(p->buffer_bytes_)).c_str(),
                  format_bytes(need).c_str(), format_bytes(static_cast<double>(opt.budget_bytes)).c_str()));
  }
  for (int i = 0; i < opt.buffers; ++i) {
    char* b = static_cast<char*>(alloc_aligned(p->buffer_bytes_));
    if (b == nullptr) {
      return Status::out_of_memory("pinned pool: cannot allocate " + format_bytes(need) + " of host memory");
    }
    p->buffers_.push_back(b);
    p->free_.push_back(i);
  }
  if (opt.lock) {
    for (char* b : p->buffers_) {
      if (::mlock(b, p->buffer_bytes_) != 0) {
        rlimit lim{};
        getrlimit(RLIMIT_MEMLOCK, &lim);
        const std::string limit =
            lim.rlim_cur == RLIM_INFINITY ? "unlimited" : format_bytes(static_cast<double>(lim.rlim_cur));
        return Status::out_of_memory("pinned pool: mlock of " + format_bytes(need) + " failed (" +
                                     std::strerror(errno) + "; RLIMIT_MEMLOCK is " + limit +
                                     "): raise `ulimit -l` or use fewer/smaller buffers");
      }
    }
    p->locked_ = true;
  }
  if (opt.register_fn) {
    for (char* b : p->buffers_) MW_RETURN_IF_ERROR(opt.register_fn(b, p->buffer_bytes_));
  }
  return p;
}

PinnedPool::~PinnedPool() {
  for (char* b : buffers_) {
    if (opt_.unregister_fn) opt_.unregister_fn(b, buffer_bytes_);
    if (locked_) ::munlock(b, buffer_bytes_);
    std::free(b);
  }
}

PinnedPool::Lease::~Lease() {
  if (pool_) pool_->release(index_);
}
char* PinnedPool::Lease::data() const {
  return pool_->buffers_[static_cast<std::size_t>(index_)];
}
std::size_t PinnedPool::Lease::size() const {
  return pool_->buffer_bytes_;
}

PinnedPool::Lease PinnedPool::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  const int i = free_.back();
  free_.pop_back();
  return Lease(this, i);
}

std::optional<PinnedPool::Lease> PinnedPool::try_acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return std::nullopt;
  const int i = free_.back();
  free_.pop_back();
  return Lease(this, i);
}

int PinnedPool::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

void PinnedPool::release(int index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
  }
  cv_.notify_one();
}

Status write_through(AsyncIo& io, File& file, PinnedPool& pool, const void* src, std::uint64_t bytes,
                     std::uint64_t offset) {
  const auto* p = static_cast<const char*>(src);
  std::deque<std::pair<PinnedPool::Lease, AsyncIo::Ticket>> inflight;
  Status first;
  for (std::uint64_t done = 0; done < bytes;) {
    // Two chunks in flight at most, fewer when the pool has no free buffer (never wait on our own leases).
    while (!inflight.empty() && (inflight.size() >= 2 || pool.available() == 0)) {
      Status s = io.wait(inflight.front().second);
      if (first.is_ok()) first = s;
      inflight.pop_front();
    }
    PinnedPool::Lease buf = pool.acquire();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - done));
    std::memcpy(buf.data(), p + done, n);
    AsyncIo::Ticket t = io.write(file, buf.data(), n, offset + done);
    inflight.emplace_back(std::move(buf), std::move(t));
    done += n;
  }
  while (!inflight.empty()) {
    Status s = io.wait(inflight.front().second);
    if (first.is_ok()) first = s;
    inflight.pop_front();
  }
  return first;
}

Status read_through(AsyncIo& io, File& file, PinnedPool& pool, void* dst, std::uint64_t bytes,
                    std::uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  struct Pending {
    PinnedPool::Lease buf;
    AsyncIo::Ticket ticket;
    std::uint64_t at;
    std::size_t n;
  };
  std::deque<Pending> inflight;
  Status first;
  auto drain_one = [&] {
    Pending& f = inflight.front();
    Status s = io.wait(f.ticket);
    if (s.is_ok()) std::memcpy(p + f.at, f.buf.data(), f.n);
    if (first.is_ok()) first = s;
    inflight.pop_front();
  };
  for (std::uint64_t done = 0; done < bytes;) {
    while (!inflight.empty() && (inflight.size() >= 2 || pool.available() == 0)) drain_one();
    PinnedPool::Lease buf = pool.acquire();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - done));
    AsyncIo::Ticket t = io.read(file, buf.data(), n, offset + done);
    inflight.push_back({std::move(buf), std::move(t), done, n});
    done += n;
  }
  while (!inflight.empty()) drain_one();
  return first;
}

}  // namespace memwall::io
