// The host-emulated device arena: alignment, first fit, coalescing, peak, and out-of-memory errors.
#include "engine/host/arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace memwall::host {
namespace {

// Over memory the caller owns (a real GPU's one cudaMalloc): blocks point into it, nothing is freed.
TEST(Arena, KeepsBooksOverExternalMemory) {
  alignas(256) static char memory[8192] = {};
  {
    Arena a("GPU 0", memory, sizeof memory);
    auto x = a.allocate(1000, "x");
    auto y = a.allocate(5000, "y");
    ASSERT_TRUE(x.is_ok() && y.is_ok());
    EXPECT_EQ(x->data, memory);
    EXPECT_EQ(y->data, memory + 1024);
    auto z = a.allocate(4096, "z");
    ASSERT_FALSE(z.is_ok());
    EXPECT_NE(z.status().message().find("GPU 0"), std::string::npos);
    std::memset(y->data, 0x5a, 5000);  // through a block, into the caller's memory
    a.release(*x);
    a.release(*y);
  }
  // The arena neither freed nor touched the memory: what was written through the block is still there.
  EXPECT_EQ(memory[1024], 0x5a);
  EXPECT_EQ(memory[1024 + 4999], 0x5a);
  EXPECT_EQ(memory[0], 0);
}

TEST(Arena, AlignsTracksAndReusesSpace) {
  Arena a("device 0", 4096);
  auto x = a.allocate(100, "x");
  auto y = a.allocate(300, "y");
  ASSERT_TRUE(x.is_ok() && y.is_ok());
  EXPECT_EQ(x->bytes, 256u);
  EXPECT_EQ(y->bytes, 512u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(y->data) % Arena::kAlign, 0u);
  std::memset(y->data, 0xab, y->bytes);  // the memory is really there
  EXPECT_EQ(a.used(), 768u);
  a.release(*x);
  auto z = a.allocate(200, "z");  // first fit: the hole x left
  ASSERT_TRUE(z.is_ok());
  EXPECT_EQ(z->offset, 0u);
  a.release(*z);
  a.release(*y);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.peak(), 768u);
  EXPECT_EQ(a.largest_free(), 4096u);  // fully coalesced
}

TEST(Arena, OutOfMemoryNamesTheRequestAndTheState) {
  Arena a("device 0", 1024);
  auto x = a.allocate(256, "x");
  auto y = a.allocate(256, "y");
  auto z = a.allocate(256, "z");
  ASSERT_TRUE(x.is_ok() && y.is_ok() && z.is_ok());
  a.release(*y);  // 512 free, but split into 256 + 256
  auto big = a.allocate(512, "h.3.mlp.c_fc.weight");
  ASSERT_FALSE(big.is_ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfMemory);
  const std::string& m = big.status().message();
  EXPECT_NE(m.find("device 0"), std::string::npos) << m;
  EXPECT_NE(m.find("h.3.mlp.c_fc.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("largest free range"), std::string::npos) << m;
  EXPECT_EQ(a.used(), 512u);  // a failed request changes nothing
}

TEST(Arena, RandomAllocateReleaseKeepsInvariants) {
  Arena a("d", 1 << 20);
  std::mt19937 rng(1);
  std::vector<Arena::Block> live;
  std::size_t used = 0;
  for (int i = 0; i < 5000; ++i) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 200)) {
      const std::size_t k = rng() % live.size();
      used -= live[k].bytes;
      a.release(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      auto b = a.allocate(1 + rng() % 20000, "t");
      if (b.is_ok()) {
        for (const auto& o : live) {  // no overlap with any live block
          EXPECT_TRUE(b->offset + b->bytes <= o.offset || o.offset + o.bytes <= b->offset);
        }
        used += b->bytes;
        live.push_back(*b);
      }
    }
    ASSERT_EQ(a.used(), used);
  }
  for (const auto& b : live) a.release(b);
  EXPECT_EQ(a.largest_free(), std::size_t{1} << 20);
}

}  // namespace
}  // namespace memwall::host
