// The replay engine behind `memwall replay` and the Python module's replay() (replay_traces.h).
#include "replay_traces.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <memory>

#include "base/units.h"
#include "cli_common.h"
#include "exec/executor.h"
#include "exec/trace_export.h"
#include "memory/bandwidth_model.h"
#include "ranks_together.h"
#include "replay/chakra.h"
#include "replay/joint.h"
#include "replay/kineto.h"
#include "replay/replay.h"
#include "spec/spec_loader.h"
#if MEMWALL_WITH_SIMGRID
#include "sim/simulate.h"
#endif

namespace memwall::cli {

namespace {

using nlohmann::json;

// PREFIX.RANK.et (chakra_converter's names): the rank (-1 for another name) and PREFIX.
int chakra_rank(const std::string& filename, std::string& prefix) {
  if (!filename.ends_with(".et")) return -1;
  const std::string stem = filename.substr(0, filename.size() - 3);
  const auto dot = stem.rfind('.');
  if (dot == std::string::npos || dot + 1 == stem.size()) return -1;
  const std::string digits = stem.substr(dot + 1);
  if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  prefix = stem.substr(0, dot);
  return std::stoi(digits);
}

// The traces of the Chakra job `path` belongs to: every PREFIX.N.et beside it, by rank (empty for a name
// of another form).
std::map<int, std::filesystem::path> chakra_job_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::map<int, fs::path> files;
  std::string prefix;
  if (chakra_rank(fs::path(path).filename().string(), prefix) < 0) return files;
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string other;
    const int r = chakra_rank(e.path().filename().string(), other);
    if (r >= 0 && other == prefix) files[r] = e.path();
  }
  return files;
}

// The rank of a Chakra trace and the world size: the number of its job's traces, or the highest rank + 1
// where ranks are missing in between (1 and 1 for a name of another form).
std::pair<int, int> chakra_rank_and_world(const std::string& path,
                                          const std::map<int, std::filesystem::path>& job) {
  std::string prefix;
  const int rank = chakra_rank(std::filesystem::path(path).filename().string(), prefix);
  if (rank < 0) return {0, 1};
  const int highest = job.empty() ? -1 : job.rbegin()->first;
  return {rank, std::max({static_cast<int>(job.size()), highest + 1, rank + 1})};
}

// The process groups of a Chakra job: the ranks whose traces name each pg_name; none unless the traces of
// ranks 0 to N-1 are all there and readable.
ChakraGroups chakra_groups(const std::map<int, std::filesystem::path>& job) {
  ChakraGroups groups;
  int read = 0;
  for (const auto& [r, file] : job) {
    auto text = read_text_file(file.string());
    if (!text.is_ok()) continue;  // its own replay, if asked for, says why
    if (r != read++) return {};   // a rank missing: who is in which group is not known
    for (const std::string& pg : chakra_process_groups(*text)) groups[pg].push_back(r);  // ranks ascending
  }
  return groups;
}

// Chakra process groups already read, by job (the directory and prefix), for one replay of several ranks.
using ChakraGroupCache = std::map<std::string, ChakraGroups>;

Result<ReplayGraph> load_chakra(const std::string& path, std::string_view bytes, int first, int last,
                                ChakraGroupCache& cache, std::FILE* log) {
  const auto job = chakra_job_files(path);
  const auto [rank, world] = chakra_rank_and_world(path, job);
  const std::string key = job.empty() ? path : job.begin()->second.string();
  auto cached = cache.find(key);
  if (cached == cache.end()) cached = cache.emplace(key, chakra_groups(job)).first;
  ChakraInfo info;
  auto g = import_chakra_trace(bytes, rank, world, first, last, info, cached->second);
  if (!g.is_ok()) return Status(g.status().code(), path + ": " + g.status().message());
  if (log != nullptr) {
    std::fprintf(
        log,
        "%s: Chakra execution trace%s%s, rank %d of %d: %zu nodes; %zu GPU compute, %zu CPU ops, %zu "
        "collectives, %zu communications kept as measured, %zu copies; %zu skipped%s\n",
        path.c_str(), info.version.empty() ? "" : " ", info.version.c_str(), rank, world, info.nodes,
        info.compute, info.cpu_ops, info.collectives, info.measured_communication, info.copies, info.skipped,
        info.timed ? "" : "; no start times, so no measured iteration to compare with");
    if (!info.unresolved_groups.empty()) {
      std::fprintf(
          log,
          "memwall: note: %s: %zu process group(s) (%s, ...) whose ranks are not known (the traces of "
          "ranks 0 to %d are not all beside it): their collectives span all of them\n",
          path.c_str(), info.unresolved_groups.size(), info.unresolved_groups.begin()->c_str(), world - 1);
    }
  }
  return g;
}

