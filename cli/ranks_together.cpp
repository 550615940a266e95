// One node's ranks run together (ranks_together.h).
#include "ranks_together.h"

#include <exception>

#if MEMWALL_WITH_SIMGRID
#include "sim/simulate.h"
#endif

namespace memwall::cli {

using nlohmann::json;

Result<JointTimes> run_joint(const std::vector<const Schedule*>& schedules, const HardwareSpec& hw,
                             const Rendezvous& meet, bool fast) {
  JointTimes out;
  if (fast) {
    auto r = run_joint_reference(schedules, meet, hw);
    if (!r.is_ok()) return r.status();
    out.iteration_s = r->iteration_s;
    for (std::size_t i = 0; i < schedules.size(); ++i) {
      out.end_s.push_back(r->ranks[i].makespan_s);
      out.wait_s.push_back(collective_wait_s(*schedules[i], r->ranks[i]));
    }
    out.runs = std::move(r->ranks);
    return out;
  }
#if MEMWALL_WITH_SIMGRID
  sim::SimulateOptions opt;
  opt.rank_schedules = schedules;
  opt.rendezvous = &meet;
  auto r = sim::simulate_schedule(*schedules[0], hw, opt);
  if (!r.is_ok()) return r.status();
  out.iteration_s = r->iteration_s;
  out.end_s = r->rank_end_s;
  out.wait_s = r->rank_collective_wait_s;
  out.runs.push_back(std::move(r->rank0));
  for (RunResult& other : r->other_ranks) out.runs.push_back(std::move(other));
  return out;
#else
  (void)hw;
  (void)meet;
  return Status::unavailable("memwall was built without SimGrid: use --fast (the reference executor)");
#endif
}

Result<Straggler> parse_straggler(const std::string& text, int rpn) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("--straggler '" + text + "': " + why +
                                    "; allowed: RANK:FACTOR, RANK 0.." + std::to_string(rpn - 1) +
                                    " (the simulated node's ranks) and FACTOR 1..100 (how many times as long "
                                    "its compute takes), e.g. 3:1.2");
  };
  const auto colon = text.find(':');
  if (colon == std::string::npos) return bad("no ':'");
  Straggler s;
  try {
    std::size_t used = 0;
    s.rank = std::stoi(text.substr(0, colon), &used);
    if (used != colon) return bad("the rank is not an integer");
    const std::string f = text.substr(colon + 1);
    s.factor = std::stod(f, &used);
    if (used != f.size()) return bad("the factor is not a number");
  } catch (const std::exception&) {
    return bad("not a rank and a factor");
  }
  if (s.rank < 0 || s.rank >= rpn) return bad("rank " + std::to_string(s.rank) + " is not on the node");
  if (!(s.factor >= 1 && s.factor <= 100))
    return bad("factor " + text.substr(colon + 1) + " is out of range");
  return s;
}

Result<json> run_straggler(const Schedule& iteration, const HardwareSpec& hw, const Straggler& who,
                           bool fast) {
  const Schedule ordered = collectives_in_program_order(iteration);
  const Rendezvous meet = planned_rendezvous(ordered, hw);
  std::vector<const Schedule*> ranks(static_cast<std::size_t>(ordered.ranks_per_node), &ordered);
  auto even = run_joint(ranks, hw, meet, fast);
  if (!even.is_ok()) return even.status();
  const Schedule slow = slowed_compute(ordered, who.factor);
  ranks[static_cast<std::size_t>(who.rank)] = &slow;
  auto straggling = run_joint(ranks, hw, meet, fast);
  if (!straggling.is_ok()) return straggling.status();
  return json{{"rank", who.rank},
              {"factor", who.factor},
              {"even_iteration_s", even->iteration_s},
              {"even_collective_wait_s", even->wait_s},
              {"iteration_s", straggling->iteration_s},
              {"slowdown", straggling->iteration_s / even->iteration_s},
              {"rank_iteration_s", straggling->end_s},
              {"collective_wait_s", straggling->wait_s}};
}

}  // namespace memwall::cli
