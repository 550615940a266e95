// Replay's PyTorch profiler importer on a small trace written here by hand (two ProfilerSteps, a GEMM and an
// elementwise kernel and a host-to-device copy on the compute stream, an NCCL all-reduce on its own stream
// matched to record_param_comms, CUDA runtime launches correlated to each GPU event).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "exec/executor.h"
#include "replay/kineto.h"
#include "test_support.h"

namespace memwall {
namespace {

using nlohmann::json;

std::string kineto_fixture(bool with_comms = true) {
  json ev = json::array();
  ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", "python"}}}});
  long corr = 100;
  for (int k = 0; k < 2; ++k) {
    const double t0 = 10000.0 * k;
    ev.push_back({{"ph", "X"},
                  {"cat", "user_annotation"},
                  {"name", "ProfilerStep#" + std::to_string(k)},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", t0},
                  {"dur", 9000}});
    auto launch = [&](double ts) {
      ev.push_back({{"ph", "X"},
                    {"cat", "cuda_runtime"},
                    {"name", "cudaLaunchKernel"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", ts},
                    {"dur", 5},
                    {"args", {{"correlation", corr}}}});
      return corr++;
    };
    long c = launch(t0 + 100);
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", "sm80_xmma_gemm_bf16"},
                  {"pid", 0},
                  {"tid", 7},
                  {"ts", t0 + 120},
                  {"dur", 2000},
                  {"args", {{"stream", 7}, {"correlation", c}}}});
    c = launch(t0 + 150);
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", "vectorized_elementwise_kernel"},
                  {"pid", 0},
                  {"tid", 7},
                  {"ts", t0 + 2120},
                  {"dur", 500},
                  {"args", {{"stream", 7}, {"correlation", c}}}});
    c = launch(t0 + 200);
    ev.push_back({{"ph", "X"},
                  {"cat", "gpu_memcpy"},
                  {"name", "Memcpy HtoD (Pinned -> Device)"},
                  {"pid", 0},
                  {"tid", 7},
                  {"ts", t0 + 2620},
                  {"dur", 1000},
                  {"args", {{"stream", 7}, {"correlation", c}, {"bytes", 8e6}}}});
    if (with_comms) {
      ev.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "record_param_comms"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", t0 + 300},
                    {"dur", 10},
                    {"args",
                     {{"Collective name", "allreduce"},
                      {"In msg nelems", 250000000},
                      {"Out msg nelems", 250000000},
                      {"dtype", "Float"},
                      {"Group size", 2}}}});
    }
    c = launch(t0 + 310);
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", "ncclKernel_AllReduce_RING_LL_Sum_float"},
                  {"pid", 0},
                  {"tid", 20},
                  {"ts", t0 + 3700},
                  {"dur", 3000},
                  {"args", {{"stream", 20}, {"correlation", c}}}});
    // The compute stream waits for the all-reduce (cudaEventRecord on stream 20, cudaStreamWaitEvent on 7)
    // before the optimizer kernel.
    const long record = launch(t0 + 320);
    ev.push_back(
        {{"ph", "X"},
         {"cat", "cuda_sync"},
         {"name", "Stream Wait Event"},
         {"pid", 0},
         {"tid", 7},
         {"ts", t0 + 3620},  // device time: stream 7 reaches the wait after its copy
         {"dur", 0},
         {"args", {{"stream", 7}, {"wait_on_stream", 20}, {"wait_on_cuda_event_record_corr_id", record}}}});
    c = launch(t0 + 340);
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", "adam_kernel"},
                  {"pid", 0},
                  {"tid", 7},
                  {"ts", t0 + 6800},
                  {"dur", 100},
                  {"args", {{"stream", 7}, {"correlation", c}}}});
    ev.push_back({{"ph", "i"}, {"name", "marker"}, {"pid", 1}, {"tid", 1}, {"ts", t0 + 1}});
    for (int m = 0; m < 3; ++m) {  // the caching allocator's view: 1, 3, then 2 GB allocated on the GPU
      ev.push_back({{"ph", "i"},
                    {"cat", "cpu_instant_event"},
                    {"name", "[memory]"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", t0 + 500 + 1000 * m},
                    {"args",
                     {{"Device Type", 1},
                      {"Device Id", 0},
                      {"Bytes", 1e9},
                      {"Total Allocated", m == 1 ? 3e9 : (m == 0 ? 1e9 : 2e9)},
                      {"Total Reserved", 4e9}}}});
    }
    ev.push_back({{"ph", "b"}, {"name", "async"}, {"pid", 1}, {"tid", 1}, {"ts", t0 + 2}});  // not read
  }
  return json({{"schemaVersion", 1},
               {"distributedInfo", {{"backend", "nccl"}, {"rank", 0}, {"world_size", 2}}},
               {"traceEvents", ev}})
      .dump();
}

