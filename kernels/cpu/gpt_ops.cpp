// GPT-2 operators (see gpt_ops.h): OpenMP loops; matmuls through oneDNN when available.
#include "cpu/gpt_ops.h"

#include "cpu/cast.h"
#include "cpu/vexp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#if MEMWALL_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace memwall::kernels {

// ---- matmul ----

void matmul_forward_ref(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                        int OC, int ld_out) {
  const std::size_t ld = static_cast<std::size_t>(ld_out > 0 ? ld_out : OC);
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int i = 0; i < IC; ++i)
        acc += static_cast<double>(inp[static_cast<std::size_t>(n) * IC + i]) *
               weight[static_cast<std::size_t>(o) * IC + i];
      out[static_cast<std::size_t>(n) * ld + o] = static_cast<float>(acc);
    }
  }
}

void matmul_backward_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int IC, int OC, int ld_dout) {
  const std::size_t ld = static_cast<std::size_t>(ld_dout > 0 ? ld_dout : OC);
  if (dinp) {
#pragma omp parallel for
    for (int n = 0; n < N; ++n) {
      for (int i = 0; i < IC; ++i) {
        double acc = 0;
        for (int o = 0; o < OC; ++o)
          acc += static_cast<double>(dout[static_cast<std::size_t>(n) * ld + o]) *
                 weight[static_cast<std::size_t>(o) * IC + i];
        dinp[static_cast<std::size_t>(n) * IC + i] += static_cast<float>(acc);
      }
    }
  }
  if (dweight) {
#pragma omp parallel for
    for (int o = 0; o < OC; ++o) {
      for (int i = 0; i < IC; ++i) {
        double acc = 0;
        for (int n = 0; n < N; ++n)
          acc += static_cast<double>(dout[static_cast<std::size_t>(n) * ld + o]) *
                 inp[static_cast<std::size_t>(n) * IC + i];
        dweight[static_cast<std::size_t>(o) * IC + i] += static_cast<float>(acc);
      }
    }
  }
  if (dbias) {
    for (int o = 0; o < OC; ++o) {
      double acc = 0;
      for (int n = 0; n < N; ++n) acc += dout[static_cast<std::size_t>(n) * ld + o];
      dbias[o] += static_cast<float>(acc);
    }
  }
}

#if MEMWALL_HAVE_DNNL
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

struct Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::mutex mu;
  // Primitive cache: (M, K, N, a transposed, b transposed, accumulate, bias, bf16, lda, ldc)
  std::map<std::tuple<int, int, int, bool, bool, bool, bool, bool, int, int>, dnnl::matmul> cache;
  // gemm4's: its five sizes, the three operands' strides and accumulate (1 or 0)
  std::map<std::vector<memory::dim>, dnnl::matmul> cache4;
};

Dnnl& dnnl_ctx() {
  static Dnnl ctx;
  return ctx;
}

// C[M, N] (+)= A[M, K] . B[K, N] (+ bias[N]); a_t: A stored [K, M]; b_t: B stored [N, K]. lda: the row
// stride of A as stored, ldc: of C (0: dense), for a block of columns of a wider array.
void gemm(float* c, const void* a, const void* b, const float* bias, int M, int K, int N, bool a_t, bool b_t,
          bool accumulate, bool bf16, int lda = 0, int ldc = 0) {
  Dnnl& d = dnnl_ctx();
  const Dt in_t = bf16 ? Dt::bf16 : Dt::f32;
  const memory::desc a_md =
      lda == 0 ? memory::desc({M, K}, in_t, a_t ? Tag::ba : Tag::ab)
               : memory::desc({M, K}, in_t, a_t ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b_md({K, N}, in_t, b_t ? Tag::ba : Tag::ab);
  const memory::desc c_md =
      ldc == 0 ? memory::desc({M, N}, Dt::f32, Tag::ab) : memory::desc({M, N}, Dt::f32, memory::dims{ldc, 1});
  const memory::desc bias_md({1, N}, Dt::f32, Tag::ab);
  const auto key = std::make_tuple(M, K, N, a_t, b_t, accumulate, bias != nullptr, bf16, lda, ldc);
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.cache.find(key);
  if (it == d.cache.end()) {
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const auto desc =
        bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
    it = d.cache.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, d.eng))).first;
  }
  memory am(a_md, d.eng, const_cast<void*>(a)), bm(b_md, d.eng, const_cast<void*>(b)), cm(c_md, d.eng, c);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, d.eng, const_cast<float*>(bias)));
  it->second.execute(d.strm, args);
  d.strm.wait();
}

// Batched C[b, h] (+)= A[b, h] . B[b, h] over 4-D strided views (element strides), fp32.
using Dims = memory::dims;
void gemm4(float* c, const Dims& c_strides, const float* a, const Dims& a_strides, const float* b,
           const Dims& b_strides, int B, int H, int M, int K, int N, bool accumulate) {
  Dnnl& d = dnnl_ctx();
  const memory::desc a_md({B, H, M, K}, Dt::f32, a_strides), b_md({B, H, K, N}, Dt::f32, b_strides),
      c_md({B, H, M, N}, Dt::f32, c_strides);
  std::vector<memory::dim> key = {B, H, M, K, N, accumulate ? 1 : 0};
  for (const Dims* s : {&a_strides, &b_strides, &c_strides}) key.insert(key.end(), s->begin(), s->end());
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.cache4.find(key);
  if (it == d.cache4.end()) {  // (a primitive descriptor costs tens of microseconds: the banded attention
                               // below issues several of these per layer and batch row)
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    it = d.cache4
             .emplace(std::move(key), dnnl::matmul(dnnl::matmul::primitive_desc(
                                          dnnl::matmul::desc(a_md, b_md, c_md), attr, d.eng)))
             .first;
  }
  memory am(a_md, d.eng, const_cast<float*>(a)), bm(b_md, d.eng, const_cast<float*>(b)), cm(c_md, d.eng, c);
  it->second.execute(d.strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  d.strm.wait();
}

// Whether oneDNN has a bf16 matmul for this CPU (AVX-512 BF16, AMX, or AVX-512 emulation); an AVX2-only CPU
// has none, and creating the primitive throws.
bool dnnl_bf16_available() {
  static const bool available = [] {
    try {
      Dnnl& d = dnnl_ctx();
      const memory::desc a_md({4, 4}, Dt::bf16, Tag::ab), c_md({4, 4}, Dt::f32, Tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, a_md, c_md), d.eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace
#endif

bool matmul_bf16_native() {
#if MEMWALL_HAVE_DNNL
  return dnnl_bf16_available();
#else
  return false;
#endif
}

const char* matmul_backend() {
#if MEMWALL_HAVE_DNNL
  return "onednn";
#else
  return "reference";
#endif
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                    int OC, int ld_out) {
#if MEMWALL_HAVE_DNNL
  gemm(out, inp, weight, bias, N, IC, OC, false, true, false, false, 0, ld_out == OC ? 0 : ld_out);
#else
  matmul_forward_ref(out, inp, weight, bias, N, IC, OC, ld_out);
#endif
}

namespace {
std::vector<float> widen_bf16(const std::uint16_t* in, std::size_t n) {
  std::vector<float> out(n);
  cast_bf16_to_f32(in, out.data(), n);
  return out;
}
}  // namespace

void matmul_forward_bf16(float* out, const std::uint16_t* inp, const std::uint16_t* weight, const float* bias,
                         int N, int IC, int OC, int ld_out) {
#if MEMWALL_HAVE_DNNL
  if (dnnl_bf16_available()) {
    gemm(out, inp, weight, bias, N, IC, OC, false, true, false, true, 0, ld_out == OC ? 0 : ld_out);
    return;
  }
#endif
  // No bf16 kernels: the fp32 matmul of the widened bf16 operands (the same products, fp32 accumulation).
  const std::vector<float> a = widen_bf16(inp, static_cast<std::size_t>(N) * IC),
                           w = widen_bf16(weight, static_cast<std::size_t>(OC) * IC);
  matmul_forward(out, a.data(), w.data(), bias, N, IC, OC, ld_out);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, int ld_dout) {
#if MEMWALL_HAVE_DNNL
  const int ld = ld_dout == OC ? 0 : ld_dout;
  if (dinp) gemm(dinp, dout, weight, nullptr, N, OC, IC, false, false, true, false, ld);    // [N,OC].[OC,IC]
  if (dweight) gemm(dweight, dout, inp, nullptr, OC, N, IC, true, false, true, false, ld);  // [OC,N].[N,IC]
  if (dbias) {
    const std::size_t stride = static_cast<std::size_t>(ld > 0 ? ld : OC);
    for (int n = 0; n < N; ++n) {
      const float* row = dout + static_cast<std::size_t>(n) * stride;
      for (int o = 0; o < OC; ++o) dbias[o] += row[o];
    }
  }
#else
  matmul_backward_ref(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, ld_dout);
#endif
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const std::uint16_t* dout16, const std::uint16_t* inp16,
                          const std::uint16_t* weight16, int N, int IC, int OC, int ld_dout) {
  const bool native = matmul_bf16_native();
#if MEMWALL_HAVE_DNNL
  if (native) {
    if (dinp) gemm(dinp, dout16, weight16, nullptr, N, OC, IC, false, false, true, true);
    if (dweight) gemm(dweight, dout16, inp16, nullptr, OC, N, IC, true, false, true, true);
  }
#endif
  if (!native) {
    // Without bf16 kernels: the fp32 matmuls of the widened bf16 operands (the same products, fp32
    // accumulation).
    const std::vector<float> d = widen_bf16(dout16, static_cast<std::size_t>(N) * OC),
                             a = widen_bf16(inp16, static_cast<std::size_t>(N) * IC),
                             w = widen_bf16(weight16, static_cast<std::size_t>(OC) * IC);
    matmul_backward(dinp, dweight, nullptr, d.data(), a.data(), w.data(), N, IC, OC);
  }
  if (dbias) {
    const std::size_t stride = static_cast<std::size_t>(ld_dout > 0 ? ld_dout : OC);
    for (int n = 0; n < N; ++n) {
      const float* row = dout + static_cast<std::size_t>(n) * stride;
      for (int o = 0; o < OC; ++o) dbias[o] += row[o];
    }
  }
}

// ---- layernorm ----

namespace {

// One row of C (o may be x): o = (x - m) s w + b (w null: ones; b null: none), the row's mean m and
// s = (var + eps)^-1/2 kept.
void ln_row_forward(float* o, float* mean, float* rstd, const float* x, const float* weight,
                    const float* bias, int C, float eps, float offset = 0.0f) {
  float m = 0;
  for (int i = 0; i < C; ++i) m += x[i];
  m /= static_cast<float>(C);
  float v = 0;
  for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
  v /= static_cast<float>(C);
  const float s = 1.0f / std::sqrt(v + eps);
  for (int i = 0; i < C; ++i)
    o[i] =
        (x[i] - m) * s * (weight != nullptr ? weight[i] + offset : 1.0f) + (bias != nullptr ? bias[i] : 0.0f);
  *mean = m;
  *rstd = s;
}

// Its backward: dx accumulated, dweight and dbias too (null: skipped).
void ln_row_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                     const float* weight, float m, float s, int C, float offset = 0.0f) {
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - m) * s;
    const float dnorm = (weight != nullptr ? weight[i] + offset : 1.0f) * dy[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= static_cast<float>(C);
  dnorm_norm_mean /= static_cast<float>(C);
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - m) * s;
    const float dnorm = (weight != nullptr ? weight[i] + offset : 1.0f) * dy[i];
    if (dbias != nullptr) dbias[i] += dy[i];
    if (dweight != nullptr) dweight[i] += norm * dy[i];
    dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float weight_offset) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const auto at = static_cast<std::size_t>(n) * static_cast<std::size_t>(C);
    ln_row_forward(out + at, mean + n, rstd + n, inp + at, weight, bias, C, 1e-5f, weight_offset);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C,
                        float weight_offset) {
  for (int n = 0; n < N; ++n) {
    const auto at = static_cast<std::size_t>(n) * static_cast<std::size_t>(C);
    ln_row_backward(dinp + at, dweight, dbias, dout + at, inp + at, weight, mean[n], rstd[n], C,
                    weight_offset);
  }
}

void head_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            int N, int stride, int heads, int hs, float eps) {
  const auto hz = static_cast<std::size_t>(hs), normed = static_cast<std::size_t>(heads) * hz,
             row = static_cast<std::size_t>(stride);
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * row;
    float* o = out + static_cast<std::size_t>(n) * row;
    for (int h = 0; h < heads; ++h) {
      const auto at = static_cast<std::size_t>(h) * hz,
                 r = static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) +
                     static_cast<std::size_t>(h);
      ln_row_forward(o + at, mean + r, rstd + r, x + at, weight + at, nullptr, hs, eps);
    }
    if (o != x) std::copy(x + normed, x + row, o + normed);
  }
}

