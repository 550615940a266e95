// Sweep over task intervals to split an iteration's time by what was running.
#include "exec/run_analysis.h"

#include <algorithm>

namespace memwall {

RunBreakdown analyze_run(const Schedule& s, const RunResult& run) {
  RunBreakdown b;
  b.iteration_s = run.makespan_s;
  double opt_start = run.makespan_s;
  struct Edge {
    double t;
    int cls;    // 0 compute, 1 communication (collective, PCIe copy), 2 NVMe
    int delta;  // +1 start, -1 end
  };
  std::vector<Edge> edges;
  std::vector<std::vector<std::pair<double, double>>> per_resource(kResourceCount);
  for (const Task& t : s.tasks) {
    if (t.resource == Resource::kNone) continue;
    const Completion& c = run.timing[t.id];
    if (t.kind == TaskKind::kOptimizerStep) opt_start = std::min(opt_start, c.start_s);
    const int r = static_cast<int>(t.resource);
    if (t.kind != TaskKind::kCompute && t.kind != TaskKind::kOptimizerStep) b.bytes[r] += t.bytes;
    per_resource[r].push_back({c.start_s, c.end_s});
    if (t.phase == Phase::kOptimizer) continue;
    const int cls = t.kind == TaskKind::kCompute
                        ? 0
                        : (t.kind == TaskKind::kNvmeRead || t.kind == TaskKind::kNvmeWrite ? 2 : 1);
    edges.push_back({c.start_s, cls, +1});
    edges.push_back({c.end_s, cls, -1});
  }
  for (int r = 0; r < kResourceCount; ++r) {
    auto& v = per_resource[r];
    std::sort(v.begin(), v.end());
    double end = -1;
    for (const auto& [a, z] : v) {
      if (a >= end) {
        b.busy_s[r] += z - a;
        end = z;
      } else if (z > end) {
        b.busy_s[r] += z - end;
        end = z;
      }
    }
  }
  std::sort(edges.begin(), edges.end(),
            [](const Edge& x, const Edge& y) { return x.t < y.t || (x.t == y.t && x.delta < y.delta); });
  int active[3] = {0, 0, 0};
  double last = 0;
  for (const Edge& e : edges) {
    const double t = std::min(e.t, opt_start);
    const double span = std::max(0.0, t - last);
    if (active[0] > 0)
      b.compute_s += span;
    else if (active[1] > 0)
      b.exposed_comm_s += span;
    else if (active[2] > 0)
      b.io_stall_s += span;
    else
      b.idle_s += span;
    last = std::max(last, t);
    active[e.cls] += e.delta;
  }
  b.idle_s += std::max(0.0, opt_start - last);
  b.optimizer_s = std::max(0.0, run.makespan_s - opt_start);
  return b;
}

}  // namespace memwall
