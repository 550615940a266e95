// safetensors: u64 little-endian header length, a JSON header of {name: {dtype, shape, data_offsets}},
// padded with spaces to 8 bytes, then the raw little-endian tensor bytes.
#include "engine/model/export.h"

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "engine/io/atomic_file.h"

namespace memwall::model {

namespace {
bool is_linear_weight(const ParamTensor& t) {
  return t.shape.size() == 2 && t.name.rfind("h.", 0) == 0;
}
}  // namespace

Status export_hf(const GptConfig& c, const float* params, const std::string& dir) {
  MW_RETURN_IF_ERROR(validate(c, 1, 1));
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"producer", "memwall"}};
  std::vector<float> data;
  data.reserve(gpt_num_params(c));
  for (const auto& t : gpt_param_layout(c)) {
    const float* src = params + t.offset;
    std::vector<int> shape = t.shape;
    const std::size_t begin = data.size() * sizeof(float);
    if (is_linear_weight(t)) {
      // memwall stores [out, in]; Conv1D stores [in, out].
      const int out = t.shape[0], in = t.shape[1];
      shape = {in, out};
      for (int i = 0; i < in; ++i) {
        for (int o = 0; o < out; ++o) data.push_back(src[static_cast<std::size_t>(o) * in + i]);
      }
    } else {
      data.insert(data.end(), src, src + t.numel);
    }
    header[t.name] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size() * sizeof(float)}}};
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>((static_cast<std::uint64_t>(h.size()) >> (8 * i)) & 0xff);
  MW_RETURN_IF_ERROR(io::write_file_atomic(
      dir + "/model.safetensors",
      {std::string_view(reinterpret_cast<const char*>(len), 8), h,
       std::string_view(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float))}));

  nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab},
      {"n_positions", c.max_seq},
      {"n_ctx", c.max_seq},
      {"n_embd", c.channels},
      {"n_layer", c.layers},
      {"n_head", c.heads},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
  };
  const std::string cfg = config.dump(2) + "\n";
  return io::write_file_atomic(dir + "/config.json", {cfg});
}

}  // namespace memwall::model
