// DeepSpeed's own memory estimator beside memwall's count, as `memwall predict --json` and the Python
// module's predict() report it (core/memory/deepspeed_estimate.h has the estimator itself).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "memory/deepspeed_estimate.h"
#include "memory/memory_model.h"

namespace memwall::cli {

// What DeepSpeed's estimator leaves out of memwall's count, by group ("activations", "buckets and prefetch",
// ...): GPU bytes per GPU, CPU bytes per node; groups with nothing in them are left out.
struct LeftOut {
  const char* what;
  double gpu_bytes = 0, cpu_bytes = 0;
};
std::vector<LeftOut> left_out_of_deepspeed_estimate(const MemoryEstimate& e);

// {"available": false, "why"} or {"available": true, "function", "total_params", "largest_layer_params",
// "num_gpus_per_node", "num_nodes", "cpu_offload", "cpu_offload_params", "zero_init",
// "additional_buffer_factor", "gpu_bytes", "cpu_bytes_per_node", "gpu_rule", "cpu_rule", "memwall_gpu_bytes",
// "memwall_cpu_bytes_per_node", "memwall_nvme_bytes_per_node", "left_out": [{"what", "gpu_bytes",
// "cpu_bytes_per_node"}]} (docs/cli.md).
nlohmann::json deepspeed_estimate_json(const DeepSpeedEstimate& d, const MemoryEstimate& e);

// ZeRO-Offload++'s Twin-Flow split of a resolved run with offload_optimizer.ratio < 1 and the optimizer
// offloaded: {"ratio", "sub_groups", "gpu_sub_groups", "gpu_elements_per_rank"}; null otherwise (predict's
// `memory.twin_flow`, the Python module's predict()["twin_flow"]).
nlohmann::json twin_flow_json(const RunConfig& run, const MemoryEstimate& e);

}  // namespace memwall::cli
