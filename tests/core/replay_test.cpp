// Replay: a planned schedule run on the reference executor, written as a trace, read back, rebuilt into a
// graph and re-run must give the same iteration time; what-ifs move it the right way; bad traces are named.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "exec/executor.h"
#include "exec/trace_export.h"
#include "plan/planner.h"
#include "replay/replay.h"
#include "test_support.h"

namespace memwall {
namespace {

struct Traced {
  Schedule schedule;
  double iteration_s = 0;
  trace::TraceData data;
};

// Two iterations of a planned run (the second shifted after the first), as one trace.
Traced traced_run(const HardwareSpec& hw, const char* run_name) {
  const ModelSpec m = testing::load_model_scenario("gpt2");
  RunConfig run = testing::load_run_scenario(run_name);
  run.memwall.data_parallel = 1;
  EXPECT_TRUE(resolve_run_config(run, m, hw).is_ok());
  Traced t;
  t.schedule = plan_iteration(m, run, hw).value();
  ReferenceExecutor exec(hw, t.schedule.ranks_per_node);
  RunResult r = run_schedule(t.schedule, exec).value();
  t.iteration_s = r.makespan_s;
  std::ostringstream out;
  trace::TraceWriter w(out);
  trace::TraceHeader h;
  h.command = "test";
  h.ranks = 1;
  w.begin(h);
  export_run_trace(t.schedule, r, 0, w);
  for (auto& c : r.timing) {
    c.start_s += r.makespan_s;
    c.end_s += r.makespan_s;
  }
  export_run_trace(t.schedule, r, 0, w);
  EXPECT_TRUE(w.finish().is_ok());
  t.data = trace::read_trace(out.str()).value();
  return t;
}

double replay_time(const ReplayGraph& g, const HardwareSpec& hw) {
  ReferenceExecutor exec(hw, g.schedule.ranks_per_node);
  return run_schedule(g.schedule, exec).value().makespan_s;
}

TEST(Replay, AReferenceRunReplaysToItsOwnIterationTime) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const Traced t = traced_run(hw, "zero-infinity-nvme");
  auto g = import_memwall_trace(t.data, 0, 0, -1);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->steps_total, 2);
  std::size_t traced = 0;
  for (const Task& task : t.schedule.tasks) traced += task.resource != Resource::kNone ? 1 : 0;
  EXPECT_EQ(g->schedule.tasks.size(), traced);
  // The trace keeps 9 significant digits of each time stamp.
  EXPECT_NEAR(g->measured_iteration_s, t.iteration_s, 1e-8 * t.iteration_s);
  place_ranks(hw, *g);
  // Same hardware, measured compute = the reference's compute: the same makespan.
  EXPECT_NEAR(replay_time(*g, hw), t.iteration_s, 1e-6 * t.iteration_s);

  // What-ifs: more bandwidth never slows it, faster compute speeds it up, NVMe-bound here.
  HardwareSpec hw2 = hw;
  ReplayGraph g2 = *g;
  ASSERT_TRUE(apply_what_ifs({{"nvme", "2"}}, nullptr, hw2, g2).is_ok());
  EXPECT_LT(replay_time(g2, hw2), t.iteration_s);
  hw2 = hw;
  g2 = *g;
  ASSERT_TRUE(apply_what_ifs({{"compute", "2"}, {"pcie", "2"}}, nullptr, hw2, g2).is_ok());
  EXPECT_LE(replay_time(g2, hw2), t.iteration_s * (1 + 1e-9));
  EXPECT_FALSE(apply_what_ifs({{"compute", "-1"}}, nullptr, hw2, g2).is_ok());
}

// A resource's further lanes are tracks of their own in the trace ("compute 1") and come back as lanes.
TEST(Replay, LanesSurviveTheTrace) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  Schedule s;
  for (int i = 0; i < 3; ++i) {
    Task t = testing::compute_task(i, i == 1 ? 1 : 0);
    t.flops = 1e12;
    if (i == 2) t.deps = {0, 1};
    s.tasks.push_back(t);
  }
  ReferenceExecutor exec(hw, 1);
  const RunResult r = run_schedule(s, exec).value();
  EXPECT_NEAR(r.timing[1].start_s, 0, 1e-12);  // beside kernel 0
  std::ostringstream out;
  trace::TraceWriter w(out);
  trace::TraceHeader h;
  h.command = "test";
  w.begin(h);
  export_run_trace(s, r, 0, w);
  ASSERT_TRUE(w.finish().is_ok());
  const trace::TraceData d = trace::read_trace(out.str()).value();
  EXPECT_EQ(d.threads.at({0, track_of(Resource::kCompute, 1)}), "compute 1");
  auto g = import_memwall_trace(d, 0, 0, -1);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ASSERT_EQ(g->schedule.tasks.size(), 3u);
  for (const Task& t : g->schedule.tasks) {
    EXPECT_EQ(t.resource, Resource::kCompute);
    EXPECT_EQ(t.lane, t.name == "kernel 1" ? 1 : 0) << t.name;
  }
  place_ranks(hw, *g);
  EXPECT_NEAR(replay_time(*g, hw), r.makespan_s, 1e-6 * r.makespan_s);
}

// Importers give each stream of a resource a lane, numbered by load: the main stream (most measured time) is
// lane 0, whichever stream a step's first kernel ran on.
TEST(Replay, LanesAreNumberedByLoad) {
  Schedule s;
  const double measured[] = {1e-4, 3e-3, 1e-3, 5e-5};
  for (int i = 0; i < 4; ++i) {
    s.tasks.push_back(testing::compute_task(i, 0));
    s.tasks.back().measured_s = measured[i];
  }
  Task net = testing::compute_task(4, 0);
  net.resource = Resource::kNetwork;  // a resource's lanes are numbered on their own
  s.tasks.push_back(net);
  assign_lanes(s, {7, 20, 20, 13, 20});
  EXPECT_EQ(s.tasks[0].lane, 1);
  EXPECT_EQ(s.tasks[1].lane, 0);
  EXPECT_EQ(s.tasks[2].lane, 0);
  EXPECT_EQ(s.tasks[3].lane, 2);
  EXPECT_EQ(s.tasks[4].lane, 0);
}

