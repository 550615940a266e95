// The files of a ZeRO-3 checkpoint (docs/training.md), written and read in pieces so that no process holds a
// rank's whole optimizer state, or the whole model, in memory: the states may live on NVMe and be larger
// than host memory.
//
// DIR/latest.json names the step directory and the model; DIR/step-NNNNNNNN/rank-R-of-N.bin holds rank R's
// shards: a header (magic, step, elements per array, CRC32C, reserved), then the fp32 master weights, the
// first Adam moment and the second, each `elements` long. The CRC covers the three arrays in that order.
// Version 2 ("MWZ3CKP2", written) pads the header and each array to 4096 bytes so that the file is written
// with O_DIRECT, three sequential streams through aligned buffers; version 1 ("MWZ3CKP1": a 32-byte header,
// the arrays back to back) is still read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/io/atomic_file.h"
#include "engine/model/gpt.h"

namespace memwall::train::ckpt {

std::string step_dir_name(long step);
std::string rank_file(const std::string& step_dir, int rank, int ranks);
// DIR/latest.json, checked to be a memwall checkpoint's: the model's fields of the types memwall writes, a
// model that validates, counts of at least 1 and a step directory inside DIR (else one line naming the key).
Result<nlohmann::json> read_latest(const std::string& dir);
// The model's keys of latest.json: layers, channels, heads, vocab, max_seq, and arch ("gpt2" or "llama"),
// kv_heads, ffn, tied, qkv_bias, rope_theta, norm_eps.
nlohmann::json model_fields(const model::GptConfig& c);
// The model latest.json describes (one written before the Llama shape, without arch, is GPT-2).
model::GptConfig model_of(const nlohmann::json& latest);

// One rank's file, written under a temporary name and renamed into place by commit(). Elements are written
// in order, [0, elements), in pieces of any size; each array's CRC runs along.
class ShardWriter {
 public:
  static Result<ShardWriter> create(const std::string& path, long step, std::size_t elements);
  // Elements [begin, begin + n) of the three arrays; `begin` is where the previous piece ended.
  Status write(std::size_t begin, std::size_t n, const float* master, const float* m, const float* v);
  // Fails (and leaves any previous file) unless every element was written.
  Status commit();
  bool direct() const { return file_.direct(); }

 private:
  struct AlignedFree {
    void operator()(char* p) const { std::free(p); }
  };
  ShardWriter(io::AtomicFile f, long step, std::size_t elements);
  Status flush(int array, std::size_t bytes);  // writes array's buffered bytes (a multiple of 4096)
  io::AtomicFile file_;
  long step_;
  std::size_t elements_, written_ = 0;
  std::uint32_t crc_[3] = {};
  // Per array: an aligned buffer, how much of it is filled, and how many bytes of the array are on disk.
  std::unique_ptr<char, AlignedFree> buf_[3];
  std::size_t fill_[3] = {}, flushed_[3] = {};
};

// One rank's file, opened with its header checked; verify() reads it once, in pieces, and checks the CRC.
class ShardReader {
 public:
  // `elements` is what this model's partition gives the rank; a file of another size is refused.
  static Result<ShardReader> open(const std::string& path, std::size_t elements);
  ShardReader(ShardReader&& o) noexcept;
  int version() const { return version_; }
  ShardReader& operator=(ShardReader&&) = delete;
  ShardReader(const ShardReader&) = delete;
  ~ShardReader();

  Status verify() const;
  // Whether the arrays whose CRC32Cs (master, m, v, each over all elements) are `crc` are the file's: for a
  // caller that read every element once in order and checked as it went.
  Status matches(const std::uint32_t crc[3]) const;
  long step() const { return step_; }
  std::size_t elements() const { return elements_; }
  // Elements [begin, begin + n) of the arrays wanted (nullptr: not wanted).
  Status read(std::size_t begin, std::size_t n, float* master, float* m, float* v) const;

 private:
  ShardReader(std::string path, int fd, long step, std::size_t elements, std::uint32_t crc, int version)
      : path_(std::move(path)), fd_(fd), step_(step), elements_(elements), crc_(crc), version_(version) {}
  Status pread(void* dst, std::size_t bytes, std::uint64_t offset) const;
  std::uint64_t offset(int array, std::size_t element) const;
  std::string path_;
  int fd_ = -1;
  long step_;
  std::size_t elements_;
  std::uint32_t crc_;
  int version_;
};

// The states of a whole checkpoint in model order, read from every rank's file on demand (one process, no
// MPI): for export and generate (the parameters), and for a run that resumes with another rank count or
// tiling (all three arrays). open() checks every file's header and CRC.
class CheckpointParams {
 public:
  // Fills `config` from DIR/latest.json. Every rank file's header is checked; its checksum over the whole
  // file only where `verify(file's rank)` says so (all when not given): ranks that share the checking
  // out, and agree on it, read each file once between them instead of all files each.
  static Result<CheckpointParams> open(const std::string& dir, model::GptConfig& config,
                                       const std::function<bool(int)>& verify = {});
  // Elements [offset, offset + n) in gpt_param_layout order of the fp32 master parameters and, where not
  // null, of Adam's two moments.
  Status read(std::size_t offset, std::size_t n, float* master, float* m = nullptr, float* v = nullptr) const;
  int ranks() const { return static_cast<int>(ranks_.size()); }
  std::size_t size() const { return params_; }
  long step() const { return step_; }

 private:
  CheckpointParams() = default;
  struct Slice {
    std::size_t offset, numel, shard, local;  // model offset, elements, per-rank shard, offset in rank files
  };
  std::vector<ShardReader> ranks_;
  std::vector<Slice> slices_;
  std::size_t params_ = 0;
  long step_ = 0;
};

}  // namespace memwall::train::ckpt