void head_layernorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N, int stride,
                             int heads, int hs) {
  const auto hz = static_cast<std::size_t>(hs), normed = static_cast<std::size_t>(heads) * hz,
             row = static_cast<std::size_t>(stride);
  for (int n = 0; n < N; ++n) {
    const auto at = static_cast<std::size_t>(n) * row;
    std::fill(dinp + at, dinp + at + normed, 0.0f);
    for (int h = 0; h < heads; ++h) {
      const auto w = static_cast<std::size_t>(h) * hz,
                 r = static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) +
                     static_cast<std::size_t>(h);
      ln_row_backward(dinp + at + w, dweight + w, nullptr, dout + at + w, inp + at + w, weight + w, mean[r],
                      rstd[r], hs);
    }
    std::copy(dout + at + normed, dout + at + row, dinp + at + normed);
  }
}

// ---- RMSNorm ----

namespace {
// One row of C: o = x s (w + off), returning s = (mean(x^2) + eps)^-1/2.
float rms_row_forward(float* o, const float* x, const float* w, int C, float eps, float off = 0.0f) {
  float ms = 0;
  for (int i = 0; i < C; ++i) ms += x[i] * x[i];
  const float s = 1.0f / std::sqrt(ms / static_cast<float>(C) + eps);
  for (int i = 0; i < C; ++i) o[i] = x[i] * s * (w[i] + off);
  return s;
}
// Its backward: with v = w + off, dx += s (v dy) - x s^3 mean(v dy x); dw += dy x s.
void rms_row_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, float s, int C,
                      float off = 0.0f) {
  float dot = 0;
  for (int i = 0; i < C; ++i) dot += (w[i] + off) * dy[i] * x[i];
  const float k = s * s * s * dot / static_cast<float>(C);
  for (int i = 0; i < C; ++i) {
    dw[i] += dy[i] * x[i] * s;
    dx[i] += s * (w[i] + off) * dy[i] - x[i] * k;
  }
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     float weight_offset) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const auto at = static_cast<std::size_t>(n) * static_cast<std::size_t>(C);
    rstd[n] = rms_row_forward(out + at, inp + at, weight, C, eps, weight_offset);
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, float weight_offset) {
  for (int n = 0; n < N; ++n) {
    const auto at = static_cast<std::size_t>(n) * static_cast<std::size_t>(C);
    rms_row_backward(dinp + at, dweight, dout + at, inp + at, weight, rstd[n], C, weight_offset);
  }
}

namespace {

// Where head h of a head-normed row starts, and its width: NH query heads of hs, then key heads of khs.
std::size_t head_start(int h, int NH, int hs, int khs) {
  return h < NH ? static_cast<std::size_t>(h) * static_cast<std::size_t>(hs)
                : static_cast<std::size_t>(NH) * static_cast<std::size_t>(hs) +
                      static_cast<std::size_t>(h - NH) * static_cast<std::size_t>(khs);
}

}  // namespace

void head_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int stride,
                          int NH, int KVH, int hs, int khs, float eps, float weight_offset) {
  const int heads = NH + KVH;
  const auto normed = head_start(heads, NH, hs, khs), row = static_cast<std::size_t>(stride);
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * row;
    float* o = out + static_cast<std::size_t>(n) * row;
    for (int h = 0; h < heads; ++h) {
      const auto at = head_start(h, NH, hs, khs);
      rstd[static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)] =
          rms_row_forward(o + at, x + at, weight + (h < NH ? 0 : hs), h < NH ? hs : khs, eps, weight_offset);
    }
    if (o != x) std::copy(x + normed, x + row, o + normed);
  }
}

void head_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int N, int stride, int NH, int KVH, int hs,
                           int khs, float weight_offset) {
  const int heads = NH + KVH;
  const auto normed = head_start(heads, NH, hs, khs), row = static_cast<std::size_t>(stride);
  for (int n = 0; n < N; ++n) {
    const auto r = static_cast<std::size_t>(n) * row;
    std::fill(dinp + r, dinp + r + normed, 0.0f);
    for (int h = 0; h < heads; ++h) {
      const auto at = r + head_start(h, NH, hs, khs), w = static_cast<std::size_t>(h < NH ? 0 : hs);
      rms_row_backward(
          dinp + at, dweight + w, dout + at, inp + at, weight + w,
          rstd[static_cast<std::size_t>(n) * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)],
          h < NH ? hs : khs, weight_offset);
    }
    std::copy(dout + r + normed, dout + r + row, dinp + r + normed);
  }
}

// ---- rotary position embedding ----

void rope_table(float* cos, float* sin, int T, int hs, const double* inv_freq, int pos0, double scale) {
  const int half = hs / 2;
  for (int i = 0; i < half; ++i) {
    const double freq = inv_freq[i];
    for (int t = 0; t < T; ++t) {
      const double angle = static_cast<double>(pos0 + t) * freq;
      const std::size_t at =
          static_cast<std::size_t>(t) * static_cast<std::size_t>(half) + static_cast<std::size_t>(i);
      cos[at] = static_cast<float>(std::cos(angle) * scale);
      sin[at] = static_cast<float>(std::sin(angle) * scale);
    }
  }
}

void rope_apply(float* x, int B, int T, int stride, int heads, int hs, const float* cos, const float* sin,
                bool inverse, int rotary, bool pairs) {
  const int half = (rotary > 0 ? rotary : hs) / 2;
  // Pair i: channels (i, i + half), or with `pairs` (2i, 2i + 1).
  const std::size_t step = pairs ? 2 : 1, partner = pairs ? 1 : static_cast<std::size_t>(half);
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* row = x + (static_cast<std::size_t>(b) * T + t) * static_cast<std::size_t>(stride);
      const float* c = cos + static_cast<std::size_t>(t) * static_cast<std::size_t>(half);
      const float* s = sin + static_cast<std::size_t>(t) * static_cast<std::size_t>(half);
      for (int h = 0; h < heads; ++h) {
        float* head = row + static_cast<std::size_t>(h) * static_cast<std::size_t>(hs);
        for (int i = 0; i < half; ++i) {
          float* lo = head + static_cast<std::size_t>(i) * step;
          const float a = lo[0], d = lo[partner], si = sign * s[i];
          lo[0] = a * c[i] - d * si;
          lo[partner] = d * c[i] + a * si;
        }
      }
    }
  }
}

