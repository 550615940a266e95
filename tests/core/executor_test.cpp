// Reference executor: closed-form durations, NVMe reads and writes sharing the drives, dependency order, one
// task per resource at a time; the driver's fallback when the executor cannot overlap resources.
#include <gtest/gtest.h>

#include "exec/executor.h"
#include "exec/run_analysis.h"
#include "memory/bandwidth_model.h"
#include "plan/planner.h"
#include "test_support.h"

namespace memwall {
namespace {

Task make(int id, TaskKind kind, Resource r, std::vector<int> deps = {}) {
  Task t;
  t.id = id;
  t.kind = kind;
  t.resource = r;
  t.deps = std::move(deps);
  t.name = std::string("t").append(std::to_string(id));
  return t;
}

TEST(ReferenceExecutor, DurationsFollowClosedForms) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  ReferenceExecutor exec(hw, 16);
  Task compute = make(0, TaskKind::kCompute, Resource::kCompute);
  compute.flops = 7e13;
  EXPECT_DOUBLE_EQ(exec.duration(compute), 1.0);  // 70 TFLOP at 70 TFLOP/s
  compute.bytes = 450e9;                          // the roofline: its memory at 900 GB/s takes half that
  EXPECT_DOUBLE_EQ(exec.duration(compute), 1.0);
  compute.bytes = 1800e9;  // memory-bound: 2 s
  EXPECT_DOUBLE_EQ(exec.duration(compute), 2.0);
  Task h2d = make(1, TaskKind::kCopy, Resource::kH2D);
  h2d.src = Tier::kCpu;
  h2d.bytes = 3e9;
  EXPECT_DOUBLE_EQ(exec.duration(h2d), 1.0 + 1e-6);  // 3 GB at 3 GB/s (16 GPUs sharing) + PCIe latency
  h2d.single_link = true;
  EXPECT_DOUBLE_EQ(exec.duration(h2d), 0.25 + 1e-6);  // one GPU alone: 12 GB/s
  Task ag = make(2, TaskKind::kCollective, Resource::kNetwork);
  ag.collective = CollectiveKind::kAllGather;
  ag.group = 16;
  ag.bytes = 160e9;
  EXPECT_NEAR(exec.duration(ag), 160e9 / (150e9 * 16 / 15) + 15 * 1e-6, 1e-12);
  Task ar = ag;
  ar.collective = CollectiveKind::kAllReduce;
  EXPECT_NEAR(exec.duration(ar), 2 * 160e9 / (150e9 * 16 / 15) + 15 * 1e-6, 1e-12);
  Task rd = make(3, TaskKind::kNvmeRead, Resource::kNvmeRead);
  rd.bytes = 1.6e9;
  EXPECT_NEAR(exec.duration(rd), 1.0 + 1e-4, 1e-12);  // 25.6 GB/s over 16 ranks
}

TEST(ReferenceExecutor, RunsDependenciesInOrderAndResourcesOneAtATime) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = testing::load_model_scenario("gpt2");
  RunConfig run = testing::load_run_scenario("zero-infinity-nvme");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const Schedule s = plan_iteration(m, run, hw).value();
  ReferenceExecutor exec(hw, s.ranks_per_node);
  const RunResult r = run_schedule(s, exec).value();
  std::vector<std::vector<std::pair<double, double>>> per_resource(kResourceCount);
  for (const Task& t : s.tasks) {
    const Completion& c = r.timing[t.id];
    EXPECT_EQ(c.task, t.id);
    if (t.kind == TaskKind::kNvmeRead || t.kind == TaskKind::kNvmeWrite) {
      // The drives' combined rate shared with the other direction: no faster than alone, no slower than half.
      const double alone = t.kind == TaskKind::kNvmeRead ? hw.nvme.read_Bps() : hw.nvme.write_Bps();
      const double half = std::min(alone, hw.nvme.readwrite_Bps() / 2) / s.ranks_per_node;
      EXPECT_GE(c.end_s - c.start_s, exec.duration(t) - 1e-12) << t.name;
      EXPECT_LE(c.end_s - c.start_s, hw.nvme.latency_s + t.bytes / half + 1e-12) << t.name;
    } else {
      EXPECT_NEAR(c.end_s - c.start_s, exec.duration(t), 1e-12) << t.name;
    }
    for (int d : t.deps) EXPECT_GE(c.start_s, r.timing[d].end_s - 1e-12) << t.name;
    if (t.resource != Resource::kNone)
      per_resource[static_cast<int>(t.resource)].push_back({c.start_s, c.end_s});
  }
  for (auto& spans : per_resource) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_GE(spans[i].first, spans[i - 1].second - 1e-12);
  }
  // Overlap: the iteration is shorter than all work done back to back, longer than the busiest resource.
  double total = 0, busiest = 0;
  for (double b : r.busy_s) total += b, busiest = std::max(busiest, b);
  EXPECT_LT(r.makespan_s, total);
  EXPECT_GE(r.makespan_s, busiest - 1e-9);
}

