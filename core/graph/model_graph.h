// ModelGraph: one rank's view of a GPT-style decoder as operators in execution order, with the parameter
// tensors each operator needs, its forward/backward FLOPs and its activation bytes.
//
// Memory-centric tiling splits every block linear (and an untied LM head) into `tiling` ops over
// disjoint slices of the output features, each with its own parameter tensors: mathematically the same
// layer, with 1/tiling of the working memory. Tensor model parallelism (mp > 1) shards the linears
// Megatron-style (qkv and fc1 by columns, proj and fc2 by rows) and adds an all-reduce op after each
// row-parallel linear. Expert parallelism keeps a rank's share of each MoE layer's experts, with an
// all-to-all op before them (dispatch) and after them (combine). Activation accounting follows the paper's
// Eq. (5): per block the qkv output, attention probabilities, attention output and fc1 output are saved for
// backward; layernorm and GELU outputs are recomputed. Each op also counts the device memory its forward and
// backward read and write (unfused kernels: elementwise ops are memory-bound, attention writes and reads its
// scores and probabilities). With flash_attention the attention saves a log-sum-exp per row instead of the
// probabilities and moves no scores. Plain data; build once, read from any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

enum class OpKind {
  kEmbedding,
  kLayerNorm,
  kLinear,
  kAttention,
  kGelu,
  kAllReduce,
  kAllToAll,
  kLoss,
  kConv,             // Qwen3-Next's depthwise causal convolution
  kLinearAttention,  // its Gated DeltaNet's delta-rule recurrence
};
const char* op_kind_name(OpKind k);

struct GraphParam {
  int id = 0;
  std::string name;     // "L3.fc1.w[2/4]"
  double elements = 0;  // on this model-parallel rank
  int layer = -1;       // block index, -1 outside blocks
  // An expert's parameter under expert parallelism: only data_parallel / expert_parallel ranks hold it (it is
  // partitioned, gathered and reduced over them). 1 for every other parameter.
  int expert_parallel = 1;
};

struct GraphOp {
  int id = 0;
  std::string name;  // "L3.fc1[2/4]"
  OpKind kind = OpKind::kLinear;
  int layer = -1;           // block index; -1 before the blocks (embedding), `layers` after them
  std::vector<int> params;  // GraphParam ids (the LM head of a tied model uses the embedding's)
  double fwd_flops = 0;     // the model's FLOPs, as the paper counts them (what FLOP/s figures divide)
  double bwd_flops = 0;
  // The share of those FLOPs the kernels execute (what the op's time follows): below 1 for fused causal
  // attention, which skips the key tiles above the diagonal.
  double exec_fraction = 1;
  // Device memory the pass reads and writes (activations, parameters, gradients; the roofline's bytes: an
  // op takes the longer of its FLOPs at the achievable rate and these bytes at the memory bandwidth).
  double fwd_mem_bytes = 0;
  double bwd_mem_bytes = 0;
  double out_bytes = 0;      // output activation (transient in forward)
  double saved_bytes = 0;    // kept from forward (or recomputation) until this op's backward
  bool block_start = false;  // first op of a block: its input is the block input (checkpoint)
  int tile = 0;
  int tiles = 1;
  // kAllReduce: the model-parallel group it reduces over; kAllToAll: the expert-parallel group.
  int group = 1;
};

struct GraphOptions {
  double micro_batch = 1;  // sequences per GPU
  int sequence_length = 1024;
  int tiling = 1;
  int model_parallel = 1;
  double element_bytes = 2;  // 16-bit parameters and activations (4 in fp32 training)
  // Fused (FlashAttention-style) attention: saves the output and an fp32 log-sum-exp per row and head
  // instead of the probabilities, never writes the scores to device memory, and recomputes QK^T in
  // backward.
  bool flash_attention = false;
  // Expert parallelism (a mixture of experts): this rank runs experts_per_layer / expert_parallel experts on
  // the tokens its group's ranks route to them, sent and returned by all-to-all ops.
  int expert_parallel = 1;
  // With expert parallelism: this rank's routed tokens over its even share (RunConfig's expert_load).
  double expert_load = 1;
};

struct ModelGraph {
  std::vector<GraphParam> params;
  std::vector<GraphOp> ops;
  int layers = 0;
  int hidden = 0;
  GraphOptions options;

  double total_param_elements() const;
  double total_fwd_flops() const;
  double total_bwd_flops() const;
};

ModelGraph build_model_graph(const ModelSpec& model, const GraphOptions& options);

// DeepSpeed's stage-3 persistence (mark_persistent_parameters): taking the tensors in parameter order, one of
// at most `param_threshold` elements stays whole on every rank unless it would take the persistent total past
// `model_threshold` (then it is partitioned and the next ones are still considered).
struct PersistenceRule {
  double param_threshold = 0;
  double model_threshold = kUnlimitedPersistence;
  double total = 0;  // persistent elements so far
  bool admit(double elements) {
    if (elements > param_threshold || total + elements > model_threshold) return false;
    total += elements;
    return true;
  }
};
// Per parameter of `g`, in order: whether stage 3 keeps it whole (persistent).
std::vector<char> persistent_params(const ModelGraph& g, double param_threshold, double model_threshold);

// Parameter facts of the graph without building every layer (blocks are identical): used by the analytic
// memory model so that it and the planner agree on what is gathered and what persists.
struct GraphParamStats {
  double largest_op_elements = 0;     // most parameter elements one op gathers (per rank, after tiling)
  double largest_param_elements = 0;  // the largest single (contiguous) parameter tensor
  // Tensors partitioned in stage 3 (not persistent): {elements, how many}.
  std::vector<std::pair<double, double>> partitioned_tensors;
  double persistent_elements = 0;  // elements in the tensors stage 3 keeps whole (PersistenceRule)
  double total_elements = 0;       // per model-parallel rank
};
GraphParamStats graph_param_stats(const ModelSpec& model, int tiling, int model_parallel,
                                  double persistence_threshold,
                                  double model_persistence_threshold = kUnlimitedPersistence);

}  // namespace memwall
