// Importing memwall traces for replay, and what-ifs (see replay.h).
#include "replay/replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "base/stats.h"
#include "base/suggest.h"
#include "base/units.h"

namespace memwall {

namespace {

Result<TaskKind> kind_of(const std::string& cat) {
  for (TaskKind k : {TaskKind::kCompute, TaskKind::kCopy, TaskKind::kNvmeRead, TaskKind::kNvmeWrite,
                     TaskKind::kCollective, TaskKind::kOptimizerStep}) {
    if (cat == task_kind_name(k)) return k;
  }
  return Status::invalid_argument("span category '" + cat + "' is not a memwall task kind");
}

// A collective span's kind (none named: an all-gather, as traces before format 1.1 leave it out).
Result<CollectiveKind> collective_of(const std::string& name) {
  if (name.empty()) return CollectiveKind::kAllGather;
  std::string allowed;
  for (CollectiveKind c :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce,
        CollectiveKind::kBroadcast, CollectiveKind::kAllToAll}) {
    if (name == collective_name(c)) return c;
    allowed += (allowed.empty() ? "" : ", ") + std::string(collective_name(c));
  }
  return Status::invalid_argument("collective '" + name + "' is not one memwall runs; allowed: " + allowed);
}

Phase phase_of(const std::string& p) {
  for (Phase ph : {Phase::kSetup, Phase::kForward, Phase::kRecompute, Phase::kBackward, Phase::kOptimizer}) {
    if (p == phase_name(ph)) return ph;
  }
  return Phase::kForward;
}

}  // namespace

Status choose_steps(ReplayGraph& g, int first, int last) {
  const int lo = std::max(0, first), hi = last < 0 ? g.steps_total : std::min(last, g.steps_total);
  if (lo >= hi) {
    return Status::invalid_argument("--steps " + std::to_string(first) + ":" + std::to_string(last) +
                                    ": the trace has steps 0:" + std::to_string(g.steps_total));
  }
  g.first_step = lo;
  g.last_step = hi;
  return Status::ok();
}

void set_measured_iteration(ReplayGraph& g) {
  double sum = 0;
  for (double s : g.measured_step_s) sum += s;
  g.measured_iteration_s =
      g.measured_step_s.empty() ? 0 : sum / static_cast<double>(g.measured_step_s.size());
}

void assign_lanes(Schedule& s, const std::vector<double>& stream) {
  // Per resource and stream: measured seconds, task count, first task.
  struct Load {
    double seconds = 0;
    int tasks = 0, first = 0;
  };
  std::map<std::pair<Resource, double>, Load> load;
  for (const Task& t : s.tasks) {
    auto [it, added] = load.try_emplace({t.resource, stream[static_cast<std::size_t>(t.id)]});
    if (added) it->second.first = t.id;
    it->second.seconds += t.measured_s;
    ++it->second.tasks;
  }
  std::map<Resource, std::vector<std::pair<double, Load>>> lanes;
  for (const auto& [key, l] : load) lanes[key.first].emplace_back(key.second, l);
  std::map<std::pair<Resource, double>, int> lane_of;
  for (auto& [resource, list] : lanes) {
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      if (a.second.seconds != b.second.seconds) return a.second.seconds > b.second.seconds;
      if (a.second.tasks != b.second.tasks) return a.second.tasks > b.second.tasks;
      return a.second.first < b.second.first;
    });
    for (std::size_t k = 0; k < list.size(); ++k) lane_of[{resource, list[k].first}] = static_cast<int>(k);
  }
  for (Task& t : s.tasks) t.lane = lane_of[{t.resource, stream[static_cast<std::size_t>(t.id)]}];
}

