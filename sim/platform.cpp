// Builds one node's SimGrid platform from a HardwareSpec (see platform.h).
#include "sim/platform.h"

#include <algorithm>
#include <string>

namespace memwall::sim {

namespace {
using Dir = sg4::LinkInRoute::Direction;
}  // namespace

Platform::Platform(const HardwareSpec& hw, int gpus) : hw_(hw) {
  auto* zone = sg4::create_full_zone("node0");
  const int n = std::max(1, std::min(gpus, hw.gpu.count));
  cpu_ = zone->create_host("cpu", 1);  // no Exec runs here: one end of host copies, the drives' host
  if (hw.has_nvme()) {
    nvme_ = cpu_->create_disk("nvme", hw.nvme.read_Bps(), hw.nvme.write_Bps());
    nvme_->set_readwrite_bandwidth(hw.nvme.readwrite_Bps());
    nvme_->seal();
  }
  // CPU memory as seen by DMA: one link shared by every transfer to or from host memory.
  auto* dram =
      zone->create_link("dram", hw.cpu.memory_Bps)->set_sharing_policy(sg4::Link::SharingPolicy::SHARED);
  dram->seal();
  memory_ = zone->create_host("cpu_memory", 1);
  zone->add_route(cpu_->get_netpoint(), memory_->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(dram)},
                  true);
  // PCIe tree: per-GPU links, then one uplink per switch at every level.
  std::vector<sg4::SplitDuplexLink*> pcie(n);
  for (int i = 0; i < n; ++i) {
    pcie[i] = zone->create_split_duplex_link("pcie" + std::to_string(i), hw.pcie.gpu_link_Bps);
    pcie[i]->set_latency(hw.pcie.latency_s);
    pcie[i]->seal();
  }
  std::vector<std::vector<sg4::SplitDuplexLink*>> uplinks(hw.pcie.switches.size());
  for (size_t l = 0; l < hw.pcie.switches.size(); ++l) {
    const auto& level = hw.pcie.switches[l];
    const int switches = (hw.gpu.count + level.gpus_per_switch - 1) / level.gpus_per_switch;
    for (int s = 0; s < switches; ++s) {
      auto* link = zone->create_split_duplex_link("sw" + std::to_string(l) + "_" + std::to_string(s),
                                                  level.uplink_Bps);
      link->seal();
      uplinks[l].push_back(link);
    }
  }
  // GPU-to-GPU: NVLink ports into a non-blocking switch (half the latency on each port), or PCIe.
  const bool nvlink = hw.nvlink.gpu_Bps > 0;
  std::vector<sg4::SplitDuplexLink*> nvl(n, nullptr);
  if (nvlink) {
    for (int i = 0; i < n; ++i) {
      nvl[i] = zone->create_split_duplex_link("nvlink" + std::to_string(i), hw.nvlink.gpu_Bps);
      nvl[i]->set_latency(hw.nvlink.latency_s / 2);
      nvl[i]->seal();
    }
  }
  // NICs: GPU i uses NIC i * nics / gpus (a NIC serves the GPUs beside it on the PCIe tree).
  std::vector<sg4::SplitDuplexLink*> nics;
  for (int k = 0; k < hw.network.nics; ++k) {
    auto* nic = zone->create_split_duplex_link("nic" + std::to_string(k), hw.network.nic_Bps);
    nic->set_latency(hw.network.latency_s);
    nic->seal();
    nics.push_back(nic);
  }
  for (int i = 0; i < n; ++i) {
    gpus_.push_back(zone->create_host("gpu" + std::to_string(i), hw.gpu.achievable_flops));
    peers_.push_back(zone->create_host("peer" + std::to_string(i), hw.gpu.achievable_flops));
  }
  for (int i = 0; i < n; ++i) {
    // GPU <-> CPU memory: own link, every switch level's uplink, DRAM.
    std::vector<sg4::LinkInRoute> up = {{pcie[i], Dir::UP}};
    std::vector<sg4::LinkInRoute> down = {{pcie[i], Dir::DOWN}};
    for (size_t l = 0; l < uplinks.size(); ++l) {
      auto* link = uplinks[l][i / hw.pcie.switches[l].gpus_per_switch];
      up.emplace_back(link, Dir::UP);
      down.emplace_back(link, Dir::DOWN);
    }
    up.emplace_back(dram);
    down.insert(down.begin(), sg4::LinkInRoute(dram));
    zone->add_route(gpus_[i]->get_netpoint(), cpu_->get_netpoint(), nullptr, nullptr, up, false);
    std::reverse(down.begin(), down.end());
    std::rotate(down.begin(), down.end() - 1, down.end());
    zone->add_route(cpu_->get_netpoint(), gpus_[i]->get_netpoint(), nullptr, nullptr, down, false);
    // GPU <-> GPU inside the node.
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      std::vector<sg4::LinkInRoute> r;
      if (nvlink) {
        r = {{nvl[i], Dir::UP}, {nvl[j], Dir::DOWN}};
      } else {
        r = {{pcie[i], Dir::UP}, {pcie[j], Dir::DOWN}};
      }
      zone->add_route(gpus_[i]->get_netpoint(), gpus_[j]->get_netpoint(), nullptr, nullptr, r, false);
    }
    // GPU -> the next node's peer through its NIC (GPUDirect RDMA: the GPU's own PCIe link, then the NIC).
    if (!nics.empty()) {
      auto* nic = nics[static_cast<size_t>(i) * nics.size() / n];
      zone->add_route(gpus_[i]->get_netpoint(), peers_[i]->get_netpoint(), nullptr, nullptr,
                      {{pcie[i], Dir::UP}, {nic, Dir::UP}}, false);
      zone->add_route(peers_[i]->get_netpoint(), gpus_[i]->get_netpoint(), nullptr, nullptr,
                      {{nic, Dir::DOWN}, {pcie[i], Dir::DOWN}}, false);
    }
  }
  zone->seal();
}

}  // namespace memwall::sim
