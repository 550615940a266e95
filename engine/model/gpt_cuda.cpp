// GPT-2 decoder forward and backward on kernels/cuda (see gpt_cuda.h), op for op the CPU model of gpt.cpp.
#include "engine/model/gpt_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "base/units.h"
#include "cpu/gpt_ops.h"
#include "cuda/cast.h"
#include "cuda/gpt_ops.h"

namespace memwall::model {

namespace kc = memwall::kernels::cuda;

namespace {

Status check(int rc, const char* what) {
  if (rc == 0) return Status::ok();
  return Status::internal(std::string("cuda model: ") + what + ": " + kc::error_string(rc));
}

Status check_rt(cudaError_t rc, const char* what) {
  return check(static_cast<int>(rc), what);
}

}  // namespace

CudaGptModel::CudaGptModel(const GptConfig& c, int B, int T, gpu::Device& device)
    : c_(c), B_(B), T_(T), dev_(device) {}

CudaGptModel::~CudaGptModel() {
  cudaStreamSynchronize(static_cast<cudaStream_t>(dev_.compute().get()));
  for (const auto& b : blocks_) dev_.arena().release(b);
  delete blas_;
}

Result<std::unique_ptr<CudaGptModel>> CudaGptModel::create(const GptConfig& c, int B, int T, int tiling,
                                                           gpu::Device& device, bool bf16_matmuls,
                                                           int activation_slots, bool flash_attention) {
  MW_RETURN_IF_ERROR(validate(c, B, T));
  MW_RETURN_IF_ERROR(validate_tiling(c, tiling));
  if (flash_attention && c.head_size() > 256) {
    return Status::invalid_argument(
        "memwall.attention \"flash\" on the GPU takes heads of at most 256 channels (" +
        std::to_string(c.head_size()) + " here); allowed: \"unfused\"" +
        (c.head_dim > 0 ? std::string() : std::string(", or more heads")));
  }
  std::unique_ptr<CudaGptModel> m(new CudaGptModel(c, B, T, device));
  m->bf16_ = bf16_matmuls;
  m->flash_ = flash_attention;
  m->slots_ = activation_slots > 0 ? std::min(activation_slots, c.layers) : c.layers;
  int rc = 0;
  m->blas_ = kc::Blas::create(rc);
  if (m->blas_ == nullptr) return check(rc, "cublasCreate");
  MW_RETURN_IF_ERROR(check(m->blas_->set_stream(device.compute().get()), "cublasSetStream"));
  MW_RETURN_IF_ERROR(m->allocate(tiling));
  return m;
}

float* CudaGptModel::buf(std::size_t floats, const char* what) {
  if (sizing_) {
    const std::size_t a = host::Arena::kAlign;
    needed_ += (std::max<std::size_t>(1, floats) * sizeof(float) + a - 1) / a * a;
    return nullptr;
  }
  if (!alloc_error_.is_ok()) return nullptr;
  auto b = dev_.arena().allocate(std::max<std::size_t>(1, floats) * sizeof(float), what);
  if (!b.is_ok()) {
    alloc_error_ = Status(b.status().code(), "activations of the CUDA model: " + b.status().message());
    return nullptr;
  }
  blocks_.push_back(*b);
  activation_bytes_ += b->bytes;
  return static_cast<float*>(b->data);
}

// Sizes every activation first, so that a model that does not fit fails with what it needs, then allocates.
Status CudaGptModel::allocate(int tiling) {
  sizing_ = true;
  needed_ = 0;
  MW_RETURN_IF_ERROR(allocate_buffers(tiling));
  sizing_ = false;
  const std::size_t free = dev_.arena().largest_free();
  if (needed_ > free) {
    return Status::out_of_memory(
        "the GPT's activations on the GPU need " + format_bytes(static_cast<double>(needed_)) +
        " (micro-batch " + std::to_string(B_) + " x " + std::to_string(T_) + " tokens, " +
        std::to_string(c_.layers) + " layers, " +
        (flash_ ? std::string("flash attention")
                : "attention probabilities of " + std::to_string(c_.heads) + " heads x " +
                      std::to_string(T_) + "^2 per layer") +
        ") but " + dev_.arena().name() + " has " + format_bytes(static_cast<double>(free)) +
        " free; lower train_micro_batch_size_per_gpu or memwall.sequence_length");
  }
  MW_RETURN_IF_ERROR(allocate_buffers(tiling));
  if (temper_ != nullptr) {  // Llama 4's query temperature by position (the same on each layer it tempers)
    const std::vector<float> by_position = c_.query_temperatures(T_);
    MW_RETURN_IF_ERROR(
        upload(temper_, by_position.data(), by_position.size() * sizeof(float), "query temperatures"));
  }
  if (!c_.rotary()) return Status::ok();
  // The rotary angles' cosines and sines, computed on the host as the CPU model's, uploaded once.
  std::vector<float> cos_t, sin_t;
  gpt_rope_tables(c_, T_, cos_t, sin_t);
  const std::size_t bytes = cos_t.size() * sizeof(float);
  MW_RETURN_IF_ERROR(
      check_rt(cudaMemcpy(rope_cos_, cos_t.data(), bytes, cudaMemcpyHostToDevice), "rotary table"));
  return check_rt(cudaMemcpy(rope_sin_, sin_t.data(), bytes, cudaMemcpyHostToDevice), "rotary table");
}

Status CudaGptModel::allocate_buffers(int tiling) {
  g_ = make_gpt_graph(c_, B_, T_, tiling, flash_);
  const std::size_t N = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_);
  const std::size_t C = static_cast<std::size_t>(c_.channels), L = static_cast<std::size_t>(c_.layers);
  const std::size_t V = static_cast<std::size_t>(c_.vocab), Wq = static_cast<std::size_t>(c_.qkv_width()),
                    Wf = static_cast<std::size_t>(c_.fc_width()),
                    F = static_cast<std::size_t>(c_.ffn_width()), Q = static_cast<std::size_t>(c_.q_width());
  const std::size_t att = static_cast<std::size_t>(B_) * static_cast<std::size_t>(c_.heads) *
                          static_cast<std::size_t>(T_) * (flash_ ? 1 : static_cast<std::size_t>(T_));
  auto per_layer = [&](std::vector<float*>& v, std::size_t n, std::size_t count, const char* what) {
    v.clear();
    for (std::size_t l = 0; l < count; ++l) v.push_back(buf(n, what));
  };
  // The residual stream at every layer boundary (the checkpoints); the rest of a layer's activations in one
  // of slots_ slots, layer l in slot l % slots_.
  const auto S = static_cast<std::size_t>(slots_);
  // (with the next-token-prediction module one more: the main model's output, then its block's input)
  per_layer(resid_, N * C, L + 1 + static_cast<std::size_t>(c_.mtp), "residual stream");
  per_layer(ln1_, N * C, S, "ln1 output");
  per_layer(atty_, N * Q, S, "attention output");
  per_layer(res1_, N * C, S, "attention residual");
  per_layer(ln2_, N * C, S, "ln2 output");
  per_layer(m1_, N, S, "ln1 mean");
  per_layer(r1_, N, S, "ln1 rstd");
  per_layer(m2_, N, S, "ln2 mean");
  per_layer(r2_, N, S, "ln2 rstd");
  per_layer(qkv_, c_.mla() ? 0 : N * Wq, S, "qkv");  // (the latent attention keeps its own)
  if (c_.mla()) {
    const std::size_t ql = static_cast<std::size_t>(c_.q_lora), kvl = static_cast<std::size_t>(c_.kv_lora),
                      kva = kvl + static_cast<std::size_t>(c_.rope_dim),
                      kvb = static_cast<std::size_t>(c_.kv_b_width()),
                      O = static_cast<std::size_t>(c_.attn_out_width());
    if (ql > 0) {
      per_layer(qa_, N * ql, S, "query latent");
      per_layer(qan_, N * ql, S, "query latent normed");
      per_layer(rqa_, N, S, "query latent rstd");
      dqa_ = buf(N * ql, "dquery latent");
      dqan_ = buf(N * ql, "dquery latent normed");
    }
    per_layer(q_, N * Q, S, "queries");
    per_layer(kva_, N * kva, S, "key/value latent and rotary key");
    per_layer(kvn_, N * kvl, S, "key/value latent normed");
    per_layer(rkv_, N, S, "key/value latent rstd");
    per_layer(kvb_, N * kvb, S, "keys and values");
    per_layer(atto_, N * O, S, "attention output without padding");
    kvc_ = buf(N * kvl, "key/value latent");
    dkvc_ = buf(N * kvl, "dkey/value latent");
    dkvn_ = buf(N * kvl, "dkey/value latent normed");
    dq_ = buf(N * Q, "dqueries");
    dkva_ = buf(N * kva, "dkey/value latent and rotary key");
    dkvb_ = buf(N * kvb, "dkeys and values");
    datto_ = buf(N * O, "dattention output without padding");
  }
  if (c_.out_norms()) {
    per_layer(ao_, N * C, S, "attention output before its norm");
    per_layer(rao_, N, S, "attention output norm rstd");
    per_layer(mo_, N * C, S, "MLP output before its norm");
    per_layer(rmo_, N, S, "MLP output norm rstd");
  }
  if (c_.out_norms() || c_.scaled_branches()) dpost_ = buf(N * C, "dsublayer output");
  if (c_.qk_norm) {
    per_layer(qkn_, N * Wq, S, "qkv with normed heads");
    per_layer(rqk_, N * static_cast<std::size_t>(c_.heads + c_.kv_head_count()), S, "head norms' rstd");
    if (c_.qk_layernorm)
      per_layer(mqk_, N * static_cast<std::size_t>(c_.heads + c_.kv_head_count()), S, "head norms' means");
    dqkn_ = buf(N * Wq, "dqkv of normed heads");
  }
  per_layer(att_, att, S, flash_ ? "attention log-sum-exps" : "attention probabilities");
  per_layer(fc_, N * Wf, S, "fc1 output");
  per_layer(gel_, N * F, S, c_.llama() ? "swiglu output" : "gelu output");
  if (c_.bloom) {
    emb_ = buf(N * C, "embedding before its norm");
    me_ = buf(N, "embedding norm mean");
    re_ = buf(N, "embedding norm rstd");
    demb_ = buf(N * C, "dembedding");
  }
  lnf_ = buf(N * C, "final norm output");
  mf_ = buf(N, "final norm mean");
  rf_ = buf(N, "final norm rstd");
  logits_ = buf(N * V, "logits");
  probs_ = buf(N * V, "probabilities");
  losses_ = buf(N, "losses");
  dx_ = buf(N * C, "dx");
  dres_ = buf(N * C, "dresidual");
  dln_ = buf(N * C, "dln");
  datty_ = buf(N * Q, "dattention");
  dqkv_ = buf(N * Wq, "dqkv");
  dfc_ = buf(N * Wf, "dfc");
  dgel_ = buf(N * F, c_.llama() ? "dswiglu" : "dgelu");
  dlogits_ = buf(N * V, "dlogits");
  // A linear's tile, or one matrix of a fused pair (grouped-query q and kv, gate and up): at most the
  // widest matrix's rows (an untied head's vocabulary too, an expert's, the router's).
  const bool moe = c_.moe();
  const std::size_t FE = moe ? static_cast<std::size_t>(c_.expert_width()) : 0,
                    Fs = moe ? static_cast<std::size_t>(c_.shared_ffn) : 0, Fx = std::max(FE, Fs),
                    E = moe ? static_cast<std::size_t>(c_.experts) : 0;
  const std::size_t lat =
      c_.mla() ? static_cast<std::size_t>(std::max({c_.q_lora, c_.kv_lora + c_.rope_dim, c_.kv_b_width()}))
               : 0;
  const std::size_t widest = std::max({Wq, Wf, V, 4 * C, 2 * Fx, E, Q, lat});
  if (tiling > 1 || c_.llama() || c_.split_qkv()) tile_ = buf(N * widest, "tile");
  if (c_.expanded_attention() || c_.mla()) {
    qf_ = buf(N * 3 * Q, "rotated qkv");
    dqf_ = buf(N * 3 * Q, "rotated dqkv");
  }
  if (c_.qk_l2_norm) qkr_ = buf(N * 2 * static_cast<std::size_t>(c_.heads), "q/k l2 norms' rstd");
  // (Llama 4's layers without positions, every nope_every-th)
  if (!c_.query_temperatures(T_).empty())
    temper_ = buf(static_cast<std::size_t>(T_), "query temperature by position");
  if (c_.rotary()) {
    const std::size_t table = c_.rope_tables_floats(T_);
    rope_cos_ = buf(table, "rotary cosines");
    rope_sin_ = buf(table, "rotary sines");
  }
  scratch_ = buf(flash_ ? kc::flash_attention_backward_scratch(B_, T_, c_.heads, c_.gpt_oss)
                        : std::max(kc::attention_forward_scratch(B_, T_, c_.q_width()),
                                   kc::attention_backward_scratch(B_, T_, c_.q_width(), c_.heads,
                                                                  c_.attn_softcap > 0, c_.gpt_oss)),
                 "attention scratch");
  static_assert(sizeof(int) == sizeof(float), "tokens share the float arena");
  if (bf16_) {  // bf16 copies of a GEMM's operands: the widest input (4C, F or Q), weight, output gradient
    const std::size_t in = std::max({4 * C, F, Q, Fx, lat});
    b16_in_ = reinterpret_cast<std::uint16_t*>(buf((N * in + 1) / 2, "bf16 GEMM input"));
    b16_w_ = reinterpret_cast<std::uint16_t*>(buf((widest * in + 1) / 2, "bf16 GEMM weight"));
    b16_dout_ = reinterpret_cast<std::uint16_t*>(buf((N * widest + 1) / 2, "bf16 GEMM output gradient"));
  }
  if (moe) {
    const std::size_t K = static_cast<std::size_t>(c_.experts_per_token);
    router_ = MoeRouter(c_, B_, T_, slots_);
    per_layer(erows_, N * K, S, "experts' routing choices");
    per_layer(ewt_, N * K, S, "routing weights");
    per_layer(efc_, N * K * 2 * FE, S, "experts' fc1 outputs");
    per_layer(egel_, N * K * FE, S, "experts' swiglu outputs");
    per_layer(eout_, N * K * C, S, "experts' outputs");
    rlogit_ = buf(N * E, "router logits");
    drlogit_ = buf(N * E, "drouter logits");
    drw_ = buf(N * K, "drouting weights");
    ein_ = buf(N * C, "an expert's input");
    dein_ = buf(N * C, "an expert's dinput");
    dy_ = buf(N * C, "an expert's doutput");
    degel_ = buf(N * Fx, "an expert's dswiglu");
    defc_ = buf(N * 2 * Fx, "an expert's dfc1");
    load_ = buf(E, "experts' load errors");
    if (Fs > 0) {
      per_layer(sfc_, N * 2 * Fs, S, "shared expert fc1 output");
      per_layer(sgel_, N * Fs, S, "shared expert swiglu output");
      per_layer(sout_, N * C, S, "shared expert output");
      per_layer(sgate_, N, S, "shared expert gate");
      glogit_ = buf(N, "shared expert gate logits");
      dsout_ = buf(N * C, "dshared expert output");
    }
  }
  if (c_.mtp > 0) {
    for (const auto& [p, what] : {std::pair<float**, const char*>{&emb_next_, "next tokens' embedding"},
                                  {&mtpe_, "next tokens' embedding normed"},
                                  {&mtph_, "main output normed"},
                                  {&lnm_, "prediction module output normed"},
                                  {&dmtp_, "dprediction module output"},
                                  {&dmain_, "dmain output"},
                                  {&dhalf_, "deh_proj input half"},
                                  {&demb_next_, "dnext tokens' embedding"}})
      *p = buf(N * C, what);
    for (const auto& [p, what] : {std::pair<float**, const char*>{&rmtpe_, "enorm rstd"},
                                  {&rmtph_, "hnorm rstd"},
                                  {&rmn_, "prediction module norm rstd"},
                                  {&losses2_, "prediction module losses"}})
      *p = buf(N, what);
    ehin_ = buf(N * 2 * C, "eh_proj input");
    dehin_ = buf(N * 2 * C, "deh_proj input");
    logits2_ = buf(N * V, "prediction module logits");
    probs2_ = buf(N * V, "prediction module probabilities");
  }
  tokens_ = reinterpret_cast<int*>(buf(N, "tokens"));
  targets_ = reinterpret_cast<int*>(buf(N, "targets"));
  return alloc_error_;
}

