// Byte-level corpus: splits, deterministic batches, clear errors, and the bible-kjv default corpus.
#include "engine/train/dataset.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <string>
#include <vector>

namespace memwall::train {
namespace {

std::vector<std::uint8_t> text(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>('a' + (i * 7 + i / 13) % 26);
  return v;
}

TEST(Dataset, SplitsAndShiftsTargetsByOne) {
  auto ds = TextDataset::from_bytes(text(1000), 0.1, 16, "mem");
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->train_tokens(), 900u);
  EXPECT_EQ(ds->val_tokens(), 100u);
  std::vector<int> tok(4 * 16), tgt(4 * 16);
  ds->train_batch(1, 0, 4, 16, tok.data(), tgt.data());
  for (int i = 0; i < 4 * 16; ++i) {
    if (i % 16 != 15) {
      EXPECT_EQ(tgt[i], tok[i + 1]);
    }
    EXPECT_GE(tok[i], 'a');
  }
  EXPECT_EQ(ds->val_windows(16), 99u / 16u);
  ds->val_batch(0, 2, 16, tok.data(), tgt.data());
  const auto raw = text(1000);
  EXPECT_EQ(tok[0], raw[900]);
  EXPECT_EQ(tok[16], raw[916]);
  EXPECT_EQ(tgt[15], raw[916]);
}

TEST(Dataset, TrainBatchesArePureFunctionsOfSeedAndStep) {
  auto ds = TextDataset::from_bytes(text(5000), 0.05, 32, "mem");
  ASSERT_TRUE(ds.is_ok());
  std::vector<int> a(2 * 32), b(2 * 32), c(2 * 32), t(2 * 32);
  ds->train_batch(42, 7, 2, 32, a.data(), t.data());
  ds->train_batch(42, 8, 2, 32, c.data(), t.data());  // unrelated call in between
  ds->train_batch(42, 7, 2, 32, b.data(), t.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ds->train_batch(43, 7, 2, 32, c.data(), t.data());
  EXPECT_NE(a, c);
}

TEST(Dataset, ErrorsNameTheSourceAndWhatIsNeeded) {
  auto small = TextDataset::from_bytes(text(50), 0.1, 16, "tiny.txt");
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("tiny.txt"), std::string::npos);
  EXPECT_NE(small.status().message().find("seq+1 = 17"), std::string::npos);
  EXPECT_FALSE(TextDataset::from_bytes(text(1000), 1.0, 16, "m").is_ok());
  auto missing = TextDataset::from_file("/nonexistent/corpus.txt", 0.1, 16);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/corpus.txt"), std::string::npos);
}

TEST(Dataset, KingJamesBibleCorpus) {
  if (std::system("command -v bible >/dev/null 2>&1") != 0) GTEST_SKIP() << "bible-kjv not installed";
  const std::string cache = ::testing::TempDir() + "kjv-" + std::to_string(::getpid()) + ".txt";
  auto path = kjv_corpus(cache);
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  auto ds = TextDataset::from_file(*path, 0.05, 256);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_GT(ds->train_tokens() + ds->val_tokens(), 4'000'000u);
  std::FILE* f = std::fopen(path->c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string head(4096, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), f));
  std::fclose(f);
  EXPECT_NE(head.find("In the beginning God created the heaven and the earth."), std::string::npos);
  std::remove(cache.c_str());
}

}  // namespace
}  // namespace memwall::train
