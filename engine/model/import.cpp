// Reading a safetensors file (u64 little-endian header length, a JSON header of {name: {dtype, shape,
// data_offsets}}, then the raw little-endian tensor bytes) into memwall's flat parameter layout.
#include "engine/model/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "cpu/cast.h"
#include "engine/io/read_file.h"

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
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    file_ = std::move(o.file_);
    tensors_ = std::move(o.tensors_);
    ignored_ = std::move(o.ignored_);
    dtype_ = std::move(o.dtype_);
    cached_ = std::exchange(o.cached_, -1);
    cache_ = std::move(o.cache_);
  }
  return *this;
}
HfWeights::~HfWeights() {
  if (fd_ >= 0) ::close(fd_);
}

Result<HfWeights> HfWeights::open(const std::string& path, const GptConfig& c) {
  MW_RETURN_IF_ERROR(validate(c, 1, 1));
  HfWeights w;
  std::error_code ec;
  w.file_ = std::filesystem::is_directory(path, ec) ? path + "/model.safetensors" : path;
  const std::string& f = w.file_;
  w.fd_ = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  if (w.fd_ < 0) return Status::not_found(f + ": cannot open: " + std::strerror(errno));
  struct stat sb {};
  if (::fstat(w.fd_, &sb) != 0) return Status::io_error(f + ": " + std::strerror(errno));
  const auto size = static_cast<std::size_t>(sb.st_size);
  unsigned char len[8];
  if (size < 8)
    return Status::invalid_argument(f + ": not a safetensors file (" + std::to_string(size) + " bytes)");
  MW_RETURN_IF_ERROR(io::pread_full(w.fd_, len, 8, 0, f));
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len[i];
  if (header_bytes > kMaxHeaderBytes || 8 + header_bytes > size) {
    return Status::invalid_argument(f + ": not a safetensors file (header length " +
                                    std::to_string(header_bytes) + " in a file of " + std::to_string(size) +
                                    " bytes)");
  }
  std::string text(header_bytes, '\0');
  MW_RETURN_IF_ERROR(io::pread_full(w.fd_, text.data(), text.size(), 8, f));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(f + ": not a safetensors file (its header is not JSON: " + e.what() +
                                    ")");
  }
  if (!header.is_object())
    return Status::invalid_argument(f + ": not a safetensors file (header not an object)");
  const std::size_t data_start = 8 + header_bytes;
  const std::string model_text = strprintf("%d layers, %d channels, %d heads, vocabulary %d, %d positions",
                                           c.layers, c.channels, c.heads, c.vocab, c.max_seq);
  std::map<std::string, bool> used;
  for (const auto& t : gpt_param_layout(c)) {
    std::string name = t.name;
    if (!header.contains(name) && header.contains("transformer." + name)) name = "transformer." + name;
    if (!header.contains(name)) {
      return Status::invalid_argument(f + ": tensor '" + t.name +
                                      "' is missing; allowed: " + (c.llama() ? "Llama" : "GPT-2") +
                                      " weights of this model (" + model_text + ")");
    }
    used[name] = true;
    Tensor x;
    x.offset = t.offset;
    x.numel = t.numel;
    x.transposed = hf_transposed(t);
    x.out = static_cast<std::size_t>(t.shape[0]);
    x.in = t.shape.size() > 1 ? static_cast<std::size_t>(t.shape[1]) : 1;
    std::vector<long long> want(t.shape.begin(), t.shape.end());
    if (x.transposed) std::swap(want[0], want[1]);  // Conv1D's [in, out]
    MW_RETURN_IF_ERROR(w.locate(
        header, name, want, data_start, size,
        std::string(c.llama() ? "Llama" : "GPT-2") + " weights of this model (" + model_text +
            (t.name == "wte.weight" ? "; memwall train's vocabulary is the 256 byte values unless a GPT-2 "
                                      "tokenizer is given: --tokenizer DIR)"
                                    : ")"),
        x));
    w.dtype_ = w.dtype_.empty() || w.dtype_ == x.dtype ? x.dtype : "mixed";
    w.tensors_.push_back(std::move(x));
  }
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__" && !used.count(it.key())) w.ignored_.push_back(it.key());
  }
  if (c.tied) MW_RETURN_IF_ERROR(w.check_tied_head(header, data_start, size));  // else lm_head is a tensor
  return w;
}

