// Replay's Chakra execution-trace importer on small traces written here byte by byte (tests/chakra_writer.h):
// node kinds, dependencies through skipped nodes, attributes, timing, malformed files.
#include <gtest/gtest.h>

#include "chakra_writer.h"
#include "exec/executor.h"
#include "replay/chakra.h"
#include "test_support.h"

namespace memwall {
namespace {

using chakra_testing::ChakraWriter;

// One rank's iteration as chakra_converter would write it: a CPU op launching a GEMM; a metadata node between
// the GEMM and the gradient all-reduce (its dependency must pass through); an all-to-all without a size
// model (kept as measured); a host-to-device load; the optimizer kernel after the all-reduce.
std::string fixture(bool packed = true, bool timed = true) {
  ChakraWriter w;
  auto node = [&](std::uint64_t id, const char* name, int type, std::vector<std::uint64_t> data,
                  std::uint64_t start, std::uint64_t dur) {
    ChakraWriter::Node n;
    n.id = id;
    n.name = name;
    n.type = type;
    n.data_deps = std::move(data);
    n.start_us = timed ? start : 0;
    n.dur_us = dur;
    n.packed_deps = packed;
    return n;
  };
  ChakraWriter::Node launch = node(10, "aten::mm", ChakraWriter::kComp, {}, 1000, 50);
  launch.bool_attrs = {{"is_cpu_op", true}};
  w.add(launch);
  ChakraWriter::Node gemm = node(11, "sm90_xmma_gemm_bf16", ChakraWriter::kComp, {10}, 1040, 3000);
  gemm.bool_attrs = {{"is_cpu_op", false}};
  gemm.int_attrs = {{"num_ops", 123}};
  w.add(gemm);
  w.add(node(12, "## marker ##", ChakraWriter::kMetadata, {11}, 0, 0));
  ChakraWriter::Node ar = node(13, "ncclDevKernel_AllReduce", ChakraWriter::kColl, {12}, 4100, 900);
  ar.int_attrs = {{"comm_type", ChakraWriter::kAllReduce}, {"comm_size", 64 << 20}};
  w.add(ar);
  ChakraWriter::Node a2a = node(14, "ncclDevKernel_AllToAll", ChakraWriter::kColl, {11}, 4100, 700);
  a2a.int_attrs = {{"comm_type", ChakraWriter::kAllToAll}, {"comm_size", 1 << 20}};
  w.add(a2a);
  ChakraWriter::Node load = node(15, "load", ChakraWriter::kMemLoad, {}, 1000, 0);
  load.double_attrs = {{"tensor_size", 8e6}};
  w.add(load);
  ChakraWriter::Node adam = node(16, "multi_tensor_apply_kernel", ChakraWriter::kComp, {}, 5000, 400);
  adam.ctrl_deps = {13, 14, 15};
  adam.packed_deps = packed;
  w.add(adam);
  return w.bytes();
}

TEST(Chakra, ImportsNodeKindsDependenciesAndAttributes) {
  for (const bool packed : {true, false}) {
    SCOPED_TRACE(packed ? "packed dependencies" : "one varint field per dependency");
    ChakraInfo info;
    auto g = import_chakra_trace(fixture(packed), 3, 8, 0, -1, info);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(info.version, "0.0.4");
    EXPECT_EQ(info.nodes, 7u);
    EXPECT_EQ(info.cpu_ops, 1u);
    EXPECT_EQ(info.compute, 2u);
    EXPECT_EQ(info.collectives, 1u);
    EXPECT_EQ(info.measured_communication, 1u);
    EXPECT_EQ(info.copies, 1u);
    EXPECT_EQ(info.skipped, 1u);
    EXPECT_EQ(g->pid, 3);
    EXPECT_EQ(g->ranks, 8);
    EXPECT_EQ(g->steps_total, 1);
    // First start 1000 us, last end 5400 us.
    EXPECT_NEAR(g->measured_iteration_s, 4.4e-3, 1e-12);
    const auto& t = g->schedule.tasks;
    ASSERT_EQ(t.size(), 6u);
    // Topological order with ids breaking ties: 10, 11, 13, 14, 15, 16 (12 skipped).
    EXPECT_EQ(t[0].resource, Resource::kCpuOptimizer);  // the host CPU lane
    EXPECT_NEAR(t[0].measured_s, 50e-6, 1e-15);
    EXPECT_EQ(t[1].resource, Resource::kCompute);
    EXPECT_EQ(t[1].deps, std::vector<int>{0});
    EXPECT_EQ(t[1].flops, 123);
    EXPECT_NEAR(t[1].measured_s, 3e-3, 1e-15);
    EXPECT_EQ(t[2].kind, TaskKind::kCollective);
    EXPECT_EQ(t[2].collective, CollectiveKind::kAllReduce);
    EXPECT_EQ(t[2].bytes, 64 << 20);
    EXPECT_EQ(t[2].group, 8);
    EXPECT_EQ(t[2].deps, std::vector<int>{1});  // through the metadata node
    EXPECT_EQ(t[3].kind, TaskKind::kCompute);   // all-to-all: measured, on the network lane
    EXPECT_EQ(t[3].resource, Resource::kNetwork);
    EXPECT_NEAR(t[3].measured_s, 700e-6, 1e-15);
    EXPECT_EQ(t[4].kind, TaskKind::kCopy);
    EXPECT_EQ(t[4].resource, Resource::kH2D);
    EXPECT_EQ(t[4].bytes, 8e6);
    EXPECT_EQ(t[5].deps, (std::vector<int>{2, 3, 4}));  // control dependencies count too
  }
}

TEST(Chakra, ReplaysOnHardwareAndAnswersWhatIfs) {
  ChakraInfo info;
  auto g = import_chakra_trace(fixture(), 0, 8, 0, -1, info);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  place_ranks(hw, *g);
  ReferenceExecutor ref(hw, g->schedule.ranks_per_node);
  const RunResult base = run_schedule(g->schedule, ref).value();
  // The critical path: CPU launch, GEMM, the all-reduce as this hardware runs it and the measured all-to-all
  // (one network lane: one after the other), the optimizer kernel.
  const auto& t = g->schedule.tasks;
  const double path = 50e-6 + 3e-3 + ref.duration(t[2]) + 700e-6 + 400e-6;
  EXPECT_NEAR(base.makespan_s, path, 1e-9);
  EXPECT_GT(ref.duration(t[2]), 700e-6);  // 64 MiB all-reduce over 8 ranks: longer than the all-to-all
  // A faster network shortens the all-reduce; faster GPU compute shortens the GEMM and the optimizer kernel
  // but not the CPU op or the all-to-all measured on the network.
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"network", "2"}, {"compute", "2"}}) {
    HardwareSpec hw2 = hw;
    ReplayGraph g2 = *g;
    ASSERT_TRUE(apply_what_ifs({{key, value}}, nullptr, hw2, g2).is_ok());
    ReferenceExecutor ref2(hw2, g2.schedule.ranks_per_node);
    EXPECT_LT(run_schedule(g2.schedule, ref2).value().makespan_s, base.makespan_s) << key;
    if (key == "compute") {
      EXPECT_NEAR(g2.schedule.tasks[1].measured_s, 1.5e-3, 1e-15);
      EXPECT_NEAR(g2.schedule.tasks[0].measured_s, 50e-6, 1e-15);
      EXPECT_NEAR(g2.schedule.tasks[3].measured_s, 700e-6, 1e-15);
    }
  }
}

