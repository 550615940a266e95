// ZeRO-3 on one rank against the plain model + Adam: the same losses step after step.
#include "engine/train/zero3.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

namespace memwall::train {
namespace {

model::GptConfig small() {
  model::GptConfig c;
  c.vocab = 17;
  c.max_seq = 8;
  c.layers = 2;
  c.heads = 2;
  c.channels = 16;
  return c;
}

void batch(int step, int B, int T, std::vector<int>& tok, std::vector<int>& tgt) {
  tok.resize(static_cast<std::size_t>(B * T));
  tgt.resize(tok.size());
  for (int i = 0; i < B * T; ++i) {
    tok[static_cast<std::size_t>(i)] = (7 * i + 3 * step + 1) % 17;
    tgt[static_cast<std::size_t>(i)] = (5 * i + step + 2) % 17;
  }
}

TEST(Zero3, OneRankFollowsThePlainModel) {
  const model::GptConfig c = small();
  Zero3Options o;
  o.micro_batch = 2;
  o.seq = 8;
  o.seed = 5;
  o.adam.lr = 1e-2f;
  auto local = comm::make_local_comm();
  auto z = Zero3Trainer::create(c, o, *local);
  ASSERT_TRUE(z.is_ok()) << z.status().to_string();
  EXPECT_EQ(z->shard_elements(), z->model_elements());

  const std::size_t n = model::gpt_num_params(c);
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  model::gpt_init(c, p.data(), 5);
  model::GptModel ref(c, 2, 8);
  std::vector<int> tok, tgt;
  for (int s = 0; s < 5; ++s) {
    batch(s, 2, 8, tok, tgt);
    const float want = ref.forward(p.data(), tok.data(), tgt.data());
    std::fill(g.begin(), g.end(), 0.0f);
    ref.backward(p.data(), g.data());
    const kernels::AdamArrays a = kernels::fp32_arrays(p.data(), m.data(), v.data(), g.data(), n);
    kernels::AdamHyper h = o.adam;
    h.step = s + 1;
    kernels::adam_step(a, h, 1);
    auto got = z->step(tok.data(), tgt.data());
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_NEAR(static_cast<double>(*got), static_cast<double>(want), 1e-6 * static_cast<double>(want))
        << "step " << s;
  }
  std::vector<float> full;
  ASSERT_TRUE(z->gather_params(full).is_ok());
  for (std::size_t i = 0; i < n; i += 7) {
    EXPECT_NEAR(static_cast<double>(full[i]), static_cast<double>(p[i]), 1e-5) << i;
  }
}

TEST(Zero3, InvalidConfigsAreRejectedBeforeAnyWork) {
  auto local = comm::make_local_comm();
  Zero3Options o;
  o.seq = 64;  // > max_seq
  auto z = Zero3Trainer::create(small(), o, *local);
  ASSERT_FALSE(z.is_ok());
  EXPECT_NE(z.status().message().find("max_seq"), std::string::npos);
  o.seq = 8;
  o.tiling = 3;
  z = Zero3Trainer::create(small(), o, *local);
  ASSERT_FALSE(z.is_ok());
  EXPECT_NE(z.status().message().find("tiling 3"), std::string::npos);
}

}  // namespace
}  // namespace memwall::train

namespace memwall::train {
namespace {

TEST(Zero3, ResumeFromACheckpointGivesBitwiseTheSameLosses) {
  const model::GptConfig c = small();
  Zero3Options o;
  o.micro_batch = 2;
  o.seq = 8;
  o.seed = 9;
  o.adam.lr = 1e-2f;
  auto local = comm::make_local_comm();
  const std::string dir = ::testing::TempDir() + "zero3-ckpt-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::vector<int> tok, tgt;
  std::vector<float> straight;
  {
    auto z = Zero3Trainer::create(c, o, *local);
    ASSERT_TRUE(z.is_ok());
    for (int s = 0; s < 6; ++s) {
      batch(s, 2, 8, tok, tgt);
      straight.push_back(*z->step(tok.data(), tgt.data()));
      if (s == 1 || s == 2) {  // the second checkpoint replaces the first
        ASSERT_TRUE(z->save(dir).is_ok());
      }
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000002"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-00000003/rank-0-of-1.bin"));
  auto resumed = Zero3Trainer::create(c, o, *local);
  ASSERT_TRUE(resumed.is_ok());
  auto at = resumed->load(dir);
  ASSERT_TRUE(at.is_ok()) << at.status().to_string();
  EXPECT_EQ(*at, 3);
  for (int s = 3; s < 6; ++s) {
    batch(s, 2, 8, tok, tgt);
    const float l = *resumed->step(tok.data(), tgt.data());
    EXPECT_EQ(l, straight[static_cast<std::size_t>(s)]) << "step " << s;  // bitwise
  }

  // A different model, and a corrupted shard, are refused with the file named.
  model::GptConfig other = c;
  other.layers = 3;
  auto wrong = Zero3Trainer::create(other, o, *local);
  ASSERT_TRUE(wrong.is_ok());
  auto refused = wrong->load(dir);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("layers = 2"), std::string::npos) << refused.status().message();
  const std::string shard = dir + "/step-00000003/rank-0-of-1.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  auto corrupt = resumed->load(dir);
  ASSERT_FALSE(corrupt.is_ok());
  EXPECT_NE(corrupt.status().message().find("checksum mismatch"), std::string::npos)
      << corrupt.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memwall::train
