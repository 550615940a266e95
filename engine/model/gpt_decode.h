// Incremental decoding of the GPT of gpt.h with a key/value cache: each appended token runs the model on one
// position, attending to the keys and values its predecessors left in the cache, so generating n tokens
// costs n single-position passes instead of n passes over the whole context. Same parameter layout, same
// kernels (layernorm, matmul, GELU; for the Llama shape RMSNorm, Qwen3's per-head norms, rotary positions at
// each row's own position, SwiGLU, a cache of the key/value heads only) as GptModel; the logits agree with
// GptModel::forward's at every position to float rounding (the test compares them).
#pragma once

#include <vector>

#include "base/status.h"
#include "engine/model/gpt.h"

namespace memwall::model {

class GptDecoder {
 public:
  // `params`: the flat array of gpt_param_layout(c), which must outlive the decoder.
  GptDecoder(const GptConfig& c, const float* params);

  // Forgets every cached position.
  void reset() { pos_ = 0; }
  // Runs the model on `token` at the next position (0 after reset) and returns that position's logits
  // [vocab], valid until the next append. Error when the context is full (c.max_seq positions) or the token
  // is outside the vocabulary.
  Result<const float*> append(int token) { return append(&token, 1); }
  // The same for n tokens at once (a prompt: its linears as matrix products over n rows); the logits are the
  // last one's.
  Result<const float*> append(const int* tokens, int n);
  int positions() const { return pos_; }

 private:
  GptConfig c_;
  const float* params_;
  std::vector<ParamTensor> layout_;  // by position in gpt_param_layout
  std::vector<double> inv_freq_;     // the rotary frequencies (the Llama shape)
  std::vector<double> local_freq_;   // and Gemma 3's windowed layers' (rope_local_theta)
  int pos_ = 0;
  // Per layer: keys and values of every cached position, [max_seq][kv_width] each.
  std::vector<std::vector<float>> k_, v_;
  // Activations of the rows being appended.
  std::vector<float> x_, ln_, qkv_, y_, proj_, fc_, gel_, mean_, rstd_, rqk_, scores_, logits_;
};

}  // namespace memwall::model
