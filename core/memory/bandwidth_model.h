// Bandwidth model: the paper's efficiency model (Eq. 6-11) both ways, and the bandwidth each memory tier
// actually offers a GPU, under bandwidth-centric partitioning (every rank reads its 1/dp share over its
// own PCIe path, then an all-gather over GPU links) versus broadcast from one owner (one PCIe path).
//
// All bandwidths are bytes/s per GPU, per direction. Pure functions; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "memory/memory_model.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

// What one GPU gets from a host-side tier (CPU memory or NVMe).
struct HostPathBandwidth {
  double single_gpu_Bps = 0;        // one GPU alone reading
  double parallel_per_gpu_Bps = 0;  // each GPU's share when all GPUs of the node read at once
  std::string bottleneck;           // what limits parallel_per_gpu_Bps ("pcie switch uplink / 4 GPUs", ...)
};

// Seconds a GPU operator takes by the roofline: its FLOPs at `gpu.achievable_flops` (the rate of large
// transformer GEMMs) or the device memory it reads and writes at `gpu.hbm_Bps`, whichever is longer.
double compute_seconds(const HardwareSpec& hw, double flops, double mem_bytes);
// Whether the memory side of that roofline is the longer one.
bool memory_bound(const HardwareSpec& hw, double flops, double mem_bytes);

// The inverse for calibration: the achievable FLOP/s at which operators of {FLOPs, memory bytes}, each
// taking its roofline time with memory at `hbm_Bps`, add up to `seconds`. 0 where their memory time alone
// reaches `seconds` (the bandwidth understated, or the FLOPs explain nothing).
double roofline_flops_for(const std::vector<std::pair<double, double>>& ops, double hbm_Bps, double seconds);

// Per-GPU bandwidth from host memory (`tier` kCpu or kNvme) while `active` GPUs of the node read at once.
double host_path_Bps(const HardwareSpec& hw, Tier tier, int active);

// CPU memory -> GPU: min(GPU link, each PCIe switch level's uplink / GPUs below it, DRAM / GPUs per node).
HostPathBandwidth cpu_to_gpu_bandwidth(const HardwareSpec& hw);
// NVMe -> GPU: the CPU path further limited by the node's aggregate NVMe read rate.
HostPathBandwidth nvme_to_gpu_bandwidth(const HardwareSpec& hw);
// Algorithm bandwidth of an all-gather over `ranks` GPUs (ring inside a node, hierarchical across nodes):
// bytes of the gathered tensor per second at each GPU. The group spans `nodes` nodes with ranks/nodes GPUs
// on each (0: consecutive ranks, ceil(ranks / GPUs per node) nodes); where it has fewer GPUs on a node than
// the node has, the node's other GPUs are taken to be in groups of their own running alike (as data-parallel
// groups beside tensor parallelism are), so the group gets that share of the node's NICs.
double allgather_Bps(const HardwareSpec& hw, int ranks, int nodes = 0);

// Where a collective group of `ranks` GPUs runs (`nodes` as in allgather_Bps): the nodes it spans and its
// GPUs on each.
struct GroupSpan {
  int nodes = 1;
  int per_node = 1;
};
GroupSpan group_span(const HardwareSpec& hw, int ranks, int nodes);

// Seconds of an all-to-all of `bytes` per rank in a group of `ranks` GPUs (`nodes` as in allgather_Bps):
// one direct step (the link latency once); each rank sends 1/ranks of its buffer to each peer, those on its
// node through its own GPU link, those off it through its 1/GPUs share of the node's NICs (every GPU of the
// node exchanging alike), the slower of the two.
double alltoall_seconds(const HardwareSpec& hw, double bytes, int ranks, int nodes = 0);

// Effective bandwidth at which a GPU receives parameters (or sends gradients) that live on `tier`.
// Bandwidth-centric: min(dp x per-GPU parallel host bandwidth, all-gather bandwidth).
// Broadcast:         min(single-GPU host bandwidth, all-gather bandwidth).
double param_tier_bandwidth(const HardwareSpec& hw, Tier tier, int dp, Partitioning partitioning);

enum class DataType { kParamsGrads, kOptimizerStates, kActivationCheckpoints };
const char* data_type_name(DataType d);  // "params_grads", "optimizer_states", "activation_checkpoints"

struct DataTypeBandwidth {
  DataType data_type = DataType::kParamsGrads;
  Tier location = Tier::kGpu;  // where the data lives between uses
  bool moves = true;           // false when it never leaves the GPU between uses (no traffic to model)
  bool overlappable = true;    // params/grads and checkpoints can overlap compute; optimizer states cannot
  double ait = 0;              // FLOP per byte moved (Eq. 9-11)
  double available_Bps = 0;    // what the hardware offers this data type
  double overlap_Bps = 0;      // bandwidth at which transfers hide fully behind compute: peak / ait
  double target_Bps = 0;       // bandwidth for the target efficiency by Eq. (6)
  double efficiency = 1;       // Eq. (6) at available_Bps
  std::string rule;            // how available_Bps was derived
};

struct BandwidthReport {
  double peak_flops = 0;  // achievable FLOP/s per GPU (the paper's peak_tp)
  double target_efficiency = 0;
  std::vector<DataTypeBandwidth> rows;
  double combined_efficiency = 1;  // no overlap at all: 1 / (1 + sum peak / (ait_i bw_i))
  double flops_per_iteration = 0;  // per GPU, Eq. (7) with recomputation (2 x 3 without checkpointing)
};

// `run` resolved; `target_efficiency` in (0, 1).
BandwidthReport analyze_bandwidth(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw,
                                  double target_efficiency);

}  // namespace memwall