// A trace file as a replay graph: a memwall trace (its own hardware header), a PyTorch profiler (Kineto)
// trace or a Chakra execution trace (.et). `hardware_json` receives the memwall header's hardware (empty for
// the others).
// `gas`: the gradient accumulation steps a memwall train trace was written with (1 otherwise).
Result<ReplayGraph> load_graph(const std::string& path, int first, int last, std::string& hardware_json,
                               int& gas, ChakraGroupCache& chakra_cache, std::FILE* log) {
  gas = 1;
  auto text = read_text_file(path);
  if (!text.is_ok()) return text.status();
  auto bytes = trace::inflate_if_gzip(*text);
  if (!bytes.is_ok()) return Status(bytes.status().code(), path + ": " + bytes.status().message());
  hardware_json.clear();
  if (path.ends_with(".et")) return load_chakra(path, *bytes, first, last, chakra_cache, log);
  auto d = trace::read_trace(*bytes);
  if (d.is_ok()) {
    if (d->unknown_events > 0 && log != nullptr) {
      std::fprintf(log, "memwall: warning: %s: %llu events of kinds replay does not read were skipped\n",
                   path.c_str(), static_cast<unsigned long long>(d->unknown_events));
    }
    int pid = 0;
    for (const auto& sp : d->spans) {
      pid = sp.pid;
      break;
    }
    hardware_json = d->header.hardware_json;
    auto g = import_memwall_trace(*d, pid, first, last);
    if (!g.is_ok()) return Status(g.status().code(), path + ": " + g.status().message());
    // A step of memwall train with gradient accumulation is all its micro-batches: say so.
    const json summary =
        json::parse(d->header.summary_json.empty() ? "{}" : d->header.summary_json, nullptr, false);
    const auto steps = summary.is_object() ? summary.find("gradient_accumulation_steps") : summary.end();
    gas = steps != summary.end() && steps->is_number_integer()  // (another type: a note less, not a throw)
              ? static_cast<int>(std::clamp<long>(steps->get<long>(), 1, 1 << 24))
              : 1;
    if (gas > 1 && log != nullptr) {
      std::fprintf(log,
                   "memwall: note: %s was trained with %d micro-batches per step: each iteration below is "
                   "a whole step (the micro-batches back to back, the optimizer step after the last)\n",
                   path.c_str(), gas);
    }
    return g;
  }
  const bool json_text = !bytes->empty() && ((*bytes)[0] == '{' || (*bytes)[0] == '[' ||
                                             std::isspace(static_cast<unsigned char>((*bytes)[0])));
  if (!json_text && looks_like_chakra(*bytes))
    return load_chakra(path, *bytes, first, last, chakra_cache, log);
  if (d.status().message().find("not a memwall trace") == std::string::npos) {
    return Status(d.status().code(), path + ": " + d.status().message());
  }
  KinetoInfo info;
  auto g = import_kineto_trace(*bytes, first, last, info);
  if (!g.is_ok()) return Status(g.status().code(), path + ": " + g.status().message());
  if (log != nullptr) {
    std::fprintf(
        log,
        "%s: PyTorch profiler trace, rank %d of %d: %zu kernels, %zu host-device copies, %zu collectives "
        "(%zu NCCL kernels without their sizes and %zu send/recv kept as measured), %zu events of other "
        "kinds skipped\n",
        path.c_str(), info.rank, info.world_size, info.kernels, info.memcpys, info.collectives,
        info.unmatched_collectives, info.point_to_point, info.unknown_events);
  }
  return g;
}

