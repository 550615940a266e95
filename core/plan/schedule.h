// Schedule: one training iteration of one rank as a DAG of tasks, produced by the planner and run by any
// Executor. Tasks are stored in a valid execution order: every dependency has a smaller id.
//
// Memory is explicit: kAlloc/kFree tasks create and release named buffers on a tier; compute, copy and
// collective tasks list the buffers they use. Persistent buffers (the model states that outlive the
// iteration) are allocated by setup tasks at the start and never freed. Data-parallel ranks run the same
// schedule (the planner models rank 0; `ranks` says how many there are).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "memory/memory_model.h"

namespace memwall {

enum class TaskKind { kCompute, kCopy, kNvmeRead, kNvmeWrite, kCollective, kOptimizerStep, kAlloc, kFree };
const char* task_kind_name(TaskKind k);

// The resource a task occupies while it runs. kNone: instantaneous bookkeeping (alloc/free).
enum class Resource { kCompute, kH2D, kD2H, kNvmeRead, kNvmeWrite, kNetwork, kCpuOptimizer, kNone };
inline constexpr int kResourceCount = 8;
const char* resource_name(Resource r);
// A resource's lane as a trace track (tid): resource + 1 for lane 0 (every trace before lanes), then
// kResourceCount further on for each lane; and back (a track past the last resource wraps to lanes).
inline int track_of(Resource r, int lane) {
  return static_cast<int>(r) + 1 + kResourceCount * lane;
}
inline Resource resource_of_track(int tid) {
  const int r = tid < 1 ? 0 : (tid - 1) % kResourceCount;
  return r == static_cast<int>(Resource::kNone) ? Resource::kCpuOptimizer : static_cast<Resource>(r);
}
inline int lane_of_track(int tid) {
  return tid < 1 ? 0 : (tid - 1) / kResourceCount;
}

// kAllToAll: each rank sends its buffer's 1/n share to each of the n - 1 others (expert parallelism's token
// exchange); `bytes` is one rank's buffer.
enum class CollectiveKind { kNone, kAllGather, kReduceScatter, kAllReduce, kBroadcast, kAllToAll };
const char* collective_name(CollectiveKind c);

enum class Phase { kSetup, kForward, kRecompute, kBackward, kOptimizer };
inline constexpr int kPhaseCount = 5;
const char* phase_name(Phase p);

// What a buffer holds, for an executor that moves real data (engine/): a parameter's 16-bit shard, its
// staging copies, the gathered whole parameter, its gradient and gradient shard, swap slots. kOther: anything
// else (activations, reserves, fp32 optimizer states, pools), told apart by category.
enum class BufferRole {
  kOther,
  kShard,          // the persistent partitioned 16-bit parameter shard (home tier)
  kResident,       // a whole parameter kept on the GPU (stages 0-2, persistent small parameters)
  kSwapIn,         // a pinned swap slot an NVMe shard is read into
  kStaged,         // the shard copied to the GPU before the all-gather
  kGathered,       // the whole parameter on the GPU
  kGrad,           // the whole gradient of one parameter (accumulated over its uses in backward)
  kGradShard,      // this rank's part of a gradient after the reduce-scatter (or a persistent GPU grad)
  kGradSwapOut,    // a pinned slot a gradient shard is staged through on its way to NVMe
  kOptimizerSwap,  // a pinned slot holding one optimizer sub-group's states
  kDelayedGrads,   // the previous step's fp32 gradients, which a delayed parameter update steps on
};

struct Buffer {
  int id = 0;
  Tier tier = Tier::kGpu;
  MemCategory category = MemCategory::kParams16;
  double bytes = 0;
  bool persistent = false;  // allocated at setup, alive across iterations
  bool pinned = false;
  int pool = -1;  // a slot inside this persistent pool buffer: takes no memory of its own
  std::string name;
  int param = -1;  // ModelGraph parameter it belongs to, or -1
  BufferRole role = BufferRole::kOther;
};

struct Task {
  int id = 0;
  TaskKind kind = TaskKind::kCompute;
  Resource resource = Resource::kNone;
  Phase phase = Phase::kSetup;
  std::string name;
  int op = -1;            // ModelGraph op, or -1
  double flops = 0;       // kCompute: the FLOPs its kernels execute (GraphOp's times its exec_fraction)
  double bytes = 0;       // bytes moved (copy, NVMe, collective), state traffic (optimizer step) or
                          // device memory read and written (compute: the roofline's bytes)
  double elements = 0;    // kOptimizerStep: parameters updated
  Tier src = Tier::kGpu;  // kCopy / NVMe: from
  Tier dst = Tier::kGpu;  // kCopy / NVMe: to; kOptimizerStep: where the states live
  CollectiveKind collective = CollectiveKind::kNone;
  int group = 1;             // collective group size
  int group_nodes = 0;       // nodes the group spans, as many of its ranks on each; 0: its ranks are
                             // consecutive (ceil(group / GPUs per node) nodes)
  int group_stride = 1;      // the group's ranks are this far apart (an expert's data-parallel ranks under
                             // expert parallelism: every ep-th); 1: consecutive
  bool single_link = false;  // kCopy: one GPU's link only (broadcast owner), not the all-GPU share
  int buffer = -1;           // kAlloc / kFree: the buffer
  int param = -1;            // kCopy / NVMe / kCollective: the ModelGraph parameter moved, or -1
  int subgroup = -1;         // optimizer phase: the sub-group (0-based) a step or its I/O works on
  int layer = -1;            // kCopy of an activation checkpoint: the layer whose input (residual) it holds
  double measured_s = 0;     // replay: a measured duration executors use for kCompute / kOptimizerStep
  double delay_s = 0;        // replay: measured idle time before the task starts once it could (launch gaps)
  double release_s = 0;  // replay: earliest start since the iteration began (a GPU task's CPU-side launch)
  // replay: the resource's lane, e.g. the CUDA stream a measured kernel ran on. Lanes of one resource run
  // side by side, each in order (a compute kernel on a side stream overlaps the main stream's, as it did
  // when measured); the planner's schedules use lane 0 only.
  int lane = 0;
  // Gradient accumulation: runs in every micro-batch but the first (reading back the gradient sum the
  // earlier ones left on NVMe); accumulated_schedule leaves it out of the first copy.
  bool later_micro_batches = false;
  // Gradient accumulation: runs only in the last micro-batch (stages 0 and 1, and stage 3's persistent
  // small parameters, sum whole gradients over the micro-batches and reduce them once per step, at the
  // accumulation boundary, as DDP's no_sync and DeepSpeed's stage 1 do); accumulated_schedule leaves it out
  // of the others.
  bool last_micro_batch = false;
  std::vector<int> uses;  // buffers read or written while running
  std::vector<int> deps;  // task ids that must finish first
};

struct Schedule {
  std::vector<Task> tasks;
  std::vector<Buffer> buffers;
  int ranks = 1;  // data-parallel x model-parallel ranks running this schedule
  int ranks_per_node = 1;
  int data_parallel = 1;
  int model_parallel = 1;
  double tokens = 0;                     // tokens per rank per iteration
  bool memory_in_program_order = false;  // run_schedule: alloc/free strictly in task order (see executor.h)
  // Delayed parameter update: the optimizer phase works on the previous step's gradients, so with gradient
  // accumulation it may start with the step's first micro-batch (accumulated_schedule).
  bool delayed_parameter_update = false;
  // Where an offloaded optimizer's fp32 gradients wait for its step ("cpu" or "nvme", as
  // memwall.optimizer_gradients resolved); "" with the optimizer on the GPU.
  std::string optimizer_gradients;
  // ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio < 1): the first twin_flow_groups sub-groups step on
  // the GPU, and the first twin_flow_params parameters (those whose shards start among them) keep their
  // gradients there; 0 without Twin-Flow.
  int twin_flow_groups = 0, twin_flow_params = 0;
  std::vector<std::string> notes;  // planning decisions (budgets shrunk, ...)