void rope_rotate(float* x, int B, int T, int stride, int heads, int hs, const double* inv_freq, int pos0,
                 bool inverse, double scale, int rotary, bool pairs) {
  const int rot = rotary > 0 ? rotary : hs;
  std::vector<float> c(static_cast<std::size_t>(T) * static_cast<std::size_t>(rot / 2)), s(c.size());
  rope_table(c.data(), s.data(), T, rot, inv_freq, pos0, scale);
  rope_apply(x, B, T, stride, heads, hs, c.data(), s.data(), inverse, rot, pairs);
}

// ---- grouped-query heads ----

void repeat_kv(float* qkv3, const float* qkv, int N, int C, int NH, int KVH) {
  const int hs = C / NH, group = NH / KVH;
  const auto Cz = static_cast<std::size_t>(C), kv = static_cast<std::size_t>(KVH * hs), W = Cz + 2 * kv,
             hsz = static_cast<std::size_t>(hs);
#pragma omp parallel for
  for (int r = 0; r < N; ++r) {
    const float* src = qkv + static_cast<std::size_t>(r) * W;
    float* dst = qkv3 + static_cast<std::size_t>(r) * 3 * Cz;
    std::copy_n(src, Cz, dst);
    for (int h = 0; h < NH; ++h) {
      const float* k = src + Cz + static_cast<std::size_t>(h / group) * hsz;
      std::copy_n(k, hsz, dst + Cz + static_cast<std::size_t>(h) * hsz);
      std::copy_n(k + kv, hsz, dst + 2 * Cz + static_cast<std::size_t>(h) * hsz);
    }
  }
}

void sum_kv(float* dqkv, const float* dqkv3, int N, int C, int NH, int KVH) {
  const int hs = C / NH, group = NH / KVH;
  const auto Cz = static_cast<std::size_t>(C), kv = static_cast<std::size_t>(KVH * hs), W = Cz + 2 * kv,
             hsz = static_cast<std::size_t>(hs);
#pragma omp parallel for
  for (int r = 0; r < N; ++r) {
    const float* src = dqkv3 + static_cast<std::size_t>(r) * 3 * Cz;
    float* dst = dqkv + static_cast<std::size_t>(r) * W;
    std::copy_n(src, Cz, dst);
    std::fill(dst + Cz, dst + W, 0.0f);
    for (int h = 0; h < NH; ++h) {  // in head order, as the GPU kernel adds them
      float* k = dst + Cz + static_cast<std::size_t>(h / group) * hsz;
      const float* dk = src + Cz + static_cast<std::size_t>(h) * hsz;
      for (std::size_t i = 0; i < hsz; ++i) {
        k[i] += dk[i];
        k[kv + i] += dk[Cz + i];
      }
    }
  }
}

// ---- gated MLPs (SwiGLU, GeGLU) and GELU (tanh approximation) ----

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr std::size_t kBlock = 2048;  // elements whose exponentials the vector exp computes at once
// silu's sigma(g) = 1 / (1 + e) with e = exp(-g); -g is clamped at 80 (exp(80) is finite; sigma is then 0 to
// float precision).
void exp_neg(float* e, const float* g, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) e[i] = std::min(80.0f, -g[i]);
  exp_inplace(e, n);
}
// GELU's 0.5 (1 + tanh(u)) = e / (e + 1) with e = exp(2u), u = sqrt(2 / pi) (x + 0.044715 x^3).
void exp2u(float* e, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    e[i] = std::min(80.0f, 2.0f * kGeluScale * (x[i] + 0.044715f * x[i] * x[i] * x[i]));
  }
  exp_inplace(e, n);
}
// GELU's derivative at x, given e = exp(2u) (exp2u's).
float gelu_grad(float x, float e) {
  const float t = 1.0f - 2.0f / (e + 1.0f);  // tanh(u)
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}
// A gated MLP's N rows of [gate F | up F], in cache-sized blocks: `exps` fills e with a block's gates'
// exponentials, then each(g, u, e, row, j) runs for every column j of every row (rows over threads).
template <class Exps, class Each>
void gated_rows(const float* inp, int N, int F, Exps exps, Each each) {
  const auto Fz = static_cast<std::size_t>(F);
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const auto row = static_cast<std::size_t>(n);
    const float* gate = inp + row * 2 * Fz;
    float e[kBlock];
    for (std::size_t b = 0; b < Fz; b += kBlock) {
      const std::size_t m = std::min(kBlock, Fz - b);
      exps(e, gate + b, m);
      for (std::size_t i = 0; i < m; ++i) each(gate[b + i], gate[Fz + b + i], e[i], row, b + i);
    }
  }
}
}  // namespace

void swiglu_forward(float* out, const float* inp, int N, int F) {
  const auto Fz = static_cast<std::size_t>(F);
  gated_rows(inp, N, F, exp_neg, [=](float g, float u, float e, std::size_t row, std::size_t j) {
    out[row * Fz + j] = g / (1.0f + e) * u;
  });
}

// out = silu(g) u: du = dout silu(g); dg = dout u sigma(g) (1 + g (1 - sigma(g))).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
  const auto Fz = static_cast<std::size_t>(F);
  gated_rows(inp, N, F, exp_neg, [=](float g, float u, float e, std::size_t row, std::size_t j) {
    const float d = dout[row * Fz + j], sig = 1.0f / (1.0f + e);
    dinp[row * 2 * Fz + Fz + j] += d * g * sig;
    dinp[row * 2 * Fz + j] += d * u * sig * (1.0f + g * (1.0f - sig));
  });
}

namespace {
// e = exp(-alpha min(g, limit)) for clamped_swiglu's sigmoid (the exponent clamped at 80, as exp_neg's).
auto clamped_exps(float alpha, float limit) {
  return [=](float* e, const float* g, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) e[i] = std::min(80.0f, -alpha * std::min(g[i], limit));
    exp_inplace(e, n);
  };
}
}  // namespace

void clamped_swiglu_forward(float* out, const float* inp, int N, int F, float alpha, float limit) {
  const auto Fz = static_cast<std::size_t>(F);
  gated_rows(inp, N, F, clamped_exps(alpha, limit),
             [=](float g, float u, float e, std::size_t row, std::size_t j) {
               const float gc = std::min(g, limit), uc = std::clamp(u, -limit, limit);
               out[row * Fz + j] = (uc + 1.0f) * gc / (1.0f + e);
             });
}

// out = (u + 1) g sigma(a g): du = dout g sigma(a g) where |up| <= limit; dg = dout (u + 1) sigma(a g)
// (1 + a g (1 - sigma(a g))) where gate <= limit.
void clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, float alpha,
                             float limit) {
  const auto Fz = static_cast<std::size_t>(F);
  gated_rows(inp, N, F, clamped_exps(alpha, limit),
             [=](float g, float u, float e, std::size_t row, std::size_t j) {
               const float d = dout[row * Fz + j], sig = 1.0f / (1.0f + e);
               const float gc = std::min(g, limit), uc = std::clamp(u, -limit, limit);
               if (u >= -limit && u <= limit) dinp[row * 2 * Fz + Fz + j] += d * gc * sig;
               if (g <= limit)
                 dinp[row * 2 * Fz + j] += d * (uc + 1.0f) * sig * (1.0f + alpha * gc * (1.0f - sig));
             });
}

void geglu_forward(float* out, const float* inp, int N, int F) {
  const auto Fz = static_cast<std::size_t>(F);
  gated_rows(inp, N, F, exp2u, [=](float g, float u, float e, std::size_t row, std::size_t j) {
    out[row * Fz + j] = g * (e / (e + 1.0f)) * u;
  });
}

// out = gelu(g) u: du = dout gelu(g); dg = dout u gelu'(g).
void geglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
  const auto Fz = static_cast<std::size_t>(F);
  gated_rows(inp, N, F, exp2u, [=](float g, float u, float e, std::size_t row, std::size_t j) {
    const float d = dout[row * Fz + j];
    dinp[row * 2 * Fz + Fz + j] += d * g * (e / (e + 1.0f));
    dinp[row * 2 * Fz + j] += d * u * gelu_grad(g, e);
  });
}

void gelu_forward(float* out, const float* inp, std::size_t n) {
#pragma omp parallel for
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t m = std::min(kBlock, n - b);
    float e[kBlock];
    exp2u(e, inp + b, m);
    for (std::size_t i = 0; i < m; ++i) out[b + i] = inp[b + i] * (e[i] / (e[i] + 1.0f));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
#pragma omp parallel for
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t m = std::min(kBlock, n - b);
    float e[kBlock];
    exp2u(e, inp + b, m);
    for (std::size_t i = 0; i < m; ++i) dinp[b + i] += gelu_grad(inp[b + i], e[i]) * dout[b + i];
  }
}

