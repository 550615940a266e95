// In-order lanes behind core's Executor interface (see lanes.h).
#include "engine/exec/lanes.h"

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace memwall::exec {

struct LaneExecutor::State {
  const Schedule* s = nullptr;
  std::vector<char> include;
  Binding bind;
  std::chrono::steady_clock::time_point origin;
  std::array<std::vector<int>, kResourceCount> lanes;  // task ids per lane, ascending
  std::vector<char> submitted;
  std::mutex mu;
  std::array<std::condition_variable, kResourceCount> cv;  // each lane waits for its own submissions
  std::condition_variable done_cv;                         // wait_any waits for completions
  std::deque<Completion> done;
  bool stop = false;
  Status error = Status::ok();
  std::vector<std::thread> threads;

  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
  }

  void lane(std::size_t l) {
    for (int id : lanes[l]) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv[l].wait(lock, [&] { return stop || submitted[static_cast<std::size_t>(id)] != 0; });
        if (stop) return;
      }
      const Task& t = s->tasks[static_cast<std::size_t>(id)];
      const double start = now();
      Status st = bind(t);
      const double end = now();
      std::lock_guard<std::mutex> lock(mu);
      if (!st.is_ok()) {
        if (error.is_ok()) error = std::move(st);
        stop = true;
        for (auto& c : cv) c.notify_all();
        done_cv.notify_all();
        return;
      }
      done.push_back({id, start, end});
      done_cv.notify_all();
    }
  }
};

LaneExecutor::LaneExecutor(const Schedule& s, std::vector<char> include, Binding bind,
                           std::chrono::steady_clock::time_point origin)
    : st_(std::make_unique<State>()) {
  MW_CHECK(include.size() == s.tasks.size(), "LaneExecutor: one include flag per task");
  st_->s = &s;
  st_->include = std::move(include);
  st_->bind = std::move(bind);
  st_->origin = origin;
  st_->submitted.assign(s.tasks.size(), 0);
  for (const Task& t : s.tasks) {
    if (st_->include[static_cast<std::size_t>(t.id)] != 0)
      st_->lanes[static_cast<std::size_t>(t.resource)].push_back(t.id);
  }
  for (std::size_t l = 0; l < st_->lanes.size(); ++l) {
    if (!st_->lanes[l].empty()) st_->threads.emplace_back([this, l] { st_->lane(l); });
  }
}

LaneExecutor::~LaneExecutor() {
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->stop = true;
  }
  for (auto& c : st_->cv) c.notify_all();
  for (auto& th : st_->threads) th.join();
}

double LaneExecutor::now() const {
  return st_->now();
}

Status LaneExecutor::submit(const Task& task) {
  std::lock_guard<std::mutex> lock(st_->mu);
  if (!st_->error.is_ok()) return st_->error;
  if (st_->include[static_cast<std::size_t>(task.id)] == 0) {
    const double t = st_->now();
    st_->done.push_back({task.id, t, t});
    return Status::ok();
  }
  st_->submitted[static_cast<std::size_t>(task.id)] = 1;
  st_->cv[static_cast<std::size_t>(task.resource)].notify_one();
  return Status::ok();
}

Result<Completion> LaneExecutor::wait_any() {
  std::unique_lock<std::mutex> lock(st_->mu);
  st_->done_cv.wait(lock, [&] { return !st_->error.is_ok() || !st_->done.empty(); });
  if (!st_->error.is_ok()) return st_->error;
  const Completion c = st_->done.front();
  st_->done.pop_front();
  return c;
}

}  // namespace memwall::exec
