// The GPT of gpt.h (GPT-2's shape or Llama's) on a real GPU: the same graph ops, parameter layout and
// accumulate-into-gradients convention, on kernels/cuda, with every activation in the device's arena
// (allocated once, at construction: no allocator traffic while training). Parameter and gradient pointers are
// device pointers (fp32). All work goes to the device's compute stream; forward_op/backward_op return once it
// is enqueued (loss() waits for it). Compiled only with CUDA (MEMWALL_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/cuda/device.h"
#include "engine/model/gpt.h"

namespace memwall::kernels::cuda {
class Blas;
}

namespace memwall::model {

class CudaGptModel {
 public:
  // Fails (out of memory naming the activation) when the activations do not fit the device's arena.
  // bf16_matmuls: every linear's GEMM on bf16 operands with fp32 accumulation (the tensor cores' rate) and
  // the attention's batched GEMMs on TF32 tensor cores; else fp32 GEMMs (no TF32), the CPU model's
  // arithmetic.
  // activation_slots: layers whose activations are kept at once (0: all). With activation checkpointing,
  // the checkpoint interval: the residual stream is kept at every layer boundary, the rest of layer l's
  // activations in slot l % activation_slots, refilled by recomputing the layer's forward ops before its
  // backward ones (as the schedule's recompute tasks do); whole forward() / backward() passes need all.
  // flash_attention: the fused attention kernels (kernels/cuda flash_attention_*), which keep a
  // log-sum-exp per row instead of the T x T probabilities; fp32, so bf16_matmuls leaves them as they are.
  static Result<std::unique_ptr<CudaGptModel>> create(const GptConfig& c, int B, int T, int tiling,
                                                      gpu::Device& device, bool bf16_matmuls = false,
                                                      int activation_slots = 0, bool flash_attention = false);
  ~CudaGptModel();
  CudaGptModel(const CudaGptModel&) = delete;
  CudaGptModel& operator=(const CudaGptModel&) = delete;

  // Host arrays of B*T tokens and targets, copied to the device.
  Status set_batch(const int* tokens, const int* targets);
  // `param16`, when given (with bf16 GEMMs), holds bf16 copies of the op's parameters (parallel to param)
  // that a linear's GEMMs take as they are instead of rounding the fp32 weight: param[k] may be null where
  // bf16_weight(op, k), as GptModel's.
  Status forward_op(int op, const float* const* param, const std::uint16_t* const* param16 = nullptr);
  Status backward_op(int op, const float* const* param, float* const* grad,
                     const std::uint16_t* const* param16 = nullptr);
  bool bf16_weight(int op, int k) const;
  // The last forward's mean cross-entropy (waits for the compute stream), plus a mixture of experts' balance
  // losses and (unless main_only: a held-out evaluation's) mtp_weight x the next-token-prediction module's.
  Result<float> loss(bool main_only = false);
  // A mixture of experts' balance in the last forward (GptModel::expert_load; 0 without experts).
  double expert_load() const { return router_.expert_load(); }
  // DeepSeek-V3's bias rule's load errors into the correction bias's gradient (GptModel's).
  void set_router_bias_update(bool on) { bias_update_ = on; }

  // Whole passes over a flat device parameter array (and gradient array, accumulated).
  Result<float> forward(const float* params, const int* tokens, const int* targets);
  Status backward(const float* params, float* grads);

  const ModelGraph& graph() const { return g_.graph; }
  const std::vector<ParamSlice>& slices() const { return g_.slices; }
  std::size_t activation_bytes() const { return activation_bytes_; }
  // The residual stream at layer l's input in device memory, B*T*C floats (GptModel::residual).
  float* residual(int layer) const { return resid_[rin(static_cast<std::size_t>(layer))]; }