// Exact GELU: Phi(x) = 0.5 (1 + erf(x / sqrt 2)); d/dx x Phi(x) = Phi(x) + x phi(x), phi the normal density.
void gelu_exact_forward(float* out, const float* inp, std::size_t n) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i)
    out[i] = 0.5f * inp[i] * (1.0f + std::erf(inp[i] * 0.70710678118654752f));
}

void gelu_exact_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * std::exp(-0.5f * x * x);
    dinp[i] += (cdf + x * pdf) * dout[i];
  }
}

void relu_forward(float* out, const float* inp, std::size_t n) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

void relu2_forward(float* out, const float* inp, std::size_t n) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] * inp[i] : 0.0f;
}

void relu2_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) dinp[i] += inp[i] > 0.0f ? 2.0f * inp[i] * dout[i] : 0.0f;
}

// ---- soft-capping ----

void softcap_forward(float* x, std::size_t n, float cap) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void softcap_backward(float* dx, const float* y, std::size_t n, float cap) {
  const float inv = 1.0f / cap;
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) {
    const float th = y[i] * inv;
    dx[i] *= 1.0f - th * th;
  }
}

// ---- clamping (clip_qkv) ----

void clamp_forward(float* x, std::size_t n, float clip) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -clip), clip);
}

void scale_values(float* x, std::size_t n, float s) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) x[i] *= s;
}

void clamp_backward(float* dx, const float* y, std::size_t n, float clip) {
#pragma omp parallel for
  for (std::size_t i = 0; i < n; ++i) {
    if (!(std::fabs(y[i]) < clip)) dx[i] = 0.0f;
  }
}

// ---- causal attention ----

void attention_forward_ref(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int window,
                           float score_scale, float softcap, float alibi, const float* sinks) {
  const int hs = C / NH;
  const float scale = attention_scale(score_scale, hs);
  const std::size_t C3 = static_cast<std::size_t>(3) * C;
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        const float* q = qkv + (static_cast<std::size_t>(b) * T + t) * C3 + h * hs;
        float* a = att + ((static_cast<std::size_t>(b) * NH + h) * T + t) * T;
        const int lo = attention_window_start(t, window);
        const float slope = alibi_head_slope(alibi, h, NH);
        float maxv = -INFINITY;
        for (int u = lo; u <= t; ++u) {
          const float* k = qkv + (static_cast<std::size_t>(b) * T + u) * C3 + C + h * hs;
          float dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
          a[u] = soft_cap(dot * scale, softcap) + slope * static_cast<float>(u - t);
          maxv = std::max(maxv, a[u]);
        }
        if (sinks != nullptr) maxv = std::max(maxv, sinks[h]);
        float sum = sinks != nullptr ? std::exp(sinks[h] - maxv) : 0.0f;
        for (int u = lo; u <= t; ++u) {
          a[u] = std::exp(a[u] - maxv);
          sum += a[u];
        }
        const float inv = 1.0f / sum;
        for (int u = lo; u <= t; ++u) a[u] *= inv;
        for (int u = 0; u < lo; ++u) a[u] = 0;
        for (int u = t + 1; u < T; ++u) a[u] = 0;
        float* o = out + (static_cast<std::size_t>(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) o[i] = 0;
        for (int u = lo; u <= t; ++u) {
          const float* v = qkv + (static_cast<std::size_t>(b) * T + u) * C3 + 2 * C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] += a[u] * v[i];
        }
      }
    }
  }
}

namespace {
// The sinks' gradients from each (batch, head)'s own sum, [B * NH], added up by head.
void add_sink_gradients(float* dsinks, const std::vector<double>& per_bh, int B, int NH) {
  if (dsinks == nullptr) return;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h)
      dsinks[h] += static_cast<float>(per_bh[static_cast<std::size_t>(b * NH + h)]);
  }
}
}  // namespace

void attention_backward_ref(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                            int C, int NH, int window, float score_scale, float softcap, const float* sinks,
                            float* dsinks) {
  const int hs = C / NH;
  const float scale = attention_scale(score_scale, hs);
  const std::size_t C3 = static_cast<std::size_t>(3) * C;
  std::vector<double> dsink(static_cast<std::size_t>(B) * NH, 0.0);
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<float> datt(static_cast<std::size_t>(T)), dpre(static_cast<std::size_t>(T));
      for (int t = 0; t < T; ++t) {
        const float* a = att + ((static_cast<std::size_t>(b) * NH + h) * T + t) * T;
        const float* dy = dout + (static_cast<std::size_t>(b) * T + t) * C + h * hs;
        const int lo = attention_window_start(t, window);
        // out = sum_u a[u] v[u]  ->  datt[u] = dy . v[u], dv[u] += a[u] dy
        for (int u = lo; u <= t; ++u) {
          const float* v = qkv + (static_cast<std::size_t>(b) * T + u) * C3 + 2 * C + h * hs;
          float* dv = dqkv + (static_cast<std::size_t>(b) * T + u) * C3 + 2 * C + h * hs;
          float d = 0;
          for (int i = 0; i < hs; ++i) {
            d += dy[i] * v[i];
            dv[i] += a[u] * dy[i];
          }
          datt[static_cast<std::size_t>(u)] = d;
        }
        // softmax backward: dpre[u] = a[u] (datt[u] - sum_w a[w] datt[w])
        float dot = 0, kept = 0;
        for (int u = lo; u <= t; ++u) {
          dot += a[u] * datt[static_cast<std::size_t>(u)];
          kept += a[u];
        }
        for (int u = lo; u <= t; ++u)
          dpre[static_cast<std::size_t>(u)] = a[u] * (datt[static_cast<std::size_t>(u)] - dot);
        // the sink's probability: what the keys' leave of 1
        if (sinks != nullptr) dsink[static_cast<std::size_t>(b * NH + h)] -= (1.0 - kept) * dot;
        // pre[u] = cap(scale q . k[u]): the cap's derivative 1 - tanh^2 from the recomputed score
        const float* q = qkv + (static_cast<std::size_t>(b) * T + t) * C3 + h * hs;
        float* dq = dqkv + (static_cast<std::size_t>(b) * T + t) * C3 + h * hs;
        for (int u = lo; u <= t; ++u) {
          const float* k = qkv + (static_cast<std::size_t>(b) * T + u) * C3 + C + h * hs;
          float* dk = dqkv + (static_cast<std::size_t>(b) * T + u) * C3 + C + h * hs;
          float g = dpre[static_cast<std::size_t>(u)] * scale;
          if (softcap > 0) {
            float s = 0;
            for (int i = 0; i < hs; ++i) s += q[i] * k[i];
            const float th = std::tanh(s * scale / softcap);
            g *= 1.0f - th * th;
          }
          for (int i = 0; i < hs; ++i) {
            dq[i] += g * k[i];
            dk[i] += g * q[i];
          }
        }
      }
    }
  }
  add_sink_gradients(dsinks, dsink, B, NH);
}

