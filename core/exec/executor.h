// Executor: runs the tasks of a Schedule and owns the clock. Implementations: the reference executor
// (below, closed-form, for tests and `--fast`), the SimGrid executor (sim/), real executors (engine/).
//
// The driver (run_schedule) submits a task once all its dependencies have completed and asks for
// completions one at a time. Capabilities are optional and the driver falls back when one is missing; it
// never asks which executor it has.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "plan/schedule.h"
#include "spec/hardware_spec.h"

namespace memwall {

struct ExecutorCaps {
  // Tasks on different resources run at the same time. Without it the driver runs one task at a time.
  bool concurrent_resources = true;
  // The executor allocates real memory for kAlloc/kFree tasks. Without it the driver completes them
  // itself, instantly, as bookkeeping.
  bool allocates_memory = false;
};

struct Completion {
  int task = -1;
  double start_s = 0;
  double end_s = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* name() const = 0;
  virtual ExecutorCaps caps() const = 0;
  // Current time in seconds (simulated or measured) since the executor started.
  virtual double now() const = 0;
  // Starts (or queues on its resource) a task whose dependencies have completed.
  virtual Status submit(const Task& task) = 0;
  // The next completion among submitted tasks; advances the clock to it. Fails if nothing is in flight.
  virtual Result<Completion> wait_any() = 0;
};

// Durations from the hardware file, with no contention but the NVMe drives': each resource runs one task at a
// time at its full rate (compute at achievable FLOP/s; copies over the per-GPU host path with all of the
// node's ranks active, or one GPU's link for a broadcast owner; NVMe at the node's rate shared by its ranks,
// a read and a write at once sharing the drives' combined read+write rate (the one contention it models);
// collectives at the all-gather algorithm bandwidth, twice the bytes for an all-reduce; the optimizer step at
// the memory bandwidth of the tier holding the states). A resource's lanes (Task::lane: a replayed trace's
// streams) run side by side, each in order, without slowing each other; NVMe has one lane per direction.
class ReferenceExecutor final : public Executor {
 public:
  ReferenceExecutor(const HardwareSpec& hw, int ranks_per_node);
  ~ReferenceExecutor() override;
  const char* name() const override { return "reference"; }
  ExecutorCaps caps() const override { return {}; }
  double now() const override;
  Status submit(const Task& task) override;
  Result<Completion> wait_any() override;

  // The duration this executor gives a task (seconds).
  double duration(const Task& task) const;

  // Called as a task is about to start at `ready` (its lane free, its release reached): returns when it starts
  // instead (no earlier). The joint replay's collectives wait there for the other ranks (replay/joint.h).
  using StartGate = std::function<double(const Task& task, double ready)>;
  void set_start_gate(StartGate gate) { gate_ = std::move(gate); }

 private:
  struct State;
  void start(int resource, int lane, const Task& task);
  void nvme_rates(double rate[2]) const;
  void advance_nvme(double to);
  double rate_alone(int lane) const;
  std::unique_ptr<State> state_;
  const HardwareSpec hw_;
  const int ranks_per_node_;
  StartGate gate_;
};

struct RunResult {
  double makespan_s = 0;
  std::vector<Completion> timing;      // indexed by task id
  double busy_s[kResourceCount] = {};  // time each resource was occupied
};

// What run_schedule needs of a schedule beyond its tasks, the same for every run of it (the simulator runs
// one schedule on every rank of a node: one index for all of them).
struct ScheduleIndex {
  std::vector<std::size_t> first;  // task d's dependents are dependents[first[d] .. first[d + 1])
  std::vector<int> dependents;     // in task order
  std::vector<int> memory_ops;     // alloc/free tasks in the planner's order
};
ScheduleIndex index_schedule(const Schedule& s);

// Runs every task of `s` on `exec` in dependency order: a task is submitted once its dependencies have
// completed, lowest id first. With s.memory_in_program_order (run key memwall.memory_order "program", what
// memwall train's executor does) alloc/free tasks follow the planner's order strictly, each waiting for
// every earlier one, so memory is taken and given back in the order whose peak the planner checked.
// `index`: index_schedule(s) (made here when not given).
Result<RunResult> run_schedule(const Schedule& s, Executor& exec, const ScheduleIndex* index = nullptr);

// The run of accumulated_schedule(s, G) from the runs of its G copies (runs[k]: micro-batch k's timings,
// indexed by the task ids of `s`, on one clock): makespan and busy time summed over the runs.
RunResult accumulated_run(const AccumulatedSchedule& a, const std::vector<RunResult>& runs);
// How long each micro-batch of a run of accumulated_schedule took: from the end of the one before (the
// run's first start for the first) to the end of its last task.
std::vector<double> micro_batch_seconds(const AccumulatedSchedule& a, const RunResult& run);

}  // namespace memwall