// chakra_converter copies a GPU op's stream into its `tid` attribute: each stream is a lane, so the 2 ms
// GEMMs of streams 7 and 20, launched together, replay side by side as measured; the third, on stream 7
// again, follows the first.
TEST(Chakra, EachStreamIsALane) {
  ChakraWriter w;
  std::uint64_t id = 1;
  for (const std::int64_t stream : {7, 20, 7}) {
    ChakraWriter::Node n;
    n.id = id++;
    n.name = "gemm on stream " + std::to_string(stream);
    n.type = ChakraWriter::kComp;
    n.start_us = 1000 + (n.id == 3 ? 2000 : 0);
    n.dur_us = 2000;
    n.bool_attrs = {{"is_cpu_op", false}};
    n.int_attrs = {{"tid", stream}};
    w.add(n);
  }
  ChakraInfo info;
  auto g = import_chakra_trace(w.bytes(), 0, 1, 0, -1, info);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const auto& t = g->schedule.tasks;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].lane, 0);
  EXPECT_EQ(t[1].lane, 1);
  EXPECT_EQ(t[2].lane, 0);
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  place_ranks(hw, *g);
  ReferenceExecutor ref(hw, g->schedule.ranks_per_node);
  EXPECT_NEAR(run_schedule(g->schedule, ref).value().makespan_s, 4e-3, 1e-12);
  EXPECT_NEAR(g->measured_iteration_s, 4e-3, 1e-12);
}

