// Joint replay of a job's ranks: which collectives meet, how long each rank waits at them on the reference
// executor (closed forms), and the traces that cannot be replayed together.
#include <gtest/gtest.h>

#include "replay/joint.h"
#include "test_support.h"

namespace memwall {
namespace {

Task collective(int id, double bytes) {
  Task t;
  t.id = id;
  t.name = "all-reduce " + std::to_string(id);
  t.kind = TaskKind::kCollective;
  t.resource = Resource::kNetwork;
  t.collective = CollectiveKind::kAllReduce;
  t.bytes = bytes;
  return t;
}

// Per rank: compute of `compute_s[k]` then collective k (on `group` ranks), each after the one before.
Schedule rank_schedule(int ranks, const std::vector<double>& compute_s, int group) {
  Schedule s;
  s.ranks = s.data_parallel = s.ranks_per_node = ranks;
  for (double c : compute_s) {
    Task t = testing::compute_task(static_cast<int>(s.tasks.size()), 0);
    t.measured_s = c;
    if (!s.tasks.empty()) t.deps = {s.tasks.back().id};
    s.tasks.push_back(t);
    Task a = collective(static_cast<int>(s.tasks.size()), 64e6);
    a.group = group;
    a.deps = {t.id};
    s.tasks.push_back(a);
  }
  return s;
}

TEST(JointReplay, RanksWaitAtEachCollectiveForTheLastToArrive) {
  const HardwareSpec hw = testing::simple_hardware(3, 32e9);
  const std::vector<Schedule> ranks = {rank_schedule(3, {1e-3, 4e-3}, 3), rank_schedule(3, {3e-3, 1e-3}, 3),
                                       rank_schedule(3, {2e-3, 1e-3}, 3)};
  std::vector<const Schedule*> ptrs;
  for (const Schedule& s : ranks) ptrs.push_back(&s);
  auto meet = match_collectives(ptrs, {nullptr, nullptr, nullptr});
  ASSERT_TRUE(meet.is_ok()) << meet.status().to_string();
  ASSERT_EQ(meet->parties.size(), 2u);
  EXPECT_EQ(meet->parties[0], 3);
  EXPECT_EQ(meet->point[1][1], 0);
  EXPECT_EQ(meet->point[2][3], 1);
  EXPECT_EQ(meet->point[0][0], -1);
  auto run = run_joint_reference(ptrs, *meet, hw);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_EQ(run->rounds, 1);  // the ranks' runs at once
  const double ar = ReferenceExecutor(hw, 3).duration(ranks[0].tasks[1]);
  // First all-reduce when rank 1 arrives (3 ms), second when rank 0 does (3 ms + ar + 4 ms).
  const double second = 3e-3 + ar + 4e-3;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NEAR(run->ranks[static_cast<std::size_t>(r)].timing[1].start_s, 3e-3, 1e-12) << r;
    EXPECT_NEAR(run->ranks[static_cast<std::size_t>(r)].timing[3].start_s, second, 1e-12) << r;
    EXPECT_NEAR(run->ranks[static_cast<std::size_t>(r)].makespan_s, second + ar, 1e-12) << r;
  }
  EXPECT_NEAR(run->iteration_s, second + ar, 1e-12);
  // Waits: rank 0 2 ms then none; rank 1 none then 3 ms; rank 2 1 ms then 3 ms.
  EXPECT_NEAR(collective_wait_s(ranks[0], run->ranks[0]), 2e-3, 1e-12);
  EXPECT_NEAR(collective_wait_s(ranks[1], run->ranks[1]), 3e-3, 1e-12);
  EXPECT_NEAR(collective_wait_s(ranks[2], run->ranks[2]), 4e-3, 1e-12);
  // A rank run alone waits for nothing.
  ReferenceExecutor alone(hw, 3);
  EXPECT_EQ(collective_wait_s(ranks[0], run_schedule(ranks[0], alone).value()), 0.0);
}

// A planned schedule (every rank of the node runs it): a collective of the whole node meets all its ranks;
// one of groups of 2 (tensor parallelism's consecutive ranks) meets each pair apart; a group of 1 meets
// nobody.
TEST(JointReplay, PlannedCollectivesMeetTheirGroupsRanksOnTheNode) {
  const HardwareSpec hw = testing::simple_hardware(4, 32e9);
  Schedule s = rank_schedule(4, {1e-3, 1e-3, 1e-3}, 4);
  s.tasks[3].group = 2;
  s.tasks[5].group = 1;
  const Rendezvous meet = planned_rendezvous(s, hw);
  ASSERT_EQ(meet.point.size(), 4u);
  ASSERT_EQ(meet.parties, (std::vector<int>{4, 2, 2}));
  for (int r = 0; r < 4; ++r) {
    const auto& p = meet.point[static_cast<std::size_t>(r)];
    EXPECT_EQ(p[0], -1);             // compute
    EXPECT_EQ(p[1], 0);              // the node's all-reduce
    EXPECT_EQ(p[3], r < 2 ? 1 : 2);  // ranks 0-1 and 2-3
    EXPECT_EQ(p[5], -1);             // a group of one
  }
  // Every other rank (an expert's data-parallel ranks under expert parallelism 2): ranks 0 and 2, 1 and 3.
  Schedule strided = s;
  strided.tasks[3].group_stride = 2;
  const Rendezvous apart = planned_rendezvous(strided, hw);
  ASSERT_EQ(apart.parties, (std::vector<int>{4, 2, 2}));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(apart.point[static_cast<std::size_t>(r)][3], r % 2 == 0 ? 1 : 2) << r;
  // Run together on the reference executor, a rank whose compute takes twice as long holds its groups back:
  // rank 1 for the pair's all-reduce, everyone for the node's; ranks 2 and 3 do not wait for it in theirs.
  const Schedule slow = slowed_compute(s, 2.0);
  EXPECT_DOUBLE_EQ(slow.tasks[0].measured_s, 2e-3);
  EXPECT_DOUBLE_EQ(slow.tasks[1].bytes, s.tasks[1].bytes);  // collectives unchanged
  const std::vector<const Schedule*> ranks = {&s, &s, &s, &slow};
  auto run = run_joint_reference(ranks, meet, hw);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const double ar4 = ReferenceExecutor(hw, 4).duration(s.tasks[1]);
  const double ar2 = ReferenceExecutor(hw, 4).duration(s.tasks[3]);
  EXPECT_NEAR(run->ranks[0].timing[1].start_s, 2e-3, 1e-12);        // waits for rank 3's 2 ms
  EXPECT_NEAR(run->ranks[0].timing[3].start_s, 3e-3 + ar4, 1e-12);  // its pair is on time
  EXPECT_NEAR(run->ranks[2].timing[3].start_s, 4e-3 + ar4, 1e-12);  // waits for rank 3 again
  EXPECT_NEAR(run->iteration_s, 6e-3 + ar4 + ar2 + ReferenceExecutor(hw, 4).duration(s.tasks[5]), 1e-12);
}

// Collectives on one lane follow each other in task order (program order), whatever their dependencies
// allow; other lanes' collectives and other tasks keep theirs.
TEST(JointReplay, PlannedCollectivesAreIssuedInProgramOrder) {
  Schedule s = rank_schedule(2, {1e-3, 1e-3, 1e-3}, 2);
  s.tasks[5].lane = 1;
  for (Task& t : s.tasks) {
    if (t.kind == TaskKind::kCollective) t.deps.clear();  // all ready at once
  }
  const Schedule ordered = collectives_in_program_order(s);
  EXPECT_TRUE(ordered.tasks[1].deps.empty());
  EXPECT_EQ(ordered.tasks[3].deps, std::vector<int>{1});
  EXPECT_TRUE(ordered.tasks[5].deps.empty());  // the only one on lane 1
  EXPECT_EQ(ordered.tasks[2].deps, s.tasks[2].deps);
}

TEST(JointReplay, ProcessGroupsMeetOnlyTheirOwnRanks) {
  // Four ranks; the second collective is inside pairs {0, 1} and {2, 3}: rank 3's slow compute before it
  // holds back rank 2 only.
  std::vector<Schedule> ranks;
  std::vector<std::map<int, std::vector<int>>> groups(4);
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(rank_schedule(4, {1e-3, r == 3 ? 5e-3 : 1e-3}, 4));
    ranks.back().tasks[3].group = 2;
    groups[static_cast<std::size_t>(r)][3] = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  }
  std::vector<const Schedule*> ptrs;
  std::vector<const std::map<int, std::vector<int>>*> group_ptrs;
  for (int r = 0; r < 4; ++r) {
    ptrs.push_back(&ranks[static_cast<std::size_t>(r)]);
    group_ptrs.push_back(&groups[static_cast<std::size_t>(r)]);
  }
  auto meet = match_collectives(ptrs, group_ptrs);
  ASSERT_TRUE(meet.is_ok()) << meet.status().to_string();
  ASSERT_EQ(meet->parties, (std::vector<int>{4, 2, 2}));
  auto run = run_joint_reference(ptrs, *meet, testing::simple_hardware(4, 32e9));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_NEAR(collective_wait_s(ranks[0], run->ranks[0]), 0, 1e-12);
  EXPECT_NEAR(collective_wait_s(ranks[2], run->ranks[2]), 4e-3, 1e-12);
  EXPECT_NEAR(run->ranks[2].makespan_s, run->ranks[3].makespan_s, 1e-12);
  EXPECT_LT(run->ranks[0].makespan_s, run->ranks[2].makespan_s - 3.9e-3);
}

