// Tensor store: round trips and reopen, versions and uncommitted writes, space reuse and a full store,
// checksum corruption, kill -9 in the middle of commits, bad indexes and bad fields in one, a full filesystem
// at creation.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "engine/io/crc32c.h"
#include "engine/io/tensor_store.h"

namespace memwall::io {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::current_path() / "tensor_store_test_files" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::unique_ptr<AsyncIo> engine() {
  IoSettings s;
  s.block_size = 256 * 1024;
  s.queue_depth = 8;
  s.parallelism = 2;
  return AsyncIo::create(s).value();
}

// Tensor `name` at version `v`: the version in the first 8 bytes, then bytes derived from both.
std::vector<char> pattern(const std::string& name, std::uint64_t v, std::size_t bytes) {
  std::vector<char> out(bytes);
  std::mt19937_64 rng(std::hash<std::string>{}(name) ^ (v * 0x9e3779b97f4a7c15ull));
  for (auto& c : out) c = static_cast<char>(rng());
  if (bytes >= 8) std::memcpy(out.data(), &v, 8);
  return out;
}

TEST(Crc32c, KnownValueAndHardwareMatchesPortable) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xe3069283u);  // the standard CRC32C check value
  std::vector<char> data = pattern("x", 1, 100003);
  EXPECT_EQ(crc32c(data.data(), data.size()), crc32c_extend_portable(0, data.data(), data.size()));
  EXPECT_EQ(crc32c_extend(crc32c(data.data(), 5000), data.data() + 5000, data.size() - 5000),
            crc32c(data.data(), data.size()));
}

TEST(Crc32c, CombineGivesTheCrcOfTheConcatenation) {
  std::vector<char> data = pattern("y", 2, 70001);
  const std::uint32_t whole = crc32c(data.data(), data.size());
  for (std::size_t cut :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4096}, data.size() - 3, data.size()}) {
    const std::uint32_t a = crc32c(data.data(), cut), b = crc32c(data.data() + cut, data.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, data.size() - cut), whole) << "cut at " << cut;
  }
  // Three pieces, as a checkpoint's three arrays; a changed byte changes the result.
  const std::size_t third = data.size() / 3;
  std::uint32_t c = crc32c_combine(crc32c(data.data(), third), crc32c(data.data() + third, third), third);
  c = crc32c_combine(c, crc32c(data.data() + 2 * third, data.size() - 2 * third), data.size() - 2 * third);
  EXPECT_EQ(c, whole);
  EXPECT_NE(crc32c_combine(crc32c(data.data(), third), crc32c(data.data() + third, third), third + 1),
            crc32c(data.data(), 2 * third));
}

TEST(TensorStore, RollbackDropsWhatWasStagedSinceTheCommit) {
  const std::string dir = fresh_dir("rollback");
  auto io = engine();
  StoreOptions opt;
  opt.dir = dir;
  opt.capacity_bytes = 8 << 20;
  opt.extent_bytes = 4 << 20;
  auto store = TensorStore::create(opt, *io).value();
  const std::vector<char> a1 = pattern("a", 1, 300000), b1 = pattern("b", 1, 5000);
  ASSERT_TRUE(store->write("a", a1.data(), a1.size()).is_ok());
  ASSERT_TRUE(store->write("b", b1.data(), b1.size()).is_ok());
  ASSERT_TRUE(store->commit().is_ok());
  const std::uint64_t free_before = store->free_bytes();
  // Staged: "a" twice, a new "c", "b" removed.
  const std::vector<char> a2 = pattern("a", 2, 300000), a3 = pattern("a", 3, 300000),
                          c1 = pattern("c", 1, 7000);
  ASSERT_TRUE(store->write("a", a2.data(), a2.size()).is_ok());
  ASSERT_TRUE(store->write("a", a3.data(), a3.size()).is_ok());
  ASSERT_TRUE(store->write("c", c1.data(), c1.size()).is_ok());
  ASSERT_TRUE(store->remove("b").is_ok());
  EXPECT_LT(store->free_bytes(), free_before);
  store->rollback();
  EXPECT_EQ(store->free_bytes(), free_before);
  EXPECT_FALSE(store->contains("c"));
  std::vector<char> got(a1.size());
  ASSERT_TRUE(store->get("a", got.data(), got.size()).is_ok());
  EXPECT_EQ(got, a1);
  got.resize(b1.size());
  ASSERT_TRUE(store->get("b", got.data(), got.size()).is_ok());
  EXPECT_EQ(got, b1);
  // Writing and committing after a rollback works as ever.
  ASSERT_TRUE(store->put("a", a2.data(), a2.size()).is_ok());
  got.resize(a2.size());
  ASSERT_TRUE(store->get("a", got.data(), got.size()).is_ok());
  EXPECT_EQ(got, a2);
}

