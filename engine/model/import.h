// Hugging Face GPT-2 weights (`model.safetensors`, as `memwall export` writes them or transformers'
// GPT2LMHeadModel saves them) as the source of a GPT's initial parameters. The file's header is read and
// checked against the model at open (every tensor present with the shape this config needs, F32, F16 or
// BF16); the data is then read on demand by range of the flat gpt_param_layout array, so a ZeRO rank reads
// only the bytes of its own shard (a transposed Conv1D weight is read whole, one tensor at a time), and no
// rank ever holds the model or broadcasts it. A model saved in shards (model.safetensors.index.json naming
// model-00001-of-0000N.safetensors, ...) is read the same way, each tensor from its shard, and so is a
// PyTorch checkpoint (pytorch_model.bin, or the shards its index lists), indexed without running its pickle
// (engine/model/torch_bin.h). gpt-oss's experts may be MXFP4 as OpenAI publishes them (gate_up_proj_blocks
// and _scales, down_proj_blocks and _scales: U8), dequantized as read; so are block-quantized FP8 weights
// (DeepSeek-V3's, Kimi K2's and the Qwen3 FP8 releases': F8_E4M3 with a name_scale_inv of one F32 or BF16
// scale per 128 x 128 block).
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/model/gpt.h"

namespace memwall::model {

class HfWeights {
 public:
  // `path`: the .safetensors or .bin file, a model.safetensors.index.json or pytorch_model.bin.index.json,
  // or a directory holding one (model.safetensors, its index, pytorch_model.bin, its index: the first found).
  // Tensor names may carry transformers' "transformer." prefix; tensors the model does not use
  // (lm_head.weight of a tied head, the attention's mask buffers) are listed in ignored(). An lm_head.weight
  // that is not wte.weight's copy is an error (memwall's GPT ties them).
  static Result<HfWeights> open(const std::string& path, const GptConfig& c);
  HfWeights(HfWeights&&) noexcept;
  HfWeights& operator=(HfWeights&&) noexcept;
  ~HfWeights();

  // Parameters [offset, offset + n) in gpt_param_layout order, as fp32 (a model::ParamReader).
  Status read(std::size_t offset, std::size_t n, float* out);

  // What was opened: the .safetensors file, or the index of the shards.
  const std::string& file() const { return file_; }
  // The .safetensors files read (one, or the shards in name order).
  std::vector<std::string> files() const;
  const std::vector<std::string>& ignored() const { return ignored_; }
  const std::string& dtype() const {
    return dtype_;
  }  // of the model's tensors ("F32", "F16", "BF16", "mixed")

 private:
  // One .safetensors file: its descriptor, header and where its data starts.
  struct Shard {
    int fd = -1;
    std::string path;
    std::size_t data_start = 0, size = 0;
  };
  struct Tensor {
    std::size_t offset = 0, numel = 0;  // in gpt_param_layout
    int shard = 0;                      // the file it is in
    std::size_t file_offset = 0;        // absolute byte offset of its data in that file
    int element_bytes = 4;
    std::string dtype;
    bool transposed = false;   // stored [in, out] (Conv1D), memwall [out, in]
    bool interleaved = false;  // GPT-NeoX's query_key_value: q, k and v head by head (hf_interleaved)
    std::size_t out = 0, in = 0;
    ParamTensor layout;  // its tensor in hf_param_layout (what hf_reorder reads)
    // MXFP4 (gpt-oss's experts as published): name_blocks [experts, rows, in / 32, 16] bytes, two FP4 (E2M1)
    // values each, low nibble first, and name_scales [experts, rows, in / 32], each block of 32's E8M0
    // exponent (2^(s - 127)); the rows are the [experts, in, rows] tensor's last dimension. file_offset is
    // the blocks', scales_shard and scales_offset the scales'.
    bool mxfp4 = false;
    int scales_shard = 0;
    std::size_t scales_offset = 0;
    // Block FP8 (element_bytes 1, dtype F8_E4M3): each value times its 128 x 128 block's scale, from
    // name_scale_inv [ceil(out / 128), ceil(in / 128)] (shard scales_shard at scales_offset, elements of
    // scale_bytes: 4 for F32, 2 for BF16).
    int scale_bytes = 0;
  };
  static constexpr std::size_t kFp8Block = 128;
  HfWeights() = default;
  // Opens `path` as shards_[k] and parses its header into `header`.
  Status open_shard(const std::string& path, nlohmann::json& header);
  Status read_elements(const Tensor& t, std::size_t first, std::size_t n, float* out);
  Status locate(const nlohmann::json& header, int shard, const std::string& name,
                const std::vector<long long>& want, const std::string& allowed, Tensor& x) const;
  // The MXFP4 pair name_blocks, name_scales (shards `blocks`, `scales`) standing for the [experts, in, rows]
  // tensor `want` into x.
  Status locate_mxfp4(const std::vector<nlohmann::json>& headers, int blocks, int scales,
                      const std::string& name, const std::vector<long long>& want, Tensor& x) const;
  // All of an MXFP4 tensor, dequantized into its [experts, in, rows] order.
  Status read_mxfp4(const Tensor& t, float* out);
  // A block-FP8 weight's scales tensor name_scale_inv (shard `shard`) into x.
  Status locate_fp8_scales(const nlohmann::json& header, int shard, const std::string& name, Tensor& x) const;
  // Elements [first, first + n) of a block-FP8 weight, dequantized.
  Status read_fp8(const Tensor& t, std::size_t first, std::size_t n, float* out);
  // A file's head tensor `head_name` (lm_head.weight, GPT-NeoX's embed_out.weight), if it has one, must be
  // the token embedding's copy.
  Status check_tied_head(const std::vector<nlohmann::json>& headers, const std::string& head_name);

  std::vector<Shard> shards_;
  std::string file_;
  std::vector<Tensor> tensors_;
  std::vector<std::string> ignored_;
  std::string dtype_;
  GptConfig config_;  // the model the file is read for
  // The last transposed or interleaved tensor read, in memwall's order.
  int cached_ = -1;
  std::vector<float> cache_;
};

}  // namespace memwall::model
