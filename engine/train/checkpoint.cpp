// Checkpoint files read and written piece by piece (see checkpoint.h).
#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/io/crc32c.h"
#include "engine/io/read_file.h"
#include "engine/model/export.h"
#include "spec/json_text.h"
#include "spec/spec_loader.h"

namespace memwall::train::ckpt {

namespace {
constexpr char kMagicV1[8] = {'M', 'W', 'Z', '3', 'C', 'K', 'P', '1'};
constexpr char kMagicV2[8] = {'M', 'W', 'Z', '3', 'C', 'K', 'P', '2'};
constexpr std::size_t kBlock = 4096;                   // O_DIRECT alignment of version 2
constexpr std::size_t kStream = std::size_t{4} << 20;  // bytes buffered per array before a write

struct Header {
  char magic[8];
  std::int64_t step;
  std::uint64_t elements;  // per array (master, m, v)
  std::uint32_t crc;       // CRC32C of the three arrays
  std::uint32_t reserved;
};
static_assert(sizeof(Header) == 32);

constexpr std::size_t kVerifyPiece = std::size_t{8} << 20;  // bytes per read while verifying

std::uint64_t round_up(std::uint64_t n, std::uint64_t to) {
  return (n + to - 1) / to * to;
}
// Where element `element` of array `array` (0 master, 1 m, 2 v; array 3: the end) starts in a file.
std::uint64_t array_offset(int version, std::size_t elements, int array, std::size_t element) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(elements) * sizeof(float);
  if (version == 1)
    return sizeof(Header) + static_cast<std::uint64_t>(array) * bytes + element * sizeof(float);
  return kBlock + static_cast<std::uint64_t>(array) * round_up(bytes, kBlock) + element * sizeof(float);
}
// The file's CRC32C: of the three arrays one after another, from each array's own.
std::uint32_t combined_crc(const std::uint32_t crc[3], std::size_t elements) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(elements) * sizeof(float);
  return io::crc32c_combine(io::crc32c_combine(crc[0], crc[1], bytes), crc[2], bytes);
}
}  // namespace

std::string step_dir_name(long step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08ld", step);
  return buf;
}

std::string rank_file(const std::string& step_dir, int rank, int ranks) {
  return step_dir + "/rank-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".bin";
}

Result<nlohmann::json> read_latest(const std::string& dir) {
  const std::string latest_path = dir + "/latest.json";
  std::ifstream in(latest_path);
  if (!in) return Status::not_found(latest_path + ": no checkpoint here");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(latest_path + ": not valid JSON: " + json_error_text(e));
  }
  const auto format = j.is_object() ? j.find("format") : j.end();
  if (format == j.end() || *format != "memwall-zero3-checkpoint") {
    return Status::invalid_argument(latest_path + ": not a memwall checkpoint");
  }
  // Its readers trust what they read from here on: a field of the wrong type, a count below 1, a step
  // directory outside the checkpoint's or a model that does not validate is refused now, naming the file.
  const std::string bad = latest_path + ": not a consistent memwall checkpoint: ";
  try {
    // The model's fields of the types this memwall writes them (a number where it writes one, and so on).
    const nlohmann::json written = model_fields(model::GptConfig{});
    for (const auto& [key, want] : written.items()) {
      const auto it = j.find(key);
      if (it == j.end() || want.is_null() || it->is_null() || want.type() == it->type() ||
          (want.is_number() && it->is_number())) {
        continue;
      }
      return Status::invalid_argument(bad + "key '" + key + "' is " + it->dump() + "; allowed: a " +
                                      want.type_name());
    }
    for (const char* key : {"ranks", "data_parallel", "tiling", "params"}) {
      if (j.contains(key) && !(j[key].is_number_integer() && j[key].get<long>() >= (key[0] == 'p' ? 0 : 1))) {
        return Status::invalid_argument(bad + "key '" + key + "' is " + j[key].dump() +
                                        "; allowed: an integer >= " + (key[0] == 'p' ? "0" : "1"));
      }
    }
    const auto step_dir = j.find("dir");
    if (step_dir == j.end() || !step_dir->is_string() || step_dir->get<std::string>().empty() ||
        step_dir->get<std::string>().find('/') != std::string::npos || *step_dir == "." ||
        *step_dir == "..") {
      return Status::invalid_argument(bad + "key 'dir' is " +
                                      (step_dir == j.end() ? "missing" : step_dir->dump()) +
                                      "; allowed: the name of a step directory in " + dir);
    }
    if (Status s = model::validate(model_of(j), 1, 1); !s.is_ok())
      return Status::invalid_argument(bad + s.message());
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(bad + json_error_text(e));
  }
  return j;
}

