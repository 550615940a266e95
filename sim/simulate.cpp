// SimGridExecutor (one per simulated rank, driven by run_schedule inside a SimGrid actor) and the forked
// simulation entry point.
#include "sim/simulate.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xbt/log.h>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <queue>

#include "base/units.h"
#include "memory/bandwidth_model.h"
#include "sim/platform.h"

namespace memwall::sim {

namespace {

// Rank `rank` of the node: submits each task as SimGrid activities and reports completions.
class SimGridExecutor final : public Executor {
 public:
  SimGridExecutor(const Platform& p, int rank, int ranks_per_node, std::uint64_t& activities)
      : p_(p), rank_(rank), rpn_(ranks_per_node), activities_(activities) {}

  const char* name() const override { return "simgrid"; }
  ExecutorCaps caps() const override { return {}; }
  double now() const override { return sg4::Engine::get_clock() - origin_; }
  void reset_origin() { origin_ = sg4::Engine::get_clock(); }

  // Each rank runs one task per resource at a time, in submission order, like a CUDA stream or copy engine,
  // an NCCL stream, an NVMe queue or the optimizer thread; contention comes from the other ranks and from
  // links that several resources cross.
  Status submit(const Task& t) override {
    const int r = static_cast<int>(t.resource);
    if (busy_[r]) {
      queued_[r].push_back(&t);
      return Status::ok();
    }
    busy_[r] = true;
    return launch(t);
  }

  Status launch(const Task& t) {
    const HardwareSpec& hw = p_.hardware();
    Pending& pend = pending_[t.id];
    pend.start = now();
    pend.resource = static_cast<int>(t.resource);
    switch (t.kind) {
      case TaskKind::kCompute:
        start(t.id, exec_on(p_.gpu(rank_), std::max(t.flops, 1.0)));
        break;
      case TaskKind::kOptimizerStep:
        if (t.dst == Tier::kGpu) {
          start(t.id, exec_on(p_.gpu(rank_), t.bytes * hw.gpu.achievable_flops / hw.gpu.hbm_Bps));
        } else {
          start(t.id, exec_on(p_.cpu(), t.bytes));  // CPU host speed is DRAM bytes/s
        }
        break;
      case TaskKind::kCopy: {
        sg4::Host* gpu = p_.gpu(rank_);
        start(t.id, t.dst == Tier::kGpu ? sg4::Comm::sendto_async(p_.cpu(), gpu, t.bytes)
                                        : sg4::Comm::sendto_async(gpu, p_.cpu(), t.bytes));
        break;
      }
      case TaskKind::kNvmeRead:
      case TaskKind::kNvmeWrite: {
        if (p_.nvme() == nullptr)
          return Status::failed_precondition("NVMe task on hardware without NVMe: " + t.name);
        const auto bytes = static_cast<sg_size_t>(t.bytes);
        start(t.id,
              t.kind == TaskKind::kNvmeRead ? p_.nvme()->read_async(bytes) : p_.nvme()->write_async(bytes));
        pend.extra_delay = hw.nvme.latency_s;
        break;
      }
      case TaskKind::kCollective:
        submit_collective(t, pend);
        break;
      case TaskKind::kAlloc:
      case TaskKind::kFree:
        return Status::internal("simgrid executor: alloc/free reach the driver only");
    }
    if (pend.parts == 0) finish_parts(t.id);  // nothing to move (e.g. a group of one)
    return Status::ok();
  }

  Result<Completion> wait_any() override {
    while (ready_.empty()) {
      // Latency steps are timers, not activities: wake up for the earliest one.
      if (!delays_.empty() && delays_.top().first <= sg4::Engine::get_clock()) {
        const int task = delays_.top().second;
        delays_.pop();
        complete(task);
        continue;
      }
      const double timeout = delays_.empty() ? -1 : delays_.top().first - sg4::Engine::get_clock();
      if (inflight_.empty()) {
        if (delays_.empty()) return Status::failed_precondition("simgrid executor: wait_any with nothing in flight");
        sg4::this_actor::sleep_for(timeout);
        continue;
      }
      const ssize_t i = sg4::Activity::wait_any_for(inflight_, timeout);
      if (i < 0) continue;  // a timer expired
      const int task = owner_[i];
      inflight_.erase(inflight_.begin() + i);
      owner_.erase(owner_.begin() + i);
      Pending& pend = pending_[task];
      if (--pend.parts == 0) finish_parts(task);
    }
    const Completion c = ready_.back();
    ready_.pop_back();
    return c;
  }

