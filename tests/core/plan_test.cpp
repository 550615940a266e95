// Planner: schedule invariants over many configurations, a golden schedule derived by hand, budgets,
// capacity handling, and agreement of the schedule's memory peak with the analytic model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "exec/executor.h"
#include "graph/model_graph.h"
#include "memory/memory_model.h"
#include "plan/planner.h"
#include "test_support.h"

namespace memwall {
namespace {

// A small GPT-2 style model: 4 layers, hidden 256, 8 heads, vocabulary 1000.
ModelSpec tiny_model() {
  ModelSpec m;
  m.name = "tiny";
  m.model_type = "gpt2";
  m.layers = 4;
  m.hidden = 256;
  m.heads = 8;
  m.kv_heads = 8;
  m.ffn_hidden = 1024;
  m.vocab = 1000;
  m.max_positions = 128;
  return m;
}

struct Config {
  int stage;
  OffloadDevice params;
  OffloadDevice optimizer;
  bool prefetch;
  int tiling;
  bool checkpointing;
  bool cpu_checkpointing;
  int interval;
  int dp;
};

RunConfig make_run(const Config& c, const ModelSpec& m, const HardwareSpec& hw) {
  RunConfig run;
  run.name = "test";
  run.precision = Precision::kBf16;
  run.micro_batch_per_gpu = {false, 2};
  run.zero.stage = c.stage;
  run.zero.overlap_comm = true;
  run.zero.offload_param.device = c.params;
  run.zero.offload_param.max_in_cpu = 0;
  run.zero.offload_optimizer.device = c.optimizer;
  run.zero.sub_group_size = 3e5;
  run.zero.param_persistence_threshold = {false, 1000};
  run.zero.prefetch_bucket_size = {false, 3e5};
  run.zero.max_live_parameters = 1e6;
  run.zero.max_reuse_distance = 0;
  run.zero.offload_param.buffer_size = 1e6;
  run.memwall.prefetch = c.prefetch;
  run.memwall.tiling_factor = c.tiling;
  run.memwall.data_parallel = c.dp;
  run.activation_checkpointing.enabled = c.checkpointing;
  run.activation_checkpointing.cpu_checkpointing = c.cpu_checkpointing;
  run.activation_checkpointing.interval = c.interval;
  Status s = resolve_run_config(run, m, hw);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return run;
}

// Ancestor sets of every task (bitsets), for DAG-level checks on small schedules.
class Reach {
 public:
  explicit Reach(const Schedule& s) : words_((s.tasks.size() + 63) / 64), bits_(s.tasks.size() * words_, 0) {
    for (const Task& t : s.tasks) {
      for (int d : t.deps) {
        set(t.id, d);
        for (size_t w = 0; w < words_; ++w) bits_[t.id * words_ + w] |= bits_[d * words_ + w];
      }
    }
  }
  bool is_ancestor(int a, int of) const { return (bits_[of * words_ + a / 64] >> (a % 64)) & 1; }

 private:
  void set(int t, int a) { bits_[t * words_ + a / 64] |= 1ull << (a % 64); }
  size_t words_;
  std::vector<std::uint64_t> bits_;
};

void check_invariants(const Schedule& s, const ModelGraph& g, const RunConfig& run,
                      const std::string& label) {
  SCOPED_TRACE(label);
  // Dependencies point backwards (so the DAG is acyclic and the list is an execution order).
  for (const Task& t : s.tasks) {
    for (int d : t.deps) ASSERT_LT(d, t.id) << t.name;
  }
  // Replaying allocs and frees in list order never uses a dead buffer, double-frees or frees a persistent
  // one.
  Result<MemoryTimeline> tl = replay_memory(s);
  ASSERT_TRUE(tl.is_ok()) << tl.status().message();
  // Every buffer: exactly one alloc; non-persistent ones exactly one free; every use between them in the DAG.
  std::vector<int> alloc_of(s.buffers.size(), -1), free_of(s.buffers.size(), -1);
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::kAlloc) {
      ASSERT_EQ(alloc_of[t.buffer], -1);
      alloc_of[t.buffer] = t.id;
    }
    if (t.kind == TaskKind::kFree) {
      ASSERT_EQ(free_of[t.buffer], -1);
      free_of[t.buffer] = t.id;
    }
  }
  for (const Buffer& b : s.buffers) {
    ASSERT_GE(alloc_of[b.id], 0) << b.name;
    EXPECT_EQ(free_of[b.id] >= 0, !b.persistent) << b.name;
  }
  const Reach reach(s);
  for (const Task& t : s.tasks) {
    for (int b : t.uses) {
      EXPECT_TRUE(reach.is_ancestor(alloc_of[b], t.id))
          << t.name << " uses " << s.buffers[b].name << " before alloc";
      if (free_of[b] >= 0) {
        EXPECT_TRUE(reach.is_ancestor(t.id, free_of[b]))
            << t.name << " uses " << s.buffers[b].name << " after free";
      }
    }
  }
  // Every parameter of an op is on the GPU (whole) when the op computes.
  for (const Task& t : s.tasks) {
    if (t.kind != TaskKind::kCompute || t.op < 0) continue;
    for (int p : g.ops[t.op].params) {
      const std::string& name = g.params[p].name;
      const bool present = std::any_of(t.uses.begin(), t.uses.end(), [&](int b) {
        const Buffer& buf = s.buffers[b];
        return buf.tier == Tier::kGpu && buf.name.rfind(name, 0) == 0 &&
               buf.name.find("grad") == std::string::npos &&
               (buf.bytes >= run.param_bytes() * g.params[p].elements - 1e-6);
      });
      EXPECT_TRUE(present) << t.name << " runs without " << name << " whole on the GPU";
    }
  }
  // Each gradient is all-reduced once or reduce-scattered once per backward use (dp > 1: the tied
  // embedding's two uses accumulate into one shard), and offloaded once (optimizer off the GPU).
  std::map<std::string, int> reduced, scattered, offloaded;
  std::map<int, int> backward_uses;
  for (const Task& t : s.tasks) {
    if (t.name.rfind("reducescatter grad ", 0) == 0) ++scattered[t.name.substr(t.name.find("grad ") + 5)];
    if (t.name.rfind("allreduce grad ", 0) == 0) ++reduced[t.name.substr(t.name.find("grad ") + 5)];
    if (t.name.rfind("gpu->cpu grad ", 0) == 0) ++offloaded[t.name.substr(14)];
    if (t.kind == TaskKind::kCompute && t.phase == Phase::kBackward) {
      for (int p : g.ops[t.op].params) ++backward_uses[p];
    }
  }
  const int dp = run.memwall.data_parallel;
  for (const GraphParam& p : g.params) {
    if (dp > 1 && scattered[p.name] > 0) {
      EXPECT_EQ(scattered[p.name], backward_uses[p.id]) << p.name;
      EXPECT_EQ(reduced[p.name], 0) << p.name;
    } else {
      EXPECT_EQ(reduced[p.name] + scattered[p.name], dp > 1 ? 1 : 0) << p.name;
    }
    EXPECT_EQ(offloaded[p.name], run.zero.offload_optimizer.device != OffloadDevice::kNone ? 1 : 0) << p.name;
  }
  // The optimizer updates every element of this rank's shard exactly once.
  double updated = 0;
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::kOptimizerStep) updated += t.elements;
  }
  const double expected = run.zero.stage >= 1 ? g.total_param_elements() / dp : g.total_param_elements();
  EXPECT_NEAR(updated, expected, 1e-6 * expected);
}