Status CudaGptModel::zero(float* p, std::size_t floats) {
  return check_rt(
      cudaMemsetAsync(p, 0, floats * sizeof(float), static_cast<cudaStream_t>(dev_.compute().get())),
      "cudaMemsetAsync");
}

// Granite's: the gradient of a sublayer's output, residual_multiplier x the residual stream's (dpost_).
Status CudaGptModel::scale_branch(const float* d) {
  const std::size_t floats =
      static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_) * static_cast<std::size_t>(c_.channels);
  MW_RETURN_IF_ERROR(copy(dpost_, d, floats));
  return check(
      kc::scale_values(dpost_, floats, static_cast<float>(c_.residual_multiplier), dev_.compute().get()),
      "branch grad scale");
}

Status CudaGptModel::copy(float* dst, const float* src, std::size_t floats) {
  return check_rt(cudaMemcpyAsync(dst, src, floats * sizeof(float), cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(dev_.compute().get())),
                  "cudaMemcpyAsync");
}

Status CudaGptModel::download(void* host, const void* device, std::size_t bytes, const char* what) {
  Status st = dev_.copy_to_host(host, device, bytes, dev_.compute());
  if (st.is_ok()) st = dev_.compute().synchronize();
  return st.is_ok() ? st : Status(st.code(), std::string("cuda model: ") + what + ": " + st.message());
}

Status CudaGptModel::upload(void* device, const void* host, std::size_t bytes, const char* what) {
  Status st = dev_.copy_to_device(device, host, bytes, dev_.compute());
  if (st.is_ok()) st = dev_.compute().synchronize();
  return st.is_ok() ? st : Status(st.code(), std::string("cuda model: ") + what + ": " + st.message());
}

