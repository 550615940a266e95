// Largest trainable model: for each strategy of the paper's Table 2, the largest model of a shape family
// (hidden size and layer count growing together) whose memory fits every tier; and the largest hidden
// size of a single transformer layer per tiling factor when GPU memory is fragmented into chunks.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "memory/memory_model.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

// The device placements of the paper's Table 2.
enum class Strategy { kDataParallel, kZero2, kZeroOffload, k3D, kZero3, kZeroInfCpu, kZeroInfNvme };
const char* strategy_name(Strategy s);   // "data-parallel", "zero-2", ..., "zero-infinity-nvme"
const char* strategy_label(Strategy s);  // "Data parallel", "ZeRO-2", ...
const std::vector<Strategy>& all_strategies();
Result<Strategy> parse_strategy(const std::string& name);

// `base` with the strategy's ZeRO stage, offload devices and parallelism applied; everything else (batch,
// checkpoint interval, buffers, tiling) kept. Activation checkpointing is on for every strategy and
// offloaded to CPU for the ZeRO-Infinity ones. 3D parallelism is tensor slicing over the GPUs of a node
// (model_parallel = GPUs per node) and a pipeline stage per node (pipeline_parallel = nodes), with ZeRO-1
// over what data parallelism is left (none then).
// The result still needs resolve_run_config() (data_parallel is reset to auto).
RunConfig apply_strategy(const RunConfig& base, Strategy s, const HardwareSpec& hw);

// How layers (and heads) follow the hidden size.
struct ShapeFamily {
  enum class Kind { kPaper, kGpt3, kFixedLayers, kFixedHidden, kLlama };
  Kind kind = Kind::kPaper;
  int fixed = 0;       // layers for kFixedLayers, hidden for kFixedHidden
  int head_dim = 128;  // heads = hidden / head_dim
  std::string name() const;
  // The family member at `size` (hidden size, or layer count for kFixedHidden), shaped like `templ`
  // (vocabulary, positions, MLP style, bias and norm kinds; ffn keeps templ's ffn/hidden ratio).
  // Heads are the multiple of `heads_multiple` (the model-parallel degree) closest to hidden / head_dim
  // that divides the hidden size; 0 heads means no such count exists (the member is skipped).
  ModelSpec member(const ModelSpec& templ, int size, int heads_multiple = 1) const;
  int step() const { return kind == Kind::kFixedHidden ? 1 : head_dim; }
};
// "paper" (layers interpolated through the paper's Figure 2a configurations), "gpt3" (through the GPT-3
// family of Brown et al.), "llama" (through Llama 2's and Llama 3's: with a Llama template model its gated
// MLP and grouped-query attention follow), "layers=N", "hidden=H".
Result<ShapeFamily> parse_family(const std::string& text);

struct MaxModelResult {
  Strategy strategy = Strategy::kDataParallel;
  bool found = false;        // false: not even the smallest member fits (or the run is invalid)
  ModelSpec model;           // the largest member that fits
  MemoryEstimate estimate;   // its memory
  std::string next_failure;  // why the next member up does not fit ("GPU: needs ...")
  Tier limiting_tier = Tier::kGpu;
  std::string error;      // a configuration error for this strategy, if any
  int tiling_factor = 1;  // memory-centric tiling of the largest model found
};

// The ZeRO-Infinity strategies include memory-centric tiling (the paper's §5.1.3): where GPU memory is what
// stops a size, they try the base run's tiling factor doubled, up to `max_tiling` (dividing the hidden and
// MLP sizes), and keep the smallest factor that fits. The other strategies keep the base run's factor.
MaxModelResult find_max_model(Strategy s, const ShapeFamily& family, const ModelSpec& templ,
                              const RunConfig& base, const HardwareSpec& hw, int max_tiling = 64);

struct MaxHiddenResult {
  int tiling_factor = 1;
  int max_hidden = 0;  // 0: none fits
  std::string limit;   // what stops the next hidden size up
};

// Single transformer layer (no embedding), heads = hidden / 128, under `base` with the tiling factor
// applied, hidden searched in multiples of 1024. A tensor is allocated contiguously, so none may exceed
// `chunk_bytes`: a gathered 16-bit parameter tile, its gradient, the largest activation tensor, the
// attention scores and the reduce bucket.
std::vector<MaxHiddenResult> find_max_hidden(const RunConfig& base, const HardwareSpec& hw,
                                             double chunk_bytes, const std::vector<int>& tiling_factors);

}  // namespace memwall