TEST(Planner, InvariantsHoldAcrossConfigurations) {
  const ModelSpec m = tiny_model();
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  using D = OffloadDevice;
  const Config configs[] = {
      {0, D::kNone, D::kNone, true, 1, false, false, 1, 4},
      {1, D::kNone, D::kCpu, true, 1, true, false, 1, 4},
      {2, D::kNone, D::kNone, true, 1, true, false, 2, 4},
      {2, D::kNone, D::kCpu, true, 2, true, false, 1, 2},
      {3, D::kNone, D::kNone, true, 1, true, false, 1, 4},
      {3, D::kNone, D::kNone, false, 1, false, false, 1, 4},
      {3, D::kCpu, D::kCpu, true, 1, true, true, 1, 4},
      {3, D::kCpu, D::kCpu, false, 4, true, true, 2, 1},
      {3, D::kNvme, D::kNvme, true, 1, true, true, 1, 4},
      {3, D::kNvme, D::kNvme, true, 4, true, false, 4, 2},
      {3, D::kNvme, D::kNvme, false, 2, false, false, 1, 16},
      {3, D::kNone, D::kNvme, true, 1, true, true, 2, 1},
      {3, D::kNvme, D::kCpu, true, 8, true, true, 1, 8},
  };
  int index = 0;
  for (const Config& c : configs) {
    const RunConfig run = make_run(c, m, hw);
    GraphOptions opt;
    opt.micro_batch = 2;
    opt.sequence_length = run.memwall.sequence_length;
    opt.tiling = c.tiling;
    const ModelGraph g = build_model_graph(m, opt);
    const Schedule s = plan_graph(g, run, hw);
    check_invariants(s, g, run, "config " + std::to_string(index++));
  }
}

TEST(Planner, GoldenScheduleOfOneLayerDerivedByHand) {
  // One idealized block (qkv, attn, proj, fc1, gelu, fc2; four weights, nothing else), ZeRO-3 with params
  // and optimizer on CPU, dp 2, no checkpointing, no reuse: each weight is staged (h2d) and all-gathered
  // once in forward and once in backward, its gradient reduce-scattered and copied to the CPU once, and
  // one optimizer sub-group updates the shard. The updated shard stays on the CPU, where parameters live.
  ModelSpec m;
  m.name = "one-block";
  m.model_type = "zero-infinity-paper";
  m.layers = 1;
  m.hidden = 512;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 2048;
  m.vocab = 0;
  m.max_positions = 64;
  m.linear_bias = false;
  m.norm = NormKind::kNone;
  m.position = PositionKind::kNone;
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = make_run({3, OffloadDevice::kCpu, OffloadDevice::kCpu, true, 1, false, false, 1, 2}, m, hw);
  run.zero.sub_group_size = 1e9;
  run.zero.max_reuse_distance = -1;  // even fc2, used again right away in backward, is fetched again
  const Schedule s = plan_iteration(m, run, hw).value();
  std::map<std::string, int> count;
  std::map<std::string, double> bytes;
  for (const Task& t : s.tasks) {
    const std::string key =
        t.kind == TaskKind::kCollective ? collective_name(t.collective) : resource_name(t.resource);
    ++count[key];
    bytes[key] += t.bytes;
  }
  const double weights = 12.0 * 512 * 512;  // elements
  EXPECT_EQ(count["compute"], 12);          // 6 ops forward + 6 backward
  EXPECT_EQ(count["h2d"], 8);               // 4 weights x (forward, backward), shards of 1/2
  EXPECT_DOUBLE_EQ(bytes["h2d"], 2 * 2 * weights / 2);
  EXPECT_EQ(count["allgather"], 8);
  EXPECT_DOUBLE_EQ(bytes["allgather"], 2 * 2 * weights);
  EXPECT_EQ(count["reducescatter"], 4);
  EXPECT_DOUBLE_EQ(bytes["reducescatter"], 2 * weights);
  EXPECT_EQ(count["d2h"], 4);
  EXPECT_DOUBLE_EQ(bytes["d2h"], 2 * weights / 2);
  EXPECT_EQ(count["cpu_optimizer"], 1);
  EXPECT_EQ(count["nvme_read"] + count["nvme_write"] + count["allreduce"], 0);
}

TEST(Planner, ReuseDistanceKeepsParametersGathered) {
  const ModelSpec m = tiny_model();
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = make_run({3, OffloadDevice::kCpu, OffloadDevice::kCpu, true, 1, false, false, 1, 4}, m, hw);
  auto gathers = [&](const RunConfig& r) {
    Result<Schedule> s = plan_iteration(m, r, hw);
    EXPECT_TRUE(s.is_ok());
    int n = 0;
    if (s.is_ok()) {
      for (const Task& t : s->tasks) n += t.collective == CollectiveKind::kAllGather;
    }
    return n;
  };
  const int refetch = gathers(run);
  run.zero.max_reuse_distance = 1e12;
  EXPECT_LT(gathers(run), refetch);
}

TEST(Planner, PrefetchStaysWithinItsBudgets) {
  // Measured in executor time: the gathered parameters alive at once never exceed max_live_parameters
  // (plus the one op that is always allowed, whatever its size).
  const ModelSpec m = testing::load_model_scenario("gpt2-medium");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run =
      make_run({3, OffloadDevice::kNvme, OffloadDevice::kNvme, true, 1, true, true, 1, 16}, m, hw);
  run.zero.prefetch_bucket_size = {false, 4e6};
  run.zero.max_live_parameters = 8e6;
  const Schedule s = plan_iteration(m, run, hw).value();
  ReferenceExecutor exec(hw, s.ranks_per_node);
  const RunResult r = run_schedule(s, exec).value();
  std::vector<std::pair<double, double>> events;  // (time, +/- elements)
  for (const Task& t : s.tasks) {
    if (t.kind != TaskKind::kAlloc && t.kind != TaskKind::kFree) continue;
    const Buffer& b = s.buffers[t.buffer];
    if (b.category != MemCategory::kModelStateWorking || b.name.find("gathered") == std::string::npos)
      continue;
    const double elements = b.bytes / run.param_bytes();
    events.emplace_back(r.timing[t.id].end_s, t.kind == TaskKind::kAlloc ? elements : -elements);
  }
  std::sort(events.begin(), events.end(),
            [](auto a, auto b) { return a.first < b.first || (a.first == b.first && a.second < b.second); });
  double live = 0, peak = 0;
  for (const auto& [time, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  const double largest_op = graph_param_stats(m, 1, 1, 0).largest_op_elements;
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, run.zero.max_live_parameters + largest_op);
}

TEST(Planner, NoPrefetchIsSlowerThanPrefetch) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  auto iteration = [&](const RunConfig& r) {
    const Schedule s = plan_iteration(m, r, hw).value();
    ReferenceExecutor exec(hw, s.ranks_per_node);
    return run_schedule(s, exec).value().makespan_s;
  };
  const double with = iteration(run);
  run.memwall.prefetch = false;
  EXPECT_GT(iteration(run), with * 1.05);
}

