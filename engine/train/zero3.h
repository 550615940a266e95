// ZeRO-3 data-parallel training of the GPT model across the ranks of a Communicator, in memory (the offload
// tiers and the schedule-driven executor build on this): every graph parameter is padded to a multiple of
// the rank count and partitioned, each rank holding 1/R of it with its fp32 master copy and Adam states;
// before each op (forward and backward) the op's parameters are all-gathered into working buffers and
// released after; the op's gradients are reduce-scattered (deterministic, rank-ordered sums) into the
// owner's shard and averaged over ranks; each rank steps Adam on its own shard. Initialisation is
// partitioned too: no rank ever materialises more than one op's parameters.
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
#include "plan/schedule.h"

namespace memwall::train {

struct Zero3Options {
  int micro_batch = 1;  // sequences per rank per step
  int seq = 64;
  int tiling = 1;
  std::uint64_t seed = 1;
  kernels::AdamHyper adam;
  int threads = 1;  // Adam threads
};

// One measured interval of a step, for traces: `resource` is a core Resource (compute, network, cpu
// optimizer).
struct TrainEvent {
  std::string name;      // "L3.fc1", "L3.fc1.w allgather", "adam"
  std::string category;  // compute, collective, optimizer_step
  Phase phase = Phase::kForward;
  Resource resource = Resource::kCompute;
  double start_s = 0, end_s = 0;  // since the trainer was created
  double bytes = 0, flops = 0;
};

class Zero3Trainer {
 public:
  // Builds the partition and initialises this rank's shards. Errors for invalid configs, before any work.
  static Result<Zero3Trainer> create(const model::GptConfig& c, const Zero3Options& o,
                                     comm::Communicator& comm);

  // One optimizer step on this rank's micro-batch (tokens/targets: [micro_batch * seq]). Returns the loss
  // averaged over ranks.
  Result<float> step(const int* tokens, const int* targets);

  // The mean loss of this rank's batch without updating anything (parameters gathered per op as in step).
  Result<float> evaluate(const int* tokens, const int* targets);
  const ModelGraph& graph() const { return model_->graph(); }

  // Bytes of parameter and optimizer state this rank holds (shards only), and the total model size.
  std::size_t shard_elements() const { return shard_master_.size(); }
  std::size_t model_elements() const { return model::gpt_num_params(c_); }
  // Checkpoints (docs/training.md): every rank writes its shards of the master weights and Adam moments to
  // DIR/step-NNNNNNNN/rank-R-of-N.bin (CRC32C, written atomically); after a barrier, rank 0 points
  // DIR/latest.json at that step (atomically) and removes older step directories. A crash at any point leaves
  // latest.json naming a complete checkpoint. No rank ever holds more than its own shards.
  Status save(const std::string& dir);
  // Loads the checkpoint latest.json names into this trainer (same model, options and rank count; errors name
  // the file and the mismatch). Returns the step it was taken at.
  Result<long> load(const std::string& dir);
  long steps_done() const { return step_; }
  // Receives every measured interval of the following steps (null: none). Timing adds a clock read per event.
  void set_event_sink(std::function<void(const TrainEvent&)> sink) { sink_ = std::move(sink); }

  // Gathers the full fp32 parameters into `out` (model_elements()) on every rank: for tests and export.
  Status gather_params(std::vector<float>& out);

 private:
  struct Part {
    std::size_t model_offset, numel, shard, local;  // local: where this rank's shard starts in shard arrays
  };
  Zero3Trainer(const model::GptConfig& c, const Zero3Options& o, comm::Communicator& comm);
  Status gather(int param, std::vector<float>& into, const std::string& tag, Phase phase);
  Status forward(const int* tokens, const int* targets, const std::string& at);

  model::GptConfig c_;
  Zero3Options o_;
  comm::Communicator* comm_;
  std::unique_ptr<model::GptModel> model_;
  std::vector<Part> parts_;  // per graph parameter
  std::vector<float> shard_master_, shard_m_, shard_v_, shard_grad_;
  std::vector<std::vector<float>> work_, work_grad_;  // per op parameter slot
  long step_ = 0;
  std::function<void(const TrainEvent&)> sink_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void emit(std::string name, const char* category, Phase phase, Resource resource, double start,
            double bytes, double flops);
};

// Reassembles the full fp32 parameters of the checkpoint DIR/latest.json names from every rank's shard file,
// in one process (no MPI), for export. Fills `config` from the checkpoint.
Result<std::vector<float>> read_checkpoint_params(const std::string& dir, model::GptConfig& config);

}  // namespace memwall::train