// A read and a write at once share the drives' combined rate max-min fairly (SimGrid's disk model): on a
// DGX-2 (25.6 GB/s read, 24 GB/s write, 25.6 GB/s both together) 2.56 GB read and 2.4 GB written, 0.1 s each
// alone, move at 12.8 GB/s each until the write is done (0.1875 s), then the read's last 0.16 GB at 25.6
// GB/s: the 4.96 GB take 0.19375 s, as at the combined rate. Drives that carry both directions at full rate
// at once run them side by side in 0.1 s.
TEST(ReferenceExecutor, NvmeReadsAndWritesShareTheDrives) {
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  Schedule s;
  s.tasks = {make(0, TaskKind::kNvmeRead, Resource::kNvmeRead),
             make(1, TaskKind::kNvmeWrite, Resource::kNvmeWrite),
             make(2, TaskKind::kNvmeRead, Resource::kNvmeRead, {1})};
  s.tasks[0].bytes = 2.56e9;
  s.tasks[1].bytes = 2.4e9;
  s.tasks[2].bytes = 2.56e9;  // after the write: alone from the start
  const double lat = hw.nvme.latency_s;
  {
    ReferenceExecutor exec(hw, 1);
    const RunResult r = run_schedule(s, exec).value();
    EXPECT_NEAR(r.timing[1].end_s, lat + 0.1875, 1e-9);
    // The second read queues behind the first on the read lane, which now ends at 0.19375 s.
    EXPECT_NEAR(r.timing[0].end_s, lat + 0.19375, 1e-9);
    EXPECT_NEAR(r.timing[2].end_s, r.timing[0].end_s + lat + 0.1, 1e-9);
  }
  hw.nvme.drive_readwrite_Bps = hw.nvme.drive_read_Bps + hw.nvme.drive_write_Bps;
  ReferenceExecutor exec(hw, 1);
  const RunResult r = run_schedule(s, exec).value();
  EXPECT_NEAR(r.timing[0].end_s, lat + 0.1, 1e-9);
  EXPECT_NEAR(r.timing[1].end_s, lat + 0.1, 1e-9);
}

// An executor without concurrent resources: the driver must run one task at a time.
class SerialExecutor final : public Executor {
 public:
  explicit SerialExecutor(const HardwareSpec& hw) : inner_(hw, 16) {}
  const char* name() const override { return "serial"; }
  ExecutorCaps caps() const override { return {false, false}; }
  double now() const override { return inner_.now(); }
  Status submit(const Task& t) override {
    ++in_flight_;
    max_in_flight_ = std::max(max_in_flight_, in_flight_);
    return inner_.submit(t);
  }
  Result<Completion> wait_any() override {
    --in_flight_;
    return inner_.wait_any();
  }
  int max_in_flight_ = 0;

 private:
  ReferenceExecutor inner_;
  int in_flight_ = 0;
};

TEST(RunSchedule, FallsBackToOneTaskAtATime) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = testing::load_model_scenario("gpt2");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const Schedule s = plan_iteration(m, run, hw).value();
  SerialExecutor serial(hw);
  const RunResult r = run_schedule(s, serial).value();
  EXPECT_EQ(serial.max_in_flight_, 1);
  double total = 0;
  for (double b : r.busy_s) total += b;
  EXPECT_NEAR(r.makespan_s, total, 1e-9 * total);
}

