// Reading a safetensors file (u64 little-endian header length, a JSON header of {name: {dtype, shape,
// data_offsets}}, then the raw little-endian tensor bytes), a PyTorch checkpoint (pytorch_model.bin, indexed
// by engine/model/torch_bin.h into the same header form), or the shards an index lists, into memwall's flat
// parameter layout.
#include "engine/model/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "cpu/cast.h"
#include "engine/io/read_file.h"
#include "engine/model/torch_bin.h"
#include "spec/json_text.h"

namespace memwall::model {

namespace {

constexpr std::size_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit
constexpr std::size_t kChunkElements = 4u << 20;     // 16-bit staging while converting, per read

std::string shape_text(const std::vector<long long>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

HfWeights::HfWeights(HfWeights&& o) noexcept {
  *this = std::move(o);
}
HfWeights& HfWeights::operator=(HfWeights&& o) noexcept {
  if (this != &o) {
    for (const Shard& s : shards_) ::close(s.fd);
    shards_ = std::exchange(o.shards_, {});
    file_ = std::move(o.file_);
    tensors_ = std::move(o.tensors_);
    ignored_ = std::move(o.ignored_);
    dtype_ = std::move(o.dtype_);
    config_ = o.config_;
    cached_ = std::exchange(o.cached_, -1);
    cache_ = std::move(o.cache_);
  }
  return *this;
}
HfWeights::~HfWeights() {
  for (const Shard& s : shards_) ::close(s.fd);
}

std::vector<std::string> HfWeights::files() const {
  std::vector<std::string> out;
  for (const Shard& s : shards_) out.push_back(s.path);
  return out;
}

Status HfWeights::open_shard(const std::string& f, nlohmann::json& header) {
  Shard sh;
  sh.path = f;
  sh.fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  if (sh.fd < 0) return Status::not_found(f + ": cannot open: " + std::strerror(errno));
  shards_.push_back(sh);  // closed with the others from here on
  struct stat sb {};
  if (::fstat(sh.fd, &sb) != 0) return Status::io_error(f + ": " + std::strerror(errno));
  const auto size = static_cast<std::size_t>(sb.st_size);
  unsigned char len[8];
  if (size < 8)
    return Status::invalid_argument(f + ": not a safetensors file (" + std::to_string(size) + " bytes)");
  MW_RETURN_IF_ERROR(io::pread_full(sh.fd, len, 8, 0, f));
  if (is_zip_magic(len)) {  // torch.save's zip (pytorch_model.bin): offsets absolute in the file
    shards_.back().size = size;
    return torch_checkpoint_index(f, sh.fd, size, header);
  }
  if (len[0] == 0x80 && len[1] <= 5) {  // a bare pickle: torch.save before PyTorch 1.6
    return Status::invalid_argument(
        f +
        ": a PyTorch checkpoint in the legacy format (before PyTorch 1.6); allowed: safetensors, or "
        "torch.save's zip format (re-save it with a current PyTorch)");
  }
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len[i];
  if (header_bytes > kMaxHeaderBytes || 8 + header_bytes > size) {
    return Status::invalid_argument(f + ": not a safetensors file (header length " +
                                    std::to_string(header_bytes) + " in a file of " + std::to_string(size) +
                                    " bytes)");
  }
  std::string text(header_bytes, '\0');
  MW_RETURN_IF_ERROR(io::pread_full(sh.fd, text.data(), text.size(), 8, f));
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(
        f + ": not a safetensors file (its header is not JSON: " + json_error_text(e) + ")");
  }
  if (!header.is_object())
    return Status::invalid_argument(f + ": not a safetensors file (header not an object)");
  shards_.back().data_start = 8 + header_bytes;
  shards_.back().size = size;
  return Status::ok();
}

namespace {

// The shard files an index names (its weight_map's values), relative to the index's directory, in name order.
Result<std::vector<std::string>> shards_of_index(const std::string& index) {
  auto text = io::read_file(index);
  if (!text.is_ok()) return text.status();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(index + ": not JSON (" + json_error_text(e) + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() ||
      j["weight_map"].empty()) {
    return Status::invalid_argument(index + ": no weight_map; allowed: an index of {tensor: shard file}");
  }
  const std::string dir = std::filesystem::path(index).parent_path().string();
  std::vector<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    const std::string f = file.is_string() ? file.get<std::string>() : std::string();
    if (f.empty() || f.find('/') != std::string::npos) {
      return Status::invalid_argument(index + ": weight_map['" + name + "'] = " + file.dump() +
                                      "; allowed: a file name beside the index");
    }
    files.push_back((dir.empty() ? "" : dir + "/") + f);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

}  // namespace

Result<HfWeights> HfWeights::open(const std::string& path, const GptConfig& c) {
  MW_RETURN_IF_ERROR(validate(c, 1, 1));
  HfWeights w;
  w.config_ = c;
  std::error_code ec;
  w.file_ = path;
  if (std::filesystem::is_directory(path, ec)) {
    // save_pretrained's files, safetensors first (a download may hold both).
    const char* names[] = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json"};
    w.file_.clear();
    for (const char* n : names) {
      if (w.file_.empty() && std::filesystem::exists(path + "/" + n, ec)) w.file_ = path + "/" + n;
    }
    if (w.file_.empty()) {
      return Status::not_found(path +
                               ": no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                               "pytorch_model.bin.index.json in it");
    }
  }
  const bool sharded = w.file_.size() > 11 && w.file_.compare(w.file_.size() - 11, 11, ".index.json") == 0;
  std::vector<std::string> paths = {w.file_};
  if (sharded) {
    auto listed = shards_of_index(w.file_);
    if (!listed.is_ok()) return listed.status();
    paths = std::move(listed).value();
  }
  std::vector<nlohmann::json> headers(paths.size());
  std::map<std::string, int> shard_of;  // tensor name -> the shard holding it
  for (std::size_t k = 0; k < paths.size(); ++k) {
    MW_RETURN_IF_ERROR(w.open_shard(paths[k], headers[k]));
    for (auto it = headers[k].begin(); it != headers[k].end(); ++it) {
      if (it.key() == "__metadata__") continue;
      if (auto [at, fresh] = shard_of.emplace(it.key(), static_cast<int>(k)); !fresh) {
        return Status::invalid_argument(w.file_ + ": tensor '" + it.key() + "' is in both " +
                                        paths[static_cast<std::size_t>(at->second)] + " and " + paths[k]);
      }
    }
  }
  const std::string model_text = strprintf("%d layers, %d channels, %d heads, vocabulary %d, %d positions",
                                           c.layers, c.channels, c.heads, c.vocab, c.max_seq);
  const char* family = gpt_family(c);
  std::map<std::string, bool> used;
  for (const auto& t : hf_param_layout(c)) {  // as the file names them
    // Also under a wrapper's prefix: GPT-2's transformer., or a multimodal model's language model (Gemma 3's
    // files: language_model.model.layers..., transformers' newer model.language_model.layers...).
    std::string name = t.name;
    std::vector<std::string> wrapped = {"transformer." + name, "language_model." + name};
    if (name.rfind("model.", 0) == 0) wrapped.push_back("model.language_model." + name.substr(6));
    if (name.rfind("model.decoder.", 0) == 0)
      wrapped.push_back(name.substr(6));                                     // OPTModel's (facebook/opt-*)
    if (name.rfind("gpt_neox.", 0) == 0) wrapped.push_back(name.substr(9));  // GPTNeoXModel's
    if (name.rfind("transformer.", 0) == 0) wrapped.push_back(name.substr(12));  // FalconModel's
    for (const auto& alt : wrapped) {
      if (!shard_of.count(name) && shard_of.count(alt)) name = alt;
    }
    Tensor x;
    // (gpt-oss's experts as OpenAI publishes them: MXFP4 blocks and scales)
    const std::string blocks = name + "_blocks", scales = name + "_scales";
    if (!shard_of.count(name) && c.gpt_oss && shard_of.count(blocks) && shard_of.count(scales)) {
      used[blocks] = used[scales] = true;
      x.offset = t.offset;
      x.numel = t.numel;
      x.interleaved = hf_interleaved(c, t);
      x.layout = t;
      MW_RETURN_IF_ERROR(w.locate_mxfp4(headers, shard_of.at(blocks), shard_of.at(scales), name,
                                        std::vector<long long>(t.shape.begin(), t.shape.end()), x));
      w.dtype_ = w.dtype_.empty() || w.dtype_ == x.dtype ? x.dtype : "mixed";
      w.tensors_.push_back(std::move(x));
      continue;
    }
    if (!shard_of.count(name)) {
      return Status::invalid_argument(w.file_ + ": tensor '" + t.name + "' is missing; allowed: " + family +
                                      " weights of this model (" + model_text + ")");
    }
    used[name] = true;
    x.offset = t.offset;
    x.numel = t.numel;
    x.shard = shard_of.at(name);
    x.transposed = hf_transposed(c, t);
    x.interleaved = hf_interleaved(c, t);
    x.layout = t;
    x.out = static_cast<std::size_t>(t.shape[0]);
    x.in = t.shape.size() > 1 ? static_cast<std::size_t>(t.shape[1]) : 1;
    std::vector<long long> want(t.shape.begin(), t.shape.end());
    if (x.transposed) std::swap(want[0], want[1]);  // Conv1D's [in, out]
    MW_RETURN_IF_ERROR(
        w.locate(headers[static_cast<std::size_t>(x.shard)], x.shard, name, want,
                 std::string(family) + " weights of this model (" + model_text +
                     (t.offset == 0 && !c.rotary()
                          ? "; memwall train's vocabulary is the 256 byte values unless a GPT-2 "
                            "tokenizer is given: --tokenizer DIR)"
                          : ")"),
                 x));
    if (x.dtype == "F8_E4M3") {  // block-quantized: its scales beside it
      const std::string scales_name = name + "_scale_inv";
      if (x.transposed) {
        return Status::invalid_argument(paths[static_cast<std::size_t>(x.shard)] + ": tensor '" + name +
                                        "' has dtype F8_E4M3 in Conv1D's [in, out] layout; allowed: F32, "
                                        "F16, BF16");
      }
      if (!shard_of.count(scales_name)) {
        return Status::invalid_argument(paths[static_cast<std::size_t>(x.shard)] + ": tensor '" + name +
                                        "' has dtype F8_E4M3 without its block scales '" + scales_name +
                                        "'; allowed: F32, F16, BF16, or F8_E4M3 with them");
      }
      used[scales_name] = true;
      MW_RETURN_IF_ERROR(w.locate_fp8_scales(headers[static_cast<std::size_t>(shard_of.at(scales_name))],
                                             shard_of.at(scales_name), scales_name, x));
    }
    w.dtype_ = w.dtype_.empty() || w.dtype_ == x.dtype ? x.dtype : "mixed";
    w.tensors_.push_back(std::move(x));
  }
  for (const auto& [name, shard] : shard_of) {
    if (!used.count(name)) w.ignored_.push_back(name);
  }
  // Else the head is a tensor of the layout.
  if (c.tied) MW_RETURN_IF_ERROR(w.check_tied_head(headers, c.neox ? "embed_out.weight" : "lm_head.weight"));
  return w;
}

// Header entry `name` (of shards_[shard]) into x (its numel set): the shape must be `want`, the dtype one
// this reads, the data inside the file. Errors name the file and tensor, and `allowed` after a shape
// mismatch.
Status HfWeights::locate(const nlohmann::json& header, int shard, const std::string& name,
                         const std::vector<long long>& want, const std::string& allowed, Tensor& x) const {
  const Shard& sh = shards_[static_cast<std::size_t>(shard)];
  x.shard = shard;
  try {
    const nlohmann::json& e = header.at(name);
    x.dtype = e.at("dtype").get<std::string>();
    const auto shape = e.at("shape").get<std::vector<long long>>();
    const auto offsets = e.at("data_offsets").get<std::vector<std::size_t>>();
    if (shape != want) {
      return Status::invalid_argument(sh.path + ": tensor '" + name + "' has shape " + shape_text(shape) +
                                      ", this model needs " + shape_text(want) + "; allowed: " + allowed);
    }
    if (x.dtype == "F32") {
      x.element_bytes = 4;
    } else if (x.dtype == "F16" || x.dtype == "BF16") {
      x.element_bytes = 2;
    } else if (x.dtype == "F8_E4M3" && want.size() == 2) {  // (block-quantized: open finds its scales)
      x.element_bytes = 1;
    } else {
      return Status::invalid_argument(sh.path + ": tensor '" + name + "' has dtype " + x.dtype +
                                      "; allowed: F32, F16, BF16" +
                                      (want.size() == 2 ? ", F8_E4M3 with block scales" : ""));
    }
    if (offsets.size() != 2 || offsets[1] < offsets[0] ||
        offsets[1] - offsets[0] != x.numel * static_cast<std::size_t>(x.element_bytes) ||
        sh.data_start + offsets[1] > sh.size) {
      return Status::invalid_argument(sh.path + ": tensor '" + name +
                                      "': its data_offsets do not fit its shape or the " +
                                      std::to_string(sh.size) + "-byte file (truncated?)");
    }
    x.file_offset = sh.data_start + offsets[0];
  } catch (const nlohmann::json::exception& ex) {
    return Status::invalid_argument(sh.path + ": tensor '" + name + "': malformed header entry (" +
                                    json_error_text(ex) + ")");
  }
  return Status::ok();
}

Status HfWeights::locate_mxfp4(const std::vector<nlohmann::json>& headers, int blocks, int scales,
                               const std::string& name, const std::vector<long long>& want, Tensor& x) const {
  // want: [experts, in, rows]; the blocks [experts, rows, in / 32, 16], the scales [experts, rows, in / 32]
  if (want.size() != 3 || want[1] % 32 != 0) {
    return Status::invalid_argument(shards_[static_cast<std::size_t>(blocks)].path + ": tensor '" + name +
                                    "' is MXFP4 (_blocks, _scales), which needs a weight matrix per expert "
                                    "whose width divides into blocks of 32; allowed: bf16, fp16 or fp32 "
                                    "weights");
  }
  const long long E = want[0], in = want[1], rows = want[2];
  const std::string what =
      "gpt-oss's MXFP4 experts of this model (blocks of 32 along " + std::to_string(in) + ")";
  const auto entry = [&](int shard, const std::string& tensor, const std::vector<long long>& shape,
                         std::size_t& offset) -> Status {
    const Shard& sh = shards_[static_cast<std::size_t>(shard)];
    try {
      const nlohmann::json& e = headers[static_cast<std::size_t>(shard)].at(tensor);
      const auto got = e.at("shape").get<std::vector<long long>>();
      const auto dtype = e.at("dtype").get<std::string>();
      const auto offsets = e.at("data_offsets").get<std::vector<std::size_t>>();
      if (got != shape) {
        return Status::invalid_argument(sh.path + ": tensor '" + tensor + "' has shape " + shape_text(got) +
                                        ", this model needs " + shape_text(shape) + "; allowed: " + what);
      }
      if (dtype != "U8") {
        return Status::invalid_argument(sh.path + ": tensor '" + tensor + "' has dtype " + dtype +
                                        "; allowed: U8 (MXFP4's packed values and exponents)");
      }
      std::size_t bytes = 1;
      for (long long d : shape) bytes *= static_cast<std::size_t>(d);
      if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] - offsets[0] != bytes ||
          sh.data_start + offsets[1] > sh.size) {
        return Status::invalid_argument(sh.path + ": tensor '" + tensor +
                                        "': its data_offsets do not fit its shape or the " +
                                        std::to_string(sh.size) + "-byte file (truncated?)");
      }
      offset = sh.data_start + offsets[0];
    } catch (const nlohmann::json::exception& ex) {
      return Status::invalid_argument(sh.path + ": tensor '" + tensor + "': malformed header entry (" +
                                      json_error_text(ex) + ")");
    }
    return Status::ok();
  };
  x.mxfp4 = true;
  x.dtype = "MXFP4";
  x.element_bytes = 0;
  x.shard = blocks;
  x.scales_shard = scales;
  MW_RETURN_IF_ERROR(entry(blocks, name + "_blocks", {E, rows, in / 32, 16}, x.file_offset));
  return entry(scales, name + "_scales", {E, rows, in / 32}, x.scales_offset);
}

Status HfWeights::locate_fp8_scales(const nlohmann::json& header, int shard, const std::string& name,
                                    Tensor& x) const {
  const Shard& sh = shards_[static_cast<std::size_t>(shard)];
  const auto blocks = [](std::size_t n) { return static_cast<long long>((n + kFp8Block - 1) / kFp8Block); };
  const std::vector<long long> want = {blocks(x.out), blocks(x.in)};
  try {
    const nlohmann::json& e = header.at(name);
    const auto dtype = e.at("dtype").get<std::string>();
    const auto shape = e.at("shape").get<std::vector<long long>>();
    const auto offsets = e.at("data_offsets").get<std::vector<std::size_t>>();
    if (shape != want) {
      return Status::invalid_argument(
          sh.path + ": tensor '" + name + "' has shape " + shape_text(shape) + ", this model needs " +
          shape_text(want) + "; allowed: one scale per 128 x 128 block (weight_block_size [128, 128])");
    }
    if (dtype != "F32" && dtype != "BF16") {
      return Status::invalid_argument(sh.path + ": tensor '" + name + "' has dtype " + dtype +
                                      "; allowed: F32 or BF16 block scales");
    }
    x.scale_bytes = dtype == "F32" ? 4 : 2;
    const auto bytes = static_cast<std::size_t>(want[0] * want[1]) * static_cast<std::size_t>(x.scale_bytes);
    if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] - offsets[0] != bytes ||
        sh.data_start + offsets[1] > sh.size) {
      return Status::invalid_argument(sh.path + ": tensor '" + name +
                                      "': its data_offsets do not fit its shape or the " +
                                      std::to_string(sh.size) + "-byte file (truncated?)");
    }
    x.scales_shard = shard;
    x.scales_offset = sh.data_start + offsets[0];
  } catch (const nlohmann::json::exception& ex) {
    return Status::invalid_argument(sh.path + ": tensor '" + name + "': malformed header entry (" +
                                    json_error_text(ex) + ")");
  }
  return Status::ok();
}

