// Planner: ModelGraph + RunConfig + HardwareSpec -> the Schedule of one training iteration of one rank.
//
// This is where ZeRO-Infinity's ideas live:
//  - ZeRO stages 0-3: what is replicated, partitioned over the data-parallel ranks, or resident;
//  - bandwidth-centric partitioning (every rank reads its 1/dp shard over its own PCIe path, then an
//    all-gather) or broadcast from an owner (one link carries the whole parameter), per RunConfig;
//  - the infinity offload engine: shards live on GPU, CPU or NVMe (offload_param.device, max_in_cpu);
//  - overlap-centric prefetching: NVMe->CPU, CPU->GPU and the all-gather for operators i+3, i+2, i+1 are
//    started while operator i computes, within the prefetch bucket and max-live-parameter budgets (and
//    just in time when memwall.prefetch is false); parameters reused within stage3_max_reuse_distance
//    elements stay gathered;
//  - backward: the gradient of op i+1 is reduce-scattered while op i computes, and offloaded (to CPU,
//    then NVMe) as soon as it is reduced;
//  - the optimizer steps sub-group by sub-group, NVMe read of the next / CPU Adam / NVMe write of the
//    previous sub-group pipelined by pipeline_read/pipeline_write, then the updated 16-bit shard goes back
//    to where parameters live;
//  - activation checkpoints every ci blocks, optionally offloaded to CPU and brought back before their
//    segment is recomputed.
// If the schedule's memory peak exceeds a tier, the planner shrinks the prefetch budget and tries again
// (unless the GPU's persistent buffers alone exceed it); if it still does not fit, it fails with
// kOutOfMemory naming the tier and the shortfall.
#pragma once

#include "base/status.h"
#include "graph/model_graph.h"
#include "plan/schedule.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

// `run` must be resolved (resolve_run_config) against `model` and `hw`.
Result<Schedule> plan_iteration(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw);

// The model graph's options plan_iteration uses for `run` (micro-batch, sequence, tiling, model parallelism,
// element bytes): a schedule's Task::op indexes build_model_graph(model, graph_options(run)).ops.
GraphOptions graph_options(const RunConfig& run);

// The same on a prebuilt graph, without the capacity check and budget shrinking (for tests and tools).
Schedule plan_graph(const ModelGraph& graph, const RunConfig& run, const HardwareSpec& hw);

}  // namespace memwall
