// RunConfig names and resolution of "auto" values and cross-file consistency checks.
#include "spec/run_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/units.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"

namespace memwall {

const char* offload_device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "none";
}

namespace {
// OneCycle at last_batch_iteration `it`: where in the cycle (0 at the bottom, 1 at the top), or -1 after it
// (the decay phase, `after` steps into it).
double one_cycle_height(const RunConfig::LrSchedule& s, double it, double& after) {
  const double first = s.cycle_first_step_size,
               total = first + (s.cycle_second_step_size > 0 ? s.cycle_second_step_size : first);
  if (it >= total) {
    after = it - total + 1;
    return -1;
  }
  const double b = it + 1, ratio = first / total;
  const double x = 1 + b / total - std::floor(1 + b / total);
  return x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
}
}  // namespace

std::pair<double, double> scheduled_betas(const RunConfig::LrSchedule& s, long step, double beta1,
                                          double beta2) {
  if (s.type != "OneCycle" || !s.cycle_momentum) return {beta1, beta2};
  double after = 0;
  const double h = one_cycle_height(s, static_cast<double>(std::max(0L, step)), after);
  if (h >= 0) return {s.cycle_max_mom - (s.cycle_max_mom - s.cycle_min_mom) * h, 0.99};
  const bool decays = s.decay_step_size > 0 && s.decay_mom_rate != 0;
  return {decays ? s.cycle_max_mom * (1 + s.decay_mom_rate * after / s.decay_step_size) : s.cycle_max_mom,
          0.99};
}

double scheduled_lr(const RunConfig::LrSchedule& s, long step, double lr) {
  if (!s.implemented()) return lr;
  if (s.type == "LRRangeTest") {
    const double steps = static_cast<double>(std::max(0L, step) + 1) / s.lr_range_test_step_size;
    return s.lr_range_test_min_lr *
           (1 + s.lr_range_test_step_rate * (s.lr_range_test_staircase ? std::floor(steps) : steps));
  }
  if (s.type == "OneCycle") {
    double after = 0;
    const double h = one_cycle_height(s, static_cast<double>(std::max(0L, step)), after);
    if (h >= 0) return s.cycle_min_lr + (s.cycle_max_lr - s.cycle_min_lr) * h;
    const bool decays = s.decay_step_size > 0 && s.decay_lr_rate != 0;
    return decays ? s.cycle_min_lr / (1 + s.decay_lr_rate * after / s.decay_step_size) : s.cycle_min_lr;
  }
  const double n = std::max(2.0, s.warmup_num_steps);  // DeepSpeed warms up over at least 2 steps
  const double it = static_cast<double>(std::max(0L, step));
  double gamma = 1;
  if (it < n) {
    gamma = s.warmup_type == "linear" ? it / n : std::log(it + 1) / std::log(n);
  }
  if (s.type == "WarmupCosineLR") {  // ratios of the optimizer's rate; a half cosine after the warm-up
    if (it < n) return lr * (s.warmup_min_ratio + (1 - s.warmup_min_ratio) * gamma);
    const double done = (it - n + 1) / std::max(1.0, s.total_num_steps - n);
    const double cosine = (1 + std::cos(std::acos(-1.0) * std::min(1.0, done))) / 2;
    return lr * (s.cos_min_ratio + (1 - s.cos_min_ratio) * cosine);
  }
  if (it >= n && s.type == "WarmupDecayLR") {
    gamma = std::max(0.0, (s.total_num_steps - it) / std::max(1.0, s.total_num_steps - n));
  }
  return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * gamma;
}

const char* attention_kernel_name(AttentionKernel a) {
  return a == AttentionKernel::kFlash ? "flash" : "unfused";
}

const char* optimizer_gradients_name(OptimizerGradients g) {
  switch (g) {
    case OptimizerGradients::kAuto:
      return "auto";
    case OptimizerGradients::kCpu:
      return "cpu";
    case OptimizerGradients::kNvme:
      return "nvme";
  }
  return "auto";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "fp32";
}

