#include "replay/joint.h"

#include <algorithm>
#include <condition_variable>
#include <iterator>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "memory/bandwidth_model.h"

namespace memwall {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += ", ... " + std::to_string(ranks.back());
  return s;
}

}  // namespace

Result<Rendezvous> match_collectives(const std::vector<const Schedule*>& ranks,
                                     const std::vector<const std::map<int, std::vector<int>>*>& group_ranks) {
  const int n = static_cast<int>(ranks.size());
  Rendezvous meet;
  meet.point.resize(ranks.size());
  // (the group's ranks, k) -> meeting point; per point the replayed ranks that reach it, and one task there.
  std::map<std::pair<std::vector<int>, int>, int> points;
  std::vector<std::vector<int>> reached, members_of;
  std::vector<std::string> first_name;
  for (int r = 0; r < n; ++r) {
    const Schedule& s = *ranks[static_cast<std::size_t>(r)];
    std::vector<int> world(static_cast<std::size_t>(std::max(1, s.ranks)));
    std::iota(world.begin(), world.end(), 0);
    std::map<std::vector<int>, int> seen;  // collectives so far per group
    meet.point[static_cast<std::size_t>(r)].assign(s.tasks.size(), -1);
    for (const Task& t : s.tasks) {
      if (t.kind != TaskKind::kCollective || t.group <= 1) continue;
      const std::vector<int>* members = &world;
      if (group_ranks[static_cast<std::size_t>(r)] != nullptr) {
        const auto it = group_ranks[static_cast<std::size_t>(r)]->find(t.id);
        if (it != group_ranks[static_cast<std::size_t>(r)]->end()) members = &it->second;
      }
      const int k = seen[*members]++;
      auto [it, added] = points.try_emplace({*members, k}, static_cast<int>(points.size()));
      if (added) {
        reached.emplace_back();
        members_of.push_back(*members);
        first_name.push_back(t.name);
      }
      reached[static_cast<std::size_t>(it->second)].push_back(r);
      meet.point[static_cast<std::size_t>(r)][static_cast<std::size_t>(t.id)] = it->second;
    }
  }
  meet.parties.assign(points.size(), 0);
  for (const auto& [key, p] : points) {
    const auto i = static_cast<std::size_t>(p);
    std::vector<int> replayed;  // the group's members among the replayed ranks
    for (int m : key.first) {
      if (m < n) replayed.push_back(m);
    }
    if (reached[i] != replayed) {
      std::vector<int> missing, outside;
      std::set_difference(replayed.begin(), replayed.end(), reached[i].begin(), reached[i].end(),
                          std::back_inserter(missing));
      std::set_difference(reached[i].begin(), reached[i].end(), replayed.begin(), replayed.end(),
                          std::back_inserter(outside));
      const std::string what = "collective #" + std::to_string(key.second + 1) + " of the group of ranks " +
                               rank_list(key.first) + " ('" + first_name[i] + "' on rank " +
                               std::to_string(reached[i].front()) + ") ";
      if (missing.empty()) {
        return Status::failed_precondition(what + "is run by rank " + rank_list(outside) +
                                           ", which is not in that group");
      }
      return Status::failed_precondition(what + "is never reached by rank" +
                                         (missing.size() > 1 ? "s " : " ") + rank_list(missing) +
                                         ": the traces ran different collectives");
    }
    meet.parties[i] = static_cast<int>(replayed.size());
  }
  // Each rank reaches its meeting points in task order: where two ranks reach two of them in opposite
  // orders, each would wait for the other (NCCL would hang too, on one stream).
  std::vector<std::vector<int>> next(points.size());
  std::vector<int> before(points.size(), 0);
  for (const auto& ids : meet.point) {
    int last = -1;
    for (int p : ids) {
      if (p < 0) continue;
      if (last >= 0) {
        next[static_cast<std::size_t>(last)].push_back(p);
        ++before[static_cast<std::size_t>(p)];
      }
      last = p;
    }
  }
  std::vector<int> ready;
  for (std::size_t p = 0; p < points.size(); ++p) {
    if (before[p] == 0) ready.push_back(static_cast<int>(p));
  }
  std::size_t ordered = 0;
  while (!ready.empty()) {
    const int p = ready.back();
    ready.pop_back();
    ++ordered;
    for (int q : next[static_cast<std::size_t>(p)]) {
      if (--before[static_cast<std::size_t>(q)] == 0) ready.push_back(q);
    }
  }
  if (ordered < points.size()) {
    std::size_t stuck = 0;
    while (before[stuck] == 0) ++stuck;
    return Status::failed_precondition(
        "the ranks reach their collectives in different orders ('" + first_name[stuck] +
        "' among them): replayed together, they would wait for each other forever");
  }
  return meet;
}

