// ZeRO-3 / ZeRO-Infinity training of the GPT model across the ranks of a Communicator, driven by the core's
// Schedule. The planner turns the model's graph, the run and the hardware into one iteration's tasks; a
// LaneExecutor runs them on real threads (compute, copies, NVMe reads and writes, the network and the CPU
// optimizer each on their own in-order lane) and this trainer binds every task to real work:
//   - buffers on the GPU tier live in a host-emulated device arena whose capacity is the hardware's GPU
//     memory; CPU buffers in a host arena of the node's memory share; NVMe buffers in a TensorStore (O_DIRECT
//     async I/O) under swap_dir; swap slots in arenas the size of the planned pinned pools;
//   - NVMe reads/writes go through the store; copies are memcpy between tiers; all-gathers and
//     reduce-scatters go to the Communicator (MPI, deterministic rank-ordered sums); the optimizer step is
//     the SIMD Adam on each sub-group, writing bf16 parameters back;
//   - compute tasks run the model's op with the gathered bf16 parameters widened to fp32.
// Every graph parameter is padded to a multiple of the rank count and partitioned; in stage 3 no rank ever
// holds more than its own shards plus the parameters the schedule has gathered. Stages 1 and 2 (the run's
// zero_optimization.stage) keep every parameter whole on each rank's device and partition the optimizer
// states (and in stage 2 the gradients) by the same shards: each rank updates its slice of the whole copies,
// then an all-gather per optimizer sub-group fills in the others. Stage 0 (plain data parallelism) keeps
// everything whole on every rank: gradients are all-reduced and every rank steps all of the states alike
// (its checkpoint is one partition, written by rank 0). Activations stay in the model's own
// buffers (the arena only accounts for them), so losses are bitwise the same whatever the offload, tiling
// or checkpointing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cpu/adam.h"
#include "engine/comm/comm.h"
#include "engine/model/gpt.h"
#include "exec/executor.h"
#include "plan/schedule.h"
#include "spec/hardware_spec.h"
#include "spec/run_config.h"

namespace memwall::train {

// The run settings the trainer honours (its planner input): offload_param / offload_optimizer (none, cpu,
// nvme) with buffer counts and sizes, sub_group_size, prefetch and its budgets, reuse distance, activation
// checkpointing (with cpu_checkpointing), tiling, ZeRO stage 0, 1, 2 or 3. create() fixes what the engine
// implements: in stage 3 every parameter partitioned (persistence threshold 0), bf16 parameters with fp32
// master weights, fp32 gradients (communication_data_type fp32), data parallelism over the communicator's
// ranks. memwall.delayed_parameter_update (stages 1 and 2 with the optimizer on the CPU)
// steps the optimizer on the previous step's gradients beside each step's forward and backward: the first
// step applies nothing, step k the gradients of step k - 1 (computed with the parameters before step k - 1's
// own update), as ZeRO-Offload's one-step delayed update does; the first
// memwall.delayed_parameter_update_warmup steps apply their own gradients right after their backward.
RunConfig default_train_run();
// A machine for the emulated tiers: `device_bytes` of device memory per rank (the host-emulated GPU arena),
// `host_bytes` of CPU memory and `nvme_bytes` of NVMe per node, no reserves, 64 "GPUs" per node.
HardwareSpec emulated_hardware(double device_bytes, double host_bytes, double nvme_bytes);

// Where compute, the device tier and collectives run: the host-emulated device (memory arenas on the host,
// kernels/cpu, MPI), or a real GPU (kernels/cuda, a cudaMalloc'd tier, NCCL when built in).
enum class ComputeDevice { kCpu, kCuda };

struct Zero3Options {
  int micro_batch = 1;  // sequences per rank per step
  int seq = 64;
  int tiling = 1;
  std::uint64_t seed = 1;
  // Where the initial parameters come from: GPT-2's initialisation from `seed` (empty), or this reader of
  // elements [offset, offset + n) of the flat gpt_param_layout array (model::HfWeights::read), which each
  // rank calls for its own shard only, piece by piece.
  model::ParamReader init;
  kernels::AdamHyper adam;
  int threads = 1;  // Adam threads
  RunConfig run = default_train_run();
  HardwareSpec hw = emulated_hardware(4.0 * (1ull << 30), 16.0 * (1ull << 30), 0);
  // The NVMe tier's directory (this rank's swap store goes to swap_dir/rank<r>, replaced at start). Required
  // when the run offloads anything to NVMe.
  std::string swap_dir;
  ComputeDevice device = ComputeDevice::kCpu;
  int gpu = -1;  // kCuda: the GPU ordinal; -1 = rank % GPUs
  // kCuda: the linears' GEMMs on bf16 operands with fp32 accumulation (tensor-core rate) and the
  // attention's on TF32, instead of fp32 (the CPU's arithmetic, the default).
  bool gpu_bf16_matmuls = false;
  // kCpu: the linears' and the head's GEMMs on bf16 operands with fp32 accumulation (GptModel's
  // set_bf16_matmuls: oneDNN on AMX or AVX-512 BF16), instead of fp32 (the default).
  bool cpu_bf16_matmuls = false;
  // kCuda with more than one rank: collectives on NCCL (when built in) or, when false, through the host
  // communicator (MPI) on host copies of the device buffers: slower, for machines where NCCL does not work.
  bool gpu_nccl = true;
  // kCuda: a task's GPU work completes asynchronously (CUDA events order the streams, the lanes run ahead);
  // false: each task waits for its stream before its lane moves on (simpler to debug, slower).
  bool gpu_async = true;
  // Tests: before an activation checkpoint offloaded to the CPU (cpu_checkpointing) is brought back, NaN over
  // the model's own copy of it, so that the recompute can only see the bytes that went out and came back.
  bool scrub_offloaded_checkpoints = false;
};

// What one step did, measured.
struct StepStats {
  double seconds = 0;
  double busy_s[kResourceCount] = {};  // time each lane was running tasks
  double bytes[kResourceCount] = {};   // bytes moved per lane (h2d, d2h, nvme read/write, network)
  // High-water mark since the trainer started, this rank, beyond the hardware's reserved memory: the
  // device and host arenas, and the NVMe store's tensors (both versions while one is being replaced).
  double peak_bytes[kTierCount] = {};
  double capacity_bytes[kTierCount] = {};
  // Data movement (h2d, d2h, NVMe reads and writes, network) against work (compute and the CPU optimizer):
  // how long any transfer was running, and for how much of that time work ran too (prefetching and the
  // optimizer's swap pipelining at work).
  double transfer_s = 0, transfer_overlapped_s = 0;
};

class Zero3Trainer {
 public:
  // Plans one iteration for this model, run and hardware (rejecting a run that does not fit with the plan's
  // shortfall), allocates the tiers and initialises this rank's shards. Errors come before any work.
  static Result<Zero3Trainer> create(const model::GptConfig& c, const Zero3Options& o,
                                     comm::Communicator& comm);
  Zero3Trainer(Zero3Trainer&&) noexcept;
  Zero3Trainer& operator=(Zero3Trainer&&) noexcept;
  ~Zero3Trainer();

