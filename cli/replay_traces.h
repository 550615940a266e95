// The replay of measured traces (memwall's, PyTorch profiler, Chakra) on a hardware spec with what-ifs:
// `memwall replay` prints it, the Python module's replay() returns it.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace memwall::cli {

struct ReplayRequest {
  std::vector<std::string> traces;  // files, or directories of *.json, *.json.gz and *.et
  std::string hardware;             // scenario name or file; empty: each trace's own (memwall traces)
  std::vector<std::string> what_ifs;
  std::string steps;      // "a:b", 0-based, b exclusive; empty: all
  std::string trace_out;  // write the replayed run here: the ranks together's, else the first trace's
  bool fast = false;      // the reference executor instead of SimGrid
};

// `memwall replay --json`'s document: {"replay": [a row per trace: "trace", "rank", "hardware", "steps",
// "steps_total", "tasks", "measured_iteration_s", "replayed_iteration_s", "error", ...],
// "unmatched_collectives":
// [...]}. What each trace holds and notes go to `log` (nullptr: nowhere).
Result<nlohmann::json> replay_traces(const ReplayRequest& req, std::FILE* log);

}  // namespace memwall::cli