nlohmann::json model_fields(const model::GptConfig& c) {
  return {{"layers", c.layers},
          {"channels", c.channels},
          {"heads", c.heads},
          {"vocab", c.vocab},
          {"max_seq", c.max_seq},
          {"arch", c.llama()      ? (!c.layer_norm   ? "llama"
                                     : c.cohere      ? "cohere"
                                     : c.norm_params ? "stablelm"
                                                     : "olmo")
                   : c.opt        ? "opt"
                   : c.neox       ? "neox"
                   : c.phi        ? "phi"
                   : c.falcon     ? "falcon"
                   : c.bigcode    ? "bigcode"
                   : c.bloom      ? "bloom"
                   : c.mpt        ? "mpt"
                   : c.codegen    ? "codegen"
                   : c.gptj       ? "gptj"
                   : c.starcoder2 ? "starcoder2"
                   : c.nemotron   ? "nemotron"
                                  : "gpt2"},
          {"parallel_residual", c.parallel_residual},
          {"one_norm", c.one_norm},
          {"no_bias", c.no_bias},
          {"alibi", c.falcon_alibi},
          {"kv_heads", c.kv_head_count()},
          {"ffn", c.ffn_width()},
          {"tied", c.tied},
          {"qkv_bias", c.qkv_bias},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", model::hf_rope_scaling(c.rope_scaling)},
          {"sliding_window", c.sliding_window},
          {"first_window_layer", c.first_window_layer},
          {"head_dim", c.head_size()},
          {"qk_norm", c.qk_norm},
          {"gelu_mlp", c.gelu_mlp},
          {"norm_unit_offset", c.norm_unit_offset},
          {"embed_scale", c.embed_scale},
          {"fused_names", c.fused_names},
          {"global_every", c.global_every},
          {"sandwich_norm", c.sandwich_norm},
          {"post_norm", c.post_norm},
          {"qk_norm_full", c.qk_norm_full},
          {"clip_qkv", c.clip_qkv},
          {"qk_layernorm", c.qk_layernorm},
          {"logit_scale", c.logit_scale},
          {"rope_windowed_only", c.rope_windowed_only},
          {"nope_every", c.nope_every},
          {"granite", c.granite},
          {"glm", c.glm},
          {"embed_multiplier", c.embed_multiplier},
          {"residual_multiplier", c.residual_multiplier},
          {"attn_softcap", c.attn_softcap},
          {"final_softcap", c.final_softcap},
          {"query_scale", c.query_scale},
          {"rope_local_theta", c.rope_local_theta},
          {"partial_rotary", c.partial_rotary},
          {"exact_gelu", c.exact_gelu},
          {"experts", c.experts},
          {"experts_per_token", c.experts_per_token},
          {"expert_ffn", c.expert_width()},
          {"norm_topk", c.norm_topk},
          {"router_aux", c.router_aux},
          {"shared_ffn", c.shared_ffn},
          {"dense_layers", c.dense_layers},
          {"moe_every", c.moe_every},
          {"sigmoid_routing", c.sigmoid_routing},
          {"expert_groups", c.expert_groups},
          {"groups_per_token", c.groups_per_token},
          {"routed_scale", c.routed_scale},
          {"shared_gate", c.shared_gate},
          {"gpt_oss", c.gpt_oss},
          {"swiglu_limit", c.swiglu_limit},
          {"group_by_best", c.group_by_best},
          {"seq_aux_alpha", c.seq_aux_alpha},
          {"seq_aux", c.seq_aux},
          {"kv_lora", c.kv_lora},
          {"q_lora", c.q_lora},
          {"rope_dim", c.rope_dim},
          {"v_dim", c.v_dim},
          {"deepseek", c.deepseek},
          {"rope_interleave", c.rope_interleave},
          {"llama4", c.llama4},
          {"mtp", c.mtp},
          {"mtp_weight", c.mtp_weight},
          {"qk_l2_norm", c.qk_l2_norm},
          {"attn_temperature", c.attn_temperature},
          {"floor_scale", c.floor_scale},
          {"attention_chunk", c.attention_chunk},
          {"norm_eps", c.norm_eps}};
}