TEST(Kineto, ImportsStepsKernelsCopiesAndMatchedCollectives) {
  KinetoInfo info;
  auto g = import_kineto_trace(kineto_fixture(), 0, -1, info);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(g->steps_total, 2);
  EXPECT_EQ(info.kernels, 3u);
  EXPECT_EQ(info.stream_waits, 1u);
  ASSERT_EQ(g->memory.size(), 3u);  // the first step's memory events, from its start
  EXPECT_EQ(g->memory[1].name, "memory gpu");
  EXPECT_NEAR(g->memory[1].ts_us, 1500, 1e-9);
  EXPECT_EQ(g->peak_allocated[0], 3e9);
  EXPECT_EQ(info.memcpys, 1u);
  EXPECT_EQ(info.collectives, 1u);
  EXPECT_EQ(info.unknown_events, 2u);  // one "b" per step
  // Each step ends with the all-reduce at 6.7 ms, within the 9 ms annotation: 9 ms per step.
  EXPECT_NEAR(g->measured_iteration_s, 9e-3, 1e-12);
  const auto& t = g->schedule.tasks;
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[4].deps,
            (std::vector<int>{2, 3}));  // after the copy on its stream and the all-reduce it waited for
  EXPECT_EQ(t[0].kind, TaskKind::kCompute);
  EXPECT_NEAR(t[0].measured_s, 2e-3, 1e-12);
  EXPECT_NEAR(t[0].release_s, 100e-6, 1e-12);  // its launch, 0.1 ms into the step
  EXPECT_EQ(t[2].kind, TaskKind::kCopy);
  EXPECT_EQ(t[2].resource, Resource::kH2D);
  EXPECT_EQ(t[2].bytes, 8e6);
  EXPECT_EQ(t[2].deps, std::vector<int>{1});  // stream order
  EXPECT_EQ(t[3].kind, TaskKind::kCollective);
  EXPECT_EQ(t[3].collective, CollectiveKind::kAllReduce);
  EXPECT_EQ(t[3].group, 2);
  EXPECT_EQ(t[3].bytes, 1e9);      // 250 M floats
  EXPECT_TRUE(t[3].deps.empty());  // its own stream

  // Replayed on a DGX-2: more network bandwidth helps this all-reduce-bound step; nothing starts before its
  // launch.
  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  place_ranks(hw, *g);
  ReferenceExecutor ref(hw, g->schedule.ranks_per_node);
  const RunResult base = run_schedule(g->schedule, ref).value();
  for (const Task& task : g->schedule.tasks) EXPECT_GE(base.timing[task.id].start_s, task.release_s - 1e-12);
  HardwareSpec fast = hw;
  ReplayGraph g2 = *g;
  ASSERT_TRUE(apply_what_ifs({{"network", "2"}}, nullptr, fast, g2).is_ok());
  ReferenceExecutor ref2(fast, g2.schedule.ranks_per_node);
  EXPECT_LT(run_schedule(g2.schedule, ref2).value().makespan_s, base.makespan_s);
}