// Two streams per rank, each a GEMM then a collective: rank 0's first stream is ready first, rank 1's second.
// A rank's run waiting at one collective holds its other stream, so run together the two would stop each
// other; the rounds find the meeting times instead: both collectives start when their last rank is ready.
TEST(JointReplay, CollectivesOnTwoStreamsMetInDifferentTimeOrders) {
  auto rank = [](double first_s, double second_s) {
    Schedule s;
    s.ranks = s.data_parallel = s.ranks_per_node = 2;
    for (int lane = 0; lane < 2; ++lane) {
      Task c = testing::compute_task(2 * lane, lane);
      c.measured_s = lane == 0 ? first_s : second_s;
      s.tasks.push_back(c);
      Task a = collective(2 * lane + 1, 1e6);
      a.group = 2;
      a.lane = lane;
      a.deps = {c.id};
      s.tasks.push_back(a);
    }
    return s;
  };
  const Schedule a = rank(1e-3, 5e-3), b = rank(5e-3, 1e-3);
  auto meet = match_collectives({&a, &b}, {nullptr, nullptr});
  ASSERT_TRUE(meet.is_ok()) << meet.status().to_string();
  auto run = run_joint_reference({&a, &b}, *meet, testing::simple_hardware(2, 32e9));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_GT(run->rounds, 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(run->ranks[static_cast<std::size_t>(r)].timing[1].start_s, 5e-3, 1e-12) << r;
    EXPECT_NEAR(run->ranks[static_cast<std::size_t>(r)].timing[3].start_s, 5e-3, 1e-12) << r;
  }
  EXPECT_NEAR(collective_wait_s(a, run->ranks[0]), 4e-3, 1e-12);
  EXPECT_NEAR(collective_wait_s(b, run->ranks[1]), 4e-3, 1e-12);
}

