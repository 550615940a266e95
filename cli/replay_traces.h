// The replay of measured traces (memwall's, PyTorch profiler, Chakra) on a hardware spec with what-ifs:
// `memwall replay` prints it, the Python module's replay() returns it.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"
#include "replay/joint.h"
#include "spec/hardware_spec.h"

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

// Each rank's time and its collectives' wait when the ranks run together.
struct JointTimes {
  double iteration_s = 0;
  std::vector<double> end_s, wait_s;
  std::vector<RunResult> runs;  // each rank's task timings
};

// Runs one node's ranks together (rank r's schedule at index r), each collective held until every rank of
// its meeting point has reached it: on SimGrid, or with `fast` on the reference executor
// (run_joint_reference). Shared by the joint replay and `memwall simulate --straggler`.
Result<JointTimes> run_joint(const std::vector<const Schedule*>& schedules, const HardwareSpec& hw,
                             const Rendezvous& meet, bool fast);

// `memwall simulate --straggler RANK:FACTOR` (and the Python module's `straggler=`): rank RANK of the
// simulated node computing FACTOR times as long.
struct Straggler {
  int rank = 0;
  double factor = 1;
};

// Parses "RANK:FACTOR", RANK one of the simulated node's `rpn` ranks and FACTOR in 1..100; a one-line error
// naming the text and what is allowed.
Result<Straggler> parse_straggler(const std::string& text, int rpn);

// The node's ranks of `iteration` run together (run_joint), collectives in program order, each held until
// the ranks of its group here have reached it, first all alike and then with `who`'s compute `factor` times
// as long (every node alike, node symmetry): {"rank", "factor", "even_iteration_s", "even_collective_wait_s",
// "iteration_s", "slowdown", "rank_iteration_s", "collective_wait_s"}.
Result<nlohmann::json> run_straggler(const Schedule& iteration, const HardwareSpec& hw, const Straggler& who,
                                     bool fast);

}  // namespace memwall::cli
