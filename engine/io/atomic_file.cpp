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

Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error(tmp + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::io_error(path + ": " + what + ": " + err + "; the previous file is intact");
  };
  for (std::string_view part : parts) {
    while (!part.empty()) {
      const ssize_t n = ::write(fd, part.data(), part.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail("write");
      part.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::io_error(path + ": close: " + std::strerror(errno) + "; the previous file is intact");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::io_error(path + ": rename: " + err + "; the previous file is intact");
  }
  const auto slash = path.find_last_of('/');
  return fsync_path(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)), true);
}

}  // namespace memwall::io
