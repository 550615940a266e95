// The GPT the GPU tests train (on a GPU and on the emulated one): 2 layers, 64 channels, 4 heads, the byte
// vocabulary, up to 64 positions.
#pragma once

#include "engine/model/gpt.h"

namespace memwall::cuda_test {

inline model::GptConfig small_gpt() {
  return {.vocab = 256, .max_seq = 64, .layers = 2, .heads = 4, .channels = 64};
}

// The Llama shape of the same size: 4 query heads on 2 key/value heads, a SwiGLU MLP of 176, an untied head.
inline model::GptConfig small_llama() {
  return {.vocab = 256,
          .max_seq = 64,
          .layers = 2,
          .heads = 4,
          .channels = 64,
          .arch = model::GptArch::kLlama,
          .kv_heads = 2,
          .ffn = 176,
          .tied = false};
}

}  // namespace memwall::cuda_test
