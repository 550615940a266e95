// `memwall replay TRACE... [--hardware H] [--what-if key=value ...] [--steps a:b] [--trace out.json] [--fast]
// [--json]`: re-runs measured traces in the simulator (measured compute, re-simulated transfers) on their own
// or another hardware spec and prints measured vs replayed iteration time per rank and what-if predictions
// (the engine: replay_traces.h).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "replay_traces.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct ReplayOptions {
  ReplayRequest req;  // --hardware defaults to each trace's own
  bool json = false;
};

// "measured ... replayed ... (error)" of a row (a trace's, or the ranks together's); `measured_what` after
// the measured time, `untimed` after the replayed one where nothing was measured.
void print_times(const json& row, const char* measured_what, const char* untimed) {
  const double replayed = row["replayed_iteration_s"].get<double>();
  if (row["measured_iteration_s"].is_number()) {
    std::printf("  measured %.4f s/iteration%s, replayed %.4f s (%+.1f%%)\n",
                row["measured_iteration_s"].get<double>(), measured_what, replayed,
                100 * row["error"].get<double>());
  } else {
    std::printf("  replayed %.4f s/iteration%s\n", replayed, untimed);
  }
}

int run_replay(const ReplayOptions& opt) {
  auto out = replay_traces(opt.req, opt.json ? nullptr : stderr);
  if (!out.is_ok()) return report_error(out.status());
  for (const auto& m : (*out)["unmatched_collectives"]) {
    std::fprintf(stderr, "memwall: warning: unmatched collectives across ranks: %s\n",
                 m.get<std::string>().c_str());
  }
  if (opt.json) {
    std::printf("%s\n", out->dump(2).c_str());
    return kExitOk;
  }
  std::string what_ifs;
  for (const auto& w : opt.req.what_ifs) what_ifs += (what_ifs.empty() ? "" : ", ") + w;
  bool first = true;
  for (const json& row : (*out)["replay"]) {
    std::printf("%s (rank %d, %zu tasks, steps %d:%d of %d) on %s:\n",
                row["trace"].get<std::string>().c_str(), row["rank"].get<int>(),
                row["tasks"].get<std::size_t>(), row["steps"][0].get<int>(), row["steps"][1].get<int>(),
                row["steps_total"].get<int>(), row["hardware"].get<std::string>().c_str());
    print_times(row, "", " (the trace has no timings to compare with)");
    if (row.contains("lanes")) {
      std::string lanes;
      for (const auto& [name, n] : row["lanes"].items())
        lanes += (lanes.empty() ? "" : ", ") + name + " " + std::to_string(n.get<int>());
      std::printf("  lanes side by side (the trace's streams or threads): %s\n", lanes.c_str());
    }
    if (row.contains("what_if_iteration_s")) {
      std::printf("  what if %s: %.4f s/iteration (%.2fx)\n", what_ifs.c_str(),
                  row["what_if_iteration_s"].get<double>(), row["what_if_speedup"].get<double>());
    }
    if (first && !opt.req.trace_out.empty() && !(*out)["joint"].is_object())
      std::printf("  trace of the replay: %s\n", opt.req.trace_out.c_str());
    first = false;
  }
  if (const json& joint = (*out)["joint"]; joint.is_object()) {
    std::printf(
        "ranks 0 to %d together on %s (each its own trace; a collective starts once its group's ranks "
        "reach it):\n",
        joint["ranks"].get<int>() - 1, joint["hardware"].get<std::string>().c_str());
    print_times(joint, " (the slowest rank)", "");
    std::string waits;
    const json& wait = joint["collective_wait_s"];
    for (std::size_t r = 0; r < wait.size(); ++r) {
      waits +=
          (r > 0 ? ", " : "") + std::to_string(r) + ": " + strprintf("%.2f ms", 1e3 * wait[r].get<double>());
    }
    std::printf("  slowest rank %d; time each rank's collectives waited for the others: %s\n",
                joint["slowest_rank"].get<int>(), waits.c_str());
    if (joint.contains("what_if_iteration_s")) {
      std::printf("  what if %s: %.4f s/iteration (%.2fx)\n", what_ifs.c_str(),
                  joint["what_if_iteration_s"].get<double>(), joint["what_if_speedup"].get<double>());
    }
    if (!opt.req.trace_out.empty())
      std::printf("  trace of the replay (every rank): %s\n", opt.req.trace_out.c_str());
  }
  return kExitOk;
}

}  // namespace

void register_replay(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<ReplayOptions>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay measured traces (memwall, PyTorch profiler, Chakra) in the simulator, on any hardware, with "
      "what-ifs");
  cmd->add_option("traces", opt->req.traces,
                  "Traces, e.g. one per rank: memwall or PyTorch profiler (.json, .json.gz), Chakra (.et)")
      ->required();
  cmd->add_option("--hardware,-H", opt->req.hardware,
                  "Hardware to replay on: scenario name or file (default: the trace's own, from its header)");
  cmd->add_option(
      "--what-if", opt->req.what_ifs,
      "key=value, repeatable: pcie=X, nvme=X, network=X, cpu_memory=X, gpu_memory=X (bandwidth times "
      "X), "
      "compute=X (GPU compute X times faster), gpu=HARDWARE (its GPU), nodes=N");
  cmd->add_option("--steps", opt->req.steps,
                  "Steps a:b of the trace to use (0-based, b exclusive; default all)");
  cmd->add_option("--trace", opt->req.trace_out,
                  "Write the replayed run as a memwall trace: every rank's where they are replayed together, "
                  "else the first trace's");
  cmd->add_flag("--fast", opt->req.fast, "The closed-form reference executor instead of SimGrid");
  cmd->add_flag("--json", opt->json, "One JSON document");
  cmd->callback([opt, &exit_code] { exit_code = run_replay(*opt); });
}

}  // namespace memwall::cli
