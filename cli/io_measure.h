// Sequential O_DIRECT write and read rates of a file through the async I/O engine (io-bench, calibrate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/io/async_io.h"

namespace memwall::cli {

struct Measurement {
  double write_Bps = 0;
  double read_Bps = 0;
};

// Lays `path` out to `size` bytes (untimed, like fio), then times a write pass and a read pass of it with
// windows of block_size x queue_depth x parallelism, two in flight. `used` receives the backend.
Result<Measurement> measure_disk(const std::string& path, std::uint64_t size, const io::IoSettings& settings,
                                 bool do_write, bool do_read, std::vector<std::string>& warnings,
                                 io::Backend& used);

}  // namespace memwall::cli