 private:
  CudaGptModel(const GptConfig& c, int B, int T, gpu::Device& device);
  Status allocate(int tiling);
  Status allocate_buffers(int tiling);
  float* buf(std::size_t floats, const char* what);
  using Part = LinearPart;
  // (rows: of in and out; 0: B x T)
  Status linear_forward(float* out, int out_width, const float* in, int in_width, const Part* parts, int n,
                        const GptOp& o, const float* residual, int rows = 0);
  Status linear_backward(float* din, const float* dout, int out_width, const float* in, int in_width,
                         const Part* parts, int n, const GptOp& o, int rows = 0);
  Status norm_forward(float* out, float* mean, float* rstd, const float* in, const float* const* p);
  // The MLP's input in activation slot a: its norm's output, the attention's norm's (shared_norm), or the
  // attention's residual sum itself (post_norm).
  const float* fc1_input(std::size_t a) const {
    return (c_.post_norm ? res1_ : c_.shared_norm() ? ln1_ : ln2_)[a];
  }
  // The attention's input in layer l (activation slot a): its norm's output, or (post_norm) the block's
  // input.
  const float* attn_input(std::size_t l, std::size_t a) const {
    return c_.post_norm ? resid_[rin(l)] : ln1_[a];
  }
  // Layer l's input in the residual stream: its index, one further on for the next-token-prediction module's
  // block (after the main model's output).
  std::size_t rin(std::size_t l) const {
    return c_.mtp > 0 && static_cast<int>(l) >= c_.main_layers() ? l + 1 : l;
  }
  // Gemma 2's norm of a sublayer's output, then the residual add: out = rmsnorm(in) + residual.
  Status post_norm_forward(float* out, const float* residual, const float* in, float* rstd,
                           const float* const* p);
  Status norm_backward(float* din, float* const* g, const float* dout, const float* in, const float* const* p,
                       const float* mean, const float* rstd);
  // The Llama shape's attention input in the [B*T, 3C] layout of the attention kernels (key/value heads
  // repeated over their groups, rotary positions on q and k), and its gradient back into dqkv_.
  Status expand_qkv(const float* qkv, int layer);
  Status temper_queries(float* rows, int layer);
  Status collapse_dqkv(int layer);
  // The latent attention's heads in the attention kernels' layout (qf_: queries, the shared rotary key and
  // the heads' own keys, values padded with zeros, rotary positions applied), and back: that layout's
  // gradient (dqf_) into the queries', kv_b_proj's output's and the rotary key part's (dq_, dkvb_, dkva_).
  Status assemble_mla(std::size_t a, int layer);
  Status scatter_mla(int layer);
  // B x T x heads: the rows of heads in the attention's output.
  std::size_t n_heads() const {
    return static_cast<std::size_t>(B_) * static_cast<std::size_t>(T_) * static_cast<std::size_t>(c_.heads);
  }
  // o_proj's input in slot a: the attention's output, or the latent attention's without its value padding.
  const float* attn_output(std::size_t a) const { return (c_.mla() ? atto_ : atty_)[a]; }
  // Columns [col0, col0 + width) of N rows of `stride` floats into dst [N][width], or (back) into them.
  Status copy_columns(float* dst, const float* src, int stride, int col0, int width, bool back);
  // Layer l's rotary table in rope_cos_ and rope_sin_ (the local base's after the global one).
  std::size_t rope_offset(int layer) const;
  Status run_op(int op, bool backward, const float* const* param, float* const* grad,
                const std::uint16_t* const* param16);
  Status forward_op_impl(int op, const float* const* param);
  Status backward_op_impl(int op, const float* const* param, float* const* grad);
  Status zero(float* p, std::size_t floats);
  Status whole_passes_allowed() const;
  // `w16`: w in bf16 already (else rounded in scratch when bf16_).
  Result<const std::uint16_t*> gemm_weight16(const float* w, const std::uint16_t* w16, int IC, int OC);
  Status gemm_forward(float* out, const float* in, const float* w, const std::uint16_t* w16, const float* b,
                      int N, int IC, int OC);
  Status gemm_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                       const std::uint16_t* w16, int N, int IC, int OC);
  Status copy(float* dst, const float* src, std::size_t floats);
  // Host <-> device copies on the compute stream that return once done (the host arrays may change then).
  Status download(void* host, const void* device, std::size_t bytes, const char* what);
  Status upload(void* device, const void* host, std::size_t bytes, const char* what);
  // A mixture of experts in layer l (slot a), forward: the router's logits copied down and routed on the host
  // (MoeRouter, as the CPU model), each expert's routing choices and the routing weights copied up, the
  // block's output started at its residual sum. Backward: the router logits' gradient from the routing
  // weights' (copied down and up again).
  Status route(std::size_t l, std::size_t a, const float* const* p);
  Status route_backward(std::size_t a, float* const* g);
  // Expert e's rows in slot a: its first routing choice in erows_/efc_/egel_/eout_ and how many it got.
  std::size_t expert_first(std::size_t a, int e) const {
    return router_.first(a, static_cast<std::size_t>(e));
  }
  int routed(std::size_t a, int e) const {
    return static_cast<int>(router_.rows(a, static_cast<std::size_t>(e)).size());
  }
  Status moe_forward(const GptOp& o, std::size_t l, std::size_t a, const float* const* p,
                     const std::function<Status(float*, int, const float*, int, const float*, int)>& linear);
  Status moe_backward(const GptOp& o, std::size_t a, float* const* g,
                      const std::function<Status(float*, const float*, int, const float*, int, int)>& linear);
  Status scale_branch(const float* d);