namespace {
// OCP FP8 E4M3 (the "fn" variant: no infinities, S.1111.111 NaN): sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 subnormal (m / 8 x 2^-6).
float fp8_e4m3(std::uint8_t b) {
  const int e = (b >> 3) & 0x0f, m = b & 0x07;
  const float sign = (b & 0x80) != 0 ? -1.0f : 1.0f;
  if (e == 0x0f && m == 0x07) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(static_cast<float>(8 + m), e - 10);
}
}  // namespace

Status HfWeights::read_fp8(const Tensor& t, std::size_t first, std::size_t n, float* out) {
  if (n == 0) return Status::ok();
  // The block rows the range touches: their scales, widened to fp32.
  const std::size_t cols = (t.in + kFp8Block - 1) / kFp8Block, row0 = first / t.in / kFp8Block,
                    row1 = (first + n - 1) / t.in / kFp8Block;
  const std::size_t count = (row1 - row0 + 1) * cols;
  std::vector<float> scale(count);
  const Shard& ss = shards_[static_cast<std::size_t>(t.scales_shard)];
  const std::size_t scale_at = t.scales_offset + row0 * cols * static_cast<std::size_t>(t.scale_bytes);
  if (t.scale_bytes == 4) {
    MW_RETURN_IF_ERROR(io::pread_full(ss.fd, scale.data(), count * 4, scale_at, ss.path));
  } else {
    std::vector<std::uint16_t> bf(count);
    MW_RETURN_IF_ERROR(io::pread_full(ss.fd, bf.data(), count * 2, scale_at, ss.path));
    kernels::cast_bf16_to_f32(bf.data(), scale.data(), count);
  }
  static const auto table = [] {
    std::array<float, 256> values{};
    for (int b = 0; b < 256; ++b)
      values[static_cast<std::size_t>(b)] = fp8_e4m3(static_cast<std::uint8_t>(b));
    return values;
  }();
  const Shard& sh = shards_[static_cast<std::size_t>(t.shard)];
  std::vector<std::uint8_t> bytes(std::min(n, kChunkElements));
  for (std::size_t done = 0; done < n;) {
    const std::size_t k = std::min(bytes.size(), n - done);
    MW_RETURN_IF_ERROR(io::pread_full(sh.fd, bytes.data(), k, t.file_offset + first + done, sh.path));
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t at = first + done + i, r = at / t.in, col = at % t.in;
      out[done + i] =
          table[static_cast<std::size_t>(bytes[i])] * scale[(r / kFp8Block - row0) * cols + col / kFp8Block];
    }
    done += k;
  }
  return Status::ok();
}

