// Schedule + timings -> trace events.
#include "exec/trace_export.h"

#include <algorithm>
#include <set>

namespace memwall {

namespace {
// A task's dependencies with alloc/free bookkeeping (not in the trace) replaced by what they waited for.
const std::vector<int>& traced_deps(const Schedule& s, int t, std::vector<std::vector<int>>& memo,
                                    std::vector<char>& done) {
  if (done[t]) return memo[t];
  std::set<int> out;
  for (int d : s.tasks[t].deps) {
    if (s.tasks[d].resource != Resource::kNone) {
      out.insert(d);
    } else {
      const auto& inner = traced_deps(s, d, memo, done);
      out.insert(inner.begin(), inner.end());
    }
  }
  memo[t].assign(out.begin(), out.end());
  done[t] = 1;
  return memo[t];
}
}  // namespace

void export_run_trace(const Schedule& s, const RunResult& run, int pid, trace::TraceWriter& w) {
  std::vector<std::vector<int>> memo(s.tasks.size());
  std::vector<char> done(s.tasks.size(), 0);
  w.process_name(pid, "rank " + std::to_string(pid));
  for (int r = 0; r < kResourceCount; ++r) {
    if (static_cast<Resource>(r) != Resource::kNone)
      w.thread_name(pid, r + 1, resource_name(static_cast<Resource>(r)));
  }
  // Further lanes of a resource (a replayed trace's streams): tracks of their own, "compute 1", ...
  std::set<std::pair<int, int>> lanes;
  for (const Task& t : s.tasks) {
    if (t.resource != Resource::kNone && t.lane > 0) lanes.insert({static_cast<int>(t.resource), t.lane});
  }
  for (const auto& [r, lane] : lanes) {
    w.thread_name(pid, track_of(static_cast<Resource>(r), lane),
                  std::string(resource_name(static_cast<Resource>(r))) + " " + std::to_string(lane));
  }
  for (const Task& t : s.tasks) {
    if (t.resource == Resource::kNone) continue;
    const Completion& c = run.timing[t.id];
    trace::TraceSpan sp;
    sp.pid = pid;
    sp.tid = track_of(t.resource, t.lane);
    sp.name = t.name;
    sp.category = task_kind_name(t.kind);
    sp.ts_us = c.start_s * 1e6;
    sp.dur_us = (c.end_s - c.start_s) * 1e6;
    sp.task = t.id;
    sp.phase = phase_name(t.phase);
    sp.bytes = t.bytes;
    sp.flops = t.flops;
    sp.deps = traced_deps(s, t.id, memo, done);
    if (t.kind == TaskKind::kCollective) {
      sp.collective = collective_name(t.collective);
      sp.group = t.group;
    }
    w.span(sp);
    // Link bandwidth while the transfer runs (one task per resource lane at a time in a schedule run).
    if (t.bytes > 0 && sp.dur_us > 0 && t.kind != TaskKind::kOptimizerStep && t.kind != TaskKind::kCompute) {
      const std::string name = std::string("bandwidth ") + resource_name(t.resource) +
                               (t.lane > 0 ? " " + std::to_string(t.lane) : std::string());
      w.counter({pid, name, sp.ts_us, {{"Bps", t.bytes / (c.end_s - c.start_s)}}});
      w.counter({pid, name, sp.ts_us + sp.dur_us, {{"Bps", 0}}});
    }
  }
  // Memory per tier by category, in time order of the alloc/free tasks.
  std::vector<int> events;
  std::set<int> cats[kTierCount];
  for (const Task& t : s.tasks) {
    if ((t.kind == TaskKind::kAlloc || t.kind == TaskKind::kFree) && s.buffers[t.buffer].pool < 0) {
      events.push_back(t.id);
      const Buffer& b = s.buffers[t.buffer];
      cats[static_cast<int>(b.tier)].insert(static_cast<int>(b.category));
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [&](int a, int b) { return run.timing[a].end_s < run.timing[b].end_s; });
  constexpr int kCategories = static_cast<int>(MemCategory::kRuntimeReserved) + 1;
  std::vector<std::vector<double>> now(kTierCount, std::vector<double>(kCategories, 0));
  for (size_t i = 0; i < events.size(); ++i) {
    const Task& t = s.tasks[events[i]];
    const Buffer& b = s.buffers[t.buffer];
    const int tier = static_cast<int>(b.tier);
    now[tier][static_cast<int>(b.category)] += t.kind == TaskKind::kAlloc ? b.bytes : -b.bytes;
    const double ts = run.timing[t.id].end_s * 1e6;
    // One sample per tier per timestamp: emit when the next event is later or on another tier.
    const bool last_here = i + 1 == events.size() || run.timing[events[i + 1]].end_s * 1e6 != ts ||
                           s.buffers[s.tasks[events[i + 1]].buffer].tier != b.tier;
    if (!last_here) continue;
    trace::CounterSample c{pid, std::string("memory ") + tier_name(b.tier), ts, {}};
    for (int cat : cats[tier])
      c.values.emplace_back(category_name(static_cast<MemCategory>(cat)), now[tier][cat]);
    w.counter(c);
  }
}

}  // namespace memwall