// The hardware what-ifs simulate applies: bandwidths (NVMe's combined rate too, when the file sets it),
// the GPU's FLOP/s, another GPU, the node count.
TEST(Replay, HardwareWhatIfsChangeOnlyWhatTheyName) {
  const HardwareSpec base = testing::load_hardware_scenario("dgx2");
  HardwareSpec hw = base;
  hw.nvme.drive_readwrite_Bps = 3e9;
  ASSERT_TRUE(apply_hardware_what_ifs(
                  {{"nvme", "2"}, {"compute", "1.5"}, {"nodes", "4"}, {"gpu_memory", "3"}}, nullptr, hw)
                  .is_ok());
  EXPECT_DOUBLE_EQ(hw.nvme.drive_read_Bps, 2 * base.nvme.drive_read_Bps);
  EXPECT_DOUBLE_EQ(hw.nvme.drive_write_Bps, 2 * base.nvme.drive_write_Bps);
  EXPECT_DOUBLE_EQ(hw.nvme.drive_readwrite_Bps, 6e9);
  EXPECT_DOUBLE_EQ(hw.gpu.achievable_flops, 1.5 * base.gpu.achievable_flops);
  EXPECT_DOUBLE_EQ(hw.gpu.hbm_Bps, 3 * base.gpu.hbm_Bps);
  EXPECT_EQ(hw.nodes, 4);
  EXPECT_DOUBLE_EQ(hw.pcie.gpu_link_Bps, base.pcie.gpu_link_Bps);
  EXPECT_DOUBLE_EQ(hw.cpu.memory_Bps, base.cpu.memory_Bps);
  HardwareSpec derived = base;  // no combined rate in the file: it stays derived from the two
  ASSERT_TRUE(apply_hardware_what_ifs({{"nvme", "2"}}, nullptr, derived).is_ok());
  EXPECT_EQ(derived.nvme.drive_readwrite_Bps, base.nvme.drive_readwrite_Bps);
  EXPECT_DOUBLE_EQ(derived.nvme.readwrite_Bps(), 2 * base.nvme.readwrite_Bps());
  const HardwareSpec h100 = testing::load_hardware_scenario("dgx-h100");
  HardwareSpec swapped = base;
  ASSERT_TRUE(apply_hardware_what_ifs({{"gpu", "dgx-h100"}}, &h100, swapped).is_ok());
  EXPECT_EQ(swapped.gpu.count, base.gpu.count);
  EXPECT_DOUBLE_EQ(swapped.gpu.achievable_flops, h100.gpu.achievable_flops);
  EXPECT_FALSE(apply_hardware_what_ifs({{"gpu", "x"}}, nullptr, swapped).is_ok());
  EXPECT_FALSE(apply_hardware_what_ifs({{"nodes", "1.5"}}, nullptr, swapped).is_ok());
  EXPECT_FALSE(apply_hardware_what_ifs({{"pcie", "0"}}, nullptr, swapped).is_ok());
}

TEST(Replay, BadInputIsNamed) {
  EXPECT_FALSE(parse_what_if("pcie").is_ok());
  auto w = parse_what_if("disk=2");
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("allowed: pcie"), std::string::npos);
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const Traced t = traced_run(hw, "zero-3");
  auto out_of_range = import_memwall_trace(t.data, 0, 3, 5);
  ASSERT_FALSE(out_of_range.is_ok());
  EXPECT_NE(out_of_range.status().message().find("steps 0:2"), std::string::npos);
  trace::TraceData no_deps = t.data;
  for (auto& s : no_deps.spans) s.deps.clear();
  auto old = import_memwall_trace(no_deps, 0, 0, -1);
  ASSERT_FALSE(old.is_ok());
  EXPECT_NE(old.status().message().find("no task dependencies"), std::string::npos);
  EXPECT_FALSE(import_memwall_trace(t.data, 7, 0, -1).is_ok());  // no such rank
  // A span edited into something no run measures: named by its task, not replayed.
  const auto first = [](trace::TraceData& d, const char* category) -> trace::TraceSpan& {
    for (auto& s : d.spans) {
      if (s.task >= 0 && s.category == category) return s;
    }
    ADD_FAILURE() << "no " << category << " span";
    return d.spans.front();
  };
  const std::pair<std::string, std::function<void(trace::TraceData&)>> edits[] = {
      {"has args.bytes -5; allowed: a finite number, 0 or more",
       [&](trace::TraceData& d) { first(d, "compute").bytes = -5; }},
      {"has dur -1", [&](trace::TraceData& d) { first(d, "compute").dur_us = -1; }},
      {"has args.flops inf", [&](trace::TraceData& d) { first(d, "compute").flops = HUGE_VAL; }},
      {"): collective 'bogus' is not one memwall runs; allowed: allgather",
       [&](trace::TraceData& d) {
         trace::TraceSpan& s = first(d, "compute");  // (one rank's run has no collectives: made one)
         s.category = "collective";
         s.collective = "bogus";
       }},
  };
  for (const auto& [want, edit] : edits) {
    trace::TraceData bad = t.data;
    edit(bad);
    auto r = import_memwall_trace(bad, 0, 0, -1);
    ASSERT_FALSE(r.is_ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("task ", 0), 0u) << r.status().message();
  }
}

}  // namespace
}  // namespace memwall