// The routing needs the logits on the host: the compute stream drains here once per layer of experts (as a
// dropless MoE's token counts make every GPU implementation wait), the rest of the block stays on the GPU.
Status CudaGptModel::route(std::size_t l, std::size_t a, const float* const* p) {
  const std::size_t N = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_),
                    E = static_cast<std::size_t>(c_.experts),
                    K = static_cast<std::size_t>(c_.experts_per_token);
  host_logits_.resize(N * E);
  MW_RETURN_IF_ERROR(download(host_logits_.data(), rlogit_, N * E * sizeof(float), "router logits"));
  const float* bias = nullptr;  // (GLM-4.5's and DeepSeek-V3's correction bias)
  if (c_.sigmoid_routing) {
    host_bias_.resize(E);
    MW_RETURN_IF_ERROR(download(host_bias_.data(), p[1], E * sizeof(float), "routing correction bias"));
    bias = host_bias_.data();
  }
  router_.route(l, a, host_logits_.data(), bias);
  host_rows_.clear();
  for (std::size_t e = 0; e < E; ++e) {
    const auto& rows = router_.rows(a, e);
    host_rows_.insert(host_rows_.end(), rows.begin(), rows.end());
  }
  MW_RETURN_IF_ERROR(upload(erows_[a], host_rows_.data(), N * K * sizeof(int), "routing choices"));
  MW_RETURN_IF_ERROR(upload(ewt_[a], router_.weights(a), N * K * sizeof(float), "routing weights"));
  // The experts add their weighted outputs to the attention's residual sum.
  return copy(resid_[rin(l) + 1], res1_[a], N * static_cast<std::size_t>(c_.channels));
}

Status CudaGptModel::route_backward(std::size_t a, float* const* g) {
  const std::size_t N = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_),
                    E = static_cast<std::size_t>(c_.experts),
                    K = static_cast<std::size_t>(c_.experts_per_token);
  host_drw_.resize(N * K);
  host_dlogits_.resize(N * E);
  MW_RETURN_IF_ERROR(download(host_drw_.data(), drw_, N * K * sizeof(float), "drouting weights"));
  router_.backward(a, host_drw_.data(), host_dlogits_.data());
  MW_RETURN_IF_ERROR(upload(drlogit_, host_dlogits_.data(), N * E * sizeof(float), "drouter logits"));
  if (!bias_update_ || !c_.sigmoid_routing) return Status::ok();
  // Each expert's load error, for the correction bias's rule.
  host_load_.assign(E, 0.0f);
  router_.add_load_error(a, host_load_.data());
  MW_RETURN_IF_ERROR(upload(load_, host_load_.data(), E * sizeof(float), "experts' load errors"));
  return check(kc::accumulate(g[1], load_, E, dev_.compute().get()), "load errors");
}

Status CudaGptModel::moe_forward(
    const GptOp& o, std::size_t l, std::size_t a, const float* const* p,
    const std::function<Status(float*, int, const float*, int, const float*, int)>& linear) {
  const int N = B_ * T_, C = c_.channels, FE = c_.expert_width(), Fs = c_.shared_ffn,
            K = c_.experts_per_token;
  void* s = dev_.compute().get();
  const auto branch = static_cast<float>(c_.residual_multiplier);  // (Granite MoE's; else 1)
  const std::size_t at = o.expert >= 0 ? expert_first(a, o.expert) : 0;
  const int n = o.expert >= 0 ? routed(a, o.expert) : 0;
  const int* rows = reinterpret_cast<const int*>(erows_[a]) + at;
  const auto w = static_cast<std::size_t>(FE), W = static_cast<std::size_t>(C);
  switch (o.role) {
    case GptRole::kRouter:
      MW_RETURN_IF_ERROR(linear(rlogit_, c_.experts, fc1_input(a), C, nullptr, 0));
      return route(l, a, p);
    case GptRole::kExpertFc1:
      if (n == 0) return Status::ok();
      // (Llama 4's: the routing weight scales the input)
      MW_RETURN_IF_ERROR(check(
          kc::gather_rows(ein_, fc1_input(a), rows, c_.llama4 ? ewt_[a] : nullptr, n, C, K, N, s), "gather"));
      return linear(efc_[a] + at * 2 * w, 2 * FE, ein_, C, nullptr, n);
    case GptRole::kExpertAct:
      if (n == 0) return Status::ok();
      if (c_.gpt_oss) {
        return check(
            kc::clamped_swiglu_forward(egel_[a] + at * w, efc_[a] + at * 2 * w, n, FE,
                                       GptConfig::kSwigluAlpha, static_cast<float>(c_.swiglu_limit), s),
            "expert clamped swiglu");
      }
      return check(kc::swiglu_forward(egel_[a] + at * w, efc_[a] + at * 2 * w, n, FE, s), "expert swiglu");
    case GptRole::kExpertFc2:
      // its output, kept for the routing weight's gradient, weighted into the block's
      if (n == 0) return Status::ok();
      MW_RETURN_IF_ERROR(linear(eout_[a] + at * W, C, egel_[a] + at * w, FE, nullptr, n));
      return check(kc::scatter_add_rows(resid_[rin(l) + 1], eout_[a] + at * W, rows,
                                        c_.llama4 ? nullptr : ewt_[a], branch, n, C, K, N, s),
                   "expert output");
    case GptRole::kSharedFc1:
      return linear(sfc_[a], 2 * Fs, fc1_input(a), C, nullptr, 0);
    case GptRole::kSharedAct:
      return check(kc::swiglu_forward(sgel_[a], sfc_[a], N, Fs, s), "shared swiglu");
    case GptRole::kSharedFc2:  // (GLM-4.5's, without a gate, added to the block's output here)
      MW_RETURN_IF_ERROR(linear(sout_[a], C, sgel_[a], Fs, nullptr, 0));
      if (c_.shared_gate) return Status::ok();
      return check(kc::accumulate_strided(resid_[rin(l) + 1], C, sout_[a], C, N, C, branch, s),
                   "shared output");
    case GptRole::kSharedGate:  // sigmoid(gate . x) times the shared expert's output, added to the block's
      MW_RETURN_IF_ERROR(linear(glogit_, 1, fc1_input(a), C, nullptr, 0));
      return check(kc::gated_add_forward(resid_[rin(l) + 1], sgate_[a], glogit_, sout_[a], branch, N, C, s),
                   "shared gate");
    default:
      return Status::internal("cuda model: not an op of a mixture of experts");
  }
}

Status CudaGptModel::moe_backward(
    const GptOp& o, std::size_t a, float* const* g,
    const std::function<Status(float*, const float*, int, const float*, int, int)>& linear) {
  const int N = B_ * T_, C = c_.channels, FE = c_.expert_width(), Fs = c_.shared_ffn,
            K = c_.experts_per_token;
  void* s = dev_.compute().get();
  const auto branch = static_cast<float>(c_.residual_multiplier);
  const std::size_t at = o.expert >= 0 ? expert_first(a, o.expert) : 0;
  const int n = o.expert >= 0 ? routed(a, o.expert) : 0;
  const int* rows = reinterpret_cast<const int*>(erows_[a]) + at;
  const auto w = static_cast<std::size_t>(FE), W = static_cast<std::size_t>(C),
             nc = static_cast<std::size_t>(N) * W;
  // The block's first op backward: its residual branch, no gradients at its input yet.
  const auto block_backward = [&]() -> Status {
    MW_RETURN_IF_ERROR(copy(dres_, dx_, nc));
    MW_RETURN_IF_ERROR(zero(dln_, nc));
    return zero(drw_, static_cast<std::size_t>(N) * static_cast<std::size_t>(K));
  };
  switch (o.role) {
    case GptRole::kSharedGate:
      MW_RETURN_IF_ERROR(block_backward());
      MW_RETURN_IF_ERROR(
          check(kc::gated_add_backward(dsout_, glogit_, dx_, sout_[a], sgate_[a], branch, N, C, s),
                "shared gate bwd"));
      return linear(dln_, glogit_, 1, fc1_input(a), C, 0);
    case GptRole::kSharedFc2:
      if (!c_.shared_gate) {  // the block's first op backward: the output's gradient as it is
        MW_RETURN_IF_ERROR(block_backward());
        MW_RETURN_IF_ERROR(copy(dsout_, dx_, nc));
        if (branch != 1) MW_RETURN_IF_ERROR(check(kc::scale_values(dsout_, nc, branch, s), "shared scale"));
      }
      MW_RETURN_IF_ERROR(zero(degel_, static_cast<std::size_t>(N) * static_cast<std::size_t>(Fs)));
      return linear(degel_, dsout_, C, sgel_[a], Fs, 0);
    case GptRole::kSharedAct:
      MW_RETURN_IF_ERROR(zero(defc_, static_cast<std::size_t>(N) * 2 * static_cast<std::size_t>(Fs)));
      return check(kc::swiglu_backward(defc_, sfc_[a], degel_, N, Fs, s), "shared swiglu bwd");
    case GptRole::kSharedFc1:
      return linear(dln_, defc_, 2 * Fs, fc1_input(a), C, 0);
    case GptRole::kExpertFc2:
      // (the block's first op backward without a shared expert)
      if (o.expert == c_.experts - 1 && Fs == 0) MW_RETURN_IF_ERROR(block_backward());
      if (n == 0) return Status::ok();
      // The weighted output's gradients: w dx at the output, dx . output at the weight.
      // (Llama 4's weight is the input's: ExpertFc1's)
      MW_RETURN_IF_ERROR(
          check(kc::scatter_add_rows_backward(dy_, c_.llama4 ? nullptr : drw_, dx_, eout_[a] + at * W, rows,
                                              c_.llama4 ? nullptr : ewt_[a], branch, n, C, K, N, s),
                "expert output bwd"));
      MW_RETURN_IF_ERROR(zero(degel_, static_cast<std::size_t>(n) * w));
      return linear(degel_, dy_, C, egel_[a] + at * w, FE, n);
    case GptRole::kExpertAct:
      if (n == 0) return Status::ok();
      MW_RETURN_IF_ERROR(zero(defc_, static_cast<std::size_t>(n) * 2 * w));
      if (c_.gpt_oss) {
        return check(
            kc::clamped_swiglu_backward(defc_, efc_[a] + at * 2 * w, degel_, n, FE, GptConfig::kSwigluAlpha,
                                        static_cast<float>(c_.swiglu_limit), s),
            "expert clamped swiglu bwd");
      }
      return check(kc::swiglu_backward(defc_, efc_[a] + at * 2 * w, degel_, n, FE, s), "expert swiglu bwd");
    case GptRole::kExpertFc1:  // into the rows of the MLP input's gradient its tokens read
      if (n == 0) return Status::ok();
      MW_RETURN_IF_ERROR(check(
          kc::gather_rows(ein_, fc1_input(a), rows, c_.llama4 ? ewt_[a] : nullptr, n, C, K, N, s), "gather"));
      MW_RETURN_IF_ERROR(zero(dein_, static_cast<std::size_t>(n) * W));
      MW_RETURN_IF_ERROR(linear(dein_, defc_, 2 * FE, ein_, C, n));
      // (Llama 4's input w x: w din into the input's gradient, din . x into the weight's)
      MW_RETURN_IF_ERROR(
          check(kc::scatter_add_rows(dln_, dein_, rows, c_.llama4 ? ewt_[a] : nullptr, 1.0f, n, C, K, N, s),
                "expert dinput"));
      if (!c_.llama4) return Status::ok();
      return check(kc::add_row_dots(drw_, dein_, fc1_input(a), rows, n, C, K, N, s),
                   "routing weights' gradient");
    case GptRole::kRouter:
      MW_RETURN_IF_ERROR(route_backward(a, g));
      return linear(dln_, drlogit_, c_.experts, fc1_input(a), C, 0);
    default:
      return Status::internal("cuda model: not an op of a mixture of experts");
  }
}

