// `memwall plan`: the planner's schedule for one iteration, its memory peaks against `memwall predict`,
// and the reference executor's run of it, written as a trace.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "exec/executor.h"
#include "exec/trace_export.h"
#include "input_options.h"
#include "memory/memory_model.h"
#include "plan/planner.h"
#include "trace/trace.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct PlanOptions {
  InputOptions inputs;
  bool json = false;
  std::string trace_path;
};

int run_plan(const PlanOptions& opt) {
  Result<Inputs> in = load_inputs(opt.inputs);
  if (!in.is_ok()) return report_error(in.status());
  print_warnings(in->diag);
  RunConfig run = in->run;
  Status resolved = resolve_run_config(run, in->model, in->hw);
  if (!resolved.is_ok()) return report_error(resolved);
  Result<Schedule> planned = plan_iteration(in->model, run, in->hw);
  if (!planned.is_ok()) return report_error(planned.status());
  // With gradient accumulation an iteration is G micro-batches back to back (as simulate and train run it).
  const int G = run.accumulation_steps();
  if (Status s = accumulation_fits(*planned, G); !s.is_ok()) return report_error(s);
  const AccumulatedSchedule acc = G > 1 ? accumulated_schedule(*planned, G) : AccumulatedSchedule{};
  const Schedule* s = G > 1 ? &acc.schedule : &*planned;
  Result<MemoryTimeline> tl = replay_memory(*s);
  if (!tl.is_ok()) return report_error(tl.status());
  ReferenceExecutor exec(in->hw, s->ranks_per_node);
  Result<RunResult> r = run_schedule(*s, exec);
  if (!r.is_ok()) return report_error(r.status());
  const MemoryEstimate analytic = estimate_memory(in->model, run, in->hw);

  // Totals.
  struct KindTotal {
    int count = 0;
    double bytes = 0;
    double flops = 0;
  };
  std::map<std::string, KindTotal> kinds;
  double link_bytes[kResourceCount] = {};
  for (const Task& t : s->tasks) {
    KindTotal& k = kinds[task_kind_name(t.kind)];
    ++k.count;
    k.bytes += t.bytes;
    k.flops += t.flops;
    if (t.kind != TaskKind::kOptimizerStep && t.kind != TaskKind::kCompute)
      link_bytes[static_cast<int>(t.resource)] += t.bytes;
  }
  const double rpn = s->ranks_per_node;
  const double peaks[kTierCount] = {tl->peak_bytes[0], tl->peak_bytes[1] * rpn, tl->peak_bytes[2] * rpn};
  const double flops = s->flops();
  const double tflops_per_gpu = flops / r->makespan_s / 1e12;

  json out;
  out["memwall_version"] = MEMWALL_VERSION;
  out["command"] = "plan";
  out["inputs"] = {{"hardware", json::parse(to_json_text(in->hw))},
                   {"model", json::parse(to_json_text(in->model))},
                   {"run", json::parse(to_json_text(run))}};
  out["warnings"] = in->diag.warnings;
  json by_kind = json::object();
  for (const auto& [name, k] : kinds)
    by_kind[name] = {{"count", k.count}, {"bytes", k.bytes}, {"flops", k.flops}};
  json links = json::object();
  json busy = json::object();
  for (int i = 0; i < kResourceCount; ++i) {
    if (static_cast<Resource>(i) == Resource::kNone) continue;
    links[resource_name(static_cast<Resource>(i))] = link_bytes[i];
    busy[resource_name(static_cast<Resource>(i))] = r->busy_s[i];
  }
  json peak = json::object(), predicted = json::object();
  for (int t = 0; t < kTierCount; ++t) {
    peak[tier_name(static_cast<Tier>(t))] = peaks[t];
    predicted[tier_name(static_cast<Tier>(t))] = analytic.tiers[t].used_bytes;
  }
  // Where each phase's memory peaks (setup: the persistent buffers), per GPU and per node like the peaks.
  json by_phase = json::object();
  for (int ph = 0; ph < kPhaseCount; ++ph) {
    json row = json::object();
    for (int t = 0; t < kTierCount; ++t)
      row[tier_name(static_cast<Tier>(t))] = tl->phase_peak_bytes[ph][t] * (t == 0 ? 1.0 : rpn);
    by_phase[phase_name(static_cast<Phase>(ph))] = row;
  }
  out["schedule"] = {{"tasks", s->tasks.size()},
                     {"buffers", s->buffers.size()},
                     {"gradient_accumulation_steps", G},
                     {"optimizer_gradients", s->optimizer_gradients},
                     {"ranks", s->ranks},
                     {"ranks_per_node", s->ranks_per_node},
                     {"by_kind", by_kind},
                     {"bytes_per_link", links},
                     {"peak_bytes", peak},
                     {"predict_bytes", predicted},
                     {"peak_bytes_by_phase", by_phase},
                     {"notes", s->notes}};
  out["reference"] = {
      {"iteration_s", r->makespan_s},
      {"busy_s", busy},
      {"flops_per_gpu", flops},
      {"tflops_per_gpu", tflops_per_gpu},
      {"compute_utilization", r->busy_s[static_cast<int>(Resource::kCompute)] / r->makespan_s}};
  const json summary = {
      {"iteration_s", r->makespan_s}, {"tflops_per_gpu", tflops_per_gpu}, {"peak_bytes", peak}};
  if (!opt.trace_path.empty()) {
    Status ws = write_run_trace(opt.trace_path, "reference", "plan", *in, run, *s, *r, summary.dump());
    if (!ws.is_ok()) return report_error(ws);
    out["trace"] = opt.trace_path;
  }
  if (opt.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }

  std::printf(
      "plan     %s on %s (%d node(s) x %d GPUs) with %s%s: %zu tasks, %zu buffers for one iteration of rank 0"
      "%s (%d ranks run the same schedule)\n\n",
      in->model.name.c_str(), in->hw.name.c_str(), in->hw.nodes, in->hw.gpu.count, run.name.c_str(),
      run.memwall.attention == AttentionKernel::kFlash
          ? " (flash attention: FLOPs below are what its causal kernels execute)"
          : "",
      s->tasks.size(), s->buffers.size(),
      G > 1 ? (", " + std::to_string(G) + " micro-batches back to back").c_str() : "", s->ranks);
  std::printf("%-15s %8s %14s %14s\n", "task kind", "count", "bytes", "FLOPs");
  for (const auto& [name, k] : kinds) {
    std::printf("%-15s %8d %14s %14s\n", name.c_str(), k.count,
                k.bytes > 0 ? format_bytes(k.bytes).c_str() : "-",
                k.flops > 0 ? strprintf("%.3g", k.flops).c_str() : "-");
  }
  std::printf("\n%-14s %14s %12s %7s\n", "link", "bytes moved", "busy", "busy %");
  for (int i = 0; i < kResourceCount; ++i) {
    if (static_cast<Resource>(i) == Resource::kNone) continue;
    std::printf("%-14s %14s %11.3fs %6.1f%%\n", resource_name(static_cast<Resource>(i)),
                link_bytes[i] > 0 ? format_bytes(link_bytes[i]).c_str() : "-", r->busy_s[i],
                100 * r->busy_s[i] / r->makespan_s);
  }
  std::printf("\n%-5s %-9s %14s %14s %8s\n", "tier", "scope", "schedule peak", "predict", "diff");
  for (int t = 0; t < kTierCount; ++t) {
    const double a = analytic.tiers[t].used_bytes;
    std::printf("%-5s %-9s %14s %14s %7.1f%%\n", tier_name(static_cast<Tier>(t)), analytic.tiers[t].scope,
                format_bytes(peaks[t]).c_str(), format_bytes(a).c_str(),
                a > 0 ? 100 * (peaks[t] - a) / a : 0.0);
  }
  std::printf("\n%-10s %14s %14s %14s   (peak while the phase runs, in task order)\n", "phase", "gpu/GPU",
              "cpu/node", "nvme/node");
  for (int ph = 0; ph < kPhaseCount; ++ph) {  // in phase order
    const std::string name = phase_name(static_cast<Phase>(ph));
    const json& row = by_phase[name];
    if (row["gpu"].get<double>() + row["cpu"].get<double>() + row["nvme"].get<double>() <= 0) continue;
    std::printf("%-10s %14s %14s %14s\n", name.c_str(), format_bytes(row["gpu"]).c_str(),
                format_bytes(row["cpu"]).c_str(), format_bytes(row["nvme"]).c_str());
  }
  std::printf(
      "\nreference executor (closed form): iteration %.3f s, %.1f TFLOP/s per GPU of %.1f achievable, "
      "compute busy %.1f%%\n",
      r->makespan_s, tflops_per_gpu, in->hw.gpu.achievable_flops / 1e12,
      100 * r->busy_s[static_cast<int>(Resource::kCompute)] / r->makespan_s);
  for (const auto& n : s->notes) std::printf("note: %s\n", n.c_str());
  if (!opt.trace_path.empty())
    std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", opt.trace_path.c_str());
  return kExitOk;
}

}  // namespace

void register_plan(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<PlanOptions>();
  auto* cmd =
      app.add_subcommand("plan", "The schedule of one iteration, its memory peaks and a reference trace");
  add_input_options(cmd, opt->inputs);
  cmd->add_flag("--json", opt->json, "Print one JSON object (schema: docs/cli.md)");
  cmd->add_option("--trace", opt->trace_path, "Write the reference executor's trace (.json or .json.gz)");
  cmd->callback([opt, &exit_code] { exit_code = run_plan(*opt); });
}

}  // namespace memwall::cli
