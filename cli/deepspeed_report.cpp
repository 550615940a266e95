// DeepSpeed's estimator beside memwall's count (deepspeed_report.h).
#include "deepspeed_report.h"

namespace memwall::cli {

using nlohmann::json;

std::vector<LeftOut> left_out_of_deepspeed_estimate(const MemoryEstimate& e) {
  std::vector<LeftOut> groups = {{"activations"},       {"buckets and prefetch"}, {"pinned swap buffers"},
                                 {"NVMe file padding"}, {"runtime reserve"},      {"persistent parameters"}};
  for (const MemoryItem& it : e.items) {
    int g = -1;
    switch (it.category) {
      case MemCategory::kActivationCheckpoints:
      case MemCategory::kActivations:
      case MemCategory::kActivationWorking:
      case MemCategory::kLogits:
        g = 0;
        break;
      case MemCategory::kGatherPrefetch:
      case MemCategory::kReduceBuckets:
        g = 1;
        break;
      case MemCategory::kPinnedSwapBuffers:
        g = 2;
        break;
      case MemCategory::kNvmeFilePadding:
        g = 3;
        break;
      case MemCategory::kRuntimeReserved:
        g = 4;
        break;
      case MemCategory::kPersistentParams:
        g = 5;
        break;
      default:
        break;
    }
    if (g < 0) continue;
    if (it.tier == Tier::kGpu) groups[static_cast<std::size_t>(g)].gpu_bytes += it.bytes_per_rank;
    if (it.tier == Tier::kCpu) {
      groups[static_cast<std::size_t>(g)].cpu_bytes +=
          it.per_node ? it.bytes_per_rank : it.bytes_per_rank * e.ranks_per_node;
    }
  }
  std::vector<LeftOut> out;
  for (const LeftOut& l : groups) {
    if (l.gpu_bytes > 0 || l.cpu_bytes > 0) out.push_back(l);
  }
  return out;
}

nlohmann::json twin_flow_json(const RunConfig& run, const MemoryEstimate& e) {
  const auto& oo = run.zero.offload_optimizer;
  if (oo.ratio >= 1 || oo.device == OffloadDevice::kNone) return nullptr;
  const TwinFlowSplit t = twin_flow_split(run, e.shard_elements);
  return {{"ratio", oo.ratio},
          {"sub_groups", t.groups},
          {"gpu_sub_groups", t.gpu_groups},
          {"gpu_elements_per_rank", t.gpu_elements}};
}

nlohmann::json deepspeed_estimate_json(const DeepSpeedEstimate& d, const MemoryEstimate& e) {
  if (!d.available) return {{"available", false}, {"why", d.why}};
  json left = json::array();
  for (const LeftOut& l : left_out_of_deepspeed_estimate(e)) {
    left.push_back({{"what", l.what}, {"gpu_bytes", l.gpu_bytes}, {"cpu_bytes_per_node", l.cpu_bytes}});
  }
  return {{"available", true},
          {"function", d.function},
          {"total_params", d.params},
          {"largest_layer_params", d.largest_layer_params},
          {"num_gpus_per_node", d.gpus_per_node},
          {"num_nodes", d.nodes},
          {"cpu_offload", d.cpu_offload},
          {"cpu_offload_params", d.cpu_offload_params},
          {"zero_init", d.zero_init},
          {"additional_buffer_factor", d.buffer_factor},
          {"gpu_bytes", d.per_gpu_bytes},
          {"cpu_bytes_per_node", d.per_cpu_bytes},
          {"gpu_rule", d.gpu_rule},
          {"cpu_rule", d.cpu_rule},
          {"memwall_gpu_bytes", e.tier(Tier::kGpu).used_bytes},
          {"memwall_cpu_bytes_per_node", e.tier(Tier::kCpu).used_bytes},
          {"memwall_nvme_bytes_per_node", e.tier(Tier::kNvme).used_bytes},
          {"left_out", left}};
}

}  // namespace memwall::cli