Status CudaGptModel::set_batch(const int* tokens, const int* targets) {
  const std::size_t bytes = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_) * sizeof(int);
  // (each waited for: the host arrays may change once this returns)
  MW_RETURN_IF_ERROR(upload(tokens_, tokens, bytes, "tokens"));
  return upload(targets_, targets, bytes, "targets");
}

Result<float> CudaGptModel::loss(bool main_only) {
  const auto N = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_);
  std::vector<float> host(N);
  MW_RETURN_IF_ERROR(download(host.data(), losses_, N * sizeof(float), "losses"));
  double total = 0;
  for (float l : host) total += static_cast<double>(l);
  auto mean = static_cast<float>(total / static_cast<double>(N));
  router_.add_losses(mean);
  if (c_.mtp == 0 || main_only || T_ < 2) return mean;
  // The module's: each sequence's mean over its T - 1 predicting positions, averaged over the sequences.
  MW_RETURN_IF_ERROR(download(host.data(), losses2_, N * sizeof(float), "prediction module losses"));
  double mtp = 0;
  for (int b = 0; b < B_; ++b) {
    double seq = 0;
    for (int t = 0; t + 1 < T_; ++t) seq += static_cast<double>(host[static_cast<std::size_t>(b * T_ + t)]);
    mtp += seq / (T_ - 1) / B_;
  }
  return mean + static_cast<float>(c_.mtp_weight * mtp);
}

// The bf16 GEMM weight [OC, IC]: the gathered bf16 copy when the op came with one, else `w` rounded in
// scratch (weights that came from bf16 shards round-trip exactly).
Result<const std::uint16_t*> CudaGptModel::gemm_weight16(const float* w, const std::uint16_t* w16, int IC,
                                                         int OC) {
  if (w16 != nullptr) return w16;
  const auto n = static_cast<std::size_t>(OC) * static_cast<std::size_t>(IC);
  MW_RETURN_IF_ERROR(check(kc::cast_f32_to_bf16(w, b16_w_, n, dev_.compute().get()), "cast weight"));
  return b16_w_;
}

// out[N, OC] = in . w^T + b: fp32 GEMM, or with bf16_matmuls the operands rounded to bf16 in scratch and a
// bf16 GEMM with fp32 accumulation.
Status CudaGptModel::gemm_forward(float* out, const float* in, const float* w, const std::uint16_t* w16,
                                  const float* b, int N, int IC, int OC) {
  void* s = dev_.compute().get();
  if (!bf16_) return check(kc::matmul_forward(*blas_, out, in, w, b, N, IC, OC, s), "matmul");
  const auto n_in = static_cast<std::size_t>(N) * static_cast<std::size_t>(IC);
  MW_RETURN_IF_ERROR(check(kc::cast_f32_to_bf16(in, b16_in_, n_in, s), "cast input"));
  auto weight = gemm_weight16(w, w16, IC, OC);
  if (!weight.is_ok()) return weight.status();
  return check(kc::matmul_forward_bf16(*blas_, out, b16_in_, *weight, b, N, IC, OC, s), "bf16 matmul");
}

Status CudaGptModel::gemm_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                                   const float* w, const std::uint16_t* w16, int N, int IC, int OC) {
  void* s = dev_.compute().get();
  if (!bf16_) return check(kc::matmul_backward(*blas_, din, dw, db, dout, in, w, N, IC, OC, s), "matmul bwd");
  const auto n = static_cast<std::size_t>(N);
  MW_RETURN_IF_ERROR(
      check(kc::cast_f32_to_bf16(dout, b16_dout_, n * static_cast<std::size_t>(OC), s), "cast dout"));
  MW_RETURN_IF_ERROR(
      check(kc::cast_f32_to_bf16(in, b16_in_, n * static_cast<std::size_t>(IC), s), "cast input"));
  auto weight = gemm_weight16(w, w16, IC, OC);
  if (!weight.is_ok()) return weight.status();
  return check(kc::matmul_backward_bf16(*blas_, din, dw, db, dout, b16_dout_, b16_in_, *weight, N, IC, OC, s),
               "bf16 matmul bwd");
}

// out[:, this tile's columns of each part] = in . w^T + b (+ residual there); each part's GEMM takes its
// gathered bf16 weight where the op came with them.
Status CudaGptModel::linear_forward(float* out, int out_width, const float* in, int in_width,
                                    const Part* parts, int n, const GptOp& o, const float* residual,
                                    int rows_in) {
  const int N = rows_in > 0 ? rows_in : B_ * T_;
  void* s = dev_.compute().get();
  const std::size_t rows = static_cast<std::size_t>(N);
  if (o.tiles == 1 && n == 1) {
    MW_RETURN_IF_ERROR(gemm_forward(out, in, parts[0].w, parts[0].w16, parts[0].b, N, in_width, out_width));
    if (residual == nullptr) return Status::ok();
    const std::size_t floats = rows * static_cast<std::size_t>(out_width);
    if (c_.scaled_branches()) {  // (Granite's residual_multiplier on the sublayer's output)
      MW_RETURN_IF_ERROR(check(kc::scale_values(out, floats, static_cast<float>(c_.residual_multiplier), s),
                               "branch scale"));
    }
    return check(kc::accumulate(out, residual, floats, s), "residual");
  }
  for (int k = 0; k < n; ++k) {
    const Part& pt = parts[k];
    const int cols = pt.rows / o.tiles, col0 = pt.col0 + o.tile * cols;
    MW_RETURN_IF_ERROR(gemm_forward(tile_, in, pt.w, pt.w16, pt.b, N, in_width, cols));
    float* dst = out + col0;
    const std::size_t pitch = static_cast<std::size_t>(out_width) * sizeof(float);
    const std::size_t width = static_cast<std::size_t>(cols) * sizeof(float);
    if (residual != nullptr) {  // the tile's columns = residual + result, as the CPU model adds them
      MW_RETURN_IF_ERROR(check_rt(cudaMemcpy2DAsync(dst, pitch, residual + col0, pitch, width, rows,
                                                    cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s)),
                                  "tile residual"));
      MW_RETURN_IF_ERROR(check(kc::accumulate_strided(dst, out_width, tile_, cols, N, cols,
                                                      static_cast<float>(c_.residual_multiplier), s),
                               "tile add"));
      continue;
    }
    MW_RETURN_IF_ERROR(check_rt(cudaMemcpy2DAsync(dst, pitch, tile_, width, width, rows,
                                                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s)),
                                "tile out"));
  }
  return Status::ok();
}

Status CudaGptModel::linear_backward(float* din, const float* dout, int out_width, const float* in,
                                     int in_width, const Part* parts, int n, const GptOp& o, int rows) {
  const int N = rows > 0 ? rows : B_ * T_;
  void* s = dev_.compute().get();
  if (o.tiles == 1 && n == 1)
    return gemm_backward(din, parts[0].dw, parts[0].db, dout, in, parts[0].w, parts[0].w16, N, in_width,
                         out_width);
  for (int k = 0; k < n; ++k) {
    const Part& pt = parts[k];
    const int cols = pt.rows / o.tiles, col0 = pt.col0 + o.tile * cols;
    const std::size_t width = static_cast<std::size_t>(cols) * sizeof(float);
    MW_RETURN_IF_ERROR(check_rt(
        cudaMemcpy2DAsync(tile_, width, dout + col0, static_cast<std::size_t>(out_width) * sizeof(float),
                          width, static_cast<std::size_t>(N), cudaMemcpyDeviceToDevice,
                          static_cast<cudaStream_t>(s)),
        "tile dout"));
    MW_RETURN_IF_ERROR(gemm_backward(din, pt.dw, pt.db, tile_, in, pt.w, pt.w16, N, in_width, cols));
  }
  return Status::ok();
}