  GptConfig c_;
  int B_, T_;
  gpu::Device& dev_;
  kernels::cuda::Blas* blas_ = nullptr;
  GptGraph g_;
  std::vector<host::Arena::Block> blocks_;
  std::size_t activation_bytes_ = 0;
  Status alloc_error_ = Status::ok();
  bool sizing_ = false;  // allocate()'s first pass: buf() only adds up what the buffers need
  std::size_t needed_ = 0;
  bool bf16_ = false;
  bool flash_ = false;
  int slots_ = 1;  // layers' activations kept at once
  std::uint16_t *b16_in_ = nullptr, *b16_w_ = nullptr, *b16_dout_ = nullptr;
  const std::uint16_t* const* p16_ = nullptr;  // the running op's bf16 parameters, when the caller gave them
  int *tokens_ = nullptr, *targets_ = nullptr;
  std::vector<float*> resid_, ln1_, m1_, r1_, qkv_, att_, atty_, res1_, ln2_, m2_, r2_, fc_, gel_;
  std::vector<float*> qkn_, rqk_;  // with qk_norm: qkv_ with its q and k heads normed, and their rstd
  std::vector<float*> mqk_;        // and with qk_layernorm their means
  float* dqkn_ = nullptr;          // and the normed heads' gradient (one layer's)
  // With sandwich_norm: the attention's and the MLP's projected outputs and their norms' rstd (per slot);
  // backward, a projected output's gradient.
  std::vector<float*> ao_, rao_, mo_, rmo_;
  float* dpost_ = nullptr;
  float *lnf_ = nullptr, *mf_ = nullptr, *rf_ = nullptr, *logits_ = nullptr, *probs_ = nullptr,
        *losses_ = nullptr;
  // BLOOM's: the embedding before its LayerNorm, the norm's means and rstds; (backward) its gradient.
  float *emb_ = nullptr, *me_ = nullptr, *re_ = nullptr, *demb_ = nullptr;
  float *dx_ = nullptr, *dres_ = nullptr, *dln_ = nullptr, *datty_ = nullptr, *dqkv_ = nullptr,
        *dfc_ = nullptr, *dgel_ = nullptr, *dlogits_ = nullptr, *tile_ = nullptr, *scratch_ = nullptr;
  float *qf_ = nullptr, *dqf_ = nullptr;  // the Llama shape's expanded, rotated qkv and its gradient
  float* qkr_ = nullptr;                  // Llama 4's: its query and key heads' rstd [tokens][2 x heads]
  float* temper_ = nullptr;               // and its query temperature by position [T]
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // its rotary angles' table, [T][head size / 2] each
  // The next-token-prediction module's: the next tokens' embedding, normed, and the main output normed (their
  // rstd), [enorm | hnorm] (eh_proj's input), the module's output normed and its rstd, logits, probabilities
  // and losses; backward, the module's output gradient, the main output's, one half of eh_proj's input's, and
  // the next tokens' embedding's.
  float *emb_next_ = nullptr, *mtpe_ = nullptr, *rmtpe_ = nullptr, *mtph_ = nullptr, *rmtph_ = nullptr,
        *ehin_ = nullptr, *lnm_ = nullptr, *rmn_ = nullptr, *logits2_ = nullptr, *probs2_ = nullptr,
        *losses2_ = nullptr, *dmtp_ = nullptr, *dmain_ = nullptr, *dehin_ = nullptr, *dhalf_ = nullptr,
        *demb_next_ = nullptr;
  // The latent attention's, per slot: the query latent, normed, and its rstd; the queries; kv_a_proj's
  // output (the key/value latent and the rotary key part), the latent normed and its rstd; kv_b_proj's
  // output; the attention's output without the value padding. Scratch: the latent alone, and gradients.
  std::vector<float*> qa_, qan_, rqa_, q_, kva_, kvn_, rkv_, kvb_, atto_;
  float *kvc_ = nullptr, *dkvc_ = nullptr, *dkvn_ = nullptr, *dq_ = nullptr, *dkva_ = nullptr,
        *dkvb_ = nullptr, *datto_ = nullptr, *dqa_ = nullptr, *dqan_ = nullptr;
  // A mixture of experts: the routing (host), per slot every routing choice's token row (int, expert after
  // expert), the routing weights [tokens][K], the experts' fc1, SwiGLU and fc2 rows (N x K rows each) and
  // the shared expert's fc1, SwiGLU, output and gate; scratch: the router's logits, an expert's gathered
  // input, and gradients; host staging for the routing.
  MoeRouter router_;
  bool bias_update_ = false;
  std::vector<float*> erows_, ewt_, efc_, egel_, eout_, sfc_, sgel_, sout_, sgate_;
  float *rlogit_ = nullptr, *drlogit_ = nullptr, *drw_ = nullptr, *ein_ = nullptr, *dein_ = nullptr,
        *dy_ = nullptr, *degel_ = nullptr, *defc_ = nullptr, *glogit_ = nullptr, *dsout_ = nullptr,
        *load_ = nullptr;
  std::vector<float> host_logits_, host_bias_, host_drw_, host_dlogits_, host_load_;
  std::vector<int> host_rows_;
  std::vector<const float*> p_;
  std::vector<float*> gr_;
};

}  // namespace memwall::model