Rendezvous planned_rendezvous(const Schedule& s, const HardwareSpec& hw) {
  const int rpn = std::max(1, s.ranks_per_node);
  Rendezvous meet;
  meet.point.assign(static_cast<std::size_t>(rpn), std::vector<int>(s.tasks.size(), -1));
  for (const Task& t : s.tasks) {
    if (t.kind != TaskKind::kCollective || t.group <= 1) continue;
    const int local = std::max(1, group_span(hw, t.group, t.group_nodes).per_node);
    if (local <= 1) continue;
    // The node's ranks in groups of `local`, each every `stride`-th rank of a block of local x stride.
    const int stride = std::max(1, t.group_stride);
    for (int block = 0; block < rpn; block += local * stride) {
      for (int first = block; first < std::min(block + stride, rpn); ++first) {
        const int point = static_cast<int>(meet.parties.size());
        int parties = 0;
        for (int r = first; r < rpn && parties < local; r += stride, ++parties)
          meet.point[static_cast<std::size_t>(r)][static_cast<std::size_t>(t.id)] = point;
        meet.parties.push_back(parties);
      }
    }
  }
  return meet;
}

Schedule collectives_in_program_order(const Schedule& s) {
  Schedule ordered = s;
  std::map<std::pair<int, int>, int> last;  // (resource, lane) -> its latest collective
  for (Task& t : ordered.tasks) {
    if (t.kind != TaskKind::kCollective) continue;
    const auto key = std::make_pair(static_cast<int>(t.resource), t.lane);
    const auto before = last.find(key);
    if (before != last.end() && before->second < t.id &&
        std::find(t.deps.begin(), t.deps.end(), before->second) == t.deps.end()) {
      t.deps.push_back(before->second);
    }
    last[key] = t.id;
  }
  return ordered;
}

Schedule slowed_compute(const Schedule& s, double factor) {
  Schedule slow = s;
  for (Task& t : slow.tasks) {
    if (t.kind != TaskKind::kCompute) continue;
    t.flops *= factor;
    t.bytes *= factor;
    t.measured_s *= factor;
  }
  return slow;
}

double collective_wait_s(const Schedule& s, const RunResult& run) {
  // Each lane's tasks by start: a task could start once the one before it on its lane had ended.
  std::map<std::pair<int, int>, std::vector<int>> lanes;
  for (const Task& t : s.tasks) {
    if (t.resource != Resource::kNone) lanes[{static_cast<int>(t.resource), t.lane}].push_back(t.id);
  }
  double wait = 0;
  for (auto& [lane, ids] : lanes) {
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
      return run.timing[static_cast<std::size_t>(a)].start_s <
             run.timing[static_cast<std::size_t>(b)].start_s;
    });
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const Task& t = s.tasks[static_cast<std::size_t>(ids[i])];
      if (t.kind != TaskKind::kCollective) continue;
      double ready = t.release_s;
      for (int d : t.deps) ready = std::max(ready, run.timing[static_cast<std::size_t>(d)].end_s);
      if (i > 0) ready = std::max(ready, run.timing[static_cast<std::size_t>(ids[i - 1])].end_s);
      wait += std::max(0.0, run.timing[static_cast<std::size_t>(t.id)].start_s - ready);
    }
  }
  return wait;
}

namespace {

// The ranks' meeting points as their runs reach them, one thread per rank: a rank's run stops at a collective
// until the point's last rank arrives. Stuck: every rank still running waits at a point another one never
// reaches first (a rank holds its other lanes while it waits, so ranks that meet two groups' collectives on
// different streams in different orders can stop each other); the runs then finish without waiting and are
// thrown away.
class Meetings {
 public:
  Meetings(const Rendezvous& meet, int ranks)
      : meet_(meet),
        arrived_(meet.parties.size(), 0),
        waiting_(meet.parties.size(), 0),
        at_(meet.parties.size(), 0.0),
        running_(ranks) {}