model::GptConfig model_of(const nlohmann::json& j) {
  model::GptConfig c;
  c.layers = j.value("layers", 0);
  c.channels = j.value("channels", 0);
  c.heads = j.value("heads", 0);
  c.vocab = j.value("vocab", 0);
  c.max_seq = j.value("max_seq", 0);
  const std::string arch = j.value("arch", std::string("gpt2"));
  c.opt = arch == "opt";
  c.exact_gelu = j.value("exact_gelu", false);
  if (arch == "neox" || arch == "phi" || arch == "falcon" || arch == "gptj" || arch == "codegen" ||
      arch == "starcoder2" || arch == "nemotron") {
    c.neox = arch == "neox";
    c.starcoder2 = arch == "starcoder2";                   // (with kv_heads and its window)
    c.nemotron = c.norm_unit_offset = arch == "nemotron";  // (with kv_heads; LayerNorm1P)
    c.phi = arch == "phi";
    c.falcon = arch == "falcon";
    c.gptj = arch == "gptj" || arch == "codegen";
    c.codegen = arch == "codegen";
    c.one_norm = j.value("one_norm", false);
    c.no_bias = j.value("no_bias", false);
    c.falcon_alibi = c.falcon && j.value("alibi", false);
    if (c.falcon || c.starcoder2 || c.nemotron) c.kv_heads = j.value("kv_heads", 0);
    if (c.nemotron) {  // written as the head's width; 0 where it is channels / heads
      c.head_dim = j.value("head_dim", 0);
      if (c.heads > 0 && c.head_dim * c.heads == c.channels) c.head_dim = 0;
    }
    if (c.starcoder2) c.sliding_window = j.value("sliding_window", 0);
    c.parallel_residual = j.value("parallel_residual", false);
    c.ffn = j.value("ffn", 0);
    c.tied = j.value("tied", true);
    c.rope_theta = j.value("rope_theta", c.rope_theta);
    c.partial_rotary = j.value("partial_rotary", 1.0);
  }
  if (arch == "bigcode") {  // GPT-2's fields and its key/value heads
    c.bigcode = true;
    c.kv_heads = j.value("kv_heads", 0);
  }
  c.bloom = arch == "bloom";  // GPT-2's fields
  if (arch == "mpt") {        // GPT-2's fields, no biases and its MLP's width
    c.mpt = true;
    c.no_bias = j.value("no_bias", true);
    c.ffn = j.value("ffn", 0);
  }
  // (StableLM: the Llama shape with LayerNorms; OLMo: with LayerNorms without parameters; Cohere: without
  // biases, side by side)
  if (arch == "llama" || arch == "stablelm" || arch == "olmo" || arch == "cohere") {
    c.arch = model::GptArch::kLlama;
    c.layer_norm = arch == "stablelm" || arch == "olmo" || arch == "cohere";
    c.cohere = arch == "cohere";
    c.logit_scale = j.value("logit_scale", 1.0);
    c.rope_windowed_only = j.value("rope_windowed_only", false);
    c.nope_every = j.value("nope_every", 0);
    c.granite = j.value("granite", false);  // (with its multipliers, query_scale and logit_scale)
    c.glm = j.value("glm", false);          // (with sandwich_norm GLM-4)
    c.embed_multiplier = j.value("embed_multiplier", 0.0);
    c.residual_multiplier = j.value("residual_multiplier", 1.0);
    c.norm_params = arch != "olmo";
    c.kv_heads = j.value("kv_heads", 0);
    c.ffn = j.value("ffn", 0);
    c.tied = j.value("tied", true);
    c.qkv_bias = j.value("qkv_bias", false);
    c.rope_theta = j.value("rope_theta", c.rope_theta);
    c.norm_eps = j.value("norm_eps", c.norm_eps);
    c.sliding_window = j.value("sliding_window", 0);
    c.first_window_layer = j.value("first_window_layer", 0);
    // Written as the head's width; 0 (the default) where it is channels / heads.
    c.head_dim = j.value("head_dim", 0);
    if (c.heads > 0 && c.head_dim * c.heads == c.channels) c.head_dim = 0;
    c.qk_norm = j.value("qk_norm", false);
    c.gelu_mlp = j.value("gelu_mlp", false);
    c.norm_unit_offset = j.value("norm_unit_offset", false);
    c.embed_scale = j.value("embed_scale", false);
    c.fused_names = j.value("fused_names", false);
    c.global_every = j.value("global_every", 0);
    c.sandwich_norm = j.value("sandwich_norm", false);
    c.post_norm = j.value("post_norm", false);  // (OLMo 2's, with qk_norm_full)
    c.qk_norm_full = j.value("qk_norm_full", false);
    c.clip_qkv = j.value("clip_qkv", 0.0);            // (OLMo 1.7's)
    c.qk_layernorm = j.value("qk_layernorm", false);  // (StableLM 2 12B's, side by side after one norm)
    c.parallel_residual = c.one_norm = c.layer_norm && j.value("parallel_residual", false);
    c.attn_softcap = j.value("attn_softcap", 0.0);
    c.final_softcap = j.value("final_softcap", 0.0);
    c.query_scale = j.value("query_scale", 0.0);
    c.rope_local_theta = j.value("rope_local_theta", 0.0);
    c.partial_rotary = j.value("partial_rotary", 1.0);
    c.experts = j.value("experts", 0);  // (a mixture of experts)
    c.experts_per_token = j.value("experts_per_token", 0);
    c.expert_ffn = c.experts > 0 ? j.value("expert_ffn", 0) : 0;
    c.norm_topk = j.value("norm_topk", false);
    c.router_aux = j.value("router_aux", 0.0);
    c.shared_ffn = j.value("shared_ffn", 0);
    c.dense_layers = j.value("dense_layers", 0);
    c.moe_every = j.value("moe_every", 1);
    c.sigmoid_routing = j.value("sigmoid_routing", false);  // (GLM-4.5's routing)
    c.expert_groups = j.value("expert_groups", 1);
    c.groups_per_token = j.value("groups_per_token", 1);
    c.routed_scale = j.value("routed_scale", 1.0);
    c.shared_gate = j.value("shared_gate", true);
    c.gpt_oss = j.value("gpt_oss", false);  // (gpt-oss's biases, sinks and clamped SwiGLU)
    c.swiglu_limit = j.value("swiglu_limit", 7.0);
    c.group_by_best = j.value("group_by_best", false);  // (DeepSeek-V2's)
    c.seq_aux_alpha = j.value("seq_aux_alpha", 0.0);    // (DeepSeek's balance loss)
    c.seq_aux = j.value("seq_aux", true);
    c.mtp = j.value("mtp", 0);  // (the next-token-prediction module: the last of `layers`)
    c.mtp_weight = j.value("mtp_weight", 0.3);
    c.llama4 = j.value("llama4", false);  // (Llama 4's routing, names and rotary pairs; its attention's)
    c.qk_l2_norm = j.value("qk_l2_norm", false);
    c.attn_temperature = j.value("attn_temperature", 0.0);
    c.floor_scale = j.value("floor_scale", 8192);
    c.attention_chunk = j.value("attention_chunk", 0);
    c.kv_lora = j.value("kv_lora", 0);  // (DeepSeek's latent attention)
    c.q_lora = j.value("q_lora", 0);
    c.rope_dim = j.value("rope_dim", 0);
    c.v_dim = j.value("v_dim", 0);
    c.deepseek = j.value("deepseek", 0);
    c.rope_interleave = j.value("rope_interleave", true);
  }
  if (c.rotary() && j.contains("rope_scaling")) {
    // Written by model_fields; one that does not read back is refused by validate() naming its type.
    auto rs = parse_rope_scaling(j["rope_scaling"].dump(), "latest.json");
    c.rope_scaling = rs.is_ok() ? *rs : RopeScaling{.type = "(unreadable: " + rs.status().message() + ")"};
  }
  return c;
}