  double flops() const;  // compute FLOPs of the iteration on this rank
};

// A hash of what the schedule runs (every task's kind, phase, resource, collective, parameter, sub-group,
// bytes, FLOPs and dependencies, every buffer's tier and bytes): equal on ranks that planned alike.
std::uint64_t fingerprint(const Schedule& s);

// A whole gradient-accumulation step as one schedule, as memwall train runs it and the simulator times it: G
// copies of `s` (planned for G micro-batches), the first G - 1 without the optimizer phase and the tasks
// marked last_micro_batch, the first without the tasks marked later_micro_batches and every copy after the
// first without the setup tasks (persistent buffers are allocated once); each copy starts when every task of
// the one before has finished (the micro-batches run back to back). Task names of the first G - 1 copies
// start with "micro-batch k/G: ". origin[i] and micro[i]: task i's id in `s` and its micro-batch (0-based). G
// = 1 gives `s`.
struct AccumulatedSchedule {
  Schedule schedule;
  std::vector<int> origin, micro;
};
AccumulatedSchedule accumulated_schedule(const Schedule& s, int accumulation_steps);
// Whether accumulated_schedule(s, G) stays within 2^24 tasks (a few GiB); else one line naming
// gradient_accumulation_steps and the most it may be for this schedule.
Status accumulation_fits(const Schedule& s, int accumulation_steps);

// Memory occupancy from replaying the schedule's alloc/free tasks in task order.
struct MemoryTimeline {
  struct Sample {
    int task = 0;                          // the alloc/free task after which this holds
    double bytes[kTierCount] = {0, 0, 0};  // per rank
  };
  std::vector<Sample> samples;
  double peak_bytes[kTierCount] = {0, 0, 0};          // per rank
  std::vector<std::vector<double>> peak_by_category;  // [tier][category] at that tier's peak
  double persistent_bytes[kTierCount] = {0, 0, 0};
  // Per phase (of the alloc/free task), the most each tier held (per rank): where an iteration's memory goes.
  double phase_peak_bytes[kPhaseCount][kTierCount] = {};
};
// Fails (kFailedPrecondition) on a free of a buffer that is not live or a use of a dead buffer. With
// `counted`, only the buffers it accepts take memory (the others are still checked for liveness).
Result<MemoryTimeline> replay_memory(const Schedule& s,
                                     const std::function<bool(const Buffer&)>& counted = nullptr);
// What an executor that holds the GPU's activations outside the tier leaves out of it (see
// MemwallRunConfig::gpu_activations_outside_tier).
bool held_outside_gpu_tier(const Buffer& b);

}  // namespace memwall
