// One simulated experiment (load, resolve, plan, simulate or --fast, analyse), shared by `memwall simulate`
// and `memwall sweep`. CLI-only.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "base/status.h"
#include "cli_common.h"

namespace memwall::cli {

struct SimulateCliOptions {
  InputOptions inputs;
  int iterations = 1;
  bool fast = false;
  bool json = false;
  std::string trace_path;
  std::vector<std::string> what_ifs;  // hardware changes (key=value), applied before anything is planned
  std::string straggler;              // "RANK:FACTOR": also run the node's ranks together with that one's
                                      // compute FACTOR times as long (empty: not)
};

// Fills `out` with the result object documented in docs/cli.md (simulate). Prints nothing except, when
// `show_progress` and stderr is a terminal, a progress line.
Status simulate_experiment(const SimulateCliOptions& opt, nlohmann::json& out, bool show_progress);

}  // namespace memwall::cli