// The index lists each task's dependents in task order, its memory tasks sorted; runs given one index (as
// the simulator's ranks share theirs) time every task as runs that make their own.
TEST(RunSchedule, ScheduleIndexListsDependents) {
  Schedule s;
  s.tasks.push_back(make(0, TaskKind::kCompute, Resource::kCompute));
  s.tasks.push_back(make(1, TaskKind::kAlloc, Resource::kNone));
  s.tasks.push_back(make(2, TaskKind::kCopy, Resource::kH2D, {0, 1}));
  s.tasks.push_back(make(3, TaskKind::kCompute, Resource::kCompute, {0}));
  s.tasks.push_back(make(4, TaskKind::kFree, Resource::kNone, {2, 3, 0}));
  const ScheduleIndex x = index_schedule(s);
  ASSERT_EQ(x.first.size(), 6u);
  auto of = [&](int d) {
    return std::vector<int>(x.dependents.begin() + static_cast<std::ptrdiff_t>(x.first[d]),
                            x.dependents.begin() + static_cast<std::ptrdiff_t>(x.first[d + 1]));
  };
  EXPECT_EQ(of(0), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(of(1), (std::vector<int>{2}));
  EXPECT_EQ(of(2), (std::vector<int>{4}));
  EXPECT_EQ(of(3), (std::vector<int>{4}));
  EXPECT_TRUE(of(4).empty());
  EXPECT_EQ(x.memory_ops, (std::vector<int>{1, 4}));

  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const ModelSpec m = testing::load_model_scenario("gpt2");
  RunConfig run = testing::load_run_scenario("zero-infinity-nvme");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const Schedule plan = plan_iteration(m, run, hw).value();
  const ScheduleIndex shared = index_schedule(plan);
  ReferenceExecutor own_exec(hw, 16), shared_exec(hw, 16);
  const RunResult own = run_schedule(plan, own_exec).value();
  const RunResult with_shared = run_schedule(plan, shared_exec, &shared).value();
  ASSERT_EQ(own.timing.size(), with_shared.timing.size());
  EXPECT_EQ(own.makespan_s, with_shared.makespan_s);
  for (std::size_t i = 0; i < own.timing.size(); ++i) {
    EXPECT_EQ(own.timing[i].start_s, with_shared.timing[i].start_s) << plan.tasks[i].name;
    EXPECT_EQ(own.timing[i].end_s, with_shared.timing[i].end_s) << plan.tasks[i].name;
  }
}

// A free waiting on a 1 s compute, then an alloc with no dependencies and a copy into that buffer: in
// dependency order the alloc and the copy go at once; in program order (memwall train's) the alloc waits
// for the earlier free, so the copy starts after the compute.
TEST(RunSchedule, ProgramOrderKeepsAllocsBehindEarlierFrees) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  Schedule s;
  s.tasks.push_back(make(0, TaskKind::kCompute, Resource::kCompute));
  s.tasks[0].flops = hw.gpu.achievable_flops;  // 1 s
  s.tasks.push_back(make(1, TaskKind::kFree, Resource::kNone, {0}));
  s.tasks.push_back(make(2, TaskKind::kAlloc, Resource::kNone));
  s.tasks.push_back(make(3, TaskKind::kCopy, Resource::kH2D, {2}));
  s.tasks[3].src = Tier::kCpu;
  s.tasks[3].bytes = 1e6;
  for (bool program : {false, true}) {
    s.memory_in_program_order = program;
    ReferenceExecutor exec(hw, 1);
    const RunResult r = run_schedule(s, exec).value();
    EXPECT_NEAR(r.timing[3].start_s, program ? 1.0 : 0.0, 1e-12) << program;
    EXPECT_GE(r.timing[2].start_s, program ? r.timing[1].end_s : 0.0);
  }
}

// Busy time per resource is the union of its tasks; the overlap counts transfer time during which compute or
// the CPU optimizer ran, once however many transfers and work tasks run at the same time.
TEST(RunAnalysis, TransferTimeAndItsOverlapWithWork) {
  Schedule s;
  s.tasks = {make(0, TaskKind::kCompute, Resource::kCompute),
             make(1, TaskKind::kCopy, Resource::kH2D),
             make(2, TaskKind::kCopy, Resource::kD2H),
             make(3, TaskKind::kNvmeRead, Resource::kNvmeRead),
             make(4, TaskKind::kOptimizerStep, Resource::kCpuOptimizer),
             make(5, TaskKind::kAlloc, Resource::kNone)};
  s.tasks[4].phase = Phase::kOptimizer;
  RunResult run;
  run.makespan_s = 10;
  run.timing = {{0, 0, 4}, {1, 1, 3}, {2, 2, 6}, {3, 7, 9}, {4, 8, 10}, {5, 0, 10}};
  const RunBreakdown b = analyze_run(s, run);
  EXPECT_DOUBLE_EQ(b.transfer_s, 5 + 2);             // [1, 6) and [7, 9)
  EXPECT_DOUBLE_EQ(b.transfer_overlapped_s, 3 + 1);  // [1, 4) with compute, [8, 9) with the optimizer
  EXPECT_DOUBLE_EQ(b.busy_s[static_cast<int>(Resource::kD2H)], 4);
  EXPECT_DOUBLE_EQ(total_length(interval_union({{0, 2}, {1, 3}, {5, 5}, {4, 6}})), 5);
  EXPECT_DOUBLE_EQ(overlap_length({{0, 2}, {4, 6}}, {{1, 5}}), 2);
}

}  // namespace
}  // namespace memwall
