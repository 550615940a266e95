// PyTorch profiler (Kineto) traces into a replay graph (see kineto.h).
#include "replay/kineto.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "base/stats.h"
#include "base/units.h"

namespace memwall {

namespace {

using nlohmann::json;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

double num(const json& j, const char* key, double fallback = 0) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    try {
      return std::stod(v.get<std::string>());
    } catch (const std::exception&) {
      return fallback;
    }
  }
  return fallback;
}

std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>()
                                                                   : std::string();
}

double dtype_bytes(const std::string& dtype) {
  const std::string d = lower(dtype);
  if (d.find("double") != std::string::npos || d.find("long") != std::string::npos ||
      d.find("64") != std::string::npos)
    return 8;
  if (d.find("half") != std::string::npos || d.find("bfloat16") != std::string::npos ||
      d.find("16") != std::string::npos)
    return 2;
  if (d.find("byte") != std::string::npos || d.find("char") != std::string::npos ||
      d.find("bool") != std::string::npos || d.find("8") != std::string::npos)
    return 1;
  return 4;
}

CollectiveKind collective_from(const std::string& text) {
  const std::string t = lower(text);
  if (t.find("reduce_scatter") != std::string::npos || t.find("reducescatter") != std::string::npos)
    return CollectiveKind::kReduceScatter;
  if (t.find("all_gather") != std::string::npos || t.find("allgather") != std::string::npos)
    return CollectiveKind::kAllGather;
  if (t.find("broadcast") != std::string::npos) return CollectiveKind::kBroadcast;
  return CollectiveKind::kAllReduce;
}

struct StreamWait {  // cuda_sync "Stream Wait Event": `stream` waits for `on` up to an event record
  double ts = 0;
  long stream = 0, on = 0, record = -1;  // record: correlation id of the cudaEventRecord
};

struct Comm {
  double ts = 0, bytes = 0;
  int group = 0;
  std::string name;
  std::vector<int> ranks;  // the process group's ranks, sorted, when the trace lists them all
};

