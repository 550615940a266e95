// Efficiency model (Eq. 6-11) and per-tier bandwidth under bandwidth-centric partitioning or broadcast.
#include "memory/bandwidth_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/units.h"
#include "memory/paper_equations.h"

namespace memwall {

namespace {

// Per-GPU bandwidth from host memory when `active` GPUs of one node read at once, and what limits it.
double host_path_limit(const HardwareSpec& hw, Tier tier, int active, std::string* bottleneck) {
  active = std::clamp(active, 1, hw.gpu.count);
  double bw = hw.pcie.gpu_link_Bps;
  std::string why = "GPU PCIe link";
  for (size_t i = 0; i < hw.pcie.switches.size(); ++i) {
    const auto& level = hw.pcie.switches[i];
    const int sharing = std::min(level.gpus_per_switch, active);
    const double share = level.uplink_Bps / sharing;
    if (share < bw) {
      bw = share;
      why = strprintf("PCIe switch level %zu uplink shared by %d GPUs", i + 1, sharing);
    }
  }
  const double dram = hw.cpu.memory_Bps / active;
  if (dram < bw) {
    bw = dram;
    why = strprintf("CPU memory bandwidth shared by %d GPUs", active);
  }
  if (tier == Tier::kNvme) {
    const double nvme = hw.nvme.read_Bps() / active;
    if (nvme < bw) {
      bw = nvme;
      why = strprintf("NVMe read bandwidth (%d drives) shared by %d GPUs", hw.nvme.drives, active);
    }
  }
  if (bottleneck) *bottleneck = why;
  return bw;
}

HostPathBandwidth host_path(const HardwareSpec& hw, Tier tier) {
  HostPathBandwidth h;
  h.single_gpu_Bps = host_path_limit(hw, tier, 1, nullptr);
  h.parallel_per_gpu_Bps = host_path_limit(hw, tier, hw.gpu.count, &h.bottleneck);
  return h;
}

// A GPU operator's roofline: its seconds at the achievable FLOP rate and at the memory bandwidth.
struct RooflineSides {
  double math, memory;
};
RooflineSides roofline_sides(const HardwareSpec& hw, double flops, double mem_bytes) {
  return {hw.gpu.achievable_flops > 0 ? flops / hw.gpu.achievable_flops : 0,
          hw.gpu.hbm_Bps > 0 ? mem_bytes / hw.gpu.hbm_Bps : 0};
}
}  // namespace

double compute_seconds(const HardwareSpec& hw, double flops, double mem_bytes) {
  const RooflineSides s = roofline_sides(hw, flops, mem_bytes);
  return std::max(s.math, s.memory);
}

bool memory_bound(const HardwareSpec& hw, double flops, double mem_bytes) {
  const RooflineSides s = roofline_sides(hw, flops, mem_bytes);
  return s.memory > s.math;
}

double roofline_flops_for(const std::vector<std::pair<double, double>>& ops, double hbm_Bps, double seconds) {
  double flops = 0, memory_s = 0;
  for (const auto& [f, m] : ops) {
    flops += f;
    memory_s += hbm_Bps > 0 ? m / hbm_Bps : 0;
  }
  if (flops <= 0 || seconds <= 0 || memory_s >= seconds) return 0;
  auto total = [&](double rate) {  // decreasing in rate
    double s = 0;
    for (const auto& [f, m] : ops) s += std::max(f / rate, hbm_Bps > 0 ? m / hbm_Bps : 0);
    return s;
  };
  double lo = flops / seconds, hi = lo;  // total(lo) >= seconds
  for (int i = 0; i < 2000 && total(hi) > seconds; ++i) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (total(mid) > seconds ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double host_path_Bps(const HardwareSpec& hw, Tier tier, int active) {
  return host_path_limit(hw, tier, active, nullptr);
}

HostPathBandwidth cpu_to_gpu_bandwidth(const HardwareSpec& hw) {
  return host_path(hw, Tier::kCpu);
}
HostPathBandwidth nvme_to_gpu_bandwidth(const HardwareSpec& hw) {
  return host_path(hw, Tier::kNvme);
}

GroupSpan group_span(const HardwareSpec& hw, int ranks, int nodes) {
  const int gpus = std::max(1, hw.gpu.count);
  ranks = std::max(1, ranks);
  GroupSpan g;
  g.nodes = std::max(1, nodes > 0 ? std::min(nodes, ranks) : (ranks + gpus - 1) / gpus);
  g.per_node = std::min((ranks + g.nodes - 1) / g.nodes, gpus);
  return g;
}

double alltoall_seconds(const HardwareSpec& hw, double bytes, int ranks, int nodes) {
  if (ranks <= 1) return 0;
  const GroupSpan span = group_span(hw, ranks, nodes);
  const double link = hw.nvlink.gpu_Bps > 0 ? hw.nvlink.gpu_Bps : hw.pcie.gpu_link_Bps;
  double t = bytes * (span.per_node - 1) / ranks / link;
  if (span.nodes > 1) {
    const double nic = hw.network.node_Bps() / std::max(1, hw.gpu.count);
    t = std::max(t, bytes * (span.nodes - 1) / span.nodes / nic);
    return hw.network.latency_s + t;
  }
  return hw.nvlink.latency_s + t;
}

double allgather_Bps(const HardwareSpec& hw, int ranks, int nodes) {
  if (ranks <= 1) return hw.gpu.hbm_Bps;
  const GroupSpan span = group_span(hw, ranks, nodes);
  const int spans = span.nodes, n = span.per_node;
  const double link = hw.nvlink.gpu_Bps > 0 ? hw.nvlink.gpu_Bps : hw.pcie.gpu_link_Bps;
  double bw = n > 1 ? link * n / (n - 1) : hw.gpu.hbm_Bps;  // ring: busbw = algbw x (n-1)/n
  if (spans > 1) {
    // Hierarchical: each node takes in (nodes-1)/nodes of the tensor once through its NICs, of which the
    // group has its GPUs' share.
    const double share = static_cast<double>(n) / std::max(n, hw.gpu.count);
    bw = std::min(bw, hw.network.node_Bps() * share * spans / (spans - 1));
  }
  return bw;
}

double param_tier_bandwidth(const HardwareSpec& hw, Tier tier, int dp, Partitioning partitioning) {
  const double gather = allgather_Bps(hw, dp);
  if (tier == Tier::kGpu) return gather;
  if (partitioning == Partitioning::kBroadcast)
    return std::min(host_path_limit(hw, tier, 1, nullptr), gather);
  const int active = std::min(dp, hw.gpu.count);
  return std::min(dp * host_path_Bps(hw, tier, active), gather);
}

const char* data_type_name(DataType d) {
  switch (d) {
    case DataType::kParamsGrads:
      return "params_grads";
    case DataType::kOptimizerStates:
      return "optimizer_states";
    case DataType::kActivationCheckpoints:
      return "activation_checkpoints";
  }
  return "unknown";
}

BandwidthReport analyze_bandwidth(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw,
                                  double target_efficiency) {
  BandwidthReport r;
  r.peak_flops = hw.gpu.achievable_flops;
  r.target_efficiency = target_efficiency;
  const ZeroConfig& z = run.zero;
  const int dp = std::max(1, run.memwall.data_parallel);
  const int mp = run.memwall.model_parallel;
  const int pp = run.memwall.pipeline_parallel;
  const int per_node = std::min(hw.gpu.count, dp * mp * pp);
  const double bsz = run.micro_batch_per_gpu.value;
  const double seq = run.memwall.sequence_length;
  const auto& ac = run.activation_checkpointing;
  const double passes = ac.enabled ? 4.0 : 3.0;  // forward, backward (2x), recomputation
  // Each token's FLOPs: 2 per parameter it uses (a mixture of experts' active ones) per pass.
  r.flops_per_iteration = 2.0 * passes * bsz * seq * model.active_params() / (mp * pp);

  const char* part = run.memwall.partitioning == Partitioning::kBroadcast ? "broadcast" : "bandwidth-centric";

  // Parameters and gradients (Eq. 9).
  {
    DataTypeBandwidth row;
    row.data_type = DataType::kParamsGrads;
    row.ait = paper::eq9_ait_params_grads(seq, bsz);
    if (z.stage == 3) {
      row.location = tier_of(z.offload_param.device);
      row.moves = dp > 1 || row.location != Tier::kGpu;
      row.available_Bps = param_tier_bandwidth(hw, row.location, dp, run.memwall.partitioning);
      row.rule = row.location == Tier::kGpu
                     ? strprintf("all-gather over %d GPUs", dp)
                     : strprintf("%s from %s: %s", part, tier_name(row.location),
                                 run.memwall.partitioning == Partitioning::kBroadcast
                                     ? "min(one GPU's host path, all-gather)"
                                     : strprintf("min(dp %d x per-GPU host path, all-gather)", dp).c_str());
    } else {
      row.location = Tier::kGpu;
      row.moves = dp > 1;  // params stay resident; gradients are reduced across data-parallel ranks
      row.available_Bps = allgather_Bps(hw, dp);
      row.rule =
          dp > 1 ? strprintf("gradient reduction over %d GPUs; params resident", dp) : "resident on the GPU";
    }
    r.rows.push_back(row);
  }
  // Optimizer states (Eq. 10): every rank updates its own shard in parallel.
  {
    DataTypeBandwidth row;
    row.data_type = DataType::kOptimizerStates;
    row.overlappable = false;
    // One optimizer step per iteration of G accumulated micro-batches: G times the compute per state moved.
    const double gas = run.accumulation_steps();
    row.ait = paper::eq10_ait_optimizer(seq, bsz * gas);
    row.location = tier_of(z.offload_optimizer.device);
    const int sharing = z.stage >= 1 ? dp : 1;
    double per_rank = 0;
    std::string what, grads_note;
    switch (row.location) {
      case Tier::kGpu:
        per_rank = hw.gpu.hbm_Bps;
        what = "GPU memory bandwidth";
        break;
      case Tier::kCpu:
        per_rank = hw.cpu.memory_Bps / per_node;
        what = strprintf("CPU memory bandwidth / %d ranks per node", per_node);
        break;
      case Tier::kNvme: {
        // Eq. (10) counts one read and one write of every state: harmonic mean of read and write rates.
        const double rw = 2.0 / (1.0 / hw.nvme.read_Bps() + 1.0 / hw.nvme.write_Bps());
        per_rank = rw / per_node;
        what = strprintf("NVMe read/write (harmonic mean) / %d ranks per node", per_node);
        // Eq. (10)'s 32 bytes per parameter are 16 read and 16 written (fp32 parameter, momentum, variance,
        // gradient); gradients kept in CPU memory (memwall.optimizer_gradients) leave 24 through NVMe, so
        // each byte moved carries 32/24 as much compute.
        if (estimate_memory(model, run, hw).optimizer_gradients == Tier::kCpu) {
          row.ait *= 32.0 / 24.0;
          grads_note = "; fp32 gradients in CPU memory: 24 of Eq. 10's 32 B/param through NVMe";
        }
        break;
      }
    }
    // Twin-Flow: the GPU steps its sub-groups, then the CPU the others, one after the other.
    const double shard = model.total_params() / (mp * std::max(1, run.memwall.pipeline_parallel) * sharing);
    const TwinFlowSplit twin = twin_flow_split(run, shard);
    if (twin.gpu_elements > 0) {
      const double f = twin.gpu_elements / shard;
      per_rank = 1.0 / (f / hw.gpu.hbm_Bps + (1 - f) / per_rank);
      what += strprintf(" (Twin-Flow: %d of %d sub-groups at the GPU's memory bandwidth)", twin.gpu_groups,
                        twin.groups);
    }
    row.available_Bps = per_rank * sharing;
    row.rule =
        sharing > 1 ? strprintf("%s x %d partitions updated in parallel", what.c_str(), sharing) : what;
    row.rule += grads_note;
    if (gas > 1) row.rule += strprintf("; once per %.0f accumulated micro-batches", gas);
    r.rows.push_back(row);
  }
  // Activation checkpoints (Eq. 11): each GPU moves its own.
  {
    DataTypeBandwidth row;
    row.data_type = DataType::kActivationCheckpoints;
    row.ait = paper::eq11_ait_checkpoints(model.hidden, ac.interval);
    row.location = ac.cpu_checkpointing && ac.enabled ? Tier::kCpu : Tier::kGpu;
    row.moves = ac.enabled && ac.cpu_checkpointing;
    row.available_Bps = row.moves ? host_path_Bps(hw, Tier::kCpu, per_node) : hw.gpu.hbm_Bps;
    row.rule = !ac.enabled ? "no checkpointing: activations stay on the GPU"
                           : (row.moves ? strprintf("per-GPU CPU path with %d GPUs active", per_node)
                                        : "checkpoints stay on the GPU");
    r.rows.push_back(row);
  }
  double stall = 0;
  for (auto& row : r.rows) {
    row.overlap_Bps = r.peak_flops / row.ait;
    row.target_Bps = paper::eq6_bandwidth_for(row.ait, target_efficiency, r.peak_flops);
    row.efficiency = row.moves ? paper::eq6_efficiency(row.ait, row.available_Bps, r.peak_flops) : 1.0;
    if (row.moves) stall += r.peak_flops / (row.ait * row.available_Bps);
  }
  r.combined_efficiency = 1.0 / (1.0 + stall);
  return r;
}

}  // namespace memwall
