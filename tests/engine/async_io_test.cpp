// Async I/O engine: round trips of odd sizes and offsets through every backend, concurrency, injected faults
// (EIO, ENOSPC, short transfers, delayed completions) and a real full filesystem when one can be mounted.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "engine/io/async_io.h"

namespace memwall::io {
namespace {

namespace fs = std::filesystem;

std::string test_dir() {
  const fs::path d = fs::current_path() / "async_io_test_files";
  fs::create_directories(d);
  return d.string();
}

struct Buffer {
  explicit Buffer(std::size_t n) : size(n), data(static_cast<char*>(alloc_aligned(n + 8192))) {}
  ~Buffer() { std::free(data); }
  std::size_t size;
  char* data;
};

void fill(char* p, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<char>(rng());
}

std::vector<Backend> available_backends() {
  std::vector<Backend> out;
  for (Backend b : {Backend::kPsync, Backend::kIoUring, Backend::kLibaio}) {
    IoSettings s;
    s.backend = b;
    if (AsyncIo::create(s).is_ok()) out.push_back(b);
  }
  return out;
}

TEST(AsyncIo, RoundTripsOddSizesAndOffsetsThroughEveryBackend) {
  const auto backends = available_backends();
  ASSERT_FALSE(backends.empty());
  for (Backend b : backends) {
    SCOPED_TRACE(backend_name(b));
    IoSettings s;
    s.backend = b;
    s.block_size = 64 * 1024;
    s.queue_depth = 4;
    s.parallelism = 2;
    auto io = AsyncIo::create(s).value();
    EXPECT_EQ(io->backend(), b);
    const std::string path = test_dir() + "/roundtrip-" + backend_name(b);
    std::vector<std::string> warnings;
    auto file = File::open(path, OpenMode::kReadWrite, true, true, &warnings).value();
    unsigned seed = 1;
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{511}, std::size_t{4096},
                             std::size_t{4097}, std::size_t{(1 << 20) + 13}, std::size_t{5 << 20}}) {
      for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{12345}}) {
        for (std::size_t misalign : {std::size_t{0}, std::size_t{3}}) {  // also an unaligned buffer address
          Buffer out(size), in(size);
          fill(out.data + misalign, size, seed++);
          ASSERT_TRUE(io->wait(io->write(*file, out.data + misalign, size, offset)).is_ok());
          std::memset(in.data, 0, size + misalign);
          ASSERT_TRUE(io->wait(io->read(*file, in.data + misalign, size, offset)).is_ok());
          EXPECT_EQ(std::memcmp(out.data + misalign, in.data + misalign, size), 0)
              << "size " << size << " offset " << offset << " misalign " << misalign;
        }
      }
    }
  }
}