// A whole accumulation step as one schedule (memwall train's runs and traces, the simulator's iteration):
// the setup once, G forward/backward copies back to back, the optimizer once; with the optimizer on NVMe
// every micro-batch after the first reads the gradient sums back. It holds the same memory at its peak as
// one micro-batch, and its run can be merged from the copies' runs.
TEST(Planner, AnAccumulatedStepIsTheMicroStepsBackToBack) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const int G = 4;
  // The NVMe optimizer twice: its gradients kept in CPU memory ("auto": the node holds 10B's) and on NVMe.
  const struct {
    const char* runname;
    OptimizerGradients grads;
  } cases[] = {{"zero-3", OptimizerGradients::kAuto},
               {"zero-infinity-cpu", OptimizerGradients::kAuto},
               {"zero-infinity-nvme", OptimizerGradients::kAuto},
               {"zero-infinity-nvme", OptimizerGradients::kNvme}};
  for (const auto& [runname, grads] : cases) {
    SCOPED_TRACE(optimizer_gradients_name(grads));
    RunConfig run = testing::load_run_scenario(runname);
    run.memwall.optimizer_gradients = grads;
    ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
    const Schedule one = plan_iteration(m, run, hw).value();
    run.gradient_accumulation_steps = {false, G};
    const Schedule s = plan_iteration(m, run, hw).value();
    // Ranks compare fingerprints: planning again gives the same.
    EXPECT_EQ(fingerprint(plan_iteration(m, run, hw).value()), fingerprint(s));
    const bool nvme = grads == OptimizerGradients::kNvme;
    // (Stage 3's persistent small parameters reduce and offload their gradients in the last micro-batch
    // only: summed whole on the GPU before, never read back.)
    std::size_t setup = 0, optimizer = 0, rest = 0, sums = 0, last_only = 0;
    double written = 0, read_back = 0;
    for (const Task& t : s.tasks) {
      (t.phase == Phase::kSetup ? setup : t.phase == Phase::kOptimizer ? optimizer : rest) += 1;
      last_only += t.last_micro_batch;
      if (t.later_micro_batches) {
        ++sums;
        EXPECT_EQ(t.kind, TaskKind::kNvmeRead) << t.name;
        read_back += t.bytes;
      }
      if (t.kind == TaskKind::kNvmeWrite && t.phase == Phase::kBackward && !t.last_micro_batch)
        written += t.bytes;
    }
    ASSERT_GT(optimizer, 0u) << runname;
    // One read of the sum per gradient written to NVMe, of its bytes; nothing else changes.
    EXPECT_EQ(sums > 0, nvme) << runname;
    EXPECT_DOUBLE_EQ(read_back, written) << runname;
    EXPECT_EQ(s.tasks.size(), one.tasks.size() + sums) << runname;
    if (!nvme) {
      EXPECT_EQ(fingerprint(s), fingerprint(one)) << runname;
    }

    const AccumulatedSchedule a = accumulated_schedule(s, G);
    ASSERT_GT(last_only, 0u) << runname;
    ASSERT_EQ(a.schedule.tasks.size(), setup + G * rest - sums - (G - 1) * last_only + optimizer) << runname;
    ASSERT_EQ(a.origin.size(), a.schedule.tasks.size());
    for (std::size_t i = 0; i < a.schedule.tasks.size(); ++i) {
      const Task& t = a.schedule.tasks[i];
      const Task& o = s.tasks[static_cast<std::size_t>(a.origin[i])];
      EXPECT_EQ(t.id, static_cast<int>(i));
      EXPECT_EQ(t.kind, o.kind);
      EXPECT_EQ(t.bytes, o.bytes);
      for (int d : t.deps) ASSERT_TRUE(d >= 0 && d < t.id) << t.name;
      if (o.phase == Phase::kSetup) {
        EXPECT_EQ(a.micro[i], 0);
      } else if (o.phase == Phase::kOptimizer) {
        EXPECT_EQ(a.micro[i], G - 1);
      } else if (o.later_micro_batches) {
        EXPECT_GT(a.micro[i], 0);
      }
      const bool named = t.name.rfind("micro-batch " + std::to_string(a.micro[i] + 1) + "/4: ", 0) == 0;
      EXPECT_EQ(named, a.micro[i] + 1 < G) << t.name;
    }
    EXPECT_DOUBLE_EQ(a.schedule.flops(), G * s.flops());
    const MemoryTimeline peak1 = replay_memory(s).value(), peakG = replay_memory(a.schedule).value();
    for (int tier = 0; tier < kTierCount; ++tier)
      EXPECT_DOUBLE_EQ(peakG.peak_bytes[tier], peak1.peak_bytes[tier]);
    // On the reference executor the copies run one after another: the two middle ones (the same tasks)
    // take the same time, the first no longer (no sums to read), the last longer (the optimizer step).
    ReferenceExecutor exec(hw, s.ranks_per_node);
    const RunResult r = run_schedule(a.schedule, exec).value();
    const std::vector<double> each = micro_batch_seconds(a, r);
    ASSERT_EQ(each.size(), static_cast<std::size_t>(G));
    EXPECT_NEAR(each[1], each[2], 1e-9 * each[1]) << runname;
    EXPECT_LE(each[0], each[1] * (1 + 1e-9)) << runname;
    EXPECT_GT(each[3], each[2]) << runname;
    EXPECT_NEAR(each[0] + each[1] + each[2] + each[3], r.makespan_s, 1e-9 * r.makespan_s) << runname;
    for (std::size_t i = 0; i < a.schedule.tasks.size(); ++i) {
      if (a.micro[i] + 1 < G) {
        EXPECT_NE(a.schedule.tasks[i].resource, Resource::kCpuOptimizer);
      }
    }
    // Merged from the copies' runs: every task's timing from its copy's run, busy time summed.
    std::vector<RunResult> runs(G);
    for (int k = 0; k < G; ++k) {
      runs[static_cast<std::size_t>(k)].makespan_s = 1 + k;
      runs[static_cast<std::size_t>(k)].busy_s[0] = 0.5;
      for (const Task& t : s.tasks)
        runs[static_cast<std::size_t>(k)].timing.push_back({t.id, 10.0 * k, 10.0 * k + t.id});
    }
    const RunResult merged = accumulated_run(a, runs);
    EXPECT_DOUBLE_EQ(merged.makespan_s, 10);
    EXPECT_DOUBLE_EQ(merged.busy_s[0], 2);
    for (std::size_t i = 0; i < merged.timing.size(); ++i) {
      EXPECT_EQ(merged.timing[i].task, static_cast<int>(i));
      EXPECT_DOUBLE_EQ(merged.timing[i].start_s, 10.0 * a.micro[i]);
      EXPECT_DOUBLE_EQ(merged.timing[i].end_s, 10.0 * a.micro[i] + a.origin[i]);
    }
    // One micro-batch: the schedule itself.
    EXPECT_EQ(fingerprint(accumulated_schedule(one, 1).schedule), fingerprint(one));
  }
}

// Counts a step cannot hold: more than 2^24 micro-batches or accumulation steps (as given or derived from
// train_batch_size) are one line from resolve_run_config; an accumulated schedule past 2^24 tasks is refused
// naming the most gradient_accumulation_steps this schedule allows.
TEST(Planner, AStepTooLargeToScheduleIsOneLine) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-3");
  run.gradient_accumulation_steps = {false, 33554432.0};
  const Status gas = resolve_run_config(run, m, hw);
  EXPECT_NE(gas.message().find("key 'gradient_accumulation_steps': 33554432 (as given or derived from "
                               "train_batch_size) is not allowed; allowed: 1..16777216"),
            std::string::npos)
      << gas.message();
  run = testing::load_run_scenario("zero-3");
  run.micro_batch_per_gpu = {true, 0};
  run.gradient_accumulation_steps = {false, 1};
  run.train_batch_size = {false, 16.0 * (1 << 25)};  // 2^25 sequences per GPU of 16
  EXPECT_NE(resolve_run_config(run, m, hw).message().find("key 'train_micro_batch_size_per_gpu': 33554432"),
            std::string::npos);
  run = testing::load_run_scenario("zero-3");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const Schedule s = plan_iteration(m, run, hw).value();
  const auto most = static_cast<int>((1 << 24) / s.tasks.size());
  EXPECT_TRUE(accumulation_fits(s, most).is_ok());
  const Status over = accumulation_fits(s, most + 1);
  EXPECT_NE(over.message().find("allowed: at most " + std::to_string(most)), std::string::npos)
      << over.message();
}

