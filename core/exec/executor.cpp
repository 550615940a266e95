// The reference executor and the schedule driver.
#include "exec/executor.h"

#include <algorithm>
#include <deque>
#include <map>
#include <queue>
#include <utility>

#include "exec/run_analysis.h"
#include "memory/bandwidth_model.h"

namespace memwall {

struct ReferenceExecutor::State {
  double now = 0;
  struct Running {
    int task = -1;
    double start = 0;
    double end =
        0;  // NVMe lanes: end at the present rates, recomputed as the other direction starts or stops
    double transfer_from = 0;  // NVMe: when the launch delay and latency are over and its bytes begin to move
    double bytes_left = 0;     // NVMe: bytes not yet moved at `nvme_updated`
  };
  // One per resource and lane, in that order (NVMe reads and writes: lane 0 alone).
  struct Lane {
    Running running;
    bool busy = false;
    std::deque<const Task*> queue;
  };
  std::map<std::pair<int, int>, Lane> lanes;
  Lane& nvme(int r) { return lanes[{r, 0}]; }
  std::vector<Completion> instant;  // zero-duration tasks completed at submit time
  double nvme_updated = 0;          // when the NVMe lanes' bytes_left were last brought up to date
};

namespace {

bool is_nvme_lane(int r) {
  return r == static_cast<int>(Resource::kNvmeRead) || r == static_cast<int>(Resource::kNvmeWrite);
}

}  // namespace

ReferenceExecutor::ReferenceExecutor(const HardwareSpec& hw, int ranks_per_node)
    : state_(std::make_unique<State>()), hw_(hw), ranks_per_node_(std::max(1, ranks_per_node)) {}
ReferenceExecutor::~ReferenceExecutor() = default;

double ReferenceExecutor::now() const {
  return state_->now;
}

double ReferenceExecutor::duration(const Task& t) const {
  const int rpn = ranks_per_node_;
  if (t.measured_s > 0 && (t.kind == TaskKind::kCompute || t.kind == TaskKind::kOptimizerStep))
    return t.delay_s + t.measured_s;
  if (t.delay_s > 0) {
    Task plain = t;
    plain.delay_s = 0;
    return t.delay_s + duration(plain);
  }
  switch (t.kind) {
    case TaskKind::kCompute:
      return compute_seconds(hw_, t.flops, t.bytes);
    case TaskKind::kOptimizerStep: {
      const double bw = t.dst == Tier::kGpu ? hw_.gpu.hbm_Bps : hw_.cpu.memory_Bps / rpn;
      return t.bytes / bw;
    }
    case TaskKind::kCopy: {
      const Tier host = t.src == Tier::kGpu ? t.dst : t.src;
      const double bw = host_path_Bps(hw_, host, t.single_link ? 1 : rpn);
      return hw_.pcie.latency_s + t.bytes / bw;
    }
    case TaskKind::kNvmeRead:
      return hw_.nvme.latency_s + t.bytes / (hw_.nvme.read_Bps() / rpn);
    case TaskKind::kNvmeWrite:
      return hw_.nvme.latency_s + t.bytes / (hw_.nvme.write_Bps() / rpn);
    case TaskKind::kCollective: {
      if (t.group <= 1) return 0;
      if (t.collective == CollectiveKind::kAllToAll)
        return alltoall_seconds(hw_, t.bytes, t.group, t.group_nodes);
      const double bw = allgather_Bps(hw_, t.group, t.group_nodes);
      const double latency =
          group_span(hw_, t.group, t.group_nodes).nodes > 1 ? hw_.network.latency_s : hw_.nvlink.latency_s;
      const double factor = t.collective == CollectiveKind::kAllReduce ? 2.0 : 1.0;
      return latency * (t.group - 1) + factor * t.bytes / bw;
    }
    case TaskKind::kAlloc:
    case TaskKind::kFree:
      return 0;
  }
  return 0;
}

// The NVMe lanes' rates now (bytes/s, index 0 reads, 1 writes): each direction at most its rate, both
// together at most the drives' combined read+write rate, shared max-min fairly (SimGrid's disk model). Only
// a lane past its latency moves bytes.
void ReferenceExecutor::nvme_rates(double rate[2]) const {
  const State& st = *state_;
  const int lanes[2] = {static_cast<int>(Resource::kNvmeRead), static_cast<int>(Resource::kNvmeWrite)};
  const double cap[2] = {hw_.nvme.read_Bps() / ranks_per_node_, hw_.nvme.write_Bps() / ranks_per_node_};
  const double both = hw_.nvme.readwrite_Bps() / ranks_per_node_;
  bool moving[2];
  for (int i = 0; i < 2; ++i) {
    auto it = st.lanes.find({lanes[i], 0});
    moving[i] =
        it != st.lanes.end() && it->second.busy && it->second.running.transfer_from <= st.nvme_updated;
    rate[i] = moving[i] ? std::min(cap[i], both) : 0;
  }
  if (moving[0] && moving[1] && rate[0] + rate[1] > both) {
    const int small = cap[0] <= cap[1] ? 0 : 1;  // the direction that may not use its fair half
    rate[small] = std::min(cap[small], both / 2);
    rate[1 - small] = std::min(cap[1 - small], both - rate[small]);
  }
}

// Moves the NVMe lanes' bytes on to time `to` at the rates of the interval (constant: every change of them
// is an event of wait_any), and sets each lane's end at the rates from `to` on.
void ReferenceExecutor::advance_nvme(double to) {
  State& st = *state_;
  const int lanes[2] = {static_cast<int>(Resource::kNvmeRead), static_cast<int>(Resource::kNvmeWrite)};
  double rate[2];
  nvme_rates(rate);
  for (int i = 0; i < 2; ++i) {
    State::Running& run = st.nvme(lanes[i]).running;
    if (rate[i] > 0 && to > st.nvme_updated)
      run.bytes_left = std::max(0.0, run.bytes_left - rate[i] * (to - st.nvme_updated));
  }
  st.nvme_updated = std::max(st.nvme_updated, to);
  nvme_rates(rate);
  for (int i = 0; i < 2; ++i) {
    State::Lane& lane = st.nvme(lanes[i]);
    State::Running& run = lane.running;
    if (!lane.busy) continue;
    const double from = std::max(run.transfer_from, st.nvme_updated);
    // Not moving yet: an estimate at its rate alone, set again when it starts moving (an event).
    run.end = from + run.bytes_left / (rate[i] > 0 ? rate[i] : rate_alone(lanes[i]));
  }
}

double ReferenceExecutor::rate_alone(int lane) const {
  const double cap =
      lane == static_cast<int>(Resource::kNvmeRead) ? hw_.nvme.read_Bps() : hw_.nvme.write_Bps();
  return std::min(cap, hw_.nvme.readwrite_Bps()) / ranks_per_node_;
}

void ReferenceExecutor::start(int r, int lane, const Task& t) {
  State& st = *state_;
  if (is_nvme_lane(r)) advance_nvme(st.now);
  State::Lane& l = st.lanes[{r, lane}];
  l.busy = true;
  double start = std::max(st.now, t.release_s);
  if (gate_) start = std::max(start, gate_(t, start));
  l.running = {t.id, start, start + duration(t)};
  if (is_nvme_lane(r)) {
    l.running.transfer_from = start + t.delay_s + hw_.nvme.latency_s;
    l.running.bytes_left = t.bytes;
    advance_nvme(st.now);
  }
}

Status ReferenceExecutor::submit(const Task& t) {
  State& st = *state_;
  if (t.resource == Resource::kNone) {
    st.instant.push_back({t.id, st.now, st.now});
    return Status::ok();
  }
  const int r = static_cast<int>(t.resource);
  const int lane = is_nvme_lane(r) ? 0 : std::max(0, t.lane);
  if (State::Lane& l = st.lanes[{r, lane}]; !l.busy) {
    start(r, lane, t);
  } else {
    l.queue.push_back(&t);
  }
  return Status::ok();
}

Result<Completion> ReferenceExecutor::wait_any() {
  State& st = *state_;
  if (!st.instant.empty()) {
    const Completion c = st.instant.back();
    st.instant.pop_back();
    return c;
  }
  for (;;) {
    // The next event: a lane's end (earliest first, ties by resource order, so runs are deterministic), or
    // an NVMe lane's bytes starting to move, which changes the other direction's rate.
    std::pair<int, int> best{-1, 0};
    double at = 0;
    bool moves = false;
    for (const auto& [key, lane] : st.lanes) {
      if (!lane.busy) continue;
      const State::Running& run = lane.running;
      const bool starts_moving =
          is_nvme_lane(key.first) && run.transfer_from > st.nvme_updated && run.end > run.transfer_from;
      const double when = starts_moving ? run.transfer_from : run.end;
      if (best.first < 0 || when < at) {
        best = key;
        at = when;
        moves = starts_moving;
      }
    }
    if (best.first < 0)
      return Status::failed_precondition("reference executor: wait_any with nothing in flight");
    if (at > st.nvme_updated) advance_nvme(at);
    if (moves) continue;
    State::Lane& lane = st.lanes[best];
    const State::Running done = lane.running;
    st.now = std::max(st.now, done.end);
    lane.busy = false;
    if (is_nvme_lane(best.first)) advance_nvme(st.now);  // the other direction speeds up
    if (!lane.queue.empty()) {
      const Task* next = lane.queue.front();
      lane.queue.pop_front();
      start(best.first, best.second, *next);
    }
    return Completion{done.task, done.start, done.end};
  }
}

ScheduleIndex index_schedule(const Schedule& s) {
  // One array of every task's dependents (a schedule of millions of tasks would otherwise be millions of
  // small vectors): counted, then placed from the last task back, each segment's cursor moving down to its
  // start.
  const std::size_t n = s.tasks.size();
  ScheduleIndex x;
  x.first.assign(n + 1, 0);
  for (const Task& t : s.tasks) {
    for (int d : t.deps) ++x.first[static_cast<std::size_t>(d)];
    if (t.resource == Resource::kNone) x.memory_ops.push_back(t.id);
  }
  for (std::size_t i = 1; i <= n; ++i) x.first[i] += x.first[i - 1];  // each segment's end
  x.dependents.resize(x.first[n]);
  for (auto t = s.tasks.rbegin(); t != s.tasks.rend(); ++t) {
    for (int d : t->deps) x.dependents[--x.first[static_cast<std::size_t>(d)]] = t->id;
  }
  std::sort(x.memory_ops.begin(), x.memory_ops.end());
  return x;
}

Result<RunResult> run_schedule(const Schedule& s, Executor& exec, const ScheduleIndex* index) {
  const ExecutorCaps caps = exec.caps();
  const size_t n = s.tasks.size();
  ScheduleIndex own;
  if (index == nullptr) {
    own = index_schedule(s);
    index = &own;
  }
  const std::vector<std::size_t>& first = index->first;
  const std::vector<int>& dependents = index->dependents;
  const std::vector<int>& memory_ops = index->memory_ops;
  RunResult result;
  result.timing.assign(n, Completion{});
  std::vector<int> waiting(n, 0);
  for (const Task& t : s.tasks) waiting[t.id] = static_cast<int>(t.deps.size());
  size_t next_memory_op = 0;
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  // Alloc/free join the ready queue like any task unless the schedule keeps them in program order.
  const bool ordered_memory = s.memory_in_program_order;
  auto queued = [&](const Task& t) { return !ordered_memory || t.resource != Resource::kNone; };
  for (const Task& t : s.tasks) {
    if (waiting[t.id] == 0 && queued(t)) ready.push(t.id);
  }
  size_t done = 0;
  int in_flight = 0;
  // A resource with several lanes (replayed streams) is busy while any of them is: the union of its tasks'
  // intervals, not their sum.
  std::vector<Interval> lane_intervals[kResourceCount];
  bool lanes_of[kResourceCount] = {};
  for (const Task& t : s.tasks) {
    if (t.resource != Resource::kNone && t.lane > 0) lanes_of[static_cast<int>(t.resource)] = true;
  }
  auto complete = [&](const Completion& c) {
    result.timing[c.task] = c;
    const Task& t = s.tasks[c.task];
    if (t.resource != Resource::kNone && lanes_of[static_cast<int>(t.resource)]) {
      lane_intervals[static_cast<int>(t.resource)].push_back({c.start_s, c.end_s});
    } else if (t.resource != Resource::kNone) {
      result.busy_s[static_cast<int>(t.resource)] += c.end_s - c.start_s;
    }
    result.makespan_s = std::max(result.makespan_s, c.end_s);
    ++done;
    const auto task = static_cast<std::size_t>(c.task);
    for (std::size_t i = first[task]; i < first[task + 1]; ++i) {
      const int d = dependents[i];
      if (--waiting[d] == 0 && queued(s.tasks[d])) ready.push(d);
    }
  };
  while (done < n) {
    for (;;) {
      if (!caps.concurrent_resources && in_flight > 0) break;
      int id = -1;
      if (ordered_memory && next_memory_op < memory_ops.size() && waiting[memory_ops[next_memory_op]] == 0) {
        id = memory_ops[next_memory_op++];  // strictly in the planner's order
      } else if (!ready.empty()) {
        id = ready.top();
        ready.pop();
      } else {
        break;
      }
      const Task& t = s.tasks[id];
      if (!caps.allocates_memory && (t.kind == TaskKind::kAlloc || t.kind == TaskKind::kFree)) {
        complete({t.id, exec.now(), exec.now()});  // bookkeeping only
        continue;
      }
      MW_RETURN_IF_ERROR(exec.submit(t));
      ++in_flight;
    }
    if (done == n) break;
    if (in_flight == 0) return Status::internal("schedule has a dependency cycle or a missing task");
    Result<Completion> c = exec.wait_any();
    if (!c.is_ok()) return c.status();
    --in_flight;
    complete(*c);
  }
  for (int r = 0; r < kResourceCount; ++r) {
    if (lanes_of[r]) result.busy_s[r] = total_length(interval_union(std::move(lane_intervals[r])));
  }
  return result;
}

RunResult accumulated_run(const AccumulatedSchedule& a, const std::vector<RunResult>& runs) {
  RunResult out;
  for (const RunResult& r : runs) {
    out.makespan_s += r.makespan_s;
    for (int i = 0; i < kResourceCount; ++i) out.busy_s[i] += r.busy_s[i];
  }
  out.timing.resize(a.schedule.tasks.size());
  for (std::size_t i = 0; i < out.timing.size(); ++i) {
    const RunResult& r = runs[static_cast<std::size_t>(a.micro[i])];
    out.timing[i] = r.timing[static_cast<std::size_t>(a.origin[i])];
    out.timing[i].task = static_cast<int>(i);
  }
  return out;
}

std::vector<double> micro_batch_seconds(const AccumulatedSchedule& a, const RunResult& run) {
  int G = 1;
  for (int k : a.micro) G = std::max(G, k + 1);
  std::vector<double> end(static_cast<std::size_t>(G), -1e300);
  double start = 1e300;
  for (std::size_t i = 0; i < a.micro.size(); ++i) {
    const Completion& c = run.timing[i];
    start = std::min(start, c.start_s);
    end[static_cast<std::size_t>(a.micro[i])] = std::max(end[static_cast<std::size_t>(a.micro[i])], c.end_s);
  }
  std::vector<double> out;
  for (double e : end) {
    out.push_back(e - start);
    start = e;
  }
  return out;
}

}  // namespace memwall