 private:
  struct Pending {
    double start = 0;
    int parts = 0;
    double extra_delay = 0;  // latency steps added after the transfers (ring steps, device latency)
    int resource = 0;
  };

  // An Exec on `host` (Host::exec_async in 3.32 runs on the calling actor's host, not on `host`).
  static sg4::ActivityPtr exec_on(sg4::Host* host, double amount) {
    return sg4::Exec::init()->set_flops_amount(amount)->set_host(host)->start();
  }

  void start(int task, sg4::ActivityPtr a) {
    inflight_.push_back(std::move(a));
    owner_.push_back(task);
    ++pending_[task].parts;
    ++activities_;
  }

  // The transfers are done: wait out the latency steps, or complete.
  void finish_parts(int task) {
    Pending& pend = pending_[task];
    if (pend.extra_delay > 0) {
      delays_.push({sg4::Engine::get_clock() + pend.extra_delay, task});
      return;
    }
    complete(task);
  }

  void complete(int task) {
    Pending& pend = pending_[task];
    ready_.push_back({task, pend.start, now()});
    const int r = pend.resource;
    pending_.erase(task);
    busy_[r] = false;
    if (!queued_[r].empty()) {
      const Task* next = queued_[r].front();
      queued_[r].pop_front();
      busy_[r] = true;
      const Status s = launch(*next);
      MW_CHECK(s.is_ok(), s.message());
    }
  }

  // Ring collectives: in a group of n on one node every rank sends (n-1)/n of the tensor to its neighbour
  // (twice for an all-reduce); across N nodes, also (N-1)/N of it leaves the node through the NICs, split
  // over the node's ranks. Ring latency: one step per hop, (n-1) steps (2(n-1) for an all-reduce).
  void submit_collective(const Task& t, Pending& pend) {
    const HardwareSpec& hw = p_.hardware();
    const int n = t.group;
    if (n <= 1) return;
    const double passes = t.collective == CollectiveKind::kAllReduce ? 2.0 : 1.0;
    const int local = std::min(n, hw.gpu.count);
    const int nodes = (n + hw.gpu.count - 1) / hw.gpu.count;
    if (local > 1) {
      const int next = (rank_ + 1) % std::min(local, rpn_);
      if (next != rank_) {
        start(t.id,
              sg4::Comm::sendto_async(p_.gpu(rank_), p_.gpu(next), passes * t.bytes * (local - 1) / local));
      }
    }
    if (nodes > 1) {
      const double per_rank = passes * t.bytes * (nodes - 1) / nodes / local;
      start(t.id, sg4::Comm::sendto_async(p_.gpu(rank_), p_.peer(rank_), per_rank));
    }
    // Hop latencies beyond the one each transfer already paid.
    const double hop = nodes > 1 ? hw.network.latency_s : hw.nvlink.latency_s;
    const double steps = passes * (n - 1);
    pend.extra_delay = std::max(0.0, steps - passes) * hop;
  }

  const Platform& p_;
  const int rank_;
  const int rpn_;
  std::uint64_t& activities_;
  double origin_ = 0;
  std::vector<sg4::ActivityPtr> inflight_;  // kept alive until complete (SimGrid 3.32 requirement)
  std::vector<int> owner_;
  std::map<int, Pending> pending_;
  std::vector<Completion> ready_;
  bool busy_[kResourceCount] = {};
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> delays_;
  std::deque<const Task*> queued_[kResourceCount];
};

std::uint64_t peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;
}

// Runs in the child process.
Result<SimulationResult> run_simulation(const Schedule& s, const HardwareSpec& hw,
                                        const SimulateOptions& opt) {
  int argc = 1;
  char name[] = "memwall-sim";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  xbt_log_control_set("root.thres:critical");
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic:0");
  sg4::Engine::set_config("network/TCP-gamma:0");
  const int rpn = s.ranks_per_node;
  Platform platform(hw, rpn);
  SimulationResult result;
  result.simulated_ranks = rpn;
  const auto wall_start = std::chrono::steady_clock::now();
  Status failure;
  std::vector<double> rank_time(rpn, 0);
  for (int r = 0; r < rpn; ++r) {
    sg4::Actor::create("rank" + std::to_string(r), platform.gpu(r), [&, r]() {
      SimGridExecutor exec(platform, r, rpn, result.activities);
      for (int it = 0; it < opt.iterations; ++it) {
        exec.reset_origin();
        Result<RunResult> run = run_schedule(s, exec);
        if (!run.is_ok()) {
          failure = run.status();
          return;
        }
        if (r == 0) result.rank0 = std::move(*run);
      }
      rank_time[r] = sg4::Engine::get_clock();
    });
  }
  if (opt.progress) {
    auto last = std::chrono::steady_clock::now();
    sg4::Engine::on_time_advance_cb([&](double) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::seconds(1)) return;
      last = now;
      opt.progress(0, sg4::Engine::get_clock());
    });
  }
  engine.run();
  if (!failure.is_ok()) return failure;
  result.iteration_s = *std::max_element(rank_time.begin(), rank_time.end()) / opt.iterations;
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.peak_rss_bytes = peak_rss();
  return result;
}

