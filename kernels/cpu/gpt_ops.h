// GPT-2 operators on raw row-major arrays, forward and backward, fp32 compute. Gradients accumulate (+=) into
// their outputs, as a backward pass through a residual network needs. Shapes: N rows (= B*T tokens),
// C channels, NH heads, V vocabulary; `[N, C]` means N rows of C floats.
//
// Matmuls go through oneDNN when it is built in (fp32, and bf16 inputs with fp32 accumulation on this CPU's
// AMX/AVX-512-BF16 units), else through the naive reference; the choice and its measured speed are in
// docs/performance.md. Other operators are plain loops parallelised with OpenMP.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace memwall::kernels {

// out[N, OC] = inp[N, IC] . weight[OC, IC]^T + bias[OC] (bias may be null). `ld_out`: the row stride of out
// when it is OC columns of a wider array (0: OC), so a tile of a linear, or one matrix of two fused in one
// op, writes its columns in place.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                    int OC, int ld_out = 0);
// The same with bf16 inputs and weights (fp32 accumulation and output).
void matmul_forward_bf16(float* out, const std::uint16_t* inp, const std::uint16_t* weight, const float* bias,
                         int N, int IC, int OC, int ld_out = 0);
// dinp[N, IC] += dout . weight; dweight[OC, IC] += dout^T . inp; dbias[OC] += sum over rows of dout.
// Any of dinp, dweight, dbias may be null. `ld_dout`: the row stride of dout (0: OC).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, int ld_dout = 0);
// The same with the two GEMMs on bf16 operands (fp32 accumulation): `dout16` (dense [N, OC]), `inp16`,
// `weight16` are bf16 copies of dout, inp and weight; `ld_dout` is dout's row stride (for dbias).
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const std::uint16_t* dout16, const std::uint16_t* inp16,
                          const std::uint16_t* weight16, int N, int IC, int OC, int ld_dout = 0);
// Naive references (tests).
void matmul_forward_ref(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                        int OC, int ld_out = 0);
void matmul_backward_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int IC, int OC, int ld_dout = 0);
const char* matmul_backend();  // "onednn" or "reference"
// Whether the bf16 matmuls run on bf16 operands in oneDNN (this CPU has bf16 GEMM kernels: AVX-512 or AMX);
// without them they widen the operands to fp32 first (exact), the same products with fp32 accumulation.
bool matmul_bf16_native();

// Layer normalisation over C with affine weight and bias (a null bias: none, MPT's, dbias then null too; a
// null weight: 1, OLMo's parameter-free norm, dweight then null too); mean and rstd [N] are saved for
// backward. weight_offset is added to every weight (Nemotron's LayerNorm1P: 1, its weights start at 0).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float weight_offset = 0.0f);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C,
                        float weight_offset = 0.0f);

// RMS normalisation over C (Llama's RMSNorm): out = inp / sqrt(mean(inp^2) + eps) * (weight + weight_offset);
// rstd [N] saved. Gemma's scales by 1 + weight (weight_offset 1).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     float weight_offset = 0.0f);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, float weight_offset = 0.0f);
// Qwen3's RMSNorm of each query and key head: in each of N rows of `stride` floats, the first NH heads of hs
// (the queries) normalised with weight[0, hs) and the next KVH heads of khs (the keys) with weight[hs, hs +
// khs) (Qwen3's heads: khs = hs; OLMo 2's one "head" of all the queries and one of all the keys: NH = KVH =
// 1, khs the key width, narrower with grouped-query attention); out has the same layout (or is inp), the rest
// of each row (the values) copied. rstd [N][NH + KVH] saved for backward, which writes dinp (same layout: the
// heads' gradients, the rest of dout's rows copied) and accumulates dweight. `weight_offset` 1: Gemma 3's
// heads scaled by 1 + weight.
void head_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int stride,
                          int NH, int KVH, int hs, int khs, float eps, float weight_offset = 0.0f);
void head_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int N, int stride, int NH, int KVH, int hs,
                           int khs, float weight_offset = 0.0f);
// StableLM 2 12B's per-head LayerNorms of the queries and keys (qk_layernorm): in each of N rows of `stride`
// floats, the first `heads` heads of hs (the query heads, then the key heads) each normalised by a LayerNorm
// without bias with its own weight (head h's at weight + h hs); out has the same layout (or is inp), the rest
// of each row copied; mean and rstd [N][heads] saved. Backward writes dinp (the rest of dout's rows copied)
// and accumulates dweight.
void head_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            int N, int stride, int heads, int hs, float eps);
void head_layernorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N, int stride,
                             int heads, int hs);