Status CudaGptModel::norm_forward(float* out, float* mean, float* rstd, const float* in,
                                  const float* const* p) {
  const int N = B_ * T_, C = c_.channels;
  void* s = dev_.compute().get();
  if (c_.rms_norm())
    return check(
        kc::rmsnorm_forward(out, rstd, in, p[0], N, C, static_cast<float>(c_.norm_eps), s, c_.norm_offset()),
        "rmsnorm");
  return check(kc::layernorm_forward(out, mean, rstd, in, c_.norm_params ? p[0] : nullptr,
                                     c_.norm_bias() ? p[1] : nullptr, N, C, s, c_.norm_offset()),
               "layernorm");
}

Status CudaGptModel::post_norm_forward(float* out, const float* residual, const float* in, float* rstd,
                                       const float* const* p) {
  MW_RETURN_IF_ERROR(norm_forward(out, nullptr, rstd, in, p));
  const std::size_t n =
      static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_) * static_cast<std::size_t>(c_.channels);
  return check(kc::accumulate(out, residual, n, dev_.compute().get()), "residual");
}

Status CudaGptModel::norm_backward(float* din, float* const* g, const float* dout, const float* in,
                                   const float* const* p, const float* mean, const float* rstd) {
  const int N = B_ * T_, C = c_.channels;
  void* s = dev_.compute().get();
  if (c_.rms_norm()) {
    return check(kc::rmsnorm_backward(din, g[0], dout, in, p[0], rstd, N, C, s, c_.norm_offset()),
                 "rmsnorm bwd");
  }
  return check(
      kc::layernorm_backward(din, c_.norm_params ? g[0] : nullptr, c_.norm_bias() ? g[1] : nullptr, dout, in,
                             c_.norm_params ? p[0] : nullptr, mean, rstd, N, C, s, c_.norm_offset()),
      "layernorm bwd");
}

Status CudaGptModel::expand_qkv(const float* qkv, int layer) {
  const int N = B_ * T_, Q = c_.q_width(), hs = c_.head_size();
  void* s = dev_.compute().get();
  MW_RETURN_IF_ERROR(check(kc::repeat_kv(qf_, qkv, N, Q, c_.heads, c_.kv_head_count(), s), "repeat kv"));
  MW_RETURN_IF_ERROR(temper_queries(qf_, layer));
  if (!c_.rotary_at(layer))
    return Status::ok();  // (GPT-BigCode's learned positions, Cohere2's global layers)
  // q and k: 2 x heads heads of hs from the start of each 3Q row.
  const std::size_t at = c_.rope_table_offset(layer, T_);
  MW_RETURN_IF_ERROR(check(kc::rope_apply(qf_, B_, T_, 3 * Q, 2 * c_.heads, hs, rope_cos_ + at,
                                          rope_sin_ + at, false, s, c_.rotary_dim(), c_.rope_pairs()),
                           "rope"));
  if (!c_.l2_norm_at(layer)) return Status::ok();  // (Llama 4's, after the turn)
  return check(kc::l2_norm_heads(qf_, qkr_, N, 3 * Q, 2 * c_.heads, hs, static_cast<float>(c_.norm_eps), s),
               "q/k l2 norm");
}

// Llama 4's temperature on layer `layer`'s queries (its layers without positions), by position.
Status CudaGptModel::temper_queries(float* rows, int layer) {
  if (!c_.tempered(layer)) return Status::ok();
  return check(kc::scale_rows_by_position(rows, B_ * T_, T_, 3 * c_.q_width(), c_.q_width(), temper_,
                                          dev_.compute().get()),
               "query temperature");
}

Status CudaGptModel::collapse_dqkv(int layer) {
  const int N = B_ * T_, Q = c_.q_width(), hs = c_.head_size();
  void* s = dev_.compute().get();
  const std::size_t at = c_.rope_table_offset(layer, T_);
  if (c_.l2_norm_at(layer)) {  // (qf_ holds the normed heads expand_qkv left)
    MW_RETURN_IF_ERROR(
        check(kc::l2_norm_heads_backward(dqf_, qf_, qkr_, N, 3 * Q, 2 * c_.heads, hs, s), "q/k l2 norm bwd"));
  }
  if (c_.rotary_at(layer)) {
    MW_RETURN_IF_ERROR(check(kc::rope_apply(dqf_, B_, T_, 3 * Q, 2 * c_.heads, hs, rope_cos_ + at,
                                            rope_sin_ + at, true, s, c_.rotary_dim(), c_.rope_pairs()),
                             "rope bwd"));
  }
  MW_RETURN_IF_ERROR(temper_queries(dqf_, layer));
  return check(kc::sum_kv(dqkv_, dqf_, N, Q, c_.heads, c_.kv_head_count(), s), "sum kv");
}

Status CudaGptModel::copy_columns(float* dst, const float* src, int stride, int col0, int width, bool back) {
  const std::size_t pitch = static_cast<std::size_t>(stride) * sizeof(float),
                    w = static_cast<std::size_t>(width) * sizeof(float);
  auto* s = static_cast<cudaStream_t>(dev_.compute().get());
  const auto rows = static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_);
  const cudaError_t rc =
      back ? cudaMemcpy2DAsync(dst + col0, pitch, src, w, w, rows, cudaMemcpyDeviceToDevice, s)
           : cudaMemcpy2DAsync(dst, w, src + col0, pitch, w, rows, cudaMemcpyDeviceToDevice, s);
  return check_rt(rc, "columns");
}

Status CudaGptModel::assemble_mla(std::size_t a, int layer) {
  void* s = dev_.compute().get();
  const int Q = c_.q_width();
  MW_RETURN_IF_ERROR(check(kc::mla_assemble(qf_, q_[a], kva_[a], kvb_[a], B_ * T_, c_.heads, c_.head_size(),
                                            c_.rope_dim, c_.v_dim, c_.kv_lora, s),
                           "latent heads"));
  const std::size_t at = c_.rope_table_offset(layer, T_);
  return check(kc::rope_apply(qf_, B_, T_, 3 * Q, 2 * c_.heads, c_.head_size(), rope_cos_ + at,
                              rope_sin_ + at, false, s, c_.rope_dim, c_.rope_pairs()),
               "rope");
}

Status CudaGptModel::scatter_mla(int layer) {
  void* s = dev_.compute().get();
  const int Q = c_.q_width();
  const std::size_t at = c_.rope_table_offset(layer, T_);
  MW_RETURN_IF_ERROR(check(kc::rope_apply(dqf_, B_, T_, 3 * Q, 2 * c_.heads, c_.head_size(), rope_cos_ + at,
                                          rope_sin_ + at, true, s, c_.rope_dim, c_.rope_pairs()),
                           "rope bwd"));
  return check(kc::mla_scatter(dq_, dkva_, dkvb_, dqf_, B_ * T_, c_.heads, c_.head_size(), c_.rope_dim,
                               c_.v_dim, c_.kv_lora, s),
               "latent heads bwd");
}

bool CudaGptModel::bf16_weight(int op, int k) const {
  return bf16_ && linear_weight(c_, g_.ops[static_cast<std::size_t>(op)], k);
}

Status CudaGptModel::forward_op(int op, const float* const* p, const std::uint16_t* const* p16) {
  return run_op(op, false, p, nullptr, p16);
}

Status CudaGptModel::backward_op(int op, const float* const* p, float* const* g,
                                 const std::uint16_t* const* p16) {
  return run_op(op, true, p, g, p16);
}

// The op's forward or backward, with its bf16 parameters in p16_ while it runs (with bf16 GEMMs).
Status CudaGptModel::run_op(int op, bool backward, const float* const* p, float* const* g,
                            const std::uint16_t* const* p16) {
  p16_ = bf16_ ? p16 : nullptr;
  Status st = backward ? backward_op_impl(op, p, g) : forward_op_impl(op, p);
  p16_ = nullptr;
  return st;
}

