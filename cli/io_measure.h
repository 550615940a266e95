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
  double readwrite_Bps = 0;   // reads and writes at once, both directions together (0: not measured)
  double cpu_s_per_byte = 0;  // CPU seconds this process spent per byte moved in the timed passes
  bool direct = true;         // through O_DIRECT (false: the filesystem refused it, buffered I/O measured)
};

// CPU seconds (user + system) this process has used so far, every thread included (io_uring's workers
// are threads of the process).
double process_cpu_s();

// Lays `path` out to `size` bytes (untimed, like fio), then times a write pass and a read pass of it with
// windows of block_size x queue_depth x parallelism, two in flight. `used` receives the backend.
Result<Measurement> measure_disk(const std::string& path, std::uint64_t size, const io::IoSettings& settings,
                                 bool do_write, bool do_read, std::vector<std::string>& warnings,
                                 io::Backend& used);

}  // namespace memwall::cli