// Stages 0 and 1 sum whole gradients over the micro-batches and reduce (and offload) them once per step, at
// the accumulation boundary; stage 2 reduce-scatters every micro-batch's.
TEST(Planner, StagesZeroAndOneReduceAtTheAccumulationBoundary) {
  const ModelSpec m = testing::load_model_scenario("gpt2");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  const int G = 4;
  for (const int stage : {0, 1, 2}) {
    for (const OffloadDevice opt : {OffloadDevice::kNone, OffloadDevice::kCpu}) {
      if (stage == 0 && opt == OffloadDevice::kCpu) continue;
      SCOPED_TRACE("stage " + std::to_string(stage) +
                   (opt == OffloadDevice::kCpu ? ", optimizer on CPU" : ""));
      RunConfig run = testing::load_run_scenario("zero-2");
      run.zero.stage = stage;
      run.zero.offload_optimizer.device = opt;
      run.gradient_accumulation_steps = {false, G};
      ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
      const Schedule s = plan_iteration(m, run, hw).value();
      const AccumulatedSchedule a = accumulated_schedule(s, G);
      std::size_t reductions = 0, offloads = 0, in_last = 0;
      for (std::size_t i = 0; i < a.schedule.tasks.size(); ++i) {
        const Task& t = a.schedule.tasks[i];
        const bool reduce = t.kind == TaskKind::kCollective && t.param >= 0;
        const bool offload = t.kind == TaskKind::kCopy && t.src == Tier::kGpu && t.dst == Tier::kCpu;
        reductions += reduce;
        offloads += offload;
        if (reduce || offload) in_last += a.micro[i] == G - 1;
        EXPECT_EQ(t.last_micro_batch, stage <= 1 && (reduce || offload)) << t.name;
      }
      ASSERT_GT(reductions, 0u);
      if (stage <= 1) {
        EXPECT_EQ(in_last, reductions + offloads);  // all at the boundary
      } else {
        EXPECT_EQ(reductions % G, 0u);  // every micro-batch's
        EXPECT_EQ(in_last * G, reductions + offloads);
      }
      EXPECT_EQ(offloads > 0, opt == OffloadDevice::kCpu);
    }
  }
}

// Stage 3's persistent small parameters (at most stage3_param_persistence_threshold elements, kept whole on
// every GPU)
// are updated like stage 1's: their whole gradients summed over the micro-batches, all-reduced and offloaded
// once per step, and after each sub-group's step this rank's slice of them goes to the GPU (where the
// optimizer and the other parameters are not); once every sub-group has stepped, one all-gather (DeepSpeed's
// _post_step) fills every rank's whole copies with the others' slices.
TEST(Planner, Stage3PersistentParametersAreGatheredAfterTheStep) {
  const ModelSpec m = tiny_model();
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  using D = OffloadDevice;
  const int G = 2;
  for (const auto& [params, optimizer] :
       {std::pair{D::kNone, D::kNone}, std::pair{D::kNone, D::kCpu}, std::pair{D::kCpu, D::kCpu},
        std::pair{D::kNvme, D::kCpu}, std::pair{D::kNvme, D::kNvme}}) {
    for (const int dp : {1, 4}) {
      SCOPED_TRACE(strprintf("params on %s, optimizer on %s, dp %d", offload_device_name(params),
                             offload_device_name(optimizer), dp));
      RunConfig run = make_run({3, params, optimizer, true, 1, false, false, 1, dp}, m, hw);
      run.gradient_accumulation_steps = {false, G};
      GraphOptions opt;
      opt.micro_batch = 2;
      opt.sequence_length = run.memwall.sequence_length;
      const ModelGraph g = build_model_graph(m, opt);
      run.zero.sub_group_size = g.total_param_elements() / dp / 4;  // 4 or 5 sub-groups per rank
      const Schedule s = plan_graph(g, run, hw);
      check_invariants(s, g, run, "persistent");
      double persistent = 0;
      std::set<std::string> small;
      for (const GraphParam& p : g.params) {
        if (p.elements > run.zero.param_persistence_threshold.value) continue;
        persistent += p.elements;
        small.insert(p.name);
      }
      ASSERT_GT(persistent, 0);
      ASSERT_LT(persistent, g.total_param_elements() / 10);
      const double b = run.param_bytes();
      double gathered = 0, copied = 0;
      int gathers = 0, groups = 0;
      for (const Task& t : s.tasks) groups = std::max(groups, t.subgroup + 1);
      ASSERT_GE(groups, 4);
      for (const Task& t : s.tasks) {
        EXPECT_EQ(t.name.find("allgather params "), std::string::npos) << t.name;  // no gather per sub-group
        if (t.kind == TaskKind::kCollective && t.name == "allgather persistent params") {
          EXPECT_EQ(t.group, dp);
          EXPECT_EQ(t.phase, Phase::kOptimizer);
          EXPECT_EQ(t.subgroup, -1);
          gathered += t.bytes;
          ++gathers;
          std::set<int> after;  // the sub-groups whose step (or its copy to the GPU) it waits for
          for (int d : t.deps) after.insert(s.tasks[static_cast<std::size_t>(d)].subgroup);
          EXPECT_EQ(after.size(), static_cast<std::size_t>(groups));
          EXPECT_EQ(*after.begin(), 0);
        }
        if (t.name.rfind("cpu->gpu persistent params ", 0) == 0) {
          EXPECT_EQ(t.dst, Tier::kGpu);
          copied += t.bytes;
        }
        // A persistent parameter's gradient: reduced and offloaded at the accumulation boundary only, and
        // never read back from NVMe (nothing was written there before).
        const bool reduce_or_offload = (t.kind == TaskKind::kCollective && t.param >= 0) ||
                                       (t.kind == TaskKind::kCopy && t.param >= 0 && t.src == Tier::kGpu) ||
                                       (t.kind == TaskKind::kNvmeWrite && t.param >= 0);
        if (t.param >= 0 && small.count(g.params[t.param].name) > 0) {
          if (reduce_or_offload) {
            EXPECT_TRUE(t.last_micro_batch) << t.name;
          }
          EXPECT_FALSE(t.later_micro_batches) << t.name;
        }
      }
      EXPECT_EQ(gathers, dp > 1 ? 1 : 0);
      EXPECT_NEAR(gathered, dp > 1 ? b * persistent : 0, 1e-6 * b * persistent);
      const bool to_gpu = optimizer != D::kNone && params != D::kNone;
      EXPECT_NEAR(copied, to_gpu ? b * persistent / dp : 0, 1e-6 * b * persistent);
    }
  }
  // stage3_model_persistence_threshold: the plan keeps whole what DeepSpeed's rule admits (the running total
  // within the cap), the persistent elements predict counts too.
  for (const double cap : {2e4, 1e30}) {
    RunConfig run = make_run({3, D::kCpu, D::kCpu, true, 1, false, false, 1, 4}, m, hw);
    run.zero.model_persistence_threshold = cap;
    const Schedule s = plan_iteration(m, run, hw).value();
    double whole = 0;
    for (const Buffer& b : s.buffers) {
      if (b.param >= 0 && b.role == BufferRole::kResident) whole += b.bytes / run.param_bytes();
    }
    const double want =
        graph_param_stats(m, 1, 1, run.zero.param_persistence_threshold.value, cap).persistent_elements;
    EXPECT_GT(want, 0);
    EXPECT_EQ(whole, want) << "cap " << cap;
    if (cap < 1e6) {
      EXPECT_LE(whole, cap);
    }
  }
  // Without a threshold every parameter is partitioned and nothing is gathered after the step.
  RunConfig run = make_run({3, D::kCpu, D::kCpu, true, 1, false, false, 1, 4}, m, hw);
  run.zero.param_persistence_threshold = {false, 0};
  const Schedule s = plan_iteration(m, run, hw).value();
  for (const Task& t : s.tasks) {
    EXPECT_EQ(t.name.find("allgather params"), std::string::npos) << t.name;
    EXPECT_EQ(t.name.find("persistent"), std::string::npos) << t.name;
  }
}

// ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio 0.3, GPT-2 XL on a DGX-2, ZeRO-3 with the optimizer on
// the CPU in 10 sub-groups per rank): DeepSpeed's int((1 - 0.3) x 10) = 7 first sub-groups step on the GPU
// (their states and gradients stay there), the other 3 on the CPU, whose gradients alone go to the CPU and
// whose parameters alone come back; the memory peaks agree with the analytic model's as for the other runs,
// and the CPU step takes 3/10 of its time without Twin-Flow. A ratio that leaves no sub-group on the GPU
// (0.95 x 10 sub-groups) plans the whole-CPU schedule and says why.
TEST(Planner, TwinFlowStepsTheFirstSubGroupsOnTheGpu) {
  const ModelSpec m = testing::load_model_scenario("gpt2-xl");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::twin_flow_ready_run(m, hw);
  const double shard = m.total_params() / run.memwall.data_parallel;
  const Schedule all_cpu = plan_iteration(m, run, hw).value();
  run.zero.offload_optimizer.ratio = 0.3;
  const Schedule s = plan_iteration(m, run, hw).value();
  ASSERT_TRUE(replay_memory(s).is_ok());
  int gpu_steps = 0, cpu_steps = 0, param_copies = 0;
  double gpu_elems = 0;
  std::set<int> to_cpu;  // parameters whose gradients go to the CPU
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::kOptimizerStep && t.name.rfind("adam ", 0) == 0) {
      const bool gpu = t.resource == Resource::kCompute;
      EXPECT_EQ(gpu, t.dst == Tier::kGpu) << t.name;
      EXPECT_EQ(gpu, t.subgroup < 7) << t.name;
      (gpu ? gpu_steps : cpu_steps) += 1;
      if (gpu) gpu_elems += t.elements;
    }
    if (t.name.rfind("cpu->gpu params ", 0) == 0) {
      ++param_copies;
      EXPECT_GE(t.subgroup, 7) << t.name;
    }
    if (t.kind == TaskKind::kCopy && t.param >= 0 && t.src == Tier::kGpu && t.dst == Tier::kCpu)
      to_cpu.insert(t.param);
  }
  EXPECT_EQ(gpu_steps, 7);
  EXPECT_EQ(cpu_steps, 3);
  EXPECT_EQ(param_copies, 3);
  EXPECT_NEAR(gpu_elems, 7 * run.zero.sub_group_size, 1);
  ASSERT_FALSE(to_cpu.empty());
  // The gradients that go to the CPU are those of the parameters whose shards start in the last 3 sub-groups.
  double from = 0;
  const ModelGraph g = build_model_graph(m, graph_options(run));
  std::size_t later = 0;
  for (const GraphParam& p : g.params) {
    if (from >= gpu_elems) ++later;
    from += p.elements / run.memwall.data_parallel;
  }
  EXPECT_EQ(to_cpu.size(), later);
  // Memory: the schedule's peaks against the analytic model's (docs/memory-model.md's tolerances).
  const MemoryEstimate e = estimate_memory(m, run, hw);
  const MemoryTimeline tl = replay_memory(s).value(), tl_cpu = replay_memory(all_cpu).value();
  const double rpn = s.ranks_per_node;
  EXPECT_NEAR(tl.peak_bytes[1] * rpn, e.tier(Tier::kCpu).used_bytes, 0.01 * e.tier(Tier::kCpu).used_bytes);
  EXPECT_LE(tl.peak_bytes[0], 1.02 * e.tier(Tier::kGpu).used_bytes);
  // 7/10 of the 16 B per element of fp32 master, momentum, variance and gradients move to the GPU (which
  // also keeps their 16-bit gradient shards).
  EXPECT_NEAR(tl_cpu.peak_bytes[1] - tl.peak_bytes[1], 0.7 * 16 * shard, 0.01 * 16 * shard);
  EXPECT_GT(tl.peak_bytes[0] - tl_cpu.peak_bytes[0], 0.7 * 16 * shard);
  // The CPU optimizer's busy time on the reference executor: 3/10 of the whole-CPU step's.
  ReferenceExecutor exec(hw, s.ranks_per_node);
  const RunResult r = run_schedule(s, exec).value(), r_cpu = run_schedule(all_cpu, exec).value();
  const auto cpu_opt = static_cast<int>(Resource::kCpuOptimizer);
  EXPECT_NEAR(r.busy_s[cpu_opt], 0.3 * r_cpu.busy_s[cpu_opt], 0.02 * r_cpu.busy_s[cpu_opt]);
  EXPECT_LT(r.makespan_s, r_cpu.makespan_s);
  // 0.95: int(0.05 x 10) = 0 sub-groups on the GPU.
  run.zero.offload_optimizer.ratio = 0.95;
  const Schedule none = plan_iteration(m, run, hw).value();
  EXPECT_EQ(fingerprint(none), fingerprint(all_cpu));
  ASSERT_FALSE(none.notes.empty());
  EXPECT_NE(none.notes.back().find("puts none of the 10 sub-group(s) on the GPU"), std::string::npos)
      << none.notes.back();
}

TEST(Planner, PeakMemoryAgreesWithTheAnalyticModel) {
  // Tolerance (docs/memory-model.md): CPU and NVMe within 1%. On the GPU the analytic model adds every
  // buffer up as if all were live at once, so the schedule's peak is at most that sum (+2%) and at least
  // the sum less what is never live together with the largest operator's gradient (the logits, the
  // prefetch bucket) and DeepSpeed's reduce buckets (memwall reduce-scatters each op's gradient from its
  // own buffer), less 5%.
  // Llama 2: a gated MLP and (70B) grouped-query attention, Eq. (5) generalized as the graph keeps them.
  // Stages 0-2 (data-parallel, zero-2, zero-offload) too, where the models fit them.
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  for (const char* model :
       {"paper-1t", "paper-100b", "gpt3-175b", "llama-2-7b", "llama-2-70b", "gpt2-xl", "paper-10b"}) {
    for (const char* runname :
         {"zero-3", "zero-infinity-cpu", "zero-infinity-nvme", "data-parallel", "zero-2", "zero-offload"}) {
      const ModelSpec m = testing::load_model_scenario(model);
      RunConfig run = testing::load_run_scenario(runname);
      ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
      const MemoryEstimate e = estimate_memory(m, run, hw);
      Result<Schedule> s = plan_iteration(m, run, hw);
      if (!e.fits) {
        EXPECT_FALSE(s.is_ok()) << model << " " << runname;
        continue;
      }
      ASSERT_TRUE(s.is_ok()) << model << " " << runname << ": " << s.status().message();
      const MemoryTimeline tl = replay_memory(*s).value();
      const double rpn = s->ranks_per_node;
      const double gpu = tl.peak_bytes[0], cpu = tl.peak_bytes[1] * rpn, nvme = tl.peak_bytes[2] * rpn;
      const double buckets = e.bytes(Tier::kGpu, MemCategory::kReduceBuckets) +
                             e.bytes(Tier::kGpu, MemCategory::kLogits) +
                             e.bytes(Tier::kGpu, MemCategory::kGatherPrefetch);
      SCOPED_TRACE(std::string(model) + " " + runname);
      EXPECT_LE(gpu, 1.02 * e.tier(Tier::kGpu).used_bytes);
      EXPECT_GE(gpu, e.tier(Tier::kGpu).used_bytes - buckets - 0.05 * e.tier(Tier::kGpu).used_bytes);
      EXPECT_NEAR(cpu, e.tier(Tier::kCpu).used_bytes, 0.01 * e.tier(Tier::kCpu).used_bytes);
      EXPECT_NEAR(nvme, e.tier(Tier::kNvme).used_bytes, 0.01 * e.tier(Tier::kNvme).used_bytes + 1);
    }
  }
}