// Header entry `name`'s dtype and data into x (its numel set): the shape must be `want`, the dtype one this
// reads, the data inside the file. Errors name the file and tensor, and `allowed` after a shape mismatch.
Status HfWeights::locate(const nlohmann::json& header, const std::string& name,
                         const std::vector<long long>& want, std::size_t data_start, std::size_t size,
                         const std::string& allowed, Tensor& x) const {
  try {
    const nlohmann::json& e = header.at(name);
    x.dtype = e.at("dtype").get<std::string>();
    const auto shape = e.at("shape").get<std::vector<long long>>();
    const auto offsets = e.at("data_offsets").get<std::vector<std::size_t>>();
    if (shape != want) {
      return Status::invalid_argument(file_ + ": tensor '" + name + "' has shape " + shape_text(shape) +
                                      ", this model needs " + shape_text(want) + "; allowed: " + allowed);
    }
    if (x.dtype == "F32") {
      x.element_bytes = 4;
    } else if (x.dtype == "F16" || x.dtype == "BF16") {
      x.element_bytes = 2;
    } else {
      return Status::invalid_argument(file_ + ": tensor '" + name + "' has dtype " + x.dtype +
                                      "; allowed: F32, F16, BF16");
    }
    if (offsets.size() != 2 || offsets[1] < offsets[0] ||
        offsets[1] - offsets[0] != x.numel * static_cast<std::size_t>(x.element_bytes) ||
        data_start + offsets[1] > size) {
      return Status::invalid_argument(file_ + ": tensor '" + name +
                                      "': its data_offsets do not fit its shape or the " +
                                      std::to_string(size) + "-byte file (truncated?)");
    }
    x.file_offset = data_start + offsets[0];
  } catch (const nlohmann::json::exception& ex) {
    return Status::invalid_argument(file_ + ": tensor '" + name + "': malformed header entry (" + ex.what() +
                                    ")");
  }
  return Status::ok();
}

// memwall's GPT ties its LM head to wte: a file whose lm_head.weight is another matrix is another model.
Status HfWeights::check_tied_head(const nlohmann::json& header, std::size_t data_start, std::size_t size) {
  if (!header.contains("lm_head.weight")) return Status::ok();
  const Tensor& wte = tensors_.front();  // gpt_param_layout starts with wte
  Tensor head = wte;
  MW_RETURN_IF_ERROR(locate(header, "lm_head.weight",
                            {static_cast<long long>(wte.out), static_cast<long long>(wte.in)}, data_start,
                            size, "a GPT-2 with its LM head tied to wte", head));
  std::vector<float> a(wte.numel), b(wte.numel);
  MW_RETURN_IF_ERROR(read_elements(wte, 0, wte.numel, a.data()));
  MW_RETURN_IF_ERROR(read_elements(head, 0, wte.numel, b.data()));
  if (a != b) {
    return Status::invalid_argument(file_ +
                                    ": tensor 'lm_head.weight' differs from wte.weight; allowed: a GPT-2 "
                                    "with its LM head tied to wte (memwall's GPT ties them)");
  }
  return Status::ok();
}

Status HfWeights::read_elements(const Tensor& t, std::size_t first, std::size_t n, float* out) {
  const std::size_t at = t.file_offset + first * static_cast<std::size_t>(t.element_bytes);
  if (t.element_bytes == 4) return io::pread_full(fd_, out, n * 4, at, file_);
  std::vector<std::uint16_t> half(std::min(n, kChunkElements));
  for (std::size_t done = 0; done < n;) {
    const std::size_t k = std::min(half.size(), n - done);
    MW_RETURN_IF_ERROR(io::pread_full(fd_, half.data(), k * 2, at + done * 2, file_));
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
    if (!t.transposed) {
      MW_RETURN_IF_ERROR(read_elements(t, lo, hi - lo, dst));
      continue;
    }
    if (cached_ != static_cast<int>(i)) {  // the whole [in, out] tensor, turned into [out, in]
      cached_ = -1;
      std::vector<float> file_order(t.numel);
      MW_RETURN_IF_ERROR(read_elements(t, 0, t.numel, file_order.data()));
      cache_.resize(t.numel);
      transpose(file_order.data(), t.in, t.out, cache_.data());
      cached_ = static_cast<int>(i);
    }
    std::copy(cache_.begin() + static_cast<std::ptrdiff_t>(lo),
              cache_.begin() + static_cast<std::ptrdiff_t>(hi), dst);
  }
  return Status::ok();
}

}  // namespace memwall::model
