// `memwall simulate`: the planner's schedule run on the SimGrid model of the hardware (or the reference
// executor with --fast): iteration time, TFLOP/s, where the time goes, achieved bandwidth, memory peaks.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "exec/executor.h"
#include "exec/run_analysis.h"
#include "graph/model_graph.h"
#include "input_options.h"
#include "memory/bandwidth_model.h"
#include "plan/planner.h"
#include "ranks_together.h"
#include "sim/simgrid_backend.h"
#include "simulate_experiment.h"
#if MEMWALL_WITH_SIMGRID
#include "sim/simulate.h"
#endif

namespace memwall::cli {

using nlohmann::json;

Status simulate_experiment(const SimulateCliOptions& opt, json& out, [[maybe_unused]] bool show_progress) {
  Result<Inputs> in = load_inputs(opt.inputs);
  if (!in.is_ok()) return in.status();
  if (!opt.what_ifs.empty()) {
    auto what_ifs = parse_what_ifs(opt.what_ifs);
    if (!what_ifs.is_ok()) return what_ifs.status();
    MW_RETURN_IF_ERROR(what_ifs->apply(in->hw));
  }
  RunConfig run = in->run;
  MW_RETURN_IF_ERROR(resolve_run_config(run, in->model, in->hw));
  Result<Schedule> s = plan_iteration(in->model, run, in->hw);
  if (!s.is_ok()) return s.status();
  Result<MemoryTimeline> tl = replay_memory(*s);
  if (!tl.is_ok()) return tl.status();

  // Gradient accumulation: an iteration is G micro-steps back to back, the last with the optimizer step
  // (accumulated_schedule, the schedule memwall train runs such a step as).
  const int G = run.accumulation_steps();
  MW_RETURN_IF_ERROR(accumulation_fits(*s, G));
  const AccumulatedSchedule acc = G > 1 ? accumulated_schedule(*s, G) : AccumulatedSchedule{};
  const Schedule& iteration = G > 1 ? acc.schedule : *s;
  Result<Straggler> who = Straggler{};  // checked before anything is simulated
  if (!opt.straggler.empty()) {
    who = parse_straggler(opt.straggler, s->ranks_per_node);
    if (!who.is_ok()) return who.status();
    if (opt.iterations != 1) {
      return Status::invalid_argument("--straggler: simulates one iteration; allowed: --iterations 1");
    }
  }
  RunResult result;
  double iteration_s = 0;
  double node_busy[kResourceCount] = {};
  json sim_info;
  if (opt.fast) {
    ReferenceExecutor exec(in->hw, s->ranks_per_node);
    Result<RunResult> r = run_schedule(iteration, exec);
    if (!r.is_ok()) return r.status();
    result = std::move(*r);
    iteration_s = result.makespan_s;
    sim_info = {{"executor", "reference"}};
    // Ranks are identical and each has its fixed share of node resources: they run side by side.
    std::copy(std::begin(result.busy_s), std::end(result.busy_s), node_busy);
  } else {
#if MEMWALL_WITH_SIMGRID
    sim::SimulateOptions so;
    so.iterations = opt.iterations;
    // Progress on stderr (a large mixture of experts simulates for minutes), shown by the simulating child
    // process; its terminal line is cleared here.
    auto progress = std::make_shared<ProgressLine>();
    if (show_progress) {
      so.progress = [progress](double done, double t) {
        progress->show(strprintf("simulating: %.0f%% of rank 0's tasks done, %.1f s simulated, %s",
                                 100 * done, t, progress->clock().c_str()));
      };
    }
    Result<sim::SimulationResult> r = sim::simulate_schedule(iteration, in->hw, so);
    if (so.progress && progress->terminal()) std::fprintf(stderr, "\r%100s\r", "");
    if (!r.is_ok()) return r.status();
    result = std::move(r->rank0);
    iteration_s = r->iteration_s;
    std::copy(std::begin(r->node_busy_s), std::end(r->node_busy_s), node_busy);
    sim_info = {{"executor", "simgrid"},
                {"simgrid_version", sim::simgrid_version()},
                {"simulated_ranks", r->simulated_ranks},
                {"activities", r->activities},
                {"wall_s", r->wall_s},
                {"events_per_s", r->wall_s > 0 ? r->activities / r->wall_s : 0},
                {"peak_rss_bytes", r->peak_rss_bytes}};
#else
    return Status::unavailable("this memwall was built without SimGrid (MEMWALL_SIMGRID); use --fast");
#endif
  }
  if (!opt.straggler.empty()) {
    auto straggler = run_straggler(iteration, in->hw, *who, opt.fast);
    if (!straggler.is_ok()) return straggler.status();
    out["straggler"] = *straggler;
  }
  const RunBreakdown b = analyze_run(iteration, result);
  const BandwidthReport bw = analyze_bandwidth(in->model, run, in->hw, 0.9);
  const double flops = G * bw.flops_per_iteration;  // Eq. 7 is one micro-batch's
  const double tflops = flops / iteration_s / 1e12;
  const int gpus = run.memwall.data_parallel * run.memwall.model_parallel;
  const double rpn = s->ranks_per_node;

  out["memwall_version"] = MEMWALL_VERSION;
  out["command"] = "simulate";
  out["inputs"] = {{"hardware", json::parse(to_json_text(in->hw))},
                   {"model", json::parse(to_json_text(in->model))},
                   {"run", json::parse(to_json_text(run))}};
  out["warnings"] = in->diag.warnings;
  out["simulation"] = sim_info;
  out["iteration_s"] = iteration_s;
  out["tflops_per_gpu"] = tflops;
  out["pflops_total"] = tflops * gpus / 1e3;
  out["gpus"] = gpus;
  out["params"] = in->model.total_params();
  out["flops_per_gpu_per_iteration"] = flops;
  out["gradient_accumulation_steps"] = G;
  if (G > 1) {
    const std::vector<double> each = micro_batch_seconds(acc, result);
    double before = 0;
    for (int k = 0; k + 1 < G; ++k) before += each[static_cast<std::size_t>(k)];
    out["micro_step_s"] = before / (G - 1);  // the mean of the micro-steps without the optimizer
    out["last_micro_step_s"] = each.back();  // the last, with it
    out["micro_steps_s"] = each;
  }
  out["breakdown_s"] = {{"compute", b.compute_s},
                        {"exposed_communication", b.exposed_comm_s},
                        {"io_stall", b.io_stall_s},
                        {"idle", b.idle_s},
                        {"optimizer_step", b.optimizer_s}};
  // The roofline's split of the compute lane (uncontended): operators bound by memory bandwidth rather
  // than FLOPs (layernorm, GELU, attention's scores and probabilities, the loss at these sizes).
  // And by operator kind (linear, attention, layernorm, gelu, embedding, loss), uncontended.
  const ModelGraph graph = build_model_graph(in->model, graph_options(run));
  double memory_bound_s = 0;
  std::map<std::string, double> by_kind;
  for (const Task& t : iteration.tasks) {
    if (t.kind != TaskKind::kCompute || t.measured_s > 0) continue;
    const double secs = compute_seconds(in->hw, t.flops, t.bytes);
    if (memory_bound(in->hw, t.flops, t.bytes)) memory_bound_s += secs;
    if (t.op >= 0 && t.op < static_cast<int>(graph.ops.size()))
      by_kind[op_kind_name(graph.ops[static_cast<std::size_t>(t.op)].kind)] += secs;
  }
  out["compute_memory_bound_s"] = memory_bound_s;
  out["compute_by_op_s"] = by_kind;
  // As memwall train reports it: how long any transfer ran, and the share of it alongside work.
  out["transfer_s"] = b.transfer_s;
  out["transfer_overlap"] = b.transfer_s > 0 ? b.transfer_overlapped_s / b.transfer_s : 0.0;
  json links = json::object();
  for (Resource r :
       {Resource::kH2D, Resource::kD2H, Resource::kNvmeRead, Resource::kNvmeWrite, Resource::kNetwork}) {
    const int i = static_cast<int>(r);
    // Per node: every rank's bytes over the time any rank of the node used this kind of link.
    links[resource_name(r)] = {
        {"bytes_per_gpu", b.bytes[i]},
        {"busy_s", b.busy_s[i]},
        {"achieved_Bps_per_gpu", b.achieved_Bps(r)},
        {"node_busy_s", node_busy[i]},
        {"achieved_Bps_per_node", node_busy[i] > 0 ? b.bytes[i] * rpn / node_busy[i] : 0}};
  }
  out["links"] = links;
  out["peak_bytes"] = {
      {"gpu", tl->peak_bytes[0]}, {"cpu", tl->peak_bytes[1] * rpn}, {"nvme", tl->peak_bytes[2] * rpn}};
  out["optimizer_gradients"] = s->optimizer_gradients;
  out["notes"] = s->notes;
  if (G > 1) {
    out["notes"].push_back(strprintf(
        "gradient accumulation: %d micro-steps per iteration back to back, the first %d without the "
        "optimizer phase; times, bytes, the breakdown and a trace cover all of them",
        G, G - 1));
  }
  if (!opt.trace_path.empty()) {
    const json summary = {
        {"iteration_s", iteration_s}, {"tflops_per_gpu", tflops}, {"peak_bytes", out["peak_bytes"]}};
    MW_RETURN_IF_ERROR(write_run_trace(opt.trace_path, sim_info["executor"], "simulate", *in, run, iteration,
                                       result, summary.dump()));
    out["trace"] = opt.trace_path;
  }
  return Status::ok();
}

namespace {

void print_simulation(const json& o) {
  const auto& in = o["inputs"];
  std::printf("simulate %s on %s (%d node(s), %d GPUs) with %s [%s]\n",
              in["model"]["name"].get<std::string>().c_str(),
              in["hardware"]["name"].get<std::string>().c_str(), in["hardware"]["nodes"].get<int>(),
              o["gpus"].get<int>(), in["run"]["name"].get<std::string>().c_str(),
              o["simulation"]["executor"].get<std::string>().c_str());
  std::printf(
      "\niteration %.3f s   %.1f TFLOP/s per GPU   %.3f PFLOP/s total   (%.3g FLOP per GPU per iteration, "
      "Eq.7)\n\n",
      o["iteration_s"].get<double>(), o["tflops_per_gpu"].get<double>(), o["pflops_total"].get<double>(),
      o["flops_per_gpu_per_iteration"].get<double>());
  if (o.value("gradient_accumulation_steps", 1) > 1) {
    std::printf(
        "gradient accumulation: %d micro-batches per iteration, %d without the optimizer step (%.3f s "
        "each on average), then %.3f s with it\n\n",
        o["gradient_accumulation_steps"].get<int>(), o["gradient_accumulation_steps"].get<int>() - 1,
        o["micro_step_s"].get<double>(), o["last_micro_step_s"].get<double>());
  }
  const double it = o["iteration_s"].get<double>();
  std::printf("%-24s %11s %7s\n", "time (rank 0)", "seconds", "share");
  for (const char* k : {"compute", "exposed_communication", "io_stall", "idle", "optimizer_step"}) {
    const double v = o["breakdown_s"][k].get<double>();
    std::printf("%-24s %11.3f %6.1f%%\n", k, v, 100 * v / it);
    if (std::string(k) == "compute" && o.contains("compute_memory_bound_s")) {
      const double mb = o["compute_memory_bound_s"].get<double>();
      std::printf("%-24s %11.3f %6.1f%%   (ops the roofline finds bound by GPU memory)\n",
                  "  of it memory-bound", mb, 100 * mb / it);
      std::vector<std::pair<double, std::string>> kinds;
      double sum = 0;
      for (auto kv = o["compute_by_op_s"].begin(); kv != o["compute_by_op_s"].end(); ++kv) {
        kinds.emplace_back(kv.value().get<double>(), kv.key());
        sum += kinds.back().first;
      }
      std::sort(kinds.rbegin(), kinds.rend());
      std::string line;
      for (const auto& [secs, kind] : kinds) {
        line += strprintf("%s%s %.0f%%", line.empty() ? "" : ", ", kind.c_str(),
                          sum > 0 ? 100 * secs / sum : 0.0);
      }
      if (!line.empty()) std::printf("  by operator: %s\n", line.c_str());
    }
  }
  std::printf("transfers %.3f s, %.0f%% of it alongside compute or the optimizer\n",
              o["transfer_s"].get<double>(), 100 * o["transfer_overlap"].get<double>());
  std::printf("\n%-11s %14s %11s %16s %16s\n", "link", "bytes/GPU", "busy", "achieved/GPU", "achieved/node");
  for (auto it2 = o["links"].begin(); it2 != o["links"].end(); ++it2) {
    const auto& l = it2.value();
    std::printf("%-11s %14s %10.3fs %16s %16s\n", it2.key().c_str(), format_bytes(l["bytes_per_gpu"]).c_str(),
                l["busy_s"].get<double>(), format_bandwidth(l["achieved_Bps_per_gpu"]).c_str(),
                format_bandwidth(l["achieved_Bps_per_node"]).c_str());
  }
  std::printf("\npeak memory: GPU %s per GPU, CPU %s per node, NVMe %s per node\n",
              format_bytes(o["peak_bytes"]["gpu"]).c_str(), format_bytes(o["peak_bytes"]["cpu"]).c_str(),
              format_bytes(o["peak_bytes"]["nvme"]).c_str());
  if (o["simulation"]["executor"] == "simgrid") {
    const auto& s = o["simulation"];
    std::printf("simgrid %s: %d ranks simulated, %llu activities in %.2f s wall (%.0f per s), peak RSS %s\n",
                s["simgrid_version"].get<std::string>().c_str(), s["simulated_ranks"].get<int>(),
                static_cast<unsigned long long>(s["activities"].get<std::uint64_t>()),
                s["wall_s"].get<double>(), s["events_per_s"].get<double>(),
                format_bytes(s["peak_rss_bytes"]).c_str());
  }
  for (const auto& n : o["notes"]) std::printf("note: %s\n", n.get<std::string>().c_str());
  if (o.contains("trace")) std::printf("trace: %s\n", o["trace"].get<std::string>().c_str());
  if (o.contains("straggler")) {
    const auto& g = o["straggler"];
    const double even = g["even_iteration_s"].get<double>();
    std::printf(
        "\nstraggler: rank %d (on every node) computing %.3gx as long, the ranks waiting for each other at "
        "collectives: iteration %.3f s against %.3f s with every rank alike (%+.1f%%)\n",
        g["rank"].get<int>(), g["factor"].get<double>(), g["iteration_s"].get<double>(), even,
        100 * (g["slowdown"].get<double>() - 1));
    std::string waits;
    for (std::size_t r = 0; r < g["collective_wait_s"].size(); ++r) {
      waits += strprintf("%s%zu %.3f", waits.empty() ? "" : ", ", r, g["collective_wait_s"][r].get<double>());
    }
    std::printf("  time each rank's collectives waited for the others (s): %s\n", waits.c_str());
    if (std::abs(even / it - 1) > 0.01) {
      std::printf(
          "  (every rank alike and waiting for each other: %.3f s; the iteration above, %.3f s, lets ranks "
          "that contention pulled apart run on without waiting for each other at collectives; "
          "docs/simulator.md)\n",
          even, it);
    }
  }
  if (o.contains("what_if")) {
    const auto& w = o["what_if"];
    std::string list;
    for (const auto& c : w["changes"]) list += (list.empty() ? "" : ", ") + c.get<std::string>();
    std::printf("\nwhat if %s: iteration %.3f s, %.1f TFLOP/s per GPU: %.2fx the speed\n", list.c_str(),
                w["iteration_s"].get<double>(), w["tflops_per_gpu"].get<double>(),
                w["speedup"].get<double>());
    std::printf("%-24s %11s %11s\n", "time (rank 0)", "as is", "what if");
    for (const char* k : {"compute", "exposed_communication", "io_stall", "idle", "optimizer_step"}) {
      std::printf("%-24s %11.3f %11.3f\n", k, o["breakdown_s"][k].get<double>(),
                  w["breakdown_s"][k].get<double>());
      if (std::string(k) == "compute") {
        std::printf("%-24s %11.3f %11.3f\n", "  of it memory-bound",
                    o["compute_memory_bound_s"].get<double>(), w["compute_memory_bound_s"].get<double>());
      }
    }
  }
}

// The same experiment on the hardware changed by the what-ifs (planned and simulated again), beside `base`.
Status simulate_what_if(const SimulateCliOptions& opt, json& base) {
  SimulateCliOptions changed = opt;
  changed.trace_path.clear();
  changed.straggler.clear();
  json out;
  MW_RETURN_IF_ERROR(simulate_experiment(changed, out, false));
  const double it = out["iteration_s"].get<double>();
  base["what_if"] = {{"changes", opt.what_ifs},
                     {"hardware", out["inputs"]["hardware"]},
                     {"iteration_s", it},
                     {"tflops_per_gpu", out["tflops_per_gpu"]},
                     {"pflops_total", out["pflops_total"]},
                     {"gpus", out["gpus"]},
                     {"speedup", it > 0 ? base["iteration_s"].get<double>() / it : 0.0},
                     {"breakdown_s", out["breakdown_s"]},
                     {"compute_memory_bound_s", out["compute_memory_bound_s"]},
                     {"links", out["links"]},
                     {"peak_bytes", out["peak_bytes"]}};
  return Status::ok();
}

}  // namespace

void register_simulate(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<SimulateCliOptions>();
  auto* cmd = app.add_subcommand("simulate", "Iteration time on the SimGrid model of the hardware");
  add_input_options(cmd, opt->inputs);
  cmd->add_option("--iterations,-k", opt->iterations, "Iterations to simulate (the mean is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--fast", opt->fast, "Use the closed-form reference executor instead of SimGrid");
  cmd->add_flag("--json", opt->json, "Print one JSON object (schema: docs/cli.md)");
  cmd->add_option("--trace", opt->trace_path, "Write rank 0's trace (.json or .json.gz)");
  cmd->add_option(
      "--what-if", opt->what_ifs,
      "key=value, repeatable: also simulate on the hardware changed so, beside it: pcie=X, nvme=X, "
      "network=X, cpu_memory=X, gpu_memory=X (bandwidth times X), compute=X (FLOP/s times X), gpu=HARDWARE "
      "(its GPU), nodes=N");
  cmd->add_option("--straggler", opt->straggler,
                  "RANK:FACTOR: also run the node's ranks together, waiting for each other at collectives, "
                  "with rank RANK's compute FACTOR times as long (on every node)");
  cmd->callback([opt, &exit_code] {
    json out;
    SimulateCliOptions as_is = *opt;  // the hardware as given; the what-ifs run beside it
    as_is.what_ifs.clear();
    Status s = simulate_experiment(as_is, out, !opt->json);
    if (s.is_ok() && !opt->what_ifs.empty()) s = simulate_what_if(*opt, out);
    if (!s.is_ok()) {
      exit_code = report_error(s);
      return;
    }
    for (const auto& w : out["warnings"])
      std::fprintf(stderr, "memwall: warning: %s\n", w.get<std::string>().c_str());
    if (opt->json) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      print_simulation(out);
    }
    exit_code = kExitOk;
  });
}

}  // namespace memwall::cli