// The same trace as PyTorch 1.8's Kineto wrote it (categories Operator, Runtime, Kernel, Memcpy) imports
// to the same graph.
TEST(Kineto, ReadsTheCategoriesOfOlderProfilers) {
  json old = json::parse(kineto_fixture());
  const std::map<std::string, std::string> renamed = {{"user_annotation", "Operator"},
                                                      {"cuda_runtime", "Runtime"},
                                                      {"kernel", "Kernel"},
                                                      {"gpu_memcpy", "Memcpy"},
                                                      {"cpu_op", "Operator"}};
  for (json& e : old["traceEvents"]) {
    if (e.contains("cat") && renamed.count(e["cat"].get<std::string>())) e["cat"] = renamed.at(e["cat"]);
    // PyTorch 1.8/1.9 named a GPU event's row "stream N"; here the stream is only there.
    if (e.contains("args") && e["args"].contains("stream") && e["args"].contains("correlation")) {
      e["tid"] = "stream " + std::to_string(e["args"]["stream"].get<long>());
      e["args"].erase("stream");
    }
  }
  KinetoInfo a, b;
  auto modern = import_kineto_trace(kineto_fixture(), 0, -1, a);
  auto older = import_kineto_trace(old.dump(), 0, -1, b);
  ASSERT_TRUE(modern.is_ok() && older.is_ok()) << older.status().to_string();
  EXPECT_EQ(older->steps_total, 2);
  EXPECT_EQ(b.kernels, a.kernels);
  EXPECT_EQ(b.memcpys, 1u);
  EXPECT_EQ(b.collectives, 1u);
  ASSERT_EQ(older->schedule.tasks.size(), modern->schedule.tasks.size());
  for (std::size_t i = 0; i < older->schedule.tasks.size(); ++i) {
    EXPECT_EQ(older->schedule.tasks[i].kind, modern->schedule.tasks[i].kind) << i;
    EXPECT_EQ(older->schedule.tasks[i].deps, modern->schedule.tasks[i].deps) << i;
    EXPECT_DOUBLE_EQ(older->schedule.tasks[i].release_s, modern->schedule.tasks[i].release_s) << i;
  }
}

// PyTorch 2.x writes a collective's sizes on its NCCL kernel: read there without record_param_comms; NCCL
// send/recv kernels (pipeline stages) are point-to-point, kept with their measured durations.
TEST(Kineto, ReadsCollectiveSizesFromNcclKernelsAndKeepsSendRecvAsMeasured) {
  json t = json::parse(kineto_fixture(false));
  json extra = json::array();
  for (json& e : t["traceEvents"]) {
    if (e.value("name", "").rfind("ncclKernel_AllReduce", 0) != 0) continue;
    e["args"]["Collective name"] = "allreduce";
    e["args"]["In msg nelems"] = 250000000;
    e["args"]["Out msg nelems"] = 250000000;
    e["args"]["dtype"] = "Float";
    e["args"]["Group size"] = 2;
    json p2p = e;
    p2p["name"] = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)";
    p2p["ts"] = e["ts"].get<double>() + 100;
    p2p["dur"] = 700;
    p2p["tid"] = 21;
    p2p["args"] = {{"stream", 21}};
    extra.push_back(p2p);
  }
  for (json& e : extra) t["traceEvents"].push_back(e);
  KinetoInfo info;
  auto g = import_kineto_trace(t.dump(), 0, -1, info);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(info.collectives, 1u);
  EXPECT_EQ(info.unmatched_collectives, 0u);
  EXPECT_EQ(info.point_to_point, 1u);
  int allreduce = 0, sendrecv = 0;
  for (const Task& task : g->schedule.tasks) {
    if (task.kind == TaskKind::kCollective) {
      ++allreduce;
      EXPECT_EQ(task.bytes, 1e9);
      EXPECT_EQ(task.group, 2);
    }
    if (task.name.rfind("ncclDevKernel_SendRecv", 0) == 0) {
      ++sendrecv;
      EXPECT_EQ(task.kind, TaskKind::kCompute);
      EXPECT_EQ(task.resource, Resource::kNetwork);
      EXPECT_NEAR(task.measured_s, 700e-6, 1e-12);
    }
  }
  EXPECT_EQ(allreduce, 1);
  EXPECT_EQ(sendrecv, 1);
}

