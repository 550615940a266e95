// TensorStore: one rank's tensors packed into a few large preallocated extent files with an index; the NVMe
// tier of the real engine (parameter shards, optimizer sub-groups).
//
// Layout (docs/io.md): <dir>/rank<r>/extent-<k>.dat (written once at creation, so later writes are
// overwrites) and index.json (format "memwall-tensor-store", version 1). Writing a tensor never touches its
// committed copy: the new version goes to a free region, and commit() makes every staged version durable
// (fdatasync the extents, write index.json.tmp, fsync, rename over index.json, fsync the directory) before
// the old regions are reused. A crash at any point therefore leaves the old or the new version of every
// tensor, never a torn one. With checksums on, every `checksum_block` bytes carry a CRC32C verified on read.
//
// Thread-safe for concurrent get, write and remove (their I/O and checksums run outside the index lock; a
// replaced version stays readable until the next commit); commit() must not run while they do. The AsyncIo
// engine must outlive the store.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/io/async_io.h"

namespace memwall::io {

struct StoreOptions {
  std::string dir;  // the store root (e.g. offload_param.nvme_path)
  int rank = 0;
  std::uint64_t capacity_bytes = 0;  // preallocated across extents
  std::uint64_t extent_bytes = 1ull << 30;
  bool checksums = true;
  std::uint64_t checksum_block = 1 << 20;
  // false: commit() only releases replaced versions, without syncing the extents or rewriting the index (a
  // swap area that is recreated on every start needs no crash consistency). Only for create().
  bool durable = true;
};

class TensorStore {
 public:
  // Creates a new, empty store (fails if one exists there). Preallocates the extents by writing them once;
  // on any failure (ENOSPC, ...) removes what it created.
  static Result<std::unique_ptr<TensorStore>> create(const StoreOptions& opt, AsyncIo& io);
  // Opens an existing store at its last committed state.
  static Result<std::unique_ptr<TensorStore>> open(const std::string& dir, int rank, AsyncIo& io);
  ~TensorStore();

  // Stages a new version of `name` (visible to get() at once, durable after commit()).
  Status write(const std::string& name, const void* data, std::uint64_t bytes);
  // Makes every staged version durable atomically; then frees the regions of the versions they replaced.
  Status commit();
  // Drops every version staged since the last commit (writes and removes): the store is as it was committed,
  // and their regions are free again. Must not run while get/write/remove do.
  void rollback();
  // write() + commit().
  Status put(const std::string& name, const void* data, std::uint64_t bytes);
  // Reads the current version into `data` (exactly `bytes`, its size), verifying checksums.
  Status get(const std::string& name, void* data, std::uint64_t bytes);
  Status remove(const std::string& name);  // staged like a write

  bool contains(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    return tensors_.count(name) > 0;
  }
  Result<std::uint64_t> size_of(const std::string& name) const;
  std::vector<std::string> names() const;
  std::uint64_t capacity_bytes() const;
  std::uint64_t free_bytes() const;
  const std::string& path() const { return root_; }
  // Whether every extent goes through O_DIRECT (false: the filesystem refused it, the page cache serves).
  bool direct() const {
    return std::all_of(extents_.begin(), extents_.end(), [](const auto& f) { return f->direct(); });
  }

 private:
  struct Location {
    int extent = 0;
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
    std::vector<std::uint32_t> crc;  // one per checksum block
  };
  TensorStore(std::string root, AsyncIo& io) : root_(std::move(root)), io_(io) {}
  Status open_extents(bool create);
  Result<Location> allocate(std::uint64_t bytes);
  void release(const Location& loc);
  void retire(const std::string& name, const Location& loc);  // a version being replaced or removed
  Status write_index();
  std::uint64_t reserved(std::uint64_t bytes) const;  // bytes rounded up to the region alignment

  std::string root_;
  AsyncIo& io_;
  std::uint64_t extent_bytes_ = 0;
  int extent_count_ = 0;
  bool checksums_ = true;
  bool durable_ = true;
  std::uint64_t checksum_block_ = 1 << 20;
  std::vector<std::unique_ptr<File>> extents_;
  std::map<std::string, Location> tensors_;                   // current (possibly staged) versions
  std::map<std::string, Location> committed_;                 // as in index.json
  std::vector<std::map<std::uint64_t, std::uint64_t>> free_;  // per extent: offset -> size
  std::vector<Location> pending_release_;                     // replaced by staged versions
  std::vector<int> dirty_extents_;
  mutable std::mutex mu_;  // the index: tensors_, committed_, free_, pending_release_, dirty_extents_
  std::uint64_t free_bytes_locked() const;
};

}  // namespace memwall::io
