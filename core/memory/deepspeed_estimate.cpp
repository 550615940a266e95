// DeepSpeed's memory estimator formulas (stage3.py, stage_1_and_2.py), term by term.
#include "memory/deepspeed_estimate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/units.h"

namespace memwall {

namespace {
// An estimate with the arguments of the call that gives it.
DeepSpeedEstimate called(const char* function, double params, int gpus_per_node, int nodes, bool cpu_offload,
                         bool zero_init, double buffer_factor) {
  DeepSpeedEstimate d;
  d.available = true;
  d.function = function;
  d.params = params;
  d.gpus_per_node = gpus_per_node;
  d.nodes = nodes;
  d.cpu_offload = cpu_offload;
  d.zero_init = zero_init;
  d.buffer_factor = buffer_factor;
  return d;
}
}  // namespace

DeepSpeedEstimate deepspeed_zero3_estimate(double params, double largest_layer_params, int gpus_per_node,
                                           int nodes, bool cpu_offload, bool cpu_offload_params,
                                           bool zero_init, double buffer_factor) {
  DeepSpeedEstimate d = called("estimate_zero3_model_states_mem_needs", params, gpus_per_node, nodes,
                               cpu_offload, zero_init, buffer_factor);
  d.stage3 = true;
  d.largest_layer_params = largest_layer_params;
  d.cpu_offload_params = cpu_offload && cpu_offload_params;  // the estimator reads it only with cpu_offload
  const double gpus = static_cast<double>(gpus_per_node) * nodes;
  const double gf = 1.0 / nodes;                    // gpus_factor
  const double largest = 4 * largest_layer_params;  // fp16 param + grad of the largest layer, gathered
  const std::string ll = "4 B x " + format_count(largest_layer_params) + " largest layer";
  const std::string p = format_count(params);
  const auto cpu_states = [&](double per_param) {
    const double b = zero_init ? per_param * gf : std::max(4.0 * gpus_per_node, per_param * gf);
    d.per_cpu_bytes = params * b * buffer_factor;
    d.cpu_rule = (zero_init ? strprintf("%g B", per_param * gf)
                            : strprintf("max(4 B x %d, %g B)", gpus_per_node, per_param * gf)) +
                 " x " + p + strprintf(" x %g", buffer_factor);
  };
  if (cpu_offload && cpu_offload_params) {
    d.per_gpu_bytes = largest;
    d.gpu_rule = ll;
    cpu_states(18);
  } else if (cpu_offload) {
    d.per_gpu_bytes = largest + std::floor(2 * params / gpus);
    d.gpu_rule = ll + " + 2 B x " + p + " / " + strprintf("%.0f", gpus);
    cpu_states(16);
  } else {
    d.per_gpu_bytes = largest + std::floor(18 * params / gpus);
    d.gpu_rule = ll + " + 18 B x " + p + " / " + strprintf("%.0f", gpus);
    const double n = zero_init ? largest_layer_params : params;
    d.per_cpu_bytes = n * 4 * gpus_per_node * buffer_factor;
    d.cpu_rule = strprintf("4 B x %s x %d x %g", format_count(n).c_str(), gpus_per_node, buffer_factor) +
                 (zero_init ? " largest layer" : "");
  }
  return d;
}

DeepSpeedEstimate deepspeed_zero2_estimate(double params, int gpus_per_node, int nodes, bool cpu_offload,
                                           double buffer_factor) {
  // The stage-2 estimator has no zero.Init case.
  DeepSpeedEstimate d = called("estimate_zero2_model_states_mem_needs", params, gpus_per_node, nodes,
                               cpu_offload, false, buffer_factor);
  const double gpus = static_cast<double>(gpus_per_node) * nodes;
  const std::string p = format_count(params);
  if (cpu_offload) {
    d.per_gpu_bytes = 2 * params;
    d.gpu_rule = "2 B x " + p;
    // The code takes the total GPU count here, where its docs say the GPUs per node.
    d.per_cpu_bytes = params * std::max(4 * gpus, 16.0) * buffer_factor;
    d.cpu_rule = strprintf("max(4 B x %.0f, 16 B) x ", gpus) + p + strprintf(" x %g", buffer_factor);
  } else {
    // Current DeepSpeed's 2 B + 18 B / GPUs (16-bit params whole; 16-bit and fp32 gradients, fp32 master and
    // Adam's two moments partitioned); older releases and the docs' worked example say 4 B + 16 B / GPUs.
    d.per_gpu_bytes = 2 * params + std::floor(18 * params / gpus);
    d.gpu_rule = "2 B x " + p + " + 18 B x " + p + strprintf(" / %.0f", gpus);
    d.per_cpu_bytes = params * 4 * gpus_per_node * buffer_factor;
    d.cpu_rule = strprintf("4 B x %s x %d x %g", p.c_str(), gpus_per_node, buffer_factor);
  }
  return d;
}

double largest_module_params(const ModelSpec& model) {
  std::map<std::string, double> modules;
  for (const ParamTensorGroup& g : model.param_tensors()) {
    std::string module = g.name;  // "embed.tokens" is a module's one tensor, "block.mlp.fc1.weight" a weight
    for (const char* suffix : {".weight", ".bias"}) {
      if (module.ends_with(suffix)) module.resize(module.size() - std::string(suffix).size());
    }
    modules[module] += g.elements();
  }
  double largest = 0;
  for (const auto& [name, n] : modules) largest = std::max(largest, n);
  return largest;
}

DeepSpeedEstimate deepspeed_estimate(const ModelSpec& model, const RunConfig& run, int gpus_per_node,
                                     int nodes) {
  DeepSpeedEstimate d;
  if (run.zero.stage == 0) {
    d.why = "DeepSpeed has no estimator for ZeRO stage 0";
    return d;
  }
  if (run.memwall.model_parallel > 1 || run.memwall.pipeline_parallel > 1) {
    d.why = "DeepSpeed's estimators assume data parallelism only (no tensor or pipeline parallelism)";
    return d;
  }
  const bool opt_off = run.zero.offload_optimizer.device != OffloadDevice::kNone;
  const bool param_off = run.zero.offload_param.device != OffloadDevice::kNone;
  const double params = model.total_params();
  if (run.zero.stage == 3) {
    return deepspeed_zero3_estimate(params, largest_module_params(model), gpus_per_node, nodes, opt_off,
                                    param_off);
  }
  return deepspeed_zero2_estimate(params, gpus_per_node, nodes, opt_off);
}

}  // namespace memwall