Status HfWeights::read_mxfp4(const Tensor& t, float* out) {
  // OCP Microscaling's FP4 (E2M1): sign, two exponent bits, one mantissa bit.
  static constexpr float kFp4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const auto E = static_cast<std::size_t>(t.layout.shape[0]),
             in = static_cast<std::size_t>(t.layout.shape[1]),
             rows = static_cast<std::size_t>(t.layout.shape[2]), groups = in / 32;
  std::vector<std::uint8_t> packed(rows * groups * 16), exps(rows * groups);
  const Shard& bs = shards_[static_cast<std::size_t>(t.shard)];
  const Shard& ss = shards_[static_cast<std::size_t>(t.scales_shard)];
  for (std::size_t e = 0; e < E; ++e) {  // an expert at a time: its rows' blocks into [in, rows]
    MW_RETURN_IF_ERROR(
        io::pread_full(bs.fd, packed.data(), packed.size(), t.file_offset + e * packed.size(), bs.path));
    MW_RETURN_IF_ERROR(
        io::pread_full(ss.fd, exps.data(), exps.size(), t.scales_offset + e * exps.size(), ss.path));
    float* dst = out + e * in * rows;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t g = 0; g < groups; ++g) {
        const float scale = std::ldexp(1.0f, static_cast<int>(exps[r * groups + g]) - 127);
        const std::uint8_t* b = packed.data() + (r * groups + g) * 16;
        for (std::size_t k = 0; k < 16; ++k) {
          const std::size_t i = g * 32 + 2 * k;
          dst[i * rows + r] = kFp4[b[k] & 0x0f] * scale;
          dst[(i + 1) * rows + r] = kFp4[b[k] >> 4] * scale;
        }
      }
    }
  }
  return Status::ok();
}

