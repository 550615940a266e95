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
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <queue>

#include "base/units.h"
#include "exec/run_analysis.h"
#include "memory/bandwidth_model.h"
#include "sim/platform.h"

namespace memwall::sim {

namespace {

// Rank `rank` of the node. Each resource of the rank is a lane: a daemon actor that runs its tasks one at a
// time in submission order, like a CUDA stream or copy engine, an NCCL stream, an NVMe queue or the
// optimizer thread; contention comes from the other ranks and from links several lanes cross. A replayed
// trace's further lanes of a resource (Task::lane: its other streams) get actors of their own, made when
// their first task arrives; they share the resource's hosts and links with lane 0. A lane waits
// on one activity at a time (SimGrid 3.32 slows down badly when an actor repeatedly waits on a set that
// holds long-lived activities), and reports completions to the rank's driver through a semaphore.
class SimGridExecutor final : public Executor {
 public:
  // `meet`: the joint replay's meeting points (nullptr: collectives do not wait for each other), with one
  // barrier slot per point shared by the node's executors.
  SimGridExecutor(const Platform& p, int rank, int ranks_per_node, std::uint64_t& activities,
                  const Rendezvous* meet, std::vector<sg4::BarrierPtr>* barriers)
      : p_(p),
        rank_(rank),
        rpn_(ranks_per_node),
        activities_(activities),
        meet_(meet),
        barriers_(barriers),
        done_sem_(sg4::Semaphore::create(0)) {
    for (int r = 0; r < kResourceCount; ++r) {
      if (static_cast<Resource>(r) != Resource::kNone) lane(static_cast<Resource>(r), 0);
    }
  }

  const char* name() const override { return "simgrid"; }
  std::uint64_t completed() const { return completed_; }  // tasks run to completion so far
  ExecutorCaps caps() const override { return {}; }
  double now() const override { return sg4::Engine::get_clock() - origin_; }
  void reset_origin() { origin_ = sg4::Engine::get_clock(); }

  Status submit(const Task& t) override {
    if (t.resource == Resource::kNone)
      return Status::internal("simgrid executor: alloc/free reach the driver only");
    if ((t.kind == TaskKind::kNvmeRead || t.kind == TaskKind::kNvmeWrite) && p_.nvme() == nullptr) {
      return Status::failed_precondition("NVMe task on hardware without NVMe: " + t.name);
    }
    Lane& l = lane(t.resource, std::max(0, t.lane));
    l.queue.push_back(&t);
    l.pending->release();
    return Status::ok();
  }

  Result<Completion> wait_any() override {
    done_sem_->acquire();
    const Completion c = done_.front();
    done_.pop_front();
    return c;
  }

 private:
  struct Lane {
    std::deque<const Task*> queue;
    sg4::SemaphorePtr pending;
    // NVMe lanes: a helper actor that runs the drives' I/O. SimGrid 3.32 never takes a finished Io off
    // the list of activities of the actor that started it, and every Comm or Exec that actor later waits
    // for is looked up in that list: a lane that started its own I/O would make each of its transfers
    // through CPU memory scan all its past reads or writes (quadratic; 14x the wall time for paper-1t).
    // Nor does it free them before that actor ends: its I/O actor ends after kIosPerActor transfers, and
    // the next one starts a new actor (the Io objects had taken 0.5 GiB for DeepSeek-V3 on one DGX-2).
    sg4::SemaphorePtr io_go, io_done;
    const Task* io_task = nullptr;
    int io_left = 0;  // transfers the current I/O actor takes before it ends
  };
  static constexpr int kIosPerActor = 1024;

  // An Exec on `host` (Host::exec_async in 3.32 runs on the calling actor's host, not on `host`).
  static sg4::ExecPtr exec_on(sg4::Host* host, double amount) {
    return sg4::Exec::init()->set_flops_amount(amount)->set_host(host)->start();
  }

  // The lane of resource `r` numbered `index`, its actor started the first time.
  Lane& lane(Resource r, int index) {
    std::unique_ptr<Lane>& slot = lanes_[{static_cast<int>(r), index}];
    if (!slot) {
      slot = std::make_unique<Lane>();
      slot->pending = sg4::Semaphore::create(0);
      Lane* l = slot.get();
      sg4::Actor::create("rank" + std::to_string(rank_) + "-" + resource_name(r) +
                             (index > 0 ? "-" + std::to_string(index) : std::string()),
                         p_.gpu(rank_), [this, l]() {
                           sg4::Actor::self()->daemonize();
                           lane_loop(*l);
                         });
    }
    return *slot;
  }

