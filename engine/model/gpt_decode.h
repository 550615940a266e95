// Incremental decoding of the GPT of gpt.h with a key/value cache: each appended token runs the model on one
// position, attending to the keys and values its predecessors left in the cache, so generating n tokens
// costs n single-position passes instead of n passes over the whole context. Same parameter layout, same
// kernels (layernorm, matmul, GELU; for the Llama shape RMSNorm, Qwen3's per-head norms, rotary positions at
// each row's own position, SwiGLU, a cache of the key/value heads only) as GptModel; the logits agree with
// GptModel::forward's at every position to float rounding (the test compares them).
//
// Memory: the cache grows with the positions used (not the model's whole context up front), a windowed
// layer's (Mistral's, Gemma's local layers; Llama 4's chunked ones, of an attention chunk) is a ring of its
// window plus a chunk's rows, and a prompt runs
// in chunks of `chunk` rows, so the activations are a chunk's, whatever the context length.
#pragma once

#include <cstddef>
#include <vector>

#include "base/status.h"
#include "engine/model/gpt.h"

namespace memwall::model {

class GptDecoder {
 public:
  // `params`: the flat array of gpt_param_layout(c), which must outlive the decoder. `chunk`: the most rows
  // run at once (a longer prompt is run in chunks of it).
  explicit GptDecoder(const GptConfig& c, const float* params, int chunk = 256);

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
  // The key/value cache's bytes now, and at most (every layer's capacity filled: the whole context, or a
  // windowed layer's ring).
  std::size_t cache_bytes() const;
  std::size_t cache_capacity_bytes() const;

 private:
  GptConfig c_;
  const float* params_;
  std::vector<ParamTensor> layout_;  // by position in gpt_param_layout
  std::vector<double> inv_freq_;     // the rotary frequencies (the Llama shape)
  std::vector<double> local_freq_;   // and Gemma 3's windowed layers' (rope_local_theta)
  int chunk_;
  int pos_ = 0;
  // Per layer: how many positions its cache holds (the context, or a windowed layer's window + chunk - 1:
  // a chunk's rows are written before they attend, so none may overwrite a key an earlier row still sees),
  // and its keys and values, position u in row u mod capacity, [<= capacity][kv_width] each.
  std::vector<int> capacity_;
  std::vector<std::vector<float>> k_, v_;
  // One chunk's rows through the model (positions pos_ on), then the last one's logits if `logits`.
  void run_rows(const int* tokens, int n, bool logits);
  // A mixture of experts: rows [0, n) of ln_ through each one's chosen experts (the router is tensor
  // `router` of the layout, the experts' follow), their weighted sum into y_.
  void moe_rows(int n, std::size_t router);
  std::vector<float> route_z_, route_p_, route_w_, choice_;
  std::vector<float> route_x_;  // (Llama 4's: a row's input times an expert's weight)
  std::vector<int> route_e_, order_;

  // Activations of the rows being appended (a chunk's).
  std::vector<float> x_, ln_, qkv_, y_, proj_, fc_, gel_, mean_, rstd_, rqk_, mqk_, scores_, logits_;
  // The latent attention's (mla) in layer `layer`: rows [0, n) of ln_ through its down projections (the
  // layout's tensors from `first`: q_a_proj, its norm and q_b_proj, or q_proj; kv_a_proj_with_mqa, its norm;
  // then kv_b_proj), each new position's normed latent and turned rotary key part cached (k_[layer]: kv_lora
  // + rope_dim floats a position, v_ unused), each head's query absorbed into the latent space (kv_b_proj's
  // key rows transposed) and attending over the cached latents, its value kv_b_proj's value rows times the
  // probabilities' sum of latents: the heads' outputs into lo_ [n][heads x v_dim]. Its scratch.
  void mla_rows(int n, std::size_t first, int layer);
  std::vector<float> lq_, lqa_, lqn_, lkva_, lkvc_, lkvn_, lo_;
};

}  // namespace memwall::model