Result<ReplayGraph> import_memwall_trace(const trace::TraceData& d, int pid, int first, int last) {
  ReplayGraph g;
  g.pid = pid;
  g.ranks = std::max(1, d.header.ranks);
  // Occurrences of each task id in time order: the k-th is step k.
  std::vector<const trace::TraceSpan*> spans;
  bool any_deps = false;
  for (const auto& s : d.spans) {
    if (s.pid != pid) continue;
    if (s.task < 0) {
      ++g.skipped_spans;
      continue;
    }
    // Sizes and times a run could have measured (a negative transfer would run backwards in the simulator).
    for (const auto& [key, v] : {std::pair<const char*, double>{"ts", s.ts_us},
                                 {"dur", s.dur_us},
                                 {"args.bytes", s.bytes},
                                 {"args.flops", s.flops}}) {
      if (!std::isfinite(v) || (v < 0 && key[0] != 't')) {
        return Status::invalid_argument("task " + std::to_string(s.task) + " ('" + s.name + "') has " + key +
                                        " " + strprintf("%g", v) + "; allowed: a finite number" +
                                        (key[0] == 't' ? "" : ", 0 or more"));
      }
    }
    any_deps = any_deps || !s.deps.empty();
    spans.push_back(&s);
  }
  if (spans.empty()) {
    return Status::invalid_argument("no task spans for rank " + std::to_string(pid) +
                                    " (is this a memwall trace of a schedule run?)");
  }
  if (!any_deps) {
    return Status::invalid_argument("the trace has no task dependencies (written by memwall-trace " +
                                    d.version +
                                    "; replay needs 1.1 or later: re-run the command that wrote it)");
  }
  std::stable_sort(spans.begin(), spans.end(),
                   [](const auto* a, const auto* b) { return a->ts_us < b->ts_us; });
  std::map<int, std::vector<const trace::TraceSpan*>> by_task;
  for (const auto* s : spans) by_task[s->task].push_back(s);
  for (const auto& [id, occ] : by_task) g.steps_total = std::max(g.steps_total, static_cast<int>(occ.size()));
  MW_RETURN_IF_ERROR(choose_steps(g, first, last));
  const int lo = g.first_step, hi = g.last_step;
  // Measured step times.
  for (int k = lo; k < hi; ++k) {
    double t0 = 1e300, t1 = -1e300;
    for (const auto& [id, occ] : by_task) {
      if (k >= static_cast<int>(occ.size())) continue;
      t0 = std::min(t0, occ[static_cast<std::size_t>(k)]->ts_us);
      t1 = std::max(t1, occ[static_cast<std::size_t>(k)]->ts_us + occ[static_cast<std::size_t>(k)]->dur_us);
    }
    g.measured_step_s.push_back((t1 - t0) * 1e-6);
  }
  set_measured_iteration(g);
  // Launch gaps: how long each task waited after it could have started (its dependencies done and its
  // resource free), per step; the median goes into the replayed task.
  std::map<int, std::vector<double>> gaps;
  std::map<int, int> lane_prev;  // task id -> the task before it on its resource (measured order)
  for (int k = lo; k < hi; ++k) {
    std::map<int, std::vector<const trace::TraceSpan*>> per_resource;
    for (const auto& [id, occ] : by_task) {
      if (k < static_cast<int>(occ.size()))
        per_resource[occ[static_cast<std::size_t>(k)]->tid].push_back(occ[static_cast<std::size_t>(k)]);
    }
    std::map<int, double> prev_end;  // task id -> end of the previous task on its resource
    for (auto& [tid, list] : per_resource) {
      std::sort(list.begin(), list.end(), [](const auto* a, const auto* b) { return a->ts_us < b->ts_us; });
      for (std::size_t i = 1; i < list.size(); ++i) {
        prev_end[list[i]->task] = list[i - 1]->ts_us + list[i - 1]->dur_us;
        if (k == lo) lane_prev[list[i]->task] = list[i - 1]->task;
      }
    }
    for (const auto& [id, occ] : by_task) {
      if (k >= static_cast<int>(occ.size())) continue;
      const trace::TraceSpan& sp = *occ[static_cast<std::size_t>(k)];
      double ready = -1e300;
      bool any = false;
      for (int dep : sp.deps) {
        auto it = by_task.find(dep);
        if (it == by_task.end() || k >= static_cast<int>(it->second.size())) continue;
        const auto* before = it->second[static_cast<std::size_t>(k)];
        ready = std::max(ready, before->ts_us + before->dur_us);
        any = true;
      }
      // A task with no traced dependency waited on something the trace does not show (bookkeeping): its
      // start is not a launch gap.
      if (!any) continue;
      if (auto pe = prev_end.find(id); pe != prev_end.end()) ready = std::max(ready, pe->second);
      gaps[id].push_back(std::max(0.0, sp.ts_us - ready) * 1e-6);
    }
  }
  // Tasks, ids compacted in order (dependencies always point to smaller ids).
  std::map<int, int> index;
  for (const auto& [id, occ] : by_task) index[id] = static_cast<int>(index.size());
  Schedule& s = g.schedule;
  for (const auto& [id, occ] : by_task) {
    const trace::TraceSpan& sp = *occ.front();
    Task t;
    t.id = index[id];
    auto kind = kind_of(sp.category);
    if (!kind.is_ok()) return kind.status();
    t.kind = *kind;
    t.resource = resource_of_track(sp.tid);
    t.lane = lane_of_track(sp.tid);
    t.phase = phase_of(sp.phase);
    t.name = sp.name;
    t.bytes = sp.bytes;
    t.flops = sp.flops;
    switch (t.kind) {
      case TaskKind::kCopy:
        t.src = t.resource == Resource::kH2D ? Tier::kCpu : Tier::kGpu;
        t.dst = t.resource == Resource::kH2D ? Tier::kGpu : Tier::kCpu;
        break;
      case TaskKind::kNvmeRead:
        t.src = Tier::kNvme;
        t.dst = Tier::kCpu;
        break;
      case TaskKind::kNvmeWrite:
        t.src = Tier::kCpu;
        t.dst = Tier::kNvme;
        break;
      case TaskKind::kCollective: {
        auto collective = collective_of(sp.collective);
        if (!collective.is_ok()) {
          return Status::invalid_argument("task " + std::to_string(id) + " ('" + sp.name +
                                          "'): " + collective.status().message());
        }
        t.collective = *collective;
        t.group = std::max(1, sp.group);
        break;
      }
      case TaskKind::kOptimizerStep:
        t.dst = t.resource == Resource::kCompute ? Tier::kGpu : Tier::kCpu;
        break;
      default:
        break;
    }
    if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kOptimizerStep) {
      std::vector<double> durs;
      for (int k = lo; k < hi && k < static_cast<int>(occ.size()); ++k)
        durs.push_back(occ[static_cast<std::size_t>(k)]->dur_us * 1e-6);
      t.measured_s = std::max(1e-9, median(durs));
    }
    if (auto gp = gaps.find(id); gp != gaps.end()) t.delay_s = median(gp->second);
    for (int dep : sp.deps) {
      auto it = index.find(dep);
      if (it != index.end() && it->second < t.id) t.deps.push_back(it->second);
    }
    // Resources ran their tasks in the measured order (the engine's lanes are in order): keep it.
    if (auto lp = lane_prev.find(id); lp != lane_prev.end()) {
      auto it = index.find(lp->second);
      if (it != index.end() && it->second < t.id) t.deps.push_back(it->second);
    }
    std::sort(t.deps.begin(), t.deps.end());
    t.deps.erase(std::unique(t.deps.begin(), t.deps.end()), t.deps.end());
    s.tasks.push_back(std::move(t));
  }
  s.ranks = g.ranks;
  s.data_parallel = g.ranks;
  s.ranks_per_node = 1;
  return g;
}

