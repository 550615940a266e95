// Export of a GPT model's fp32 weights in Hugging Face's format: `model.safetensors` (tensor names and shapes
// of transformers' GPT2Model, linear weights transposed to Conv1D's [in, out]) and a GPT-2 `config.json`,
// so GPT2LMHeadModel.from_pretrained(dir) loads it (the LM head is tied to wte). Both files are replaced
// atomically.
#pragma once

#include <string>

#include "base/status.h"
#include "engine/model/gpt.h"

namespace memwall::model {

// `params`: gpt_num_params(c) floats in gpt_param_layout order. `dir` must exist.
Status export_hf(const GptConfig& c, const float* params, const std::string& dir);

}  // namespace memwall::model