// Rotary position embedding, in place, in Hugging Face Llama's layout (each head's halves are the pairs:
// element i turns with i + hs/2 by (pos0 + t) * inv_freq[i]; inv_freq [hs/2] is theta^(-2i/hs), scaled as
// the model's rope_scaling says). x: B*T rows of `stride` floats, the first heads * hs of which are rotated.
// `inverse` applies the transpose (the backward): turning back by the same angles, times the same `scale`.
// `pairs` (Cohere's): element 2i turns with 2i + 1 by the same angle instead (neighbouring pairs).
void rope_rotate(float* x, int B, int T, int stride, int heads, int hs, const double* inv_freq, int pos0,
                 bool inverse, double scale = 1.0, int rotary = 0, bool pairs = false);
// The same in two parts: the angles' cosines and sines for positions pos0 .. pos0 + T - 1, [T][hs/2] each
// (computed in double, then rounded), and the rotation by them (a model computes the table once).
// `scale` multiplies both (YaRN's and longrope's attention factor: queries and keys rotated and scaled).
// With `rotary` (0: hs) channels of each head of hs turned, the table is [T][rotary/2] (rope_table's hs is
// then `rotary`): element i turns with i + rotary/2 and channels rotary .. hs - 1 pass through (Phi-4-mini's
// partial rotary).
void rope_table(float* cos, float* sin, int T, int hs, const double* inv_freq, int pos0, double scale = 1.0);
void rope_apply(float* x, int B, int T, int stride, int heads, int hs, const float* cos, const float* sin,
                bool inverse, int rotary = 0, bool pairs = false);

// Grouped-query attention on the multi-head kernels: qkv3 [N, 3C] = qkv [N, C + 2 kv] (kv = KVH * C / NH)
// with each of the KVH key and value heads repeated over its NH / KVH query heads; sum_kv writes dqkv
// [N, C + 2 kv] from the gradient of that layout, each key/value head's the sum over its group (the adjoint).
void repeat_kv(float* qkv3, const float* qkv, int N, int C, int NH, int KVH);
void sum_kv(float* dqkv, const float* dqkv3, int N, int C, int NH, int KVH);

// SwiGLU's product: inp [N, 2F] holds gate then up; out [N, F] = silu(gate) * up.
void swiglu_forward(float* out, const float* inp, int N, int F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F);
// gpt-oss's clamped SwiGLU over the same layout: with g = min(gate, limit), u = clamp(up, -limit, limit),
// out = (u + 1) g sigmoid(alpha g); backward passes no gradient where the clamps cut (torch.clamp's).
void clamped_swiglu_forward(float* out, const float* inp, int N, int F, float alpha, float limit);
void clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, float alpha,
                             float limit);
// GeGLU's (Gemma's): out = gelu(gate) * up, GELU's tanh approximation (transformers' gelu_pytorch_tanh).
void geglu_forward(float* out, const float* inp, int N, int F);
void geglu_backward(float* dinp, const float* inp, const float* dout, int N, int F);

// GELU, tanh approximation (GPT-2's gelu_new).
void gelu_forward(float* out, const float* inp, std::size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);
// GELU exactly, 0.5 x (1 + erf(x / sqrt 2)) (transformers' "gelu", PyTorch's default; Cerebras-GPT's MLP).
void gelu_exact_forward(float* out, const float* inp, std::size_t n);
void gelu_exact_backward(float* dinp, const float* inp, const float* dout, std::size_t n);
// ReLU (OPT's MLP): out = max(x, 0); backward adds dout where x > 0 (PyTorch's threshold_backward: none at
// 0).
void relu_forward(float* out, const float* inp, std::size_t n);
void relu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);
// Squared ReLU (Nemotron's relu2): out = max(x, 0)^2; backward adds 2 max(x, 0) dout.
void relu2_forward(float* out, const float* inp, std::size_t n);
void relu2_backward(float* dinp, const float* inp, const float* dout, std::size_t n);

