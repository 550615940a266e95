// DeepSpeed's own memory estimator, reproduced from its formulas (estimate_zero3_model_states_mem_needs,
// estimate_zero2_model_states_mem_needs; ../shared/reference/deepspeed-design.md section 5), so that
// `memwall predict` can show what a DeepSpeed user was told beside what memwall counts. It covers model
// states only, with a 1.5x buffer factor on the CPU: no activations, buckets, prefetch, pinned swap buffers,
// NVMe or runtime memory. Pure functions.
#pragma once

#include <string>

#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

struct DeepSpeedEstimate {
  bool available = false;  // false: no DeepSpeed estimator covers the run (see `why`)
  std::string why;         // when not available
  std::string function;    // "estimate_zero3_model_states_mem_needs"
  bool stage3 = false;     // the stage-3 estimator (else stage 2's, for stages 1 and 2)
  double params = 0;
  double largest_layer_params = 0;  // stage 3: the module with the most parameters of its own
  int gpus_per_node = 1;
  int nodes = 1;
  bool cpu_offload = false;  // the optimizer offloaded (NVMe counted as CPU: the estimator has no NVMe)
  bool cpu_offload_params = false;  // stage 3: the parameters offloaded (likewise)
  bool zero_init = true;            // the model built under zero.Init (the estimator's default)
  double buffer_factor = 1.5;       // additional_buffer_factor (its default)
  double per_gpu_bytes = 0;
  double per_cpu_bytes = 0;  // per node
  std::string gpu_rule, cpu_rule;
};

// The stage-3 estimator for `params` parameters whose largest module has `largest_layer_params`.
DeepSpeedEstimate deepspeed_zero3_estimate(double params, double largest_layer_params, int gpus_per_node,
                                           int nodes, bool cpu_offload, bool cpu_offload_params,
                                           bool zero_init = true, double buffer_factor = 1.5);
// The stage-1/2 estimator (DeepSpeed has no stage-1 one; stage 2's is what its docs point to).
DeepSpeedEstimate deepspeed_zero2_estimate(double params, int gpus_per_node, int nodes, bool cpu_offload,
                                           double buffer_factor = 1.5);

// The module with the most parameters of its own (PyTorch's parameters(recurse=False)): a weight and its bias
// ("block.mlp.fc1.weight" and ".bias"), an embedding. memwall's tensors follow GPT-2's modules (c_attn
// fused); a Llama's q, k and v projections of equal width are one fused tensor here, three modules in
// PyTorch, which matters only where 3 x hidden^2 outgrows both the embedding and the MLP's matrices.
double largest_module_params(const ModelSpec& model);

// The estimator a DeepSpeed user of this resolved run would call, with the run's offload settings, the
// ranks per node and nodes it uses. Not available for stage 0 or with tensor/pipeline parallelism.
DeepSpeedEstimate deepspeed_estimate(const ModelSpec& model, const RunConfig& run, int gpus_per_node,
                                     int nodes);

}  // namespace memwall
