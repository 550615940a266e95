// GptDecoder: one position at a time through the GPT, keys and values cached per layer.
#include "engine/model/gpt_decode.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cpu/gpt_ops.h"

namespace memwall::model {

namespace k = memwall::kernels;

GptDecoder::GptDecoder(const GptConfig& c, const float* params, int chunk)
    : c_(c),
      params_(params),
      layout_(gpt_param_layout(c)),
      inv_freq_(c.rope_inv_freq(0)),
      local_freq_(c.rope_local_theta > 0 ? c.rope_local_inv_freq() : std::vector<double>{}),
      chunk_(std::clamp(chunk, 1, std::max(1, c.max_seq))) {
  const auto T = static_cast<std::size_t>(chunk_), C = static_cast<std::size_t>(c.channels);
  const auto F = static_cast<std::size_t>(c.ffn_width());
  // A windowed layer's ring: its window, and room for the rows of a chunk written before they attend.
  for (int l = 0; l < c.main_layers(); ++l) {  // (the next-token-prediction module's block: none)
    // (Llama 4's chunked layers: a query sees at most a chunk's keys, as a window of that many)
    const int span = c.attention_span(l), window = span < 0 ? -span : span;
    capacity_.push_back(window > 0 ? std::min(c.max_seq, window + chunk_ - 1) : c.max_seq);
  }
  k_.resize(static_cast<std::size_t>(c.main_layers()));
  v_ = k_;
  // Activations of up to a chunk's rows at once.
  x_.resize(T * C);
  ln_.resize(T * C);
  proj_.resize(T * C);
  qkv_.resize(T * static_cast<std::size_t>(c.qkv_width()));
  y_.resize(T * static_cast<std::size_t>(std::max(c.channels, c.q_width())));  // attention's, MLP's output
  if (c.qk_norm) rqk_.resize(T * static_cast<std::size_t>(c.heads + c.kv_head_count()));
  if (c.qk_layernorm) mqk_.resize(rqk_.size());
  fc_.resize(T * static_cast<std::size_t>(c.fc_width()));
  gel_.resize(T * F);
  if (c.moe()) {  // one token's router logits, probabilities, choices and weights, an expert's activations
    const auto E = static_cast<std::size_t>(c.experts), K = static_cast<std::size_t>(c.experts_per_token),
               FE = static_cast<std::size_t>(c.expert_width());
    route_z_.resize(E);
    route_p_.resize(E);
    route_e_.resize(K);
    route_w_.resize(K);
    if (c.llama4) route_x_.resize(C);
    const auto FS = static_cast<std::size_t>(c.shared_ffn);
    fc_.resize(std::max(fc_.size(), 2 * std::max(FE, FS)));
    gel_.resize(std::max(gel_.size(), std::max(FE, FS)));
    proj_.resize(std::max(proj_.size(), T * C));
  }
  if (c.mla()) {
    const auto ql = static_cast<std::size_t>(c.q_lora), kvl = static_cast<std::size_t>(c.kv_lora);
    lq_.resize(T * static_cast<std::size_t>(c.q_width()));
    lqa_.resize(T * ql);
    lqn_.resize(T * ql);
    lkva_.resize(T * (kvl + static_cast<std::size_t>(c.rope_dim)));
    lkvc_.resize(T * kvl);
    lkvn_.resize(T * kvl);
    lo_.resize(T * static_cast<std::size_t>(c.attn_out_width()));
  }
  mean_.resize(T);
  rstd_.resize(T);
  logits_.resize(static_cast<std::size_t>(c.vocab));
}

std::size_t GptDecoder::cache_bytes() const {
  std::size_t floats = 0;
  for (std::size_t l = 0; l < k_.size(); ++l) floats += k_[l].size() + v_[l].size();
  return floats * sizeof(float);
}

std::size_t GptDecoder::cache_capacity_bytes() const {
  std::size_t rows = 0;
  for (int cap : capacity_) rows += static_cast<std::size_t>(cap);
  // (the latent attention's: one latent and rotary key part a position)
  const std::size_t width = c_.mla() ? static_cast<std::size_t>(c_.kv_lora + c_.rope_dim)
                                     : 2 * static_cast<std::size_t>(c_.kv_width());
  return rows * width * sizeof(float);
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
  // longrope's factors follow the context so far, as transformers' generate picks them: short_factor up to
  // original_max_position_embeddings, long_factor beyond (the keys cached before keep their turn); a prompt
  // by the whole prompt's length, whatever its chunks.
  if (c_.rope_scaling.type == "longrope") inv_freq_ = c_.rope_inv_freq(pos_ + n);
  for (int done = 0; done < n; done += chunk_) {
    const int rows = std::min(chunk_, n - done);
    run_rows(tokens + done, rows, done + rows == n);
  }
  return static_cast<const float*>(logits_.data());
}

void GptDecoder::mla_rows(int n, std::size_t first, int layer) {
  const auto at = [this](std::size_t i) { return params_ + layout_[i].offset; };
  const int C = c_.channels, Q = c_.q_width(), L = c_.kv_lora, R = c_.rope_dim, KA = L + R,
            D = c_.head_size(), P = c_.nope_dim(), V = c_.v_dim;
  const auto Lz = static_cast<std::size_t>(L), Rz = static_cast<std::size_t>(R),
             KAz = static_cast<std::size_t>(KA);
  std::size_t t = first;
  const float* q_in = ln_.data();
  int q_width = C;
  if (c_.q_lora > 0) {  // the query latent, normed
    k::matmul_forward(lqa_.data(), ln_.data(), at(t), nullptr, n, C, c_.q_lora);
    k::rmsnorm_forward(lqn_.data(), rstd_.data(), lqa_.data(), at(t + 1), n, c_.q_lora,
                       GptConfig::kLatentNormEps);
    q_in = lqn_.data();
    q_width = c_.q_lora;
    t += 2;
  }
  k::matmul_forward(lq_.data(), q_in, at(t), nullptr, n, q_width, Q);
  k::matmul_forward(lkva_.data(), ln_.data(), at(t + 1), nullptr, n, C, KA);
  for (int r = 0; r < n; ++r) {  // the key/value latent (before the rotary key part), normed
    std::copy_n(lkva_.data() + static_cast<std::size_t>(r) * KAz, L,
                lkvc_.data() + static_cast<std::size_t>(r) * Lz);
  }
  k::rmsnorm_forward(lkvn_.data(), rstd_.data(), lkvc_.data(), at(t + 2), n, L, GptConfig::kLatentNormEps);
  const float* up = at(t + 3);  // kv_b_proj [heads x (nope + value)][kv_lora]
  // Rotary positions on each query head's rotary part (after its nope part) and on the shared key part.
  const double rope_scale = c_.rope_attention_scale();
  k::rope_rotate(lq_.data() + P, 1, n, Q, c_.heads, D, inv_freq_.data(), pos_, false, rope_scale, R,
                 c_.rope_pairs());
  k::rope_rotate(lkva_.data() + L, 1, n, KA, 1, R, inv_freq_.data(), pos_, false, rope_scale, R,
                 c_.rope_pairs());
  // The cache: each position's normed latent and its turned key part, kv_lora + rope_dim floats a layer.
  auto& cache = k_[static_cast<std::size_t>(layer)];
  const std::size_t need = (static_cast<std::size_t>(pos_) + static_cast<std::size_t>(n)) * KAz;
  if (cache.size() < need) {
    cache.resize(std::min(static_cast<std::size_t>(c_.max_seq) * KAz, std::max(need, 2 * cache.size())));
  }
  for (int r = 0; r < n; ++r) {
    float* row = cache.data() + (static_cast<std::size_t>(pos_) + static_cast<std::size_t>(r)) * KAz;
    std::copy_n(lkvn_.data() + static_cast<std::size_t>(r) * Lz, L, row);
    std::copy_n(lkva_.data() + static_cast<std::size_t>(r) * KAz + Lz, R, row + Lz);
  }
  // Each head's query absorbed into the latent (W_uk^T q_nope), its scores against every cached latent plus
  // rotary part, the probabilities' sum of latents, and that through W_uv: the head's value.
  const float scale = k::attention_scale(c_.score_scale(), D), cap = c_.score_cap();
  std::vector<float> ql(Lz), ol(Lz);
  for (int r = 0; r < n; ++r) {
    const int last = pos_ + r;
    if (scores_.size() < static_cast<std::size_t>(last + 1))
      scores_.resize(static_cast<std::size_t>(last + 1));
    for (int h = 0; h < c_.heads; ++h) {
      const float* q = lq_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(Q) +
                       static_cast<std::size_t>(h) * static_cast<std::size_t>(D);
      const float* w_uk = up + static_cast<std::size_t>(h) * static_cast<std::size_t>(P + V) * Lz;
      const float* w_uv = w_uk + static_cast<std::size_t>(P) * Lz;
      std::fill(ql.begin(), ql.end(), 0.0f);
      for (int i = 0; i < P; ++i) {
        const float* row = w_uk + static_cast<std::size_t>(i) * Lz;
        for (std::size_t j = 0; j < Lz; ++j) ql[j] += q[i] * row[j];
      }
      float maxv = -INFINITY;
      for (int u = 0; u <= last; ++u) {
        const float* kv = cache.data() + static_cast<std::size_t>(u) * KAz;
        float dot = 0;
        for (std::size_t j = 0; j < Lz; ++j) dot += ql[j] * kv[j];
        for (std::size_t j = 0; j < Rz; ++j) dot += q[static_cast<std::size_t>(P) + j] * kv[Lz + j];
        scores_[static_cast<std::size_t>(u)] = k::soft_cap(dot * scale, cap);
        maxv = std::max(maxv, scores_[static_cast<std::size_t>(u)]);
      }
      float sum = 0;
      for (int u = 0; u <= last; ++u)
        sum += (scores_[static_cast<std::size_t>(u)] = std::exp(scores_[static_cast<std::size_t>(u)] - maxv));
      std::fill(ol.begin(), ol.end(), 0.0f);
      for (int u = 0; u <= last; ++u) {
        const float a = scores_[static_cast<std::size_t>(u)] / sum;
        const float* kv = cache.data() + static_cast<std::size_t>(u) * KAz;
        for (std::size_t j = 0; j < Lz; ++j) ol[j] += a * kv[j];
      }
      float* o = lo_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(c_.attn_out_width()) +
                 static_cast<std::size_t>(h) * static_cast<std::size_t>(V);
      for (int v = 0; v < V; ++v) {
        const float* row = w_uv + static_cast<std::size_t>(v) * Lz;
        float acc = 0;
        for (std::size_t j = 0; j < Lz; ++j) acc += row[j] * ol[j];
        o[v] = acc;
      }
    }
  }
}

void GptDecoder::run_rows(const int* tokens, int n, bool logits) {
  const bool llama = c_.llama();
  const int C = c_.channels, F = c_.ffn_width(), hs = c_.head_size(), kv = c_.kv_width(), Wq = c_.qkv_width(),
            Q = c_.q_width();
  const int group = c_.heads / c_.kv_head_count();
  const auto Cz = static_cast<std::size_t>(C), KVz = static_cast<std::size_t>(kv),
             Wqz = static_cast<std::size_t>(Wq), Qz = static_cast<std::size_t>(Q),
             rows = static_cast<std::size_t>(n);
  const auto at = [this](std::size_t i) { return params_ + layout_[i].offset; };
  // GPT-2's shape's biases: on the attention's linears and the MLP's (not Falcon's with bias false, MPT's;
  // GPT-J on the MLP's only).
  const bool attn_biases = c_.attn_bias(), biases = c_.mlp_bias();
  const auto bias = [&](std::size_t i) { return biases ? at(i) : nullptr; };
  const auto attn_bias = [&](std::size_t i) { return attn_biases ? at(i) : nullptr; };
  const auto norm = [&](float* out, const float* in, std::size_t w, int count) {
    if (c_.rms_norm()) {
      k::rmsnorm_forward(out, rstd_.data(), in, at(w), count, C, static_cast<float>(c_.norm_eps),
                         c_.norm_offset());
    } else {
      k::layernorm_forward(out, mean_.data(), rstd_.data(), in, c_.norm_params ? at(w) : nullptr,
                           c_.norm_bias() ? at(w + 1) : nullptr, count, C, c_.norm_offset());
    }
  };
  // Embeddings: the token's (Gemma's times sqrt(C)), plus (GPT-2, OPT) the position's.
  const float embed_scale = c_.embedding_scale();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* wte = at(0) + static_cast<std::size_t>(tokens[r]) * Cz;
    const float* wpe =
        c_.learned_positions() ? at(1) + c_.position0() + (static_cast<std::size_t>(pos_) + r) * Cz : nullptr;
    for (std::size_t i = 0; i < Cz; ++i)
      x_[r * Cz + i] = wte[i] * embed_scale + (wpe != nullptr ? wpe[i] : 0.0f);
  }
  if (c_.bloom) {  // the embedding's LayerNorm (tensors 1 and 2)
    norm(ln_.data(), x_.data(), 1, n);
    std::copy_n(ln_.data(), rows * Cz, x_.data());
  }
  const float scale = k::attention_scale(c_.score_scale(), hs), cap = c_.score_cap();
  // Each block's tensors in the layout. GPT-2: ln_1 (w, b), c_attn (w, b), c_proj (w, b), ln_2 (w, b), c_fc
  // (w, b), c_proj (w, b) (GPT-NeoX without the position table). Llama: input norm, q, k, v (back to back:
  // one [Q + 2 kv, C] matrix), o, post norm, gate, up (one [2F, C] matrix), down. Qwen2's q, k and v biases
  // (back to back, one [Q + 2 kv] vector) follow v_proj, then Qwen3's q and k norms (one [hs + hs] vector;
  // OLMo 2's [q width + kv width]; StableLM 2 12B's one [hs] per query and key head). Gemma 2's attention
  // output norm follows o, its MLP output norm down. StableLM's norms are LayerNorms (w, b). OLMo 2 has no
  // input norm: its post norm is the attention output's, and the MLP output's follows down.
  const std::size_t qb = c_.qkv_bias ? 3 : 0, sw = c_.sandwich_norm ? 1 : 0,
                    qn = c_.qk_layernorm && !c_.cohere
                             ? static_cast<std::size_t>(c_.heads + c_.kv_head_count())
                         : c_.qk_norm ? 2
                                      : 0;
  // GPT-2's shape: grouped-query attention's q and kv weights are two tensors (back to back), biases may be
  // missing (Falcon's, MPT's: its norms' too), and with one norm (Phi's, Falcon-7B's) the MLP reads ln_1's
  // output: no ln_2.
  const std::size_t nt = c_.norm_tensors(), wq = c_.split_qkv() ? 2 : 1, bq = attn_biases ? wq : 0,
                    na = attn_biases ? 1 : 0, nb = biases ? 1 : 0, n2 = c_.shared_norm() ? 0 : nt;
  const std::size_t g_proj = nt + wq + bq, g_ln2 = g_proj + 1 + na, g_fc = g_ln2 + n2, g_down = g_fc + 1 + nb;
  const std::size_t n1 = c_.post_norm ? 0 : nt;  // the input norm's tensors
  // (the latent attention's: q_a_proj, its norm, q_b_proj or q_proj alone; kv_a_proj, its norm, kv_b_proj)
  const std::size_t mla_tensors = c_.q_lora > 0 ? 6 : 4;
  const std::size_t qkv_w = n1, qkv_b = n1 + 3,
                    proj_w = c_.mla() ? n1 + mla_tensors
                             : llama  ? qkv_b + qb + qn
                                      : g_proj,
                    // (gpt-oss's o_proj bias and sink logits follow o_proj)
      ln2_w = llama ? proj_w + 1 + sw + (c_.gpt_oss ? 2 : 0) : g_ln2,
                    fc_w = !llama         ? g_fc
                           : c_.post_norm ? proj_w + 2
                                          : ln2_w + n2,
                    down_w = llama ? fc_w + 2 : g_down;
  const std::size_t first = 1 + (c_.learned_positions() ? 1 : 0) + (c_.bloom ? 2 : 0),
                    per_block = llama ? down_w + 1 + (c_.out_norms() ? 1 : 0) : g_down + 1 + nb;
  // A block's tensors (a block of experts: its router, each expert's three, the shared expert's and its
  // gate).
  const auto block_tensors = [&](int l) {
    const std::size_t router = 1 + (c_.sigmoid_routing || c_.gpt_oss ? 1 : 0),
                      shared = c_.shared_ffn > 0 ? (c_.shared_gate ? 4 : 3) : 0,
                      per_expert = c_.gpt_oss ? 6 : 3;  // (gpt-oss's gate, up and down with biases)
    return c_.moe_layer(l) ? fc_w + router + per_expert * static_cast<std::size_t>(c_.experts) + shared
                           : per_block;
  };
  // A sublayer's input: the residual stream normed into ln_, or (post_norm) as it is.
  const auto input_norm = [&](std::size_t norm_w) {
    if (c_.post_norm) {
      std::copy_n(x_.data(), rows * Cz, ln_.data());
    } else {
      norm(ln_.data(), x_.data(), norm_w, n);
    }
  };
  // With norms of the sublayers' outputs: y_ (a sublayer's output) normed into ln_, added to the residual
  // stream x_.
  const auto residual_add = [&](std::size_t norm_w, float* sub) {
    const std::size_t nc = rows * Cz;
    if (c_.out_norms()) {
      norm(ln_.data(), sub, norm_w, n);
      sub = ln_.data();
    }
    const auto s = static_cast<float>(c_.residual_multiplier);  // (Granite's; else 1)
    for (std::size_t i = 0; i < nc; ++i) x_[i] = s * sub[i] + x_[i];
  };
  std::size_t next = first;                     // the next block's first tensor
  for (int l = 0; l < c_.main_layers(); ++l) {  // (not the next-token-prediction module's)
    const std::size_t p = next;                 // this block's first tensor
    next += block_tensors(l);
    auto& keys = k_[static_cast<std::size_t>(l)];
    auto& values = v_[static_cast<std::size_t>(l)];
    input_norm(p);
    if (c_.mla()) {  // DeepSeek's latent attention, its latents cached: into lo_
      mla_rows(n, p + n1, l);
    } else {
      const float* qkv_bias = !llama ? attn_bias(p + qkv_w + wq) : c_.qkv_bias ? at(p + qkv_b) : nullptr;
      k::matmul_forward(qkv_.data(), ln_.data(), at(p + qkv_w), qkv_bias, n, C, Wq);
      if (c_.clip_qkv > 0) {  // OLMo 1.7's
        k::clamp_forward(qkv_.data(), static_cast<std::size_t>(n) * static_cast<std::size_t>(Wq),
                         static_cast<float>(c_.clip_qkv));
      }
      if (c_.qk_layernorm) {  // StableLM 2 12B's LayerNorm of each head, in place
        k::head_layernorm_forward(qkv_.data(), mqk_.data(), rqk_.data(), qkv_.data(), at(p + qkv_b + qb), n,
                                  Wq, c_.heads + c_.kv_head_count(), hs, static_cast<float>(c_.norm_eps));
      } else if (c_.qk_norm) {  // each query and key head normed, in place
        k::head_rmsnorm_forward(qkv_.data(), rqk_.data(), qkv_.data(), at(p + qkv_b + qb), n, Wq,
                                c_.qk_norm_heads(), c_.qk_norm_kv_heads(), c_.qk_norm_width(),
                                c_.qk_norm_kv_width(), static_cast<float>(c_.norm_eps), c_.norm_offset());
      }
      // Rotary positions on the new rows' queries and keys (Gemma 3's local base on its windows).
      if (c_.rotary_at(l)) {  // (not Cohere2's and EXAONE 4's global layers, nor SmolLM3's NoPE ones)
        const bool local = c_.local_rope(l);
        const double rope_scale = local ? 1.0 : c_.rope_attention_scale();
        const double* freq = (local ? local_freq_ : inv_freq_).data();
        const int rot = c_.rotary_dim();
        k::rope_rotate(qkv_.data(), 1, n, Wq, c_.heads, hs, freq, pos_, false, rope_scale, rot,
                       c_.rope_pairs());
        k::rope_rotate(qkv_.data() + Q, 1, n, Wq, c_.kv_head_count(), hs, freq, pos_, false, rope_scale, rot,
                       c_.rope_pairs());
      }
      if (c_.l2_norm_at(l)) {  // Llama 4's norm of each query and key head, after the turn
        const auto eps = static_cast<float>(c_.norm_eps);
        k::l2_norm_heads(qkv_.data(), nullptr, n, Wq, c_.heads, hs, eps);
        k::l2_norm_heads(qkv_.data() + Q, nullptr, n, Wq, c_.kv_head_count(), hs, eps);
      }
      for (std::size_t r = 0; r < rows; ++r) {  // Llama 4's temperature on the other layers' queries
        const float s = c_.query_temperature(l, pos_ + static_cast<int>(r));
        if (s == 1.0f) continue;
        for (std::size_t i = 0; i < Qz; ++i) qkv_[r * Wqz + i] *= s;
      }
      // The new rows' keys and values: position u in slot u mod the layer's capacity (a ring for a windowed
      // layer, whose older positions no query attends any more), the cache grown as positions arrive.
      const auto capacity = static_cast<std::size_t>(capacity_[static_cast<std::size_t>(l)]);
      const std::size_t need = std::min(capacity, static_cast<std::size_t>(pos_) + rows) * KVz;
      if (keys.size() < need) {
        const std::size_t grown = std::min(capacity * KVz, std::max(need, 2 * keys.size()));
        keys.resize(grown);
        values.resize(grown);
      }
      const auto slot = [&](int u) { return static_cast<std::size_t>(u) % capacity * KVz; };
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t row = slot(pos_ + static_cast<int>(r));
        std::copy_n(qkv_.data() + r * Wqz + Qz, KVz, keys.data() + row);
        std::copy_n(qkv_.data() + r * Wqz + Qz + KVz, KVz, values.data() + row);
      }
      // Causal attention of each new position's query over the positions up to it (those in the layer's
      // window, if it has one), head by head (a query head reads its group's key/value head).
      const int window = c_.attention_span(l);
      for (std::size_t r = 0; r < rows; ++r) {
        const int last = pos_ + static_cast<int>(r), lo = k::attention_window_start(last, window);
        if (scores_.size() < static_cast<std::size_t>(last - lo + 1))
          scores_.resize(static_cast<std::size_t>(last - lo + 1));
        float* score = scores_.data();  // score[u - lo] for u in [lo, last]
        for (int h = 0; h < c_.heads; ++h) {
          const std::size_t off = static_cast<std::size_t>(h) * static_cast<std::size_t>(hs),
                            kv_off = static_cast<std::size_t>(h / group) * static_cast<std::size_t>(hs);
          const float* q = qkv_.data() + r * Wqz + off;
          const float slope = k::alibi_head_slope(c_.alibi_scale(), h, c_.heads);  // BLOOM's, Falcon's, MPT's
          // (gpt-oss's sink logit: one more score in the denominator)
          const float sink = c_.gpt_oss ? at(p + proj_w + 2)[h] : -INFINITY;
          float maxv = sink;
          for (int u = lo; u <= last; ++u) {
            const float* key = keys.data() + slot(u) + kv_off;
            float dot = 0;
            for (int i = 0; i < hs; ++i) dot += q[i] * key[i];
            score[u - lo] = k::soft_cap(dot * scale, cap) + slope * static_cast<float>(u - last);
            maxv = std::max(maxv, score[u - lo]);
          }
          float sum = c_.gpt_oss ? std::exp(sink - maxv) : 0.0f;
          for (int u = lo; u <= last; ++u) {
            score[u - lo] = std::exp(score[u - lo] - maxv);
            sum += score[u - lo];
          }
          const float inv = 1.0f / sum;
          float* o = y_.data() + r * Qz + off;
          std::fill_n(o, hs, 0.0f);
          for (int u = lo; u <= last; ++u) {
            const float a = score[u - lo] * inv;
            const float* value = values.data() + slot(u) + kv_off;
            for (int i = 0; i < hs; ++i) o[i] += a * value[i];
          }
        }
      }
    }
    // Projection and residual, then the MLP and its residual (x_ is the residual stream).
    // (parallel_residual: the MLP's norm reads the block's input, before the attention's output is added.)
    k::matmul_forward(proj_.data(), c_.mla() ? lo_.data() : y_.data(), at(p + proj_w),
                      c_.gpt_oss ? at(p + proj_w + 1) : attn_bias(p + proj_w + 1), n, c_.attn_out_width(), C);
    // (With one norm the MLP reads ln_1's output, still in ln_.)
    if (c_.parallel_residual && !c_.shared_norm()) norm(ln_.data(), x_.data(), p + ln2_w, n);
    residual_add(p + proj_w + 1, proj_.data());
    if (!c_.parallel_residual) input_norm(p + ln2_w);
    if (c_.moe_layer(l)) {  // each row through its chosen experts, their outputs weighted into y_
      moe_rows(n, p + fc_w);
      residual_add(0, y_.data());  // (no output norm with experts)
      continue;
    }
    if (llama) {
      k::matmul_forward(fc_.data(), ln_.data(), at(p + fc_w), nullptr, n, C, 2 * F);
      if (c_.gelu_mlp) {
        k::geglu_forward(gel_.data(), fc_.data(), n, F);
      } else {
        k::swiglu_forward(gel_.data(), fc_.data(), n, F);
      }
    } else {
      k::matmul_forward(fc_.data(), ln_.data(), at(p + fc_w), bias(p + fc_w + 1), n, C, F);
      if (c_.opt) {
        k::relu_forward(gel_.data(), fc_.data(), rows * static_cast<std::size_t>(F));
      } else if (c_.nemotron) {
        k::relu2_forward(gel_.data(), fc_.data(), rows * static_cast<std::size_t>(F));
      } else if (c_.exact_gelu) {
        k::gelu_exact_forward(gel_.data(), fc_.data(), rows * static_cast<std::size_t>(F));
      } else {
        k::gelu_forward(gel_.data(), fc_.data(), rows * static_cast<std::size_t>(F));
      }
    }
    k::matmul_forward(y_.data(), gel_.data(), at(p + down_w), bias(p + down_w + 1), n, F, C);
    residual_add(p + down_w + 1, y_.data());
  }
  pos_ += n;
  if (!logits) return;
  // The logits of the last new position only; the head is the token embedding unless the model has its own.
  const std::size_t f = next;  // (the final norm's)
  const float* x_last = x_.data() + (rows - 1) * Cz;
  norm(ln_.data(), x_last, f, 1);
  const std::size_t head_at = f + nt;  // after the final norm's weight (and bias)
  const float* head = c_.tied ? at(0) : at(head_at);
  k::matmul_forward(logits_.data(), ln_.data(), head, c_.head_bias() ? at(head_at + 1) : nullptr, 1, C,
                    c_.vocab);
  if (c_.logit_scale != 1)  // (Cohere's, Granite's)
    k::scale_values(logits_.data(), logits_.size(), static_cast<float>(c_.logit_scale));
  if (c_.final_softcap > 0)
    k::softcap_forward(logits_.data(), logits_.size(), static_cast<float>(c_.final_softcap));
}