// Causal multi-head self-attention. qkv [B*T, 3C] (q, k, v concatenated), out [B*T, C];
// att [B, NH, T, T] holds the softmax probabilities for backward: the entries of each row's block of keys
// (score_blocks in gpt_ops.cpp, docs/kernels.md: the whole row below 128 tokens; from 128 tokens the keys up
// to its block's last row, or its window's or chunk's block), zero there outside the row's keys; the rest of
// the row is not written. `window` > 0 is a sliding window
// (Mistral's sliding_window): query t sees keys t - window < u <= t only, as transformers masks it; `window`
// < 0 chunks of -window positions (Llama 4's attention_chunk_size): query t sees keys u <= t of its own
// chunk, u / -window == t / -window (attention_window_start). The
// scores are q . k times `scale` (0: 1 / sqrt(C / NH); Gemma 2's query_pre_attn_scalar^-1/2), then with
// `softcap` > 0 softcap * tanh(score / softcap) (Gemma 2's attn_logit_softcapping) before the softmax;
// backward recomputes the scores to take the cap's derivative.
// `alibi` > 0: ALiBi's linear biases, alibi x alibi_slope(h, NH) x (u - t) added to head h's score of key u
// for query t (after the scale and any cap), instead of positions in the embedding: BLOOM's at 1, Falcon's
// (which adds them before the scale) at the scale. Backward reads the probabilities and needs no flag (a
// cap's derivative is of the score before the bias).
// `sinks` [NH] (gpt-oss's, or null): head h's sink logit joins every row's softmax as one more score whose
// value is nothing (its probability only shrinks the others'); backward adds each logit's gradient,
// -p_sink x sum_u p_u dp_u over the rows, into `dsinks` [NH].
// `values` > 0 (DeepSeek's latent attention: values of v_head_dim narrower than the query and key heads):
// only the first `values` channels of each head's value are values (the rest zero padding, as are the
// output gradient's there); the kernels compute only those, write zeros to the output's others and leave
// the value gradient's others as they are.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int window = 0,
                       float scale = 0, float softcap = 0, float alibi = 0, const float* sinks = nullptr,
                       int values = 0);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                        int C, int NH, int window = 0, float scale = 0, float softcap = 0,
                        const float* sinks = nullptr, float* dsinks = nullptr, int values = 0);
// Loop references (tests); the functions above use batched GEMMs on strided views when oneDNN is built in.
void attention_forward_ref(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                           int window = 0, float scale = 0, float softcap = 0, float alibi = 0,
                           const float* sinks = nullptr);
void attention_backward_ref(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                            int C, int NH, int window = 0, float scale = 0, float softcap = 0,
                            const float* sinks = nullptr, float* dsinks = nullptr);
// The attention's score scale: `scale`, or 0 for 1 / sqrt(head size).
inline float attention_scale(float scale, int hs) {
  return scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(hs));
}
// Gemma 2's soft-capping: cap * tanh(x / cap), or x without a cap (cap 0).
inline float soft_cap(float x, float cap) {
  return cap > 0 ? cap * std::tanh(x / cap) : x;
}
// In place over n values (the logits: Gemma 2's final_logit_softcapping); backward multiplies the gradient
// by the cap's derivative, 1 - (y / cap)^2, from the capped values y.
void softcap_forward(float* x, std::size_t n, float cap);
void softcap_backward(float* dx, const float* y, std::size_t n, float cap);
// OLMo 1.7's clip_qkv: x clamped to [-clip, clip] in place (n values: the q, k and v rows); backward zeroes
// the gradient where the clamped value y sits at +-clip (the input was clipped; an input exactly at +-clip,
// which torch's clamp passes, is lost with it: a set of measure zero).
void clamp_forward(float* x, std::size_t n, float clip);
void clamp_backward(float* dx, const float* y, std::size_t n, float clip);
// x *= s in place over n values (Cohere's and Granite's logit_scale on the logits, and on their gradient
// backward).
void scale_values(float* x, std::size_t n, float s);
// ALiBi's slope of head h of NH, as BLOOM's build_alibi_tensor (and the ALiBi paper) has it: with p the
// largest power of two <= NH, heads h < p get 2^(-8 (h + 1) / p), the others the odd powers 1, 3, 5, ... of
// 2^(-4 / p) in turn.
inline float alibi_slope(int h, int NH) {
  int p = 1;
  while (p * 2 <= NH) p *= 2;
  const double e = h < p ? 8.0 * (h + 1) / p : 4.0 * (2 * (h - p) + 1) / p;
  return static_cast<float>(std::exp2(-e));
}
// The slope an attention kernel adds for head h: `alibi` (its slope multiplier) x alibi_slope, or 0 without
// ALiBi (alibi 0).
inline float alibi_head_slope(float alibi, int h, int NH) {
  return alibi != 0 ? alibi * alibi_slope(h, NH) : 0.0f;
}
// The first key query t sees: 0, t - window + 1 with a sliding window (window > 0), or its chunk's first
// position with chunks of -window (window < 0). Never decreasing in t, so a block of rows sees no key before
// its first row's.
inline int attention_window_start(int t, int window) {
  if (window < 0) return t - t % -window;
  return window > 0 && t >= window ? t - window + 1 : 0;
}

// Fused causal attention (FlashAttention's memory scheme, row by row): keeps only out [B*T, C] and
// lse [B, NH, T], each row's log-sum-exp of its scaled scores; no [T, T] tensor exists outside one row of
// per-thread scratch. Backward recomputes each row's probabilities from qkv and lse, and takes the
// softmax's row sums as dout . out. With a sliding `window` only the key tiles a row block sees are visited.
// `values` as attention_forward's.
void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                             int window = 0, float scale = 0, float softcap = 0, float alibi = 0,
                             const float* sinks = nullptr, int values = 0);
void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH, int window = 0, float scale = 0,
                              float softcap = 0, float alibi = 0, const float* sinks = nullptr,
                              float* dsinks = nullptr, int values = 0);