// memwall's GPT ties its LM head to wte: a file whose lm_head.weight is another matrix is another model.
Status HfWeights::check_tied_head(const std::vector<nlohmann::json>& headers, const std::string& head_name) {
  int shard = -1;
  for (std::size_t k = 0; k < headers.size(); ++k) {
    if (headers[k].contains(head_name)) shard = static_cast<int>(k);
  }
  if (shard < 0) return Status::ok();
  const Tensor& wte = tensors_.front();  // gpt_param_layout starts with wte
  Tensor head = wte;
  MW_RETURN_IF_ERROR(locate(headers[static_cast<std::size_t>(shard)], shard, head_name,
                            {static_cast<long long>(wte.out), static_cast<long long>(wte.in)},
                            "a model with its LM head tied to the token embedding", head));
  std::vector<float> a(wte.numel), b(wte.numel);
  MW_RETURN_IF_ERROR(read_elements(wte, 0, wte.numel, a.data()));
  MW_RETURN_IF_ERROR(read_elements(head, 0, wte.numel, b.data()));
  if (a != b) {
    return Status::invalid_argument(shards_[static_cast<std::size_t>(shard)].path + ": tensor '" + head_name +
                                    "' differs from the token embedding; allowed: "
                                    "a model with its LM head tied to it (memwall's GPT-2 shape ties them)");
  }
  return Status::ok();
}