// Pipe protocol: a status byte, then either a message or the result.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Header {
  std::uint8_t ok = 0;
  std::uint64_t payload = 0;  // message length, or number of timings
  double iteration_s = 0, makespan_s = 0, wall_s = 0;
  std::uint64_t activities = 0, rss = 0;
  std::int32_t ranks = 0;
  double busy[kResourceCount] = {};
};

}  // namespace

Result<SimulationResult> simulate_schedule(const Schedule& s, const HardwareSpec& hw,
                                           const SimulateOptions& opt) {
  int fds[2];
  if (::pipe(fds) != 0) return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::io_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    Result<SimulationResult> r = run_simulation(s, hw, opt);
    Header h;
    if (!r.is_ok()) {
      const std::string msg = r.status().message();
      h.payload = msg.size();
      write_all(fds[1], &h, sizeof h);
      write_all(fds[1], msg.data(), msg.size());
    } else {
      h.ok = 1;
      h.payload = r->rank0.timing.size();
      h.iteration_s = r->iteration_s;
      h.makespan_s = r->rank0.makespan_s;
      h.wall_s = r->wall_s;
      h.activities = r->activities;
      h.rss = r->peak_rss_bytes;
      h.ranks = r->simulated_ranks;
      std::copy(std::begin(r->rank0.busy_s), std::end(r->rank0.busy_s), h.busy);
      write_all(fds[1], &h, sizeof h);
      write_all(fds[1], r->rank0.timing.data(), r->rank0.timing.size() * sizeof(Completion));
    }
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(fds[1]);
  Header h;
  Status status;
  SimulationResult out;
  if (!read_all(fds[0], &h, sizeof h)) {
    status = Status::internal("simulation process ended without a result (crashed or killed)");
  } else if (!h.ok) {
    std::string msg(h.payload, '\0');
    read_all(fds[0], msg.data(), msg.size());
    status = Status::internal("simulation failed: " + msg);
  } else {
    out.rank0.timing.resize(h.payload);
    if (!read_all(fds[0], out.rank0.timing.data(), h.payload * sizeof(Completion))) {
      status = Status::internal("simulation result truncated");
    }
    out.rank0.makespan_s = h.makespan_s;
    std::copy(std::begin(h.busy), std::end(h.busy), out.rank0.busy_s);
    out.iteration_s = h.iteration_s;
    out.wall_s = h.wall_s;
    out.activities = h.activities;
    out.peak_rss_bytes = h.rss;
    out.simulated_ranks = h.ranks;
  }
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  if (!status.is_ok()) return status;
  return out;
}

std::string platform_summary(const HardwareSpec& hw, int ranks_per_node, bool multi_node) {
  return strprintf("%d simulated GPU(s) of %s: PCIe %s per GPU, %zu switch level(s), NVLink %s, %d NIC(s)%s",
                   ranks_per_node, hw.name.c_str(), format_bandwidth(hw.pcie.gpu_link_Bps).c_str(),
                   hw.pcie.switches.size(), format_bandwidth(hw.nvlink.gpu_Bps).c_str(), hw.network.nics,
                   multi_node ? ", peers on other nodes" : "");
}

}  // namespace memwall::sim
