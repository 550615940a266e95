// Joint replay of one job's ranks: each rank runs its own measured graph, and a collective starts only once
// every rank of its process group that is replayed has reached it, so a rank that computes longer holds the
// others back at the next collective they share, as NCCL does (a per-trace replay runs every rank of the node
// with the one trace's graph, so it cannot show such waits).
//
// Rank r's k-th collective of a process group meets the k-th collective of that group on each of the group's
// other replayed ranks (the world's group: every rank). Only one node's ranks are replayed (0 to ranks per
// node - 1, node symmetry as in sim/simulate.h): members on other nodes are taken to arrive with these.
#pragma once

#include <map>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"
#include "replay/replay.h"
#include "spec/hardware_spec.h"

namespace memwall {

// Where the ranks' collectives meet.
struct Rendezvous {
  std::vector<std::vector<int>> point;  // per replayed rank: task id -> its meeting point, or -1
  std::vector<int> parties;             // per meeting point: the replayed ranks that meet there
};

// Matches the collectives of graphs[0..n-1] (rank r's graph at index r, all of one job). Fails naming the
// first collective that a member of its group never reaches (the ranks ran different collectives: a joint
// replay would wait forever).
Result<Rendezvous> match_collectives(const std::vector<const Schedule*>& ranks,
                                     const std::vector<const std::map<int, std::vector<int>>*>& group_ranks);

// Where the ranks of a planned schedule (every rank of the node running `s`) meet: each collective of a
// group of more than one GPU on the node, among the group's ranks here (`group_span`'s GPUs per node,
// consecutive ranks, as the simulator's rings run). For `memwall simulate --straggler`.
Rendezvous planned_rendezvous(const Schedule& s, const HardwareSpec& hw);

// `s` with each collective made to follow the one before it on its lane in task order (a dependency), as a
// program issues its collectives to NCCL in program order on every rank. The driver otherwise submits tasks
// as their dependencies finish, and ranks whose transfers run at different speeds could reach two
// collectives in different orders and wait for each other forever.
Schedule collectives_in_program_order(const Schedule& s);

// A copy of `s` whose GPU computes `factor` times as long (a straggler): every compute task's FLOPs, device
// memory traffic and measured duration times `factor`.
Schedule slowed_compute(const Schedule& s, double factor);

// Time each rank spent in the run with a collective ready to start (its dependencies done, its launch
// reached, its lane free) but held back until the other ranks of its group reached it.
double collective_wait_s(const Schedule& s, const RunResult& run);

struct JointRun {
  std::vector<RunResult> ranks;  // each rank's timings, on one clock
  double iteration_s = 0;        // the last rank's end
  int rounds = 0;                // reference executor: 1, or the rounds it took
};

// The joint replay on the reference executor (which has no contention across ranks): the ranks run at once,
// one thread each, a collective starting when the last rank of its meeting point is ready to start it. Where
// that stalls (ranks that meet two groups on different streams in different orders), rounds of runs with
// each collective released when its last rank arrived in the round before, until those times settle.
Result<JointRun> run_joint_reference(const std::vector<const Schedule*>& ranks, const Rendezvous& meet,
                                     const HardwareSpec& hw);

}  // namespace memwall