  // One optimizer step on this rank's micro-batch (tokens/targets: [micro_batch * seq]), running every task
  // of the schedule on the lanes. Returns the loss averaged over ranks.
  //
  // Gradient accumulation: with micro_batches G > 1 (the run's gradient_accumulation_steps, which the
  // schedule is planned for: an error otherwise), tokens/targets hold G micro-batches one after another;
  // the first G - 1 run the schedule without its optimizer phase (their gradients summed where the optimizer
  // finds them: the persistent fp32 gradients on the device or in CPU memory, or on NVMe, where the
  // schedule's later_micro_batches tasks read the sum back before it is added to and rewritten), the last
  // runs all of it, and Adam divides the sum by G. Returns the loss averaged
  // over the micro-batches and ranks; last_step() sums the G runs; last_run() and measured_schedule() are
  // the whole step's, as one run of accumulated_schedule(schedule(), G).
  Result<float> step(const int* tokens, const int* targets, int micro_batches = 1);

  // The mean loss of this rank's batch without updating anything: the schedule's forward tasks only.
  Result<float> evaluate(const int* tokens, const int* targets);
  const ModelGraph& graph() const;
  const Schedule& schedule() const;
  const StepStats& last_step() const;
  // The last step's global L2 norm of the (mean) gradient before clipping, with RunConfig::gradient_clipping
  // set; -1 without clipping (the norm is not taken).
  double last_grad_norm() const;
  // With a mixture of experts on the CPU, GptModel::expert_load of this rank's last micro-batch; else 0.
  double last_expert_load() const;
  // The learning rate of the next steps (a scheduler's per-step rate), and Adam's betas (OneCycle's
  // cycled momentum).
  void set_learning_rate(float lr);
  void set_betas(float beta1, float beta2);
  // Degradations found while setting up (e.g. host memory the GPU driver would not page-lock).
  const std::vector<std::string>& warnings() const;
  // What computes: "GPU 0 (NVIDIA H200), CUDA" or "<hardware file's GPU model>, host-emulated".
  std::string device_name() const;
  const RunConfig& run() const { return o_.run; }  // as planned (after create()'s normalisation)
  // The hardware as trained on: the file's, with a real GPU's and host's memory where they have less.
  const HardwareSpec& hardware() const { return o_.hw; }