// PyTorch 2.2 and later list a collective's process group ("Process Group Ranks"): rank 3 of 32 all-reducing
// with rank 19 spans two DGX-2 nodes with one GPU on each; a shortened list ("...") of the whole world is the
// world; one that steps evenly (every 8th rank of 256 from rank 3: tensor parallelism 8) is read whole, 32
// ranks on 16 nodes; one that does not step evenly says only the group's size.
TEST(Kineto, CollectivesSpanTheProcessGroupsTheTraceLists) {
  struct Case {
    int world, group;
    std::string ranks;
    int nodes;                   // of the hardware
    int want_group, want_nodes;  // the task's (want_nodes 0: ranks not known, consecutive assumed)
  };
  const Case cases[] = {{32, 2, "[3, 19]", 2, 2, 2},
                        {32, 32, "[0, 1, ..., 31]", 2, 32, 0},
                        {256, 32, "[3, 11, 19, 27, ..., 251]", 16, 32, 16},
                        {256, 32, "[3, 11, 20, ..., 251]", 16, 32, 0}};
  for (const Case& k : cases) {
    json t = json::parse(kineto_fixture(false));
    t["distributedInfo"]["rank"] = 3;
    t["distributedInfo"]["world_size"] = k.world;
    for (json& e : t["traceEvents"]) {
      if (e.value("name", "").rfind("ncclKernel_AllReduce", 0) != 0) continue;
      e["args"]["Collective name"] = "allreduce";
      e["args"]["In msg nelems"] = 1000;
      e["args"]["dtype"] = "Float";
      e["args"]["Group size"] = k.group;
      e["args"]["Process Group Ranks"] = k.ranks;
    }
    KinetoInfo info;
    auto g = import_kineto_trace(t.dump(), 0, -1, info);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    HardwareSpec hw = testing::load_hardware_scenario("dgx2");
    hw.nodes = k.nodes;
    place_ranks(hw, *g);
    EXPECT_EQ(info.in_subgroups, k.want_nodes > 0 ? 1u : 0u) << k.ranks;
    for (const Task& task : g->schedule.tasks) {
      if (task.kind != TaskKind::kCollective) continue;
      EXPECT_EQ(task.group, k.want_group) << k.ranks;
      EXPECT_EQ(task.group_nodes, k.want_nodes) << k.ranks;
    }
  }
}

// FSDP's pattern: a parameter's copy-in kernel and its all-gather run on a side stream while the main
// stream's GEMM runs. Each stream is a lane of its resource, so the replay keeps them side by side, as
// measured: the copy-in does not wait behind the 3 ms GEMM, nor does the all-gather after it.
TEST(Kineto, EachStreamIsALaneOfItsResource) {
  json ev = json::array();
  ev.push_back({{"ph", "X"},
                {"cat", "user_annotation"},
                {"name", "ProfilerStep#0"},
                {"pid", 1},
                {"tid", 1},
                {"ts", 0},
                {"dur", 4100}});
  long corr = 1;
  auto gpu = [&](const char* name, long stream, double launch, double ts, double dur, json args) {
    ev.push_back({{"ph", "X"},
                  {"cat", "cuda_runtime"},
                  {"name", "cudaLaunchKernel"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", launch},
                  {"dur", 5},
                  {"args", {{"correlation", corr}}}});
    args["stream"] = stream;
    args["correlation"] = corr++;
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", name},
                  {"pid", 0},
                  {"tid", stream},
                  {"ts", ts},
                  {"dur", dur},
                  {"args", args}});
  };
  gpu("sm80_xmma_gemm_bf16 A", 7, 10, 20, 3000, json::object());
  gpu("split_with_sizes_copy_out", 20, 30, 40, 100, json::object());
  gpu("ncclDevKernel_AllGather_RING_LL", 20, 40, 140, 1500,
      {{"Collective name", "_allgather_base"},
       {"In msg nelems", 50000000},
       {"Out msg nelems", 100000000},
       {"dtype", "BFloat16"},
       {"Group size", 2}});
  gpu("sm80_xmma_gemm_bf16 B", 7, 50, 3020, 1000, json::object());
  const json trace = {{"traceEvents", ev}, {"distributedInfo", {{"rank", 0}, {"world_size", 2}}}};
  KinetoInfo info;
  auto g = import_kineto_trace(trace.dump(), 0, -1, info);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const auto& t = g->schedule.tasks;
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].resource, Resource::kCompute);
  EXPECT_EQ(t[0].lane, 0);
  EXPECT_EQ(t[1].resource, Resource::kCompute);
  EXPECT_EQ(t[1].lane, 1);  // the side stream's kernel
  EXPECT_EQ(t[2].kind, TaskKind::kCollective);
  EXPECT_EQ(t[2].lane, 0);  // the first stream with collectives
  EXPECT_EQ(t[2].deps, std::vector<int>{1});
  EXPECT_EQ(t[3].lane, 0);
  EXPECT_EQ(t[3].deps, std::vector<int>{0});

  const HardwareSpec hw = testing::load_hardware_scenario("dgx2");
  place_ranks(hw, *g);
  ReferenceExecutor ref(hw, g->schedule.ranks_per_node);
  const RunResult run = run_schedule(g->schedule, ref).value();
  EXPECT_NEAR(run.timing[1].start_s, 30e-6, 1e-12);  // at its launch, beside the GEMM
  EXPECT_LT(run.timing[2].start_s, run.timing[0].end_s);
  EXPECT_NEAR(run.makespan_s, 4.01e-3, 1e-9);  // the main stream: launched at 10 us, 3 + 1 ms
  // Compute is busy while either lane is: the GEMMs' 4 ms, the copy-in inside them.
  EXPECT_NEAR(run.busy_s[static_cast<int>(Resource::kCompute)], 4e-3, 1e-9);
}

