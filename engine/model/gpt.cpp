// GPT-2 decoder forward and backward on kernels/cpu.
#include "engine/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "cpu/gpt_ops.h"

namespace memwall::model {

namespace k = memwall::kernels;

Status validate(const GptConfig& c, int batch, int seq) {
  const std::pair<const char*, int> fields[] = {
      {"vocab", c.vocab},       {"max_seq", c.max_seq}, {"layers", c.layers}, {"heads", c.heads},
      {"channels", c.channels}, {"batch", batch},       {"seq", seq}};
  for (const auto& [name, v] : fields) {
    if (v < 1)
      return Status::invalid_argument(std::string("model: ") + name + " must be >= 1, got " +
                                      std::to_string(v));
  }
  if (c.channels % c.heads != 0) {
    return Status::invalid_argument("model: channels (" + std::to_string(c.channels) +
                                    ") must be divisible by heads (" + std::to_string(c.heads) + ")");
  }
  if (seq > c.max_seq) {
    return Status::invalid_argument("model: seq (" + std::to_string(seq) + ") exceeds max_seq (" +
                                    std::to_string(c.max_seq) + ")");
  }
  return Status::ok();
}

std::vector<ParamTensor> gpt_param_layout(const GptConfig& c) {
  std::vector<ParamTensor> out;
  std::size_t offset = 0;
  auto add = [&](std::string name, std::vector<int> shape) {
    std::size_t n = 1;
    for (int d : shape) n *= static_cast<std::size_t>(d);
    out.push_back({std::move(name), offset, n, std::move(shape)});
    offset += n;
  };
  const int C = c.channels;
  add("wte.weight", {c.vocab, C});
  add("wpe.weight", {c.max_seq, C});
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {3 * C, C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {4 * C, C});
    add(h + "mlp.c_fc.bias", {4 * C});
    add(h + "mlp.c_proj.weight", {C, 4 * C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return out;
}

std::size_t gpt_num_params(const GptConfig& c) {
  const auto layout = gpt_param_layout(c);
  return layout.back().offset + layout.back().numel;
}

ModelSpec gpt_model_spec(const GptConfig& c) {
  ModelSpec m;
  m.name = "memwall-gpt";
  m.model_type = "gpt2";
  m.layers = c.layers;
  m.hidden = c.channels;
  m.heads = c.heads;
  m.kv_heads = c.heads;
  m.ffn_hidden = 4 * c.channels;
  m.vocab = c.vocab;
  m.max_positions = c.max_seq;
  m.tied_embeddings = true;
  m.gated_mlp = false;
  m.linear_bias = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  return m;
}

Result<std::vector<ParamSlice>> map_graph_params(const ModelGraph& g, const GptConfig& c) {
  std::map<std::string, const ParamTensor*> by_name;
  const auto layout = gpt_param_layout(c);
  for (const auto& t : layout) by_name[t.name] = &t;
  // Graph component -> Hugging Face tensor stem.
  const std::map<std::string, std::string> stems = {{"ln1", "ln_1"},        {"ln2", "ln_2"},
                                                    {"qkv", "attn.c_attn"}, {"proj", "attn.c_proj"},
                                                    {"fc1", "mlp.c_fc"},    {"fc2", "mlp.c_proj"}};
  std::vector<ParamSlice> out;
  for (const auto& gp : g.params) {
    // Names: "embed.tokens", "embed.positions", "final_norm.w", "L3.fc1.w", "L3.fc1.b[2/4]".
    std::string name = gp.name;
    int tile = 0, tiles = 1;
    if (const auto br = name.find('['); br != std::string::npos) {
      if (std::sscanf(name.c_str() + br, "[%d/%d]", &tile, &tiles) != 2 || tile < 1 || tile > tiles) {
        return Status::invalid_argument("graph parameter " + gp.name + ": unreadable tile suffix");
      }
      --tile;
      name.resize(br);
    }
    std::string hf;
    if (name == "embed.tokens") {
      hf = "wte.weight";
    } else if (name == "embed.positions") {
      hf = "wpe.weight";
    } else if (name == "final_norm.w" || name == "final_norm.b") {
      hf = name.back() == 'w' ? "ln_f.weight" : "ln_f.bias";
    } else if (name.size() > 1 && name[0] == 'L') {
      const auto d1 = name.find('.'), d2 = name.rfind('.');
      const auto stem = stems.find(name.substr(d1 + 1, d2 - d1 - 1));
      const std::string wb = name.substr(d2 + 1);
      if (d1 == std::string::npos || d2 == d1 || stem == stems.end() || (wb != "w" && wb != "b")) {
        return Status::invalid_argument("graph parameter " + gp.name +
                                        " has no counterpart in the GPT model");
      }
      hf = "h." + name.substr(1, d1 - 1) + "." + stem->second + (wb == "w" ? ".weight" : ".bias");
    }
    const auto it = by_name.find(hf);
    if (it == by_name.end()) {
      return Status::invalid_argument("graph parameter " + gp.name + " has no counterpart in the GPT model");
    }
    const ParamTensor& t = *it->second;
    const int rows = t.shape[0];
    if (rows % tiles != 0) {
      return Status::invalid_argument("graph parameter " + gp.name + ": " + std::to_string(rows) +
                                      " rows do not split into " + std::to_string(tiles) + " tiles");
    }
    const std::size_t numel = t.numel / static_cast<std::size_t>(tiles);
    if (static_cast<double>(numel) != gp.elements) {
      return Status::invalid_argument("graph parameter " + gp.name + " has " + std::to_string(gp.elements) +
                                      " elements; the model's " + hf + " slice has " + std::to_string(numel));
    }
    out.push_back({t.offset + static_cast<std::size_t>(tile) * numel, numel});
  }
  return out;
}

void gpt_init(const GptConfig& c, float* params, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
  for (const auto& t : gpt_param_layout(c)) {
    float* p = params + t.offset;
    const auto ends_with = [&](const char* s) {
      const std::string suffix(s);
      return t.name.size() >= suffix.size() &&
             t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with("bias")) {
      std::fill(p, p + t.numel, 0.0f);
    } else if (t.name.find("ln_") != std::string::npos) {
      std::fill(p, p + t.numel, 1.0f);
    } else {
      std::normal_distribution<float> d(0.0f, ends_with("c_proj.weight") ? proj_std : 0.02f);
      for (std::size_t i = 0; i < t.numel; ++i) p[i] = d(rng);
    }
  }
}

GptModel::GptModel(const GptConfig& c, int B, int T) : c_(c), B_(B), T_(T) {
  MW_CHECK(validate(c, B, T).is_ok(), "GptModel: invalid configuration (call validate first)");
  const auto layout = gpt_param_layout(c);
  std::size_t i = 0;
  wte_ = layout[i++].offset;
  wpe_ = layout[i++].offset;
  for (int l = 0; l < c.layers; ++l) {
    Layer L{};
    for (std::size_t* f : {&L.ln1w, &L.ln1b, &L.wqkv, &L.bqkv, &L.wproj, &L.bproj, &L.ln2w, &L.ln2b, &L.wfc,
                           &L.bfc, &L.wfc2, &L.bfc2}) {
      *f = layout[i++].offset;
    }
    layer_.push_back(L);
  }
  lnfw_ = layout[i++].offset;
  lnfb_ = layout[i++].offset;
  const std::size_t N = static_cast<std::size_t>(B) * T, C = static_cast<std::size_t>(c.channels);
  const std::size_t att = static_cast<std::size_t>(B) * c.heads * T * T;
  auto per_layer = [&](std::vector<std::vector<float>>& v, std::size_t n, int count) {
    v.assign(static_cast<std::size_t>(count), std::vector<float>(n));
  };
  per_layer(resid_, N * C, c.layers + 1);
  per_layer(ln1_, N * C, c.layers);
  per_layer(m1_, N, c.layers);
  per_layer(r1_, N, c.layers);
  per_layer(qkv_, N * 3 * C, c.layers);
  per_layer(att_, att, c.layers);
  per_layer(atty_, N * C, c.layers);
  per_layer(res1_, N * C, c.layers);
  per_layer(ln2_, N * C, c.layers);
  per_layer(m2_, N, c.layers);
  per_layer(r2_, N, c.layers);
  per_layer(fc_, N * 4 * C, c.layers);
  per_layer(gel_, N * 4 * C, c.layers);
  lnf_.resize(N * C);
  mf_.resize(N);
  rf_.resize(N);
  probs_.resize(N * static_cast<std::size_t>(c.vocab));
  dx_.resize(N * C);
  dres_.resize(N * C);
  dln_.resize(N * C);
  datty_.resize(N * C);
  dqkv_.resize(N * 3 * C);
  dfc_.resize(N * 4 * C);
  dgel_.resize(N * 4 * C);
  dlogits_.resize(probs_.size());
}

float GptModel::forward(const float* p, const int* tokens, const int* targets) {
  const int N = B_ * T_, C = c_.channels, F = 4 * C;
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  k::embedding_forward(resid_[0].data(), tokens, p + wte_, p + wpe_, B_, T_, C);
  for (int l = 0; l < c_.layers; ++l) {
    const Layer& L = layer_[static_cast<std::size_t>(l)];
    const auto i = static_cast<std::size_t>(l);
    k::layernorm_forward(ln1_[i].data(), m1_[i].data(), r1_[i].data(), resid_[i].data(), p + L.ln1w,
                         p + L.ln1b, N, C);
    k::matmul_forward(qkv_[i].data(), ln1_[i].data(), p + L.wqkv, p + L.bqkv, N, C, 3 * C);
    k::attention_forward(atty_[i].data(), att_[i].data(), qkv_[i].data(), B_, T_, C, c_.heads);
    k::matmul_forward(res1_[i].data(), atty_[i].data(), p + L.wproj, p + L.bproj, N, C, C);
    for (std::size_t j = 0; j < res1_[i].size(); ++j) res1_[i][j] += resid_[i][j];
    k::layernorm_forward(ln2_[i].data(), m2_[i].data(), r2_[i].data(), res1_[i].data(), p + L.ln2w,
                         p + L.ln2b, N, C);
    k::matmul_forward(fc_[i].data(), ln2_[i].data(), p + L.wfc, p + L.bfc, N, C, F);
    k::gelu_forward(gel_[i].data(), fc_[i].data(), gel_[i].size());
    k::matmul_forward(resid_[i + 1].data(), gel_[i].data(), p + L.wfc2, p + L.bfc2, N, F, C);
    for (std::size_t j = 0; j < res1_[i].size(); ++j) resid_[i + 1][j] += res1_[i][j];
  }
  const auto last = static_cast<std::size_t>(c_.layers);
  k::layernorm_forward(lnf_.data(), mf_.data(), rf_.data(), resid_[last].data(), p + lnfw_, p + lnfb_, N, C);
  // Logits into dlogits_ (scratch until backward), then probabilities.
  k::matmul_forward(dlogits_.data(), lnf_.data(), p + wte_, nullptr, N, C, c_.vocab);
  return k::crossentropy_forward(probs_.data(), dlogits_.data(), targets_.data(), N, c_.vocab);
}

void GptModel::backward(const float* p, float* g) {
  const int N = B_ * T_, C = c_.channels, F = 4 * C;
  const auto zero = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); };
  zero(dlogits_);
  k::crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(), N, c_.vocab);
  zero(dln_);
  k::matmul_backward(dln_.data(), g + wte_, nullptr, dlogits_.data(), lnf_.data(), p + wte_, N, C, c_.vocab);
  zero(dx_);
  const auto last = static_cast<std::size_t>(c_.layers);
  k::layernorm_backward(dx_.data(), g + lnfw_, g + lnfb_, dln_.data(), resid_[last].data(), p + lnfw_,
                        mf_.data(), rf_.data(), N, C);
  for (int l = c_.layers - 1; l >= 0; --l) {
    const Layer& L = layer_[static_cast<std::size_t>(l)];
    const auto i = static_cast<std::size_t>(l);
    // dx_ holds d(loss)/d(output of block l) = d/d(res1) through the MLP residual too.
    zero(dgel_);
    k::matmul_backward(dgel_.data(), g + L.wfc2, g + L.bfc2, dx_.data(), gel_[i].data(), p + L.wfc2, N, F, C);
    zero(dfc_);
    k::gelu_backward(dfc_.data(), fc_[i].data(), dgel_.data(), dfc_.size());
    zero(dln_);
    k::matmul_backward(dln_.data(), g + L.wfc, g + L.bfc, dfc_.data(), ln2_[i].data(), p + L.wfc, N, C, F);
    dres_ = dx_;
    k::layernorm_backward(dres_.data(), g + L.ln2w, g + L.ln2b, dln_.data(), res1_[i].data(), p + L.ln2w,
                          m2_[i].data(), r2_[i].data(), N, C);
    zero(datty_);
    k::matmul_backward(datty_.data(), g + L.wproj, g + L.bproj, dres_.data(), atty_[i].data(), p + L.wproj, N,
                       C, C);
    zero(dqkv_);
    k::attention_backward(dqkv_.data(), datty_.data(), qkv_[i].data(), att_[i].data(), B_, T_, C, c_.heads);
    zero(dln_);
    k::matmul_backward(dln_.data(), g + L.wqkv, g + L.bqkv, dqkv_.data(), ln1_[i].data(), p + L.wqkv, N, C,
                       3 * C);
    dx_ = dres_;
    k::layernorm_backward(dx_.data(), g + L.ln1w, g + L.ln1b, dln_.data(), resid_[i].data(), p + L.ln1w,
                          m1_[i].data(), r1_[i].data(), N, C);
  }
  k::embedding_backward(g + wte_, g + wpe_, dx_.data(), tokens_.data(), B_, T_, C);
}

}  // namespace memwall::model
