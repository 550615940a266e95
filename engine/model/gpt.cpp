// GPT-2 decoder forward and backward on kernels/cpu.
#include "engine/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "cpu/cast.h"
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

GptConfig gpt_config_of(const ModelSpec& m) {
  GptConfig c;
  c.vocab = m.vocab;
  c.max_seq = m.max_positions;
  c.layers = m.layers;
  c.heads = m.heads;
  c.channels = m.hidden;
  return c;
}

bool hf_transposed(const ParamTensor& t) {
  return t.shape.size() == 2 && t.name.rfind("h.", 0) == 0;
}

void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
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

namespace {
// splitmix64: a counter-based generator, so element i's value does not depend on which elements a rank holds.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// A standard normal from two uniforms derived from (seed, i) (Box-Muller, in double).
float normal_at(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t a = mix(seed ^ mix(2 * i)), b = mix(seed ^ mix(2 * i + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53,
               u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
}  // namespace

void gpt_init_range(const GptConfig& c, float* out, std::size_t begin, std::size_t end, std::uint64_t seed) {
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
  for (const auto& t : gpt_param_layout(c)) {
    const std::size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const auto ends_with = [&](const char* s) {
      const std::string suffix(s);
      return t.name.size() >= suffix.size() &&
             t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    float* p = out + (lo - begin);
    if (ends_with("bias")) {
      std::fill(p, p + (hi - lo), 0.0f);
    } else if (t.name.find("ln_") != std::string::npos) {
      std::fill(p, p + (hi - lo), 1.0f);
    } else {
      const float sd = ends_with("c_proj.weight") ? proj_std : 0.02f;
      // Counter-based: element i depends on (seed, i) only, so the loop splits over threads freely.
#pragma omp parallel for schedule(static)
      for (std::size_t i = lo; i < hi; ++i) p[i - lo] = sd * normal_at(seed, i);
    }
  }
}

void gpt_init(const GptConfig& c, float* params, std::uint64_t seed) {
  gpt_init_range(c, params, 0, gpt_num_params(c), seed);
}

GptGraph make_gpt_graph(const GptConfig& c, int B, int T, int tiling, bool flash_attention) {
  MW_CHECK(validate(c, B, T).is_ok(), "GptModel: invalid configuration (call validate first)");
  MW_CHECK(tiling >= 1 && c.channels % tiling == 0, "GptModel: channels must be divisible by tiling");
  GraphOptions opt;
  opt.tiling = tiling;
  opt.micro_batch = B;
  opt.sequence_length = T;
  opt.element_bytes = 4;
  opt.flash_attention = flash_attention;
  GptGraph out;
  out.graph = build_model_graph(gpt_model_spec(c), opt);
  auto slices = map_graph_params(out.graph, c);
  MW_CHECK(slices.is_ok(), slices.status().message());
  out.slices = std::move(slices).value();
  const std::map<std::string, GptRole> roles = {
      {"ln1", GptRole::kLn1}, {"qkv", GptRole::kQkv}, {"attn", GptRole::kAttn}, {"proj", GptRole::kProj},
      {"ln2", GptRole::kLn2}, {"fc1", GptRole::kFc1}, {"gelu", GptRole::kGelu}, {"fc2", GptRole::kFc2}};
  for (const auto& op : out.graph.ops) {
    GptOp o{GptRole::kEmbed, op.layer, op.tile, op.tiles};
    std::string name = op.name.substr(0, op.name.find('['));
    if (name == "embed") {
      o.role = GptRole::kEmbed;
    } else if (name == "final_norm") {
      o.role = GptRole::kFinalNorm;
    } else if (name == "lm_head") {
      o.role = GptRole::kHead;
    } else if (name == "loss") {
      o.role = GptRole::kLoss;
    } else {
      const auto it = roles.find(name.substr(name.find('.') + 1));
      MW_CHECK(it != roles.end(), "GptModel: unexpected graph op " + op.name);
      o.role = it->second;
    }
    out.ops.push_back(o);
  }
  return out;
}

GptModel::GptModel(const GptConfig& c, int B, int T, int tiling, bool flash_attention)
    : c_(c), B_(B), T_(T), flash_(flash_attention) {
  GptGraph gg = make_gpt_graph(c, B, T, tiling, flash_attention);
  graph_ = std::move(gg.graph);
  slices_ = std::move(gg.slices);
  info_ = std::move(gg.ops);
  const std::size_t N = static_cast<std::size_t>(B) * T, C = static_cast<std::size_t>(c.channels);
  const std::size_t att = static_cast<std::size_t>(B) * c.heads * T * (flash_attention ? 1 : T);
  auto per_layer = [&](std::vector<std::vector<float>>& v, std::size_t n, int count) {
    v.assign(static_cast<std::size_t>(count), std::vector<float>(n));
  };
  per_layer(resid_, N * C, c.layers + 1);
  for (auto* v : {&ln1_, &atty_, &res1_, &ln2_}) per_layer(*v, N * C, c.layers);
  for (auto* v : {&m1_, &r1_, &m2_, &r2_}) per_layer(*v, N, c.layers);
  per_layer(qkv_, N * 3 * C, c.layers);
  per_layer(att_, att, c.layers);
  per_layer(fc_, N * 4 * C, c.layers);
  per_layer(gel_, N * 4 * C, c.layers);
  lnf_.resize(N * C);
  mf_.resize(N);
  rf_.resize(N);
  logits_.resize(N * static_cast<std::size_t>(c.vocab));
  probs_.resize(logits_.size());
  for (auto* v : {&dx_, &dres_, &dln_, &datty_}) v->resize(N * C);
  dqkv_.resize(N * 3 * C);
  dfc_.resize(N * 4 * C);
  dgel_.resize(N * 4 * C);
  dlogits_.resize(logits_.size());
}

void GptModel::set_batch(const int* tokens, const int* targets) {
  const auto n = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_);
  tokens_.assign(tokens, tokens + n);
  targets_.assign(targets, targets + n);
}

void GptModel::params_of(int op, const float* base, float* gbase, std::vector<const float*>& p,
                         std::vector<float*>& g) const {
  p.clear();
  g.clear();
  for (int id : graph_.ops[static_cast<std::size_t>(op)].params) {
    const auto off = slices_[static_cast<std::size_t>(id)].offset;
    p.push_back(base + off);
    g.push_back(gbase != nullptr ? gbase + off : nullptr);
  }
}

float GptModel::forward(const float* params, const int* tokens, const int* targets) {
  set_batch(tokens, targets);
  for (int op = 0; op < static_cast<int>(graph_.ops.size()); ++op) {
    params_of(op, params, nullptr, p_, g_);
    forward_op(op, p_.data());
  }
  return loss_;
}

void GptModel::backward(const float* params, float* grads) {
  for (int op = static_cast<int>(graph_.ops.size()) - 1; op >= 0; --op) {
    params_of(op, params, grads, p_, g_);
    backward_op(op, p_.data(), g_.data());
  }
}

void GptModel::mm_forward(float* out, const float* in, const float* w, const float* b, int N, int IC,
                          int OC) {
  if (!bf16_) {
    k::matmul_forward(out, in, w, b, N, IC, OC);
    return;
  }
  const auto n_in = static_cast<std::size_t>(N) * static_cast<std::size_t>(IC);
  const auto n_w = static_cast<std::size_t>(OC) * static_cast<std::size_t>(IC);
  in16_.resize(n_in);
  w16_.resize(n_w);
  k::cast_f32_to_bf16(in, in16_.data(), n_in);
  k::cast_f32_to_bf16(w, w16_.data(), n_w);
  k::matmul_forward_bf16(out, in16_.data(), w16_.data(), b, N, IC, OC);
}

void GptModel::mm_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                           const float* w, int N, int IC, int OC) {
  if (!bf16_) {
    k::matmul_backward(din, dw, db, dout, in, w, N, IC, OC);
    return;
  }
  const auto n_in = static_cast<std::size_t>(N) * static_cast<std::size_t>(IC);
  const auto n_w = static_cast<std::size_t>(OC) * static_cast<std::size_t>(IC);
  const auto n_out = static_cast<std::size_t>(N) * static_cast<std::size_t>(OC);
  in16_.resize(n_in);
  w16_.resize(n_w);
  dout16_.resize(n_out);
  k::cast_f32_to_bf16(in, in16_.data(), n_in);
  k::cast_f32_to_bf16(w, w16_.data(), n_w);
  k::cast_f32_to_bf16(dout, dout16_.data(), n_out);
  k::matmul_backward_bf16(din, dw, db, dout, dout16_.data(), in16_.data(), w16_.data(), N, IC, OC);
}

// out[:, cols of tile] (row stride out_width) = in . w^T + b (+ residual at the same positions).
void GptModel::linear_forward(float* out, int out_width, const float* in, int in_width, const float* w,
                              const float* b, const OpInfo& o, const float* residual) {
  const int N = B_ * T_, cols = out_width / o.tiles, col0 = o.tile * cols;
  const auto n = static_cast<std::size_t>(N);
  if (o.tiles == 1) {
    mm_forward(out, in, w, b, N, in_width, out_width);
    if (residual != nullptr) {
      for (std::size_t j = 0; j < n * static_cast<std::size_t>(out_width); ++j) out[j] += residual[j];
    }
    return;
  }
  tile_out_.resize(n * static_cast<std::size_t>(cols));
  mm_forward(tile_out_.data(), in, w, b, N, in_width, cols);
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t at = r * static_cast<std::size_t>(out_width) + static_cast<std::size_t>(col0);
    for (int j = 0; j < cols; ++j) {
      const float v = tile_out_[r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(j)];
      out[at + static_cast<std::size_t>(j)] =
          residual != nullptr ? v + residual[at + static_cast<std::size_t>(j)] : v;
    }
  }
}

// din += dout[:, cols] . w; dw += dout[:, cols]^T . in; db += column sums.
void GptModel::linear_backward(float* din, float* dw, float* db, const float* dout, int out_width,
                               const float* in, int in_width, const float* w, const OpInfo& o) {
  const int N = B_ * T_, cols = out_width / o.tiles, col0 = o.tile * cols;
  if (o.tiles == 1) {
    mm_backward(din, dw, db, dout, in, w, N, in_width, out_width);
    return;
  }
  const auto n = static_cast<std::size_t>(N);
  tile_dout_.resize(n * static_cast<std::size_t>(cols));
  for (std::size_t r = 0; r < n; ++r) {
    std::copy_n(dout + r * static_cast<std::size_t>(out_width) + static_cast<std::size_t>(col0), cols,
                tile_dout_.data() + r * static_cast<std::size_t>(cols));
  }
  mm_backward(din, dw, db, tile_dout_.data(), in, w, N, in_width, cols);
}

void GptModel::forward_op(int op, const float* const* p) {
  const OpInfo& o = info_[static_cast<std::size_t>(op)];
  const int N = B_ * T_, C = c_.channels, F = 4 * C;
  const auto l = static_cast<std::size_t>(std::max(0, std::min(o.layer, c_.layers - 1)));
  switch (o.role) {
    case Role::kEmbed:
      k::embedding_forward(resid_[0].data(), tokens_.data(), p[0], p[1], B_, T_, C);
      break;
    case Role::kLn1:
      k::layernorm_forward(ln1_[l].data(), m1_[l].data(), r1_[l].data(), resid_[l].data(), p[0], p[1], N, C);
      break;
    case Role::kQkv:
      linear_forward(qkv_[l].data(), 3 * C, ln1_[l].data(), C, p[0], p[1], o, nullptr);
      break;
    case Role::kAttn:
      if (flash_) {
        k::flash_attention_forward(atty_[l].data(), att_[l].data(), qkv_[l].data(), B_, T_, C, c_.heads);
      } else {
        k::attention_forward(atty_[l].data(), att_[l].data(), qkv_[l].data(), B_, T_, C, c_.heads);
      }
      break;
    case Role::kProj:
      linear_forward(res1_[l].data(), C, atty_[l].data(), C, p[0], p[1], o, resid_[l].data());
      break;
    case Role::kLn2:
      k::layernorm_forward(ln2_[l].data(), m2_[l].data(), r2_[l].data(), res1_[l].data(), p[0], p[1], N, C);
      break;
    case Role::kFc1:
      linear_forward(fc_[l].data(), F, ln2_[l].data(), C, p[0], p[1], o, nullptr);
      break;
    case Role::kGelu:
      k::gelu_forward(gel_[l].data(), fc_[l].data(), gel_[l].size());
      break;
    case Role::kFc2:
      linear_forward(resid_[l + 1].data(), C, gel_[l].data(), F, p[0], p[1], o, res1_[l].data());
      break;
    case Role::kFinalNorm:
      k::layernorm_forward(lnf_.data(), mf_.data(), rf_.data(), resid_.back().data(), p[0], p[1], N, C);
      break;
    case Role::kHead:
      mm_forward(logits_.data(), lnf_.data(), p[0], nullptr, N, C, c_.vocab);
      break;
    case Role::kLoss:
      loss_ = k::crossentropy_forward(probs_.data(), logits_.data(), targets_.data(), N, c_.vocab);
      break;
  }
}

void GptModel::backward_op(int op, const float* const* p, float* const* g) {
  const OpInfo& o = info_[static_cast<std::size_t>(op)];
  const int N = B_ * T_, C = c_.channels, F = 4 * C;
  const auto l = static_cast<std::size_t>(std::max(0, std::min(o.layer, c_.layers - 1)));
  const auto zero = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); };
  // Backward visits the tiles of a linear last-first: the first visit starts the input gradient.
  const bool first_tile = o.tile == o.tiles - 1;
  switch (o.role) {
    case Role::kLoss:
      zero(dlogits_);
      k::crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(), N, c_.vocab);
      break;
    case Role::kHead:
      zero(dln_);
      mm_backward(dln_.data(), g[0], nullptr, dlogits_.data(), lnf_.data(), p[0], N, C, c_.vocab);
      break;
    case Role::kFinalNorm:
      zero(dx_);
      k::layernorm_backward(dx_.data(), g[0], g[1], dln_.data(), resid_.back().data(), p[0], mf_.data(),
                            rf_.data(), N, C);
      break;
    case Role::kFc2:
      if (first_tile) {
        zero(dgel_);
        dres_ = dx_;  // the MLP's residual branch
      }
      linear_backward(dgel_.data(), g[0], g[1], dx_.data(), C, gel_[l].data(), F, p[0], o);
      break;
    case Role::kGelu:
      zero(dfc_);
      k::gelu_backward(dfc_.data(), fc_[l].data(), dgel_.data(), dfc_.size());
      break;
    case Role::kFc1:
      if (first_tile) zero(dln_);
      linear_backward(dln_.data(), g[0], g[1], dfc_.data(), F, ln2_[l].data(), C, p[0], o);
      break;
    case Role::kLn2:
      k::layernorm_backward(dres_.data(), g[0], g[1], dln_.data(), res1_[l].data(), p[0], m2_[l].data(),
                            r2_[l].data(), N, C);
      break;
    case Role::kProj:
      if (first_tile) {
        zero(datty_);
        dx_ = dres_;  // the attention's residual branch
      }
      linear_backward(datty_.data(), g[0], g[1], dres_.data(), C, atty_[l].data(), C, p[0], o);
      break;
    case Role::kAttn:
      zero(dqkv_);
      if (flash_) {
        k::flash_attention_backward(dqkv_.data(), datty_.data(), qkv_[l].data(), atty_[l].data(),
                                    att_[l].data(), B_, T_, C, c_.heads);
      } else {
        k::attention_backward(dqkv_.data(), datty_.data(), qkv_[l].data(), att_[l].data(), B_, T_, C,
                              c_.heads);
      }
      break;
    case Role::kQkv:
      if (first_tile) zero(dln_);
      linear_backward(dln_.data(), g[0], g[1], dqkv_.data(), 3 * C, ln1_[l].data(), C, p[0], o);
      break;
    case Role::kLn1:
      k::layernorm_backward(dx_.data(), g[0], g[1], dln_.data(), resid_[l].data(), p[0], m1_[l].data(),
                            r1_[l].data(), N, C);
      break;
    case Role::kEmbed:
      k::embedding_backward(g[0], g[1], dx_.data(), tokens_.data(), B_, T_, C);
      break;
  }
}

}  // namespace memwall::model
