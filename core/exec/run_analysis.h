// Where an iteration's time went, from a schedule and its task timings (any executor).
//
// Forward/backward part (until the first optimizer task): time with compute running; time without compute
// while a collective or PCIe copy runs (exposed communication); time without compute while only NVMe I/O
// runs (I/O stall); the rest is idle (waiting on dependencies). Then the optimizer phase, first optimizer
// task start to the end. Per resource: bytes moved, time busy (union of its tasks) and achieved bandwidth.
#pragma once

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
  double achieved_Bps(Resource r) const {
    const int i = static_cast<int>(r);
    return busy_s[i] > 0 ? bytes[i] / busy_s[i] : 0;
  }
};

RunBreakdown analyze_run(const Schedule& s, const RunResult& run);

}  // namespace memwall
