// GPT-2 operators on the GPU, forward and backward: the device counterparts of kernels/cpu/gpt_ops.h, with
// the same shapes, the same row-major layouts and the same accumulate-into-gradients (+=) convention, so a
// trainer can swap one for the other. Pointers are device pointers; `stream` is a cudaStream_t (nullptr =
// the default stream); every function returns the cudaError_t / cublasStatus_t of its launches as an int
// (0 = success; describe it with error_string). No CUDA header is needed to call them.
//
// Matmuls go through cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx): fp32 operands with fp32 compute
// (no TF32), or bf16 operands with fp32 accumulation and fp32 output. Reductions over rows (bias, layernorm
// weight and bias gradients, the positional embedding) are column loops, deterministic; the token
// embedding's gradient uses atomics (repeated tokens add in any order).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memwall::kernels::cuda {

// A cuBLAS handle bound to one stream.
class Blas {
 public:
  // Creates the handle (fails without a usable GPU); `status` receives 0 or the error.
  static Blas* create(int& status);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  int set_stream(void* stream);
  void* handle() const { return handle_; }

 private:
  Blas() = default;
  void* handle_ = nullptr;
};

const char* error_string(int status);  // a CUDA or cuBLAS status (cuBLAS ones are offset by kBlasError)
constexpr int kBlasError = 100000;     // cuBLAS status s is reported as kBlasError + s

// out[N, OC] = inp[N, IC] . weight[OC, IC]^T + bias[OC] (bias may be null).
int matmul_forward(Blas& blas, float* out, const float* inp, const float* weight, const float* bias, int N,
                   int IC, int OC, void* stream);
// The same with bf16 inputs and weights (fp32 accumulation and output).
int matmul_forward_bf16(Blas& blas, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                        const float* bias, int N, int IC, int OC, void* stream);
// dinp[N, IC] += dout . weight; dweight[OC, IC] += dout^T . inp; dbias[OC] += sum over rows of dout.
// Any of dinp, dweight, dbias may be null.
int matmul_backward(Blas& blas, float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, int N, int IC, int OC, void* stream);
// The same with the GEMMs on bf16 copies of dout, inp and weight (fp32 accumulation).
int matmul_backward_bf16(Blas& blas, float* dinp, float* dweight, float* dbias, const float* dout,
                         const std::uint16_t* dout16, const std::uint16_t* inp16,
                         const std::uint16_t* weight16, int N, int IC, int OC, void* stream);

// Layer normalisation over C (eps 1e-5) with affine weight and bias (a null bias: none, and dbias null; a
// null weight: 1, and dweight null: OLMo's parameter-free norm); mean and rstd [N] saved for backward.
// weight_offset is added to every weight (Nemotron's LayerNorm1P: 1).
int layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C, void* stream, float weight_offset = 0.0f);
int layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* mean, const float* rstd, int N, int C, void* stream,
                       float weight_offset = 0.0f);

// The Llama shape's operators, as kernels/cpu's: RMSNorm (rstd [N] saved; the weight's gradient a
// deterministic column reduction); rotary embedding in place on the first heads * hs floats of rows `stride`
// apart by a table of the angles' cosines and sines [T][hs/2] in device memory (kernels/cpu's rope_table,
// uploaded; inverse: the transpose, also its backward; with `rotary` < hs the first rotary channels of each
// head turn by a [T][rotary/2] table, the rest pass through); SwiGLU's silu(gate) * up over [N, 2F] -> [N,
// F].
int rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                    void* stream, float weight_offset = 0.0f);
int rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     const float* rstd, int N, int C, void* stream, float weight_offset = 0.0f);
// Qwen3's RMSNorm of each query and key head, as kernels/cpu's head_rmsnorm_*: rows of `stride` floats
// whose first NH heads of hs take weight[0, hs) and next KVH heads of khs weight[hs, hs + khs) (OLMo 2's:
// one "head" of all the queries, one of all the keys); the rest of each row is
// copied (out from inp forward, dinp from dout backward, which writes dinp and accumulates dweight);
// `weight_offset` 1 for Gemma 3's 1 + weight.
int head_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int stride,
                         int NH, int KVH, int hs, int khs, float eps, void* stream,
                         float weight_offset = 0.0f);
int head_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, const float* rstd, int N, int stride, int NH, int KVH, int hs,
                          int khs, void* stream, float weight_offset = 0.0f);
// StableLM 2 12B's per-head LayerNorms, as kernels/cpu's head_layernorm_*: the first `heads` heads of hs of
// each row (queries, then keys), each with its own weight (head h's at weight + h hs), no bias; mean and rstd
// [N][heads] saved; the rest of each row copied.
int head_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, int N,
                           int stride, int heads, int hs, float eps, void* stream);
int head_layernorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N, int stride,
                            int heads, int hs, void* stream);
int rope_apply(float* x, int B, int T, int stride, int heads, int hs, const float* cos, const float* sin,
               bool inverse, void* stream, int rotary = 0, bool pairs = false);