Result<ShardWriter> ShardWriter::create(const std::string& path, long step, std::size_t elements) {
  auto f = io::AtomicFile::create(path, true);
  if (!f.is_ok()) return f.status();
  ShardWriter w(std::move(f).value(), step, elements);
  for (auto& b : w.buf_) {
    void* p = nullptr;
    if (::posix_memalign(&p, kBlock, kStream) != 0)
      return Status::out_of_memory(path + ": checkpoint buffers");
    std::memset(p, 0, kStream);
    b.reset(static_cast<char*>(p));
  }
  return w;
}

ShardWriter::ShardWriter(io::AtomicFile f, long step, std::size_t elements)
    : file_(std::move(f)), step_(step), elements_(elements) {}

Status ShardWriter::flush(int a, std::size_t bytes) {
  MW_RETURN_IF_ERROR(file_.pwrite(buf_[a].get(), bytes, array_offset(2, elements_, a, 0) + flushed_[a]));
  flushed_[a] += bytes;
  fill_[a] = 0;
  return Status::ok();
}

Status ShardWriter::write(std::size_t begin, std::size_t n, const float* master, const float* m,
                          const float* v) {
  if (begin != written_ || n > elements_ - written_) {
    return Status::internal(file_.path() + ": checkpoint piece [" + std::to_string(begin) + ", " +
                            std::to_string(begin + n) + ") out of order (written " +
                            std::to_string(written_) + " of " + std::to_string(elements_) + ")");
  }
  const float* arrays[3] = {master, m, v};
  for (int a = 0; a < 3; ++a) {
    crc_[a] = io::crc32c_extend(crc_[a], arrays[a], n * sizeof(float));
    // Each array is one sequential stream through its aligned buffer, written a full buffer at a time.
    const char* src = reinterpret_cast<const char*>(arrays[a]);
    for (std::size_t left = n * sizeof(float); left > 0;) {
      const std::size_t k = std::min(left, kStream - fill_[a]);
      std::memcpy(buf_[a].get() + fill_[a], src, k);
      fill_[a] += k, src += k, left -= k;
      if (fill_[a] == kStream) MW_RETURN_IF_ERROR(flush(a, kStream));
    }
  }
  written_ += n;
  return Status::ok();
}