// The files of a directory argument (*.json, *.json.gz, *.et; sorted, PREFIX.RANK.et by rank), or the
// argument itself.
std::vector<std::string> expand(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    std::error_code ec;
    if (!std::filesystem::is_directory(a, ec)) {
      out.push_back(a);
      continue;
    }
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(a, ec)) {
      const std::string n = e.path().string();
      if (n.ends_with(".json") || n.ends_with(".json.gz") || n.ends_with(".et")) files.push_back(n);
    }
    // By name, except that PREFIX.RANK.et files of one prefix go by rank (PREFIX.2.et before PREFIX.10.et).
    const auto key = [](const std::string& path) {
      std::string prefix;
      const int rank = chakra_rank(path, prefix);
      return rank < 0 ? std::make_pair(path, -1) : std::make_pair(prefix, rank);
    };
    std::sort(files.begin(), files.end(),
              [&](const std::string& x, const std::string& y) { return key(x) < key(y); });
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

// A collective across nodes needs the hardware's network (without one it would take forever).
Status check_network(const ReplayGraph& g, const HardwareSpec& hw, const std::string& path) {
  if (hw.network.node_Bps() > 0) return Status::ok();
  for (const Task& t : g.schedule.tasks) {
    if (t.kind == TaskKind::kCollective && t.group > 1 && group_span(hw, t.group, t.group_nodes).nodes > 1) {
      return Status::invalid_argument(path + ": its collectives span " + std::to_string(t.group) +
                                      " ranks, more than the " + std::to_string(hw.gpu.count) +
                                      " GPU(s) per node of hardware '" + hw.name +
                                      "', which has no network (network.nics, network.nic_Bps): replay it on "
                                      "hardware with gpu.count >= " +
                                      std::to_string(t.group) + " or a network");
    }
  }
  return Status::ok();
}

// Iteration time of a graph on hardware: SimGrid (or the closed-form reference executor with --fast).
Result<std::pair<double, RunResult>> run_graph(const ReplayGraph& g, const HardwareSpec& hw, bool fast) {
  if (fast) {
    ReferenceExecutor exec(hw, g.schedule.ranks_per_node);
    auto r = run_schedule(g.schedule, exec);
    if (!r.is_ok()) return r.status();
    const double t = r->makespan_s;
    return std::make_pair(t, std::move(*r));
  }
#if MEMWALL_WITH_SIMGRID
  auto r = sim::simulate_schedule(g.schedule, hw, {});
  if (!r.is_ok()) return r.status();
  return std::make_pair(r->iteration_s, std::move(r->rank0));
#else
  return Status::unavailable("memwall was built without SimGrid: use --fast (the reference executor)");
#endif
}

// A trace as replayed on its hardware, kept for the joint replay of its job's ranks.
struct Replayed {
  ReplayGraph graph;
  HardwareSpec hw;
};

// The joint replay's ranks and runs, for --trace.
struct JointTrace {
  std::vector<const ReplayGraph*> ranks;
  std::vector<RunResult> runs;
  const HardwareSpec* hw = nullptr;
};

