// Sweep over task intervals to split an iteration's time by what was running.
#include "exec/run_analysis.h"

#include <algorithm>

namespace memwall {

std::vector<Interval> interval_union(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

double total_length(const std::vector<Interval>& disjoint) {
  double total = 0;
  for (const Interval& iv : disjoint) total += iv.second - iv.first;
  return total;
}

double overlap_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    total += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

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
  std::vector<std::vector<Interval>> per_resource(kResourceCount);
  std::vector<Interval> transfers, work;
  for (const Task& t : s.tasks) {
    if (t.resource == Resource::kNone) continue;
    const Completion& c = run.timing[t.id];
    if (t.kind == TaskKind::kOptimizerStep) opt_start = std::min(opt_start, c.start_s);
    const int r = static_cast<int>(t.resource);
    if (t.kind != TaskKind::kCompute && t.kind != TaskKind::kOptimizerStep) b.bytes[r] += t.bytes;
    per_resource[r].push_back({c.start_s, c.end_s});
    const bool is_work = t.resource == Resource::kCompute || t.resource == Resource::kCpuOptimizer;
    (is_work ? work : transfers).push_back({c.start_s, c.end_s});
    if (t.phase == Phase::kOptimizer) continue;
    const int cls = t.kind == TaskKind::kCompute
                        ? 0
                        : (t.kind == TaskKind::kNvmeRead || t.kind == TaskKind::kNvmeWrite ? 2 : 1);
    edges.push_back({c.start_s, cls, +1});
    edges.push_back({c.end_s, cls, -1});
  }
  // The optimizer's share is what it adds after forward and backward: a step that overlaps them (delayed
  // parameter update) counts from where they end.
  double step_end = 0;
  for (const Task& t : s.tasks) {
    if (t.resource != Resource::kNone && t.phase != Phase::kOptimizer)
      step_end = std::max(step_end, run.timing[t.id].end_s);
  }
  opt_start = std::max(opt_start, std::min(step_end, run.makespan_s));
  for (int r = 0; r < kResourceCount; ++r)
    b.busy_s[r] = total_length(interval_union(std::move(per_resource[r])));
  const std::vector<Interval> moving = interval_union(std::move(transfers));
  b.transfer_s = total_length(moving);
  b.transfer_overlapped_s = overlap_length(moving, interval_union(std::move(work)));
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
