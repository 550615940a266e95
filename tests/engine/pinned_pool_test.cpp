// Pinned pool: leases, blocking, the budget error, and tensors larger than a buffer streamed in chunks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "engine/io/pinned_pool.h"

namespace memwall::io {
namespace {

TEST(PinnedPool, LeasesAreReturnedAndAcquireBlocks) {
  PinnedPool::Options o;
  o.buffer_bytes = 100000;  // rounded up to 4 KiB pages
  o.buffers = 2;
  auto pool = PinnedPool::create(o).value();
  EXPECT_EQ(pool->buffer_bytes(), 102400u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool->acquire().data()) % 4096, 0u);
  {
    auto a = pool->acquire();
    auto b = pool->acquire();
    EXPECT_FALSE(pool->try_acquire().has_value());
    std::atomic<bool> got{false};
    std::thread waiter([&] {
      auto c = pool->acquire();
      got = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(got.load());
    { auto drop = std::move(a); }
    waiter.join();
    EXPECT_TRUE(got.load());
  }
  EXPECT_EQ(pool->available(), 2);
}

TEST(PinnedPool, BudgetThatCannotBeMetSaysHowMuchIsNeeded) {
  PinnedPool::Options o;
  o.buffer_bytes = 1 << 20;
  o.buffers = 8;
  o.budget_bytes = 4 << 20;
  const auto r = PinnedPool::create(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("8 x 1.00 MiB = 8.00 MiB"), std::string::npos) << r.status().message();
  EXPECT_EQ(PinnedPool::buffer_size_for(5000, 1 << 20), 8192u);
  EXPECT_EQ(PinnedPool::buffer_size_for(5ull << 30, 1 << 20), 1u << 20);
}

TEST(PinnedPool, TensorsLargerThanABufferStreamInChunks) {
  const std::string dir = (std::filesystem::current_path() / "pinned_pool_test_files").string();
  std::filesystem::create_directories(dir);
  auto io = AsyncIo::create(IoSettings{}).value();
  auto file = File::open(dir + "/stream", OpenMode::kReadWrite, true, true, nullptr).value();
  for (int buffers : {1, 2, 3}) {
    PinnedPool::Options o;
    o.buffer_bytes = 256 * 1024;
    o.buffers = buffers;
    auto pool = PinnedPool::create(o).value();
    std::vector<char> out(10 * 1024 * 1024 + 123), in(out.size());  // ordinary (unpinned) memory
    std::mt19937 rng(buffers);
    for (auto& c : out) c = static_cast<char>(rng());
    ASSERT_TRUE(write_through(*io, *file, *pool, out.data(), out.size(), 4096).is_ok());
    ASSERT_TRUE(read_through(*io, *file, *pool, in.data(), in.size(), 4096).is_ok());
    EXPECT_EQ(in, out) << buffers << " buffer(s)";
    EXPECT_EQ(pool->available(), buffers);
  }
}

}  // namespace
}  // namespace memwall::io
