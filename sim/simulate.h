// memwall's SimGrid model: runs a Schedule on a SimGrid platform built from a HardwareSpec, with every rank
// of one node simulated at once so that they contend for the PCIe tree, CPU memory, NVMe drives, NVLink
// and NICs. No SimGrid type appears in this header (SimGrid calls live in sim/*.cpp only).
//
// Node symmetry: data-parallel ranks on other nodes run the same schedule, so only the first node's ranks
// are simulated; traffic to other nodes leaves through this node's NICs toward stand-in peer hosts, and the
// symmetric incoming traffic uses the other direction of the split-duplex links.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"
#include "plan/schedule.h"
#include "replay/joint.h"
#include "spec/hardware_spec.h"

namespace memwall::sim {

struct SimulateOptions {
  int iterations = 1;  // (gradient accumulation: simulate accumulated_schedule, one run per iteration)
  // Called from the simulation about once a second of wall time: (fraction of rank-0 tasks done,
  // simulated seconds so far).
  std::function<void(double, double)> progress;
  // Joint replay (replay/joint.h; one iteration): rank r of the node runs *rank_schedules[r] instead of the
  // schedule given, and each collective waits at `rendezvous`'s meeting point for the other ranks there.
  std::vector<const Schedule*> rank_schedules;
  const Rendezvous* rendezvous = nullptr;
};

struct SimulationResult {
  RunResult rank0;          // rank 0's task timings for the last iteration (times from its start)
  double iteration_s = 0;   // mean simulated iteration time over the iterations
  int simulated_ranks = 0;  // ranks simulated (one node's)
  double node_busy_s[kResourceCount] = {};  // per resource: time any rank of the node was using it
  std::uint64_t activities = 0;             // SimGrid activities created (execs, comms, I/Os)
  double wall_s = 0;                        // wall time of the simulation itself
  std::uint64_t peak_rss_bytes = 0;         // of the simulating process
  // Per simulated rank: the end of its last task, and the time its collectives were held back for other
  // ranks (collective_wait_s; joint replay).
  std::vector<double> rank_end_s, rank_collective_wait_s;
  std::vector<RunResult> other_ranks;  // joint replay: ranks 1, 2, ...'s task timings (without busy times)
};

// Runs the simulation in a child process (SimGrid allows one engine per process), so it can be called any
// number of times. Fails with the child's message if the simulation fails.
Result<SimulationResult> simulate_schedule(const Schedule& s, const HardwareSpec& hw,
                                           const SimulateOptions& opt);

// Duration a single uncontended task would take on the simulated platform, for tests.
std::string platform_summary(const HardwareSpec& hw, int ranks_per_node, bool multi_node);

}  // namespace memwall::sim