Status ShardWriter::commit() {
  if (written_ != elements_) {
    return Status::internal(file_.path() + ": committed with " + std::to_string(written_) + " of " +
                            std::to_string(elements_) + " elements written");
  }
  // Each array's tail, zero-padded to the block size (which is where the next array starts).
  for (int a = 0; a < 3; ++a) {
    if (fill_[a] == 0) continue;
    const std::size_t padded = round_up(fill_[a], kBlock);
    std::memset(buf_[a].get() + fill_[a], 0, padded - fill_[a]);
    MW_RETURN_IF_ERROR(flush(a, padded));
  }
  Header h{};
  std::memcpy(h.magic, kMagicV2, sizeof kMagicV2);
  h.step = step_;
  h.elements = elements_;
  h.crc = combined_crc(crc_, elements_);
  char* block = buf_[0].get();  // a header block, zero beyond the header
  std::memset(block, 0, kBlock);
  std::memcpy(block, &h, sizeof h);
  MW_RETURN_IF_ERROR(file_.pwrite(block, kBlock, 0));
  return file_.commit();
}

Result<ShardReader> ShardReader::open(const std::string& path, std::size_t elements) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::not_found(path + ": missing rank shard of the checkpoint");
    return Status::io_error(path + ": " + std::strerror(errno));
  }
  Header h{};
  const ssize_t got = ::pread(fd, &h, sizeof h, 0);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const int version = std::memcmp(h.magic, kMagicV2, sizeof kMagicV2) == 0   ? 2
                      : std::memcmp(h.magic, kMagicV1, sizeof kMagicV1) == 0 ? 1
                                                                             : 0;
  if (got != static_cast<ssize_t>(sizeof h) || version == 0 || h.elements != elements) {
    ::close(fd);
    return Status::invalid_argument(path + ": not a shard of this model (bad header or size)");
  }
  if (size < 0 || static_cast<std::uint64_t>(size) < array_offset(version, elements, 3, 0)) {
    ::close(fd);
    return Status::io_error(path + ": truncated");
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // verify() streams the file: a larger read-ahead
  return ShardReader(path, fd, static_cast<long>(h.step), elements, h.crc, version);
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      step_(o.step_),
      elements_(o.elements_),
      crc_(o.crc_),
      version_(o.version_) {
  o.fd_ = -1;
}

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status ShardReader::pread(void* dst, std::size_t bytes, std::uint64_t offset) const {
  return io::pread_full(fd_, dst, bytes, offset, path_);
}

std::uint64_t ShardReader::offset(int array, std::size_t element) const {
  return array_offset(version_, elements_, array, element);
}

Status ShardReader::verify() const {
  std::vector<char> buf(kVerifyPiece);
  std::uint32_t crc = 0;
  for (int a = 0; a < 3; ++a) {  // the arrays' bytes in order, without version 2's padding
    const std::uint64_t end = offset(a, elements_);
    for (std::uint64_t at = offset(a, 0); at < end;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), end - at));
      MW_RETURN_IF_ERROR(pread(buf.data(), n, at));
      crc = io::crc32c_extend(crc, buf.data(), n);
      at += n;
    }
  }
  if (crc != crc_) return Status::io_error(path_ + ": checksum mismatch (corrupt checkpoint)");
  return Status::ok();
}

