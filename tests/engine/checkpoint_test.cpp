// Checkpoint rank files: written in pieces as three aligned streams (version 2), read back in any range,
// checked by CRC; version 1 files (no padding) still read; a bad latest.json is refused naming its key.
#include "engine/train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "engine/io/crc32c.h"
#include "engine/temp_dir.h"

namespace memwall::train::ckpt {
namespace {

std::string temp_dir(const std::string& name) {
  return testing::fresh_temp_dir("ckpt-" + name);
}

std::vector<float> values(std::size_t n, int array) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f + static_cast<float>(array) * 1e6f;
  return v;
}

TEST(Checkpoint, PiecesOfAnySizeWriteAlignedStreamsThatReadBack) {
  const std::string dir = temp_dir("v2");
  // More than one 4 MiB stream buffer per array, and a size that no block divides.
  const std::size_t n = 1500007;
  const std::vector<float> a = values(n, 0), b = values(n, 1), c = values(n, 2);
  const std::string path = dir + "/rank-0-of-1.bin";
  {
    auto w = ShardWriter::create(path, 42, n);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    std::mt19937 rng(7);
    for (std::size_t at = 0; at < n;) {
      const std::size_t k = std::min<std::size_t>(n - at, 1 + rng() % 400000);
      ASSERT_TRUE(w->write(at, k, a.data() + at, b.data() + at, c.data() + at).is_ok());
      at += k;
    }
    EXPECT_FALSE(w->write(0, 1, a.data(), b.data(), c.data()).is_ok());  // out of order
    std::printf("checkpoint file written %s\n",
                w->direct() ? "with O_DIRECT" : "buffered (no O_DIRECT here)");
    ASSERT_TRUE(w->commit().is_ok());
  }
  // Header block, then each array padded to 4096 bytes.
  const std::uint64_t padded = (n * 4 + 4095) / 4096 * 4096;
  EXPECT_EQ(std::filesystem::file_size(path), 4096 + 3 * padded);
  auto r = ShardReader::open(path, n);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->version(), 2);
  EXPECT_EQ(r->step(), 42);
  ASSERT_TRUE(r->verify().is_ok());
  std::vector<float> x(1000), y(1000), z(1000);
  ASSERT_TRUE(r->read(n - 1000, 1000, x.data(), y.data(), z.data()).is_ok());
  EXPECT_EQ(std::memcmp(x.data(), a.data() + n - 1000, 4000), 0);
  EXPECT_EQ(std::memcmp(y.data(), b.data() + n - 1000, 4000), 0);
  EXPECT_EQ(std::memcmp(z.data(), c.data() + n - 1000, 4000), 0);
  EXPECT_FALSE(ShardReader::open(path, n + 1).is_ok());  // another partition
  // A flipped byte in the last array fails the check.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(4096 + 2 * padded + 12345));
    f.put('\x55');
  }
  auto bad = ShardReader::open(path, n);
  ASSERT_TRUE(bad.is_ok());
  EXPECT_NE(bad->verify().message().find("checksum mismatch"), std::string::npos);
  // A writer that is not committed leaves no file; one committed short is refused.
  {
    auto w = ShardWriter::create(dir + "/short.bin", 1, n);
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE(w->write(0, 10, a.data(), b.data(), c.data()).is_ok());
    EXPECT_FALSE(w->commit().is_ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/short.bin"));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  std::filesystem::remove_all(dir);
}

// latest.json edited by hand or cut short: each bad field is refused in one line naming the file and the key,
// not thrown as a JSON type error or divided by (heads 0) in the readers that trust it.
TEST(Checkpoint, ABadLatestFileIsNamed) {
  const std::string dir = temp_dir("latest");
  model::GptConfig c;
  nlohmann::json good = model_fields(c);
  good.update({{"format", "memwall-zero3-checkpoint"},
               {"step", 3},
               {"dir", step_dir_name(3)},
               {"ranks", 2},
               {"data_parallel", 2},
               {"tiling", 1},
               {"params", 1000}});
  const auto write = [&](const std::string& text) { std::ofstream(dir + "/latest.json") << text; };
  write(good.dump());
  ASSERT_TRUE(read_latest(dir).is_ok()) << read_latest(dir).status().message();
  const std::pair<std::string, std::function<void(nlohmann::json&)>> cases[] = {
      {"key 'channels' is \"x\"; allowed: a number", [](nlohmann::json& j) { j["channels"] = "x"; }},
      {"key 'tied' is 1; allowed: a boolean", [](nlohmann::json& j) { j["tied"] = 1; }},
      {"heads must be >= 1, got 0", [](nlohmann::json& j) { j["heads"] = 0; }},
      {"key 'ranks' is 0", [](nlohmann::json& j) { j["ranks"] = 0; }},
      {"key 'tiling' is 1.5", [](nlohmann::json& j) { j["tiling"] = 1.5; }},
      {"key 'dir' is \"../elsewhere\"", [](nlohmann::json& j) { j["dir"] = "../elsewhere"; }},
      {"key 'dir' is missing", [](nlohmann::json& j) { j.erase("dir"); }},
      {"not a memwall checkpoint", [](nlohmann::json& j) { j["format"] = 3; }},
      {"not a memwall checkpoint", [](nlohmann::json& j) { j = nlohmann::json::array(); }},
  };
  for (const auto& [want, edit] : cases) {
    nlohmann::json j = good;
    edit(j);
    write(j.dump());
    const auto r = read_latest(dir);
    ASSERT_FALSE(r.is_ok()) << want;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
    EXPECT_NE(r.status().message().find(dir + "/latest.json: "), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
  write(R"({"format": "memwall-zero3-checkpoint", "step": 1e400})");
  const auto r = read_latest(dir);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not valid JSON: number overflow"), std::string::npos)
      << r.status().message();
}

TEST(Checkpoint, Version1FilesStillRead) {
  const std::string dir = temp_dir("v1");
  const std::size_t n = 1001;
  const std::vector<float> a = values(n, 0), b = values(n, 1), c = values(n, 2);
  // The version 1 layout: a 32-byte header, the arrays back to back.
  struct {
    char magic[8] = {'M', 'W', 'Z', '3', 'C', 'K', 'P', '1'};
    std::int64_t step = 7;
    std::uint64_t elements = 1001;
    std::uint32_t crc = 0, reserved = 0;
  } h;
  h.crc = io::crc32c_extend(io::crc32c_extend(io::crc32c(a.data(), n * 4), b.data(), n * 4), c.data(), n * 4);
  const std::string path = dir + "/old.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    for (const auto* arr : {&a, &b, &c}) f.write(reinterpret_cast<const char*>(arr->data()), n * 4);
  }
  auto r = ShardReader::open(path, n);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->version(), 1);
  EXPECT_EQ(r->step(), 7);
  EXPECT_TRUE(r->verify().is_ok());
  std::vector<float> y(5);
  ASSERT_TRUE(r->read(990, 5, nullptr, y.data(), nullptr).is_ok());
  EXPECT_EQ(y[0], b[990]);
  EXPECT_EQ(y[4], b[994]);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace memwall::train::ckpt
