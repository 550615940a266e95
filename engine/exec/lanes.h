// LaneExecutor: core's Executor on real threads, one in-order lane per Resource (compute, h2d, d2h, NVMe
// read, NVMe write, network, CPU optimizer, and a bookkeeping lane for alloc/free), like CUDA streams. A lane
// runs its tasks in task-id order, each once run_schedule has submitted it (all its dependencies finished),
// so transfers on one lane overlap compute on another exactly as the schedule allows. Every dependency has a
// smaller id, so the lowest unfinished task can always start: in-order lanes never deadlock. Collectives
// run in the same order on every rank (MPI needs that), and alloc/free run in the order the planner checked
// against capacity.
//
// What a task does is the binding's business (engine/train binds tasks to kernels, memcpy, the tensor
// store, MPI and Adam). Tasks the `include` mask leaves out complete at once without running.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "exec/executor.h"

namespace memwall::exec {

class LaneExecutor final : public Executor {
 public:
  using Binding = std::function<Status(const Task&)>;
  // `s` must outlive the executor; `origin` is time zero of now() and of the completions.
  LaneExecutor(const Schedule& s, std::vector<char> include, Binding bind,
               std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now());
  ~LaneExecutor() override;  // stops the lanes (after a failure, tasks never submitted are dropped)
  LaneExecutor(const LaneExecutor&) = delete;
  LaneExecutor& operator=(const LaneExecutor&) = delete;

  const char* name() const override { return "cpu"; }
  ExecutorCaps caps() const override { return {true, true}; }
  double now() const override;
  Status submit(const Task& task) override;
  // The next finished task; the first binding error is returned here (and stops every lane).
  Result<Completion> wait_any() override;

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace memwall::exec