void GptDecoder::moe_rows(int n, std::size_t router) {
  // The layout's router, then each expert's gate and up (back to back: one [2F, C] matrix) and down.
  const auto C = static_cast<std::size_t>(c_.channels);
  const int E = c_.experts, K = c_.experts_per_token, F = c_.expert_width();
  const auto at = [this](std::size_t i) { return params_ + layout_[i].offset; };
  // (after the correction bias, or gpt-oss's router bias)
  const std::size_t first_expert = router + (c_.sigmoid_routing || c_.gpt_oss ? 2 : 1);
  const auto Ez = static_cast<std::size_t>(E);
  std::fill_n(y_.data(), static_cast<std::size_t>(n) * C, 0.0f);
  for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r) {
    const float* in = ln_.data() + r * C;
    k::matmul_forward(route_z_.data(), in, at(router), c_.gpt_oss ? at(router + 1) : nullptr, 1, c_.channels,
                      E);
    route_token(c_, route_z_.data(), c_.sigmoid_routing ? at(router + 1) : nullptr, route_p_.data(),
                route_e_.data(), route_w_.data(), order_, choice_);
    for (int j = 0; j < K; ++j) {
      // Expert e's gate and up, and its down: three tensors in a row, or (Granite MoE's, Llama 4's) every
      // expert's gate and up first, then every down; gpt-oss's every gate and up, their biases, every down,
      // their biases.
      const auto e = static_cast<std::size_t>(route_e_[static_cast<std::size_t>(j)]);
      const bool joined = c_.granite || c_.gpt_oss || c_.llama4;
      const std::size_t fc1 = first_expert + (joined ? 2 : 3) * e,
                        fc2 = joined ? first_expert + (c_.gpt_oss ? 4 : 2) * Ez + e : fc1 + 2;
      const float* b1 = c_.gpt_oss ? at(first_expert + 2 * Ez + 2 * e) : nullptr;
      const float* b2 = c_.gpt_oss ? at(first_expert + 5 * Ez + e) : nullptr;
      const float w = route_w_[static_cast<std::size_t>(j)];
      const float* x = in;
      if (c_.llama4) {  // the weight scales the expert's input, not its output
        for (std::size_t i = 0; i < C; ++i) route_x_[i] = w * in[i];
        x = route_x_.data();
      }
      k::matmul_forward(fc_.data(), x, at(fc1), b1, 1, c_.channels, 2 * F);
      if (c_.gpt_oss) {
        k::clamped_swiglu_forward(gel_.data(), fc_.data(), 1, F, GptConfig::kSwigluAlpha,
                                  static_cast<float>(c_.swiglu_limit));
      } else {
        k::swiglu_forward(gel_.data(), fc_.data(), 1, F);
      }
      k::matmul_forward(proj_.data(), gel_.data(), at(fc2), b2, 1, F, c_.channels);
      const float wy = c_.llama4 ? 1.0f : w;
      for (std::size_t i = 0; i < C; ++i) y_[r * C + i] += wy * proj_[i];
    }
    if (c_.shared_ffn > 0) {  // the shared expert (gate and up, down, then Qwen2-MoE's gate) after them
      const std::size_t s = first_expert + 3 * static_cast<std::size_t>(E);
      const int FS = c_.shared_ffn;
      k::matmul_forward(fc_.data(), in, at(s), nullptr, 1, c_.channels, 2 * FS);
      k::swiglu_forward(gel_.data(), fc_.data(), 1, FS);
      k::matmul_forward(proj_.data(), gel_.data(), at(s + 2), nullptr, 1, FS, c_.channels);
      float z = 0, g = 1;
      if (c_.shared_gate) {
        k::matmul_forward(&z, in, at(s + 3), nullptr, 1, c_.channels, 1);
        g = sigmoid(z);
      }
      for (std::size_t i = 0; i < C; ++i) y_[r * C + i] += g * proj_[i];
    }
  }
}

}  // namespace memwall::model