  void lane_loop(Lane& lane) {
    for (;;) {
      lane.pending->acquire();
      const Task& t = *lane.queue.front();
      lane.queue.pop_front();
      if (t.release_s > now())
        sg4::this_actor::sleep_for(t.release_s - now());  // replay: not before its launch
      if (t.kind == TaskKind::kCollective) rendezvous(t);
      const double start = now();
      run(t, lane);
      ++completed_;
      done_.push_back({t.id, start, now()});
      done_sem_->release();
    }
  }

  // Joint replay: waits until every rank at this collective's meeting point has reached it.
  void rendezvous(const Task& t) {
    if (meet_ == nullptr) return;
    const int p = meet_->point[static_cast<std::size_t>(rank_)][static_cast<std::size_t>(t.id)];
    if (p < 0 || meet_->parties[static_cast<std::size_t>(p)] <= 1) return;
    sg4::BarrierPtr& b = (*barriers_)[static_cast<std::size_t>(p)];
    if (!b) b = sg4::Barrier::create(static_cast<unsigned>(meet_->parties[static_cast<std::size_t>(p)]));
    b->wait();
  }

  // Runs one task to completion (blocking this lane only).
  void run(const Task& t, Lane& lane) {
    const HardwareSpec& hw = p_.hardware();
    if (t.delay_s > 0) sg4::this_actor::sleep_for(t.delay_s);  // replay: a measured launch gap
    if (t.measured_s > 0 && (t.kind == TaskKind::kCompute || t.kind == TaskKind::kOptimizerStep)) {
      sg4::this_actor::sleep_for(t.measured_s);  // replay: the measured duration (it includes its contention)
      return;
    }
    switch (t.kind) {
      case TaskKind::kCompute:
        // The roofline's time as work on the GPU host (whose speed is the achievable FLOP/s), so that
        // host CPU work sharing an emulated device slows a memory-bound op as much as a GEMM.
        wait(exec_on(p_.gpu(rank_),
                     std::max(compute_seconds(hw, t.flops, t.bytes) * hw.gpu.achievable_flops, 1.0)));
        break;
      case TaskKind::kOptimizerStep:
        if (t.dst == Tier::kGpu) {
          wait(exec_on(p_.gpu(rank_), t.bytes * hw.gpu.achievable_flops / hw.gpu.hbm_Bps));
        } else {
          // Memory-bound: its state traffic crosses the DRAM link, shared with every rank's step, the
          // GPUs' DMA to and from host memory and NVMe transfers.
          with_host_cpu(dram_traffic(t.bytes), t.bytes / hw.cpu.memory_Bps);
        }
        break;
      case TaskKind::kCopy: {
        sg4::Host* gpu = p_.gpu(rank_);
        with_host_cpu(t.dst == Tier::kGpu ? sg4::Comm::sendto_async(p_.cpu(), gpu, t.bytes)
                                          : sg4::Comm::sendto_async(gpu, p_.cpu(), t.bytes),
                      t.bytes / hw.pcie.gpu_link_Bps);  // an emulated device's copy is a memcpy
        break;
      }
      case TaskKind::kNvmeRead:
      case TaskKind::kNvmeWrite: {
        // The drive's transfer and, at the same time, the same bytes into or out of host memory (the
        // drives' DMA shares the DRAM link with the GPUs' copies and the CPU optimizer; at the link's
        // share, a burst, rather than spread over the drive's time: a rate set before the start would
        // have to guess the drive's share among the other ranks).
        start_io(lane, t);
        with_host_cpu(dram_traffic(t.bytes), t.bytes * hw.nvme.host_cpu_s_per_byte);
        lane.io_done->acquire();
        if (hw.nvme.latency_s > 0) sg4::this_actor::sleep_for(hw.nvme.latency_s);
        break;
      }
      case TaskKind::kCollective:
        run_collective(t);
        break;
      case TaskKind::kAlloc:
      case TaskKind::kFree:
        break;
    }
  }

