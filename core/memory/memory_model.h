// Analytic memory model: bytes per rank on each tier (GPU, CPU, NVMe), by category, for ZeRO stages 0-3
// with every offload choice, data-parallel and tensor model-parallel degrees, activation checkpointing
// (optionally offloaded to CPU), memory-centric tiling and the buffers ZeRO-Infinity allocates.
//
// Each item carries the rule it was computed by (shown by `memwall predict`). With the paper's
// assumptions (mixed precision, Adam, no embeddings) the items reduce exactly to Eq. (2)-(5); see
// docs/memory-model.md for every rule and where it departs from DeepSpeed's own estimator.
// Pure function of its inputs; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

enum class Tier { kGpu = 0, kCpu = 1, kNvme = 2 };
inline constexpr int kTierCount = 3;
const char* tier_name(Tier t);  // "gpu", "cpu", "nvme"
Tier tier_of(OffloadDevice d);  // where an offload device setting puts data (kNone -> kGpu)

enum class MemCategory {
  kParams16,               // 16-bit (or fp32 without mixed precision) parameters
  kGrads16,                // 16-bit gradients
  kMasterParams32,         // fp32 master parameters
  kMomentum32,             // Adam first moment
  kVariance32,             // Adam second moment
  kGrads32,                // fp32 gradients for the optimizer
  kPersistentParams,       // stage 3: small params kept whole on every GPU (param persistence threshold)
  kActivationCheckpoints,  // Eq. (3)
  kActivations,            // every block's activations, without checkpointing
  kActivationWorking,      // Eq. (5) recompute window
  kLogits,                 // output logits and loss gradient
  kModelStateWorking,      // Eq. (4): gathered params + grads of the largest (tiled) operator
  kGatherPrefetch,         // prefetch bucket of gathered parameters
  kReduceBuckets,          // gradient reduce/reduce-scatter buckets
  kPinnedSwapBuffers,      // pinned CPU buffers for NVMe swapping of params and optimizer sub-groups
  kNvmeFilePadding,        // swap files rounded up to the aio block size
  kRuntimeReserved,        // CUDA context, workspaces, OS: from the hardware file
};
const char* category_name(MemCategory c);   // "params16", "momentum32", ... (stable, used in --json)
const char* category_label(MemCategory c);  // "16-bit params", ... (for people)

struct MemoryItem {
  Tier tier = Tier::kGpu;
  MemCategory category = MemCategory::kParams16;
  double bytes_per_rank = 0;  // for kRuntimeReserved on cpu: per node, see per_node
  bool per_node = false;      // true: the bytes are per node, not per rank
  bool pinned = false;        // page-locked host memory
  std::string rule;           // the formula with its values, e.g. "4 B x 1.01T / 16 ranks"
};

struct TierUsage {
  Tier tier = Tier::kGpu;
  const char* scope = "";     // "per GPU" or "per node"
  double capacity_bytes = 0;  // the hardware capacity (reserved memory is an item, kRuntimeReserved)
  double used_bytes = 0;
  double headroom_bytes() const { return capacity_bytes - used_bytes; }
  double utilization() const {
    return capacity_bytes > 0 ? used_bytes / capacity_bytes : (used_bytes > 0 ? 1e30 : 0);
  }
  bool fits() const { return used_bytes <= capacity_bytes; }
};

struct MemoryEstimate {
  std::vector<MemoryItem> items;
  TierUsage tiers[kTierCount];  // indexed by Tier: GPU per GPU, CPU per node, NVMe per node
  int ranks = 1;                // data_parallel x model_parallel x pipeline_parallel
  int ranks_per_node = 1;
  int nodes_used = 1;
  double params = 0;          // exact parameter count
  double shard_elements = 0;  // per-rank share of partitioned states
  double pinned_bytes_per_node = 0;
  bool fits = false;
  Tier limiting_tier = Tier::kGpu;  // the tier with the highest utilization
  // Where an offloaded optimizer's fp32 gradients wait for its step (memwall.optimizer_gradients resolved);
  // the GPU with the optimizer there.
  Tier optimizer_gradients = Tier::kGpu;
  std::vector<std::string> notes;  // configuration remarks (e.g. buffers too small, DeepSpeed would assert)

  const TierUsage& tier(Tier t) const { return tiers[static_cast<int>(t)]; }
  double bytes(Tier t, MemCategory c) const;  // per rank, summed over items
  // "GPU: needs 40.20 GiB per GPU, 32.00 GiB available (short by 8.20 GiB)" for the worst tier.
  std::string shortfall() const;
};

// Bytes of padding when `bytes` is written as a file of `block`-byte aio blocks.
double aio_padding(double bytes, double block);
// Padding of the optimizer-state swap files on NVMe: `states` files per sub-group of `sub` elements (fp32).
double optimizer_swap_padding(double elements, double sub, double states, double block);
// Swap files per optimizer sub-group of a resolved run with the optimizer on NVMe: momentum and variance,
// the fp32 master with mixed precision, the gradients when they wait on NVMe (memwall.optimizer_gradients).
double optimizer_swap_files(const RunConfig& run);
// Pinned CPU bytes of the param swap pool (buffer_count x buffer_size 16-bit elements).
double param_swap_pool_bytes(const RunConfig& run);
// Pinned CPU bytes of the optimizer swap pool: (1 + pipeline_read + pipeline_write) x buffer_count fp32
// buffers of one sub-group, plus a 16-bit staging sub-group.
double optimizer_swap_pool_bytes(const RunConfig& run, double sub_group_elements);
// ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio < 1 with the optimizer offloaded): of a rank's
// `elements` of optimizer states in sub-groups of sub_group_size, DeepSpeed steps the first
// int((1 - ratio) x sub-groups) on the GPU. Their elements (0 without Twin-Flow), and the two counts.
struct TwinFlowSplit {
  double gpu_elements = 0;
  int groups = 1, gpu_groups = 0;
};
TwinFlowSplit twin_flow_split(const RunConfig& run, double elements);
// What Twin-Flow does with a rank's `elements` of optimizer states ("Twin-Flow: the GPU steps 5 of 10
// sub-groups of ..."), or, where the ratio puts none there, why and what to change; "" without Twin-Flow.
std::string twin_flow_note(const RunConfig& run, double elements);

// `run` must have been through resolve_run_config() with the same model and hardware.
MemoryEstimate estimate_memory(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw);

}  // namespace memwall
