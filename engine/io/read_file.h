// Reading files whole or by byte range, with errors that name the file (the write side: atomic_file.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace memwall::io {

// `bytes` bytes of `fd` from `offset` into `dst`, retrying short reads and EINTR. A file that ends first is
// an error saying where it was cut ("truncated"); `file` names it in messages.
Status pread_full(int fd, void* dst, std::size_t bytes, std::uint64_t offset, const std::string& file);

// The whole file: kNotFound when it cannot be opened, kIoError when reading it fails.
Result<std::string> read_file(const std::string& path);

}  // namespace memwall::io