TEST(JointReplay, RefusesTracesThatRanDifferentCollectives) {
  // Rank 1 runs one all-reduce fewer.
  const Schedule a = rank_schedule(2, {1e-3, 1e-3}, 2), b = rank_schedule(2, {1e-3}, 2);
  auto meet = match_collectives({&a, &b}, {nullptr, nullptr});
  ASSERT_FALSE(meet.is_ok());
  EXPECT_EQ(meet.status().message(),
            "collective #2 of the group of ranks 0, 1 ('all-reduce 3' on rank 0) is never reached by rank 1: "
            "the traces ran different collectives");
  // Two groups met in opposite orders: rank 0 runs the world's then {0, 1}'s, rank 1 the other way round.
  Schedule c = rank_schedule(3, {1e-3, 1e-3}, 3), d = c;
  c.tasks[3].group = d.tasks[1].group = 2;
  const std::map<int, std::vector<int>> gc = {{3, {0, 1}}}, gd = {{1, {0, 1}}};
  const Schedule e = rank_schedule(3, {1e-3}, 3);
  meet = match_collectives({&c, &d, &e}, {&gc, &gd, nullptr});
  ASSERT_FALSE(meet.is_ok());
  EXPECT_NE(meet.status().message().find("the ranks reach their collectives in different orders"),
            std::string::npos)
      << meet.status().message();
}

}  // namespace
}  // namespace memwall