TEST(TensorStore, RoundTripAndReopen) {
  const std::string dir = fresh_dir("roundtrip");
  auto io = engine();
  StoreOptions opt;
  opt.dir = dir;
  opt.capacity_bytes = 8 << 20;
  opt.extent_bytes = 4 << 20;
  opt.checksum_block = 64 * 1024;
  const std::size_t sizes[] = {1, 4095, 4096, 100001, 3 << 20};
  {
    auto store = TensorStore::create(opt, *io).value();
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      const auto data = pattern("t" + std::to_string(i), 1, sizes[i]);
      ASSERT_TRUE(store->put("t" + std::to_string(i), data.data(), data.size()).is_ok());
    }
  }
  auto store = TensorStore::open(dir, 0, *io).value();
  EXPECT_EQ(store->names().size(), std::size(sizes));
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    const auto want = pattern("t" + std::to_string(i), 1, sizes[i]);
    std::vector<char> got(sizes[i]);
    ASSERT_TRUE(store->get("t" + std::to_string(i), got.data(), got.size()).is_ok());
    EXPECT_EQ(got, want) << i;
  }
  std::vector<char> wrong(7);
  EXPECT_FALSE(store->get("t0", wrong.data(), wrong.size()).is_ok());  // size mismatch is named
  EXPECT_EQ(store->get("nope", wrong.data(), 7).code(), StatusCode::kNotFound);
}

TEST(TensorStore, UncommittedVersionsVanishOnReopen) {
  const std::string dir = fresh_dir("versions");
  auto io = engine();
  StoreOptions opt;
  opt.dir = dir;
  opt.capacity_bytes = 4 << 20;
  opt.extent_bytes = 4 << 20;
  auto store = TensorStore::create(opt, *io).value();
  const auto v1 = pattern("w", 1, 50000), v2 = pattern("w", 2, 50000), v3 = pattern("w", 3, 50000);
  ASSERT_TRUE(store->put("w", v1.data(), v1.size()).is_ok());
  ASSERT_TRUE(store->put("w", v2.data(), v2.size()).is_ok());
  ASSERT_TRUE(store->write("w", v3.data(), v3.size()).is_ok());  // staged, not committed
  std::vector<char> got(50000);
  ASSERT_TRUE(store->get("w", got.data(), got.size()).is_ok());
  EXPECT_EQ(got, v3);
  auto reopened = TensorStore::open(dir, 0, *io).value();
  ASSERT_TRUE(reopened->get("w", got.data(), got.size()).is_ok());
  EXPECT_EQ(got, v2);
}

