// The GPT the GPU tests train (on a GPU and on the emulated one): 2 layers, 64 channels, 4 heads, the byte
// vocabulary, up to 64 positions.
#pragma once

#include "engine/model/gpt.h"

namespace memwall::cuda_test {

inline model::GptConfig small_gpt() {
  model::GptConfig c;
  c.vocab = 256;
  c.max_seq = 64;
  c.layers = 2;
  c.heads = 4;
  c.channels = 64;
  return c;
}

}  // namespace memwall::cuda_test
