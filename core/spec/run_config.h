// RunConfig: how a model is trained. Read from a DeepSpeed ds_config.json as written (DeepSpeed's key
// names and defaults), plus memwall's own settings under the top-level "memwall" key.
//
// Defaults below are DeepSpeed's current ones (reference/zero-infinity.md §7). A value given as "auto"
// (as Hugging Face integrations write it) is kept as auto and derived from the model by
// resolve_run_config(). docs/config-reference.md lists every key.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "base/status.h"

namespace memwall {

struct ModelSpec;
struct HardwareSpec;

enum class OffloadDevice { kNone, kCpu, kNvme };
const char* offload_device_name(OffloadDevice d);

enum class Precision { kFp32, kFp16, kBf16 };
const char* precision_name(Precision p);

// A count that may be "auto" in the file. `value` is meaningful once resolved.
struct AutoCount {
  bool is_auto = false;
  double value = 0;
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  bool pin_memory = true;
  int buffer_count = 5;      // NVMe param swap buffers
  double buffer_size = 1e8;  // elements per swap buffer
  double max_in_cpu = 1e9;   // elements of the (NVMe-offloaded) fp16 shard kept in CPU memory
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  bool pin_memory = true;
  int buffer_count = 4;         // optimizer swap buffers, each one sub-group of one fp32 state
  bool pipeline_read = false;   // overlap read of sub-group i+1 with the step of sub-group i
  bool pipeline_write = false;  // overlap write of sub-group i-1 with the step of sub-group i
  bool fast_init = false;
  // ZeRO-Offload++'s Twin-Flow: the share of the optimizer's sub-groups stepped on the CPU; the first
  // int((1 - ratio) x sub-groups) step on the GPU, their states there (stage 3, device cpu).
  double ratio = 1.0;
};

// DeepSpeed's default stage3_model_persistence_threshold (Python's sys.maxsize).
inline constexpr double kUnlimitedPersistence = 9223372036854775807.0;

struct ZeroConfig {
  int stage = 0;
  OffloadParamConfig offload_param;
  OffloadOptimizerConfig offload_optimizer;
  double sub_group_size = 1e9;                        // elements per optimizer sub-group
  AutoCount prefetch_bucket_size{false, 5e7};         // stage3_prefetch_bucket_size, elements
  double max_live_parameters = 1e9;                   // stage3_max_live_parameters, elements
  double max_reuse_distance = 1e9;                    // stage3_max_reuse_distance, elements
  AutoCount param_persistence_threshold{false, 1e5};  // stage3_param_persistence_threshold, elements
  // stage3_model_persistence_threshold: the most elements of persistent tensors (DeepSpeed's sys.maxsize: no
  // limit).
  double model_persistence_threshold = kUnlimitedPersistence;
  AutoCount reduce_bucket_size{false, 5e8};  // elements
  double allgather_bucket_size = 5e8;        // elements
  bool overlap_comm = false;                 // default: true for stage 3 (resolved by the loader)
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
};

struct AioConfig {
  double block_size = 1048576;  // bytes
  int queue_depth = 8;
  int intra_op_parallelism = 1;  // also read from its old name "thread_count"
  bool single_submit = false;
  bool overlap_events = true;
};

struct ActivationCheckpointConfig {
  bool enabled = false;  // true when the "activation_checkpointing" section is present
  int interval = 1;      // ci: transformer blocks between two checkpoints (memwall key)
  bool cpu_checkpointing = false;
  bool partition_activations = false;
  bool contiguous_memory_optimization = false;
};

enum class Partitioning { kBandwidthCentric, kBroadcast };

// Where an NVMe optimizer's fp32 gradients wait for its step (memwall.optimizer_gradients).
enum class OptimizerGradients { kAuto, kCpu, kNvme };
const char* optimizer_gradients_name(OptimizerGradients g);  // "auto", "cpu", "nvme"

// How attention runs (memwall.attention). kUnfused: separate kernels that write the T x T scores and
// softmax probabilities to device memory and keep the probabilities for backward (what the paper's Eq. 5
// counts); kFlash: one fused kernel per pass (FlashAttention's scheme) that keeps only the output and a
// per-row log-sum-exp, and recomputes the scores in backward.
enum class AttentionKernel { kUnfused, kFlash };
const char* attention_kernel_name(AttentionKernel a);  // "unfused", "flash"

// memwall's own settings, under "memwall" in the run file.
struct MemwallRunConfig {
  int tiling_factor = 1;      // memory-centric tiling: tiles per large linear
  int data_parallel = 0;      // 0 = all GPUs / (model_parallel x pipeline_parallel)
  int model_parallel = 1;     // tensor model-parallel degree
  int pipeline_parallel = 1;  // pipeline stages: predict's memory model only (plan, simulate, train: 1)
  // Expert parallelism (a mixture of experts only): the experts of each MoE layer split over groups of this
  // many consecutive data-parallel ranks (part of a node or whole nodes), tokens sent to them by all-to-all;
  // each expert's parameters are partitioned (stage 3: gathered) over the data_parallel / expert_parallel
  // ranks holding it.
  int expert_parallel = 1;
  // With expert parallelism: the busiest rank's routed tokens over its even share (1: balanced routing, as
  // the graph assumes otherwise). Its experts run that many times the tokens and its all-to-alls carry that
  // many times the bytes; the others wait for it at the next all-to-all, so an iteration takes its time.
  // memwall train's expert_load (the busiest expert's) is an upper bound for a rank of several experts.
  double expert_load = 1;
  // Train with the model file's multi-token-prediction modules (DeepSeek-V3's and GLM-4.5's
  // num_nextn_predict_layers), as their makers did: each one more block, its input projection and norms, and
  // another pass of the shared head and loss (false: the main model only, as transformers loads it).
  bool mtp = false;
  // memwall train's weight of their loss (mtp_loss_weight; DeepSeek-V3's lambda: 0.3 for its first 10T
  // tokens, 0.1 after): the loss is the main model's plus it times the modules' mean cross-entropy.
  double mtp_weight = 0.3;
  int sequence_length = 0;  // 0 = the model's max_positions
  AttentionKernel attention = AttentionKernel::kUnfused;
  Partitioning partitioning = Partitioning::kBandwidthCentric;
  bool prefetch = true;  // overlap-centric prefetching on/off
  // NVMe optimizer: read each sub-group's fp32 states (not its gradients) while backward still runs, as
  // soon as a swap slot is free, instead of after the last gradient (DeepSpeed's order; false).
  bool optimizer_prefetch = true;
  // ZeRO-Offload's one-step delayed parameter update (DPU, ZeRO-Offload paper section 5.2): the CPU optimizer
  // step of step i's gradients runs while the GPU computes step i+1 with the parameters of step i-1. The
  // plan is the steady state (after the warm-up steps that run without it); train runs it for real.
  bool delayed_parameter_update = false;
  // Training steps before the delay starts, each applying its own gradients right after its backward (the
  // ZeRO-Offload paper used 40). Only train reads it (the plan is the steady state).
  int delayed_parameter_update_warmup = 0;
  // Which parameters the optimizer's weight decay applies to (train only): false = all of them (DeepSpeed's
  // one parameter group of model.parameters()); true = matrices only (linear weights, embeddings), not
  // biases or norm weights, as Hugging Face's Trainer and nanoGPT group them ("weight_decay_params":
  // "matrices").
  bool decay_matrices_only = false;
  // DeepSeek-V3's auxiliary-loss-free load balancing (train only; a router with a correction bias:
  // sigmoid routing): after each step every expert's correction bias moves by this speed (gamma; the
  // report's 0.001) against the sign of its load error, down when it got more routing choices than its even
  // share over the step's tokens (every micro-batch and rank), up when fewer. 0: the bias stays
  // (transformers' buffer, which nothing trains).
  double router_bias_update = 0;
  // NVMe optimizer: where the fp32 gradients the step reads are kept between backward and the step. kCpu: a
  // CPU buffer of 4 B per optimizer element (as DeepSpeed's flat gradient buffer), summed there over
  // micro-batches and read by the step in place, so gradients never touch NVMe; kNvme: each micro-batch's
  // gradients stream through the pinned swap slots to NVMe (no CPU buffer; sums read back and rewritten
  // with gradient accumulation); kAuto: kCpu when the node's CPU memory holds it, else kNvme.
  OptimizerGradients optimizer_gradients = OptimizerGradients::kAuto;
  // Alloc/free order when a schedule runs: false = each as soon as its dependencies complete (a framework
  // whose CPU issues allocations ahead of the GPU, as PyTorch's caching allocator lets DeepSpeed do);
  // true = strictly in the planner's order, what memwall train's executor does ("memory_order": "program").
  bool memory_in_program_order = false;
  // Not a run-file key: set by an executor that keeps the GPU's activations (and its runtime's share) in
  // memory of its own, outside the tier the plan fills (memwall train on a GPU). The plan still has their
  // buffers, for its timeline, but the GPU's capacity check leaves them out.
  bool gpu_activations_outside_tier = false;
  std::string strategy;  // informative label ("zero-infinity-nvme", ...)
};

struct RunConfig {
  std::string name;
  AutoCount train_batch_size{true, 0};
  AutoCount micro_batch_per_gpu{false, 1};  // train_micro_batch_size_per_gpu
  AutoCount gradient_accumulation_steps{false, 1};
  Precision precision = Precision::kFp32;
  // communication_data_type: the precision gradients are kept and reduced in (DeepSpeed's default: the
  // parameters' precision; "fp32" keeps them in fp32, as memwall train does).
  bool fp32_gradients = false;
  std::string optimizer = "Adam";
  // optimizer.params as the file gives them (memwall train uses them; a negative value: not given, so the
  // trainer's own default or command-line flag applies). betas is [beta1, beta2].
  struct OptimizerParams {
    double lr = -1;
    double beta1 = -1;
    double beta2 = -1;
    double eps = -1;
    double weight_decay = -1;
    bool adam_w_mode = true;  // weight decay decoupled from the gradient (AdamW), DeepSpeed's default
  } optimizer_params;
  // gradient_clipping: before each step the gradients are scaled so that their global L2 norm (over every
  // rank's shard, of the mean over the micro-batches) is at most this; 0 turns it off (DeepSpeed's default).
  double gradient_clipping = 0;
  // DeepSpeed's `scheduler` (memwall train): the learning rate per optimizer step (scheduled_lr, and
  // OneCycle's betas: scheduled_betas). WarmupLR rises from warmup_min_lr to warmup_max_lr over
  // warmup_num_steps (log or linear) and stays there; WarmupDecayLR then falls linearly back to warmup_min_lr
  // at total_num_steps; WarmupCosineLR, OneCycle and LRRangeTest as below. Another type is read (train warns
  // and keeps the optimizer's lr).
  struct LrSchedule {
    // "" (none), "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest", or another name
    std::string type;
    double warmup_min_lr = 0;
    double warmup_max_lr = 0.001;
    double warmup_num_steps = 1000;
    std::string warmup_type = "log";  // "log" or "linear"
    double total_num_steps = 0;       // WarmupDecayLR, WarmupCosineLR
    // WarmupCosineLR: fractions of the optimizer's lr, where the warm-up starts and the cosine ends.
    double warmup_min_ratio = 0;
    double cos_min_ratio = 0.0001;
    // OneCycle: the rate rises from cycle_min_lr to cycle_max_lr over cycle_first_step_size steps and falls
    // back over cycle_second_step_size (<= 0: the same), then is divided by 1 + decay_lr_rate x (steps after
    // the cycle / decay_step_size); with cycle_momentum, Adam's beta1 moves inversely between cycle_max_mom
    // and cycle_min_mom (then times 1 + decay_mom_rate x ...), and beta2 is 0.99, as DeepSpeed sets it.
    double cycle_min_lr = -1, cycle_max_lr = -1, decay_lr_rate = 0;
    double cycle_first_step_size = 2000, cycle_second_step_size = 0, decay_step_size = 0;
    bool cycle_momentum = true;
    double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
    // LRRangeTest: lr_range_test_min_lr x (1 + step_rate x (step + 1) / step_size), the quotient rounded down
    // with staircase.
    double lr_range_test_min_lr = 1e-3, lr_range_test_step_size = 2000, lr_range_test_step_rate = 1;
    bool lr_range_test_staircase = false;
    bool implemented() const {
      return type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR" ||
             type == "OneCycle" || type == "LRRangeTest";
    }
  } scheduler;
  ZeroConfig zero;
  AioConfig aio;
  ActivationCheckpointConfig activation_checkpointing;
  MemwallRunConfig memwall;

