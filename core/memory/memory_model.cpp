// The analytic memory model: one MemoryItem per (tier, category) with the rule behind it.
#include "memory/memory_model.h"

#include <algorithm>
#include <cmath>

#include "base/units.h"
#include "graph/model_graph.h"
#include "memory/paper_equations.h"

namespace memwall {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kCpu:
      return "cpu";
    case Tier::kNvme:
      return "nvme";
  }
  return "gpu";
}

Tier tier_of(OffloadDevice d) {
  return d == OffloadDevice::kCpu ? Tier::kCpu : (d == OffloadDevice::kNvme ? Tier::kNvme : Tier::kGpu);
}

const char* category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams16:
      return "params16";
    case MemCategory::kGrads16:
      return "grads16";
    case MemCategory::kMasterParams32:
      return "master_params32";
    case MemCategory::kMomentum32:
      return "momentum32";
    case MemCategory::kVariance32:
      return "variance32";
    case MemCategory::kGrads32:
      return "grads32";
    case MemCategory::kPersistentParams:
      return "persistent_params";
    case MemCategory::kActivationCheckpoints:
      return "activation_checkpoints";
    case MemCategory::kActivations:
      return "activations";
    case MemCategory::kActivationWorking:
      return "activation_working";
    case MemCategory::kLogits:
      return "logits";
    case MemCategory::kModelStateWorking:
      return "model_state_working";
    case MemCategory::kGatherPrefetch:
      return "gather_prefetch";
    case MemCategory::kReduceBuckets:
      return "reduce_buckets";
    case MemCategory::kPinnedSwapBuffers:
      return "pinned_swap_buffers";
    case MemCategory::kNvmeFilePadding:
      return "nvme_file_padding";
    case MemCategory::kRuntimeReserved:
      return "runtime_reserved";
  }
  return "unknown";
}

const char* category_label(MemCategory c) {
  switch (c) {
    case MemCategory::kParams16:
      return "16-bit params";
    case MemCategory::kGrads16:
      return "16-bit grads";
    case MemCategory::kMasterParams32:
      return "fp32 master params";
    case MemCategory::kMomentum32:
      return "fp32 momentum";
    case MemCategory::kVariance32:
      return "fp32 variance";
    case MemCategory::kGrads32:
      return "fp32 grads";
    case MemCategory::kPersistentParams:
      return "persistent small params";
    case MemCategory::kActivationCheckpoints:
      return "activation checkpoints";
    case MemCategory::kActivations:
      return "activations (no ckpt)";
    case MemCategory::kActivationWorking:
      return "activation working mem";
    case MemCategory::kLogits:
      return "logits + loss";
    case MemCategory::kModelStateWorking:
      return "model-state working mem";
    case MemCategory::kGatherPrefetch:
      return "gather/prefetch buffers";
    case MemCategory::kReduceBuckets:
      return "reduce buckets";
    case MemCategory::kPinnedSwapBuffers:
      return "pinned swap buffers";
    case MemCategory::kNvmeFilePadding:
      return "NVMe file padding";
    case MemCategory::kRuntimeReserved:
      return "runtime reserved";
  }
  return "unknown";
}

double MemoryEstimate::bytes(Tier t, MemCategory c) const {
  double sum = 0;
  for (const auto& item : items) {
    if (item.tier == t && item.category == c) sum += item.bytes_per_rank;
  }
  return sum;
}

std::string MemoryEstimate::shortfall() const {
  const TierUsage& u = tier(limiting_tier);
  std::string name = limiting_tier == Tier::kGpu ? "GPU" : (limiting_tier == Tier::kCpu ? "CPU" : "NVMe");
  std::string s = name + ": needs " + format_bytes(u.used_bytes) + " " + u.scope + ", " +
                  format_bytes(u.capacity_bytes) + " available";
  if (!u.fits())
    s += " (short by " + format_bytes(u.used_bytes - u.capacity_bytes) + ")";
  else
    s += " (" + format_bytes(u.headroom_bytes()) + " free)";
  return s;
}

namespace {

class Builder {
 public:
  explicit Builder(MemoryEstimate& e) : e_(e) {}
  void add(Tier t, MemCategory c, double bytes, std::string rule, bool pinned = false,
           bool per_node = false) {
    if (bytes <= 0) return;
    e_.items.push_back({t, c, bytes, per_node, pinned, std::move(rule)});
  }

