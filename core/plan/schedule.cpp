// Schedule names, totals and the memory replay.
#include "plan/schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/hash.h"
#include "base/units.h"

namespace memwall {

std::uint64_t fingerprint(const Schedule& s) {
  std::uint64_t h = kFnv1aOffset;  // over the fields' bytes
  auto mix = [&h](const auto& v) { h = fnv1a(&v, sizeof v, h); };
  for (const Task& t : s.tasks) {
    mix(static_cast<int>(t.kind)), mix(static_cast<int>(t.phase)), mix(static_cast<int>(t.resource));
    mix(static_cast<int>(t.collective)), mix(t.param), mix(t.subgroup), mix(t.buffer), mix(t.bytes),
        mix(t.flops), mix(t.later_micro_batches), mix(t.last_micro_batch);
    for (int d : t.deps) mix(d);
    mix(-1);
  }
  for (const Buffer& b : s.buffers) mix(static_cast<int>(b.tier)), mix(b.bytes), mix(b.pool);
  return h;
}

Status accumulation_fits(const Schedule& s, int accumulation_steps) {
  constexpr double kMaxTasks = 1 << 24;
  const double tasks = static_cast<double>(s.tasks.size()) * std::max(1, accumulation_steps);
  if (tasks <= kMaxTasks) return Status::ok();
  const double most = std::floor(kMaxTasks / std::max<double>(1.0, static_cast<double>(s.tasks.size())));
  return Status::invalid_argument(
      "key 'gradient_accumulation_steps': " + std::to_string(accumulation_steps) + " micro-batches of " +
      std::to_string(s.tasks.size()) + " tasks make a step of " + strprintf("%.0f", tasks) +
      " tasks, more than memwall schedules (16777216); allowed: at most " + strprintf("%.0f", most));
}

AccumulatedSchedule accumulated_schedule(const Schedule& s, int accumulation_steps) {
  const int G = std::max(1, accumulation_steps);
  AccumulatedSchedule out;
  out.schedule = s;
  Schedule& a = out.schedule;
  a.tasks.clear();
  std::vector<int> prev_sinks;                 // the previous copy's tasks nothing in it depends on
  std::vector<int> setup(s.tasks.size(), -1);  // a setup task's id in the first copy
  for (int k = 0; k < G; ++k) {
    std::vector<int> id(s.tasks.size(), -1);
    const std::size_t first = a.tasks.size();
    for (const Task& t : s.tasks) {
      const auto i = static_cast<std::size_t>(t.id);
      if ((k > 0 && t.phase == Phase::kSetup) ||
          (k + 1 < G && (t.phase == Phase::kOptimizer || t.last_micro_batch)) ||
          (k == 0 && t.later_micro_batches)) {
        continue;
      }
      Task c = t;
      c.id = static_cast<int>(a.tasks.size());
      if (k + 1 < G)
        c.name = "micro-batch " + std::to_string(k + 1) + "/" + std::to_string(G) + ": " + t.name;
      c.deps.clear();
      bool in_copy = false;  // depends on a task of this copy
      for (int d : t.deps) {
        const auto di = static_cast<std::size_t>(d);
        if (id[di] >= 0) {
          c.deps.push_back(id[di]);
          in_copy = true;
        } else if (setup[di] >= 0) {
          c.deps.push_back(setup[di]);
        }
      }
      const bool from_step_start = s.delayed_parameter_update && t.phase == Phase::kOptimizer;
      if (!in_copy && !from_step_start) c.deps.insert(c.deps.end(), prev_sinks.begin(), prev_sinks.end());
      id[i] = c.id;
      if (t.phase == Phase::kSetup) setup[i] = c.id;
      out.origin.push_back(t.id);
      out.micro.push_back(k);
      a.tasks.push_back(std::move(c));
    }
    std::vector<char> depended(a.tasks.size() - first, 0);
    for (std::size_t i = first; i < a.tasks.size(); ++i) {
      for (int d : a.tasks[i].deps) {
        if (static_cast<std::size_t>(d) >= first) depended[static_cast<std::size_t>(d) - first] = 1;
      }
    }
    prev_sinks.clear();
    for (std::size_t i = first; i < a.tasks.size(); ++i) {
      if (depended[i - first] == 0) prev_sinks.push_back(static_cast<int>(i));
    }
  }
  return out;
}

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kCompute:
      return "compute";
    case TaskKind::kCopy:
      return "copy";
    case TaskKind::kNvmeRead:
      return "nvme_read";
    case TaskKind::kNvmeWrite:
      return "nvme_write";
    case TaskKind::kCollective:
      return "collective";
    case TaskKind::kOptimizerStep:
      return "optimizer_step";
    case TaskKind::kAlloc:
      return "alloc";
    case TaskKind::kFree:
      return "free";
  }
  return "unknown";
}