TEST(Kineto, UnmatchedCollectivesAndBadFilesAreReported) {
  KinetoInfo info;
  auto g = import_kineto_trace(kineto_fixture(false), 0, -1, info);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(info.collectives, 0u);
  EXPECT_EQ(info.unmatched_collectives, 1u);  // kept with its measured duration
  EXPECT_EQ(g->schedule.tasks[3].resource, Resource::kNetwork);
  EXPECT_FALSE(import_kineto_trace("{\"traceEvents\": [", 0, -1, info).is_ok());
  auto none =
      import_kineto_trace(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1,
                                      "dur": 2}]})",
                          0, -1, info);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no GPU kernels"), std::string::npos);
  auto steps = import_kineto_trace(kineto_fixture(), 5, 9, info);
  ASSERT_FALSE(steps.is_ok());
  EXPECT_NE(steps.status().message().find("steps 0:2"), std::string::npos);
}

// Traces with events dropped, fields removed or given the wrong type (strings, nulls, objects, negative or
// huge numbers) end in a graph whose dependencies point backwards or in an error, never a crash.
TEST(Kineto, DamagedTracesNeverCrash) {
  const json good = json::parse(kineto_fixture());
  testing::XorShift next{0x243F6A8885A308D3ull};  // the same cases on every run
  const json odd[] = {json("7"),   json(nullptr), json::object(), json(-1e300),
                      json(1e300), json(-5),      json("x")};
  for (int i = 0; i < 400; ++i) {
    json t = good;
    json& ev = t["traceEvents"];
    for (int e = 0, edits = 1 + static_cast<int>(next() % 6); e < edits; ++e) {
      json& event = ev[next() % ev.size()];
      switch (next() % 3) {
        case 0:  // drop the event
          event = json::object();
          break;
        case 1: {  // a field, or an argument, of the wrong type
          json& where = (next() % 2 == 0 && event.contains("args")) ? event["args"] : event;
          if (!where.is_object() || where.empty()) break;
          auto it = where.begin();
          std::advance(it, static_cast<long>(next() % where.size()));
          it.value() = odd[next() % std::size(odd)];
          break;
        }
        default:  // remove a field
          if (event.is_object() && !event.empty()) event.erase(event.begin());
      }
    }
    KinetoInfo info;
    const std::string text = t.dump();
    auto g = import_kineto_trace(text, 0, -1, info);
    if (!g.is_ok()) {
      EXPECT_FALSE(g.status().message().empty());
      continue;
    }
    for (const Task& task : g->schedule.tasks) {
      for (int d : task.deps) EXPECT_LT(d, task.id);
    }
  }
}

}  // namespace
}  // namespace memwall
