// DeepNVMe-class asynchronous file I/O: bulk reads and writes of a buffer at a file offset, with a ticket to
// wait on or poll, and wait_all() to flush everything in flight.
//
// A request is split into `block_size` chunks spread round-robin over `parallelism` submission queues; each
// queue is a worker thread that keeps up to `queue_depth` chunks in flight through its backend: io_uring
// (liburing), libaio, or plain pread/pwrite. O_DIRECT is used when the filesystem accepts it; chunks whose
// offset, length or buffer are not aligned to the file's direct-I/O alignment (queried with statx) go through
// a buffered descriptor of the same file, so unaligned tails just work. Short transfers are resumed; errors
// come back as a Status naming the file, the operation, the offset and errno's text.
//
// Thread-safety: submit from any thread; a File must outlive the requests on it.
//
//   auto io = AsyncIo::create(settings).value();
//   auto file = File::open(path, OpenMode::kReadWrite, /*create=*/true, /*direct=*/true, &warnings).value();
//   Ticket t = io->write(*file, buffer, bytes, 0);
//   Status s = io->wait(t);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "spec/run_config.h"

namespace memwall::io {

enum class Backend { kAuto, kIoUring, kLibaio, kPsync };
const char* backend_name(Backend b);  // "auto", "io_uring", "libaio", "psync"
Result<Backend> parse_backend(const std::string& name);

enum class Op { kRead, kWrite };

// Test hook: sees every completed chunk and may change its result (an errno as -E..., or fewer bytes).
class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // `result` is bytes transferred (>= 0) or -errno. Return what the engine should see.
  virtual long on_complete(Op op, std::uint64_t offset, std::size_t length, long result) = 0;
};

struct IoSettings {
  Backend backend = Backend::kAuto;  // kAuto: io_uring if it works here, else libaio, else psync
  std::size_t block_size = 1 << 20;  // aio.block_size: bytes per chunk
  int queue_depth = 8;               // aio.queue_depth: chunks in flight per queue
  int parallelism = 1;               // aio.intra_op_parallelism: submission queues (worker threads)
  FaultInjector* faults = nullptr;   // tests only
  static IoSettings from(const AioConfig& aio);
};

enum class OpenMode { kRead, kWrite, kReadWrite };

class File {
 public:
  // Opens `path`; with `direct`, tries O_DIRECT and, if the filesystem refuses it, falls back to buffered I/O
  // and appends one warning to `warnings` (may be null).
  static Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode, bool create, bool direct,
                                            std::vector<std::string>* warnings);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  bool direct() const { return direct_fd_ >= 0; }
  std::size_t offset_alignment() const { return offset_align_; }  // direct I/O: offsets and lengths
  std::size_t memory_alignment() const { return mem_align_; }     // direct I/O: buffer addresses
  int fd_for(std::uint64_t offset, std::size_t length, const void* buffer) const;
  Status sync();  // fdatasync
  Result<std::uint64_t> size() const;

 private:
  File() = default;
  std::string path_;
  int direct_fd_ = -1;
  int buffered_fd_ = -1;
  std::size_t offset_align_ = 4096;
  std::size_t mem_align_ = 4096;
};

// Memory aligned for direct I/O (4 KiB), freed with std::free.
void* alloc_aligned(std::size_t bytes);

class AsyncIo {
 public:
  struct Request;
  using Ticket = std::shared_ptr<Request>;

  static Result<std::unique_ptr<AsyncIo>> create(const IoSettings& settings);
  virtual ~AsyncIo() = default;
  virtual Backend backend() const = 0;

  virtual Ticket read(File& file, void* buffer, std::size_t length, std::uint64_t offset) = 0;
  virtual Ticket write(File& file, const void* buffer, std::size_t length, std::uint64_t offset) = 0;
  // Blocks until the request is done; its first error, if any.
  virtual Status wait(const Ticket& ticket) = 0;
  virtual bool done(const Ticket& ticket) const = 0;
  // Waits for every request submitted so far; the first error among them.
  virtual Status wait_all() = 0;
};

}  // namespace memwall::io
