// Export of a GPT model's fp32 weights in Hugging Face's format: `model.safetensors` (tensor names and shapes
// of transformers' GPT2Model, linear weights transposed to Conv1D's [in, out]; F32, or rounded to BF16 or
// F16) and a GPT-2 `config.json` (its torch_dtype saying which), so GPT2LMHeadModel.from_pretrained(dir)
// loads it (the LM head is tied to wte). The Llama shape: transformers' LlamaForCausalLM names ([out, in]
// weights, as memwall keeps them) and a Llama config.json; OPT: OPTForCausalLM's names (model.decoder.*,
// [out, in], separate q_proj, k_proj and v_proj) and an OPT config.json. Both files are replaced atomically.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/model/gpt.h"

namespace memwall::model {

// The tensors' element type in the file: F32, or BF16 / F16 (round to nearest even; F16 saturates to
// +-65504 as the cast kernels do).
enum class ExportDtype { kF32, kBF16, kF16 };

// config.json's rope_scaling for `s` (null for none): rope_type and the type's keys, as transformers writes
// them; memwall's checkpoints keep the same object (read back by core's parse_rope_scaling).
nlohmann::ordered_json hf_rope_scaling(const RopeScaling& s);

// Reads the parameters one tensor at a time (memory: twice the largest tensor). `dir` must exist.
Status export_hf(const GptConfig& c, const ParamReader& read, const std::string& dir,
                 ExportDtype dtype = ExportDtype::kF32);
// `params`: gpt_num_params(c) floats in gpt_param_layout order.
Status export_hf(const GptConfig& c, const float* params, const std::string& dir,
                 ExportDtype dtype = ExportDtype::kF32);

}  // namespace memwall::model
