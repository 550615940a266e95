// A GPT-2-style decoder on memwall's CPU kernels: token + position embedding; L blocks of (layernorm, causal
// multi-head attention, residual, layernorm, GELU MLP, residual); a final layernorm; an LM head tied to the
// token embedding; mean softmax cross-entropy.
//
// Parameters live in one flat fp32 array in a fixed order (gpt_param_layout), named with Hugging Face GPT-2
// keys. Linear weights are stored [out, in] (memwall's matmul convention); Hugging Face's Conv1D stores
// [in, out], so an exporter transposes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/model_graph.h"
#include "spec/model_spec.h"

namespace memwall::model {

struct GptConfig {
  int vocab = 256;    // V
  int max_seq = 256;  // positions in wpe
  int layers = 2;     // L
  int heads = 4;      // NH
  int channels = 64;  // C, divisible by heads
};

// Rejects non-positive sizes, channels not divisible by heads and seq > max_seq, naming the field.
Status validate(const GptConfig& c, int batch, int seq);

struct ParamTensor {
  std::string name;  // e.g. "h.3.attn.c_attn.weight"
  std::size_t offset = 0;
  std::size_t numel = 0;
  std::vector<int> shape;  // as stored here ([out, in] for linear weights)
};

std::vector<ParamTensor> gpt_param_layout(const GptConfig& c);
std::size_t gpt_num_params(const GptConfig& c);

// The core's description of exactly this model (learned positions, layernorm, GELU MLP of 4C, biases, tied
// head), from which build_model_graph makes the ops and tensors the planner schedules.
ModelSpec gpt_model_spec(const GptConfig& c);

// Where each GraphParam of a graph built from gpt_model_spec(c) (model_parallel 1, any tiling) lives in the
// flat parameter array. A tile of a linear is a contiguous block of weight rows ([out, in] layout) and of the
// bias. Error when the graph does not describe this model (a name or size that does not match).
struct ParamSlice {
  std::size_t offset = 0;
  std::size_t numel = 0;
};
Result<std::vector<ParamSlice>> map_graph_params(const ModelGraph& g, const GptConfig& c);

// GPT-2's initialisation, deterministic in `seed`: weights N(0, 0.02), the two residual projections of each
// block N(0, 0.02 / sqrt(2 L)), layernorm weight 1 and bias 0, linear biases 0.
void gpt_init(const GptConfig& c, float* params, std::uint64_t seed);

// Activations for one micro-batch of B sequences of T tokens (T <= max_seq), and the forward/backward passes.
class GptModel {
 public:
  // Precondition: validate(c, B, T) is ok.
  GptModel(const GptConfig& c, int B, int T);

  // Returns the mean cross-entropy of predicting targets[i] at position i. tokens and targets: [B*T].
  float forward(const float* params, const int* tokens, const int* targets);
  // Accumulates d(loss)/d(params) into grads (same layout as params); call after forward with the same
  // params.
  void backward(const float* params, float* grads);

  const GptConfig& config() const { return c_; }

 private:
  struct Layer {
    std::size_t ln1w, ln1b, wqkv, bqkv, wproj, bproj, ln2w, ln2b, wfc, bfc, wfc2, bfc2;
  };
  GptConfig c_;
  int B_, T_;
  std::size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
  std::vector<Layer> layer_;
  std::vector<int> tokens_, targets_;
  // Per layer: the block's input (resid[l]), then everything its backward needs.
  std::vector<std::vector<float>> resid_, ln1_, m1_, r1_, qkv_, att_, atty_, res1_, ln2_, m2_, r2_, fc_, gel_;
  std::vector<float> lnf_, mf_, rf_, probs_;
  // Gradient scratch, reused across layers.
  std::vector<float> dx_, dres_, dln_, datty_, dqkv_, dfc_, dgel_, dlogits_;
};

}  // namespace memwall::model