  std::size_t shard_elements() const;  // this rank's elements (with padding)
  // Twin-Flow (offload_optimizer.ratio < 1): how many of them the device steps, its sub-groups (the plan's
  // first twin_flow_groups) holding their states and gradients; 0 without.
  std::size_t device_optimizer_elements() const;
  int optimizer_sub_groups() const;  // this rank's optimizer sub-groups (the plan's)
  std::size_t model_elements() const { return model::gpt_num_params(c_); }
  // Checkpoints (docs/training.md): every rank writes its shards of the master weights and Adam moments to
  // DIR/step-NNNNNNNN/rank-R-of-N.bin (CRC32C, written atomically, piece by piece: checkpoint.h), reading
  // NVMe-resident states from the store; after a barrier, rank 0 points DIR/latest.json at that step
  // (atomically) and removes older step directories. A crash at any point leaves latest.json naming a
  // complete checkpoint. The format does not depend on where the states lived, so a run may resume with
  // another offload configuration. With a delayed parameter update the gradients waiting for the next
  // step's optimizer are applied first (and the trainer goes on from there too).
  Status save(const std::string& dir);
  // Loads the checkpoint latest.json names into this trainer (the same model: errors name the file and the
  // mismatch). Written by another rank count or tiling, its states are partitioned anew for this run (every
  // file checked first, then read in model order). Returns the step it was taken at.
  Result<long> load(const std::string& dir);
  long steps_done() const { return step_; }
  // The most host memory beyond the plan's pools that initialisation, save and load have staged at once:
  // one bf16 parameter shard, and up to 48 MB of states off a GPU (states on NVMe go through the
  // optimizer's idle swap pool one sub-group at a time; states in host memory are used where they are).
  std::size_t checkpoint_staging_bytes() const { return staging_peak_; }
  // The last step's (or evaluation's) measured timing per task, in seconds since the trainer was created;
  // setup tasks carry the step's start, tasks left out (an evaluation's backward) zero. With
  // measured_schedule() (the schedule with the bytes really allocated and moved) it is what
  // export_run_trace turns into the shared trace format.
  const RunResult& last_run() const;
  Schedule measured_schedule() const;

  // Gathers the full fp32 master parameters into `out` (model_elements()) on every rank: for tests and
  // export.
  Status gather_params(std::vector<float>& out);

 private:
  struct State;
  Zero3Trainer(const model::GptConfig& c, const Zero3Options& o, comm::Communicator& comm);
  // train: forward and backward (else forward only); optimizer: the optimizer phase too (train only).
  Result<float> run_phases(const int* tokens, const int* targets, bool train, bool optimizer = true);
  Status open_gpu();
  // Delayed parameter update: applies the gradients waiting for the next step's optimizer (before a save,
  // and after each warm-up step). Given `add`, it is part of the step just run: its lanes' busy time and
  // bytes are added to `add`, and its tasks' times and bytes replace those of the step's run, whose
  // optimizer phase did not run.
  Status drain_delayed_update(StepStats* add = nullptr);
  Status carve_device_tier();
  std::string device_gpu_name() const;
  // A run of whole parameters [first, last), flat elements [begin, end) of this rank's states.
  struct Piece {
    std::size_t first, last, begin, end;
  };
  static constexpr std::size_t kStatePiece = std::size_t{1} << 22;  // per piece of states not on NVMe (48 MB)
  std::vector<Piece> state_pieces() const;
  void note_staging(std::size_t bytes);
  // Fills elements [begin, begin + n) of this rank's flat fp32 master weights and Adam moments.
  using StateSource =
      std::function<Status(std::size_t begin, std::size_t n, float* master, float* m, float* v)>;
  using StateVisitor = std::function<Status(std::size_t begin, std::size_t n, const float* master,
                                            const float* m, const float* v)>;
  // Puts the states `src` gives where the run keeps them (and their bf16 copies into the parameter shards),
  // one piece at a time.
  // commit: make NVMe-resident states durable at the end (else the caller commits or rolls back the store).
  Status install_states(const StateSource& src, bool commit = true);
  // Shows `fn` this rank's states, one piece at a time, in order.
  Status visit_states(const StateVisitor& fn);

  model::GptConfig c_;
  Zero3Options o_;
  comm::Communicator* comm_;
  std::unique_ptr<State> st_;
  long step_ = 0;
  std::size_t staging_peak_ = 0;
};

// Reassembles the full fp32 parameters of the checkpoint DIR/latest.json names from every rank's shard file,
// in one process (no MPI), for export. Fills `config` from the checkpoint.
Result<std::vector<float>> read_checkpoint_params(const std::string& dir, model::GptConfig& config);

}  // namespace memwall::train