int swiglu_forward(float* out, const float* inp, int N, int F, void* stream);
int swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, void* stream);
// gpt-oss's clamped SwiGLU, as kernels/cpu's clamped_swiglu_*.
int clamped_swiglu_forward(float* out, const float* inp, int N, int F, float alpha, float limit, void* stream);
int clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, float alpha,
                            float limit, void* stream);
// Gemma's GeGLU: gelu(gate) * up (GELU's tanh approximation), the same layouts.
int geglu_forward(float* out, const float* inp, int N, int F, void* stream);
int geglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, void* stream);
// Grouped-query attention on the multi-head kernels: qkv3 [N, 3C] = qkv [N, C + 2 kv] with each of the KVH
// key and value heads repeated over its NH / KVH query heads; sum_kv writes dqkv [N, C + 2 kv] from the
// gradient of that layout, summing each group (no atomics: deterministic).
int repeat_kv(float* qkv3, const float* qkv, int N, int C, int NH, int KVH, void* stream);
int sum_kv(float* dqkv, const float* dqkv3, int N, int C, int NH, int KVH, void* stream);

// GELU, tanh approximation.
int gelu_forward(float* out, const float* inp, std::size_t n, void* stream);
int gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream);
// GELU exactly (erf), as kernels/cpu's gelu_exact_*.
int gelu_exact_forward(float* out, const float* inp, std::size_t n, void* stream);
int gelu_exact_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream);
// ReLU (OPT's), as kernels/cpu's: dout passed where x > 0.
int relu_forward(float* out, const float* inp, std::size_t n, void* stream);
int relu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream);
// Squared ReLU (Nemotron's relu2), as kernels/cpu's.
int relu2_forward(float* out, const float* inp, std::size_t n, void* stream);
int relu2_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream);

// Causal multi-head self-attention. qkv [B*T, 3C], out [B*T, C], att [B, NH, T, T] (softmax probabilities,
// zero above the diagonal). `scratch` holds attention_forward_scratch(B, T, C) floats. Its batched GEMMs
// take fp32 operands with fp32 accumulation; with `tf32` cuBLAS may round the operands to TF32 (10-bit
// mantissa) for the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32), several times the fp32 rate. `window` > 0:
// a sliding window, query t sees keys t - window < u <= t; < 0: chunks of -window (kernels/cpu's
// attention_window_start). `scale`
// (0: 1 / sqrt(head size)) and `softcap` (0: none) as kernels/cpu's: scores cap * tanh(scale q . k / cap);
// `alibi` > 0: plus alibi x ALiBi's alibi_slope(h, NH) x (u - t), as kernels/cpu's (backward needs no flag).
// `sinks` [NH] (gpt-oss's, or null): the head's sink logit in every row's softmax, as kernels/cpu's; backward
// adds its gradient into `dsinks` [NH] (each sequence's sum in double, as the CPU's).
std::size_t attention_forward_scratch(int B, int T, int C);
int attention_forward(Blas& blas, float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                      bool tf32, float* scratch, void* stream, int window = 0, float scale = 0,
                      float softcap = 0, float alibi = 0, const float* sinks = nullptr);
// dqkv [B*T, 3C] += the gradient; `scratch` holds attention_backward_scratch(B, T, C, NH, softcap, sinks)
// floats (with soft-capping, room for the recomputed scores too; with sinks, for each row's sink gradient).
std::size_t attention_backward_scratch(int B, int T, int C, int NH, bool softcap = false, bool sinks = false);
int attention_backward(Blas& blas, float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                       int T, int C, int NH, bool tf32, float* scratch, void* stream, int window = 0,
                       float scale = 0, float softcap = 0, const float* sinks = nullptr, float* dsinks = nullptr);
// Gemma 2's logit soft-capping in place, x = cap * tanh(x / cap), and backward dx *= 1 - (y / cap)^2 from the
// capped values y.
int softcap_forward(float* x, std::size_t n, float cap, void* stream);
int softcap_backward(float* dx, const float* y, std::size_t n, float cap, void* stream);
// OLMo 1.7's clip_qkv, as kernels/cpu's clamp_*: x clamped to [-clip, clip] in place; backward zeroes dx
// where the clamped y sits at +-clip.
int clamp_forward(float* x, std::size_t n, float clip, void* stream);
int clamp_backward(float* dx, const float* y, std::size_t n, float clip, void* stream);
// x *= s in place (Cohere's and Granite's logit_scale, Granite's sublayer outputs), as kernels/cpu's
// scale_values.
int scale_values(float* x, std::size_t n, float s, void* stream);