TEST(TensorStore, SpaceIsReusedAndAFullStoreFailsCleanly) {
  const std::string dir = fresh_dir("full");
  auto io = engine();
  StoreOptions opt;
  opt.dir = dir;
  opt.capacity_bytes = 2 << 20;
  opt.extent_bytes = 1 << 20;
  auto store = TensorStore::create(opt, *io).value();
  const std::uint64_t cap = store->capacity_bytes();
  for (int v = 0; v < 20; ++v) {  // overwriting many times never runs out: replaced regions come back
    const auto d = pattern("a", v, 600000);
    ASSERT_TRUE(store->put("a", d.data(), d.size()).is_ok()) << v;
  }
  EXPECT_EQ(store->free_bytes(), cap - 602112);  // 600000 rounded up to 4 KiB
  const auto b = pattern("b", 1, 900000);
  ASSERT_TRUE(store->put("b", b.data(), b.size()).is_ok());
  const auto c = pattern("c", 1, 900000);
  const Status full = store->put("c", c.data(), c.size());
  ASSERT_FALSE(full.is_ok());
  EXPECT_EQ(full.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(full.message().find("is full"), std::string::npos) << full.message();
  std::vector<char> got(900000);
  ASSERT_TRUE(store->get("b", got.data(), got.size()).is_ok());
  EXPECT_EQ(got, b);
  const auto big = pattern("big", 1, 2 << 20);
  EXPECT_NE(store->put("big", big.data(), big.size()).message().find("does not fit one"), std::string::npos);
}

TEST(TensorStore, CorruptionIsDetectedByChecksums) {
  const std::string dir = fresh_dir("corrupt");
  auto io = engine();
  StoreOptions opt;
  opt.dir = dir;
  opt.capacity_bytes = 1 << 20;
  opt.extent_bytes = 1 << 20;
  opt.checksum_block = 4096;
  {
    auto store = TensorStore::create(opt, *io).value();
    const auto d = pattern("x", 1, 20000);
    ASSERT_TRUE(store->put("x", d.data(), d.size()).is_ok());
  }
  {
    std::fstream f(dir + "/rank0/extent-0.dat", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(9000);
    f.put('\x5a');
  }
  auto store = TensorStore::open(dir, 0, *io).value();
  std::vector<char> got(20000);
  const Status s = store->get("x", got.data(), got.size());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("checksum mismatch in block 2"), std::string::npos) << s.message();
}

TEST(TensorStore, KillDuringCommitsLeavesWholeVersions) {
  // A child commits new versions of 6 tensors in a loop and is killed with SIGKILL at a random moment; the
  // reopened store must hold, for every tensor, one complete version (never a torn mix).
  const std::string dir = fresh_dir("crash");
  {
    auto io = engine();
    StoreOptions opt;
    opt.dir = dir;
    opt.capacity_bytes = 16 << 20;
    opt.extent_bytes = 8 << 20;
    opt.checksums = false;  // tearing must be caught by the content itself, not hidden by a checksum error
    ASSERT_TRUE(TensorStore::create(opt, *io).is_ok());
  }
  const std::size_t bytes = 700001;
  std::mt19937 rng(42);
  std::uint64_t newest = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto io = engine();
      auto store = TensorStore::open(dir, 0, *io).value();
      for (std::uint64_t v = 1;; ++v) {
        for (int t = 0; t < 6; ++t) {
          const std::string name = "p" + std::to_string(t);
          const auto d = pattern(name, v, bytes);
          if (!store->write(name, d.data(), d.size()).is_ok()) _exit(3);
          if (t % 2 == 1 && !store->commit().is_ok()) _exit(4);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 400));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself with " << WEXITSTATUS(status);
    auto io = engine();
    auto store = TensorStore::open(dir, 0, *io).value();
    int present = 0;
    for (int t = 0; t < 6; ++t) {
      const std::string name = "p" + std::to_string(t);
      if (!store->contains(name)) continue;
      ++present;
      std::vector<char> got(bytes);
      ASSERT_TRUE(store->get(name, got.data(), got.size()).is_ok());
      std::uint64_t v = 0;
      std::memcpy(&v, got.data(), 8);
      EXPECT_EQ(got, pattern(name, v, bytes)) << name << " is torn (version " << v << ")";
      newest = std::max(newest, v);
    }
    EXPECT_GT(present, 0);
  }
  EXPECT_GT(newest, 2u) << "the writer never got past its first versions: the kill tested nothing";
}