#if MEMWALL_HAVE_DNNL
namespace {

// The blocks of the [T, T] scores a layer's GEMMs compute: query rows [row, row + rows) against keys [key,
// key + keys). Chunks of c (a negative window) are blocks of c on the diagonal; a sliding window w is a
// causal block up to the first row P >= w - 1 that is a multiple of R, then blocks of R rows with their
// R + w - 1 keys; those only where they make at most half the square's columns (a window of 4096 in a run
// of 4096 is not). Otherwise causal attention: from 128 tokens on, blocks of about T / 16 rows (at least 64)
// against every key up to their last row (a little over half the square: 0.56 of it at 1024 tokens); below,
// the whole square.
struct ScoreBlock {
  int row, rows, key, keys;
};

std::vector<ScoreBlock> score_blocks(int T, int window) {
  std::vector<ScoreBlock> v;
  if (window < 0 && -2 * window <= T) {
    for (int r = 0; r < T; r += -window)
      v.push_back({r, std::min(-window, T - r), r, std::min(-window, T - r)});
    return v;
  }
  const int R = window >= 128 ? 64 : window >= 32 ? 32 : 16;
  if (window > 0 && 2 * (R + window - 1) <= T) {
    const int P = (window - 1 + R - 1) / R * R;
    if (P > 0) v.push_back({0, P, 0, P});
    for (int r = P; r < T; r += R) {
      const int rows = std::min(R, T - r);
      v.push_back({r, rows, r - window + 1, rows + window - 1});
    }
    return v;
  }
  if (T < 128) return {{0, T, 0, T}};
  const int rows = std::max(64, (T / 16 + 15) / 16 * 16);
  for (int r = 0; r < T; r += rows) v.push_back({r, std::min(rows, T - r), 0, std::min(r + rows, T)});
  return v;
}

// The element strides of the batched GEMMs' operands over (batch row, head, row, column): q, k or v rows of
// qkv (3C apart), and transposed; the [T, T] probabilities (or scores, or their gradient), and transposed;
// the output's (or its gradient's) rows, C apart. A block's operands start at its first row's and key's.
struct AttentionStrides {
  Dims rows, rows_t, probs, probs_t, outs;
};

AttentionStrides attention_strides(int T, int C, int NH) {
  const memory::dim hs = C / NH, t3c = 3LL * C, bt3c = static_cast<memory::dim>(T) * t3c,
                    tt = static_cast<memory::dim>(T) * T, tc = static_cast<memory::dim>(T) * C;
  return {{bt3c, hs, t3c, 1}, {bt3c, hs, 1, t3c}, {NH * tt, tt, T, 1}, {NH * tt, tt, 1, T}, {tc, hs, C, 1}};
}

// Each row's keys in its block, [first, end) at 2t and 2t + 1: the part of its row of the [T, T]
// probabilities (or their gradient) the kernels write (zero outside its window) and the GEMMs read.
std::vector<int> block_keys_of_rows(const std::vector<ScoreBlock>& blocks, int T) {
  std::vector<int> v(2 * static_cast<std::size_t>(T));
  for (const ScoreBlock& k : blocks) {
    for (int r = k.row; r < k.row + k.rows; ++r) {
      v[2 * static_cast<std::size_t>(r)] = k.key;
      v[2 * static_cast<std::size_t>(r) + 1] = k.key + k.keys;
    }
  }
  return v;
}

// Element offset of (row, column) in rows `width` apart.
std::size_t at(int row, int width, int column = 0) {
  return static_cast<std::size_t>(row) * static_cast<std::size_t>(width) + static_cast<std::size_t>(column);
}

// The scores q . k^T of every block into `scores` ([B, NH, T, T]; entries outside the blocks untouched).
void block_scores(float* scores, const float* qkv, const std::vector<ScoreBlock>& blocks, int B, int T, int C,
                  int NH) {
  const AttentionStrides st = attention_strides(T, C, NH);
  for (const ScoreBlock& k : blocks) {
    gemm4(scores + at(k.row, T, k.key), st.probs, qkv + at(k.row, 3 * C), st.rows, qkv + at(k.key, 3 * C, C),
          st.rows_t, B, NH, k.rows, C / NH, k.keys, false);
  }
}

}  // namespace
#endif

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int window,
                       float score_scale, float softcap, float alibi, const float* sinks, int values) {
#if MEMWALL_HAVE_DNNL
  const int hs = C / NH, vs = values > 0 ? values : hs;
  // scores[b, h] = q[b, h] . k[b, h]^T over the blocks that hold every row's window
  const std::vector<ScoreBlock> blocks = score_blocks(T, window);
  const std::vector<int> keys = block_keys_of_rows(blocks, T);
  block_scores(att, qkv, blocks, B, T, C, NH);
  const float scale = attention_scale(score_scale, hs);
#pragma omp parallel for collapse(2)
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {  // causal softmax of each row, masked part set to 0
      float* a = att + (static_cast<std::size_t>(bh) * T + t) * T;
      const int lo = attention_window_start(t, window);
      const float slope = alibi_head_slope(alibi, bh % NH, NH);
      float maxv = -INFINITY;
      for (int u = lo; u <= t; ++u) {
        a[u] = soft_cap(a[u] * scale, softcap) + slope * static_cast<float>(u - t);
        maxv = std::max(maxv, a[u]);
      }
      const float sink = sinks != nullptr ? sinks[bh % NH] : -INFINITY;
      maxv = std::max(maxv, sink);
      for (int u = lo; u <= t; ++u) a[u] -= maxv;
      exp_inplace(a + lo, static_cast<std::size_t>(t - lo) + 1);
      float sum = sinks != nullptr ? std::exp(sink - maxv) : 0.0f;
      for (int u = lo; u <= t; ++u) sum += a[u];
      const float inv = 1.0f / sum;
      for (int u = lo; u <= t; ++u) a[u] *= inv;
      // (zero in the rest of the row's block; the row's other entries are not written)
      for (int u = keys[2 * static_cast<std::size_t>(t)]; u < lo; ++u) a[u] = 0;
      for (int u = t + 1; u < keys[2 * static_cast<std::size_t>(t) + 1]; ++u) a[u] = 0;
    }
  }
  // out[b, :, h] = att[b, h] . v[b, h], each block of rows from its keys' values
  const AttentionStrides st = attention_strides(T, C, NH);
  for (const ScoreBlock& k : blocks) {
    gemm4(out + at(k.row, C), st.outs, att + at(k.row, T, k.key), st.probs, qkv + at(k.key, 3 * C, 2 * C),
          st.rows, B, NH, k.rows, k.keys, vs, false);
  }
  if (vs < hs) {  // (the padding's output)
#pragma omp parallel for
    for (int n = 0; n < B * T; ++n) {
      for (int h = 0; h < NH; ++h) std::fill_n(out + at(n, C, h * hs + vs), hs - vs, 0.0f);
    }
  }
#else
  (void)values;  // (the padding is zero: the loops give the same)
  attention_forward_ref(out, att, qkv, B, T, C, NH, window, score_scale, softcap, alibi, sinks);
#endif
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                        int C, int NH, int window, float score_scale, float softcap, const float* sinks,
                        float* dsinks, int values) {
#if MEMWALL_HAVE_DNNL
  const int hs = C / NH, vs = values > 0 ? values : hs;
  const std::vector<ScoreBlock> blocks = score_blocks(T, window);
  const std::vector<int> keys = block_keys_of_rows(blocks, T);
  const AttentionStrides st = attention_strides(T, C, NH);
  // The probabilities' gradient, [B, NH, T, T]: this thread's scratch, kept between calls (a fresh 12 MB
  // vector per call, zeroed and page-faulted in, cost 7% of a training step; the first GEMM writes all of
  // it). (thread_local: the OpenMP workers below see only this pointer to the calling thread's buffer.)
  static thread_local std::vector<float> scratch;
  scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(B) * NH * T * T));
  float* const dpre = scratch.data();
  for (const ScoreBlock& k : blocks) {
    // datt = dout . v^T
    gemm4(dpre + at(k.row, T, k.key), st.probs, dout + at(k.row, C), st.outs, qkv + at(k.key, 3 * C, 2 * C),
          st.rows_t, B, NH, k.rows, vs, k.keys, false);
    // dv += att^T . dout (blocks one after another: a window's overlap in keys)
    gemm4(dqkv + at(k.key, 3 * C, 2 * C), st.rows, att + at(k.row, T, k.key), st.probs_t, dout + at(k.row, C),
          st.outs, B, NH, k.keys, k.rows, vs, true);
  }
  // The soft-capped scores' derivative needs the scores again: q . k^T, into a second scratch.
  static thread_local std::vector<float> score_scratch;
  float* scores = nullptr;
  if (softcap > 0) {
    score_scratch.resize(std::max(score_scratch.size(), static_cast<std::size_t>(B) * NH * T * T));
    scores = score_scratch.data();
    block_scores(scores, qkv, blocks, B, T, C, NH);
  }
  // softmax backward, with the score scale folded in: dpre = scale * att * (datt - sum(att * datt)), times
  // the cap's 1 - tanh^2 with soft-capping
  const float scale = attention_scale(score_scale, hs);
  // (each row's share of its head's sink gradient, summed after)
  std::vector<float> sink_rows(sinks != nullptr ? static_cast<std::size_t>(B) * NH * T : 0);
#pragma omp parallel for collapse(2)
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {
      const std::size_t row = (static_cast<std::size_t>(bh) * T + t) * T;
      const float* a = att + row;
      float* d = dpre + row;
      const int lo = attention_window_start(t, window);
      float dot = 0, kept = 0;
      for (int u = lo; u <= t; ++u) {
        dot += a[u] * d[u];
        kept += a[u];
      }
      if (sinks != nullptr) sink_rows[static_cast<std::size_t>(bh) * T + t] = -(1.0f - kept) * dot;
      for (int u = lo; u <= t; ++u) d[u] = scale * a[u] * (d[u] - dot);
      if (scores != nullptr) {
        for (int u = lo; u <= t; ++u) {
          const float th = std::tanh(scores[row + static_cast<std::size_t>(u)] * scale / softcap);
          d[u] *= 1.0f - th * th;
        }
      }
      for (int u = keys[2 * static_cast<std::size_t>(t)]; u < lo; ++u) d[u] = 0;
      for (int u = t + 1; u < keys[2 * static_cast<std::size_t>(t) + 1]; ++u) d[u] = 0;
    }
  }
  // dq += dpre . k ; dk += dpre^T . q
  for (const ScoreBlock& k : blocks) {
    gemm4(dqkv + at(k.row, 3 * C), st.rows, dpre + at(k.row, T, k.key), st.probs, qkv + at(k.key, 3 * C, C),
          st.rows, B, NH, k.rows, k.keys, hs, true);
    gemm4(dqkv + at(k.key, 3 * C, C), st.rows, dpre + at(k.row, T, k.key), st.probs_t, qkv + at(k.row, 3 * C),
          st.rows, B, NH, k.keys, k.rows, hs, true);
  }
  if (sinks != nullptr) {
    std::vector<double> per_bh(static_cast<std::size_t>(B) * NH, 0.0);
    for (std::size_t r = 0; r < sink_rows.size(); ++r)
      per_bh[r / static_cast<std::size_t>(T)] += sink_rows[r];
    add_sink_gradients(dsinks, per_bh, B, NH);
  }
#else
  (void)values;
  attention_backward_ref(dqkv, dout, qkv, att, B, T, C, NH, window, score_scale, softcap, sinks, dsinks);
#endif
}

// ---- fused (flash) attention ----
//
// FlashAttention's tiling on the CPU: blocks of kRows query rows against blocks of kKeys keys, a score tile
// [kKeys][kRows] (query rows innermost, one SIMD vector) built from a transposed query block, an online
// softmax across key blocks, and the output (or, backward, the gradients) accumulated per tile. Rows past
// the end of the sequence are zero-padded and see every key, so every row has a finite maximum.

