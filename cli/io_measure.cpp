// Disk rates through the async I/O engine (see io_measure.h).
#include "io_measure.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>

#include "base/units.h"

namespace memwall::cli {

namespace {

// Moves `total` bytes through `file` sequentially with two requests of one window each in flight.
Result<double> pass(io::AsyncIo& io, io::File& file, io::Op op, std::uint64_t total, char* buf,
                    std::size_t window) {
  const auto start = std::chrono::steady_clock::now();
  std::deque<io::AsyncIo::Ticket> inflight;
  for (std::uint64_t off = 0; off < total; off += window) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(window, total - off));
    char* b = buf + (inflight.size() % 2) * window;
    inflight.push_back(op == io::Op::kRead ? io.read(file, b, len, off) : io.write(file, b, len, off));
    if (inflight.size() == 2) {
      MW_RETURN_IF_ERROR(io.wait(inflight.front()));
      inflight.pop_front();
    }
  }
  MW_RETURN_IF_ERROR(io.wait_all());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return total / s;
}

}  // namespace

double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

Result<Measurement> measure_disk(const std::string& path, std::uint64_t size, const io::IoSettings& settings,
                                 bool do_write, bool do_read, std::vector<std::string>& warnings,
                                 io::Backend& used) {
  Result<std::unique_ptr<io::AsyncIo>> io = io::AsyncIo::create(settings);
  if (!io.is_ok()) return io.status();
  used = (*io)->backend();
  Result<std::unique_ptr<io::File>> file =
      io::File::open(path, io::OpenMode::kReadWrite, true, true, &warnings);
  if (!file.is_ok()) return file.status();
  const std::size_t window =
      settings.block_size * static_cast<std::size_t>(settings.queue_depth * settings.parallelism);
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(io::alloc_aligned(2 * window)),
                                                  &std::free);
  if (!buf)
    return Status::out_of_memory("io-bench: cannot allocate " + format_bytes(2.0 * window) + " of buffers");
  std::memset(buf.get(), 0x5a, 2 * window);
  Measurement m;
  m.direct = (*file)->direct();
  // Lay the file out first (untimed), as fio does: a first write into a fresh file is slower than an
  // overwrite.
  Result<std::uint64_t> existing = (*file)->size();
  if (!existing.is_ok()) return existing.status();
  if (*existing < size) {
    Result<double> layout = pass(**io, **file, io::Op::kWrite, size, buf.get(), window);
    if (!layout.is_ok()) return layout.status();
    MW_RETURN_IF_ERROR((*file)->sync());
  }
  const double cpu0 = process_cpu_s();
  if (do_write) {
    Result<double> w = pass(**io, **file, io::Op::kWrite, size, buf.get(), window);
    if (!w.is_ok()) return w.status();
    m.write_Bps = *w;
    MW_RETURN_IF_ERROR((*file)->sync());
  }
  if (do_read) {
    Result<double> r = pass(**io, **file, io::Op::kRead, size, buf.get(), window);
    if (!r.is_ok()) return r.status();
    m.read_Bps = *r;
  }
  const int passes = (do_write ? 1 : 0) + (do_read ? 1 : 0);
  if (passes > 0) m.cpu_s_per_byte = (process_cpu_s() - cpu0) / (static_cast<double>(size) * passes);
  return m;
}

}  // namespace memwall::cli