Status CudaGptModel::forward_op_impl(int op, const float* const* p) {
  const GptOp& o = g_.ops[static_cast<std::size_t>(op)];
  const int N = B_ * T_, C = c_.channels, F = c_.ffn_width(), Q = c_.q_width();
  const auto l = static_cast<std::size_t>(std::max(0, std::min(o.layer, c_.layers - 1)));
  const std::size_t ri = rin(l);                               // the layer's input in the residual stream
  const std::size_t a = l % static_cast<std::size_t>(slots_);  // the layer's activation slot
  void* s = dev_.compute().get();
  const std::size_t nf = static_cast<std::size_t>(N) * static_cast<std::size_t>(F);
  Part parts[2];
  const auto linear = [&](float* out, int out_width, const float* in, int in_width, const float* residual) {
    const int n = linear_parts(c_, o, p, nullptr, parts, p16_);
    return linear_forward(out, out_width, in, in_width, parts, n, o, residual);
  };
  switch (o.role) {
    case GptRole::kEmbedNorm:  // BLOOM's, into the residual stream
      return check(kc::layernorm_forward(resid_[0], me_, re_, emb_, p[0], p[1], N, C, s), "embedding norm");
    case GptRole::kEmbed:
      MW_RETURN_IF_ERROR(check(kc::embedding_forward(c_.bloom ? emb_ : resid_[0], tokens_, p[0],
                                                     c_.learned_positions() ? p[1] + c_.position0() : nullptr,
                                                     B_, T_, C, s, c_.embedding_scale()),
                               "embedding"));
      if (c_.mtp == 0) return Status::ok();
      // each position's next token (its target), for the next-token-prediction module
      return check(
          kc::embedding_forward(emb_next_, targets_, p[0], nullptr, B_, T_, C, s, c_.embedding_scale()),
          "next tokens' embedding");
    case GptRole::kLn1:
      return norm_forward(ln1_[a], m1_[a], r1_[a], resid_[ri], p);
    case GptRole::kQkv:  // (post_norm: no norm before the attention)
      MW_RETURN_IF_ERROR(linear(qkv_[a], c_.qkv_width(), attn_input(l, a), C, nullptr));
      if (c_.clip_qkv <= 0) return Status::ok();
      return check(
          kc::clamp_forward(qkv_[a], static_cast<std::size_t>(N) * static_cast<std::size_t>(c_.qkv_width()),
                            static_cast<float>(c_.clip_qkv), s),
          "clip_qkv");
    case GptRole::kQkNorm:
      if (c_.qk_layernorm) {  // StableLM 2 12B's
        return check(kc::head_layernorm_forward(qkn_[a], mqk_[a], rqk_[a], qkv_[a], p[0], N, c_.qkv_width(),
                                                c_.heads + c_.kv_head_count(), c_.head_size(),
                                                static_cast<float>(c_.norm_eps), s),
                     "head layernorm");
      }
      return check(
          kc::head_rmsnorm_forward(qkn_[a], rqk_[a], qkv_[a], p[0], N, c_.qkv_width(), c_.qk_norm_heads(),
                                   c_.qk_norm_kv_heads(), c_.qk_norm_width(), c_.qk_norm_kv_width(),
                                   static_cast<float>(c_.norm_eps), s, c_.norm_offset()),
          "head rmsnorm");
    case GptRole::kAttn: {
      const float* qkv = c_.qk_norm ? qkn_[a] : qkv_[a];
      if (c_.mla()) {
        MW_RETURN_IF_ERROR(assemble_mla(a, o.layer));
        qkv = qf_;
      } else if (c_.expanded_attention()) {
        MW_RETURN_IF_ERROR(expand_qkv(qkv, o.layer));
        qkv = qf_;
      }
      const float* sinks = c_.gpt_oss ? p[0] : nullptr;  // (gpt-oss's sink logits)
      if (flash_) {
        MW_RETURN_IF_ERROR(check(
            kc::flash_attention_forward(atty_[a], att_[a], qkv, B_, T_, Q, c_.heads, s, c_.attention_span(l),
                                        c_.score_scale(), c_.score_cap(), c_.alibi_scale(), sinks),
            "flash attention"));
      } else {
        MW_RETURN_IF_ERROR(
            check(kc::attention_forward(*blas_, atty_[a], att_[a], qkv, B_, T_, Q, c_.heads, bf16_, scratch_,
                                        s, c_.attention_span(l), c_.score_scale(), c_.score_cap(),
                                        c_.alibi_scale(), sinks),
                  "attention"));
      }
      if (!c_.mla()) return Status::ok();
      return check(kc::narrow_heads(atto_[a], atty_[a], n_heads(), c_.head_size(), c_.v_dim, s),
                   "narrow values");
    }
    case GptRole::kProj:  // the residual added here, or (out_norms) after the output's norm
      if (c_.out_norms()) return linear(ao_[a], C, attn_output(a), c_.attn_out_width(), nullptr);
      return linear(res1_[a], C, attn_output(a), c_.attn_out_width(), resid_[ri]);
    case GptRole::kQA:
      return linear(qa_[a], c_.q_lora, attn_input(l, a), C, nullptr);
    case GptRole::kQANorm:
      return check(
          kc::rmsnorm_forward(qan_[a], rqa_[a], qa_[a], p[0], N, c_.q_lora, GptConfig::kLatentNormEps, s),
          "query latent norm");
    case GptRole::kQB:  // (q_proj without a query latent)
      if (c_.q_lora > 0) return linear(q_[a], Q, qan_[a], c_.q_lora, nullptr);
      return linear(q_[a], Q, attn_input(l, a), C, nullptr);
    case GptRole::kKvA:
      return linear(kva_[a], c_.kv_lora + c_.rope_dim, attn_input(l, a), C, nullptr);
    case GptRole::kKvANorm:  // the latent's first kv_lora columns (the rest: the rotary key part)
      MW_RETURN_IF_ERROR(copy_columns(kvc_, kva_[a], c_.kv_lora + c_.rope_dim, 0, c_.kv_lora, false));
      return check(
          kc::rmsnorm_forward(kvn_[a], rkv_[a], kvc_, p[0], N, c_.kv_lora, GptConfig::kLatentNormEps, s),
          "key/value latent norm");
    case GptRole::kKvB:
      return linear(kvb_[a], c_.kv_b_width(), kvn_[a], c_.kv_lora, nullptr);
    case GptRole::kLn1Post:
      return post_norm_forward(res1_[a], resid_[ri], ao_[a], rao_[a], p);
    case GptRole::kLn2:  // the attention's output added, or (parallel_residual) the block's input
      return norm_forward(ln2_[a], m2_[a], r2_[a], c_.parallel_residual ? resid_[ri] : res1_[a], p);
    case GptRole::kFc1:  // (one norm: the MLP reads the attention's norm's output; post_norm: res1 itself)
      return linear(fc_[a], c_.fc_width(), fc1_input(a), C, nullptr);
    case GptRole::kGelu:
      if (c_.gelu_mlp) return check(kc::geglu_forward(gel_[a], fc_[a], N, F, s), "geglu");
      if (c_.opt) return check(kc::relu_forward(gel_[a], fc_[a], nf, s), "relu");
      if (c_.nemotron) return check(kc::relu2_forward(gel_[a], fc_[a], nf, s), "relu2");
      if (c_.exact_gelu) return check(kc::gelu_exact_forward(gel_[a], fc_[a], nf, s), "gelu");
      if (c_.llama()) return check(kc::swiglu_forward(gel_[a], fc_[a], N, F, s), "swiglu");
      return check(kc::gelu_forward(gel_[a], fc_[a], nf, s), "gelu");
    case GptRole::kFc2:
      if (c_.out_norms()) return linear(mo_[a], C, gel_[a], F, nullptr);
      return linear(resid_[ri + 1], C, gel_[a], F, res1_[a]);
    case GptRole::kLn2Post:
      return post_norm_forward(resid_[ri + 1], res1_[a], mo_[a], rmo_[a], p);
    case GptRole::kFinalNorm:
      return norm_forward(lnf_, mf_, rf_, resid_[static_cast<std::size_t>(c_.main_layers())], p);
    case GptRole::kHead:  // the token embedding's rows when tied
      return linear(logits_, c_.vocab, lnf_, C, nullptr);
    case GptRole::kLoss:  // Cohere and Granite scale the logits, Gemma 2 caps them first (in place: backward
                          // takes the derivative from them)
      if (c_.logit_scale != 1) {
        MW_RETURN_IF_ERROR(check(kc::scale_values(logits_, static_cast<std::size_t>(N) * c_.vocab,
                                                  static_cast<float>(c_.logit_scale), s),
                                 "logit scale"));
      }
      if (c_.final_softcap > 0) {
        MW_RETURN_IF_ERROR(check(kc::softcap_forward(logits_, static_cast<std::size_t>(N) * c_.vocab,
                                                     static_cast<float>(c_.final_softcap), s),
                                 "logit softcap"));
      }
      return check(kc::crossentropy_forward(probs_, losses_, logits_, targets_, N, c_.vocab, s), "loss");
    case GptRole::kRouter:
    case GptRole::kExpertFc1:
    case GptRole::kExpertAct:
    case GptRole::kExpertFc2:
    case GptRole::kSharedFc1:
    case GptRole::kSharedAct:
    case GptRole::kSharedFc2:
    case GptRole::kSharedGate:
      return moe_forward(o, l, a, p,
                         [&](float* out, int ow, const float* in, int iw, const float* r, int rows) {
                           const int n = linear_parts(c_, o, p, nullptr, parts, p16_);
                           return linear_forward(out, ow, in, iw, parts, n, o, r, rows);
                         });
    case GptRole::kMtpENorm:  // the next tokens' embedding, normed (RMSNorms: no means)
      return norm_forward(mtpe_, nullptr, rmtpe_, emb_next_, p);
    case GptRole::kMtpHNorm:  // the main model's output, normed
      return norm_forward(mtph_, nullptr, rmtph_, resid_[ri - 1], p);
    case GptRole::kMtpEhProj:  // [enorm | hnorm] projected: the module's block input
      MW_RETURN_IF_ERROR(copy_columns(ehin_, mtpe_, 2 * C, 0, C, true));
      MW_RETURN_IF_ERROR(copy_columns(ehin_, mtph_, 2 * C, C, C, true));
      return linear(resid_[ri], C, ehin_, 2 * C, nullptr);
    case GptRole::kMtpNorm:  // the module's output (the stream's last), through its own norm
      return norm_forward(lnm_, nullptr, rmn_, resid_.back(), p);
    case GptRole::kMtpHead:  // the token embedding's rows when tied, as the main head
      return linear(logits2_, c_.vocab, lnm_, C, nullptr);
    case GptRole::kMtpLoss:  // position t of each sequence predicts target t + 1 (the token after the next)
      for (int b = 0; b < B_ && T_ > 1; ++b) {
        const std::size_t at = static_cast<std::size_t>(b) * static_cast<std::size_t>(T_);
        MW_RETURN_IF_ERROR(
            check(kc::crossentropy_forward(probs2_ + at * c_.vocab, losses2_ + at, logits2_ + at * c_.vocab,
                                           targets_ + at + 1, T_ - 1, c_.vocab, s),
                  "prediction module loss"));
      }
      return Status::ok();
  }
  return Status::internal("cuda model: unknown op");
}