 private:
  MemoryEstimate& e_;
};

}  // namespace

double aio_padding(double bytes, double block) {
  if (block <= 0 || bytes <= 0) return 0;
  return std::ceil(bytes / block) * block - bytes;
}

double optimizer_swap_padding(double elements, double sub, double states, double block) {
  const double groups = std::ceil(elements / sub);
  const double last = elements - (groups - 1) * sub;
  return states * ((groups - 1) * aio_padding(4 * sub, block) + aio_padding(4 * last, block));
}

double optimizer_swap_files(const RunConfig& run) {
  return (run.mixed_precision() ? 3 : 2) + (run.gradients_device() == OffloadDevice::kNvme ? 1 : 0);
}

double param_swap_pool_bytes(const RunConfig& run) {
  const auto& op = run.zero.offload_param;
  return op.buffer_count * op.buffer_size * run.param_bytes();
}

TwinFlowSplit twin_flow_split(const RunConfig& run, double elements) {
  const ZeroConfig& z = run.zero;
  TwinFlowSplit s;
  if (z.offload_optimizer.device == OffloadDevice::kNone || z.offload_optimizer.ratio >= 1 || elements <= 0)
    return s;
  const double sub = std::min(z.sub_group_size, elements);
  s.groups = static_cast<int>(std::ceil(elements / sub));
  s.gpu_groups = static_cast<int>((1 - z.offload_optimizer.ratio) * s.groups);  // DeepSpeed's int()
  s.gpu_elements = std::min(elements, s.gpu_groups * sub);
  return s;
}

std::string twin_flow_note(const RunConfig& run, double elements) {
  const auto& oo = run.zero.offload_optimizer;
  if (oo.device == OffloadDevice::kNone || oo.ratio >= 1 || elements <= 0) return "";
  const TwinFlowSplit t = twin_flow_split(run, elements);
  const std::string sub = format_count(std::min(run.zero.sub_group_size, elements));
  if (t.gpu_groups > 0) {
    return strprintf("Twin-Flow: the GPU steps %d of %d sub-groups of %s (offload_optimizer.ratio %g)",
                     t.gpu_groups, t.groups, sub.c_str(), oo.ratio);
  }
  return strprintf(
      "Twin-Flow: offload_optimizer.ratio %g puts none of the %d sub-group(s) on the GPU (DeepSpeed steps "
      "int((1 - ratio) x sub-groups) = int(%g x %d) = 0 there); a smaller sub_group_size (%s elements of %s "
      "per rank now) makes more sub-groups",
      oo.ratio, t.groups, 1 - oo.ratio, t.groups, sub.c_str(), format_count(elements).c_str());
}

double optimizer_swap_pool_bytes(const RunConfig& run, double sub) {
  const auto& oo = run.zero.offload_optimizer;
  const int stages = 1 + (oo.pipeline_read ? 1 : 0) + (oo.pipeline_write ? 1 : 0);
  return stages * oo.buffer_count * sub * 4.0 + sub * run.param_bytes();
}

namespace {
MemoryEstimate estimate_resolved(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw);
}  // namespace

MemoryEstimate estimate_memory(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw) {
  if (run.zero.offload_optimizer.device != OffloadDevice::kNvme ||
      run.memwall.optimizer_gradients != OptimizerGradients::kAuto)
    return estimate_resolved(model, run, hw);
  // "auto": the NVMe optimizer's gradients in CPU memory where the node holds them, else on NVMe.
  RunConfig in_cpu = run;
  in_cpu.memwall.optimizer_gradients = OptimizerGradients::kCpu;
  MemoryEstimate e = estimate_resolved(model, in_cpu, hw);
  if (e.tiers[static_cast<int>(Tier::kCpu)].fits()) return e;
  RunConfig on_nvme = run;
  on_nvme.memwall.optimizer_gradients = OptimizerGradients::kNvme;
  const double short_by = e.tiers[static_cast<int>(Tier::kCpu)].used_bytes - hw.cpu.memory_bytes;
  e = estimate_resolved(model, on_nvme, hw);
  e.notes.push_back("fp32 gradients on NVMe (memwall.optimizer_gradients auto): CPU memory is " +
                    format_bytes(short_by) + " short of keeping them");
  return e;
}

