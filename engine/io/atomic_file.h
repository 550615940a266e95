// Crash-consistent file replacement: write a temporary file beside the target, fsync it, rename it over
// the target, fsync the directory. A crash at any point leaves either the old file or the new one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace memwall::io {

// fsync a file or (directory = true) a directory by path.
Status fsync_path(const std::string& path, bool directory);

// Replaces `path` with the concatenation of `parts`. On error the previous file (if any) is intact and the
// temporary is removed; the message names the file and says so.
Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace memwall::io