  double arrive(int rank, const Task& t, double ready) {
    const int p = meet_.point[static_cast<std::size_t>(rank)][static_cast<std::size_t>(t.id)];
    if (p < 0) return ready;
    const auto i = static_cast<std::size_t>(p);
    std::unique_lock<std::mutex> lock(mu_);
    at_[i] = std::max(at_[i], ready);
    if (++arrived_[i] == meet_.parties[i]) {
      blocked_ -= waiting_[i];
      waiting_[i] = 0;
      cv_.notify_all();
      return at_[i];
    }
    ++waiting_[i];
    ++blocked_;
    check_stuck();
    cv_.wait(lock, [&] { return arrived_[i] == meet_.parties[i] || stuck_; });
    return at_[i];
  }

  void finished() {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    check_stuck();
  }

  bool stuck() const { return stuck_; }

 private:
  void check_stuck() {
    if (running_ > 0 && blocked_ == running_ && !stuck_) {
      stuck_ = true;
      cv_.notify_all();
    }
  }

  const Rendezvous& meet_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> arrived_, waiting_;
  std::vector<double> at_;
  int running_, blocked_ = 0;
  bool stuck_ = false;
};

// Rounds instead of threads: each rank runs alone with every collective released at the latest time any of
// its ranks reached it in the round before, until those times settle (they only grow; each round settles at
// least the earliest still moving, so this takes up to one round per meeting point).
Result<JointRun> run_joint_rounds(const std::vector<const Schedule*>& ranks, const Rendezvous& meet,
                                  const HardwareSpec& hw) {
  std::vector<Schedule> runs;
  for (const Schedule* s : ranks) runs.push_back(*s);
  std::vector<double> at(meet.parties.size(), 0.0);  // when each meeting point's last rank arrived
  JointRun out;
  for (out.rounds = 1; out.rounds <= static_cast<int>(at.size()) + 2; ++out.rounds) {
    out.ranks.clear();
    std::vector<double> next(at.size(), 0.0);
    for (std::size_t r = 0; r < runs.size(); ++r) {
      Schedule& s = runs[r];
      for (Task& t : s.tasks) {
        const int p = meet.point[r][static_cast<std::size_t>(t.id)];
        if (p >= 0)
          t.release_s = std::max(ranks[r]->tasks[static_cast<std::size_t>(t.id)].release_s,
                                 at[static_cast<std::size_t>(p)]);
      }
      ReferenceExecutor exec(hw, s.ranks_per_node);
      auto run = run_schedule(s, exec);
      if (!run.is_ok()) return run.status();
      for (const Task& t : s.tasks) {
        const int p = meet.point[r][static_cast<std::size_t>(t.id)];
        if (p >= 0) {
          double& n = next[static_cast<std::size_t>(p)];
          n = std::max(n, run->timing[static_cast<std::size_t>(t.id)].start_s);
        }
      }
      out.ranks.push_back(std::move(*run));
    }
    bool settled = true;
    for (std::size_t p = 0; p < at.size(); ++p) settled = settled && next[p] <= at[p] + 1e-12 * (1 + at[p]);
    at = std::move(next);
    if (settled) {
      for (const RunResult& r : out.ranks) out.iteration_s = std::max(out.iteration_s, r.makespan_s);
      return out;
    }
  }
  return Status::internal("joint replay: the collectives' meeting times did not settle");  // (ordered above)
}

}  // namespace

Result<JointRun> run_joint_reference(const std::vector<const Schedule*>& ranks, const Rendezvous& meet,
                                     const HardwareSpec& hw) {
  const int n = static_cast<int>(ranks.size());
  Meetings meetings(meet, n);
  std::vector<Result<RunResult>> runs(ranks.size(), Status::internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const Schedule& s = *ranks[static_cast<std::size_t>(r)];
      ReferenceExecutor exec(hw, s.ranks_per_node);
      exec.set_start_gate([&](const Task& t, double ready) { return meetings.arrive(r, t, ready); });
      runs[static_cast<std::size_t>(r)] = run_schedule(s, exec);
      meetings.finished();
    });
  }
  for (std::thread& t : threads) t.join();
  if (meetings.stuck()) return run_joint_rounds(ranks, meet, hw);
  JointRun out;
  out.rounds = 1;
  for (auto& run : runs) {
    if (!run.is_ok()) return run.status();
    out.iteration_s = std::max(out.iteration_s, run->makespan_s);
    out.ranks.push_back(std::move(*run));
  }
  return out;
}

}  // namespace memwall