// Rank 3 of 32 on two DGX-2 nodes, tensor parallelism 4 beside data parallelism: a 64 MiB all-reduce in its
// tensor-parallel group (ranks 0-3, on node 0), one in its data-parallel group (ranks 3 and 19, one GPU on
// each node, with the node's NICs shared by the 16 such groups) and one over the world (pg "0").
TEST(Chakra, CollectivesSpanTheirProcessGroups) {
  ChakraWriter w;
  std::uint64_t id = 1;
  for (const char* pg : {"tp", "dp", "0"}) {
    ChakraWriter::Node ar;
    ar.id = id;
    ar.name = std::string("allreduce ") + pg;
    ar.type = ChakraWriter::kColl;
    if (id > 1) ar.data_deps = {id - 1};
    ar.int_attrs = {{"comm_type", ChakraWriter::kAllReduce}, {"comm_size", 64 << 20}};
    ar.string_attrs = {{"pg_name", pg}};
    w.add(ar);
    ++id;
  }
  EXPECT_EQ(chakra_process_groups(w.bytes()), (std::set<std::string>{"0", "dp", "tp"}));
  std::vector<int> world(32);
  for (int r = 0; r < 32; ++r) world[static_cast<std::size_t>(r)] = r;
  const ChakraGroups groups = {{"tp", {0, 1, 2, 3}}, {"dp", {3, 19}}, {"0", world}};
  ChakraInfo info;
  auto g = import_chakra_trace(w.bytes(), 3, 32, 0, -1, info, groups);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(info.in_subgroups, 2u);
  EXPECT_TRUE(info.unresolved_groups.empty());
  HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  hw.nodes = 2;
  place_ranks(hw, *g);
  const auto& t = g->schedule.tasks;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].group, 4);
  EXPECT_EQ(t[0].group_nodes, 1);
  EXPECT_EQ(t[1].group, 2);
  EXPECT_EQ(t[1].group_nodes, 2);
  EXPECT_EQ(t[2].group, 32);
  ReferenceExecutor ref(hw, g->schedule.ranks_per_node);
  const double bytes = 64 << 20;
  // Inside a node: a ring of 4 over NVLink.
  EXPECT_NEAR(ref.duration(t[0]), 3 * hw.nvlink.latency_s + 2 * bytes / (hw.nvlink.gpu_Bps * 4 / 3), 1e-12);
  // One GPU per node: the tensor through 1/16 of the node's NICs, (2-1)/2 of it crossing.
  EXPECT_NEAR(ref.duration(t[1]), hw.network.latency_s + 2 * bytes / (hw.network.node_Bps() / 16 * 2), 1e-12);
  EXPECT_LT(ref.duration(t[0]), ref.duration(t[2]));
  EXPECT_GT(ref.duration(t[1]), ref.duration(t[2]));  // the world's ring has the whole NIC per node
  // Four nodes: the data-parallel group spans them all; the tensor-parallel one stays on its node.
  ReplayGraph g4 = *g;
  HardwareSpec hw4 = hw;
  ASSERT_TRUE(apply_what_ifs({{"nodes", "4"}}, nullptr, hw4, g4).is_ok());
  place_ranks(hw4, g4);
  EXPECT_EQ(g4.schedule.tasks[0].group, 4);
  EXPECT_EQ(g4.schedule.tasks[0].group_nodes, 1);
  EXPECT_EQ(g4.schedule.tasks[1].group, 4);
  EXPECT_EQ(g4.schedule.tasks[1].group_nodes, 4);
  EXPECT_EQ(g4.schedule.tasks[2].group, 64);
  // Without the groups (not every rank's trace at hand) every collective spans the world, as before.
  ChakraInfo bare;
  auto all = import_chakra_trace(w.bytes(), 3, 32, 0, -1, bare);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(bare.unresolved_groups.size(), 3u);
  for (const Task& task : all->schedule.tasks) EXPECT_EQ(task.group, 32);
}

