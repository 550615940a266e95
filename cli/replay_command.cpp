// `memwall replay TRACE... [--hardware H] [--what-if key=value ...] [--steps a:b] [--trace out.json]
// [--json]`: re-runs a measured memwall trace in the simulator (measured compute, re-simulated transfers) on
// its own or another hardware spec, reports measured vs replayed iteration time per rank, and what-if
// predictions.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "exec/executor.h"
#include "exec/trace_export.h"
#include "replay/chakra.h"
#include "replay/kineto.h"
#include "replay/replay.h"
#include "sim/simulate.h"
#include "spec/spec_loader.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct ReplayOptions {
  std::vector<std::string> traces;
  std::string hardware;  // default: the first trace's own
  std::vector<std::string> what_ifs;
  std::string steps;  // "a:b"
  std::string trace_out;
  bool json = false;
  bool fast = false;
};

// PREFIX.RANK.et (chakra_converter's names): the rank, and the world size as the number of PREFIX.N.et files
// beside it (1 and 1 for another name).
std::pair<int, int> chakra_rank_and_world(const std::string& path) {
  namespace fs = std::filesystem;
  auto rank_of = [](const std::string& name, std::string& prefix) {
    if (!name.ends_with(".et")) return -1;
    const std::string stem = name.substr(0, name.size() - 3);
    const auto dot = stem.rfind('.');
    if (dot == std::string::npos || dot + 1 == stem.size()) return -1;
    const std::string digits = stem.substr(dot + 1);
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    prefix = stem.substr(0, dot);
    return std::stoi(digits);
  };
  std::string prefix;
  const int rank = rank_of(fs::path(path).filename().string(), prefix);
  if (rank < 0) return {0, 1};
  int world = 0;
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string other;
    if (rank_of(e.path().filename().string(), other) >= 0 && other == prefix) ++world;
  }
  return {rank, std::max(world, rank + 1)};
}

Result<ReplayGraph> load_chakra(const std::string& path, std::string_view bytes, int first, int last,
                                bool quiet) {
  const auto [rank, world] = chakra_rank_and_world(path);
  ChakraInfo info;
  auto g = import_chakra_trace(bytes, rank, world, first, last, info);
  if (!g.is_ok()) return Status(g.status().code(), path + ": " + g.status().message());
  if (!quiet) {
    std::fprintf(
        stderr,
        "%s: Chakra execution trace%s%s, rank %d of %d: %zu nodes; %zu GPU compute, %zu CPU ops, %zu "
        "collectives, %zu communications kept as measured, %zu copies; %zu skipped%s\n",
        path.c_str(), info.version.empty() ? "" : " ", info.version.c_str(), rank, world, info.nodes,
        info.compute, info.cpu_ops, info.collectives, info.measured_communication, info.copies, info.skipped,
        info.timed ? "" : "; no start times, so no measured iteration to compare with");
  }
  return g;
}