  // Hands `t`'s drive transfer to the lane's I/O actor (started the first time, and again after each
  // kIosPerActor transfers); lane.io_done is released when it is done.
  void start_io(Lane& lane, const Task& t) {
    if (!lane.io_go) {
      lane.io_go = sg4::Semaphore::create(0);
      lane.io_done = sg4::Semaphore::create(0);
    }
    if (lane.io_left == 0) {
      lane.io_left = kIosPerActor;
      Lane* l = &lane;
      sg4::Actor::create("rank" + std::to_string(rank_) + "-io", p_.gpu(rank_), [this, l]() {
        sg4::Actor::self()->daemonize();
        for (int i = 0; i < kIosPerActor; ++i) {
          l->io_go->acquire();
          const auto bytes = static_cast<sg_size_t>(l->io_task->bytes);
          wait(l->io_task->kind == TaskKind::kNvmeRead ? p_.nvme()->read_async(bytes)
                                                       : p_.nvme()->write_async(bytes));
          l->io_done->release();
        }
      });
    }
    --lane.io_left;
    lane.io_task = &t;
    lane.io_go->release();
  }

  // `bytes` of traffic on the node's DRAM link alone (the CPU's own reads and writes of host memory).
  sg4::CommPtr dram_traffic(double bytes) { return sg4::Comm::sendto_async(p_.cpu(), p_.memory(), bytes); }

  template <typename Ptr>
  void wait(Ptr a) {
    ++activities_;
    a->wait();
  }

  // Waits for `a` and, where the device computes on the host's cores (gpu.shares_host_cpu), for the
  // `cpu_s` core-seconds of host CPU work the task costs, run at the same time on the device host. The
  // device's compute is bulk-synchronous across all cores (static partitioning, every thread waits for the
  // slowest), so a core-second taken by host work delays compute by about a second, not 1/cores of one:
  // the CPU work is an Exec of cpu_s x the device's full rate that shares the device host fairly with
  // compute. Alone it takes cpu_s; beside compute both run at half speed.
  template <typename Ptr>
  void with_host_cpu(Ptr a, double cpu_s) {
    const HardwareSpec& hw = p_.hardware();
    if (!hw.gpu.shares_host_cpu || cpu_s <= 0) {
      wait(a);
      return;
    }
    sg4::ExecPtr cpu = exec_on(p_.gpu(rank_), cpu_s * hw.gpu.achievable_flops);
    wait(a);
    wait(cpu);
  }

  // Ring collectives: in a group of n on one node every rank sends (n-1)/n of the tensor to its neighbour
  // (twice for an all-reduce); across N nodes, also (N-1)/N of it leaves the node through the NICs, split
  // over the node's ranks. Ring latency: one step per hop, (n-1) steps (2(n-1) for an all-reduce). An
  // all-to-all is one direct step: 1/n of the rank's buffer to each peer, (local-1)/n of it over its link
  // (the NVSwitch lets it go to one neighbour at the same cost) and (N-1)/N of it through the NICs.
  void run_collective(const Task& t) {
    const HardwareSpec& hw = p_.hardware();
    const int n = t.group;
    if (n <= 1) return;
    const double passes = t.collective == CollectiveKind::kAllReduce ? 2.0 : 1.0;
    const bool direct = t.collective == CollectiveKind::kAllToAll;
    const GroupSpan span = group_span(hw, n, t.group_nodes);
    const int nodes = span.nodes, local = span.per_node;
    sg4::CommPtr intra, inter;
    if (local > 1) {
      // The ring of this rank's group on the node, taken as `local` consecutive ranks (links are alike).
      const int base = rank_ / local * local;
      const int next = std::min(base + (rank_ - base + 1) % local, rpn_ - 1);
      if (next != rank_) {
        intra = sg4::Comm::sendto_async(p_.gpu(rank_), p_.gpu(next),
                                        passes * t.bytes * (local - 1) / (direct ? n : local));
      }
    }
    if (nodes > 1) {
      inter = sg4::Comm::sendto_async(p_.gpu(rank_), p_.peer(rank_),
                                      passes * t.bytes * (nodes - 1) / nodes / (direct ? 1 : local));
    }
    if (intra) wait(intra);
    if (inter) wait(inter);
    // Hop latencies beyond the one each transfer already paid.
    const double hop = nodes > 1 ? hw.network.latency_s : hw.nvlink.latency_s;
    const double extra = direct ? 0.0 : std::max(0.0, passes * (n - 1) - passes) * hop;
    if (extra > 0) sg4::this_actor::sleep_for(extra);
  }