const char* resource_name(Resource r) {
  switch (r) {
    case Resource::kCompute:
      return "compute";
    case Resource::kH2D:
      return "h2d";
    case Resource::kD2H:
      return "d2h";
    case Resource::kNvmeRead:
      return "nvme_read";
    case Resource::kNvmeWrite:
      return "nvme_write";
    case Resource::kNetwork:
      return "network";
    case Resource::kCpuOptimizer:
      return "cpu_optimizer";
    case Resource::kNone:
      return "none";
  }
  return "none";
}

const char* collective_name(CollectiveKind c) {
  switch (c) {
    case CollectiveKind::kNone:
      return "none";
    case CollectiveKind::kAllGather:
      return "allgather";
    case CollectiveKind::kReduceScatter:
      return "reducescatter";
    case CollectiveKind::kAllReduce:
      return "allreduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllToAll:
      return "alltoall";
  }
  return "none";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kSetup:
      return "setup";
    case Phase::kForward:
      return "forward";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "setup";
}

double Schedule::flops() const {
  double f = 0;
  for (const auto& t : tasks) f += t.flops;
  return f;
}

bool held_outside_gpu_tier(const Buffer& b) {
  if (b.tier != Tier::kGpu) return false;
  switch (b.category) {
    case MemCategory::kActivationCheckpoints:
    case MemCategory::kActivations:
    case MemCategory::kActivationWorking:
    case MemCategory::kLogits:
    case MemCategory::kRuntimeReserved:
      return true;
    default:
      return false;
  }
}

Result<MemoryTimeline> replay_memory(const Schedule& s, const std::function<bool(const Buffer&)>& counted) {
  MemoryTimeline tl;
  constexpr int kCategories = static_cast<int>(MemCategory::kRuntimeReserved) + 1;
  std::vector<std::vector<double>> by_cat(kTierCount, std::vector<double>(kCategories, 0));
  tl.peak_by_category = by_cat;
  std::vector<char> live(s.buffers.size(), 0);
  double now[kTierCount] = {0, 0, 0};
  for (const Task& t : s.tasks) {
    for (int b : t.uses) {
      if (b < 0 || b >= static_cast<int>(s.buffers.size()) || !live[b]) {
        return Status::failed_precondition("task " + std::to_string(t.id) + " (" + t.name + ") uses buffer " +
                                           std::to_string(b) + " that is not live");
      }
    }
    if (t.kind != TaskKind::kAlloc && t.kind != TaskKind::kFree) continue;
    const Buffer& buf = s.buffers.at(t.buffer);
    const int tier = static_cast<int>(buf.tier);
    const int cat = static_cast<int>(buf.category);
    if (buf.pool >= 0 && !live[buf.pool]) {
      return Status::failed_precondition("buffer " + buf.name + " takes a slot of a pool that is not live");
    }
    const double bytes = buf.pool >= 0 || (counted && !counted(buf)) ? 0 : buf.bytes;
    if (t.kind == TaskKind::kAlloc) {
      if (live[buf.id]) return Status::failed_precondition("buffer " + buf.name + " allocated twice");
      live[buf.id] = 1;
      now[tier] += bytes;
      by_cat[tier][cat] += bytes;
      if (buf.persistent) tl.persistent_bytes[tier] += bytes;
    } else {
      if (!live[buf.id]) return Status::failed_precondition("buffer " + buf.name + " freed while not live");
      if (buf.persistent) return Status::failed_precondition("persistent buffer " + buf.name + " freed");
      live[buf.id] = 0;
      now[tier] -= bytes;
      by_cat[tier][cat] -= bytes;
    }
    MemoryTimeline::Sample sample;
    sample.task = t.id;
    std::copy(now, now + kTierCount, sample.bytes);
    tl.samples.push_back(sample);
    double* phase_peak = tl.phase_peak_bytes[static_cast<int>(t.phase)];
    for (int k = 0; k < kTierCount; ++k) phase_peak[k] = std::max(phase_peak[k], now[k]);
    if (now[tier] > tl.peak_bytes[tier]) {
      tl.peak_bytes[tier] = now[tier];
      tl.peak_by_category[tier] = by_cat[tier];
    }
  }
  return tl;
}

}  // namespace memwall
