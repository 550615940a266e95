// GptDecoder: one position at a time through the GPT, keys and values cached per layer.
#include "engine/model/gpt_decode.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cpu/gpt_ops.h"

namespace memwall::model {

namespace k = memwall::kernels;

GptDecoder::GptDecoder(const GptConfig& c, const float* params)
    : c_(c), params_(params), layout_(gpt_param_layout(c)) {
  const auto T = static_cast<std::size_t>(c.max_seq), C = static_cast<std::size_t>(c.channels);
  k_.assign(static_cast<std::size_t>(c.layers), std::vector<float>(T * C));
  v_ = k_;
  // Activations of up to a whole context's rows at once (a prompt is run in one pass).
  x_.resize(T * C);
  ln_.resize(T * C);
  qkv_.resize(T * 3 * C);
  y_.resize(T * C);
  fc_.resize(T * 4 * C);
  gel_.resize(T * 4 * C);
  mean_.resize(T);
  rstd_.resize(T);
  scores_.resize(T);
  logits_.resize(static_cast<std::size_t>(c.vocab));
}

Result<const float*> GptDecoder::append(const int* tokens, int n) {
  if (n < 1 || pos_ + n > c_.max_seq) {
    return Status::failed_precondition("the context is full: the model has " + std::to_string(c_.max_seq) +
                                       " positions, " + std::to_string(pos_) + " are used and " +
                                       std::to_string(n) + " more were given");
  }
  for (int r = 0; r < n; ++r) {
    if (tokens[r] < 0 || tokens[r] >= c_.vocab) {
      return Status::invalid_argument("token " + std::to_string(tokens[r]) +
                                      " is outside the vocabulary of " + std::to_string(c_.vocab));
    }
  }
  const int C = c_.channels, F = 4 * C, hs = C / c_.heads;
  const auto Cz = static_cast<std::size_t>(C), rows = static_cast<std::size_t>(n);
  const auto at = [this](std::size_t i) { return params_ + layout_[i].offset; };
  // Token and position embeddings.
  for (std::size_t r = 0; r < rows; ++r) {
    const float* wte = at(0) + static_cast<std::size_t>(tokens[r]) * Cz;
    const float* wpe = at(1) + (static_cast<std::size_t>(pos_) + r) * Cz;
    for (std::size_t i = 0; i < Cz; ++i) x_[r * Cz + i] = wte[i] + wpe[i];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int l = 0; l < c_.layers; ++l) {
    const std::size_t p = 2 + 12 * static_cast<std::size_t>(l);  // this block's first tensor in the layout
    auto& keys = k_[static_cast<std::size_t>(l)];
    auto& values = v_[static_cast<std::size_t>(l)];
    k::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), at(p), at(p + 1), n, C);
    k::matmul_forward(qkv_.data(), ln_.data(), at(p + 2), at(p + 3), n, C, 3 * C);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t row = (static_cast<std::size_t>(pos_) + r) * Cz;
      std::copy_n(qkv_.data() + r * 3 * Cz + Cz, Cz, keys.data() + row);
      std::copy_n(qkv_.data() + r * 3 * Cz + 2 * Cz, Cz, values.data() + row);
    }
    // Causal attention of each new position's query over the positions up to it, head by head.
    for (std::size_t r = 0; r < rows; ++r) {
      const int last = pos_ + static_cast<int>(r);
      for (int h = 0; h < c_.heads; ++h) {
        const std::size_t off = static_cast<std::size_t>(h) * static_cast<std::size_t>(hs);
        const float* q = qkv_.data() + r * 3 * Cz + off;
        float maxv = -INFINITY;
        for (int u = 0; u <= last; ++u) {
          const float* key = keys.data() + static_cast<std::size_t>(u) * Cz + off;
          float dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * key[i];
          scores_[static_cast<std::size_t>(u)] = dot * scale;
          maxv = std::max(maxv, scores_[static_cast<std::size_t>(u)]);
        }
        float sum = 0;
        for (int u = 0; u <= last; ++u) {
          scores_[static_cast<std::size_t>(u)] = std::exp(scores_[static_cast<std::size_t>(u)] - maxv);
          sum += scores_[static_cast<std::size_t>(u)];
        }
        const float inv = 1.0f / sum;
        float* o = y_.data() + r * Cz + off;
        std::fill_n(o, hs, 0.0f);
        for (int u = 0; u <= last; ++u) {
          const float a = scores_[static_cast<std::size_t>(u)] * inv;
          const float* value = values.data() + static_cast<std::size_t>(u) * Cz + off;
          for (int i = 0; i < hs; ++i) o[i] += a * value[i];
        }
      }
    }
    // Projection and residual, then the MLP and its residual (x_ is the residual stream).
    const std::size_t nc = rows * Cz;
    k::matmul_forward(ln_.data(), y_.data(), at(p + 4), at(p + 5), n, C, C);
    for (std::size_t i = 0; i < nc; ++i) x_[i] = ln_[i] + x_[i];
    k::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), at(p + 6), at(p + 7), n, C);
    k::matmul_forward(fc_.data(), ln_.data(), at(p + 8), at(p + 9), n, C, F);
    k::gelu_forward(gel_.data(), fc_.data(), rows * static_cast<std::size_t>(F));
    k::matmul_forward(y_.data(), gel_.data(), at(p + 10), at(p + 11), n, F, C);
    for (std::size_t i = 0; i < nc; ++i) x_[i] = y_[i] + x_[i];
  }
  // The logits of the last new position only.
  const std::size_t f = 2 + 12 * static_cast<std::size_t>(c_.layers);
  const float* x_last = x_.data() + (rows - 1) * Cz;
  k::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_last, at(f), at(f + 1), 1, C);
  k::matmul_forward(logits_.data(), ln_.data(), at(0), nullptr, 1, C, c_.vocab);  // the head tied to wte
  pos_ += n;
  return static_cast<const float*>(logits_.data());
}

}  // namespace memwall::model