  // Bytes of one 16-bit (or fp32 when not mixed) parameter/gradient element.
  double param_bytes() const { return precision == Precision::kFp32 ? 4.0 : 2.0; }
  bool mixed_precision() const { return precision != Precision::kFp32; }
  // Micro-batches per optimizer step (gradient_accumulation_steps once resolved; at least 1).
  int accumulation_steps() const {
    return gradient_accumulation_steps.value > 1 ? static_cast<int>(gradient_accumulation_steps.value) : 1;
  }
  // Where an offloaded optimizer's fp32 gradients wait for its step: the optimizer's device, but the CPU
  // for an NVMe optimizer unless memwall.optimizer_gradients is "nvme" ("auto" counts as the CPU here;
  // plan_iteration and estimate_memory fall back to NVMe when the CPU memory does not hold them).
  OffloadDevice gradients_device() const {
    const OffloadDevice d = zero.offload_optimizer.device;
    return d == OffloadDevice::kNvme && memwall.optimizer_gradients != OptimizerGradients::kNvme
               ? OffloadDevice::kCpu
               : d;
  }
  // Bytes of one gradient element in the backward pass and its reduction.
  double grad_bytes() const { return fp32_gradients ? 4.0 : param_bytes(); }
};

// The learning rate of 0-based optimizer step `step` under `s` (DeepSpeed's value at last_batch_iteration =
// step), or `lr` where the schedule is not implemented or absent.
double scheduled_lr(const RunConfig::LrSchedule& s, long step, double lr);
// Adam's (beta1, beta2) at that step: OneCycle's cycled momentum where it cycles it, else the given ones.
std::pair<double, double> scheduled_betas(const RunConfig::LrSchedule& s, long step, double beta1,
                                          double beta2);

// Fills "auto" values from the model (Hugging Face's rules: reduce bucket hd², prefetch bucket 0.9·hd²,
// persistence threshold 10·hd; batch sizes from each other), the default data-parallel degree from the
// hardware, and checks cross-file consistency: more ranks than GPUs, a model-parallel degree that does not
// divide the heads or GPUs per node, NVMe offload on hardware without NVMe, an unknown sequence length.
Status resolve_run_config(RunConfig& run, const ModelSpec& model, const HardwareSpec& hw);

}  // namespace memwall