TEST(AsyncIo, ConcurrentWritersAndReaders) {
  IoSettings s;
  s.block_size = 128 * 1024;
  s.queue_depth = 8;
  s.parallelism = 2;
  auto io = AsyncIo::create(s).value();
  auto file = File::open(test_dir() + "/concurrent", OpenMode::kReadWrite, true, true, nullptr).value();
  constexpr int kThreads = 4;
  constexpr std::size_t kBytes = 3 << 20;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Buffer out(kBytes), in(kBytes);
      fill(out.data, kBytes, 100 + t);
      const std::uint64_t offset = static_cast<std::uint64_t>(t) * kBytes;
      for (int round = 0; round < 3; ++round) {
        if (!io->wait(io->write(*file, out.data, kBytes, offset)).is_ok()) ++mismatches;
        if (!io->wait(io->read(*file, in.data, kBytes, offset)).is_ok()) ++mismatches;
        if (std::memcmp(out.data, in.data, kBytes) != 0) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Injects one fault per rule: an errno on the n-th completion, short transfers, or delays.
class Faults final : public FaultInjector {
 public:
  long on_complete(Op, std::uint64_t, std::size_t length, long result) override {
    const int n = ++count_;
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (fail_at == n) return -error;
    if (short_transfers && result > 1 && static_cast<std::size_t>(result) == length) return result / 2;
    return result;
  }
  int fail_at = -1;
  int error = EIO;
  bool short_transfers = false;
  int delay_ms = 0;

 private:
  std::atomic<int> count_{0};
};

TEST(AsyncIo, InjectedErrorsNameFileOperationOffsetAndErrno) {
  for (Backend b : available_backends()) {
    SCOPED_TRACE(backend_name(b));
    for (int err : {EIO, ENOSPC}) {
      Faults faults;
      faults.fail_at = 3;
      faults.error = err;
      IoSettings s;
      s.backend = b;
      s.block_size = 64 * 1024;
      s.faults = &faults;
      auto io = AsyncIo::create(s).value();
      const std::string path = test_dir() + "/faults";
      auto file = File::open(path, OpenMode::kReadWrite, true, true, nullptr).value();
      Buffer buf(1 << 20);
      fill(buf.data, buf.size, 7);
      const Status st = io->wait(io->write(*file, buf.data, buf.size, 0));
      ASSERT_FALSE(st.is_ok());
      EXPECT_EQ(st.code(), StatusCode::kIoError);
      EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("write of"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("at offset"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(std::strerror(err)), std::string::npos) << st.message();
      // The engine stays usable after a failed request.
      faults.fail_at = -1;
      EXPECT_TRUE(io->wait(io->write(*file, buf.data, buf.size, 0)).is_ok());
    }
  }
}

TEST(AsyncIo, ShortTransfersAndDelayedCompletionsAreResumed) {
  for (Backend b : available_backends()) {
    SCOPED_TRACE(backend_name(b));
    Faults faults;
    faults.short_transfers = true;
    faults.delay_ms = 1;
    IoSettings s;
    s.backend = b;
    s.block_size = 256 * 1024;
    s.queue_depth = 4;
    s.faults = &faults;
    auto io = AsyncIo::create(s).value();
    auto file = File::open(test_dir() + "/short", OpenMode::kReadWrite, true, true, nullptr).value();
    Buffer out(2 << 20), in(2 << 20);
    fill(out.data, out.size, 9);
    ASSERT_TRUE(io->wait(io->write(*file, out.data, out.size, 8192)).is_ok());
    ASSERT_TRUE(io->wait(io->read(*file, in.data, in.size, 8192)).is_ok());
    EXPECT_EQ(std::memcmp(out.data, in.data, out.size), 0);
  }
}

TEST(AsyncIo, ReadingPastTheEndIsAnError) {
  IoSettings s;
  auto io = AsyncIo::create(s).value();
  const std::string path = test_dir() + "/short-file";
  auto file = File::open(path, OpenMode::kReadWrite, true, true, nullptr).value();
  Buffer buf(8192);
  ASSERT_TRUE(io->wait(io->write(*file, buf.data, 4096, 0)).is_ok());
  const Status st = io->wait(io->read(*file, buf.data, 8192, 0));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("unexpected end of file"), std::string::npos) << st.message();
}

TEST(AsyncIo, WaitAllFlushesEverythingInFlight) {
  IoSettings s;
  s.block_size = 64 * 1024;
  auto io = AsyncIo::create(s).value();
  auto file = File::open(test_dir() + "/waitall", OpenMode::kReadWrite, true, true, nullptr).value();
  Buffer buf(8 << 20);
  std::vector<AsyncIo::Ticket> tickets;
  for (int i = 0; i < 8; ++i)
    tickets.push_back(io->write(*file, buf.data + i * (1 << 20), 1 << 20, i * (1 << 20)));
  ASSERT_TRUE(io->wait_all().is_ok());
  for (const auto& t : tickets) EXPECT_TRUE(io->done(t));
  EXPECT_EQ(file->size().value(), 8u << 20);
}

TEST(AsyncIo, MissingFilesAndBadSettingsAreErrors) {
  const auto f = File::open("/nonexistent-dir/x", OpenMode::kRead, false, true, nullptr);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("/nonexistent-dir/x: open"), std::string::npos);
  IoSettings s;
  s.queue_depth = 0;
  EXPECT_FALSE(AsyncIo::create(s).is_ok());
  EXPECT_FALSE(parse_backend("spdk").is_ok());
}

// ramfs refuses O_DIRECT at open (EINVAL): the file is opened for buffered I/O with a warning naming it, and
// every backend's writes and reads round-trip through it, aligned or not.
TEST(AsyncIo, AFilesystemThatRefusesODirectFallsBackToBufferedIo) {
  const std::string dir = test_dir() + "/ramfs";
  fs::create_directories(dir);
  if (::mount("ramfs", dir.c_str(), "ramfs", 0, nullptr) != 0) {
    GTEST_SKIP() << "cannot mount a ramfs here (" << std::strerror(errno) << ")";
  }
  for (Backend b : available_backends()) {
    SCOPED_TRACE(backend_name(b));
    IoSettings s;
    s.backend = b;
    s.block_size = 64 * 1024;
    auto io = AsyncIo::create(s).value();
    const std::string path = dir + "/" + backend_name(b);
    std::vector<std::string> warnings;
    auto file = File::open(path, OpenMode::kReadWrite, true, true, &warnings);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0], path + ": the filesystem refuses O_DIRECT; using buffered I/O");
    for (const auto& [bytes, offset] :
         {std::pair<std::size_t, std::uint64_t>{1 << 20, 0}, {12345, 4096 + 7}}) {
      Buffer out(bytes), in(bytes);
      fill(out.data, bytes, static_cast<unsigned>(bytes));
      ASSERT_TRUE(io->wait(io->write(**file, out.data, bytes, offset)).is_ok());
      ASSERT_TRUE(io->wait(io->read(**file, in.data, bytes, offset)).is_ok());
      EXPECT_EQ(std::memcmp(out.data, in.data, bytes), 0) << bytes << " bytes at " << offset;
    }
  }
  ::umount(dir.c_str());
}

TEST(AsyncIo, FullFilesystemFailsTheWriteCleanly) {
  // A real 1 MiB tmpfs; needs CAP_SYS_ADMIN (root outside a restricted container).
  const std::string dir = test_dir() + "/tiny-fs";
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
  }
  {
    IoSettings s;
    auto io = AsyncIo::create(s).value();
    const std::string path = dir + "/big";
    auto file = File::open(path, OpenMode::kReadWrite, true, true, nullptr).value();
    Buffer buf(4 << 20);
    const Status st = io->wait(io->write(*file, buf.data, buf.size, 0));
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(std::strerror(ENOSPC)), std::string::npos) << st.message();
  }
  ::umount(dir.c_str());
}

}  // namespace
}  // namespace memwall::io