Status CudaGptModel::backward_op_impl(int op, const float* const* p, float* const* g) {
  const GptOp& o = g_.ops[static_cast<std::size_t>(op)];
  const int N = B_ * T_, C = c_.channels, F = c_.ffn_width(), Q = c_.q_width();
  const auto l = static_cast<std::size_t>(std::max(0, std::min(o.layer, c_.layers - 1)));
  const std::size_t ri = rin(l);                               // the layer's input in the residual stream
  const std::size_t a = l % static_cast<std::size_t>(slots_);  // the layer's activation slot
  void* s = dev_.compute().get();
  const std::size_t n = static_cast<std::size_t>(N), nc = n * static_cast<std::size_t>(C),
                    nq = n * static_cast<std::size_t>(Q), nf = n * static_cast<std::size_t>(F),
                    nv = n * static_cast<std::size_t>(c_.vocab);
  // Backward visits the tiles of a linear last-first: the first visit starts the input gradient.
  const bool first_tile = o.tile == o.tiles - 1;
  Part parts[2];
  const auto linear = [&](float* din, const float* dout, int out_width, const float* in, int in_width) {
    const int k = linear_parts(c_, o, p, g, parts, p16_);
    return linear_backward(din, dout, out_width, in, in_width, parts, k, o);
  };
  switch (o.role) {
    case GptRole::kLoss:
      MW_RETURN_IF_ERROR(zero(dlogits_, nv));
      MW_RETURN_IF_ERROR(
          check(kc::crossentropy_backward(dlogits_, probs_, targets_, N, c_.vocab, s), "loss bwd"));
      if (c_.final_softcap > 0) {
        MW_RETURN_IF_ERROR(
            check(kc::softcap_backward(dlogits_, logits_, nv, static_cast<float>(c_.final_softcap), s),
                  "logit softcap bwd"));
      }
      if (c_.logit_scale == 1) return Status::ok();
      return check(kc::scale_values(dlogits_, nv, static_cast<float>(c_.logit_scale), s), "logit scale bwd");
    case GptRole::kHead:
    case GptRole::kMtpHead:  // (the module's loss backward has just written dlogits_)
      if (first_tile) MW_RETURN_IF_ERROR(zero(dln_, nc));
      return linear(dln_, dlogits_, c_.vocab, o.role == GptRole::kHead ? lnf_ : lnm_, C);
    case GptRole::kFinalNorm:
      MW_RETURN_IF_ERROR(zero(dx_, nc));
      MW_RETURN_IF_ERROR(
          norm_backward(dx_, g, dln_, resid_[static_cast<std::size_t>(c_.main_layers())], p, mf_, rf_));
      if (c_.mtp == 0) return Status::ok();
      // the module's block backward next: its output's gradient; the main output's aside
      MW_RETURN_IF_ERROR(copy(dmain_, dx_, nc));
      return copy(dx_, dmtp_, nc);
    case GptRole::kMtpLoss:  // mtp_weight x the mean over the B x (T - 1) predicting positions
      MW_RETURN_IF_ERROR(zero(dlogits_, nv));
      for (int b = 0; b < B_ && T_ > 1; ++b) {
        const std::size_t at = static_cast<std::size_t>(b) * static_cast<std::size_t>(T_);
        MW_RETURN_IF_ERROR(check(kc::crossentropy_backward(dlogits_ + at * c_.vocab, probs2_ + at * c_.vocab,
                                                           targets_ + at + 1, T_ - 1, c_.vocab, s),
                                 "prediction module loss bwd"));
      }
      return check(kc::scale_values(dlogits_, nv, static_cast<float>(c_.mtp_weight / B_), s),
                   "prediction module loss weight");
    case GptRole::kMtpNorm:
      MW_RETURN_IF_ERROR(zero(dmtp_, nc));
      return norm_backward(dmtp_, g, dln_, resid_.back(), p, nullptr, rmn_);
    case GptRole::kMtpEhProj:  // dx_: the block input's gradient
      if (first_tile) MW_RETURN_IF_ERROR(zero(dehin_, 2 * nc));
      return linear(dehin_, dx_, C, ehin_, 2 * C);
    case GptRole::kMtpHNorm:  // into the main model's output's gradient, which the main blocks' backward
                              // takes
      MW_RETURN_IF_ERROR(copy_columns(dhalf_, dehin_, 2 * C, C, C, false));
      MW_RETURN_IF_ERROR(norm_backward(dmain_, g, dhalf_, resid_[ri - 1], p, nullptr, rmtph_));
      return copy(dx_, dmain_, nc);
    case GptRole::kMtpENorm:  // into the next tokens' embedding's gradient (added to the table's at the
                              // embedding)
      MW_RETURN_IF_ERROR(copy_columns(dhalf_, dehin_, 2 * C, 0, C, false));
      MW_RETURN_IF_ERROR(zero(demb_next_, nc));
      return norm_backward(demb_next_, g, dhalf_, emb_next_, p, nullptr, rmtpe_);
    case GptRole::kLn2Post:  // dx_: the residual stream's gradient, its branch and the normed output's
      MW_RETURN_IF_ERROR(copy(dres_, dx_, nc));
      MW_RETURN_IF_ERROR(zero(dpost_, nc));
      return norm_backward(dpost_, g, dx_, mo_[a], p, nullptr, rmo_[a]);
    case GptRole::kFc2:
      if (first_tile) {
        MW_RETURN_IF_ERROR(zero(dgel_, nf));
        if (!c_.out_norms()) MW_RETURN_IF_ERROR(copy(dres_, dx_, nc));  // the MLP's residual branch
        if (c_.scaled_branches()) MW_RETURN_IF_ERROR(scale_branch(dx_));
      }
      return linear(dgel_, c_.out_norms() || c_.scaled_branches() ? dpost_ : dx_, C, gel_[a], F);
    case GptRole::kGelu:
      MW_RETURN_IF_ERROR(zero(dfc_, n * static_cast<std::size_t>(c_.fc_width())));
      if (c_.gelu_mlp) return check(kc::geglu_backward(dfc_, fc_[a], dgel_, N, F, s), "geglu bwd");
      if (c_.opt) return check(kc::relu_backward(dfc_, fc_[a], dgel_, nf, s), "relu bwd");
      if (c_.nemotron) return check(kc::relu2_backward(dfc_, fc_[a], dgel_, nf, s), "relu2 bwd");
      if (c_.exact_gelu) return check(kc::gelu_exact_backward(dfc_, fc_[a], dgel_, nf, s), "gelu bwd");
      if (c_.llama()) return check(kc::swiglu_backward(dfc_, fc_[a], dgel_, N, F, s), "swiglu bwd");
      return check(kc::gelu_backward(dfc_, fc_[a], dgel_, nf, s), "gelu bwd");
    case GptRole::kFc1:  // (post_norm: into res1's gradient, dres_, which holds the residual branch's)
      if (c_.post_norm) return linear(dres_, dfc_, c_.fc_width(), fc1_input(a), C);
      if (first_tile) MW_RETURN_IF_ERROR(zero(dln_, nc));
      return linear(dln_, dfc_, c_.fc_width(), fc1_input(a), C);
    case GptRole::kLn2:  // into res1's gradient, all of which the block's input also gets (kProj); or
                         // (parallel_residual) into the block input's, which holds the output's already
      if (c_.parallel_residual) return norm_backward(dx_, g, dln_, resid_[ri], p, m2_[a], r2_[a]);
      return norm_backward(dres_, g, dln_, res1_[a], p, m2_[a], r2_[a]);
    case GptRole::kLn1Post:
      MW_RETURN_IF_ERROR(copy(dx_, dres_, nc));  // the attention's residual branch
      MW_RETURN_IF_ERROR(zero(dpost_, nc));
      return norm_backward(dpost_, g, dres_, ao_[a], p, nullptr, rao_[a]);
    case GptRole::kProj:
      if (first_tile) {
        MW_RETURN_IF_ERROR(zero(c_.mla() ? datto_ : datty_,
                                c_.mla() ? n * static_cast<std::size_t>(c_.attn_out_width()) : nq));
        // The attention's residual branch (parallel_residual: dx_ holds it, and the MLP's norm's gradient).
        if (!c_.out_norms() && !c_.parallel_residual) MW_RETURN_IF_ERROR(copy(dx_, dres_, nc));
        if (c_.scaled_branches()) MW_RETURN_IF_ERROR(scale_branch(dres_));
      }
      return linear(c_.mla() ? datto_ : datty_, c_.out_norms() || c_.scaled_branches() ? dpost_ : dres_, C,
                    attn_output(a), c_.attn_out_width());
    case GptRole::kAttn: {
      // The expanded shapes rebuild their expanded, rotated qkv rather than keeping it per layer.
      const float* qkv = c_.qk_norm ? qkn_[a] : qkv_[a];
      float* dqkv = dqkv_;
      const float* sinks = c_.gpt_oss ? p[0] : nullptr;  // (gpt-oss's sink logits, and their gradients)
      float* dsinks = c_.gpt_oss ? g[0] : nullptr;
      if (c_.mla()) {  // (the output's gradient padded back to whole heads)
        MW_RETURN_IF_ERROR(
            check(kc::widen_heads(datty_, datto_, n_heads(), c_.head_size(), c_.v_dim, s), "widen values"));
        MW_RETURN_IF_ERROR(assemble_mla(a, o.layer));
        qkv = qf_;
        dqkv = dqf_;
      } else if (c_.expanded_attention()) {
        MW_RETURN_IF_ERROR(expand_qkv(qkv, o.layer));
        qkv = qf_;
        dqkv = dqf_;
      }
      MW_RETURN_IF_ERROR(zero(dqkv, nq * 3));
      Status st =
          flash_
              ? check(kc::flash_attention_backward(dqkv, datty_, qkv, atty_[a], att_[a], B_, T_, Q, c_.heads,
                                                   scratch_, s, c_.attention_span(l), c_.score_scale(),
                                                   c_.score_cap(), c_.alibi_scale(), sinks, dsinks),
                      "flash attention bwd")
              : check(kc::attention_backward(*blas_, dqkv, datty_, qkv, att_[a], B_, T_, Q, c_.heads, bf16_,
                                             scratch_, s, c_.attention_span(l), c_.score_scale(),
                                             c_.score_cap(), sinks, dsinks),
                      "attention bwd");
      MW_RETURN_IF_ERROR(st);
      if (c_.mla()) return scatter_mla(o.layer);
      return c_.expanded_attention() ? collapse_dqkv(o.layer) : Status::ok();
    }
    case GptRole::kKvB:
      if (first_tile) MW_RETURN_IF_ERROR(zero(dkvn_, n * static_cast<std::size_t>(c_.kv_lora)));
      return linear(dkvn_, dkvb_, c_.kv_b_width(), kvn_[a], c_.kv_lora);
    case GptRole::kKvANorm:  // into the latent's columns of kv_a_proj's output gradient (scatter_mla wrote
                             // the rest)
      MW_RETURN_IF_ERROR(copy_columns(kvc_, kva_[a], c_.kv_lora + c_.rope_dim, 0, c_.kv_lora, false));
      MW_RETURN_IF_ERROR(zero(dkvc_, n * static_cast<std::size_t>(c_.kv_lora)));
      MW_RETURN_IF_ERROR(
          check(kc::rmsnorm_backward(dkvc_, g[0], dkvn_, kvc_, p[0], rkv_[a], N, c_.kv_lora, s),
                "key/value latent norm bwd"));
      return copy_columns(dkva_, dkvc_, c_.kv_lora + c_.rope_dim, 0, c_.kv_lora, true);
    case GptRole::kKvA:  // the attention input's gradient starts here (the latents' first linear backward)
      if (first_tile) MW_RETURN_IF_ERROR(zero(dln_, nc));
      return linear(dln_, dkva_, c_.kv_lora + c_.rope_dim, attn_input(l, a), C);
    case GptRole::kQB:
      if (c_.q_lora == 0) return linear(dln_, dq_, Q, attn_input(l, a), C);
      if (first_tile) MW_RETURN_IF_ERROR(zero(dqan_, n * static_cast<std::size_t>(c_.q_lora)));
      return linear(dqan_, dq_, Q, qan_[a], c_.q_lora);
    case GptRole::kQANorm:
      MW_RETURN_IF_ERROR(zero(dqa_, n * static_cast<std::size_t>(c_.q_lora)));
      return check(kc::rmsnorm_backward(dqa_, g[0], dqan_, qa_[a], p[0], rqa_[a], N, c_.q_lora, s),
                   "query latent norm bwd");
    case GptRole::kQA:
      return linear(dln_, dqa_, c_.q_lora, attn_input(l, a), C);
    case GptRole::kQkNorm:  // dqkv_ holds the normed heads' gradient: turned into the linear's output's
      MW_RETURN_IF_ERROR(copy(dqkn_, dqkv_, n * static_cast<std::size_t>(c_.qkv_width())));
      if (c_.qk_layernorm) {
        return check(
            kc::head_layernorm_backward(dqkv_, g[0], dqkn_, qkv_[a], p[0], mqk_[a], rqk_[a], N,
                                        c_.qkv_width(), c_.heads + c_.kv_head_count(), c_.head_size(), s),
            "head layernorm bwd");
      }
      return check(kc::head_rmsnorm_backward(dqkv_, g[0], dqkn_, qkv_[a], p[0], rqk_[a], N, c_.qkv_width(),
                                             c_.qk_norm_heads(), c_.qk_norm_kv_heads(), c_.qk_norm_width(),
                                             c_.qk_norm_kv_width(), s, c_.norm_offset()),
                   "head rmsnorm bwd");
    case GptRole::kQkv:       // (one norm, Phi's or Falcon-7B's: dln_ holds the MLP's input gradient already;
                              // post_norm: into the block input's, dx_, which holds the residual branch's)
      if (c_.clip_qkv > 0) {  // (the clipped outputs pass no gradient)
        MW_RETURN_IF_ERROR(
            check(kc::clamp_backward(dqkv_, qkv_[a], n * static_cast<std::size_t>(c_.qkv_width()),
                                     static_cast<float>(c_.clip_qkv), s),
                  "clip_qkv bwd"));
      }
      if (c_.post_norm) return linear(dx_, dqkv_, c_.qkv_width(), attn_input(l, a), C);
      if (first_tile && !c_.shared_norm()) MW_RETURN_IF_ERROR(zero(dln_, nc));
      return linear(dln_, dqkv_, c_.qkv_width(), attn_input(l, a), C);
    case GptRole::kLn1:
      return norm_backward(dx_, g, dln_, resid_[ri], p, m1_[a], r1_[a]);
    case GptRole::kEmbed:
      MW_RETURN_IF_ERROR(
          check(kc::embedding_backward(g[0], c_.learned_positions() ? g[1] + c_.position0() : nullptr,
                                       c_.bloom ? demb_ : dx_, tokens_, B_, T_, C, s, c_.embedding_scale()),
                "embedding bwd"));
      if (c_.mtp == 0) return Status::ok();
      // (the next tokens' rows, read by the next-token-prediction module)
      return check(
          kc::embedding_backward(g[0], nullptr, demb_next_, targets_, B_, T_, C, s, c_.embedding_scale()),
          "next tokens' embedding bwd");
    case GptRole::kEmbedNorm:
      MW_RETURN_IF_ERROR(zero(demb_, nc));
      return check(kc::layernorm_backward(demb_, g[0], g[1], dx_, emb_, p[0], me_, re_, N, C, s),
                   "embedding norm bwd");
    case GptRole::kRouter:
    case GptRole::kExpertFc1:
    case GptRole::kExpertAct:
    case GptRole::kExpertFc2:
    case GptRole::kSharedFc1:
    case GptRole::kSharedAct:
    case GptRole::kSharedFc2:
    case GptRole::kSharedGate:
      return moe_backward(o, a, g,
                          [&](float* din, const float* dout, int ow, const float* in, int iw, int rows) {
                            const int k = linear_parts(c_, o, p, g, parts, p16_);
                            return linear_backward(din, dout, ow, in, iw, parts, k, o, rows);
                          });
  }
  return Status::internal("cuda model: unknown op");
}