// Expert parallelism 4 over 8 data-parallel ranks (Mixtral's 8 experts, two layers, one H200 node): each
// expert's parameters are partitioned, gathered and reduced over the 2 ranks holding it, the dense ones over
// all 8; tokens go to the experts and back by all-to-alls of 4 (dispatch and combine, in forward, recompute
// and backward); the optimizer still updates 1/8 of the model per rank; the schedule's memory peak agrees
// with the analytic model as for dense models. ZeRO-2: the step's all-gather splits the same way.
TEST(Planner, ExpertParallelismSplitsTheCollectivesByWhoHoldsAParameter) {
  const HardwareSpec hw = testing::load_hardware_scenario("dgx-h200");
  ModelSpec m = testing::load_model_scenario("mixtral-8x7b");
  m.layers = 2;
  for (const char* runname : {"zero-3", "zero-2"}) {
    SCOPED_TRACE(runname);
    RunConfig run = testing::load_run_scenario(runname);
    run.memwall.expert_parallel = 4;
    run.micro_batch_per_gpu = {false, 1};
    run.train_batch_size = {true, 0};
    run.memwall.sequence_length = 2048;
    ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
    ASSERT_EQ(run.memwall.data_parallel, 8);
    Result<Schedule> s = plan_iteration(m, run, hw);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    const double routed = 2.0 * 2048 * 2 * 4096;  // T x experts_per_token x hidden, 2 B
    std::map<Phase, int> exchanges;
    int expert_gathers = 0, dense_gathers = 0;
    double updated = 0;
    for (const Task& t : s->tasks) {
      if (t.kind == TaskKind::kOptimizerStep) updated += t.elements;
      if (t.kind != TaskKind::kCollective) continue;
      if (t.collective == CollectiveKind::kAllToAll) {
        EXPECT_EQ(t.group, 4) << t.name;
        EXPECT_DOUBLE_EQ(t.bytes, routed) << t.name;
        ++exchanges[t.phase];
        continue;
      }
      const bool expert =
          t.name.find(".expert") != std::string::npos || t.name.find("expert params") != std::string::npos;
      EXPECT_EQ(t.group, expert ? 2 : 8) << t.name;
      if (t.collective == CollectiveKind::kAllGather) ++(expert ? expert_gathers : dense_gathers);
    }
    EXPECT_EQ(exchanges[Phase::kForward], 2 * 2);
    EXPECT_EQ(exchanges[Phase::kBackward], 2 * 2);
    EXPECT_EQ(exchanges[Phase::kRecompute], run.activation_checkpointing.enabled ? 2 * 2 : 0);
    EXPECT_GT(s->tasks.size(), 300u);
    EXPECT_GT(expert_gathers, 0);
    EXPECT_GT(dense_gathers, 0);
    EXPECT_NEAR(updated, m.total_params() / 8, 1e-6 * m.total_params());
    const MemoryEstimate e = estimate_memory(m, run, hw);
    const MemoryTimeline tl = replay_memory(*s).value();
    const double buckets = e.bytes(Tier::kGpu, MemCategory::kReduceBuckets) +
                           e.bytes(Tier::kGpu, MemCategory::kLogits) +
                           e.bytes(Tier::kGpu, MemCategory::kGatherPrefetch);
    EXPECT_LE(tl.peak_bytes[0], 1.02 * e.tier(Tier::kGpu).used_bytes);
    EXPECT_GE(tl.peak_bytes[0],
              e.tier(Tier::kGpu).used_bytes - buckets - 0.05 * e.tier(Tier::kGpu).used_bytes);
  }
}

// ZeRO-Offload's one-step delayed parameter update: the CPU step of the previous step's gradients overlaps
// forward and backward; the updated parameters go to the GPU only after backward; the previous step's
// gradients cost 4 bytes per element of CPU memory more, in the schedule and in predict alike; with gradient
// accumulation the step may start with the first micro-batch. Only ZeRO-Offload (stage 1-2, optimizer on
// the CPU) accepts it.
TEST(Planner, DelayedParameterUpdateOverlapsTheCpuStepWithTheNextStep) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-offload");
  run.zero.sub_group_size = 5e7;         // 13 sub-groups of this rank's 625 M elements
  run.micro_batch_per_gpu = {false, 8};  // backward longer than the whole CPU step
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  auto timed = [&](const RunConfig& r) {
    const Schedule s = plan_iteration(m, r, hw).value();
    ReferenceExecutor exec(hw, s.ranks_per_node);
    return std::make_pair(s, run_schedule(s, exec).value());
  };
  const auto [plain, plain_run] = timed(run);
  RunConfig dpu = run;
  dpu.memwall.delayed_parameter_update = true;
  const auto [delayed, delayed_run] = timed(dpu);
  double optimizer_s = 0, last_backward_end = 0, last_compute_end = 0, first_step_start = 1e30;
  std::map<int, double> copy_start, step_end;  // per sub-group
  for (const Task& t : delayed.tasks) {
    const Completion& tt = delayed_run.timing[static_cast<std::size_t>(t.id)];
    if (t.phase == Phase::kBackward) last_backward_end = std::max(last_backward_end, tt.end_s);
    if (t.phase == Phase::kBackward && t.kind == TaskKind::kCompute)
      last_compute_end = std::max(last_compute_end, tt.end_s);
    if (t.kind == TaskKind::kOptimizerStep) {
      first_step_start = std::min(first_step_start, tt.start_s);
      optimizer_s += tt.end_s - tt.start_s;
      step_end[t.subgroup] = tt.end_s;
    }
    if (t.kind == TaskKind::kCopy && t.phase == Phase::kOptimizer && t.dst == Tier::kGpu)
      copy_start[t.subgroup] = tt.start_s;
  }
  ASSERT_EQ(copy_start.size(), 13u);
  EXPECT_LT(first_step_start, 0.1 * last_backward_end);  // the CPU step runs during forward
  // A sub-group's new parameters go to the GPU after its step, and once backward is done with them: the
  // first sub-group (the embedding, whose gradient comes last) after the last backward op, the last ones
  // (the last blocks, done first in backward) before the end of backward.
  for (const auto& [g, start] : copy_start) EXPECT_GE(start, step_end[g]) << g;
  EXPECT_GE(copy_start[0], last_compute_end);
  EXPECT_LT(copy_start[12], last_backward_end);
  // Overlapped: faster by at least half the CPU step, and never faster than the GPU's own work.
  EXPECT_LT(delayed_run.makespan_s, plain_run.makespan_s - 0.5 * optimizer_s);
  EXPECT_GE(delayed_run.makespan_s, last_backward_end);
  // Memory: the previous step's fp32 gradients, in the plan and in the analytic model.
  const double extra = 4 * m.total_params() / run.memwall.data_parallel * plain.ranks_per_node;
  const double cpu_plain = replay_memory(plain).value().peak_bytes[1] * plain.ranks_per_node;
  const double cpu_dpu = replay_memory(delayed).value().peak_bytes[1] * delayed.ranks_per_node;
  EXPECT_NEAR(cpu_dpu - cpu_plain, extra, 0.01 * extra);
  EXPECT_NEAR(estimate_memory(m, dpu, hw).tier(Tier::kCpu).used_bytes -
                  estimate_memory(m, run, hw).tier(Tier::kCpu).used_bytes,
              extra, 0.01 * extra);
  // Gradient accumulation: the step of the last step's gradients overlaps the first micro-batch.
  const AccumulatedSchedule acc = accumulated_schedule(delayed, 4);
  ReferenceExecutor exec(hw, acc.schedule.ranks_per_node);
  const RunResult acc_run = run_schedule(acc.schedule, exec).value();
  for (const Task& t : acc.schedule.tasks) {
    if (t.kind == TaskKind::kOptimizerStep && t.subgroup == 0) {
      EXPECT_LT(acc_run.timing[static_cast<std::size_t>(t.id)].start_s, 0.25 * acc_run.makespan_s);
    }
  }
  // Elsewhere it is an error naming the key.
  for (const char* other : {"zero-3", "zero-infinity-cpu", "zero-infinity-nvme", "zero-2"}) {
    Diagnostics diag;
    const std::string path = testing::scenario_path("runs", other);
    std::string text = testing::read_file(path).value();
    auto j = nlohmann::json::parse(text);
    j["memwall"]["delayed_parameter_update"] = true;
    auto r = parse_run(j.dump(), path, diag);
    ASSERT_FALSE(r.is_ok()) << other;
    EXPECT_NE(r.status().message().find("delayed_parameter_update"), std::string::npos)
        << r.status().message();
  }
}

