// Internal to sim/: the SimGrid platform of one node built from a HardwareSpec.
//
// Per node: one host per GPU (speed = achievable FLOP/s); a CPU host; one disk on the CPU host for the
// node's NVMe drives (aggregate rates, read and write sharing one device limit); split-duplex links: each
// GPU's PCIe link, every PCIe switch level's uplink, each GPU's NVLink port into a non-blocking NVSwitch (no
// shared switch link), each NIC; a shared link for CPU memory, crossed by every DMA to or from host memory,
// by the CPU optimizer step's state traffic and by NVMe transfers (which land in or leave host memory).
// Peer hosts stand for the next node of an inter-node ring. Network model CM02 without cross-traffic or TCP
// window, so uncontended transfers take bytes/bandwidth + latency.
#pragma once

#include <simgrid/s4u.hpp>

#include <vector>

#include "spec/hardware_spec.h"

namespace memwall::sim {

namespace sg4 = simgrid::s4u;

class Platform {
 public:
  // Creates the zone, hosts, links and routes in the current Engine. `gpus` GPUs of the node are used.
  Platform(const HardwareSpec& hw, int gpus);

  sg4::Host* gpu(int i) const { return gpus_.at(i); }
  sg4::Host* cpu() const { return cpu_; }
  // The far end of the CPU's own memory traffic: the route cpu() -> memory() is the DRAM link alone, so a
  // transfer between them is DRAM traffic (the CPU optimizer's state, NVMe DMA into host memory) that
  // shares the DRAM link with every GPU's DMA to and from host memory.
  sg4::Host* memory() const { return memory_; }
  sg4::Host* peer(int i) const { return peers_.at(i); }
  sg4::Disk* nvme() const { return nvme_; }
  const HardwareSpec& hardware() const { return hw_; }

 private:
  const HardwareSpec& hw_;
  std::vector<sg4::Host*> gpus_;
  std::vector<sg4::Host*> peers_;
  sg4::Host* cpu_ = nullptr;
  sg4::Host* memory_ = nullptr;
  sg4::Disk* nvme_ = nullptr;
};

}  // namespace memwall::sim