TEST(TensorStore, BadStoresAreNamed) {
  auto io = engine();
  EXPECT_EQ(TensorStore::open(fresh_dir("missing"), 0, *io).status().code(), StatusCode::kNotFound);
  const std::string dir = fresh_dir("badversion");
  fs::create_directories(dir + "/rank0");
  std::ofstream(dir + "/rank0/index.json") << R"({"format": "memwall-tensor-store", "version": 9})";
  const auto r = TensorStore::open(dir, 0, *io);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("version 9 is not supported"), std::string::npos)
      << r.status().message();
  StoreOptions opt;
  opt.dir = fresh_dir("twice");
  opt.capacity_bytes = 1 << 20;
  opt.extent_bytes = 1 << 20;
  ASSERT_TRUE(TensorStore::create(opt, *io).is_ok());
  EXPECT_EQ(TensorStore::create(opt, *io).status().code(), StatusCode::kFailedPrecondition);
}

// An index edited by hand or by a broken tool: each bad field is refused in one line naming it, never a
// crash, a hang (a checksum block of 0), a table sized by a negative count or a wrapped offset let through.
TEST(TensorStore, CorruptIndexFieldsAreNamed) {
  auto io = engine();
  StoreOptions opt;
  opt.dir = fresh_dir("fields");
  opt.capacity_bytes = 1 << 20;
  opt.extent_bytes = 1 << 20;
  opt.checksum_block = 64 * 1024;
  {
    auto store = TensorStore::create(opt, *io).value();
    const auto data = pattern("t", 1, 10000);
    ASSERT_TRUE(store->put("t", data.data(), data.size()).is_ok());
  }
  const std::string index = opt.dir + "/rank0/index.json";
  std::stringstream text;
  text << std::ifstream(index).rdbuf();
  const auto good = nlohmann::json::parse(text.str());
  const std::pair<std::string, std::function<void(nlohmann::json&)>> cases[] = {
      {"'extents' is -1", [](nlohmann::json& j) { j["extents"] = -1; }},
      {"'extent_bytes' 4100 is not a multiple", [](nlohmann::json& j) { j["extent_bytes"] = 4100; }},
      {"'checksum_block' is 0", [](nlohmann::json& j) { j["checksum_block"] = 0; }},
      {"'tensors.t.offset' is -5", [](nlohmann::json& j) { j["tensors"]["t"]["offset"] = -5; }},
      {"tensor 't' lies outside the extents",  // (an offset past the extent)
       [](nlohmann::json& j) { j["tensors"]["t"]["offset"] = (1ull << 63) - 1; }},
      {"'tensors.t.crc32c' is \"x\"", [](nlohmann::json& j) { j["tensors"]["t"]["crc32c"] = "x"; }},
      {"'tensors' is 5", [](nlohmann::json& j) { j["tensors"] = 5; }},
      {"number overflow", [](nlohmann::json&) {}},
  };
  for (const auto& [want, edit] : cases) {
    nlohmann::json j = good;
    edit(j);
    std::ofstream(index) << (want == "number overflow" ? std::string(R"({"extents": 1e400})") : j.dump());
    const auto r = TensorStore::open(opt.dir, 0, *io);
    ASSERT_FALSE(r.is_ok()) << want;
    EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().message();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  }
  std::ofstream(index) << good.dump();
  ASSERT_TRUE(TensorStore::open(opt.dir, 0, *io).is_ok());
}

// On a filesystem that refuses O_DIRECT (ramfs) the store works through buffered I/O and says so
// (memwall train warns that its NVMe tier is the page cache); elsewhere as direct as the filesystem allows.
TEST(TensorStore, SaysWhetherItsExtentsAreDirect) {
  auto io = engine();
  StoreOptions opt;
  opt.capacity_bytes = 1 << 20;
  opt.extent_bytes = 1 << 20;
  opt.dir = fresh_dir("direct");
  {  // (as direct as a file the I/O engine opens beside it)
    const bool here =
        File::open(opt.dir + "/probe", OpenMode::kReadWrite, true, true, nullptr).value()->direct();
    EXPECT_EQ(TensorStore::create(opt, *io).value()->direct(), here);
  }
  const std::string dir = fresh_dir("ramfs");
  if (::mount("ramfs", dir.c_str(), "ramfs", 0, nullptr) != 0) {
    GTEST_SKIP() << "cannot mount a ramfs here (" << std::strerror(errno) << ")";
  }
  {
    opt.dir = dir;
    auto store = TensorStore::create(opt, *io).value();
    EXPECT_FALSE(store->direct());
    const auto data = pattern("t", 1, 10000);
    ASSERT_TRUE(store->put("t", data.data(), data.size()).is_ok());
    std::vector<char> got(data.size());
    ASSERT_TRUE(store->get("t", got.data(), got.size()).is_ok());
    EXPECT_EQ(got, data);
  }
  ::umount(dir.c_str());
}