// The joint replay of one job's ranks (replay/joint.h), where the traces are those of every rank of its first
// node: null (and a note saying why) where they are not, or their collectives do not match.
// `why_not`: why there is none, where there could be; `trace`: the ranks and their runs.
Result<json> joint_replay(const std::vector<Replayed>& traces, const WhatIfs& what_ifs, bool fast,
                          std::string& why_not, JointTrace& trace, std::FILE* log) {
  auto note = [&](const std::string& why) {
    if (log != nullptr) std::fprintf(log, "memwall: note: no joint replay of the ranks: %s\n", why.c_str());
    why_not = why;
    return json(nullptr);
  };
  if (traces.size() < 2) return json(nullptr);
  const int world = traces[0].graph.ranks;
  if (world < 2) return json(nullptr);
  const int rpn = traces[0].graph.schedule.ranks_per_node;
  if (rpn < 2) {
    return note("one rank per node on " + traces[0].hw.name +
                " (its gpu.count): the ranks' collectives cross nodes, which are taken to run alike");
  }
  std::vector<const ReplayGraph*> node(static_cast<std::size_t>(rpn), nullptr);
  const HardwareSpec* rank0_hw = nullptr;  // rank 0's trace's hardware (or --hardware)
  for (const Replayed& t : traces) {
    if (t.graph.ranks != world)
      return note("the traces are of jobs of " + std::to_string(world) + " and " +
                  std::to_string(t.graph.ranks) + " ranks");
    if (t.graph.pid < 0 || t.graph.pid >= rpn) continue;  // a rank on another node
    const ReplayGraph*& slot = node[static_cast<std::size_t>(t.graph.pid)];
    if (slot != nullptr) return note("two traces of rank " + std::to_string(t.graph.pid));
    slot = &t.graph;
    if (t.graph.pid == 0) rank0_hw = &t.hw;
  }
  for (int r = 0; r < rpn; ++r) {
    if (node[static_cast<std::size_t>(r)] == nullptr) {
      return note("rank " + std::to_string(r) + "'s trace is missing (the " + std::to_string(rpn) +
                  " ranks of a node on " + traces[0].hw.name + " are replayed together)");
    }
  }
  std::vector<const Schedule*> schedules;
  std::vector<const std::map<int, std::vector<int>>*> groups;
  for (const ReplayGraph* g : node) {
    schedules.push_back(&g->schedule);
    groups.push_back(&g->group_ranks);
  }
  auto meet = match_collectives(schedules, groups);
  if (!meet.is_ok()) return note(meet.status().message());
  const HardwareSpec& hw = *rank0_hw;
  auto base = run_joint(schedules, hw, *meet, fast);
  if (!base.is_ok()) return base.status();
  double measured = 0;
  bool timed = true;
  for (const ReplayGraph* g : node) {
    measured = std::max(measured, g->measured_iteration_s);
    timed = timed && g->measured_iteration_s > 0;
  }
  const auto slowest = std::max_element(base->end_s.begin(), base->end_s.end()) - base->end_s.begin();
  json out = {{"ranks", rpn},
              {"world", world},
              {"hardware", hw.name},
              {"measured_iteration_s", timed ? json(measured) : json(nullptr)},
              {"replayed_iteration_s", base->iteration_s},
              {"error", timed ? json((base->iteration_s - measured) / measured) : json(nullptr)},
              {"slowest_rank", slowest},
              {"rank_iteration_s", base->end_s},
              {"collective_wait_s", base->wait_s}};
  trace = {node, std::move(base->runs), &hw};
  if (!what_ifs.changes.empty()) {
    std::vector<ReplayGraph> changed;
    HardwareSpec hw2 = hw;
    for (const ReplayGraph* g : node) {
      HardwareSpec h = hw;
      changed.push_back(*g);
      MW_RETURN_IF_ERROR(apply_what_ifs(what_ifs.changes, what_ifs.gpu.get(), h, changed.back()));
      place_ranks(h, changed.back());
      hw2 = h;
    }
    if (changed[0].schedule.ranks_per_node == rpn) {
      std::vector<const Schedule*> changed_schedules;
      for (const ReplayGraph& g : changed) changed_schedules.push_back(&g.schedule);
      auto w = run_joint(changed_schedules, hw2, *meet, fast);
      if (!w.is_ok()) return w.status();
      out["what_if_iteration_s"] = w->iteration_s;
      out["what_if_speedup"] = base->iteration_s / w->iteration_s;
    } else {
      if (log != nullptr)
        std::fprintf(log, "memwall: note: the what-ifs change the ranks of a node: no joint what-if\n");
    }
  }
  if (world > rpn && log != nullptr) {
    std::fprintf(
        log,
        "memwall: note: ranks 0 to %d (one node of %s) replayed together; the %d other ranks are taken "
        "to run as they do\n",
        rpn - 1, hw.name.c_str(), world - rpn);
  }
  return out;
}

}  // namespace

