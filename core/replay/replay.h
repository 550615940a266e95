// Replay: a measured trace turned back into a task graph that the simulator can run on other hardware.
//
// import_memwall_trace reads a memwall trace (format 1.1+, e.g. from `memwall train --trace`): one rank's
// tasks with their kinds, resources, bytes, FLOPs and dependencies, and per task the median measured duration
// over the chosen steps (a task id recurs once per step). Compute and optimizer tasks keep their measured
// durations (scaled by what-ifs); copies, NVMe I/O and collectives are re-simulated from their bytes.
//
// What-ifs change the hardware or the graph: pcie=X, nvme=X, network=X, cpu_memory=X (bandwidths times X),
// compute=X (GPU compute X times faster; measured host CPU work and communication kept as they are),
// gpu=SPEC (another GPU: GPU compute scaled by the achievable FLOP/s ratio),
// nodes=N (data-parallel weak scaling: N nodes of the same ranks per node).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/schedule.h"
#include "spec/hardware_spec.h"
#include "trace/trace.h"

namespace memwall {

struct ReplayGraph {
  Schedule schedule;  // the rank's tasks (ids compacted, dependencies kept), measured durations set
  int pid = 0;
  int steps_total = 0;                  // steps found in the trace
  int first_step = 0, last_step = 0;    // the steps used, [first, last)
  std::vector<double> measured_step_s;  // per step used: first start to last end
  double measured_iteration_s = 0;      // their mean
  int ranks = 1;
  std::size_t skipped_spans = 0;  // spans without a task id (not from a schedule)
  // Measured memory over the first step used, from the trace's memory events (Kineto `[memory]`): counter
  // samples "memory gpu" / "memory cpu" with the allocated and reserved bytes, times from the step's start.
  std::vector<trace::CounterSample> memory;
  double peak_allocated[2] = {0, 0};  // gpu, cpu, over the steps used
  // Collectives of a process group other than the world's: task id -> the group's ranks (sorted). place_ranks
  // turns them into the nodes each group spans on the hardware.
  std::map<int, std::vector<int>> group_ranks;
};

// For importers: sets g.first_step/last_step to steps [first, last) of g.steps_total (last < 0: to the end),
// or fails naming the range the trace has; after measured_step_s is filled, measured_iteration_s is its mean.
Status choose_steps(ReplayGraph& g, int first, int last);
void set_measured_iteration(ReplayGraph& g);

// For importers: each task's lane from `stream[task id]` (the CUDA stream or CPU thread it was measured on):
// one lane per stream of each resource, numbered by load, so that lane 0 is the resource's main stream (the
// most measured time, then the most tasks, then the first to appear).
void assign_lanes(Schedule& s, const std::vector<double>& stream);

// `first`, `last`: steps [first, last) (0-based; last < 0: to the end).
Result<ReplayGraph> import_memwall_trace(const trace::TraceData& d, int pid, int first, int last);

struct WhatIf {
  std::string key;
  std::string value;
};
// Parses "key=value" (errors name the text and the allowed keys).
Result<WhatIf> parse_what_if(const std::string& text);
// What-ifs on the hardware alone, for a run planned and timed on it (memwall simulate): pcie, nvme, network,
// cpu_memory, gpu_memory multiply those bandwidths (nvme its read, write and combined rates); compute
// multiplies the GPU's FLOP/s; gpu takes `gpu_spec`'s GPU (the count kept); nodes sets the node count.
Status apply_hardware_what_ifs(const std::vector<WhatIf>& what_ifs, const HardwareSpec* gpu_spec,
                               HardwareSpec& hw);
// Applies what-ifs to the hardware and to the graph's measured durations and rank count: compute and gpu
// scale measured GPU compute whole and change the hardware's GPU for what is timed from FLOPs and bytes;
// the bandwidth keys change the hardware only. `gpu` takes a hardware spec already loaded by the caller
// (core reads no files).
Status apply_what_ifs(const std::vector<WhatIf>& what_ifs, const HardwareSpec* gpu_spec, HardwareSpec& hw,
                      ReplayGraph& g);
// Sets the rank layout of the graph's schedule for this hardware (ranks per node, data parallel degree).
void place_ranks(const HardwareSpec& hw, ReplayGraph& g);

}  // namespace memwall
