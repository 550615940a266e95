// Where an iteration's time went, from a schedule and its task timings (any executor).
//
// Forward/backward part (until the first optimizer task): time with compute running; time without compute
// while a collective or PCIe copy runs (exposed communication); time without compute while only NVMe I/O
// runs (I/O stall); the rest is idle (waiting on dependencies). Then the optimizer phase, first optimizer
// task start to the end. Per resource: bytes moved, time busy (union of its tasks) and achieved bandwidth.
// Overlap: how long any transfer ran and how much of that time work (compute, the CPU optimizer) ran too.
#pragma once

#include <utility>
#include <vector>

#include "exec/executor.h"
#include "plan/schedule.h"

namespace memwall {

struct RunBreakdown {
  double iteration_s = 0;
  double compute_s = 0;
  double exposed_comm_s = 0;
  double io_stall_s = 0;
  double idle_s = 0;
  double optimizer_s = 0;
  double bytes[kResourceCount] = {};
  double busy_s[kResourceCount] = {};
  // Data movement (h2d, d2h, NVMe reads and writes, network) against work (compute, the CPU optimizer) over
  // the whole iteration: the time any transfer was running, and for how much of it work ran too.
  double transfer_s = 0, transfer_overlapped_s = 0;
  double achieved_Bps(Resource r) const {
    const int i = static_cast<int>(r);
    return busy_s[i] > 0 ? bytes[i] / busy_s[i] : 0;
  }
};

RunBreakdown analyze_run(const Schedule& s, const RunResult& run);

using Interval = std::pair<double, double>;  // [start, end) in seconds
// The union of intervals as sorted disjoint intervals, and its length.
std::vector<Interval> interval_union(std::vector<Interval> v);
double total_length(const std::vector<Interval>& disjoint);
// The length of the intersection of two sets of sorted disjoint intervals.
double overlap_length(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace memwall