// Fused causal attention, the CPU's flash_attention_* on the GPU: out [B*T, C] and lse [B, NH, T] (each
// row's log-sum-exp of its scaled scores) are all it keeps; no [T, T] tensor exists. Forward runs one block
// per tile of query rows of a sequence and head (32, 16 or 8 rows for heads of up to 64, 128 or 256
// channels), walking the keys and values a tile at a time through shared memory with an online softmax.
// Backward runs one block per query tile for dq (and each row's dout . out, kept in `scratch` of
// flash_attention_backward_scratch(B, T, NH) floats), then one block per key tile for dk and dv over the
// query tiles that see it, so no two blocks add into the same gradient. fp32 on the CUDA cores: the memory of
// FlashAttention, not its tensor-core speed. Head size (C / NH) at most 256, else cudaErrorInvalidValue. A
// sliding `window` (or chunks) visits only the tiles of keys (queries) its rows see.
// `sinks` and `dsinks` as the unfused kernels' (the scratch then twice as large).
int flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                            void* stream, int window = 0, float scale = 0, float softcap = 0,
                            float alibi = 0, const float* sinks = nullptr);
std::size_t flash_attention_backward_scratch(int B, int T, int NH, bool sinks = false);
int flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH, float* scratch, void* stream,
                             int window = 0, float scale = 0, float softcap = 0, float alibi = 0,
                             const float* sinks = nullptr, float* dsinks = nullptr);

// out[B*T, C] = scale * wte[token] + wpe[t]; backward accumulates into dwte [V, C] and dwpe [T, C]. wpe and
// dwpe may be null (rotary positions); `scale` is Gemma's sqrt(C).
int embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                      void* stream, float scale = 1.0f);
int embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                       void* stream, float scale = 1.0f);

// Softmax cross-entropy over V classes: probs [N, V] and each row's loss [N] (the mean is the caller's sum
// over `losses` / N).
int crossentropy_forward(float* probs, float* losses, const float* logits, const int* targets, int N, int V,
                         void* stream);
// dlogits[N, V] += (probs - onehot(target)) / N.
int crossentropy_backward(float* dlogits, const float* probs, const int* targets, int N, int V, void* stream);

// out[i] += in[i] (residual gradients and gradient accumulation).
int accumulate(float* out, const float* in, std::size_t n, void* stream);
// out[r * ld_out + c] += scale * in[r * ld_in + c] for rows x cols (a tile's columns, scaled reductions).
int accumulate_strided(float* out, int ld_out, const float* in, int ld_in, int rows, int cols, float scale,
                       void* stream);

// A mixture of experts' rows and Qwen2-MoE's gated shared expert, as kernels/cpu's gather_rows,
// scatter_add_rows (each token at most once among `rows`), scatter_add_rows_backward, gated_add_forward and
// gated_add_backward (their dot products summed in a block's order). `tokens`: the rows of x, dst and dx
// (weight and dweight: tokens x K), for the emulated GPU's checks.
int gather_rows(float* out, const float* x, const int* rows, const float* weight, int n, int C, int K,
                int tokens, void* stream);
int scatter_add_rows(float* dst, const float* y, const int* rows, const float* weight, float scale, int n,
                     int C, int K, int tokens, void* stream);
int scatter_add_rows_backward(float* dy, float* dweight, const float* dx, const float* y, const int* rows,
                              const float* weight, float scale, int n, int C, int K, int tokens, void* stream);
int gated_add_forward(float* dst, float* s, const float* z, const float* y, float scale, int N, int C,
                      void* stream);
int gated_add_backward(float* dy, float* dz, const float* dx, const float* y, const float* s, float scale, int N,
                       int C, void* stream);
// DeepSeek's latent attention's heads into the attention kernels' layout and back, and its narrower value
// heads, as kernels/cpu's mla_assemble, mla_scatter (the rotary key's sum over the heads in their order),
// narrow_heads and widen_heads.
int mla_assemble(float* qkv, const float* q, const float* kv_a, const float* kv_b, int N, int H, int D, int R,
                 int V, int kv_lora, void* stream);
int mla_scatter(float* dq, float* dkv_a, float* dkv_b, const float* dqkv, int N, int H, int D, int R, int V,
                int kv_lora, void* stream);
int narrow_heads(float* narrow, const float* wide, std::size_t rows, int D, int V, void* stream);
// Llama 4's, as kernels/cpu's: the query and key heads' norm without weights (one thread a head, the sums in
// double), the queries' temperature by position, and the routing weights' gradient from the weighted expert
// inputs' (`tokens` as gather_rows's).
int l2_norm_heads(float* x, float* rstd, int N, int stride, int heads, int hs, float eps, void* stream);
int l2_norm_heads_backward(float* d, const float* y, const float* rstd, int N, int stride, int heads, int hs,
                           void* stream);
int scale_rows_by_position(float* rows, int N, int T, int stride, int width, const float* by_position,
                           void* stream);
int add_row_dots(float* dweight, const float* y, const float* x, const int* rows, int n, int C, int K, int tokens,
                 void* stream);
int widen_heads(float* wide, const float* narrow, std::size_t rows, int D, int V, void* stream);

}  // namespace memwall::kernels::cuda