  const Platform& p_;
  const int rank_;
  const int rpn_;
  std::uint64_t& activities_;
  const Rendezvous* meet_;
  std::vector<sg4::BarrierPtr>* barriers_;
  double origin_ = 0;
  std::map<std::pair<int, int>, std::unique_ptr<Lane>> lanes_;  // (resource, lane)
  std::deque<Completion> done_;
  sg4::SemaphorePtr done_sem_;
  std::uint64_t completed_ = 0;
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
  const bool joint = !opt.rank_schedules.empty();
  if (joint && (static_cast<int>(opt.rank_schedules.size()) != rpn || opt.iterations != 1 ||
                (opt.rendezvous != nullptr && opt.rendezvous->point.size() != opt.rank_schedules.size()))) {
    return Status::internal(
        "joint simulation: one schedule (and meeting points) per rank of the node, one "
        "iteration");
  }
  Platform platform(hw, rpn);
  SimulationResult result;
  result.simulated_ranks = rpn;
  result.rank_end_s.assign(static_cast<std::size_t>(rpn), 0.0);
  result.rank_collective_wait_s.assign(static_cast<std::size_t>(rpn), 0.0);
  std::vector<sg4::BarrierPtr> barriers(opt.rendezvous != nullptr ? opt.rendezvous->parties.size() : 0);
  std::vector<bool> finished(static_cast<std::size_t>(rpn), false);
  if (joint) result.other_ranks.resize(static_cast<std::size_t>(rpn - 1));
  const auto wall_start = std::chrono::steady_clock::now();
  Status failure;
  std::vector<double> rank_time(rpn, 0);
  std::vector<std::vector<Interval>> node_intervals(kResourceCount);
  // Executors (and their lane actors) live for the whole run: daemon lanes outlive their rank's driver.
  std::vector<std::unique_ptr<SimGridExecutor>> execs;
  // One index of the schedule for every rank that runs it (a joint replay's ranks index their own).
  const ScheduleIndex shared_index = joint ? ScheduleIndex{} : index_schedule(s);
  for (int r = 0; r < rpn; ++r)
    execs.push_back(
        std::make_unique<SimGridExecutor>(platform, r, rpn, result.activities, opt.rendezvous, &barriers));
  for (int r = 0; r < rpn; ++r) {
    sg4::Actor::create("rank" + std::to_string(r), platform.gpu(r), [&, r]() {
      SimGridExecutor& exec = *execs[r];
      const Schedule& mine = joint ? *opt.rank_schedules[static_cast<std::size_t>(r)] : s;
      for (int it = 0; it < opt.iterations; ++it) {
        exec.reset_origin();
        Result<RunResult> run = run_schedule(mine, exec, joint ? nullptr : &shared_index);
        if (!run.is_ok()) {
          failure = run.status();
          return;
        }
        if (it + 1 == opt.iterations) {
          // Each rank's intervals from its iteration's start, merged per rank first (a lane's tasks run
          // back to back: a few intervals where the schedule has millions of tasks).
          std::vector<Interval> mine_busy[kResourceCount];
          for (const Task& t : mine.tasks) {
            if (t.resource == Resource::kNone) continue;
            const Completion& c = run->timing[t.id];
            mine_busy[static_cast<int>(t.resource)].push_back({c.start_s, c.end_s});
          }
          for (int k = 0; k < kResourceCount; ++k) {
            const std::vector<Interval> merged = interval_union(std::move(mine_busy[k]));
            node_intervals[k].insert(node_intervals[k].end(), merged.begin(), merged.end());
          }
          result.rank_end_s[static_cast<std::size_t>(r)] = run->makespan_s;
          result.rank_collective_wait_s[static_cast<std::size_t>(r)] = collective_wait_s(mine, *run);
          if (r == 0) {
            result.rank0 = std::move(*run);
          } else if (joint) {
            result.other_ranks[static_cast<std::size_t>(r - 1)] = std::move(*run);
          }
        }
      }
      rank_time[r] = sg4::Engine::get_clock();
      finished[static_cast<std::size_t>(r)] = true;
    });
  }
  if (opt.progress) {
    // (alloc and free tasks never reach the executor)
    const Schedule& first = joint ? *opt.rank_schedules[0] : s;
    const double rank0_tasks = std::max<double>(
        1.0, static_cast<double>(opt.iterations) *
                 static_cast<double>(std::count_if(first.tasks.begin(), first.tasks.end(), [](const Task& t) {
                   return t.resource != Resource::kNone;
                 })));
    // (by value: the callback runs in engine.run(), after this block)
    sg4::Engine::on_time_advance_cb(
        [&opt, &execs, rank0_tasks, last = std::chrono::steady_clock::now()](double) mutable {
          const auto now = std::chrono::steady_clock::now();
          if (now - last < std::chrono::seconds(1)) return;
          last = now;
          opt.progress(static_cast<double>(execs[0]->completed()) / rank0_tasks, sg4::Engine::get_clock());
        });
  }
  engine.run();
  if (!failure.is_ok()) return failure;
  for (int r = 0; r < rpn; ++r) {
    if (!finished[static_cast<std::size_t>(r)]) {
      return Status::failed_precondition("rank " + std::to_string(r) +
                                         " never finished: its collectives wait for ranks that wait for it "
                                         "(the ranks meet at their collectives in different orders)");
    }
  }
  result.iteration_s = *std::max_element(rank_time.begin(), rank_time.end()) / opt.iterations;
  for (int r = 0; r < kResourceCount; ++r)
    result.node_busy_s[r] = total_length(interval_union(std::move(node_intervals[r])));
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
  double node_busy[kResourceCount] = {};
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
      std::copy(std::begin(r->node_busy_s), std::end(r->node_busy_s), h.node_busy);
      write_all(fds[1], &h, sizeof h);
      write_all(fds[1], r->rank0.timing.data(), r->rank0.timing.size() * sizeof(Completion));
      write_all(fds[1], r->rank_end_s.data(), r->rank_end_s.size() * sizeof(double));
      write_all(fds[1], r->rank_collective_wait_s.data(), r->rank_collective_wait_s.size() * sizeof(double));
      for (const RunResult& other :
           r->other_ranks) {  // (joint replay) each: its task count, makespan, timings
        const std::uint64_t n = other.timing.size();
        write_all(fds[1], &n, sizeof n);
        write_all(fds[1], &other.makespan_s, sizeof other.makespan_s);
        write_all(fds[1], other.timing.data(), n * sizeof(Completion));
      }
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
    // Why the child ended: every simulated rank keeps its state of each task of the schedule, so a huge
    // schedule (a mixture of experts of hundreds of experts a layer) can exhaust memory: the kernel's OOM
    // killer (SIGKILL) or, under a memory limit, an allocation that fails (SIGABRT).
    ::close(fds[0]);
    int ws = 0;
    ::waitpid(pid, &ws, 0);
    std::string why = "crashed or killed";
    if (WIFSIGNALED(ws)) {
      const int sig = WTERMSIG(ws);
      why = strprintf("ended by signal %d (%s)", sig, strsignal(sig));
      if (sig == SIGKILL || sig == SIGABRT) {
        why +=
            ": most likely out of memory (every simulated GPU keeps its state of each task of the schedule, "
            "some 30 bytes a task); --fast runs the closed form in less memory, or simulate fewer GPUs per "
            "node";
      }
    } else if (WIFEXITED(ws)) {
      why = strprintf("exited with status %d", WEXITSTATUS(ws));
    }
    return Status::internal("simulation process ended without a result: " + why);
  } else if (!h.ok) {
    std::string msg(h.payload, '\0');
    read_all(fds[0], msg.data(), msg.size());
    status = Status::internal("simulation failed: " + msg);
  } else {
    out.rank0.timing.resize(h.payload);
    const auto ranks = static_cast<std::size_t>(std::max(0, h.ranks));
    out.rank_end_s.resize(ranks);
    out.rank_collective_wait_s.resize(ranks);
    if (!read_all(fds[0], out.rank0.timing.data(), h.payload * sizeof(Completion)) ||
        !read_all(fds[0], out.rank_end_s.data(), ranks * sizeof(double)) ||
        !read_all(fds[0], out.rank_collective_wait_s.data(), ranks * sizeof(double)))
      status = Status::internal("simulation result truncated");
    if (!opt.rank_schedules.empty() && ranks > 0) out.other_ranks.resize(ranks - 1);
    for (RunResult& other : out.other_ranks) {
      std::uint64_t n = 0;
      if (!status.is_ok() || !read_all(fds[0], &n, sizeof n) ||
          !read_all(fds[0], &other.makespan_s, sizeof other.makespan_s)) {
        status = Status::internal("simulation result truncated");
        break;
      }
      other.timing.resize(n);
      if (!read_all(fds[0], other.timing.data(), n * sizeof(Completion))) {
        status = Status::internal("simulation result truncated");
        break;
      }
    }
    out.rank0.makespan_s = h.makespan_s;
    std::copy(std::begin(h.busy), std::end(h.busy), out.rank0.busy_s);
    std::copy(std::begin(h.node_busy), std::end(h.node_busy), out.node_busy_s);
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