namespace {

constexpr int kRows = 16, kKeys = 64;

float dot_f(const float* a, const float* b, int n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct FlashTile {
  alignas(64) float s[kKeys][kRows];  // scores, then probabilities
  alignas(64) float d[kKeys][kRows];  // backward: dP, then dS
  alignas(64) float g[kKeys][kRows];  // backward with soft-capping: the cap's derivative 1 - tanh^2
};

// With soft-capping, the n x kRows scores of a tile capped in place (and, when `grad`, the cap's derivative).
void cap_tile(float (*s)[kRows], float (*grad)[kRows], int n, float cap) {
  if (cap <= 0) return;
  for (int u = 0; u < n; ++u) {
    for (int r = 0; r < kRows; ++r) {
      const float th = std::tanh(s[u][r] / cap);
      s[u][r] = cap * th;
      if (grad != nullptr) grad[u][r] = 1.0f - th * th;
    }
  }
}

// ALiBi: slope x (key - query) added to the n x kRows scores of the tile of keys from u0 and rows from r0.
void bias_tile(float (*s)[kRows], int n, float slope, int u0, int r0) {
  if (slope == 0) return;
  for (int u = 0; u < n; ++u) {
    for (int r = 0; r < kRows; ++r) s[u][r] += slope * static_cast<float>(u0 + u - r0 - r);
  }
}

// The tile loops are built for AVX-512, AVX2 and the baseline, chosen at load time by the CPU (GCC's
// target_clones); the rest of this file is baseline code.
#define MEMWALL_TILE_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))

// Sixteen floats as one value (GCC's vector extension: one AVX-512 register, two AVX2 ones, four SSE ones),
// so that the tile loops below keep their sums in registers across their inner loops.
// (Internal and inlined: the vector-argument ABI GCC warns about never crosses a call.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Vec16 __attribute__((vector_size(64)));
static_assert(kRows == 16, "a tile's rows are one Vec16");

inline Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store16(float* p, Vec16 v) {
  std::memcpy(p, &v, sizeof v);
}

// tile[u][r] = sum_d qt[d][r] * key[u][d] for the n keys of the block (rows `ld` floats apart), four keys at
// a time (each query column loaded once for four keys).
MEMWALL_TILE_CLONES void score_tile(float (*tile)[kRows], const float* qt, const float* key, std::size_t ld,
                                    int n, int hs) {
  int u = 0;
  for (; u + 4 <= n; u += 4) {
    const float* k = key + static_cast<std::size_t>(u) * ld;
    Vec16 t0 = {}, t1 = {}, t2 = {}, t3 = {};
    for (int c = 0; c < hs; ++c) {
      const Vec16 q = load16(qt + static_cast<std::size_t>(c) * kRows);
      t0 += k[c] * q;
      t1 += k[ld + c] * q;
      t2 += k[2 * ld + c] * q;
      t3 += k[3 * ld + c] * q;
    }
    store16(tile[u], t0);
    store16(tile[u + 1], t1);
    store16(tile[u + 2], t2);
    store16(tile[u + 3], t3);
  }
  for (; u < n; ++u) {
    const float* k = key + static_cast<std::size_t>(u) * ld;
    Vec16 t = {};
    for (int c = 0; c < hs; ++c) t += k[c] * load16(qt + static_cast<std::size_t>(c) * kRows);
    store16(tile[u], t);
  }
}

// out[i][:hs] += sum_j w[i si + j sj] src[j][:hs] for i < ni, j < nj (out's rows ld_out floats apart, src's
// ld_src): sixteen columns of four output rows held in registers across j.
MEMWALL_TILE_CLONES void weighted_rows(float* out, std::size_t ld_out, const float* w, int si, int sj,
                                       const float* src, std::size_t ld_src, int ni, int nj, int hs) {
  const auto at_w = [&](int i, int j) {
    return w[static_cast<std::size_t>(i) * si + static_cast<std::size_t>(j) * sj];
  };
  int c = 0;
  for (; c + 16 <= hs; c += 16) {
    int i = 0;
    for (; i + 4 <= ni; i += 4) {
      float* o = out + static_cast<std::size_t>(i) * ld_out + c;
      Vec16 a0 = load16(o), a1 = load16(o + ld_out), a2 = load16(o + 2 * ld_out), a3 = load16(o + 3 * ld_out);
      for (int j = 0; j < nj; ++j) {
        const Vec16 s = load16(src + static_cast<std::size_t>(j) * ld_src + c);
        a0 += at_w(i, j) * s;
        a1 += at_w(i + 1, j) * s;
        a2 += at_w(i + 2, j) * s;
        a3 += at_w(i + 3, j) * s;
      }
      store16(o, a0);
      store16(o + ld_out, a1);
      store16(o + 2 * ld_out, a2);
      store16(o + 3 * ld_out, a3);
    }
    for (; i < ni; ++i) {
      float* o = out + static_cast<std::size_t>(i) * ld_out + c;
      Vec16 a = load16(o);
      for (int j = 0; j < nj; ++j) a += at_w(i, j) * load16(src + static_cast<std::size_t>(j) * ld_src + c);
      store16(o, a);
    }
  }
  for (int i = 0; i < ni && c < hs; ++i) {  // the last hs % 16 columns
    float* o = out + static_cast<std::size_t>(i) * ld_out;
    for (int j = 0; j < nj; ++j) {
      const float wij = at_w(i, j);
      const float* s = src + static_cast<std::size_t>(j) * ld_src;
      for (int cc = c; cc < hs; ++cc) o[cc] += wij * s[cc];
    }
  }
}

// Loads rows [r0, r0 + kRows) of a [T, ld] head slice transposed into out[hs][kRows], times `scale`; rows at
// or past T are zero.
void load_transposed(float* out, const float* src, std::size_t ld, int r0, int T, int hs, float scale) {
  for (int r = 0; r < kRows; ++r) {
    const float* row = r0 + r < T ? src + static_cast<std::size_t>(r0 + r) * ld : nullptr;
    for (int c = 0; c < hs; ++c) out[static_cast<std::size_t>(c) * kRows + r] = row ? scale * row[c] : 0.0f;
  }
}

#pragma GCC diagnostic pop

// Whether every row of the block from r0 sees every key of the tile [u0, u0 + n) (no mask to apply): keys
// at or before the first row, none before the last row's window.
bool tile_inside(int u0, int n, int r0, int window) {
  return u0 + n - 1 <= r0 && u0 >= attention_window_start(r0 + kRows - 1, window);
}

// acc[r][:vs] += sum_u p[u][r] v[u][:vs] over the block's n keys and `rows` rows (acc's rows hs apart).
void accumulate_values(float* acc, const float (*p)[kRows], const float* v, std::size_t ld, int n, int rows,
                       int hs, int vs) {
  weighted_rows(acc, static_cast<std::size_t>(hs), &p[0][0], 1, kRows, v, ld, rows, n, vs);
}

// Backward of one tile: dv[u] += p[u][r] dy[r] (vs channels), dk[u] += ds[u][r] q[r], dq[r] += ds[u][r] k[u].
void tile_gradients(float* dq, float* dkv, const float (*p)[kRows], const float (*ds)[kRows], const float* q,
                    const float* k, const float* dy, std::size_t ld, std::size_t ld_dy, int C, int n,
                    int rows, int hs, int vs) {
  weighted_rows(dkv + C, ld, &p[0][0], kRows, 1, dy, ld_dy, n, rows, vs);
  weighted_rows(dkv, ld, &ds[0][0], kRows, 1, q, ld, n, rows, hs);
  weighted_rows(dq, static_cast<std::size_t>(hs), &ds[0][0], 1, kRows, k, ld, rows, n, hs);
}

}  // namespace

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                             int window, float score_scale, float softcap, float alibi, const float* sinks,
                             int values) {
  const int hs = C / NH, vs = values > 0 ? values : hs, blocks = (T + kRows - 1) / kRows;
  const float scale = attention_scale(score_scale, hs);
  const std::size_t C3 = static_cast<std::size_t>(3) * C;
#pragma omp parallel
  {
    FlashTile tile;
    std::vector<float> qt(static_cast<std::size_t>(hs) * kRows), acc(static_cast<std::size_t>(hs) * kRows);
    float m[kRows], l[kRows], corr[kRows];
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      for (int qb = 0; qb < blocks; ++qb) {
        const int b = bh / NH, h = bh % NH, r0 = qb * kRows;
        const float* base = qkv + static_cast<std::size_t>(b) * T * C3 + static_cast<std::size_t>(h) * hs;
        load_transposed(qt.data(), base, C3, r0, T, hs, scale);
        std::fill(acc.begin(), acc.end(), 0.0f);  // acc[r][c]: row r's output, unnormalised
        // (a sink logit starts every row's softmax as a score already seen: e^0 = 1 at its maximum)
        for (int r = 0; r < kRows; ++r)
          m[r] = sinks != nullptr ? sinks[h] : -INFINITY, l[r] = sinks != nullptr ? 1.0f : 0.0f;
        const int end = std::min(T, r0 + kRows);  // keys any row of the block sees
        // From the key tile holding the first row's first key (with a sliding window, a row may see no
        // key of that tile: its maximum stays -inf, subtracted as 0, and it adds nothing).
        const int first = attention_window_start(r0, window);
        for (int u0 = first - first % kKeys; u0 < end; u0 += kKeys) {
          const int n = std::min(kKeys, end - u0);
          score_tile(tile.s, qt.data(), base + C + static_cast<std::size_t>(u0) * C3, C3, n, hs);
          cap_tile(tile.s, nullptr, n, softcap);
          bias_tile(tile.s, n, alibi_head_slope(alibi, h, NH), u0, r0);
          float mx[kRows], shift[kRows];
          for (int r = 0; r < kRows; ++r) mx[r] = m[r];
          const bool inside = tile_inside(u0, n, r0, window);
          for (int u = 0; u < n; ++u) {
            if (inside) {
#pragma omp simd
              for (int r = 0; r < kRows; ++r) mx[r] = std::max(mx[r], tile.s[u][r]);
              continue;
            }
            for (int r = 0; r < kRows; ++r) {
              if (u0 + u <= r0 + r && u0 + u >= attention_window_start(r0 + r, window))
                mx[r] = std::max(mx[r], tile.s[u][r]);
            }
          }
          for (int r = 0; r < kRows; ++r) shift[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
          for (int u = 0; u < n; ++u) {
#pragma omp simd
            for (int r = 0; r < kRows; ++r) tile.s[u][r] -= shift[r];
          }
          exp_inplace(&tile.s[0][0], static_cast<std::size_t>(n) * kRows);
          float sum[kRows] = {};
          for (int u = 0; u < n; ++u) {
            for (int r = 0; r < kRows && !inside; ++r) {
              // above the diagonal, or before the window
              if (u0 + u > r0 + r || u0 + u < attention_window_start(r0 + r, window)) tile.s[u][r] = 0;
            }
#pragma omp simd
            for (int r = 0; r < kRows; ++r) sum[r] += tile.s[u][r];
          }
          for (int r = 0; r < kRows; ++r) {
            corr[r] = m[r] == -INFINITY ? 0.0f : std::exp(m[r] - mx[r]);  // 0 until a key is seen
            l[r] = l[r] * corr[r] + sum[r];
            m[r] = mx[r];
            float* a = acc.data() + static_cast<std::size_t>(r) * hs;
            for (int c = 0; c < hs; ++c) a[c] *= corr[r];
          }
          accumulate_values(acc.data(), tile.s, base + 2 * C + static_cast<std::size_t>(u0) * C3, C3, n,
                            kRows, hs, vs);
        }
        for (int r = 0; r < end - r0; ++r) {
          float* o = out + (static_cast<std::size_t>(b) * T + r0 + r) * C + static_cast<std::size_t>(h) * hs;
          const float inv = 1.0f / l[r];
          for (int c = 0; c < hs; ++c) o[c] = acc[static_cast<std::size_t>(r) * hs + c] * inv;
          lse[static_cast<std::size_t>(bh) * T + r0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  }
}

void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH, int window, float score_scale,
                              float softcap, float alibi, const float* sinks, float* dsinks, int values) {
  const int hs = C / NH, vs = values > 0 ? values : hs, blocks = (T + kRows - 1) / kRows;
  const float scale = attention_scale(score_scale, hs);
  const std::size_t C3 = static_cast<std::size_t>(3) * C;
  std::vector<double> dsink(static_cast<std::size_t>(B) * NH, 0.0);
  // Each (batch, head) writes only its own columns of dqkv; its query blocks run in order because every
  // block adds into the keys' and values' gradients.
#pragma omp parallel
  {
    FlashTile tile;
    const std::size_t hk = static_cast<std::size_t>(hs) * kRows;
    std::vector<float> qt(hk), dot(hk), dq(hk);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const std::size_t head = static_cast<std::size_t>(h) * hs;
      const float* base = qkv + static_cast<std::size_t>(b) * T * C3 + head;
      const float* dyb = dout + static_cast<std::size_t>(b) * T * C + head;
      const float* ob = out + static_cast<std::size_t>(b) * T * C + head;
      float* dbase = dqkv + static_cast<std::size_t>(b) * T * C3 + head;
      for (int qb = 0; qb < blocks; ++qb) {
        const int r0 = qb * kRows, end = std::min(T, r0 + kRows);
        load_transposed(qt.data(), base, C3, r0, T, hs, scale);
        load_transposed(dot.data(), dyb, static_cast<std::size_t>(C), r0, T, hs, 1.0f);
        std::fill(dq.begin(), dq.end(), 0.0f);  // dq[r][c]
        float L[kRows], D[kRows];               // log-sum-exp; the softmax gradient's row sum dout . out
        for (int r = 0; r < kRows; ++r) {
          L[r] = 0, D[r] = 0;
          if (r0 + r >= T) continue;
          L[r] = lse[static_cast<std::size_t>(bh) * T + r0 + r];
          D[r] = dot_f(dyb + static_cast<std::size_t>(r0 + r) * C, ob + static_cast<std::size_t>(r0 + r) * C,
                       vs);
          if (sinks != nullptr) dsink[static_cast<std::size_t>(bh)] -= std::exp(sinks[h] - L[r]) * D[r];
        }
        const int first = attention_window_start(r0, window);
        for (int u0 = first - first % kKeys; u0 < end; u0 += kKeys) {
          const int n = std::min(kKeys, end - u0);
          score_tile(tile.s, qt.data(), base + C + static_cast<std::size_t>(u0) * C3, C3, n, hs);
          cap_tile(tile.s, tile.g, n, softcap);
          bias_tile(tile.s, n, alibi_head_slope(alibi, h, NH), u0, r0);
          score_tile(tile.d, dot.data(), base + 2 * C + static_cast<std::size_t>(u0) * C3, C3, n, vs);
          for (int u = 0; u < n; ++u) {
#pragma omp simd
            for (int r = 0; r < kRows; ++r) tile.s[u][r] -= L[r];
          }
          exp_inplace(&tile.s[0][0], static_cast<std::size_t>(n) * kRows);
          const bool inside = tile_inside(u0, n, r0, window);
          for (int u = 0; u < n; ++u) {
            for (int r = 0; r < kRows && !inside; ++r) {
              if (u0 + u > r0 + r || u0 + u < attention_window_start(r0 + r, window)) tile.s[u][r] = 0;
            }
#pragma omp simd
            for (int r = 0; r < kRows; ++r) {
              tile.d[u][r] = scale * tile.s[u][r] * (tile.d[u][r] - D[r]);  // dS (scaled)
              if (softcap > 0) tile.d[u][r] *= tile.g[u][r];
            }
          }
          tile_gradients(dq.data(), dbase + C + static_cast<std::size_t>(u0) * C3, tile.s, tile.d,
                         base + static_cast<std::size_t>(r0) * C3,
                         base + C + static_cast<std::size_t>(u0) * C3, dyb + static_cast<std::size_t>(r0) * C,
                         C3, static_cast<std::size_t>(C), C, n, end - r0, hs, vs);
        }
        for (int r = 0; r < end - r0; ++r) {
          float* d = dbase + static_cast<std::size_t>(r0 + r) * C3;
          for (int c = 0; c < hs; ++c) d[c] += dq[static_cast<std::size_t>(r) * hs + c];
        }
      }
    }
  }
  add_sink_gradients(dsinks, dsink, B, NH);
}

// ---- embedding ----

void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       float scale) {
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      const float* e = wte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      if (wpe == nullptr) {
        for (int i = 0; i < C; ++i) o[i] = e[i] * scale;
        continue;
      }
      const float* p = wpe + static_cast<std::size_t>(t) * C;
      for (int i = 0; i < C; ++i) o[i] = e[i] * scale + p[i];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                        float scale) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
      float* de = dwte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      for (int i = 0; i < C; ++i) de[i] += d[i] * scale;
      if (dwpe == nullptr) continue;
      float* dp = dwpe + static_cast<std::size_t>(t) * C;
      for (int i = 0; i < C; ++i) dp[i] += d[i];
    }
  }
}

