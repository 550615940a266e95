// Temp + fsync + rename + directory fsync.
#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace memwall::io {

Status fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Status::io_error(path + ": open for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::io_error(path + ": fsync: " + std::strerror(err));
  return Status::ok();
}

Result<AtomicFile> AtomicFile::create(const std::string& path, bool direct) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = direct ? ::open(tmp.c_str(), flags | O_DIRECT, 0644) : -1;
  if (fd < 0 && direct && errno != EINVAL) {
    return Status::io_error(path + ": cannot create its temporary " + tmp + ": " + std::strerror(errno));
  }
  const bool is_direct = fd >= 0;
  if (fd < 0) fd = ::open(tmp.c_str(), flags, 0644);
  if (fd < 0)
    return Status::io_error(path + ": cannot create its temporary " + tmp + ": " + std::strerror(errno));
  return AtomicFile(path, std::move(tmp), fd, is_direct);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), direct_(o.direct_), end_(o.end_) {
  o.fd_ = -1;
  o.tmp_.clear();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Status AtomicFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  return Status::io_error(path_ + ": " + what + ": " + std::strerror(err) + "; the previous file is intact");
}

Status AtomicFile::pwrite(const void* data, std::size_t n, std::uint64_t offset) {
  if (fd_ < 0) return Status::failed_precondition(path_ + ": written after it was committed or failed");
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail("write", w < 0 ? errno : ENOSPC);
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
  return Status::ok();
}

Status AtomicFile::append(const void* data, std::size_t n) {
  MW_RETURN_IF_ERROR(pwrite(data, n, end_));
  end_ += n;
  return Status::ok();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return Status::failed_precondition(path_ + ": committed twice or after a failure");
  if (::fsync(fd_) != 0) return fail("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return fail("close", errno);
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) return fail("rename", errno);
  tmp_.clear();
  const auto slash = path_.find_last_of('/');
  return fsync_path(slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash)), true);
}

Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  auto f = AtomicFile::create(path);
  if (!f.is_ok()) return f.status();
  for (std::string_view part : parts) MW_RETURN_IF_ERROR(f->append(part.data(), part.size()));
  return f->commit();
}

}  // namespace memwall::io