TEST(Chakra, UntimedTracesAndRooflineNodes) {
  // No start times (ASTRA-sim's generated traces): no measured iteration; a compute node with FLOPs and no
  // duration runs at the hardware's achievable rate.
  ChakraWriter w("0.0.4");
  ChakraWriter::Node gemm;
  gemm.id = 1;
  gemm.name = "gemm";
  gemm.type = ChakraWriter::kComp;
  gemm.int_attrs = {{"num_ops", 2000000000000}};
  w.add(gemm);
  ChakraInfo info;
  auto g = import_chakra_trace(w.bytes(), 0, 1, 0, -1, info);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_FALSE(info.timed);
  EXPECT_EQ(g->measured_iteration_s, 0);
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  ReferenceExecutor ref(hw, 1);
  EXPECT_NEAR(run_schedule(g->schedule, ref).value().makespan_s, 2e12 / hw.gpu.achievable_flops, 1e-12);

  // With `tensor_size`, the longer of its FLOPs' and its bytes' time (ASTRA-sim's roofline).
  ChakraWriter w2("0.0.4");
  gemm.int_attrs = {{"num_ops", 2000000000000}, {"tensor_size", 900000000000}};
  w2.add(gemm);
  ChakraWriter::Node softmax;
  softmax.id = 2;
  softmax.name = "softmax";
  softmax.type = ChakraWriter::kComp;
  softmax.data_deps = {1};
  softmax.int_attrs = {{"tensor_size", 90000000000}};  // no FLOPs counted: memory alone times it
  w2.add(softmax);
  auto g2 = import_chakra_trace(w2.bytes(), 0, 1, 0, -1, info);
  ASSERT_TRUE(g2.is_ok()) << g2.status().to_string();
  ASSERT_EQ(g2->schedule.tasks.size(), 2u);
  ReferenceExecutor ref2(hw, 1);
  EXPECT_NEAR(run_schedule(g2->schedule, ref2).value().makespan_s,
              9e11 / hw.gpu.hbm_Bps + 9e10 / hw.gpu.hbm_Bps, 1e-12);
  // What-ifs on untimed nodes: twice the FLOP rate halves the FLOP-bound one (the first trace), twice the
  // GPU memory bandwidth the memory-bound ones (the second); neither moves the other kind.
  auto timed = [](const ReplayGraph& graph, const HardwareSpec& h) {
    ReferenceExecutor e(h, 1);
    return run_schedule(graph.schedule, e).value().makespan_s;
  };
  for (const char* key : {"compute", "gpu_memory"}) {
    HardwareSpec h1 = hw, h2 = hw;
    ReplayGraph flop_bound = *g, memory_bound = *g2;
    ASSERT_TRUE(apply_what_ifs({{key, "2"}}, nullptr, h1, flop_bound).is_ok());
    ASSERT_TRUE(apply_what_ifs({{key, "2"}}, nullptr, h2, memory_bound).is_ok());
    const bool flops = std::string(key) == "compute";
    EXPECT_NEAR(timed(flop_bound, h1), timed(*g, hw) / (flops ? 2 : 1), 1e-12) << key;
    EXPECT_NEAR(timed(memory_bound, h2), timed(*g2, hw) / (flops ? 1 : 2), 1e-12) << key;
  }
}

TEST(Chakra, MalformedFilesAreOneClearError) {
  ChakraInfo info;
  const std::string good = fixture();
  auto truncated = import_chakra_trace(good.substr(0, good.size() - 5), 0, 1, 0, -1, info);
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_NE(truncated.status().message().find("runs past the end"), std::string::npos)
      << truncated.status().message();
  EXPECT_FALSE(import_chakra_trace("", 0, 1, 0, -1, info).is_ok());
  EXPECT_FALSE(looks_like_chakra("{\"traceEvents\": []}"));
  EXPECT_TRUE(looks_like_chakra(good));
  // A cycle: 1 waits for 2 and 2 for 1.
  ChakraWriter w;
  for (std::uint64_t id : {1u, 2u}) {
    ChakraWriter::Node n;
    n.id = id;
    n.name = "k";
    n.dur_us = 5;
    n.data_deps = {3 - id};
    w.add(n);
  }
  auto cycle = import_chakra_trace(w.bytes(), 0, 1, 0, -1, info);
  ASSERT_FALSE(cycle.is_ok());
  EXPECT_NE(cycle.status().message().find("cycle"), std::string::npos);
  // Steps other than the one iteration are refused naming the range.
  auto steps = import_chakra_trace(good, 0, 1, 1, 2, info);
  ASSERT_FALSE(steps.is_ok());
  EXPECT_NE(steps.status().message().find("0:1"), std::string::npos) << steps.status().message();
}

// Damaged files (bytes flipped, cut short, spliced) end in a result or an error, never a crash or a hang.
TEST(Chakra, DamagedFilesNeverCrash) {
  const std::string good = fixture();
  testing::XorShift next{0x9E3779B97F4A7C15ull};  // the same cases on every run
  int errors = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = next() % bad.size();
      switch (next() % 3) {
        case 0:
          bad[at] = static_cast<char>(next());
          break;
        case 1:
          bad.resize(std::max<std::size_t>(1, at));
          break;
        default:
          bad.insert(at, 1, static_cast<char>(next()));
          break;
      }
    }
    ChakraInfo info;
    auto g = import_chakra_trace(bad, 0, 2, 0, -1, info);
    if (!g.is_ok()) {
      ++errors;
      EXPECT_FALSE(g.status().message().empty());
      continue;
    }
    for (const Task& t : g->schedule.tasks) {  // whatever was read is a valid graph
      for (int d : t.deps) EXPECT_LT(d, t.id);
    }
  }
  EXPECT_GT(errors, 100);
}

}  // namespace
}  // namespace memwall