// ---- cross-entropy ----

float crossentropy_forward(float* probs, const float* logits, const int* targets, int N, int V) {
  double total = 0;
#pragma omp parallel for reduction(+ : total)
  for (int n = 0; n < N; ++n) {
    const float* l = logits + static_cast<std::size_t>(n) * V;
    float* p = probs + static_cast<std::size_t>(n) * V;
    float maxv = -INFINITY;
    for (int i = 0; i < V; ++i) maxv = std::max(maxv, l[i]);
    double sum = 0;
    for (int i = 0; i < V; ++i) {
      p[i] = std::exp(l[i] - maxv);
      sum += p[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int i = 0; i < V; ++i) p[i] *= inv;
    total += -std::log(static_cast<double>(p[targets[n]]));
  }
  return static_cast<float>(total / N);
}

void crossentropy_backward(float* dlogits, const float* probs, const int* targets, int N, int V) {
  const float inv_n = 1.0f / static_cast<float>(N);
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* p = probs + static_cast<std::size_t>(n) * V;
    float* d = dlogits + static_cast<std::size_t>(n) * V;
    for (int i = 0; i < V; ++i) d[i] += (p[i] - (i == targets[n] ? 1.0f : 0.0f)) * inv_n;
  }
}

void gather_rows(float* out, const float* x, const int* rows, const float* weight, int n, int C, int K) {
  const auto W = static_cast<std::size_t>(C);
#pragma omp parallel for
  for (int i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(rows[i]);
    const float* src = x + r / static_cast<std::size_t>(K) * W;
    float* dst = out + static_cast<std::size_t>(i) * W;
    if (weight == nullptr) {
      std::copy(src, src + W, dst);
      continue;
    }
    for (std::size_t j = 0; j < W; ++j) dst[j] = src[j] * weight[r];
  }
}