Status ShardReader::matches(const std::uint32_t crc[3]) const {
  if (combined_crc(crc, elements_) != crc_)
    return Status::io_error(path_ + ": checksum mismatch (corrupt checkpoint)");
  return Status::ok();
}

Status ShardReader::read(std::size_t begin, std::size_t n, float* master, float* m, float* v) const {
  if (begin > elements_ || n > elements_ - begin) {
    return Status::internal(path_ + ": read of elements [" + std::to_string(begin) + ", " +
                            std::to_string(begin + n) + ") past " + std::to_string(elements_));
  }
  float* arrays[3] = {master, m, v};
  for (int a = 0; a < 3; ++a) {
    if (arrays[a] != nullptr) MW_RETURN_IF_ERROR(pread(arrays[a], n * sizeof(float), offset(a, begin)));
  }
  return Status::ok();
}

Result<CheckpointParams> CheckpointParams::open(const std::string& dir, model::GptConfig& c,
                                                const std::function<bool(int)>& verify) {
  auto latest = read_latest(dir);
  if (!latest.is_ok()) return latest.status();
  const nlohmann::json& j = *latest;
  c = model_of(j);
  const int ranks = j.value("ranks", 0), tiling = j.value("tiling", 1);  // (read_latest checked the model)
  if (ranks < 1 || !model::validate_tiling(c, tiling).is_ok()) {
    return Status::invalid_argument(dir + "/latest.json: inconsistent model fields");
  }
  // The partition every rank used: graph parameters in order, each padded to a multiple of the rank count.
  CheckpointParams cp;
  const auto R = static_cast<std::size_t>(ranks);
  std::size_t local = 0;
  for (const auto& s : model::make_gpt_graph(c, 1, 1, tiling).slices) {
    const std::size_t shard = (s.numel + R - 1) / R;
    cp.slices_.push_back({s.offset, s.numel, shard, local});
    local += shard;
  }
  std::sort(cp.slices_.begin(), cp.slices_.end(),
            [](const Slice& a, const Slice& b) { return a.offset < b.offset; });
  cp.params_ = model::gpt_num_params(c);
  const std::string step_dir = dir + "/" + j.value("dir", std::string());
  for (int r = 0; r < ranks; ++r) {
    auto reader = ShardReader::open(rank_file(step_dir, r, ranks), local);
    if (!reader.is_ok()) return reader.status();
    if (!verify || verify(r)) MW_RETURN_IF_ERROR(reader->verify());
    if (r == 0) cp.step_ = reader->step();
    cp.ranks_.push_back(std::move(reader).value());
  }
  return cp;
}

Status CheckpointParams::read(std::size_t offset, std::size_t n, float* master, float* m, float* v) const {
  if (offset > params_ || n > params_ - offset) {
    return Status::internal("checkpoint read of parameters [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") past " + std::to_string(params_));
  }
  const std::size_t end = offset + n;
  // Slices are in model order; each element e of a slice is rank e / shard's element local + e % shard.
  auto s = std::upper_bound(slices_.begin(), slices_.end(), offset,
                            [](std::size_t at, const Slice& sl) { return at < sl.offset; });
  if (s != slices_.begin()) --s;
  for (std::size_t at = offset; at < end; ++s) {
    if (s == slices_.end() || at < s->offset || at >= s->offset + s->numel) {
      return Status::internal("checkpoint parameter " + std::to_string(at) + " is in no slice");
    }
    const std::size_t stop = std::min(end, s->offset + s->numel);
    while (at < stop) {
      const std::size_t e = at - s->offset, r = e / s->shard;
      const std::size_t k = std::min(stop - at, (r + 1) * s->shard - e);
      const std::size_t to = at - offset;
      MW_RETURN_IF_ERROR(ranks_[r].read(s->local + e % s->shard, k, master + to,
                                        m != nullptr ? m + to : nullptr, v != nullptr ? v + to : nullptr));
      at += k;
    }
  }
  return Status::ok();
}

}  // namespace memwall::train::ckpt
