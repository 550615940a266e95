// pread loops and whole-file reads (see read_file.h).
#include "engine/io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace memwall::io {

Status pread_full(int fd, void* dst, std::size_t bytes, std::uint64_t offset, const std::string& file) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::io_error(file + ": read failed: " + std::strerror(errno));
    if (got == 0)
      return Status::io_error(file + ": ends early (truncated at byte " + std::to_string(offset) + ")");
    p += got;
    offset += static_cast<std::uint64_t>(got);
    bytes -= static_cast<std::size_t>(got);
  }
  return Status::ok();
}

Result<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::not_found(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  Status s = ::fstat(fd, &st) == 0 ? Status::ok() : Status::io_error(path + ": " + std::strerror(errno));
  std::string out;
  if (s.is_ok() && S_ISDIR(st.st_mode)) s = Status::invalid_argument(path + ": is a directory, not a file");
  if (s.is_ok()) {
    out.resize(static_cast<std::size_t>(st.st_size));
    s = pread_full(fd, out.data(), out.size(), 0, path);
  }
  ::close(fd);
  if (!s.is_ok()) return s;
  return out;
}

}  // namespace memwall::io
