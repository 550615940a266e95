// HardwareSpec: the machine memwall predicts for, simulates or trains on. One node type, `nodes` of them.
//
// Every rate is per direction. Capacities are bytes, bandwidths bytes/s, compute FLOP/s, latency s.
// Loaded from scenarios/hardware/*.json by load_hardware() (spec_loader.h); docs/hardware-format.md
// lists every key. Plain data: copy freely, no thread-safety concerns.
#pragma once

#include <string>
#include <vector>

namespace memwall {

struct GpuSpec {
  std::string model;            // e.g. "Tesla V100-SXM3-32GB"
  int count = 0;                // GPUs per node
  double memory_bytes = 0;      // HBM capacity per GPU
  double reserved_bytes = 0;    // per GPU, not usable for training: CUDA context, library workspaces, NCCL
  double peak_flops = 0;        // dense 16-bit tensor-core peak per GPU
  double achievable_flops = 0;  // sustained per GPU on large transformer GEMMs (the paper's peak_tp)
  double hbm_Bps = 0;           // HBM bandwidth per GPU
  // The device computes on this node's CPU cores (memwall's host-emulated device): host-side work —
  // copies, NVMe I/O, the CPU optimizer — then competes with compute for cores (the simulator models it).
  bool shares_host_cpu = false;
};

struct CpuSpec {
  std::string model;
  int sockets = 1;            // per node
  int cores = 1;              // physical cores per node
  double memory_bytes = 0;    // DRAM per node
  double reserved_bytes = 0;  // per node, not usable by memwall: OS, page cache, framework
  double memory_Bps = 0;      // sustained DRAM bandwidth per node
};

struct NvmeSpec {
  int drives = 0;  // per node; 0 means no NVMe tier
  double drive_capacity_bytes = 0;
  double drive_read_Bps = 0;   // sequential read per drive
  double drive_write_Bps = 0;  // sequential write per drive
  // Reads and writes at once, both directions together, per drive; 0 = the larger of the two rates.
  double drive_readwrite_Bps = 0;
  double latency_s = 0;
  // CPU seconds the host spends per byte read or written (request submission, checksums, staging copies);
  // 0 = not modelled. Matters where the device shares the host's cores (gpu.shares_host_cpu).
  double host_cpu_s_per_byte = 0;

  double capacity_bytes() const { return drives * drive_capacity_bytes; }  // per node
  double read_Bps() const { return drives * drive_read_Bps; }              // per node, all drives
  double write_Bps() const { return drives * drive_write_Bps; }            // per node, all drives
  double readwrite_Bps() const {                                           // per node, all drives
    return drives * (drive_readwrite_Bps > 0
                         ? drive_readwrite_Bps
                         : (drive_read_Bps > drive_write_Bps ? drive_read_Bps : drive_write_Bps));
  }
};

// One level of the PCIe tree between the GPUs and the CPU root complex: `gpus_per_switch` GPUs share
// one switch whose uplink toward the CPU carries `uplink_Bps`. Levels are listed from the GPU upward.
struct PcieSwitchLevel {
  int gpus_per_switch = 1;
  double uplink_Bps = 0;
};

struct PcieSpec {
  double gpu_link_Bps = 0;  // one GPU's own link (achievable DMA rate, not the signalling rate)
  double latency_s = 0;
  std::vector<PcieSwitchLevel> switches;
};

struct NvlinkSpec {
  double gpu_Bps = 0;  // per GPU into the NVLink/NVSwitch fabric; 0 = GPUs talk over PCIe
  double latency_s = 0;
};

struct NetworkSpec {
  int nics = 0;        // per node
  double nic_Bps = 0;  // per NIC
  double latency_s = 0;
  double node_Bps() const { return nics * nic_Bps; }
};

struct HardwareSpec {
  std::string name;
  std::string description;
  std::vector<std::string> sources;  // where the numbers come from
  int nodes = 1;
  GpuSpec gpu;
  CpuSpec cpu;
  NvmeSpec nvme;
  PcieSpec pcie;
  NvlinkSpec nvlink;
  NetworkSpec network;

  int total_gpus() const { return nodes * gpu.count; }
  bool has_nvme() const { return nvme.drives > 0 && nvme.drive_capacity_bytes > 0; }
};

}  // namespace memwall
