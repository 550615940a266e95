// One node's ranks run together, each collective held until the ranks of its group have reached it (the
// joint replay's barriers, replay/joint.h), on SimGrid or the reference executor: shared by `memwall replay`
// (its ranks' traces together) and `memwall simulate --straggler` (and the Python module's).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"
#include "replay/joint.h"
#include "spec/hardware_spec.h"

namespace memwall::cli {

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