void scatter_add_rows(float* dst, const float* y, const int* rows, const float* weight, float scale, int n,
                      int C, int K) {
  const auto W = static_cast<std::size_t>(C);
#pragma omp parallel for
  for (int i = 0; i < n; ++i) {  // (each token once: no two rows i write the same row of dst)
    const auto r = static_cast<std::size_t>(rows[i]);
    const float w = weight != nullptr ? scale * weight[r] : scale;
    float* d = dst + r / static_cast<std::size_t>(K) * W;
    const float* src = y + static_cast<std::size_t>(i) * W;
    for (std::size_t j = 0; j < W; ++j) d[j] += w * src[j];
  }
}

void scatter_add_rows_backward(float* dy, float* dweight, const float* dx, const float* y, const int* rows,
                               const float* weight, float scale, int n, int C, int K) {
  const auto W = static_cast<std::size_t>(C);
#pragma omp parallel for
  for (int i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(rows[i]);
    const float w = weight != nullptr ? scale * weight[r] : scale;
    const float* d = dx + r / static_cast<std::size_t>(K) * W;
    const float* yi = y + static_cast<std::size_t>(i) * W;
    float* out = dy + static_cast<std::size_t>(i) * W;
    float dot = 0;
    for (std::size_t j = 0; j < W; ++j) {
      out[j] = w * d[j];
      dot += d[j] * yi[j];
    }
    if (dweight != nullptr) dweight[r] = scale * dot;
  }
}

void gated_add_forward(float* dst, float* s, const float* z, const float* y, float scale, int N, int C) {
  const auto W = static_cast<std::size_t>(C);
#pragma omp parallel for
  for (int t = 0; t < N; ++t) {
    const float g = s[t] = 1.0f / (1.0f + std::exp(-z[t]));
    float* d = dst + static_cast<std::size_t>(t) * W;
    const float* yt = y + static_cast<std::size_t>(t) * W;
    for (std::size_t j = 0; j < W; ++j) d[j] += scale * g * yt[j];
  }
}

void gated_add_backward(float* dy, float* dz, const float* dx, const float* y, const float* s, float scale,
                        int N, int C) {
  const auto W = static_cast<std::size_t>(C);
#pragma omp parallel for
  for (int t = 0; t < N; ++t) {
    const float* d = dx + static_cast<std::size_t>(t) * W;
    const float* yt = y + static_cast<std::size_t>(t) * W;
    float* out = dy + static_cast<std::size_t>(t) * W;
    float dot = 0;
    for (std::size_t j = 0; j < W; ++j) {
      out[j] = scale * s[t] * d[j];
      dot += d[j] * yt[j];
    }
    dz[t] = scale * dot * s[t] * (1 - s[t]);
  }
}

namespace {
// The latent attention's sizes: heads, head size, rotary and nope (d - r) and value channels, a token's
// query width, kv_a_proj's output width and kv_b_proj's.
struct LatentDims {
  std::size_t h, d, r, v, p, q, ka, kb;
  LatentDims(int H, int D, int R, int V, int kv_lora)
      : h(static_cast<std::size_t>(H)),
        d(static_cast<std::size_t>(D)),
        r(static_cast<std::size_t>(R)),
        v(static_cast<std::size_t>(V)),
        p(d - r),
        q(h * d),
        ka(static_cast<std::size_t>(kv_lora) + r),
        kb(h * (p + v)) {}
};
}  // namespace

void mla_assemble(float* qkv, const float* q, const float* kv_a, const float* kv_b, int N, int H, int D,
                  int R, int V, int kv_lora) {
  const LatentDims m(H, D, R, V, kv_lora);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const auto t = static_cast<std::size_t>(n);
    const float* qt = q + t * m.q;
    const float* pe = kv_a + t * m.ka + static_cast<std::size_t>(kv_lora);
    const float* kvb = kv_b + t * m.kb;
    float* row = qkv + t * 3 * m.q;
    for (std::size_t h = 0; h < m.h; ++h) {
      float* qh = row + h * m.d;  // [rotary | nope], from the file's [nope | rotary]
      std::copy_n(qt + h * m.d + m.p, m.r, qh);
      std::copy_n(qt + h * m.d, m.p, qh + m.r);
      float* kh = row + m.q + h * m.d;  // the shared rotary part, then the head's own
      std::copy_n(pe, m.r, kh);
      std::copy_n(kvb + h * (m.p + m.v), m.p, kh + m.r);
      float* vh = row + 2 * m.q + h * m.d;  // the value, zeros after it
      std::copy_n(kvb + h * (m.p + m.v) + m.p, m.v, vh);
      std::fill(vh + m.v, vh + m.d, 0.0f);
    }
  }
}

void mla_scatter(float* dq, float* dkv_a, float* dkv_b, const float* dqkv, int N, int H, int D, int R, int V,
                 int kv_lora) {
  const LatentDims m(H, D, R, V, kv_lora);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const auto t = static_cast<std::size_t>(n);
    const float* row = dqkv + t * 3 * m.q;
    float* dqt = dq + t * m.q;
    float* dkv = dkv_b + t * m.kb;
    float* dpe = dkv_a + t * m.ka + static_cast<std::size_t>(kv_lora);
    std::fill(dpe, dpe + m.r, 0.0f);
    for (std::size_t h = 0; h < m.h; ++h) {
      const float* qh = row + h * m.d;
      std::copy_n(qh, m.r, dqt + h * m.d + m.p);
      std::copy_n(qh + m.r, m.p, dqt + h * m.d);
      const float* kh = row + m.q + h * m.d;
      for (std::size_t j = 0; j < m.r; ++j) dpe[j] += kh[j];
      std::copy_n(kh + m.r, m.p, dkv + h * (m.p + m.v));
      std::copy_n(row + 2 * m.q + h * m.d, m.v, dkv + h * (m.p + m.v) + m.p);
    }
  }
}

void narrow_heads(float* narrow, const float* wide, std::size_t rows, int D, int V) {
  const auto d = static_cast<std::size_t>(D), v = static_cast<std::size_t>(V);
  for (std::size_t i = 0; i < rows; ++i) std::copy_n(wide + i * d, v, narrow + i * v);
}

void widen_heads(float* wide, const float* narrow, std::size_t rows, int D, int V) {
  const auto d = static_cast<std::size_t>(D), v = static_cast<std::size_t>(V);
  for (std::size_t i = 0; i < rows; ++i) {
    std::copy_n(narrow + i * v, v, wide + i * d);
    std::fill(wide + i * d + v, wide + (i + 1) * d, 0.0f);
  }
}

void l2_norm_heads(float* x, float* rstd, int N, int stride, int heads, int hs, float eps) {
  const auto D = static_cast<std::size_t>(hs), H = static_cast<std::size_t>(heads);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    for (std::size_t h = 0; h < H; ++h) {
      float* v = x + static_cast<std::size_t>(n) * static_cast<std::size_t>(stride) + h * D;
      double sum = 0;
      for (std::size_t i = 0; i < D; ++i) sum += static_cast<double>(v[i]) * static_cast<double>(v[i]);
      const auto r =
          static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(D) + static_cast<double>(eps)));
      for (std::size_t i = 0; i < D; ++i) v[i] *= r;
      if (rstd != nullptr) rstd[static_cast<std::size_t>(n) * H + h] = r;
    }
  }
}

void l2_norm_heads_backward(float* d, const float* y, const float* rstd, int N, int stride, int heads,
                            int hs) {
  const auto D = static_cast<std::size_t>(hs), H = static_cast<std::size_t>(heads);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t at = static_cast<std::size_t>(n) * static_cast<std::size_t>(stride) + h * D;
      double dot = 0;
      for (std::size_t i = 0; i < D; ++i)
        dot += static_cast<double>(d[at + i]) * static_cast<double>(y[at + i]);
      const auto mean = static_cast<float>(dot / static_cast<double>(D));
      const float r = rstd[static_cast<std::size_t>(n) * H + h];
      for (std::size_t i = 0; i < D; ++i) d[at + i] = r * (d[at + i] - y[at + i] * mean);
    }
  }
}

void scale_rows_by_position(float* rows, int N, int T, int stride, int width, const float* by_position) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float s = by_position[n % T];
    float* q = rows + static_cast<std::size_t>(n) * static_cast<std::size_t>(stride);
    for (int i = 0; i < width; ++i) q[i] *= s;
  }
}

void add_row_dots(float* dweight, const float* y, const float* x, const int* rows, int n, int C, int K) {
  const auto W = static_cast<std::size_t>(C);
#pragma omp parallel for
  for (int i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(rows[i]);
    const float* yi = y + static_cast<std::size_t>(i) * W;
    const float* xr = x + r / static_cast<std::size_t>(K) * W;
    float dot = 0;
    for (std::size_t j = 0; j < W; ++j) dot += yi[j] * xr[j];
    dweight[r] += dot;
  }
}

}  // namespace memwall::kernels