// An NVMe optimizer's fp32 gradients wait for the step in CPU memory where the node holds them: backward
// writes none to NVMe and the step reads none back (4 B per optimizer element each way less per step); where
// the CPU is too small "auto" puts them on NVMe and says why, as predict's memory model does; "cpu" then
// fails naming the CPU.
// gradient_clipping plans the global norm as a task before the first sub-group's step, on the optimizer's
// resource: a read of the rank's fp32 gradients where they wait (none when they went to NVMe, summed as
// written), so the reference executor's step takes that much longer; without clipping there is none.
TEST(Planner, GradientClippingPlansTheNormBeforeTheFirstStep) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  for (const char* grads : {"cpu optimizer", "nvme, in cpu", "nvme, on nvme"}) {
    SCOPED_TRACE(grads);
    RunConfig run = testing::load_run_scenario(std::string(grads) == "cpu optimizer" ? "zero-infinity-cpu"
                                                                                     : "zero-infinity-nvme");
    if (std::string(grads) == "nvme, on nvme") run.memwall.optimizer_gradients = OptimizerGradients::kNvme;
    ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
    const Schedule plain = plan_iteration(m, run, hw).value();
    run.gradient_clipping = 1.0;
    const Schedule clipped = plan_iteration(m, run, hw).value();
    ASSERT_EQ(clipped.tasks.size(), plain.tasks.size() + 1);
    const Task* norm = nullptr;
    int first_step = -1;
    for (const Task& t : clipped.tasks) {
      if (t.name == "gradient norm") norm = &t;
      if (t.kind == TaskKind::kOptimizerStep && t.subgroup == 0 && first_step < 0) first_step = t.id;
    }
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->kind, TaskKind::kOptimizerStep);
    EXPECT_EQ(norm->resource, Resource::kCpuOptimizer);
    EXPECT_EQ(norm->subgroup, -1);
    const auto& deps = clipped.tasks[static_cast<std::size_t>(first_step)].deps;
    EXPECT_NE(std::find(deps.begin(), deps.end(), norm->id), deps.end());
    const double n_opt = m.total_params() / clipped.data_parallel;
    const bool read = std::string(grads) != "nvme, on nvme";
    EXPECT_NEAR(norm->bytes, read ? 4 * n_opt : 0, 1e-6 * n_opt);
    ReferenceExecutor a(hw, plain.ranks_per_node), b(hw, clipped.ranks_per_node);
    const RunResult ra = run_schedule(plain, a).value(), rb = run_schedule(clipped, b).value();
    const int lane = static_cast<int>(Resource::kCpuOptimizer);
    EXPECT_NEAR(rb.busy_s[lane] - ra.busy_s[lane], norm->bytes / (hw.cpu.memory_Bps / clipped.ranks_per_node),
                1e-9 * rb.busy_s[lane]);
  }
}

// A large model's step in many optimizer sub-groups: the first waits for every gradient, each later one for
// the one before it (which waited for them: the same order, without every gradient task again in every
// sub-group's dependencies, which made `memwall train --model deepseek-v3`'s plan, its tens of thousands of
// parameters in every sub-group's list, run for minutes before saying it does not fit: now 2 s). The
// simulated iteration is the same either way (deepseek-v3 on a DGX-2: 1050.761 s), as every gradient
// precedes the first step.
TEST(Planner, LaterSubGroupStepsFollowTheFirstNotEveryGradient) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  run.zero.sub_group_size = 2e7;
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const Schedule s = plan_iteration(m, run, hw).value();
  std::size_t gradients = 0;
  std::vector<const Task*> steps;
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::kOptimizerStep && t.subgroup >= 0) steps.push_back(&t);
  }
  ASSERT_GT(steps.size(), 10u);
  gradients = steps.front()->deps.size();
  EXPECT_GT(gradients, 100u);  // (every parameter's gradient)
  for (std::size_t g = 1; g < steps.size(); ++g) {
    EXPECT_LE(steps[g]->deps.size(), 4u) << steps[g]->name;
    EXPECT_NE(std::find(steps[g]->deps.begin(), steps[g]->deps.end(), steps[g - 1]->id),
              steps[g]->deps.end());
  }
}