TEST(TensorStore, CreationOnAFullFilesystemLeavesNothingBehind) {
  const std::string dir = fresh_dir("tinyfs");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
  }
  {
    auto io = engine();
    StoreOptions opt;
    opt.dir = dir;
    opt.capacity_bytes = 4 << 20;
    opt.extent_bytes = 2 << 20;
    const auto r = TensorStore::create(opt, *io);
    EXPECT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(std::strerror(ENOSPC)), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(dir + "/rank0/extent-0.dat"));
    EXPECT_FALSE(fs::exists(dir + "/rank0/index.json"));
  }
  ::umount(dir.c_str());
}

}  // namespace
}  // namespace memwall::io

namespace memwall::io {
namespace {

// A reader and a writer thread, as memwall train's NVMe read and write lanes: the writer keeps replacing
// tensors w0..w7 while the reader reads r0..r7 and, between commits, the writer's previous versions (which
// stay readable until the next commit). Every read is a whole, checksummed version; a non-durable store
// (swap) reuses the space at each commit without syncing.
TEST(TensorStore, AReaderAndAWriterThreadOverlap) {
  for (bool durable : {true, false}) {
    SCOPED_TRACE(durable ? "durable" : "swap");
    const std::string dir = fresh_dir(durable ? "threads-durable" : "threads-swap");
    auto io = engine();
    StoreOptions opt;
    opt.dir = dir;
    opt.capacity_bytes = 32 << 20;
    opt.extent_bytes = 8 << 20;
    opt.checksum_block = 64 * 1024;
    opt.durable = durable;
    auto store = TensorStore::create(opt, *io).value();
    const std::size_t bytes = 300 * 1024;
    for (int i = 0; i < 8; ++i) {
      const auto r = pattern("r" + std::to_string(i), 1, bytes);
      const auto w = pattern("w" + std::to_string(i), 0, bytes);
      ASSERT_TRUE(store->write("r" + std::to_string(i), r.data(), r.size()).is_ok());
      ASSERT_TRUE(store->write("w" + std::to_string(i), w.data(), w.size()).is_ok());
    }
    ASSERT_TRUE(store->commit().is_ok());
    for (std::uint64_t round = 1; round <= 6; ++round) {
      std::atomic<int> failures{0};
      std::thread writer([&] {
        for (int i = 0; i < 8; ++i) {
          const auto w = pattern("w" + std::to_string(i), round, bytes);
          if (!store->write("w" + std::to_string(i), w.data(), w.size()).is_ok()) ++failures;
        }
      });
      std::thread reader([&] {
        std::vector<char> got(bytes);
        for (int k = 0; k < 16; ++k) {
          const std::string name = (k % 2 ? "w" : "r") + std::to_string(k / 2);
          if (!store->get(name, got.data(), got.size()).is_ok()) {
            ++failures;
            continue;
          }
          std::uint64_t v = 0;
          std::memcpy(&v, got.data(), 8);  // whichever version it saw, it must be that version whole
          if (got != pattern(name, v, bytes)) ++failures;
        }
      });
      writer.join();
      reader.join();
      EXPECT_EQ(failures.load(), 0) << "round " << round;
      ASSERT_TRUE(store->commit().is_ok());  // frees the replaced versions
    }
    std::vector<char> got(bytes);
    ASSERT_TRUE(store->get("w3", got.data(), got.size()).is_ok());
    EXPECT_EQ(got, pattern("w3", 6, bytes));
    EXPECT_GT(store->free_bytes(), std::uint64_t{16} << 20);  // space came back at each commit
  }
}

}  // namespace
}  // namespace memwall::io