// "Process Group Ranks" (PyTorch 2.2 and later): "[0, 1, 2, 3]", or a list. Past 30 ranks PyTorch writes the
// first 29, "...", and the last: when those 29 step evenly (a tensor-parallel group's ranks in a row, a
// data-parallel group's every tp-th rank) and the step reaches the last in `group` ranks, that is the group.
// Anything else gives none.
std::vector<int> group_ranks_of(const json& args, int group) {
  auto it = args.find("Process Group Ranks");
  if (it == args.end()) return {};
  std::vector<long> seen;
  bool shortened = false;
  if (it->is_array()) {
    for (const json& r : *it) {
      if (!r.is_number_integer()) return {};
      seen.push_back(r.get<long>());
    }
  } else if (it->is_string()) {
    const std::string text = it->get<std::string>();
    std::size_t i = 0;
    while (i < text.size()) {
      if (text.compare(i, 3, "...") == 0) {
        shortened = true;
        i += 3;
      } else if (std::isdigit(static_cast<unsigned char>(text[i]))) {
        std::size_t used = 0;
        seen.push_back(std::stol(text.substr(i, 9), &used));
        i += used;
      } else if (text[i] == '[' || text[i] == ']' || text[i] == ',' || text[i] == ' ') {
        ++i;
      } else {
        return {};
      }
    }
  } else {
    return {};
  }
  for (long r : seen) {
    if (r < 0 || r > (1L << 24)) return {};
  }
  if (shortened) {
    if (seen.size() < 3 || group < 3) return {};
    const long first = seen.front(), step = seen[1] - seen[0], last = seen.back();
    for (std::size_t k = 1; k + 1 < seen.size(); ++k) {
      if (seen[k] - seen[k - 1] != step) return {};
    }
    if (step < 1 || (last - first) % step != 0 || (last - first) / step + 1 != group) return {};
    seen.clear();
    for (long r = first; r <= last; r += step) seen.push_back(r);
  }
  std::vector<int> out(seen.begin(), seen.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// A rank, world size or group size from the file: a whole number in [lo, 2^24], else `fallback`.
int count_of(double v, int fallback, long lo) {
  const long w = whole_or(v, fallback);
  return static_cast<int>(w >= lo && w <= (1L << 24) ? w : fallback);
}

// A collective's name, message size and group from record_param_comms' arguments (or an NCCL kernel's).
Comm comm_of_args(const json& args, double ts, int world_size) {
  Comm c;
  c.ts = ts;
  c.name = str(args, "Collective name");
  const double elems = std::max(num(args, "In msg nelems"), num(args, "Out msg nelems"));
  c.bytes = elems * dtype_bytes(str(args, "dtype"));
  c.group = count_of(num(args, "Group size", world_size), world_size, 0);
  c.ranks = group_ranks_of(args, c.group);
  if (c.ranks.empty() || (c.group > 0 && static_cast<int>(c.ranks.size()) != c.group) ||
      c.ranks.back() >= world_size) {
    c.ranks.clear();  // not the whole group, or not of this world: its size alone
  }
  return c;
}

// A GPU event's stream: args.stream, else its tid, a number or PyTorch 1.8/1.9's "stream 7".
long stream_of(const json& e, const json& args) {
  if (args.is_object() && args.contains("stream")) return whole_or(num(args, "stream"), 0);
  const std::string tid = lower(str(e, "tid"));
  if (tid.rfind("stream ", 0) == 0) {
    try {
      return std::stol(tid.substr(7));
    } catch (const std::exception&) {
      return 0;
    }
  }
  return whole_or(num(e, "tid"), 0);
}

struct GpuEvent {
  std::string name, cat;
  double ts = 0, dur = 0, launch = -1, bytes = 0;  // launch: its CUDA runtime call's start, or -1
  long stream = 0, correlation = -1;
  bool nccl = false;
  Comm comm;  // an NCCL kernel's own collective arguments (bytes 0: none)
};

}  // namespace

Result<ReplayGraph> import_kineto_trace(std::string_view bytes, int first, int last, KinetoInfo& info) {
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) return Status::invalid_argument("not valid JSON (truncated?)");
  if (!j.is_object() || !j.contains("traceEvents") || !j.at("traceEvents").is_array()) {
    return Status::invalid_argument("not a PyTorch profiler trace: no \"traceEvents\" list");
  }
  if (j.contains("distributedInfo")) {
    info.rank = count_of(num(j.at("distributedInfo"), "rank"), 0, 0);
    info.world_size = count_of(num(j.at("distributedInfo"), "world_size", 1), 1, 1);
  }
  std::vector<std::pair<double, double>> steps;  // (ts, dur) of ProfilerStep#N
  std::map<long, double> launch;                 // correlation -> runtime launch ts
  std::vector<GpuEvent> gpu;
  std::vector<Comm> comms;
  std::vector<StreamWait> waits;
  struct MemEvent {
    double ts, allocated, reserved;
    bool gpu;
  };
  std::vector<MemEvent> mem;
  for (const json& e : j.at("traceEvents")) {
    if (!e.is_object()) continue;
    const std::string ph = str(e, "ph"), cat = str(e, "cat"), name = str(e, "name");
    const json args = e.contains("args") ? e.at("args") : json::object();
    if ((ph == "i" || ph == "I") && name == "[memory]") {
      // Device Type 1 is CUDA in PyTorch's profiler (0: CPU).
      mem.push_back({num(e, "ts"), num(args, "Total Allocated"), num(args, "Total Reserved"),
                     whole_or(num(args, "Device Type"), 0) != 0});
      continue;
    }
    if (ph != "X") {
      if (ph != "M" && ph != "s" && ph != "f" && ph != "i" && ph != "I" && ph != "C") ++info.unknown_events;
      continue;
    }
    // Categories as PyTorch 1.9+ names them, and as 1.8's Kineto did (Operator, Runtime, Kernel, Memcpy,
    // Memset).
    const std::string c = lower(cat);
    const bool kernel = c == "kernel", memcpy = c == "gpu_memcpy" || c == "memcpy",
               memset = c == "gpu_memset" || c == "memset";
    if ((c == "user_annotation" || c == "cpu_op" || c == "operator") && name.rfind("ProfilerStep#", 0) == 0) {
      steps.emplace_back(num(e, "ts"), num(e, "dur"));
    } else if (c == "cuda_runtime" || c == "cuda_driver" || c == "runtime") {
      if (args.contains("correlation")) launch[whole_or(num(args, "correlation"), -1)] = num(e, "ts");
    } else if (kernel || memcpy || memset) {
      GpuEvent g;
      g.name = name;
      g.cat = memcpy ? "gpu_memcpy" : memset ? "gpu_memset" : "kernel";
      g.ts = num(e, "ts");
      g.dur = num(e, "dur");
      g.stream = stream_of(e, args);
      g.bytes = num(args, "bytes");
      g.nccl = lower(name).find("nccl") != std::string::npos;
      g.correlation = whole_or(num(args, "correlation", -1), -1);
      // PyTorch 2.x puts the collective's sizes on the NCCL kernel itself.
      if (g.nccl && (args.contains("In msg nelems") || args.contains("Out msg nelems"))) {
        g.comm = comm_of_args(args, g.ts, info.world_size);
        if (g.comm.name.empty()) g.comm.name = name;
      }
      gpu.push_back(std::move(g));
    } else if (c == "cuda_sync" && args.contains("wait_on_stream")) {
      StreamWait w;
      w.ts = num(e, "ts");
      w.stream = stream_of(e, args);
      w.on = whole_or(num(args, "wait_on_stream"), 0);
      w.record = whole_or(num(args, "wait_on_cuda_event_record_corr_id", -1), -1);
      waits.push_back(w);
    } else if ((c == "cpu_op" || c == "operator") && name == "record_param_comms") {
      comms.push_back(comm_of_args(args, num(e, "ts"), info.world_size));
    }
  }
  // Each GPU event's launch (runtime events may come before or after it in the file).
  for (GpuEvent& g : gpu) {
    if (auto it = launch.find(g.correlation); g.correlation >= 0 && it != launch.end()) g.launch = it->second;
  }
  if (gpu.empty())
    return Status::invalid_argument("no GPU kernels or memcpys in the trace (a CPU-only profile?)");
  std::sort(gpu.begin(), gpu.end(), [](const GpuEvent& a, const GpuEvent& b) { return a.ts < b.ts; });
  std::sort(steps.begin(), steps.end());
  std::sort(comms.begin(), comms.end(), [](const Comm& a, const Comm& b) { return a.ts < b.ts; });
  if (steps.empty()) {
    double t0 = gpu.front().launch >= 0 ? std::min(gpu.front().launch, gpu.front().ts) : gpu.front().ts,
           t1 = 0;
    for (const auto& g : gpu) t1 = std::max(t1, g.ts + g.dur);
    steps.emplace_back(t0, t1 - t0);
  }
  // NCCL kernels matched in order to the record_param_comms before their launch.
  std::size_t next_comm = 0;
  std::vector<int> comm_of(gpu.size(), -1);
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (!gpu[i].nccl || gpu[i].comm.bytes > 0) continue;
    const double at = gpu[i].launch >= 0 ? gpu[i].launch : gpu[i].ts;
    if (next_comm < comms.size() && comms[next_comm].ts <= at) comm_of[i] = static_cast<int>(next_comm++);
  }
  // Tasks per step: a GPU task belongs to the step its launch (or its start) falls in.
  auto step_of = [&](const GpuEvent& g) {
    const double at = g.launch >= 0 ? g.launch : g.ts;
    for (std::size_t k = 0; k < steps.size(); ++k) {
      if (at >= steps[k].first && at < steps[k].first + steps[k].second) return static_cast<int>(k);
    }
    return -1;
  };
  std::vector<std::vector<std::size_t>> per_step(steps.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const int k = step_of(gpu[i]);
    if (k >= 0) per_step[static_cast<std::size_t>(k)].push_back(i);
  }
  ReplayGraph g;
  g.pid = info.rank;
  g.ranks = info.world_size;
  g.steps_total = static_cast<int>(steps.size());
  MW_RETURN_IF_ERROR(choose_steps(g, first, last));
  const int lo = g.first_step, hi = g.last_step;
  for (int k = lo; k < hi; ++k) {
    double end = steps[static_cast<std::size_t>(k)].first + steps[static_cast<std::size_t>(k)].second;
    for (std::size_t i : per_step[static_cast<std::size_t>(k)]) end = std::max(end, gpu[i].ts + gpu[i].dur);
    g.measured_step_s.push_back((end - steps[static_cast<std::size_t>(k)].first) * 1e-6);
  }
  set_measured_iteration(g);
  // The graph: the first chosen step's tasks; durations and releases are medians over the chosen steps with
  // the same number of tasks.
  const auto& base = per_step[static_cast<std::size_t>(lo)];
  if (base.empty()) return Status::invalid_argument("step " + std::to_string(lo) + " has no GPU tasks");
  std::vector<int> same;
  for (int k = lo; k < hi; ++k) {
    if (per_step[static_cast<std::size_t>(k)].size() == base.size()) same.push_back(k);
  }
  std::map<long, int> last_on_stream;
  std::vector<double> streams;  // per task: its stream, a lane of its resource (assign_lanes)
  Schedule& s = g.schedule;
  for (std::size_t idx = 0; idx < base.size(); ++idx) {
    const GpuEvent& e = gpu[base[idx]];
    Task t;
    t.id = static_cast<int>(idx);
    t.name = e.name;
    t.phase = Phase::kForward;
    std::vector<double> durs, releases;
    for (int k : same) {
      const GpuEvent& o = gpu[per_step[static_cast<std::size_t>(k)][idx]];
      const double step_start = steps[static_cast<std::size_t>(k)].first;
      durs.push_back(o.dur * 1e-6);
      releases.push_back(((o.launch >= 0 ? o.launch : o.ts) - step_start) * 1e-6);
    }
    t.release_s = std::max(0.0, median(releases));
    const std::string n = lower(e.name);
    const bool p2p = n.find("sendrecv") != std::string::npos || n.find("_send") != std::string::npos ||
                     n.find("_recv") != std::string::npos;
    if (e.nccl && !p2p && (e.comm.bytes > 0 || comm_of[base[idx]] >= 0)) {
      const Comm& c = e.comm.bytes > 0 ? e.comm : comms[static_cast<std::size_t>(comm_of[base[idx]])];
      t.kind = TaskKind::kCollective;
      t.resource = Resource::kNetwork;
      t.collective = collective_from(c.name.empty() ? e.name : c.name);
      t.group = std::max(1, c.group > 0 ? c.group : info.world_size);
      t.bytes = c.bytes;
      ++info.collectives;
      if (!c.ranks.empty() && static_cast<int>(c.ranks.size()) < info.world_size) {
        g.group_ranks[t.id] = c.ranks;  // placed on the nodes by place_ranks (t.group is its size already)
        ++info.in_subgroups;
      }
    } else if (e.cat == "gpu_memcpy" &&
               (n.find("htod") != std::string::npos || n.find("dtoh") != std::string::npos)) {
      t.kind = TaskKind::kCopy;
      const bool h2d = n.find("htod") != std::string::npos;
      t.resource = h2d ? Resource::kH2D : Resource::kD2H;
      t.src = h2d ? Tier::kCpu : Tier::kGpu;
      t.dst = h2d ? Tier::kGpu : Tier::kCpu;
      t.bytes = e.bytes;
      ++info.memcpys;
    } else {
      if (e.nccl) ++(p2p ? info.point_to_point : info.unmatched_collectives);
      t.kind = TaskKind::kCompute;
      t.resource = e.nccl ? Resource::kNetwork : Resource::kCompute;
      t.measured_s = std::max(1e-9, median(durs));
      ++info.kernels;
    }
    streams.push_back(static_cast<double>(e.stream));
    if (auto it = last_on_stream.find(e.stream); it != last_on_stream.end()) t.deps.push_back(it->second);
    last_on_stream[e.stream] = t.id;
    s.tasks.push_back(std::move(t));
  }
  // Cross-stream waits of the first chosen step: the first task of `stream` starting after the wait depends
  // on the last task of the stream it waited on, launched before the event record (or started before the
  // wait).
  const double step_start = steps[static_cast<std::size_t>(lo)].first,
               step_end = step_start + steps[static_cast<std::size_t>(lo)].second;
  for (const StreamWait& w : waits) {
    if (w.ts < step_start || w.ts >= step_end) continue;
    const double record_at = w.record >= 0 && launch.count(w.record) ? launch.at(w.record) : -1;
    int waiter = -1, waited = -1;
    for (std::size_t idx = 0; idx < base.size(); ++idx) {
      const GpuEvent& e = gpu[base[idx]];
      if (e.stream == w.stream && e.ts >= w.ts && waiter < 0) waiter = static_cast<int>(idx);
      const bool before = record_at >= 0 ? (e.launch >= 0 && e.launch <= record_at) : e.ts <= w.ts;
      if (e.stream == w.on && before) waited = static_cast<int>(idx);
    }
    if (waiter >= 0 && waited >= 0 && waited < waiter) {
      s.tasks[static_cast<std::size_t>(waiter)].deps.push_back(waited);
      ++info.stream_waits;
    }
  }
  for (Task& t : s.tasks) {
    std::sort(t.deps.begin(), t.deps.end());
    t.deps.erase(std::unique(t.deps.begin(), t.deps.end()), t.deps.end());
  }
  // Memory: samples within the first step used (times from its start), peaks over the steps used.
  std::sort(mem.begin(), mem.end(), [](const MemEvent& a, const MemEvent& b) { return a.ts < b.ts; });
  const double used_end =
      steps[static_cast<std::size_t>(hi - 1)].first + steps[static_cast<std::size_t>(hi - 1)].second;
  for (const MemEvent& m : mem) {
    if (m.ts >= step_start && m.ts < used_end) {
      double& peak = g.peak_allocated[m.gpu ? 0 : 1];
      peak = std::max(peak, m.allocated);
    }
    if (m.ts >= step_start && m.ts < step_end) {
      g.memory.push_back(
          {0,
           m.gpu ? "memory gpu" : "memory cpu",
           m.ts - step_start,
           {{"allocated", m.allocated}, {"reserved_unused", std::max(0.0, m.reserved - m.allocated)}}});
    }
  }
  // Each stream a lane of its resource: kernels of a side stream overlap the main stream's as measured.
  assign_lanes(s, streams);
  s.ranks = s.data_parallel = g.ranks;
  s.ranks_per_node = 1;
  return g;
}

}  // namespace memwall