Status resolve_run_config(RunConfig& run, const ModelSpec& model, const HardwareSpec& hw) {
  const std::string where = "run '" + run.name + "'";
  MemwallRunConfig& mw = run.memwall;
  if (mw.sequence_length == 0) mw.sequence_length = model.pretraining_positions();
  if (mw.sequence_length <= 0) {
    return Status::invalid_argument(where + ": key 'memwall.sequence_length' is not set and model '" +
                                    model.name + "' has no max_positions; allowed: an integer >= 1");
  }
  const int mp = mw.model_parallel;
  if (model.heads % mp != 0 || hw.gpu.count % mp != 0) {
    return Status::invalid_argument(where + ": key 'memwall.model_parallel': " + std::to_string(mp) +
                                    " is not allowed; allowed: a divisor of " + "both the model's heads (" +
                                    std::to_string(model.heads) + ") and the GPUs per node (" +
                                    std::to_string(hw.gpu.count) + ")");
  }
  const int pp = mw.pipeline_parallel;
  const int total = hw.total_gpus();
  if (pp > model.layers || static_cast<long long>(pp) * mp > total) {
    return Status::invalid_argument(where + ": key 'memwall.pipeline_parallel': " + std::to_string(pp) +
                                    " is not allowed; allowed: 1.." +
                                    std::to_string(std::min(model.layers, total / mp)) +
                                    " (at most the model's layers and the GPUs / model_parallel)");
  }
  if (mw.data_parallel == 0) mw.data_parallel = total / (mp * pp);
  const long long ranks = static_cast<long long>(mw.data_parallel) * mp * pp;
  if (ranks > total) {
    return Status::invalid_argument(
        where + ": key 'memwall.data_parallel': " + std::to_string(mw.data_parallel) + " x model_parallel " +
        std::to_string(mp) + (pp > 1 ? " x pipeline_parallel " + std::to_string(pp) : std::string()) + " = " +
        std::to_string(ranks) + " ranks, more than the " + std::to_string(total) + " GPUs of '" + hw.name +
        "'; allowed: data_parallel x model_parallel" + (pp > 1 ? " x pipeline_parallel" : "") +
        " <= " + std::to_string(total));
  }
  if (const int ep = mw.expert_parallel; ep > 1) {
    const std::string key = where + ": key 'memwall.expert_parallel': " + std::to_string(ep);
    if (!model.moe()) {
      return Status::invalid_argument(key + " is not allowed for model '" + model.name +
                                      "', which has no experts; allowed: 1");
    }
    const int gpus = hw.gpu.count;
    if (model.experts % ep != 0 || mw.data_parallel % ep != 0 || (gpus % ep != 0 && ep % gpus != 0)) {
      return Status::invalid_argument(key + " is not allowed; allowed: a divisor of the experts per layer (" +
                                      std::to_string(model.experts) + ") and of data_parallel (" +
                                      std::to_string(mw.data_parallel) +
                                      ") that divides the GPUs per node (" + std::to_string(gpus) +
                                      ") or is a multiple of them (whole nodes)");
    }
    if (mp > 1 || pp > 1) {
      return Status::invalid_argument(
          key + " with model_parallel " + std::to_string(mp) + " and pipeline_parallel " +
          std::to_string(pp) + " is not supported; allowed: expert parallelism with data parallelism only");
    }
  }
  if (mw.expert_load != 1 && (mw.expert_parallel <= 1 || mw.expert_load > mw.expert_parallel)) {
    return Status::invalid_argument(
        where + ": key 'memwall.expert_load': " + strprintf("%g", mw.expert_load) +
        (mw.expert_parallel <= 1 ? " has no effect without expert parallelism (every rank runs every expert "
                                   "on its own tokens); allowed: 1, or set memwall.expert_parallel"
                                 : " is more than a rank can get (all of its group's routed tokens: " +
                                       std::to_string(mw.expert_parallel) + "x); allowed: 1 to " +
                                       std::to_string(mw.expert_parallel)));
  }
  const ZeroConfig& z = run.zero;
  if (!hw.has_nvme() && (z.offload_param.device == OffloadDevice::kNvme ||
                         z.offload_optimizer.device == OffloadDevice::kNvme)) {
    return Status::invalid_argument(
        where + ": NVMe offload is configured but hardware '" + hw.name +
        "' has no NVMe (nvme.drives is 0); allowed: offload device \"cpu\" or \"none\"");
  }
  if (run.activation_checkpointing.interval > model.layers) {
    return Status::invalid_argument(where + ": key 'activation_checkpointing.interval': " +
                                    std::to_string(run.activation_checkpointing.interval) +
                                    " is more than the model's " + std::to_string(model.layers) +
                                    " layers; allowed: 1.." + std::to_string(model.layers));
  }

  // "auto" bucket sizes, as the Hugging Face Trainer fills them from the hidden size.
  const double hd = model.hidden;
  ZeroConfig& zz = run.zero;
  if (zz.reduce_bucket_size.is_auto) zz.reduce_bucket_size = {false, hd * hd};
  if (zz.prefetch_bucket_size.is_auto) zz.prefetch_bucket_size = {false, std::floor(0.9 * hd * hd)};
  if (zz.param_persistence_threshold.is_auto) zz.param_persistence_threshold = {false, 10 * hd};

  // Batch sizes: train = micro x accumulation x data-parallel degree; any one may be derived.
  const double dp = mw.data_parallel;
  AutoCount& tbs = run.train_batch_size;
  AutoCount& mbs = run.micro_batch_per_gpu;
  AutoCount& gas = run.gradient_accumulation_steps;
  if (mbs.is_auto && !tbs.is_auto) {
    const double g = gas.is_auto ? 1 : gas.value;
    mbs = {false, std::max(1.0, std::floor(tbs.value / (g * dp)))};
  }
  if (mbs.is_auto) mbs = {false, 1};
  if (gas.is_auto) gas = {false, tbs.is_auto ? 1 : std::max(1.0, std::floor(tbs.value / (mbs.value * dp)))};
  if (tbs.is_auto) {
    tbs = {false, mbs.value * gas.value * dp};
  } else if (tbs.value != mbs.value * gas.value * dp) {
    return Status::invalid_argument(
        where + ": key 'train_batch_size': " + strprintf("%.0f", tbs.value) +
        " is not train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel degree (" +
        strprintf("%.0f x %.0f x %.0f = %.0f", mbs.value, gas.value, dp, mbs.value * gas.value * dp) +
        "); allowed: that product, or \"auto\"");
  }
  // Micro-batches and accumulation steps are counted in ints downstream.
  constexpr double kMaxCount = 1 << 24;
  for (const auto& [key, count] : {std::pair{"train_micro_batch_size_per_gpu", mbs.value},
                                   std::pair{"gradient_accumulation_steps", gas.value}}) {
    if (count > kMaxCount) {
      return Status::invalid_argument(where + ": key '" + key + "': " + strprintf("%.0f", count) +
                                      " (as given or derived from train_batch_size) is not allowed; allowed: "
                                      "1..16777216");
    }
  }
  return Status::ok();
}

}  // namespace memwall