TEST(Planner, NvmeOptimizerKeepsItsGradientsInCpuMemoryWhereTheyFit) {
  const ModelSpec m = testing::load_model_scenario("paper-10b");
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-nvme");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  RunConfig on_nvme = run;
  on_nvme.memwall.optimizer_gradients = OptimizerGradients::kNvme;
  struct Traffic {
    double read = 0, written = 0, grads_in_cpu = 0, slots = 0;
    std::size_t tasks = 0;
  };
  const auto traffic = [](const Schedule& s) {
    Traffic t;
    t.tasks = s.tasks.size();
    for (const Task& k : s.tasks) {
      if (k.kind == TaskKind::kNvmeRead) t.read += k.bytes;
      if (k.kind == TaskKind::kNvmeWrite) t.written += k.bytes;
    }
    for (const Buffer& b : s.buffers) {
      if (b.category == MemCategory::kGrads32 && b.tier == Tier::kCpu) t.grads_in_cpu += b.bytes;
      if (b.role == BufferRole::kOptimizerSwap) t.slots += b.bytes;
    }
    return t;
  };
  const Schedule kept = plan_iteration(m, run, hw).value();
  const Schedule streamed = plan_iteration(m, on_nvme, hw).value();
  const Traffic a = traffic(kept), b = traffic(streamed);
  EXPECT_EQ(kept.optimizer_gradients, "cpu");
  EXPECT_EQ(streamed.optimizer_gradients, "nvme");
  const double n_opt = m.total_params() / kept.data_parallel;  // optimizer elements of one rank
  EXPECT_NEAR(a.grads_in_cpu, 4 * n_opt, 1e-6 * n_opt);
  EXPECT_EQ(b.grads_in_cpu, 0);
  EXPECT_NEAR(b.read - a.read, 4 * n_opt, 1e-6 * n_opt);
  EXPECT_NEAR(b.written - a.written, 4 * n_opt, 1e-6 * n_opt);
  EXPECT_LT(a.tasks, b.tasks);
  // The optimizer's swap slots hold no gradients: 12 + 2 bytes per element instead of 16 + 2.
  EXPECT_NEAR(a.slots / b.slots, 14.0 / 18.0, 1e-12);
  for (const Task& t : kept.tasks) EXPECT_EQ(t.name.find("nvme->cpu grads"), std::string::npos) << t.name;
  for (const Buffer& buf : kept.buffers) {
    if (buf.category == MemCategory::kGrads32) {
      EXPECT_TRUE(buf.pinned) << buf.name;
    }
  }
  // Less NVMe traffic: the step is no slower (the reference executor).
  ReferenceExecutor exec_kept(hw, kept.ranks_per_node), exec_streamed(hw, streamed.ranks_per_node);
  EXPECT_LT(run_schedule(kept, exec_kept).value().makespan_s,
            run_schedule(streamed, exec_streamed).value().makespan_s);
  // predict agrees on where they are.
  EXPECT_NEAR(estimate_memory(m, run, hw).bytes(Tier::kCpu, MemCategory::kGrads32), 4 * n_opt, 1e-6 * n_opt);
  EXPECT_EQ(estimate_memory(m, on_nvme, hw).bytes(Tier::kCpu, MemCategory::kGrads32), 0);

  // A node whose memory holds everything but the gradients.
  const double with = replay_memory(kept).value().peak_bytes[1] * kept.ranks_per_node;
  const double without = replay_memory(streamed).value().peak_bytes[1] * streamed.ranks_per_node;
  ASSERT_LT(without, with);
  hw.cpu.memory_bytes = (with + without) / 2;
  const Schedule fallback = plan_iteration(m, run, hw).value();
  const Traffic f = traffic(fallback);
  EXPECT_EQ(fallback.optimizer_gradients, "nvme");
  EXPECT_EQ(f.grads_in_cpu, 0);
  EXPECT_DOUBLE_EQ(f.read, b.read);
  EXPECT_DOUBLE_EQ(f.written, b.written);
  ASSERT_FALSE(fallback.notes.empty());
  EXPECT_NE(fallback.notes[0].find("fp32 gradients on NVMe"), std::string::npos) << fallback.notes[0];
  const MemoryEstimate e = estimate_memory(m, run, hw);
  EXPECT_TRUE(e.fits);
  EXPECT_EQ(e.bytes(Tier::kCpu, MemCategory::kGrads32), 0);
  EXPECT_GT(e.bytes(Tier::kNvme, MemCategory::kGrads32), 0);
  EXPECT_TRUE(std::any_of(e.notes.begin(), e.notes.end(),
                          [](const std::string& n) { return n.find("fp32 gradients on NVMe") == 0; }));
  RunConfig on_gpu = run;
  on_gpu.zero.offload_optimizer.device = OffloadDevice::kNone;
  on_gpu.zero.offload_param.device = OffloadDevice::kNone;
  EXPECT_EQ(plan_iteration(m, on_gpu, hw).value().optimizer_gradients, "");
  RunConfig in_cpu = run;
  in_cpu.memwall.optimizer_gradients = OptimizerGradients::kCpu;
  Result<Schedule> refused = plan_iteration(m, in_cpu, hw);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message().rfind("CPU:", 0), 0u) << refused.status().message();
  EXPECT_FALSE(estimate_memory(m, in_cpu, hw).fits);
}

TEST(Planner, DoesNotFitFailsNamingTheTierAndShortfall) {
  const ModelSpec m = testing::load_model_scenario("gpt3-175b");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  Result<Schedule> s = plan_iteration(m, run, hw);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(s.status().message().find("CPU"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("short by"), std::string::npos) << s.status().message();
}

TEST(Planner, ShrinksPrefetchWhenTheGpuIsShort) {
  // A GPU just too small for a large prefetch bucket: the planner shrinks it and says so.
  ModelSpec m = testing::load_model_scenario("fig2a-0.1t");
  m.layers = 8;
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  run.zero.prefetch_bucket_size = {false, 2e9};
  run.zero.max_live_parameters = 4e9;
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const double roomy = replay_memory(plan_iteration(m, run, hw).value()).value().peak_bytes[0];
  RunConfig lean = run;
  lean.memwall.prefetch = false;
  const double tight = replay_memory(plan_iteration(m, lean, hw).value()).value().peak_bytes[0];
  ASSERT_LT(tight, roomy);
  hw.gpu.memory_bytes = (roomy + tight) / 2;
  Result<Schedule> s = plan_iteration(m, run, hw);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_FALSE(s->notes.empty());
  EXPECT_NE(s->notes[0].find("prefetch"), std::string::npos);
  EXPECT_LE(replay_memory(*s).value().peak_bytes[0], hw.gpu.memory_bytes);
}

// What the GPU holds throughout (its persistent buffers) does not depend on the prefetch budget, so
// plan_iteration may fail at once where it exceeds the GPU: here the optimizer states of ZeRO-2 on the GPU.
TEST(Planner, PersistentGpuBytesDoNotDependOnThePrefetch) {
  const ModelSpec m = testing::load_model_scenario("gpt2");
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  for (const char* scenario : {"zero-3", "zero-offload", "zero-infinity-cpu", "zero-infinity-nvme"}) {
    for (const int stage : {0, 2, 3}) {
      RunConfig run = testing::load_run_scenario(scenario);
      if (stage < 3 && run.zero.offload_param.device != OffloadDevice::kNone) continue;
      run.zero.stage = stage;
      ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
      RunConfig lean = run;
      lean.memwall.prefetch = false;
      const MemoryTimeline with = replay_memory(plan_iteration(m, run, hw).value()).value();
      const MemoryTimeline without = replay_memory(plan_iteration(m, lean, hw).value()).value();
      EXPECT_GT(with.persistent_bytes[0], hw.gpu.reserved_bytes) << scenario << " stage " << stage;
      EXPECT_EQ(with.persistent_bytes[0], without.persistent_bytes[0]) << scenario << " stage " << stage;
      EXPECT_LE(without.persistent_bytes[0], without.peak_bytes[0]) << scenario << " stage " << stage;
    }
  }
  HardwareSpec small = hw;
  RunConfig run = testing::load_run_scenario("zero-3");
  run.zero.stage = 2;
  ASSERT_TRUE(resolve_run_config(run, m, small).is_ok());
  small.gpu.memory_bytes = replay_memory(plan_iteration(m, run, hw).value()).value().persistent_bytes[0] - 1;
  const Result<Schedule> refused = plan_iteration(m, run, small);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message().rfind("GPU:", 0), 0u) << refused.status().message();
}

TEST(Planner, GpuActivationsOutsideTheTierAreLeftOutOfItsCheck) {
  // An executor that keeps the activations (and the runtime's share) in GPU memory of its own: the tier must
  // hold the rest, and the plan's timeline still has every buffer.
  ModelSpec m = testing::load_model_scenario("fig2a-0.1t");
  m.layers = 8;
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  RunConfig run = testing::load_run_scenario("zero-infinity-cpu");
  run.memwall.prefetch = false;
  ASSERT_TRUE(resolve_run_config(run, m, hw).is_ok());
  const Schedule all = plan_iteration(m, run, hw).value();
  const double whole = replay_memory(all).value().peak_bytes[0];
  const MemoryTimeline rest_tl =
      replay_memory(all, [](const Buffer& b) { return !held_outside_gpu_tier(b); }).value();
  const double rest = rest_tl.peak_bytes[0];
  ASSERT_LT(rest, whole - hw.gpu.reserved_bytes / 2);  // the reserve and the activations are outside
  EXPECT_EQ(rest_tl.peak_by_category[0][static_cast<int>(MemCategory::kRuntimeReserved)], 0);
  EXPECT_EQ(rest_tl.peak_by_category[0][static_cast<int>(MemCategory::kActivationWorking)], 0);
  hw.gpu.memory_bytes = (rest + whole) / 2;
  Result<Schedule> refused = plan_iteration(m, run, hw);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("GPU: the schedule needs"), std::string::npos)
      << refused.status().message();
  run.memwall.gpu_activations_outside_tier = true;
  Result<Schedule> s = plan_iteration(m, run, hw);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->buffers.size(), all.buffers.size());
  hw.gpu.memory_bytes = rest * 0.99;
  refused = plan_iteration(m, run, hw);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("GPU (besides the activations): the schedule needs"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace memwall