// A trace file as a replay graph: a memwall trace (its own hardware header), a PyTorch profiler (Kineto)
// trace or a Chakra execution trace (.et). `hardware_json` receives the memwall header's hardware (empty for
// the others).
// `gas`: the gradient accumulation steps a memwall train trace was written with (1 otherwise).
Result<ReplayGraph> load_graph(const std::string& path, int first, int last, std::string& hardware_json,
                               int& gas, bool quiet) {
  gas = 1;
  auto text = read_text_file(path);
  if (!text.is_ok()) return text.status();
  auto bytes = trace::inflate_if_gzip(*text);
  if (!bytes.is_ok()) return Status(bytes.status().code(), path + ": " + bytes.status().message());
  hardware_json.clear();
  if (path.ends_with(".et")) return load_chakra(path, *bytes, first, last, quiet);
  auto d = trace::read_trace(*bytes);
  if (d.is_ok()) {
    if (d->unknown_events > 0 && !quiet) {
      std::fprintf(stderr, "memwall: warning: %s: %llu events of kinds replay does not read were skipped\n",
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
    gas = summary.is_object() ? summary.value("gradient_accumulation_steps", 1) : 1;
    if (gas > 1 && !quiet) {
      std::fprintf(stderr,
                   "memwall: note: %s was trained with %d micro-batches per step: each iteration below is "
                   "a whole step (the micro-batches back to back, the optimizer step after the last)\n",
                   path.c_str(), gas);
    }
    return g;
  }
  const bool json_text = !bytes->empty() && ((*bytes)[0] == '{' || (*bytes)[0] == '[' ||
                                             std::isspace(static_cast<unsigned char>((*bytes)[0])));
  if (!json_text && looks_like_chakra(*bytes)) return load_chakra(path, *bytes, first, last, quiet);
  if (d.status().message().find("not a memwall trace") == std::string::npos) {
    return Status(d.status().code(), path + ": " + d.status().message());
  }
  KinetoInfo info;
  auto g = import_kineto_trace(*bytes, first, last, info);
  if (!g.is_ok()) return Status(g.status().code(), path + ": " + g.status().message());
  if (!quiet) {
    std::fprintf(
        stderr,
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
    std::sort(files.begin(), files.end(), [](const std::string& x, const std::string& y) {
      if (x.ends_with(".et") && y.ends_with(".et") && x.size() != y.size()) return x.size() < y.size();
      return x < y;  // PREFIX.2.et before PREFIX.10.et
    });
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
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

int run_replay(const ReplayOptions& opt) {
  std::vector<WhatIf> what_ifs;
  std::unique_ptr<HardwareSpec> gpu_spec;
  Diagnostics diag;
  for (const auto& text : opt.what_ifs) {
    auto w = parse_what_if(text);
    if (!w.is_ok()) return report_error(w.status());
    if (w->key == "gpu") {
      auto g = load_hardware_arg(w->value, diag);
      if (!g.is_ok()) return report_error(g.status());
      gpu_spec = std::make_unique<HardwareSpec>(std::move(*g));
    }
    what_ifs.push_back(*w);
  }
  int first = 0, last = -1;
  if (!opt.steps.empty()) {
    const auto colon = opt.steps.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      if (colon > 0) first = std::stoi(opt.steps.substr(0, colon));
      if (colon + 1 < opt.steps.size()) last = std::stoi(opt.steps.substr(colon + 1));
    } catch (const std::exception&) {
      return report_error(Status::invalid_argument(
          "--steps '" + opt.steps + "': expected a:b (0-based, b exclusive; either may be empty)"));
    }
  }
  json out_ranks = json::array();
  json what_if_rows = json::array();
  bool first_trace = true;
  std::vector<std::pair<int, std::vector<std::pair<CollectiveKind, double>>>> collectives;
  const std::vector<std::string> files = expand(opt.traces);
  if (files.empty())
    return report_error(Status::invalid_argument("no .json, .json.gz or .et traces in the arguments"));
  for (const std::string& path : files) {
    std::string hardware_json;
    int gas = 1;
    auto g = load_graph(path, first, last, hardware_json, gas, opt.json);
    if (!g.is_ok()) return report_error(g.status());
    const int pid = g->pid;
    HardwareSpec hw;
    if (!opt.hardware.empty()) {
      auto h = load_hardware_arg(opt.hardware, diag);
      if (!h.is_ok()) return report_error(h.status());
      hw = std::move(*h);
    } else if (hardware_json.empty() || hardware_json == "null") {
      return report_error(
          Status::invalid_argument(path + ": the trace names no hardware; pass --hardware H"));
    } else {
      auto h = parse_hardware(hardware_json, path + " (its hardware header)", diag, nullptr);
      if (!h.is_ok()) return report_error(h.status());
      hw = std::move(*h);
    }
    place_ranks(hw, *g);
    auto base = run_graph(*g, hw, opt.fast);
    if (!base.is_ok()) return report_error(base.status());
    const double measured = g->measured_iteration_s, replayed = base->first;
    const bool timed = measured > 0;  // a Chakra trace without start times has no measured iteration
    const double error = timed ? (replayed - measured) / measured : 0;
    json row = {{"trace", path},
                {"rank", pid},
                {"hardware", hw.name},
                {"steps", {g->first_step, g->last_step}},
                {"tasks", g->schedule.tasks.size()},
                {"measured_iteration_s", timed ? json(measured) : json(nullptr)},
                {"replayed_iteration_s", replayed},
                {"error", timed ? json(error) : json(nullptr)}};
    // Trained with gradient accumulation: each iteration is a whole step of that many micro-batches.
    if (gas > 1) row["gradient_accumulation_steps"] = gas;
    if (g->peak_allocated[0] > 0 || g->peak_allocated[1] > 0) {
      row["measured_peak_allocated_bytes"] = {{"gpu", g->peak_allocated[0]}, {"cpu", g->peak_allocated[1]}};
    }
    if (!what_ifs.empty()) {
      HardwareSpec hw2 = hw;
      ReplayGraph g2 = *g;
      if (Status st = apply_what_ifs(what_ifs, gpu_spec.get(), hw2, g2); !st.is_ok()) return report_error(st);
      place_ranks(hw2, g2);
      auto w = run_graph(g2, hw2, opt.fast);
      if (!w.is_ok()) return report_error(w.status());
      row["what_if_iteration_s"] = w->first;
      row["what_if_speedup"] = replayed / w->first;
    }
    if (!opt.json) {
      std::printf("%s (rank %d, %zu tasks, steps %d:%d of %d) on %s:\n", path.c_str(), pid,
                  g->schedule.tasks.size(), g->first_step, g->last_step, g->steps_total, hw.name.c_str());
      if (timed) {
        std::printf("  measured %.4f s/iteration, replayed %.4f s (%+.1f%%)\n", measured, replayed,
                    100 * error);
      } else {
        std::printf("  replayed %.4f s/iteration (the trace has no timings to compare with)\n", replayed);
      }
      if (row.contains("what_if_iteration_s")) {
        std::string list;
        for (const auto& w : opt.what_ifs) list += (list.empty() ? "" : ", ") + w;
        std::printf("  what if %s: %.4f s/iteration (%.2fx)\n", list.c_str(),
                    row["what_if_iteration_s"].get<double>(), row["what_if_speedup"].get<double>());
      }
    }
    if (first_trace && !opt.trace_out.empty()) {
      Inputs in;
      in.hw = hw;
      // The replayed tasks, plus the measured memory timeline of the step (PyTorch profiler traces).
      const Status st =
          write_trace_file(opt.trace_out, opt.fast ? "reference" : "simgrid", "replay", g->schedule.ranks, in,
                           in.run, row.dump(), [&](trace::TraceWriter& w) {
                             export_run_trace(g->schedule, base->second, 0, w);
                             for (const auto& c : g->memory) w.counter(c);
                           });
      if (!st.is_ok()) return report_error(st);
      if (!opt.json) std::printf("  trace of the replay: %s\n", opt.trace_out.c_str());
    }
    out_ranks.push_back(row);
    first_trace = false;
    // The rank's collectives in order (kind and bytes), to match them across ranks.
    std::vector<std::pair<CollectiveKind, double>> seq;
    for (const Task& t : g->schedule.tasks) {
      if (t.kind == TaskKind::kCollective) seq.emplace_back(t.collective, t.bytes);
    }
    collectives.emplace_back(pid, std::move(seq));
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
    std::fprintf(stderr, "memwall: warning: unmatched collectives across ranks: %s\n", what.c_str());
  }
  if (opt.json)
    std::printf("%s\n", json({{"replay", out_ranks}, {"unmatched_collectives", mismatches}}).dump(2).c_str());
  return kExitOk;
}

}  // namespace

void register_replay(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<ReplayOptions>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay measured memwall traces in the simulator, on their hardware or another, with what-ifs");
  cmd->add_option("traces", opt->traces,
                  "Traces, e.g. one per rank: memwall or PyTorch profiler (.json, .json.gz), Chakra (.et)")
      ->required();
  cmd->add_option("--hardware,-H", opt->hardware,
                  "Hardware to replay on: scenario name or file (default: the trace's own, from its header)");
  cmd->add_option("--what-if", opt->what_ifs,
                  "key=value, repeatable: pcie=X, nvme=X, network=X, cpu_memory=X (bandwidth times X), "
                  "compute=X (X times faster), gpu=HARDWARE (its GPU), nodes=N");
  cmd->add_option("--steps", opt->steps, "Steps a:b of the trace to use (0-based, b exclusive; default all)");
  cmd->add_option("--trace", opt->trace_out, "Write the replayed run of the first trace as a memwall trace");
  cmd->add_flag("--fast", opt->fast, "The closed-form reference executor instead of SimGrid");
  cmd->add_flag("--json", opt->json, "One JSON document");
  cmd->callback([opt, &exit_code] { exit_code = run_replay(*opt); });
}

}  // namespace memwall::cli