Result<WhatIf> parse_what_if(const std::string& text) {
  const auto eq = text.find('=');
  const char* allowed = "pcie, nvme, network, cpu_memory, gpu_memory, compute, gpu, nodes";
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Status::invalid_argument("--what-if '" + text + "': expected key=value with key one of " +
                                    allowed);
  }
  WhatIf w{text.substr(0, eq), text.substr(eq + 1)};
  const std::vector<std::string> keys = {"pcie",       "nvme",    "network", "cpu_memory",
                                         "gpu_memory", "compute", "gpu",     "nodes"};
  if (std::find(keys.begin(), keys.end(), w.key) != keys.end()) return w;
  return Status::invalid_argument("--what-if '" + text + "': unknown key '" + w.key + "'" +
                                  did_you_mean(w.key, keys) + "; allowed: " + allowed);
}

void place_ranks(const HardwareSpec& hw, ReplayGraph& g) {
  Schedule& s = g.schedule;
  s.ranks_per_node = std::max(1, std::min(hw.gpu.count, s.ranks));
  // Ranks fill the nodes in order: a group spans the nodes its ranks are on.
  for (const auto& [id, ranks] : g.group_ranks) {
    std::set<int> nodes;
    for (int r : ranks) nodes.insert(r / s.ranks_per_node);
    Task& t = s.tasks[static_cast<std::size_t>(id)];
    t.group = static_cast<int>(ranks.size());
    t.group_nodes = static_cast<int>(nodes.size());
  }
}

