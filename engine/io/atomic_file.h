// Crash-consistent file replacement: write a temporary file beside the target, fsync it, rename it over
// the target, fsync the directory. A crash at any point leaves either the old file or the new one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace memwall::io {

// fsync a file or (directory = true) a directory by path.
Status fsync_path(const std::string& path, bool directory);

// A file written in pieces (at any offsets) under a temporary name beside `path`, which commit() fsyncs and
// renames over `path`, then fsyncs the directory. Until commit() succeeds the previous file (if any) is
// intact; destroying an uncommitted AtomicFile removes the temporary. For files too large to hold in memory.
class AtomicFile {
 public:
  // direct: open with O_DIRECT (writes then need 4096-aligned buffers, offsets and sizes), falling back to
  // buffered I/O where the filesystem refuses it (tmpfs); direct() says which.
  static Result<AtomicFile> create(const std::string& path, bool direct = false);
  bool direct() const { return direct_; }
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  Status pwrite(const void* data, std::size_t n, std::uint64_t offset);
  Status append(const void* data, std::size_t n);  // at the end of what append wrote so far
  Status commit();
  const std::string& path() const { return path_; }

 private:
  AtomicFile(std::string path, std::string tmp, int fd, bool direct)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), direct_(direct) {}
  Status fail(const std::string& what, int err);

  std::string path_, tmp_;
  int fd_ = -1;
  bool direct_ = false;
  std::uint64_t end_ = 0;
};

// Replaces `path` with the concatenation of `parts`. On error the previous file (if any) is intact and the
// temporary is removed; the message names the file and says so.
Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace memwall::io
