// Run under `mpirun -np 2` by ctest (and alone, as one rank): all-gather, deterministic reduce-scatter, and
// a collective that a peer joins too late, which must come back as a timeout naming the rank and the tag, and
// ranks that call different collectives, which must come back as an error naming what each rank runs; the
// ranks sharing a text's BPE encoding (the tokens of one pass; a file one rank cannot read fails them all).
// Exits non-zero on the first failed check.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/train/dataset.h"

using namespace memwall;

namespace {
int failures = 0;
void check(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what);
    ++failures;
  }
}

// A directory of two documents and a file only rank 0 has, in a directory of this rank's own (relative
// paths then name the same files on every rank): the shared encoding against one pass, and the error.
void check_shared_encoding(comm::Communicator& c) {
  const int r = c.rank();
  auto t = train::BpeTokenizer::load(std::string(MEMWALL_TEST_SOURCE_DIR) + "/data/tiny-bpe");
  check(t.is_ok(), "the test tokenizer loads", r);
  if (!t.is_ok()) return;
  char dir[] = "/tmp/memwall-comm-XXXXXX";
  check(mkdtemp(dir) != nullptr, "a temporary directory", r);
  const auto home = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  std::filesystem::create_directory("corpus");
  std::string text;
  for (int i = 0; text.size() < 300000; ++i)
    text += "And God said, Let there be light " + std::to_string(i) + "\n";
  std::ofstream("corpus/a.txt") << text;
  std::ofstream("corpus/b.txt") << text.substr(1000);
  if (r == 0) std::ofstream("only0.txt") << text;

  std::size_t shared_bytes = 0, bytes = 0;
  auto shared = train::text_tokens("corpus", &*t, &shared_bytes, &c);
  auto alone = train::text_tokens("corpus", &*t, &bytes);
  check(shared.is_ok() && alone.is_ok() && *shared == *alone, "shared encoding = one pass", r);
  check(shared_bytes == bytes && bytes == 2 * text.size() - 1000, "shared encoding counts the bytes", r);

  if (c.size() >= 2) {
    auto missing = train::text_tokens("only0.txt", &*t, nullptr, &c);
    check(!missing.is_ok(), "a file one rank cannot read fails every rank", r);
    const std::string m = missing.status().message();
    check(m.find("only0.txt") != std::string::npos && (r == 1 || m.find("rank 1 of ") != std::string::npos),
          "the error names the file and, elsewhere, the rank", r);
    if (r == 0) std::fprintf(stderr, "rank 0 got, as expected: %s\n", m.c_str());
  }
  std::filesystem::current_path(home);
  std::filesystem::remove_all(dir);
}
}  // namespace

int main() {
  auto made = comm::make_mpi_comm(std::chrono::milliseconds(300));
  if (!made.is_ok()) {
    std::fprintf(stderr, "%s\n", made.status().to_string().c_str());
    return 1;
  }
  comm::Communicator& c = **made;
  const int r = c.rank(), n = c.size();
  const std::size_t count = 1000;

  // All-gather: rank r's shard holds r * 10000 + i.
  std::vector<float> shard(count), full(count * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < count; ++i) shard[i] = static_cast<float>(r * 10000 + static_cast<int>(i));
  check(c.allgather(shard.data(), full.data(), count * sizeof(float), "test allgather").is_ok(), "allgather",
        r);
  for (int q = 0; q < n; ++q) {
    check(full[static_cast<std::size_t>(q) * count + 7] == static_cast<float>(q * 10000 + 7),
          "allgather values", r);
  }

  // Reduce-scatter: rank q contributes (q + 1) * 0.1 + j * 1e-3 at element j; the sum is in rank order.
  std::vector<float> grads(count * static_cast<std::size_t>(n)), mine(count);
  for (std::size_t j = 0; j < grads.size(); ++j) {
    grads[j] = static_cast<float>(r + 1) * 0.1f + static_cast<float>(j) * 1e-3f;
  }
  check(c.reduce_scatter_sum(grads.data(), mine.data(), count, "test reduce-scatter").is_ok(),
        "reduce-scatter", r);
  for (std::size_t i = 0; i < count; i += 97) {
    const std::size_t j = static_cast<std::size_t>(r) * count + i;
    float want = 0.0f;
    for (int q = 0; q < n; ++q) want += static_cast<float>(q + 1) * 0.1f + static_cast<float>(j) * 1e-3f;
    check(std::memcmp(&mine[i], &want, sizeof want) == 0, "reduce-scatter is the rank-ordered sum, bitwise",
          r);
  }

  check_shared_encoding(c);

  // Ranks that diverged: rank 0 gathers one tensor while rank 1 reduces another. Both get an error naming
  // what each rank runs (no hang, no mixed data), and the next matching collective works.
  if (n >= 2) {
    Status diverged = r == 0
                          ? c.allgather(shard.data(), full.data(), count * sizeof(float), "step 5 h.1 gather")
                          : c.reduce_scatter_sum(grads.data(), mine.data(), count / 2, "step 5 h.2 reduce");
    check(!diverged.is_ok(), "diverged ranks get an error", r);
    const std::string m = diverged.message();
    check(m.find("diverged") != std::string::npos &&
              m.find("rank 0 runs allgather 'step 5 h.1 gather' (4000 bytes)") != std::string::npos &&
              m.find("rank 1 runs reduce-scatter 'step 5 h.2 reduce' (2000 bytes)") != std::string::npos,
          "the error names what every rank runs", r);
    if (r == 0) std::fprintf(stderr, "rank 0 got, as expected: %s\n", m.c_str());
    check(c.allgather(shard.data(), full.data(), count * sizeof(float), "after divergence").is_ok(),
          "a matching collective after the divergence", r);
  }

  // A late peer: rank 1 joins the barrier after rank 0's deadline.
  if (n >= 2) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(900));
    const Status late = c.barrier("step 3 late-peer");
    if (r == 0) {
      check(!late.is_ok(), "a late peer times out", r);
      const std::string m = late.message();
      check(m.find("rank 0 of ") != std::string::npos && m.find("step 3 late-peer") != std::string::npos,
            "the timeout names the rank and the tag", r);
      std::fprintf(stderr, "rank 0 got, as expected: %s\n", m.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // let rank 1 join the abandoned barrier
    }
  }
  std::printf("rank %d of %d: %s\n", r, n, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