namespace {

// A what-if's number: from 1e-6 to 1e6 (inf made SimGrid abort; a rate times 1e-300 never finishes).
Result<double> what_if_factor(const WhatIf& w) {
  char* end = nullptr;
  const double x = std::strtod(w.value.c_str(), &end);
  if (end == w.value.c_str() || *end != '\0' || !(x >= 1e-6 && x <= 1e6)) {
    return Status::invalid_argument("--what-if " + w.key + "=" + w.value +
                                    ": expected a positive number from 1e-6 to 1e6");
  }
  return x;
}

// pcie, nvme, network, cpu_memory, gpu_memory: bandwidths times x. False for the other keys.
bool scale_bandwidth(const std::string& key, double x, HardwareSpec& hw) {
  if (key == "pcie") {
    hw.pcie.gpu_link_Bps *= x;
    for (auto& l : hw.pcie.switches) l.uplink_Bps *= x;
  } else if (key == "nvme") {
    hw.nvme.drive_read_Bps *= x;
    hw.nvme.drive_write_Bps *= x;
    hw.nvme.drive_readwrite_Bps *= x;  // 0 (derived from the two) stays 0
  } else if (key == "network") {
    hw.network.nic_Bps *= x;
    hw.nvlink.gpu_Bps *= x;
  } else if (key == "cpu_memory") {
    hw.cpu.memory_Bps *= x;
  } else if (key == "gpu_memory") {
    hw.gpu.hbm_Bps *= x;  // memory-bound operators (the roofline) and a GPU optimizer's step
  } else {
    return false;
  }
  return true;
}

// gpu=HARDWARE: that spec's GPU, this node's GPU count.
Status take_gpu(const WhatIf& w, const HardwareSpec* gpu_spec, HardwareSpec& hw) {
  if (gpu_spec == nullptr || gpu_spec->gpu.achievable_flops <= 0 || hw.gpu.achievable_flops <= 0) {
    return Status::invalid_argument("--what-if gpu=" + w.value +
                                    ": needs hardware with gpu.achievable_flops");
  }
  const int count = hw.gpu.count;
  hw.gpu = gpu_spec->gpu;
  hw.gpu.count = count;
  return Status::ok();
}

Result<int> what_if_nodes(const WhatIf& w, double x, const HardwareSpec& hw) {
  const int nodes = x >= 1 && x <= 1 << 20 ? static_cast<int>(x) : 0;  // beyond: refused below, not cast
  if (nodes < 1 || nodes != x || (nodes > 1 && hw.network.node_Bps() <= 0)) {
    return Status::invalid_argument("--what-if nodes=" + w.value +
                                    ": expected a whole number of nodes, on hardware with a network");
  }
  return nodes;
}

}  // namespace

Status apply_hardware_what_ifs(const std::vector<WhatIf>& what_ifs, const HardwareSpec* gpu_spec,
                               HardwareSpec& hw) {
  for (const WhatIf& w : what_ifs) {
    if (w.key == "gpu") {
      MW_RETURN_IF_ERROR(take_gpu(w, gpu_spec, hw));
      continue;
    }
    auto x = what_if_factor(w);
    if (!x.is_ok()) return x.status();
    if (scale_bandwidth(w.key, *x, hw)) continue;
    if (w.key == "compute") {
      hw.gpu.achievable_flops *= *x;
      hw.gpu.peak_flops *= *x;
    } else if (w.key == "nodes") {
      auto nodes = what_if_nodes(w, *x, hw);
      if (!nodes.is_ok()) return nodes.status();
      hw.nodes = *nodes;
    }
  }
  return Status::ok();
}

Status apply_what_ifs(const std::vector<WhatIf>& what_ifs, const HardwareSpec* gpu_spec, HardwareSpec& hw,
                      ReplayGraph& g) {
  for (const WhatIf& w : what_ifs) {
    const HardwareSpec before = hw;
    const int per_node = std::max(1, std::min(hw.gpu.count, g.schedule.ranks));
    MW_RETURN_IF_ERROR(apply_hardware_what_ifs({w}, gpu_spec, hw));
    if (w.key == "gpu" || w.key == "compute") {
      // Measured GPU compute is scaled whole by the FLOP rate: a trace does not say what bound each operator
      // on the machine that measured it (a memwall train trace of the host-emulated device names the
      // hardware it planned for, not the CPU that computed). What the replay times from FLOPs and bytes (a
      // Chakra node without a duration) follows the changed hardware by the roofline.
      const double ratio = before.gpu.achievable_flops / hw.gpu.achievable_flops;
      for (Task& t : g.schedule.tasks) {
        if (t.kind == TaskKind::kCompute && t.resource == Resource::kCompute) t.measured_s *= ratio;
      }
    } else if (w.key == "nodes") {
      const int old_nodes = (g.schedule.ranks + per_node - 1) / per_node;
      const int nodes = hw.nodes;
      g.schedule.ranks = g.schedule.data_parallel = per_node * nodes;
      for (Task& t : g.schedule.tasks) {
        if (t.kind == TaskKind::kCollective && t.group > 1) t.group = g.schedule.ranks;
      }
      // A process group that spans every node (data parallelism beside tensor parallelism) spans the new
      // ones too, with the same GPUs on each; a group inside a node stays as it was.
      for (auto& [id, ranks] : g.group_ranks) {
        std::set<int> on;
        for (int r : ranks) on.insert(r / per_node);
        std::vector<int> grown;
        if (static_cast<int>(on.size()) == old_nodes && old_nodes > 1) {
          std::set<int> local;
          for (int r : ranks) local.insert(r % per_node);
          for (int node = 0; node < nodes; ++node) {
            for (int l : local) grown.push_back(node * per_node + l);
          }
        } else {
          grown = ranks;
        }
        ranks = std::move(grown);
      }
    }
  }
  return Status::ok();
}

}  // namespace memwall