// forward() and backward() run every op in turn, so they need every layer's activations kept.
Status CudaGptModel::whole_passes_allowed() const {
  if (slots_ >= c_.layers) return Status::ok();
  return Status::failed_precondition(
      "cuda model: whole passes keep every layer's activations; this model keeps " + std::to_string(slots_) +
      " of " + std::to_string(c_.layers));
}

Result<float> CudaGptModel::forward(const float* params, const int* tokens, const int* targets) {
  MW_RETURN_IF_ERROR(whole_passes_allowed());
  MW_RETURN_IF_ERROR(set_batch(tokens, targets));
  for (int op = 0; op < static_cast<int>(g_.graph.ops.size()); ++op) {
    p_.clear();
    for (int id : g_.graph.ops[static_cast<std::size_t>(op)].params)
      p_.push_back(params + g_.slices[static_cast<std::size_t>(id)].offset);
    MW_RETURN_IF_ERROR(forward_op(op, p_.data()));
  }
  return loss();
}

Status CudaGptModel::backward(const float* params, float* grads) {
  MW_RETURN_IF_ERROR(whole_passes_allowed());
  for (int op = static_cast<int>(g_.graph.ops.size()) - 1; op >= 0; --op) {
    p_.clear();
    gr_.clear();
    for (int id : g_.graph.ops[static_cast<std::size_t>(op)].params) {
      const auto off = g_.slices[static_cast<std::size_t>(id)].offset;
      p_.push_back(params + off);
      gr_.push_back(grads + off);
    }
    MW_RETURN_IF_ERROR(backward_op(op, p_.data(), gr_.data()));
  }
  return Status::ok();
}

}  // namespace memwall::model