namespace {
MemoryEstimate estimate_resolved(const ModelSpec& model, const RunConfig& run, const HardwareSpec& hw) {
  MemoryEstimate e;
  Builder b(e);
  const ZeroConfig& z = run.zero;
  const int mp = run.memwall.model_parallel;
  const int dp = std::max(1, run.memwall.data_parallel);
  const int pp = run.memwall.pipeline_parallel;  // each stage holds 1/pp of the layers' states
  e.ranks = dp * mp * pp;
  e.ranks_per_node = std::min(hw.gpu.count, e.ranks);
  e.nodes_used = (e.ranks + hw.gpu.count - 1) / hw.gpu.count;

  const double pb = run.param_bytes();  // 2 with mixed precision, else 4
  const bool mixed = run.mixed_precision();
  const double P = model.total_params();
  e.params = P;
  const double P_mp = P / (mp * pp);  // the slice held by one model-parallel rank of one pipeline stage
  const std::string mp_s = mp > 1 ? strprintf(" / mp %d", mp) : "";
  const std::string st_s = mp_s + (pp > 1 ? strprintf(" / pp %d", pp) : "");
  const std::string dp_s = strprintf(" / dp %d", dp);
  const std::string P_s = format_count(P);

  // What the planner's graph gathers and keeps: small tensors up to the persistence threshold stay whole on
  // every GPU in stage 3; the largest op's parameters set the model-state working memory (Eq. 4).
  const int t = run.memwall.tiling_factor;
  const GraphParamStats stats =
      graph_param_stats(model, t, mp, z.param_persistence_threshold.value, z.model_persistence_threshold);
  const double persistent = z.stage == 3 ? stats.persistent_elements / pp : 0;
  const double partitioned_mp = P_mp - persistent;  // elements partitioned across dp in stage 3

  // What a rank holds whole in stages 0-2: with expert parallelism ep, 1/ep of the routed experts (and of
  // each expert it holds, a 1/(dp/ep) share of the states partitioned: still 1/dp of the model's).
  const int ep = run.memwall.expert_parallel;
  const double P_held = P_mp - (ep > 1 ? model.routed_expert_params() * (1 - 1.0 / ep) : 0);
  const std::string held_s = ep > 1 ? strprintf(" less %s routed experts' x (1 - 1/ep %d)",
                                                format_count(model.routed_expert_params()).c_str(), ep)
                                    : "";

  // Shard sizes per rank.
  const double opt_elems = z.stage >= 1 ? P_mp / dp : P_held;              // fp32 optimizer states
  const double grad_elems = z.stage >= 2 ? P_mp / dp : P_held;             // 16-bit grads
  const double param_elems = z.stage == 3 ? partitioned_mp / dp : P_held;  // 16-bit params (partitioned part)
  e.shard_elements = opt_elems;
  const std::string opt_s = z.stage >= 1 ? P_s + st_s + dp_s : P_s + st_s + held_s;
  const std::string grad_s = z.stage >= 2 ? P_s + st_s + dp_s : P_s + st_s + held_s;

  // ---- 16-bit parameters ----
  const Tier param_tier = z.stage == 3 ? tier_of(z.offload_param.device) : Tier::kGpu;
  if (param_tier == Tier::kNvme) {
    const double in_cpu = std::min(z.offload_param.max_in_cpu, param_elems);
    b.add(Tier::kCpu, MemCategory::kParams16, pb * in_cpu,
          strprintf("%.0f B x min(max_in_cpu %s, shard %s)", pb,
                    format_count(z.offload_param.max_in_cpu).c_str(), format_count(param_elems).c_str()),
          z.offload_param.pin_memory);
    b.add(Tier::kNvme, MemCategory::kParams16, pb * (param_elems - in_cpu),
          strprintf("%.0f B x (shard %s - kept in CPU)", pb, format_count(param_elems).c_str()));
    b.add(Tier::kCpu, MemCategory::kPinnedSwapBuffers, param_swap_pool_bytes(run),
          strprintf("param swap: buffer_count %d x buffer_size %s x %.0f B", z.offload_param.buffer_count,
                    format_count(z.offload_param.buffer_size).c_str(), pb),
          true);
    const double largest_shard = stats.largest_op_elements / dp;
    if (largest_shard > z.offload_param.buffer_size) {
      e.notes.push_back(
          strprintf("offload_param.buffer_size (%s elements) is smaller than the largest parameter "
                    "shard (%s elements): DeepSpeed asserts here; memwall streams it in chunks",
                    format_count(z.offload_param.buffer_size).c_str(), format_count(largest_shard).c_str()));
    }
    // Swap files rounded up to aio blocks: one extent per parameter tensor shard.
    // Swap files rounded up to aio blocks: one extent per partitioned tensor shard.
    double pad = 0;
    for (const auto& [elements, copies] : stats.partitioned_tensors) {
      pad += copies / pp * aio_padding(pb * elements / dp, run.aio.block_size);
    }
    b.add(
        Tier::kNvme, MemCategory::kNvmeFilePadding, pad,
        strprintf("param shards rounded up to aio.block_size %s", format_bytes(run.aio.block_size).c_str()));
  } else {
    b.add(param_tier, MemCategory::kParams16, pb * param_elems,
          strprintf("%.0f B x %s", pb,
                    (z.stage == 3 ? format_count(partitioned_mp) + dp_s : P_s + st_s + held_s).c_str()) +
              (z.stage == 3 && persistent > 0 ? " (partitioned part)" : ""),
          param_tier == Tier::kCpu && z.offload_param.pin_memory);
  }
  if (persistent > 0) {
    b.add(Tier::kGpu, MemCategory::kPersistentParams, 2 * pb * persistent,
          strprintf("%.0f B params + grads x %s elements in tensors of at most "
                    "stage3_param_persistence_threshold %s%s",
                    pb, format_count(persistent).c_str(),
                    format_count(z.param_persistence_threshold.value).c_str(),
                    z.model_persistence_threshold < kUnlimitedPersistence
                        ? strprintf(" (at most stage3_model_persistence_threshold %s in all)",
                                    format_count(z.model_persistence_threshold).c_str())
                              .c_str()
                        : ""));
  }

  // ---- gradients and optimizer states ----
  const Tier opt_tier = tier_of(z.offload_optimizer.device);
  const bool opt_offloaded = opt_tier != Tier::kGpu;
  if (!opt_offloaded) {
    b.add(Tier::kGpu, MemCategory::kGrads16, pb * grad_elems, strprintf("%.0f B x %s", pb, grad_s.c_str()));
  }
  // With optimizer offload the reduced 16-bit gradients stream through the reduce buckets straight into
  // the fp32 gradient buffer on the optimizer's tier; no persistent 16-bit copy remains on the GPU.
  // ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio < 1): the first int((1 - ratio) x sub-groups) of
  // this rank's sub-groups step on the GPU, their states and gradients there as without offload.
  const TwinFlowSplit twin = twin_flow_split(run, opt_elems);
  const double on_gpu = twin.gpu_elements;
  if (const std::string note = twin_flow_note(run, opt_elems); !note.empty()) e.notes.push_back(note);
  if (on_gpu > 0) {
    const std::string on_gpu_s = strprintf("%d of %d sub-groups (offload_optimizer.ratio %g)",
                                           twin.gpu_groups, twin.groups, z.offload_optimizer.ratio);
    const std::string rule = "4 B x " + on_gpu_s;
    b.add(Tier::kGpu, MemCategory::kGrads16, pb * on_gpu, strprintf("%.0f B x ", pb) + on_gpu_s);
    if (mixed) b.add(Tier::kGpu, MemCategory::kMasterParams32, 4 * on_gpu, rule);
    b.add(Tier::kGpu, MemCategory::kMomentum32, 4 * on_gpu, rule);
    b.add(Tier::kGpu, MemCategory::kVariance32, 4 * on_gpu, rule);
    if (mixed) b.add(Tier::kGpu, MemCategory::kGrads32, 4 * on_gpu, rule);
  }
  const double offloaded = opt_elems - on_gpu;  // elements whose states are on the optimizer's tier
  const std::string opt_rule = "4 B x " + opt_s + (on_gpu > 0 ? " less the GPU's sub-groups" : "");
  if (mixed) b.add(opt_tier, MemCategory::kMasterParams32, 4 * offloaded, opt_rule);
  b.add(opt_tier, MemCategory::kMomentum32, 4 * offloaded, opt_rule);
  b.add(opt_tier, MemCategory::kVariance32, 4 * offloaded, opt_rule);
  // An offloaded optimizer reads fp32 gradients (without mixed precision too: the GPU keeps none); an NVMe
  // optimizer's wait in CPU memory unless memwall.optimizer_gradients is "nvme".
  const Tier grad_tier = tier_of(run.gradients_device());
  e.optimizer_gradients = grad_tier;
  const bool grads_pinned = grad_tier == Tier::kCpu && z.offload_optimizer.pin_memory;
  const std::string grad_rule =
      opt_rule + (grad_tier != opt_tier ? " (memwall.optimizer_gradients: kept in CPU memory)" : "");
  if (mixed || opt_offloaded) b.add(grad_tier, MemCategory::kGrads32, 4 * offloaded, grad_rule, grads_pinned);
  if (run.memwall.delayed_parameter_update) {  // the CPU step reads the last step's while this one's arrive
    b.add(grad_tier, MemCategory::kGrads32, 4 * opt_elems, opt_rule + " (the previous step's, DPU)",
          z.offload_optimizer.pin_memory);
  }
  if (opt_tier == Tier::kNvme) {
    const double sub = std::min(z.sub_group_size, opt_elems);
    const int stages =
        1 + (z.offload_optimizer.pipeline_read ? 1 : 0) + (z.offload_optimizer.pipeline_write ? 1 : 0);
    b.add(Tier::kCpu, MemCategory::kPinnedSwapBuffers, optimizer_swap_pool_bytes(run, sub),
          strprintf("optimizer swap: %d stage(s) x buffer_count %d x sub-group %s x 4 B + 16-bit staging",
                    stages, z.offload_optimizer.buffer_count, format_count(sub).c_str()),
          true);
    if (z.offload_optimizer.buffer_count < 4) {
      e.notes.push_back(
          strprintf("offload_optimizer.buffer_count %d is below the 4 fp32 states Adam swaps per "
                    "sub-group; the step serialises on swap buffers",
                    z.offload_optimizer.buffer_count));
    }
    const double groups = std::ceil(opt_elems / sub);
    const double states = optimizer_swap_files(run);
    const double pad = optimizer_swap_padding(opt_elems, sub, states, run.aio.block_size);
    b.add(Tier::kNvme, MemCategory::kNvmeFilePadding, pad,
          strprintf("%.0f optimizer sub-groups x %.0f states rounded up to aio.block_size", groups, states));
  }

  // ---- GPU working memory for model states ----
  if (z.stage == 3) {
    b.add(Tier::kGpu, MemCategory::kModelStateWorking, 2 * pb * stats.largest_op_elements,
          strprintf("Eq.4: %.0f B params + grads x largest op %s", pb,
                    format_count(stats.largest_op_elements).c_str()) +
              (t > 1 ? strprintf(" (tiling %d)", t) : ""));
    if (run.memwall.prefetch) {
      const double prefetch = std::min(z.prefetch_bucket_size.value, z.max_live_parameters);
      b.add(Tier::kGpu, MemCategory::kGatherPrefetch, pb * std::min(prefetch, P_mp),
            strprintf("%.0f B x min(stage3_prefetch_bucket_size %s, max_live_parameters %s)", pb,
                      format_count(z.prefetch_bucket_size.value).c_str(),
                      format_count(z.max_live_parameters).c_str()));
    }
  }
  if (z.stage >= 2) {
    const int copies = z.overlap_comm ? 2 : 1;
    b.add(Tier::kGpu, MemCategory::kReduceBuckets, copies * pb * std::min(z.reduce_bucket_size.value, P_mp),
          strprintf("%d x reduce_bucket_size %s x %.0f B", copies,
                    format_count(z.reduce_bucket_size.value).c_str(), pb));
  }

  // ---- activations ----
  const double bsz = run.micro_batch_per_gpu.value;
  const double seq = run.memwall.sequence_length;
  const double hd = model.hidden;
  const double nl = model.layers;
  const double act_scale = pb / 2.0;  // Eq. (3)/(5) count 16-bit activations
  const auto& ac = run.activation_checkpointing;
  // Eq. (5)'s 2 heads x seq per token are the unfused attention's probabilities; fused (flash) attention
  // keeps an fp32 log-sum-exp per head instead.
  const bool flash = run.memwall.attention == AttentionKernel::kFlash;
  // Eq. (5)'s 16 hd bytes per token and block are the 16-bit tensors a GPT block keeps for its backward:
  // the QKV projection's output (3 hd), the attention's output (hd) and the MLP's inner activation (4 hd).
  // Other shapes keep the same tensors (as the planner's graph does): Q (q: heads x head_dim, hd unless
  // head_dim differs), K and V (kv each: kv_heads x head_dim with grouped-query attention), the attention's
  // output (q) and the MLP's ffn inner features, twice for a gated (SwiGLU) MLP's gate and up:
  // 2 B x (2 q + 2 kv + ffn (x 2)), 16 hd for GPT. A mixture of experts keeps each token's inner features
  // in each of the experts_per_token experts it is sent to (ffn: an expert's), and the router's logits.
  // DeepSeek's latent attention keeps Q, K (heads x head_dim each), V and the output (heads x v_head_dim
  // each) and its latents' (q_lora_rank + kv_lora_rank + rope_head_size) in place of 2 q + 2 kv.
  const double kv =
      model.kv_heads > 0 && model.heads > 0 ? static_cast<double>(model.kv_heads) * model.head_dim() : hd;
  const double qw = model.heads > 0 ? model.q_width() : hd;
  const double latents = model.mla() ? model.q_lora_rank + model.kv_lora_rank + model.rope_head_size : 0.0;
  // (Qwen3-Next's output gate: q_proj's gate half kept too, and the gated output o_proj reads.)
  const double attn_tensors = model.mla() ? qw + kv + model.v_width() + model.o_width() + latents
                                          : 2 * qw + 2 * kv + (model.attn_output_gate ? 2 * qw : 0);
  // Qwen3-Next's linear-attention layers keep in_proj's outputs (2 keys + 2 values + 2 value heads), the
  // convolved queries, keys and values, the delta rule's output and the gated norm's: no scores. A block
  // counts as the larger of its two attention kinds (per token, scores included).
  const double la_tensors =
      model.full_attn_every > 1
          ? 4 * model.la_key_width() + 5 * model.la_value_width() + 2.0 * model.la_value_heads
          : 0.0;
  const double scores_per_token =
      flash ? 4.0 * model.heads : act_scale * 2.0 * model.heads * seq;  // (bytes, scaled)
  const bool linear_larger =
      la_tensors > 0 && (model.softmax_attention_layers() == 0 ||
                         act_scale * 2 * la_tensors > act_scale * 2 * attn_tensors + scores_per_token);
  const double attn_bytes = linear_larger ? la_tensors : attn_tensors;
  const double ffn = model.mlp_ffn() > 0 ? model.mlp_ffn() : 4 * hd;
  const double routed = model.moe() ? model.experts_per_token : 1;
  // Qwen2-MoE's shared expert: its gate and up for every token, and its gate's one value.
  const double shared =
      model.shared_expert_ffn > 0 ? 2.0 * model.shared_expert_ffn + (model.shared_expert_gate ? 1 : 0) : 0;
  const double expert_block = 2.0 * (attn_bytes + ffn * (model.gated_mlp ? 2 : 1) * routed +
                                     (model.moe() ? model.experts : 0) + shared);
  // (GLM-4.5's dense first blocks: every block counted as the larger of the two kinds, the term printed its.)
  const double dense_block = 2.0 * (attn_bytes + model.ffn_hidden * (model.gated_mlp ? 2 : 1));
  const bool dense_larger = model.moe() && model.moe_layers() < model.layers && dense_block > expert_block;
  const double block_bytes = dense_larger ? dense_block : expert_block;
  auto awm = [&](double blocks) {
    // Eq. (5) with the block's bytes: its tensors, then the probabilities (2 heads x seq) or flash
    // attention's fp32 log-sum-exp per head.
    const double per_token = act_scale * block_bytes + (linear_larger ? 0.0 : scores_per_token);
    return bsz * seq * blocks * per_token / mp;
  };
  const std::string attn_term = linear_larger ? std::string("no scores (linear attention)")
                                : flash       ? strprintf("4 B x heads %d (flash attention)", model.heads)
                                              : strprintf("2 heads %d x seq", model.heads);
  // The attention's tensors as counted above.
  const std::string attn_part =
      linear_larger ? strprintf("4 keys %.0f + 5 values %.0f + 2 value heads %d", model.la_key_width(),
                                model.la_value_width(), model.la_value_heads)
      : model.mla()
          ? strprintf("q %.0f + k %.0f + v %.0f + out %.0f + latents %.0f", qw, kv, model.v_width(),
                      static_cast<double>(model.o_width()), latents)
          : (qw == hd ? std::string("2 hd") : strprintf("2 q %.0f", qw)) + strprintf(" + 2 kv %.0f", kv) +
                (model.attn_output_gate ? strprintf(" + 2 gate %.0f", qw) : std::string());
  const std::string moe_term =
      model.moe() && !dense_larger
          ? strprintf(" x %d experts per token + router %d", model.experts_per_token, model.experts) +
                (shared > 0 ? strprintf(" + shared expert %.0f", shared) : std::string())
          : std::string();
  const std::string block_term =
      block_bytes == 16 * hd
          ? std::string("16 hd + ")
          : strprintf("2 x (%s + %sffn %.0f%s) + ", attn_part.c_str(), model.gated_mlp ? "2 " : "",
                      dense_larger ? model.ffn_hidden : ffn, moe_term.c_str());
  if (ac.enabled) {
    const double ci = ac.interval;
    const double n_ckpt = std::ceil(nl / ci);
    const double div = (ac.partition_activations && mp > 1) ? mp : 1;
    b.add(ac.cpu_checkpointing ? Tier::kCpu : Tier::kGpu, MemCategory::kActivationCheckpoints,
          act_scale * paper::eq3_checkpoint_bytes(bsz, seq, hd, n_ckpt, 1) / div,
          strprintf("Eq.3: 2 B x bsz %.0f x seq %.0f x hd %.0f x ceil(nl %.0f / ci %.0f)", bsz, seq, hd, nl,
                    ci) +
              (div > 1 ? strprintf(" / mp %d", mp) : ""));
    b.add(Tier::kGpu, MemCategory::kActivationWorking, awm(ci),
          strprintf("Eq.5: bsz %.0f x seq %.0f x ci %.0f x (", bsz, seq, ci) + block_term + attn_term + ")" +
              mp_s);
  } else {
    b.add(Tier::kGpu, MemCategory::kActivations, awm(nl),
          strprintf("bsz %.0f x seq %.0f x nl %.0f x (", bsz, seq, nl) + block_term + attn_term + ")" + mp_s);
  }
  if (model.vocab > 0) {
    // (Multi-token-prediction modules keep their own logits too; one loss gradient at a time.)
    const double heads = 1.0 + model.mtp_modules;
    b.add(Tier::kGpu, MemCategory::kLogits, bsz * seq * model.vocab * (heads * pb + 4.0) / mp,
          strprintf("bsz %.0f x seq %.0f x vocab %d x (%s%.0f B logits + 4 B fp32 loss grad)", bsz, seq,
                    model.vocab, model.mtp_modules > 0 ? strprintf("%.0f heads x ", heads).c_str() : "", pb) +
              mp_s);
  }

  // ---- reserved ----
  b.add(Tier::kGpu, MemCategory::kRuntimeReserved, hw.gpu.reserved_bytes,
        "gpu.reserved_bytes (hardware file)");
  b.add(Tier::kCpu, MemCategory::kRuntimeReserved, hw.cpu.reserved_bytes,
        "cpu.reserved_bytes per node (hardware file)", false, true);

  // ---- totals per tier ----
  for (int i = 0; i < kTierCount; ++i) e.tiers[i].tier = static_cast<Tier>(i);
  TierUsage& gpu = e.tiers[0];
  TierUsage& cpu = e.tiers[1];
  TierUsage& nvme = e.tiers[2];
  gpu.scope = "per GPU";
  cpu.scope = "per node";
  nvme.scope = "per node";
  gpu.capacity_bytes = hw.gpu.memory_bytes;
  cpu.capacity_bytes = hw.cpu.memory_bytes;
  nvme.capacity_bytes = hw.nvme.capacity_bytes();
  for (const auto& item : e.items) {
    const double per_node = item.per_node ? item.bytes_per_rank : item.bytes_per_rank * e.ranks_per_node;
    switch (item.tier) {
      case Tier::kGpu:
        gpu.used_bytes += item.bytes_per_rank;
        break;
      case Tier::kCpu:
        cpu.used_bytes += per_node;
        break;
      case Tier::kNvme:
        nvme.used_bytes += per_node;
        break;
    }
    if (item.pinned) e.pinned_bytes_per_node += per_node;
  }
  e.fits = gpu.fits() && cpu.fits() && nvme.fits();
  e.limiting_tier = Tier::kGpu;
  double worst = -1;
  for (const TierUsage& u : e.tiers) {
    if (u.used_bytes > 0 && u.utilization() > worst) {
      worst = u.utilization();
      e.limiting_tier = u.tier;
    }
  }
  return e;
}
}  // namespace

}  // namespace memwall