Status HfWeights::read_elements(const Tensor& t, std::size_t first, std::size_t n, float* out) {
  if (t.mxfp4) {  // (read whole: an interleaved tensor always is)
    MW_CHECK(first == 0 && n == t.numel, "HfWeights: an MXFP4 tensor is read whole");
    return read_mxfp4(t, out);
  }
  if (t.element_bytes == 1) return read_fp8(t, first, n, out);
  const Shard& sh = shards_[static_cast<std::size_t>(t.shard)];
  const std::size_t at = t.file_offset + first * static_cast<std::size_t>(t.element_bytes);
  if (t.element_bytes == 4) return io::pread_full(sh.fd, out, n * 4, at, sh.path);
  std::vector<std::uint16_t> half(std::min(n, kChunkElements));
  for (std::size_t done = 0; done < n;) {
    const std::size_t k = std::min(half.size(), n - done);
    MW_RETURN_IF_ERROR(io::pread_full(sh.fd, half.data(), k * 2, at + done * 2, sh.path));
    if (t.dtype == "BF16") {
      kernels::cast_bf16_to_f32(half.data(), out + done, k);
    } else {
      kernels::cast_f16_to_f32(half.data(), out + done, k);
    }
    done += k;
  }
  return Status::ok();
}

Status HfWeights::read(std::size_t offset, std::size_t n, float* out) {
  for (std::size_t i = 0; i < tensors_.size() && n > 0; ++i) {
    const Tensor& t = tensors_[i];
    if (offset >= t.offset + t.numel || offset + n <= t.offset) continue;
    const std::size_t lo = std::max(offset, t.offset) - t.offset,
                      hi = std::min(offset + n, t.offset + t.numel) - t.offset;
    float* dst = out + (t.offset + lo - offset);
    if (!t.transposed && !t.interleaved) {
      MW_RETURN_IF_ERROR(read_elements(t, lo, hi - lo, dst));
      continue;
    }
    if (cached_ != static_cast<int>(i)) {  // the whole tensor, turned into memwall's order
      cached_ = -1;
      std::vector<float> file_order(t.numel);
      MW_RETURN_IF_ERROR(read_elements(t, 0, t.numel, file_order.data()));
      cache_.resize(t.numel);
      if (t.transposed) {  // [in, out] into [out, in]
        transpose(file_order.data(), t.in, t.out, cache_.data());
      } else {  // GPT-NeoX's q, k and v head by head into every q, every k, every v (gpt-oss's experts)
        hf_reorder(config_, t.layout, file_order.data(), cache_.data(), false);
      }
      cached_ = static_cast<int>(i);
    }
    std::copy(cache_.begin() + static_cast<std::ptrdiff_t>(lo),
              cache_.begin() + static_cast<std::ptrdiff_t>(hi), dst);
  }
  return Status::ok();
}

}  // namespace memwall::model