// out[B*T, C] = scale * wte[token] + wpe[t]; backward accumulates into dwte [V, C] and dwpe [T, C]. wpe and
// dwpe may be null (no position table: rotary positions); `scale` is Gemma's sqrt(C) (else 1).
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       float scale = 1.0f);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                        float scale = 1.0f);

// Softmax cross-entropy over V classes: probs [N, V]; returns the mean loss over the N rows.
float crossentropy_forward(float* probs, const float* logits, const int* targets, int N, int V);
// dlogits[N, V] += (probs - onehot(target)) / N (the gradient of the mean loss).
void crossentropy_backward(float* dlogits, const float* probs, const int* targets, int N, int V);

// A mixture of experts' rows. An expert's n routing choices rows[i] (token x K + choice, K experts per token;
// each token at most once) and the tokens' rows of C: out[i, :] = x[rows[i] / K, :], times weight[rows[i]]
// where `weight` (a routing weight per choice) is given (Llama 4's weighted input).
void gather_rows(float* out, const float* x, const int* rows, const float* weight, int n, int C, int K);
// dst[rows[i] / K, :] += w y[i, :], w = scale x weight[rows[i]] (scale alone without `weight`): the experts'
// weighted outputs into the block's, their inputs' gradients into the MLP input's.
void scatter_add_rows(float* dst, const float* y, const int* rows, const float* weight, float scale, int n,
                      int C, int K);
// Its backward at y and the weights: dy[i, :] = w dx[rows[i] / K, :] and (where dweight is given)
// dweight[rows[i]] = scale (dx[rows[i] / K, :] . y[i, :]), both written.
void scatter_add_rows_backward(float* dy, float* dweight, const float* dx, const float* y, const int* rows,
                               const float* weight, float scale, int n, int C, int K);
// A sigmoid-gated branch (Qwen2-MoE's shared expert): s[t] = sigmoid(z[t]) written, dst[t, :] += scale s[t]
// y[t, :] over N rows of C; backward writes dy[t, :] = scale s[t] dx[t, :] and dz[t] = scale (dx[t, :] .
// y[t, :]) s[t] (1 - s[t]).
void gated_add_forward(float* dst, float* s, const float* z, const float* y, float scale, int N, int C);
// DeepSeek's latent attention: N tokens' H heads of D = P + R channels (P without positions, R rotary). Into
// qkv [N][3 H D], the attention kernels' layout: each query head's rotary part first (from q [N][H D]'s
// [P | R] per head), each key head the token's one rotary key (kv_a [N][kv_lora + R], its last R) then its
// own P (kv_b [N][H (P + V)], the first P per head), each value head its V then zeros to D.
void mla_assemble(float* qkv, const float* q, const float* kv_a, const float* kv_b, int N, int H, int D,
                  int R, int V, int kv_lora);
// Back: qkv's gradient into dq and dkv_b (written whole) and kv_a's rotary columns (written: the sum over
// the heads' keys, head after head); kv_a's first kv_lora columns are left as they are.
void mla_scatter(float* dq, float* dkv_a, float* dkv_b, const float* dqkv, int N, int H, int D, int R, int V,
                 int kv_lora);
// The first V of each of `rows` heads of D: narrow [rows][V] from wide [rows][D], or wide from narrow with
// zeros past V (the latent attention's value heads, narrower than its query and key heads).
void narrow_heads(float* narrow, const float* wide, std::size_t rows, int D, int V);
// Llama 4's norm without weights of the first `heads` heads of hs in each of N rows of `stride` floats, in
// place: x / sqrt(mean(x^2) + eps) (the mean in double), each head's 1 / sqrt(...) into rstd [N][heads] (if
// not null). Backward, in place on the heads' gradient d, from the normed heads y and rstd: rstd (d - y
// mean(d . y)).
void l2_norm_heads(float* x, float* rstd, int N, int stride, int heads, int hs, float eps);
void l2_norm_heads_backward(float* d, const float* y, const float* rstd, int N, int stride, int heads,
                            int hs);
// The first `width` floats of each of N rows of `stride` times their position's by_position[n % T] (Llama 4's
// query temperature, forward and on the gradient).
void scale_rows_by_position(float* rows, int N, int T, int stride, int width, const float* by_position);
// dweight[rows[i]] += y[i, :] . x[rows[i] / K, :] over an expert's n rows (Llama 4's routing weights'
// gradient from its weighted inputs').
void add_row_dots(float* dweight, const float* y, const float* x, const int* rows, int n, int C, int K);
void widen_heads(float* wide, const float* narrow, std::size_t rows, int D, int V);
void gated_add_backward(float* dy, float* dz, const float* dx, const float* y, const float* s, float scale,
                        int N, int C);

}  // namespace memwall::kernels