Result<json> replay_traces(const ReplayRequest& req, std::FILE* log) {
  auto what_ifs = parse_what_ifs(req.what_ifs);
  if (!what_ifs.is_ok()) return what_ifs.status();
  if (!req.trace_out.empty()) MW_RETURN_IF_ERROR(prepare_output("--trace", req.trace_out, false));
  Diagnostics diag;
  int first = 0, last = -1;
  if (!req.steps.empty()) {
    const auto colon = req.steps.find(':');
    // Each side empty or a whole number of 0 or more (stoi took "-1" and "2x"; -1 then meant the first or
    // every step).
    const auto step_of = [](const std::string& text, int& out) {
      if (text.empty()) return true;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
      return ec == std::errc() && end == text.data() + text.size() && out >= 0;
    };
    if (colon == std::string::npos || !step_of(req.steps.substr(0, colon), first) ||
        !step_of(req.steps.substr(colon + 1), last)) {
      return Status::invalid_argument("--steps '" + req.steps +
                                      "': expected a:b (0-based, b exclusive; either may be empty)");
    }
  }
  json rows = json::array();
  std::vector<std::pair<int, std::vector<std::pair<CollectiveKind, double>>>> collectives;
  const std::vector<std::string> files = expand(req.traces);
  if (files.empty()) return Status::invalid_argument("no .json, .json.gz or .et traces in the arguments");
  ChakraGroupCache chakra_groups_read;  // a Chakra job's process groups, read once for all its ranks
  std::vector<Replayed> replayed_traces;
  RunResult first_run;  // the first trace's replay, for --trace
  for (const std::string& path : files) {
    std::string hardware_json;
    int gas = 1;
    auto g = load_graph(path, first, last, hardware_json, gas, chakra_groups_read, log);
    if (!g.is_ok()) return g.status();
    if (log != nullptr && !g->group_ranks.empty()) {
      std::fprintf(log, "%s: %zu collectives in process groups smaller than the world\n", path.c_str(),
                   g->group_ranks.size());
    }
    HardwareSpec hw;
    if (!req.hardware.empty()) {
      auto h = load_hardware_arg(req.hardware, diag);
      if (!h.is_ok()) return h.status();
      hw = std::move(*h);
    } else if (hardware_json.empty() || hardware_json == "null") {
      return Status::invalid_argument(path + ": the trace names no hardware; pass --hardware H");
    } else {
      auto h = parse_hardware(hardware_json, path + " (its hardware header)", diag, nullptr);
      if (!h.is_ok()) return h.status();
      hw = std::move(*h);
    }
    place_ranks(hw, *g);
    MW_RETURN_IF_ERROR(check_network(*g, hw, path));
    auto base = run_graph(*g, hw, req.fast);
    if (!base.is_ok()) return base.status();
    const double measured = g->measured_iteration_s, replayed = base->first;
    const bool timed = measured > 0;  // a Chakra trace without start times has no measured iteration
    json row = {{"trace", path},
                {"rank", g->pid},
                {"hardware", hw.name},
                {"steps", {g->first_step, g->last_step}},
                {"steps_total", g->steps_total},
                {"tasks", g->schedule.tasks.size()},
                {"measured_iteration_s", timed ? json(measured) : json(nullptr)},
                {"replayed_iteration_s", replayed},
                {"error", timed ? json((replayed - measured) / measured) : json(nullptr)}};
    // Trained with gradient accumulation: each iteration is a whole step of that many micro-batches.
    if (gas > 1) row["gradient_accumulation_steps"] = gas;
    // Resources with several lanes (the trace's streams or threads, run side by side): how many each has.
    std::map<std::string, int> lanes;
    for (const Task& t : g->schedule.tasks) {
      int& n = lanes[resource_name(t.resource)];
      n = std::max(n, t.lane + 1);
    }
    json several = json::object();
    for (const auto& [name, n] : lanes) {
      if (n > 1) several[name] = n;
    }
    if (!several.empty()) row["lanes"] = several;
    // Collectives of a process group smaller than the world (Chakra pg_name, Kineto's listed ranks).
    if (!g->group_ranks.empty()) row["collectives_in_process_groups"] = g->group_ranks.size();
    if (g->peak_allocated[0] > 0 || g->peak_allocated[1] > 0) {
      row["measured_peak_allocated_bytes"] = {{"gpu", g->peak_allocated[0]}, {"cpu", g->peak_allocated[1]}};
    }
    if (!what_ifs->changes.empty()) {
      HardwareSpec hw2 = hw;
      ReplayGraph g2 = *g;
      MW_RETURN_IF_ERROR(apply_what_ifs(what_ifs->changes, what_ifs->gpu.get(), hw2, g2));
      place_ranks(hw2, g2);
      MW_RETURN_IF_ERROR(check_network(g2, hw2, path + " (with the what-ifs)"));
      auto w = run_graph(g2, hw2, req.fast);
      if (!w.is_ok()) return w.status();
      row["what_if_iteration_s"] = w->first;
      row["what_if_speedup"] = replayed / w->first;
    }
    if (rows.empty()) first_run = std::move(base->second);
    rows.push_back(row);
    // The rank's collectives in order (kind and bytes), to match them across ranks.
    std::vector<std::pair<CollectiveKind, double>> seq;
    for (const Task& t : g->schedule.tasks) {
      if (t.kind == TaskKind::kCollective) seq.emplace_back(t.collective, t.bytes);
    }
    collectives.emplace_back(g->pid, std::move(seq));
    // Kept for the ranks together (those of the first node) and for --trace (the first).
    if ((g->pid >= 0 && g->pid < g->schedule.ranks_per_node) || replayed_traces.empty())
      replayed_traces.push_back({std::move(*g), std::move(hw)});
  }
  // Every rank must run the same collectives in the same order, or the real run would have hung or the
  // traces are of different runs.
  json mismatches = json::array();
  for (std::size_t r = 1; r < collectives.size(); ++r) {
    const auto& a = collectives[0].second;
    const auto& b = collectives[r].second;
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    if (i == a.size() && i == b.size()) continue;
    std::string what = "rank " + std::to_string(collectives[r].first) + " vs rank " +
                       std::to_string(collectives[0].first) + ": collective #" + std::to_string(i + 1) + " ";
    auto describe = [](const std::vector<std::pair<CollectiveKind, double>>& v, std::size_t k) {
      return k < v.size() ? std::string(collective_name(v[k].first)) + " of " + format_bytes(v[k].second)
                          : std::string("none (") + std::to_string(v.size()) + " in all)";
    };
    what += "is " + describe(b, i) + " there and " + describe(a, i) + " here";
    mismatches.push_back(what);
  }
  std::string no_joint;
  JointTrace joint_trace;
  auto joint = joint_replay(replayed_traces, *what_ifs, req.fast, no_joint, joint_trace, log);
  if (!joint.is_ok()) return joint.status();
  if (!req.trace_out.empty()) {
    const char* executor = req.fast ? "reference" : "simgrid";
    Inputs in;
    if (joint->is_object()) {
      // Every rank of the joint replay, each its own track group (pid = rank).
      in.hw = *joint_trace.hw;
      MW_RETURN_IF_ERROR(write_trace_file(
          req.trace_out, executor, "replay", joint_trace.ranks[0]->schedule.ranks, in, in.run, joint->dump(),
          [&](trace::TraceWriter& w) {
            for (std::size_t r = 0; r < joint_trace.ranks.size(); ++r)
              export_run_trace(joint_trace.ranks[r]->schedule, joint_trace.runs[r], static_cast<int>(r), w);
          }));
    } else {
      // The first trace's replayed tasks, plus the measured memory timeline of its step (PyTorch profiler
      // traces).
      const Replayed& lead = replayed_traces.front();
      in.hw = lead.hw;
      MW_RETURN_IF_ERROR(write_trace_file(req.trace_out, executor, "replay", lead.graph.schedule.ranks, in,
                                          in.run, rows.front().dump(), [&](trace::TraceWriter& w) {
                                            export_run_trace(lead.graph.schedule, first_run, 0, w);
                                            for (const auto& c : lead.graph.memory) w.counter(c);
                                          }));
    }
  }
  json out = {{"replay", rows}, {"unmatched_collectives", mismatches}, {"joint", *joint}};
  if (!no_joint.empty()) out["joint_not_replayed"] = no_joint;
  return out;
}

}  // namespace memwall::cli
