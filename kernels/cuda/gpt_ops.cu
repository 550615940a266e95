// GPT-2 operators on the GPU (see gpt_ops.h): cuBLAS for the GEMMs, one kernel per elementwise or
// row-wise operator. Layouts follow kernels/cpu/gpt_ops.cpp; cuBLAS is column-major, so a row-major
// C[M, N] = A[M, K] . B[K, N] is computed as the column-major C^T = B^T . A^T.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cpu/gpt_ops.h"  // the attention's score scale, as the CPU kernels take it
#include "cuda/gpt_ops.h"

namespace memwall::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kLayernormEps = 1e-5f;

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}
cublasHandle_t as_handle(const Blas& b) {
  return static_cast<cublasHandle_t>(b.handle());
}
unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}
int launched() {
  return static_cast<int>(cudaGetLastError());
}
int blas_status(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? 0 : kBlasError + static_cast<int>(s);
}

// Sum (or max) of `v` over the block; every thread gets the result. `shared` holds 32 floats.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  if (warp == 0) {
    v = lane < warps ? shared[lane] : (kMax ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = kMax ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

// ---- elementwise ----

__global__ void add_bias_kernel(float* out, const float* bias, std::size_t n, int OC) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] += bias[i % OC];
}

// Column reductions over N rows: a block of kTile x kTile threads per kTile columns. Thread (x, y) sums
// column x's rows y, y + kTile, ... (each warp reads kTile adjacent floats of a row: coalesced), then row y
// == 0 adds the kTile partial sums in a fixed order: deterministic, and N / kTile loads per thread instead of
// N.
constexpr int kTile = 32;
const dim3 kTileBlock(kTile, kTile);
unsigned tiles_for(int columns) {
  return static_cast<unsigned>((columns + kTile - 1) / kTile);
}

// dcol[c] += sum over rows of m[N, C].
__global__ void column_sum_kernel(float* dcol, const float* m, int N, int C) {
  __shared__ float part[kTile][kTile + 1];
  const int c = blockIdx.x * kTile + threadIdx.x;
  float s = 0;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kTile) s += m[static_cast<std::size_t>(n) * C + c];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0;
    for (int k = 0; k < kTile; ++k) t += part[k][threadIdx.x];
    dcol[c] += t;
  }
}

__global__ void accumulate_kernel(float* out, const float* in, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] += in[i];
}

__global__ void accumulate_strided_kernel(float* out, int ld_out, const float* in, int ld_in, int rows,
                                          int cols, float scale) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t r = i / cols, c = i % cols;
  out[r * ld_out + c] += scale * in[r * ld_in + c];
}

// GELU (tanh approximation) and its derivative.
__device__ float gelu_of(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
}
__device__ float gelu_grad(float x) {
  const float t = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = gelu_of(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  dinp[i] += gelu_grad(inp[i]) * dout[i];
}

__global__ void gelu_exact_forward_kernel(float* out, const float* inp, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * 0.70710678118654752f));
}

__global__ void gelu_exact_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  dinp[i] += (cdf + x * pdf) * dout[i];
}

__global__ void relu_forward_kernel(float* out, const float* inp, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (inp[i] > 0.0f) dinp[i] += dout[i];
}

__global__ void relu2_forward_kernel(float* out, const float* inp, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = inp[i] > 0.0f ? inp[i] * inp[i] : 0.0f;
}

__global__ void relu2_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (inp[i] > 0.0f) dinp[i] += 2.0f * inp[i] * dout[i];
}

// ---- layernorm: a block per row ----

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int C, float offset) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const float* x = inp + row * C;
  float s = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) s += x[i];
  const float m = block_reduce<false>(s, shared) / static_cast<float>(C);
  float v = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) v += (x[i] - m) * (x[i] - m);
  const float r = 1.0f / sqrtf(block_reduce<false>(v, shared) / static_cast<float>(C) + kLayernormEps);
  float* o = out + row * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    o[i] =
        (x[i] - m) * r * (weight != nullptr ? weight[i] + offset : 1.0f) + (bias != nullptr ? bias[i] : 0.0f);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean, const float* rstd,
                                                int C, float offset) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const float* dy = dout + row * C;
  const float* x = inp + row * C;
  const float m = mean[row], r = rstd[row];
  float a = 0, b = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float dnorm = (weight != nullptr ? weight[i] + offset : 1.0f) * dy[i];
    a += dnorm;
    b += dnorm * (x[i] - m) * r;
  }
  const float dnorm_mean = block_reduce<false>(a, shared) / static_cast<float>(C);
  const float dnorm_norm_mean = block_reduce<false>(b, shared) / static_cast<float>(C);
  float* dx = dinp + row * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float norm = (x[i] - m) * r;
    dx[i] +=
        ((weight != nullptr ? weight[i] + offset : 1.0f) * dy[i] - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}

// dweight and dbias: column reductions as column_sum_kernel (dbias null: a LayerNorm without bias). RMSNorm's
// dweight too: `mean` and `dbias` null.
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean, const float* rstd,
                                                 int N, int C) {
  __shared__ float pw[kTile][kTile + 1], pb[kTile][kTile + 1];
  const int c = blockIdx.x * kTile + threadIdx.x;
  float dw = 0, db = 0;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kTile) {
      const std::size_t k = static_cast<std::size_t>(n) * C + c;
      db += dout[k];
      dw += (inp[k] - (mean != nullptr ? mean[n] : 0.0f)) * rstd[n] * dout[k];
    }
  }
  pw[threadIdx.y][threadIdx.x] = dw;
  pb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0, tb = 0;
    for (int k = 0; k < kTile; ++k) {
      tw += pw[k][threadIdx.x];
      tb += pb[k][threadIdx.x];
    }
    dweight[c] += tw;
    if (dbias != nullptr) dbias[c] += tb;
  }
}

// ---- RMSNorm, rotary positions, SwiGLU, grouped-query heads (the Llama shape) ----

// Scaled by weight + off (Gemma's 1 + weight: off 1).
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, int C,
                                       float eps, float off) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const float* x = inp + row * C;
  float s = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) s += x[i] * x[i];
  const float r = 1.0f / sqrtf(block_reduce<false>(s, shared) / static_cast<float>(C) + eps);
  float* o = out + row * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = x[i] * r * (weight[i] + off);
  if (threadIdx.x == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                              const float* weight, const float* rstd, int C, float off) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const float* dy = dout + row * C;
  const float* x = inp + row * C;
  const float r = rstd[row];
  float a = 0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) a += (weight[i] + off) * dy[i] * x[i];
  const float k = r * r * r * block_reduce<false>(a, shared) / static_cast<float>(C);
  float* dx = dinp + row * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) dx[i] += r * (weight[i] + off) * dy[i] - x[i] * k;
}

// Where head h starts in its row: NH query heads of hs, then the key heads of khs.
__device__ std::size_t head_start(int h, int NH, int hs, int khs) {
  return h < NH ? static_cast<std::size_t>(h) * hs
                : static_cast<std::size_t>(NH) * hs + static_cast<std::size_t>(h - NH) * khs;
}

// Qwen3's per-head RMSNorm: block b is head h = b % heads of row b / heads (rows `stride` apart), the first
// NH heads (queries, hs wide) with weight[0, hs), the others (keys, khs wide) with weight[hs, hs + khs).
__global__ void head_rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight,
                                            int stride, int NH, int heads, int hs, int khs, float eps,
                                            float off) {
  __shared__ float shared[32];
  const std::size_t b = blockIdx.x;
  const int h = static_cast<int>(b % heads), width = h < NH ? hs : khs;
  const std::size_t at = b / heads * stride + head_start(h, NH, hs, khs);
  const float* x = inp + at;
  const float* w = weight + (h < NH ? 0 : hs);
  float s = 0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) s += x[i] * x[i];
  const float r = 1.0f / sqrtf(block_reduce<false>(s, shared) / static_cast<float>(width) + eps);
  float* o = out + at;
  for (int i = threadIdx.x; i < width; i += blockDim.x) o[i] = x[i] * r * (w[i] + off);
  if (threadIdx.x == 0) rstd[b] = r;
}

// Its input gradient, written (not accumulated): head b's dx = r (v dy) - x r^3 mean(v dy x), v = w + off.
__global__ void head_rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                   const float* weight, const float* rstd, int stride, int NH,
                                                   int heads, int hs, int khs, float off) {
  __shared__ float shared[32];
  const std::size_t b = blockIdx.x;
  const int h = static_cast<int>(b % heads), width = h < NH ? hs : khs;
  const std::size_t at = b / heads * stride + head_start(h, NH, hs, khs);
  const float* dy = dout + at;
  const float* x = inp + at;
  const float* w = weight + (h < NH ? 0 : hs);
  const float r = rstd[b];
  float a = 0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) a += (w[i] + off) * dy[i] * x[i];
  const float k = r * r * r * block_reduce<false>(a, shared) / static_cast<float>(width);
  float* dx = dinp + at;
  for (int i = threadIdx.x; i < width; i += blockDim.x) dx[i] = r * (w[i] + off) * dy[i] - x[i] * k;
}

// Its weight gradient: block c < hs sums dy x r over every row's query heads at column c, block hs + c over
// the key heads' column c (a deterministic reduction, no atomics).
__global__ void head_rmsnorm_backward_weight_kernel(float* dweight, const float* dout, const float* inp,
                                                    const float* rstd, int N, int stride, int NH, int heads,
                                                    int hs, int khs) {
  __shared__ float shared[32];
  const bool query = static_cast<int>(blockIdx.x) < hs;
  const int c = query ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x) - hs, h0 = query ? 0 : NH,
            count = query ? NH : heads - NH;
  const std::size_t n = static_cast<std::size_t>(N) * count;
  float s = 0;
  for (std::size_t j = threadIdx.x; j < n; j += blockDim.x) {
    const std::size_t row = j / count;
    const int h = h0 + static_cast<int>(j % count);
    const std::size_t at = row * stride + head_start(h, NH, hs, khs) + c;
    s += dout[at] * inp[at] * rstd[row * heads + h];
  }
  const float total = block_reduce<false>(s, shared);
  if (threadIdx.x == 0) dweight[blockIdx.x] += total;
}

// StableLM 2 12B's per-head LayerNorm (no bias): block b is head h = b % heads of row b / heads (rows
// `stride` apart), each head with its own weight (head h's at weight + h hs).
__global__ void head_layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                              const float* weight, int stride, int heads, int hs, float eps) {
  __shared__ float shared[32];
  const std::size_t b = blockIdx.x;
  const std::size_t h = b % heads, at = b / heads * stride + h * hs;
  const float* x = inp + at;
  const float* w = weight + h * hs;
  float s = 0;
  for (int i = threadIdx.x; i < hs; i += blockDim.x) s += x[i];
  const float m = block_reduce<false>(s, shared) / static_cast<float>(hs);
  float v = 0;
  for (int i = threadIdx.x; i < hs; i += blockDim.x) v += (x[i] - m) * (x[i] - m);
  const float r = 1.0f / sqrtf(block_reduce<false>(v, shared) / static_cast<float>(hs) + eps);
  float* o = out + at;
  for (int i = threadIdx.x; i < hs; i += blockDim.x) o[i] = (x[i] - m) * r * w[i];
  if (threadIdx.x == 0) {
    mean[b] = m;
    rstd[b] = r;
  }
}

// Its input gradient, written (not accumulated): dx = r (w dy - mean(w dy) - n mean(w dy n)), n = (x - m) r.
__global__ void head_layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                     const float* weight, const float* mean,
                                                     const float* rstd, int stride, int heads, int hs) {
  __shared__ float shared[32];
  const std::size_t b = blockIdx.x;
  const std::size_t h = b % heads, at = b / heads * stride + h * hs;
  const float* dy = dout + at;
  const float* x = inp + at;
  const float* w = weight + h * hs;
  const float m = mean[b], r = rstd[b];
  float a = 0, c = 0;
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    a += w[i] * dy[i];
    c += w[i] * dy[i] * (x[i] - m) * r;
  }
  const float dnorm_mean = block_reduce<false>(a, shared) / static_cast<float>(hs);
  const float dnorm_norm_mean = block_reduce<false>(c, shared) / static_cast<float>(hs);
  float* dx = dinp + at;
  for (int i = threadIdx.x; i < hs; i += blockDim.x)
    dx[i] = (w[i] * dy[i] - dnorm_mean - (x[i] - m) * r * dnorm_norm_mean) * r;
}

// Its weight gradient: block j (head j / hs, column j % hs) sums dy (x - m) r over every row (deterministic).
__global__ void head_layernorm_backward_weight_kernel(float* dweight, const float* dout, const float* inp,
                                                      const float* mean, const float* rstd, int N, int stride,
                                                      int heads, int hs) {
  __shared__ float shared[32];
  const std::size_t h = blockIdx.x / hs, c = blockIdx.x % hs;
  float s = 0;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    const std::size_t at = static_cast<std::size_t>(n) * stride + h * hs + c,
                      r = static_cast<std::size_t>(n) * heads + h;
    s += dout[at] * (inp[at] - mean[r]) * rstd[r];
  }
  const float total = block_reduce<false>(s, shared);
  if (threadIdx.x == 0) dweight[blockIdx.x] += total;
}

// dst[r][col0 + i] = src[r][col0 + i] for i < width, rows `stride` apart (n = rows x width).
__global__ void copy_columns_kernel(float* dst, const float* src, int stride, int col0, int width,
                                    std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / width * stride + col0 + k % width;
  dst[at] = src[at];
}

// One thread per (row, head, pair): element i turns with i + hs/2 by the table's angle of (t, i).
// (pairs: element 2i turns with 2i + 1, Cohere's neighbouring pairs.)
__global__ void rope_kernel(float* x, int T, int stride, int heads, int hs, int half, const float* cos_t,
                            const float* sin_t, float sign, bool pairs, std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const int i = static_cast<int>(k % half), h = static_cast<int>((k / half) % heads);
  const std::size_t row = k / (static_cast<std::size_t>(half) * heads);
  const std::size_t at = (row % T) * half + i;
  const float c = cos_t[at], s = sign * sin_t[at];
  float* v = x + row * stride + static_cast<std::size_t>(h) * hs + (pairs ? 2 * i : i);
  const int partner = pairs ? 1 : half;
  const float a = v[0], d = v[partner];
  v[0] = a * c - d * s;
  v[partner] = d * c + a * s;
}

__global__ void swiglu_forward_kernel(float* out, const float* inp, int F, std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / F * 2 * F + k % F;
  const float g = inp[at], u = inp[at + F];
  out[k] = g / (1.0f + expf(-g)) * u;
}

__global__ void swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, int F,
                                       std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / F * 2 * F + k % F;
  const float g = inp[at], u = inp[at + F], sig = 1.0f / (1.0f + expf(-g));
  dinp[at + F] += dout[k] * g * sig;
  dinp[at] += dout[k] * u * sig * (1.0f + g * (1.0f - sig));
}

// gpt-oss's clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) g sigmoid(alpha g),
// the sigmoid's exponent clamped at 80 as the CPU's; backward passes nothing where a clamp cut.
__device__ float clamped_sigmoid(float g, float alpha, float limit) {
  return 1.0f / (1.0f + expf(fminf(80.0f, -alpha * fminf(g, limit))));
}

__global__ void clamped_swiglu_forward_kernel(float* out, const float* inp, int F, float alpha, float limit,
                                              std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / F * 2 * F + k % F;
  const float g = inp[at], u = inp[at + F];
  const float gc = fminf(g, limit), uc = fminf(fmaxf(u, -limit), limit);
  out[k] = (uc + 1.0f) * gc * clamped_sigmoid(g, alpha, limit);
}

__global__ void clamped_swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, int F,
                                               float alpha, float limit, std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / F * 2 * F + k % F;
  const float g = inp[at], u = inp[at + F], d = dout[k], sig = clamped_sigmoid(g, alpha, limit);
  const float gc = fminf(g, limit), uc = fminf(fmaxf(u, -limit), limit);
  if (u >= -limit && u <= limit) dinp[at + F] += d * gc * sig;
  if (g <= limit) dinp[at] += d * (uc + 1.0f) * sig * (1.0f + alpha * gc * (1.0f - sig));
}

// GeGLU (Gemma's): gelu(gate) * up over [N, 2F] -> [N, F], and back.
__global__ void geglu_forward_kernel(float* out, const float* inp, int F, std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / F * 2 * F + k % F;
  out[k] = gelu_of(inp[at]) * inp[at + F];
}

__global__ void geglu_backward_kernel(float* dinp, const float* inp, const float* dout, int F,
                                      std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t at = k / F * 2 * F + k % F;
  const float g = inp[at], u = inp[at + F];
  dinp[at + F] += dout[k] * gelu_of(g);
  dinp[at] += dout[k] * u * gelu_grad(g);
}

// dst [N, 3C] from src [N, C + 2 kv]: q as it is, each query head's key and value from its group's head.
__global__ void repeat_kv_kernel(float* dst, const float* src, int C, int kv, int hs, int group,
                                 std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t row = k / (3 * static_cast<std::size_t>(C));
  const int col = static_cast<int>(k % (3 * static_cast<std::size_t>(C)));
  const std::size_t width = static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(kv);
  int from = col;
  if (col >= C) {
    const int part = col < 2 * C ? 0 : 1, within = col - C - part * C;  // part 0: k, 1: v
    from = C + part * kv + within / hs / group * hs + within % hs;
  }
  dst[k] = src[row * width + from];
}

// dst [N, C + 2 kv] = the gradient of repeat_kv: dq as it is, each key/value head's the sum over its group.
__global__ void sum_kv_kernel(float* dst, const float* src, int C, int kv, int hs, int group, std::size_t n) {
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::size_t width = static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(kv);
  const std::size_t row = k / width;
  const int col = static_cast<int>(k % width);
  const float* s = src + row * 3 * static_cast<std::size_t>(C);
  if (col < C) {
    dst[k] = s[col];
    return;
  }
  const int part = col < C + kv ? 0 : 1, within = col - C - part * kv, head = within / hs, d = within % hs;
  float sum = 0;
  for (int j = 0; j < group; ++j) sum += s[C + part * C + (head * group + j) * hs + d];
  dst[k] = sum;
}

// ---- attention ----

// Where element i of a head-major [B, NH, T, hs] array sits in the token-major [B, T, NH, hs] one whose rows
// are `stride` floats apart starting at `offset`.
__device__ std::size_t token_major(std::size_t i, int T, int NH, int hs, int stride, int offset) {
  const std::size_t d = i % hs, t = (i / hs) % T, h = (i / (static_cast<std::size_t>(hs) * T)) % NH,
                    b = i / (static_cast<std::size_t>(hs) * T * NH);
  return (b * T + t) * stride + offset + h * hs + d;
}

// dst[B, NH, T, hs] = src[B, T, NH, hs] where src rows are `stride` floats apart starting at `offset`.
__global__ void split_heads_kernel(float* dst, const float* src, int B, int T, int NH, int hs, int stride,
                                   int offset) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(B) * NH * T * hs) return;
  dst[i] = src[token_major(i, T, NH, hs, stride, offset)];
}

// The inverse: dst[B, T, NH, hs] (rows `stride` apart from `offset`) = (or +=) src[B, NH, T, hs].
__global__ void merge_heads_kernel(float* dst, const float* src, int B, int T, int NH, int hs, int stride,
                                   int offset, bool add) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(B) * NH * T * hs) return;
  float& o = dst[token_major(i, T, NH, hs, stride, offset)];
  o = add ? o + src[i] : src[i];
}

// The first key query t sees: 0, t - window + 1 with a sliding window, or its chunk's first position with
// chunks of -window (window < 0), as kernels/cpu's attention_window_start.
__device__ int window_start(int t, int window) {
  if (window < 0) return t - t % -window;
  return window > 0 && t >= window ? t - window + 1 : 0;
}
// Past the last query that sees key u of T: u + window with a sliding window, its chunk's end with chunks.
__device__ int window_end(int u, int window, int T) {
  const int end = window > 0 ? u + window : window < 0 ? u - u % -window - window : T;
  return end < T ? end : T;
}

// ALiBi's slope of head h of NH (kernels/cpu's alibi_slope) times `alibi`, or 0 without ALiBi (0).
__device__ float alibi_slope_of(float alibi, int h, int NH) {
  if (alibi == 0) return 0.0f;
  int p = 1;
  while (p * 2 <= NH) p *= 2;
  const float e = h < p ? 8.0f * static_cast<float>(h + 1) / static_cast<float>(p)
                        : 4.0f * static_cast<float>(2 * (h - p) + 1) / static_cast<float>(p);
  return alibi * exp2f(-e);
}

// cap * tanh(s / cap), or s without a cap (0).
__device__ float capped(float s, float cap) {
  return cap > 0 ? cap * tanhf(s / cap) : s;
}

// In place over rows of `att` [rows, T] (row r is query t = r % T of head (r / T) % NH): causal softmax of
// the scaled scores (soft-capped first with `cap` > 0; plus `alibi` x the head's ALiBi slope x (u - t) with
// `alibi` > 0) over keys window_start(t) .. t, zero elsewhere.
// With `sinks` (gpt-oss's, [NH]) the head's sink logit joins the softmax as one more score, its probability
// nobody's.
__global__ void causal_softmax_kernel(float* att, int T, int window, float cap, int NH, float alibi,
                                      const float* sinks) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const int t = static_cast<int>(row % T), lo = window_start(t, window), h = static_cast<int>(row / T % NH);
  const float slope = alibi_slope_of(alibi, h, NH);
  float* a = att + row * T;
  float mx = -INFINITY;
  for (int u = lo + threadIdx.x; u <= t; u += blockDim.x) {
    a[u] = capped(a[u], cap) + slope * static_cast<float>(u - t);
    mx = fmaxf(mx, a[u]);
  }
  mx = block_reduce<true>(mx, shared);
  if (sinks != nullptr) mx = fmaxf(mx, sinks[h]);
  float s = 0;
  for (int u = lo + threadIdx.x; u <= t; u += blockDim.x) {
    const float e = expf(a[u] - mx);
    a[u] = e;
    s += e;
  }
  const float inv = 1.0f / (block_reduce<false>(s, shared) + (sinks != nullptr ? expf(sinks[h] - mx) : 0.0f));
  for (int u = threadIdx.x; u < T; u += blockDim.x) a[u] = u >= lo && u <= t ? a[u] * inv : 0.0f;
}

// In place: datt becomes the gradient of the scaled scores, att * (datt - sum(att * datt)) * scale, zero
// above the diagonal and before the window; with soft-capping times the cap's 1 - tanh^2 of the recomputed
// scaled scores `scores`.
// With `sink_rows`, each row's sink's gradient there: -(1 - sum(att)) sum(att * datt), the sink's
// probability times the row's dot.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int T, float scale, int window,
                                               const float* scores, float cap, float* sink_rows) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const int t = static_cast<int>(row % T), lo = window_start(t, window);
  float* d = datt + row * T;
  const float* a = att + row * T;
  float s = 0, kept = 0;
  for (int u = lo + threadIdx.x; u <= t; u += blockDim.x) {
    s += a[u] * d[u];
    kept += a[u];
  }
  s = block_reduce<false>(s, shared);
  if (sink_rows != nullptr) {
    kept = block_reduce<false>(kept, shared);
    if (threadIdx.x == 0) sink_rows[row] = -(1.0f - kept) * s;
  }
  for (int u = threadIdx.x; u < T; u += blockDim.x) {
    float g = u >= lo && u <= t ? a[u] * (d[u] - s) * scale : 0.0f;
    if (cap > 0) {
      const float th = tanhf(scores[row * T + u] / cap);
      g *= 1.0f - th * th;
    }
    d[u] = g;
  }
}

// dsinks[h] += each sequence's sum of its rows' sink gradients (rows [B][NH][T]), summed in double as the
// CPU's; one thread per head.
__global__ void sink_gradients_kernel(float* dsinks, const float* rows, int B, int NH, int T) {
  const int h = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (h >= NH) return;
  for (int b = 0; b < B; ++b) {
    double sum = 0;
    const float* r = rows + (static_cast<std::size_t>(b) * NH + h) * T;
    for (int t = 0; t < T; ++t) sum += static_cast<double>(r[t]);
    dsinks[h] += static_cast<float>(sum);
  }
}

__global__ void softcap_forward_kernel(float* x, std::size_t n, float cap) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void softcap_backward_kernel(float* dx, const float* y, std::size_t n, float cap) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float th = y[i] / cap;
  dx[i] *= 1.0f - th * th;
}

__global__ void scale_values_kernel(float* x, std::size_t n, float s) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void clamp_forward_kernel(float* x, std::size_t n, float clip) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = fminf(fmaxf(x[i], -clip), clip);
}

__global__ void clamp_backward_kernel(float* dx, const float* y, std::size_t n, float clip) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n && !(fabsf(y[i]) < clip)) dx[i] = 0.0f;
}

// ---- fused (flash) attention ----

// The tiles of one head size class: a block takes kTile query rows (or key rows) of one sequence and head,
// kTpr threads a row, and walks the other side's rows kTile at a time through shared memory, so each key
// and value row read from global memory serves kTile queries (each query row kTile keys). Rows are kHead + 1
// floats apart there (an odd stride: the rows a warp reads at once fall in different banks). The three
// classes fit the backward kernels' six tiles in 48 KB of static shared memory.
template <int Head, int Tile, int Tpr>
struct FlashTiles {
  static constexpr int kHead = Head, kTile = Tile, kTpr = Tpr, kThreads = Tile * Tpr;
  static constexpr int kStride = Head + 1;
  static constexpr int kPerRow = Tile / Tpr;      // scores a thread computes per tile
  static constexpr int kPerChannel = Head / Tpr;  // output channels a thread keeps
};
using FlashSmall = FlashTiles<64, 32, 4>;
using FlashMedium = FlashTiles<128, 16, 4>;
using FlashLarge = FlashTiles<256, 8, 8>;

// Blocks of a launch: a tile of rows of each sequence and head.
template <typename F>
unsigned flash_blocks(int B, int T, int NH) {
  return static_cast<unsigned>(static_cast<std::size_t>(B) * NH * ((T + F::kTile - 1) / F::kTile));
}

// Calls f with the smallest class that holds heads of hs channels; cudaErrorInvalidValue past the largest.
template <typename Fn>
int flash_tiles_for(int hs, Fn&& f) {
  if (hs <= FlashSmall::kHead) return f(FlashSmall{});
  if (hs <= FlashMedium::kHead) return f(FlashMedium{});
  if (hs <= FlashLarge::kHead) return f(FlashLarge{});
  return static_cast<int>(cudaErrorInvalidValue);
}

// One head's part of rows first .. first + kTile - 1 of `src` (row 0 of the sequence and head, `stride`
// floats a row) into `dst`: zero past the sequence's end and past the head's hs channels.
template <typename F>
__device__ void flash_load(float (*dst)[F::kStride], const float* src, std::size_t stride, int first, int T,
                           int hs) {
  for (int i = static_cast<int>(threadIdx.x); i < F::kTile * F::kHead; i += F::kThreads) {
    const int r = i / F::kHead, c = i % F::kHead;
    dst[r][c] = c < hs && first + r < T ? src[static_cast<std::size_t>(first + r) * stride + c] : 0.0f;
  }
}

// Whether query t (of T) sees key u.
__device__ bool flash_sees(int t, int u, int window, int T) {
  return t < T && u <= t && u >= window_start(t, window);
}

// Sum (or max) of v over the kLanes threads of a row (adjacent lanes of one warp); every one gets it.
template <bool kMax, int kLanes>
__device__ float row_reduce(float v) {
  for (int o = kLanes / 2; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  return v;
}

// Where a block works: block b of B*NH*tiles takes rows first .. last (at most kTile, within T) of sequence
// and head bh (head h of hs channels, ALiBi slope `slope`); q0 is that sequence and head's query row 0 in qkv
// (C3 floats a row), bt0 its row 0 in [B*T, C]. This thread works on row `row` of the tile, as its `lane`-th.
struct FlashBlock {
  int bh, h, first, last, hs, row, lane;
  float slope;
  std::size_t C3;
  const float* q0;
  std::size_t bt0;
};
template <typename F>
__device__ FlashBlock flash_block(const float* qkv, int T, int C, int NH, float alibi) {
  FlashBlock fb;
  const int tiles = (T + F::kTile - 1) / F::kTile;
  fb.bh = static_cast<int>(blockIdx.x) / tiles;
  fb.h = fb.bh % NH;
  fb.first = static_cast<int>(blockIdx.x) % tiles * F::kTile;
  fb.last = (fb.first + F::kTile < T ? fb.first + F::kTile : T) - 1;
  fb.hs = C / NH;
  fb.row = static_cast<int>(threadIdx.x) / F::kTpr;
  fb.lane = static_cast<int>(threadIdx.x) % F::kTpr;
  fb.slope = alibi_slope_of(alibi, fb.h, NH);
  fb.C3 = 3 * static_cast<std::size_t>(C);
  const std::size_t bt = static_cast<std::size_t>(fb.bh / NH) * T;
  fb.q0 = qkv + bt * fb.C3 + fb.h * fb.hs;
  fb.bt0 = bt * C + fb.h * fb.hs;
  return fb;
}

// Forward: a block per tile of query rows. Each thread scores kPerRow keys of its row a tile, the row's
// threads share its running maximum and sum, and thread `lane` keeps output channels lane, lane + kTpr, ...
// rescaled whenever the maximum grows.
template <typename F>
__global__ void flash_forward_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH,
                                     float scale, int window, float cap, float alibi, const float* sinks) {
  __shared__ float q[F::kTile][F::kStride];
  __shared__ float k[F::kTile][F::kStride];
  __shared__ float v[F::kTile][F::kStride];
  __shared__ float p[F::kTile][F::kTile + 1];
  const FlashBlock fb = flash_block<F>(qkv, T, C, NH, alibi);
  const int r = fb.row, lane = fb.lane, t = fb.first + r, hs = fb.hs, last = fb.last;
  const float slope = fb.slope;
  flash_load<F>(q, fb.q0, fb.C3, fb.first, T, hs);
  // (a sink logit starts the running maximum and sum: one more score, with no value)
  float m = sinks != nullptr ? sinks[fb.h] : -INFINITY, l = sinks != nullptr ? 1.0f : 0.0f;
  float acc[F::kPerChannel] = {};
  for (int u0 = window_start(fb.first, window); u0 <= last; u0 += F::kTile) {
    __syncthreads();  // q is in; the last tile's k, v and p are read
    flash_load<F>(k, fb.q0 + C, fb.C3, u0, T, hs);
    flash_load<F>(v, fb.q0 + 2 * C, fb.C3, u0, T, hs);
    __syncthreads();
    float s[F::kPerRow] = {};
    for (int d = 0; d < hs; ++d) {
      const float x = q[r][d];
      for (int j = 0; j < F::kPerRow; ++j) s[j] += x * k[lane + j * F::kTpr][d];
    }
    float tile_max = -INFINITY;
    for (int j = 0; j < F::kPerRow; ++j) {
      const int u = u0 + lane + j * F::kTpr;
      s[j] = flash_sees(t, u, window, T) ? capped(scale * s[j], cap) + slope * static_cast<float>(u - t)
                                         : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, row_reduce<true, F::kTpr>(tile_max));
    // (a row that has seen no key yet, its window starting past this tile, keeps nothing)
    const float corr = m_new == -INFINITY ? 1.0f : expf(m - m_new);  // 0 on the row's first key
    float sum = 0;
    for (int j = 0; j < F::kPerRow; ++j) {
      const float e = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
      p[r][lane + j * F::kTpr] = e;
      sum += e;
    }
    l = l * corr + row_reduce<false, F::kTpr>(sum);
    m = m_new;
    __syncthreads();  // p is in
    for (int w = 0; w < F::kPerChannel; ++w) acc[w] *= corr;
    for (int j = 0; j < F::kTile; ++j) {
      const float pj = p[r][j];
      for (int w = 0; w < F::kPerChannel; ++w) acc[w] += pj * v[j][lane + w * F::kTpr];
    }
  }
  if (t >= T) return;
  for (int w = 0; w < F::kPerChannel && lane + w * F::kTpr < hs; ++w)
    out[fb.bt0 + static_cast<std::size_t>(t) * C + lane + w * F::kTpr] = acc[w] / l;
  if (lane == 0) lse[static_cast<std::size_t>(fb.bh) * T + t] = m + logf(l);
}

// The gradient of one score from its two dot products q . k and dout . v: g = scale p (dout . v - D)
// (1 - tanh^2 under a cap), p = exp(score - L) the probability the forward pass gave it; *pt gets p.
__device__ float flash_score_gradient(float qk, float dv, int t, int u, float scale, float cap, float slope,
                                      float L, float D, float* pt) {
  const float sc = scale * qk, th = cap > 0 ? tanhf(sc / cap) : 0.0f;
  const float p = expf((cap > 0 ? cap * th : sc) + slope * static_cast<float>(u - t) - L);
  *pt = p;
  return scale * p * (dv - D) * (1.0f - th * th);
}

// Both backward passes' dot products: s[i] = a . x[lane + i kTpr] (q . k) and dp[i] = b . y[lane + i kTpr]
// (dout . v), a and b one row of the block's tiles, x and y the other side's.
template <typename F>
__device__ void flash_dot_pairs(float* s, float* dp, const float* a, const float* b,
                                const float (*x)[F::kStride], const float (*y)[F::kStride], int lane, int hs) {
  for (int i = 0; i < F::kPerRow; ++i) s[i] = dp[i] = 0;
  for (int d = 0; d < hs; ++d) {
    const float ad = a[d], bd = b[d];
    for (int i = 0; i < F::kPerRow; ++i) {
      s[i] += ad * x[lane + i * F::kTpr][d];
      dp[i] += bd * y[lane + i * F::kTpr][d];
    }
  }
}

// Backward for dq: a block per tile of query rows, dq[t] += sum_u g[t][u] k[u]; keeps each row's
// D = dout[t] . out[t] in rowsum for the key pass (and with sinks the sink's share of its gradient in
// sink_rows).
template <typename F>
__global__ void flash_backward_query_kernel(float* dqkv, float* rowsum, const float* dout, const float* qkv,
                                            const float* out, const float* lse, int T, int C, int NH,
                                            float scale, int window, float cap, float alibi,
                                            const float* sinks, float* sink_rows) {
  __shared__ float q[F::kTile][F::kStride];
  __shared__ float dy[F::kTile][F::kStride];
  __shared__ float k[F::kTile][F::kStride];
  __shared__ float v[F::kTile][F::kStride];
  __shared__ float g[F::kTile][F::kTile + 1];
  const FlashBlock fb = flash_block<F>(qkv, T, C, NH, alibi);
  const int r = fb.row, lane = fb.lane, t = fb.first + r, hs = fb.hs, last = fb.last;
  const std::size_t row = static_cast<std::size_t>(fb.bh) * T + t;
  const float slope = fb.slope;
  flash_load<F>(q, fb.q0, fb.C3, fb.first, T, hs);
  flash_load<F>(dy, dout + fb.bt0, static_cast<std::size_t>(C), fb.first, T, hs);
  __syncthreads();
  float d_part = 0;
  if (t < T) {
    for (int c = lane; c < hs; c += F::kTpr)
      d_part += dy[r][c] * out[fb.bt0 + static_cast<std::size_t>(t) * C + c];
  }
  const float D = row_reduce<false, F::kTpr>(d_part), L = t < T ? lse[row] : 0.0f;
  if (t < T && lane == 0) {
    rowsum[row] = D;
    if (sinks != nullptr) sink_rows[row] = -expf(sinks[fb.h] - L) * D;
  }
  float dq[F::kPerChannel] = {};
  for (int u0 = window_start(fb.first, window); u0 <= last; u0 += F::kTile) {
    __syncthreads();  // the last tile's k, v and g are read
    flash_load<F>(k, fb.q0 + C, fb.C3, u0, T, hs);
    flash_load<F>(v, fb.q0 + 2 * C, fb.C3, u0, T, hs);
    __syncthreads();
    float s[F::kPerRow], dp[F::kPerRow];
    flash_dot_pairs<F>(s, dp, q[r], dy[r], k, v, lane, hs);
    for (int j = 0; j < F::kPerRow; ++j) {
      const int u = u0 + lane + j * F::kTpr;
      float p = 0;
      g[r][lane + j * F::kTpr] = flash_sees(t, u, window, T)
                                     ? flash_score_gradient(s[j], dp[j], t, u, scale, cap, slope, L, D, &p)
                                     : 0.0f;
    }
    __syncthreads();  // g is in
    for (int j = 0; j < F::kTile; ++j) {
      const float gj = g[r][j];
      for (int w = 0; w < F::kPerChannel; ++w) dq[w] += gj * k[j][lane + w * F::kTpr];
    }
  }
  if (t >= T) return;
  float* dst = dqkv + (fb.q0 - qkv) + static_cast<std::size_t>(t) * fb.C3;
  for (int w = 0; w < F::kPerChannel && lane + w * F::kTpr < hs; ++w) dst[lane + w * F::kTpr] += dq[w];
}

// Backward for dk and dv: a block per tile of key rows, over the query tiles that see them (u <= t <
// window_end(u)): dk[u] += sum_t g[t][u] q[t], dv[u] += sum_t p[t][u] dout[t].
template <typename F>
__global__ void flash_backward_key_kernel(float* dqkv, const float* rowsum, const float* dout,
                                          const float* qkv, const float* lse, int T, int C, int NH,
                                          float scale, int window, float cap, float alibi) {
  __shared__ float k[F::kTile][F::kStride];
  __shared__ float v[F::kTile][F::kStride];
  __shared__ float q[F::kTile][F::kStride];
  __shared__ float dy[F::kTile][F::kStride];
  __shared__ float p[F::kTile][F::kTile + 1];
  __shared__ float g[F::kTile][F::kTile + 1];
  const FlashBlock fb = flash_block<F>(qkv, T, C, NH, alibi);
  const int j = fb.row, lane = fb.lane, u = fb.first + j, hs = fb.hs;
  const int end = window_end(fb.last, window, T);  // past the last query that sees a key of the tile
  const std::size_t row0 = static_cast<std::size_t>(fb.bh) * T;
  const float slope = fb.slope;
  flash_load<F>(k, fb.q0 + C, fb.C3, fb.first, T, hs);
  flash_load<F>(v, fb.q0 + 2 * C, fb.C3, fb.first, T, hs);
  float dk[F::kPerChannel] = {}, dv[F::kPerChannel] = {};
  for (int t0 = fb.first; t0 < end; t0 += F::kTile) {
    __syncthreads();  // k and v are in; the last tile's q, dy, p and g are read
    flash_load<F>(q, fb.q0, fb.C3, t0, T, hs);
    flash_load<F>(dy, dout + fb.bt0, static_cast<std::size_t>(C), t0, T, hs);
    __syncthreads();
    float s[F::kPerRow], dp[F::kPerRow];
    flash_dot_pairs<F>(s, dp, k[j], v[j], q, dy, lane, hs);
    for (int i = 0; i < F::kPerRow; ++i) {
      const int t = t0 + lane + i * F::kTpr;
      float pt = 0, gt = 0;
      if (u < T && flash_sees(t, u, window, T)) {
        gt = flash_score_gradient(s[i], dp[i], t, u, scale, cap, slope, lse[row0 + t], rowsum[row0 + t], &pt);
      }
      p[j][lane + i * F::kTpr] = pt;
      g[j][lane + i * F::kTpr] = gt;
    }
    __syncthreads();  // p and g are in
    for (int i = 0; i < F::kTile; ++i) {
      const float pi = p[j][i], gi = g[j][i];
      for (int w = 0; w < F::kPerChannel; ++w) {
        dk[w] += gi * q[i][lane + w * F::kTpr];
        dv[w] += pi * dy[i][lane + w * F::kTpr];
      }
    }
  }
  if (u >= T) return;
  float* dst = dqkv + (fb.q0 - qkv) + static_cast<std::size_t>(u) * fb.C3;
  for (int w = 0; w < F::kPerChannel && lane + w * F::kTpr < hs; ++w) {
    dst[C + lane + w * F::kTpr] += dk[w];
    dst[2 * static_cast<std::size_t>(C) + lane + w * F::kTpr] += dv[w];
  }
}

// ---- embedding, cross-entropy ----

__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* wte, const float* wpe,
                                         int T, int C, float scale, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / C;
  const int c = static_cast<int>(i % C);
  const int t = static_cast<int>(row % T);
  const float pos = wpe != nullptr ? wpe[static_cast<std::size_t>(t) * C + c] : 0.0f;
  out[i] = wte[static_cast<std::size_t>(tokens[row]) * C + c] * scale + pos;
}

__global__ void embedding_backward_tokens_kernel(float* dwte, const float* dout, const int* tokens, int C,
                                                 float scale, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / C;
  atomicAdd(&dwte[static_cast<std::size_t>(tokens[row]) * C + i % C], dout[i] * scale);
}

__global__ void embedding_backward_positions_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<std::size_t>(T) * C) return;
  float s = 0;
  for (int b = 0; b < B; ++b) s += dout[static_cast<std::size_t>(b) * T * C + i];
  dwpe[i] += s;
}

__global__ void crossentropy_forward_kernel(float* probs, float* losses, const float* logits,
                                            const int* targets, int V) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x;
  const float* l = logits + row * V;
  float* p = probs + row * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, l[i]);
  mx = block_reduce<true>(mx, shared);
  float s = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float e = expf(l[i] - mx);
    p[i] = e;
    s += e;
  }
  const float inv = 1.0f / block_reduce<false>(s, shared);
  for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] *= inv;
  __syncthreads();
  if (threadIdx.x == 0) losses[row] = -logf(p[targets[row]]);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const int* targets, int V,
                                             float inv_n, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / V;
  const int c = static_cast<int>(i % V);
  dlogits[i] += (probs[i] - (c == targets[row] ? 1.0f : 0.0f)) * inv_n;
}

// ---- GEMMs ----

// Row-major out[N, OC] (=, or += with beta 1) = inp[N, IC] . weight[OC, IC]^T.
cublasStatus_t gemm_nt(cublasHandle_t h, cudaDataType type, float* out, const void* inp, const void* weight,
                       int N, int IC, int OC, float beta) {
  const float one = 1.0f;
  return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, weight, type, IC, inp, type, IC, &beta,
                      out, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

int matmul_forward_any(Blas& blas, cudaDataType type, float* out, const void* inp, const void* weight,
                       const float* bias, int N, int IC, int OC, void* stream) {
  cublasHandle_t h = as_handle(blas);
  if (cublasStatus_t s = cublasSetStream(h, as_stream(stream)); s != CUBLAS_STATUS_SUCCESS)
    return blas_status(s);
  if (cublasStatus_t s = gemm_nt(h, type, out, inp, weight, N, IC, OC, 0.0f); s != CUBLAS_STATUS_SUCCESS)
    return blas_status(s);
  if (bias != nullptr) {
    const std::size_t n = static_cast<std::size_t>(N) * OC;
    add_bias_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, bias, n, OC);
    return launched();
  }
  return 0;
}

// dinp[N, IC] += dout[N, OC] . weight[OC, IC]; dweight[OC, IC] += dout^T . inp (operands of `type`).
int matmul_backward_any(Blas& blas, cudaDataType type, float* dinp, float* dweight, float* dbias,
                        const float* dout, const void* dout_op, const void* inp, const void* weight, int N,
                        int IC, int OC, void* stream) {
  cublasHandle_t h = as_handle(blas);
  const float one = 1.0f;
  if (cublasStatus_t s = cublasSetStream(h, as_stream(stream)); s != CUBLAS_STATUS_SUCCESS)
    return blas_status(s);
  if (dinp != nullptr) {
    const cublasStatus_t s =
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, weight, type, IC, dout_op, type, OC, &one,
                     dinp, CUDA_R_32F, IC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  }
  if (dweight != nullptr) {
    const cublasStatus_t s =
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, type, IC, dout_op, type, OC, &one,
                     dweight, CUDA_R_32F, IC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  }
  if (dbias != nullptr) {
    column_sum_kernel<<<tiles_for(OC), kTileBlock, 0, as_stream(stream)>>>(dbias, dout, N, OC);
    return launched();
  }
  return 0;
}

// Row-major batched C[b] (T x T or T x hs) products of the attention, fp32 (operands rounded to TF32 with
// `tf32`), batch = B * NH.
cublasStatus_t batched(cublasHandle_t h, bool tf32, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, float alpha, const float* A, int lda, long long sa, const float* Bm, int ldb,
                       long long sb, float* Cm, int ldc, long long sc, int batch) {
  const float zero = 0.0f;
  return cublasGemmStridedBatchedEx(
      h, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sa, Bm, CUDA_R_32F, ldb, sb, &zero, Cm, CUDA_R_32F, ldc,
      sc, batch, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

}  // namespace

// ---- Blas ----

Blas* Blas::create(int& status) {
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = cublasCreate(&h);
  status = blas_status(s);
  if (s != CUBLAS_STATUS_SUCCESS) return nullptr;
  Blas* b = new Blas();
  b->handle_ = h;
  return b;
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

int Blas::set_stream(void* stream) {
  return blas_status(cublasSetStream(static_cast<cublasHandle_t>(handle_), as_stream(stream)));
}

const char* error_string(int status) {
  if (status >= kBlasError) return cublasGetStatusString(static_cast<cublasStatus_t>(status - kBlasError));
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

// ---- matmul ----

int matmul_forward(Blas& blas, float* out, const float* inp, const float* weight, const float* bias, int N,
                   int IC, int OC, void* stream) {
  return matmul_forward_any(blas, CUDA_R_32F, out, inp, weight, bias, N, IC, OC, stream);
}

int matmul_forward_bf16(Blas& blas, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                        const float* bias, int N, int IC, int OC, void* stream) {
  return matmul_forward_any(blas, CUDA_R_16BF, out, inp, weight, bias, N, IC, OC, stream);
}

int matmul_backward(Blas& blas, float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, int N, int IC, int OC, void* stream) {
  return matmul_backward_any(blas, CUDA_R_32F, dinp, dweight, dbias, dout, dout, inp, weight, N, IC, OC,
                             stream);
}

int matmul_backward_bf16(Blas& blas, float* dinp, float* dweight, float* dbias, const float* dout,
                         const std::uint16_t* dout16, const std::uint16_t* inp16,
                         const std::uint16_t* weight16, int N, int IC, int OC, void* stream) {
  return matmul_backward_any(blas, CUDA_R_16BF, dinp, dweight, dbias, dout, dout16, inp16, weight16, N, IC,
                             OC, stream);
}

// ---- layernorm, GELU ----

int layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C, void* stream, float weight_offset) {
  if (N == 0) return 0;
  layernorm_forward_kernel<<<N, kThreads, 0, as_stream(stream)>>>(out, mean, rstd, inp, weight, bias, C,
                                                                  weight_offset);
  return launched();
}

int layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* mean, const float* rstd, int N, int C, void* stream,
                       float weight_offset) {
  if (N == 0) return 0;
  layernorm_backward_input_kernel<<<N, kThreads, 0, as_stream(stream)>>>(dinp, dout, inp, weight, mean, rstd,
                                                                         C, weight_offset);
  if (int e = launched(); e != 0 || dweight == nullptr) return e;  // (OLMo's norms: no parameters)
  layernorm_backward_params_kernel<<<tiles_for(C), kTileBlock, 0, as_stream(stream)>>>(dweight, dbias, dout,
                                                                                       inp, mean, rstd, N, C);
  return launched();
}

int rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                    void* stream, float weight_offset) {
  if (N == 0) return 0;
  rmsnorm_forward_kernel<<<N, kThreads, 0, as_stream(stream)>>>(out, rstd, inp, weight, C, eps,
                                                                weight_offset);
  return launched();
}

int rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     const float* rstd, int N, int C, void* stream, float weight_offset) {
  if (N == 0) return 0;
  rmsnorm_backward_input_kernel<<<N, kThreads, 0, as_stream(stream)>>>(dinp, dout, inp, weight, rstd, C,
                                                                       weight_offset);
  if (int e = launched(); e != 0) return e;
  layernorm_backward_params_kernel<<<tiles_for(C), kTileBlock, 0, as_stream(stream)>>>(
      dweight, nullptr, dout, inp, nullptr, rstd, N, C);
  return launched();
}

namespace {
// The columns past `normed` of N rows `stride` apart, src to dst (the values beside the normed q/k heads).
int copy_rest(float* dst, const float* src, int N, int stride, int normed, void* stream) {
  const int rest = stride - normed;
  if (rest == 0) return 0;
  const std::size_t n = static_cast<std::size_t>(N) * rest;
  copy_columns_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dst, src, stride, normed, rest, n);
  return launched();
}
}  // namespace

int head_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int stride,
                         int NH, int KVH, int hs, int khs, float eps, void* stream, float weight_offset) {
  const int heads = NH + KVH, normed = NH * hs + KVH * khs;
  if (N == 0) return 0;
  head_rmsnorm_forward_kernel<<<static_cast<unsigned>(N) * static_cast<unsigned>(heads), kThreads, 0,
                                as_stream(stream)>>>(out, rstd, inp, weight, stride, NH, heads, hs, khs, eps,
                                                     weight_offset);
  if (int e = launched(); e != 0) return e;
  return copy_rest(out, inp, N, stride, normed, stream);
}

int head_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, const float* rstd, int N, int stride, int NH, int KVH, int hs,
                          int khs, void* stream, float weight_offset) {
  const int heads = NH + KVH, normed = NH * hs + KVH * khs;
  if (N == 0) return 0;
  head_rmsnorm_backward_input_kernel<<<static_cast<unsigned>(N) * static_cast<unsigned>(heads), kThreads, 0,
                                       as_stream(stream)>>>(dinp, dout, inp, weight, rstd, stride, NH, heads,
                                                            hs, khs, weight_offset);
  if (int e = launched(); e != 0) return e;
  head_rmsnorm_backward_weight_kernel<<<static_cast<unsigned>(hs + khs), kThreads, 0, as_stream(stream)>>>(
      dweight, dout, inp, rstd, N, stride, NH, heads, hs, khs);
  if (int e = launched(); e != 0) return e;
  return copy_rest(dinp, dout, N, stride, normed, stream);
}

int head_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, int N,
                           int stride, int heads, int hs, float eps, void* stream) {
  if (N == 0) return 0;
  head_layernorm_forward_kernel<<<static_cast<unsigned>(N) * static_cast<unsigned>(heads), kThreads, 0,
                                  as_stream(stream)>>>(out, mean, rstd, inp, weight, stride, heads, hs, eps);
  if (int e = launched(); e != 0) return e;
  return copy_rest(out, inp, N, stride, heads * hs, stream);
}

int head_layernorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N, int stride,
                            int heads, int hs, void* stream) {
  if (N == 0) return 0;
  head_layernorm_backward_input_kernel<<<static_cast<unsigned>(N) * static_cast<unsigned>(heads), kThreads, 0,
                                         as_stream(stream)>>>(dinp, dout, inp, weight, mean, rstd, stride,
                                                              heads, hs);
  if (int e = launched(); e != 0) return e;
  head_layernorm_backward_weight_kernel<<<static_cast<unsigned>(heads * hs), kThreads, 0,
                                          as_stream(stream)>>>(dweight, dout, inp, mean, rstd, N, stride,
                                                               heads, hs);
  if (int e = launched(); e != 0) return e;
  return copy_rest(dinp, dout, N, stride, heads * hs, stream);
}

int rope_apply(float* x, int B, int T, int stride, int heads, int hs, const float* cos, const float* sin,
               bool inverse, void* stream, int rotary, bool pairs) {
  const int half = (rotary > 0 ? rotary : hs) / 2;
  const std::size_t n = static_cast<std::size_t>(B) * T * heads * half;
  if (n == 0) return 0;
  rope_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(x, T, stride, heads, hs, half, cos, sin,
                                                                 inverse ? -1.0f : 1.0f, pairs, n);
  return launched();
}

int swiglu_forward(float* out, const float* inp, int N, int F, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return 0;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, F, n);
  return launched();
}

int geglu_forward(float* out, const float* inp, int N, int F, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return 0;
  geglu_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, F, n);
  return launched();
}

int geglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return 0;
  geglu_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, F, n);
  return launched();
}

int swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return 0;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, F, n);
  return launched();
}

int clamped_swiglu_forward(float* out, const float* inp, int N, int F, float alpha, float limit, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return 0;
  clamped_swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, F, alpha, limit, n);
  return launched();
}

int clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, float alpha,
                            float limit, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return 0;
  clamped_swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, F, alpha,
                                                                                    limit, n);
  return launched();
}

int repeat_kv(float* qkv3, const float* qkv, int N, int C, int NH, int KVH, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * 3 * C;
  if (n == 0) return 0;
  const int hs = C / NH;
  repeat_kv_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(qkv3, qkv, C, KVH * hs, hs, NH / KVH,
                                                                      n);
  return launched();
}

int sum_kv(float* dqkv, const float* dqkv3, int N, int C, int NH, int KVH, void* stream) {
  const int hs = C / NH;
  const std::size_t n = static_cast<std::size_t>(N) * (C + 2 * KVH * hs);
  if (n == 0) return 0;
  sum_kv_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dqkv, dqkv3, C, KVH * hs, hs, NH / KVH, n);
  return launched();
}

int gelu_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (n == 0) return 0;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, n);
  return launched();
}

int gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (n == 0) return 0;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, n);
  return launched();
}

int gelu_exact_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (n == 0) return 0;
  gelu_exact_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, n);
  return launched();
}

int gelu_exact_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (n == 0) return 0;
  gelu_exact_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, n);
  return launched();
}

int relu_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (n == 0) return 0;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, n);
  return launched();
}

int relu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (n == 0) return 0;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, n);
  return launched();
}

int relu2_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (n == 0) return 0;
  relu2_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, inp, n);
  return launched();
}

int relu2_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (n == 0) return 0;
  relu2_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dinp, inp, dout, n);
  return launched();
}

int softcap_forward(float* x, std::size_t n, float cap, void* stream) {
  if (n == 0) return 0;
  softcap_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(x, n, cap);
  return launched();
}

int softcap_backward(float* dx, const float* y, std::size_t n, float cap, void* stream) {
  if (n == 0) return 0;
  softcap_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dx, y, n, cap);
  return launched();
}

int scale_values(float* x, std::size_t n, float s, void* stream) {
  if (n == 0) return 0;
  scale_values_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(x, n, s);
  return launched();
}

int clamp_forward(float* x, std::size_t n, float clip, void* stream) {
  if (n == 0) return 0;
  clamp_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(x, n, clip);
  return launched();
}

int clamp_backward(float* dx, const float* y, std::size_t n, float clip, void* stream) {
  if (n == 0) return 0;
  clamp_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dx, y, n, clip);
  return launched();
}

int accumulate(float* out, const float* in, std::size_t n, void* stream) {
  if (n == 0) return 0;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, in, n);
  return launched();
}

int accumulate_strided(float* out, int ld_out, const float* in, int ld_in, int rows, int cols, float scale,
                       void* stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  if (n == 0) return 0;
  accumulate_strided_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, ld_out, in, ld_in, rows,
                                                                               cols, scale);
  return launched();
}

// ---- attention ----

std::size_t attention_forward_scratch(int B, int T, int C) {
  return 4 * static_cast<std::size_t>(B) * T * C;
}

int attention_forward(Blas& blas, float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                      bool tf32, float* scratch, void* stream, int window, float score_scale_or_0,
                      float softcap, float alibi, const float* sinks) {
  const int hs = C / NH;
  const std::size_t btc = static_cast<std::size_t>(B) * T * C;
  float *q = scratch, *k = q + btc, *v = k + btc, *oh = v + btc;
  cudaStream_t st = as_stream(stream);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(q, qkv, B, T, NH, hs, 3 * C, 0);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(k, qkv, B, T, NH, hs, 3 * C, C);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(v, qkv, B, T, NH, hs, 3 * C, 2 * C);
  if (int e = launched(); e != 0) return e;
  cublasHandle_t h = as_handle(blas);
  if (cublasStatus_t s = cublasSetStream(h, st); s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  const long long th = static_cast<long long>(T) * hs, tt = static_cast<long long>(T) * T;
  const float scale = memwall::kernels::attention_scale(score_scale_or_0, hs);
  // att[t][u] = scale * q[t] . k[u]
  cublasStatus_t s =
      batched(h, tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, th, q, hs, th, att, T, tt, B * NH);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  causal_softmax_kernel<<<static_cast<unsigned>(static_cast<std::size_t>(B) * NH * T), kThreads, 0, st>>>(
      att, T, window, softcap, NH, alibi, sinks);
  if (int e = launched(); e != 0) return e;
  // oh[t] = sum_u att[t][u] v[u]
  s = batched(h, tf32, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, th, att, T, tt, oh, hs, th, B * NH);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  merge_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(out, oh, B, T, NH, hs, C, 0, false);
  return launched();
}

std::size_t attention_backward_scratch(int B, int T, int C, int NH, bool softcap, bool sinks) {
  return 7 * static_cast<std::size_t>(B) * T * C + (softcap ? 2 : 1) * static_cast<std::size_t>(B) * NH * T * T +
         (sinks ? static_cast<std::size_t>(B) * NH * T : 0);
}

int attention_backward(Blas& blas, float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                       int T, int C, int NH, bool tf32, float* scratch, void* stream, int window,
                       float score_scale_or_0, float softcap, const float* sinks, float* dsinks) {
  const int hs = C / NH;
  const std::size_t btc = static_cast<std::size_t>(B) * T * C;
  float *q = scratch, *k = q + btc, *v = k + btc, *dq = v + btc, *dk = dq + btc, *dv = dk + btc,
        *doh = dv + btc, *datt = doh + btc;
  cudaStream_t st = as_stream(stream);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(q, qkv, B, T, NH, hs, 3 * C, 0);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(k, qkv, B, T, NH, hs, 3 * C, C);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(v, qkv, B, T, NH, hs, 3 * C, 2 * C);
  split_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(doh, dout, B, T, NH, hs, C, 0);
  if (int e = launched(); e != 0) return e;
  cublasHandle_t h = as_handle(blas);
  if (cublasStatus_t s = cublasSetStream(h, st); s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  const long long th = static_cast<long long>(T) * hs, tt = static_cast<long long>(T) * T;
  const int batch = B * NH;
  // datt[t][u] = doh[t] . v[u]
  cublasStatus_t s =
      batched(h, tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, th, doh, hs, th, datt, T, tt, batch);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  // dv[u] = sum_t att[t][u] doh[t]
  s = batched(h, tf32, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, doh, hs, th, att, T, tt, dv, hs, th, batch);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  const float scale = memwall::kernels::attention_scale(score_scale_or_0, hs);
  float* scores = nullptr;  // soft-capping: the scaled scores again, after datt
  if (softcap > 0) {
    scores = datt + static_cast<std::size_t>(batch) * T * T;
    s = batched(h, tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, th, q, hs, th, scores, T, tt,
                batch);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  }
  // (the rows' sink gradients after the scores, or after datt without a cap)
  float* sink_rows = sinks != nullptr ? datt + (softcap > 0 ? 2 : 1) * static_cast<std::size_t>(batch) * T * T
                                      : nullptr;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(static_cast<std::size_t>(batch) * T), kThreads, 0,
                                   st>>>(datt, att, T, scale, window, scores, softcap, sink_rows);
  if (int e = launched(); e != 0) return e;
  if (sinks != nullptr && dsinks != nullptr) {
    sink_gradients_kernel<<<blocks_for(static_cast<std::size_t>(NH)), kThreads, 0, st>>>(dsinks, sink_rows, B,
                                                                                         NH, T);
    if (int e = launched(); e != 0) return e;
  }
  // dq[t] = sum_u dpre[t][u] k[u]; dk[u] = sum_t dpre[t][u] q[t]
  s = batched(h, tf32, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, hs, th, datt, T, tt, dq, hs, th, batch);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  s = batched(h, tf32, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, hs, th, datt, T, tt, dk, hs, th, batch);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_status(s);
  merge_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(dqkv, dq, B, T, NH, hs, 3 * C, 0, true);
  merge_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(dqkv, dk, B, T, NH, hs, 3 * C, C, true);
  merge_heads_kernel<<<blocks_for(btc), kThreads, 0, st>>>(dqkv, dv, B, T, NH, hs, 3 * C, 2 * C, true);
  return launched();
}

// ---- fused (flash) attention ----

int flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                            void* stream, int window, float scale, float softcap, float alibi,
                            const float* sinks) {
  const int hs = C / NH;
  return flash_tiles_for(hs, [&](auto tiles) {
    using F = decltype(tiles);
    if (static_cast<std::size_t>(B) * NH * T == 0) return 0;
    flash_forward_kernel<F><<<flash_blocks<F>(B, T, NH), F::kThreads, 0, as_stream(stream)>>>(
        out, lse, qkv, T, C, NH, memwall::kernels::attention_scale(scale, hs), window, softcap, alibi, sinks);
    return launched();
  });
}

std::size_t flash_attention_backward_scratch(int B, int T, int NH, bool sinks) {
  return (sinks ? 2 : 1) * static_cast<std::size_t>(B) * NH * T;
}

int flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH, float* scratch, void* stream,
                             int window, float score_scale_or_0, float softcap, float alibi,
                             const float* sinks, float* dsinks) {
  const int hs = C / NH;
  return flash_tiles_for(hs, [&](auto tiles) {
    using F = decltype(tiles);
    const std::size_t rows = static_cast<std::size_t>(B) * NH * T;
    if (rows == 0) return 0;
    const float scale = memwall::kernels::attention_scale(score_scale_or_0, hs);
    cudaStream_t st = as_stream(stream);
    float* sink_rows = sinks != nullptr ? scratch + rows : nullptr;
    const unsigned blocks = flash_blocks<F>(B, T, NH);
    flash_backward_query_kernel<F><<<blocks, F::kThreads, 0, st>>>(
        dqkv, scratch, dout, qkv, out, lse, T, C, NH, scale, window, softcap, alibi, sinks, sink_rows);
    if (int e = launched(); e != 0) return e;
    if (sinks != nullptr && dsinks != nullptr) {
      sink_gradients_kernel<<<blocks_for(static_cast<std::size_t>(NH)), kThreads, 0, st>>>(dsinks, sink_rows,
                                                                                           B, NH, T);
      if (int e = launched(); e != 0) return e;
    }
    flash_backward_key_kernel<F><<<blocks, F::kThreads, 0, st>>>(dqkv, scratch, dout, qkv, lse, T, C, NH,
                                                                 scale, window, softcap, alibi);
    return launched();
  });
}

// ---- embedding, cross-entropy ----

int embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                      void* stream, float scale) {
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  if (n == 0) return 0;
  embedding_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(out, tokens, wte, wpe, T, C,
                                                                              scale, n);
  return launched();
}

int embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                       void* stream, float scale) {
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  if (n == 0) return 0;
  embedding_backward_tokens_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dwte, dout, tokens, C,
                                                                                      scale, n);
  if (int e = launched(); e != 0) return e;
  if (dwpe == nullptr) return 0;
  const std::size_t tc = static_cast<std::size_t>(T) * C;
  embedding_backward_positions_kernel<<<blocks_for(tc), kThreads, 0, as_stream(stream)>>>(dwpe, dout, B, T,
                                                                                          C);
  return launched();
}

int crossentropy_forward(float* probs, float* losses, const float* logits, const int* targets, int N, int V,
                         void* stream) {
  if (N == 0) return 0;
  crossentropy_forward_kernel<<<N, kThreads, 0, as_stream(stream)>>>(probs, losses, logits, targets, V);
  return launched();
}

int crossentropy_backward(float* dlogits, const float* probs, const int* targets, int N, int V,
                          void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * V;
  if (n == 0) return 0;
  crossentropy_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
      dlogits, probs, targets, V, 1.0f / static_cast<float>(N), n);
  return launched();
}

// ---- a mixture of experts' rows ----

namespace {

__global__ void gather_rows_kernel(float* out, const float* x, const int* rows, const float* weight, int C,
                                   int K, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / C, c = i % C, r = static_cast<std::size_t>(rows[row]);
  const float v = x[r / K * C + c];
  out[i] = weight != nullptr ? v * weight[r] : v;
}

// (each token once among an expert's rows: no two threads add into the same element)
__global__ void scatter_add_rows_kernel(float* dst, const float* y, const int* rows, const float* weight,
                                        float scale, int C, int K, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / C, c = i % C, r = static_cast<std::size_t>(rows[row]);
  const float w = weight != nullptr ? scale * weight[r] : scale;
  dst[r / K * C + c] += w * y[i];
}

// One block per routed row.
__global__ void scatter_add_rows_backward_kernel(float* dy, float* dweight, const float* dx, const float* y,
                                                 const int* rows, const float* weight, float scale, int C,
                                                 int K) {
  __shared__ float shared[32];
  const std::size_t row = blockIdx.x, r = static_cast<std::size_t>(rows[row]);
  const float w = weight != nullptr ? scale * weight[r] : scale;
  const float* d = dx + r / K * C;
  const float* yi = y + row * C;
  float* out = dy + row * C;
  float dot = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    out[c] = w * d[c];
    dot += d[c] * yi[c];
  }
  dot = block_reduce<false>(dot, shared);
  if (dweight != nullptr && threadIdx.x == 0) dweight[r] = scale * dot;
}

__global__ void gated_add_forward_kernel(float* dst, float* s, const float* z, const float* y, float scale,
                                         int C) {
  const std::size_t t = blockIdx.x;
  const float g = 1.0f / (1.0f + expf(-z[t]));
  if (threadIdx.x == 0) s[t] = g;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dst[t * C + c] += scale * g * y[t * C + c];
}

__global__ void gated_add_backward_kernel(float* dy, float* dz, const float* dx, const float* y, const float* s,
                                          float scale, int C) {
  __shared__ float shared[32];
  const std::size_t t = blockIdx.x;
  float dot = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    dy[t * C + c] = scale * s[t] * dx[t * C + c];
    dot += dx[t * C + c] * y[t * C + c];
  }
  dot = block_reduce<false>(dot, shared);
  if (threadIdx.x == 0) dz[t] = scale * dot * s[t] * (1 - s[t]);
}

}  // namespace

int gather_rows(float* out, const float* x, const int* rows, const float* weight, int n, int C, int K, int,
                void* stream) {
  const std::size_t total = static_cast<std::size_t>(n) * C;
  if (total == 0) return 0;
  gather_rows_kernel<<<blocks_for(total), kThreads, 0, as_stream(stream)>>>(out, x, rows, weight, C, K, total);
  return launched();
}

int scatter_add_rows(float* dst, const float* y, const int* rows, const float* weight, float scale, int n,
                     int C, int K, int, void* stream) {
  const std::size_t total = static_cast<std::size_t>(n) * C;
  if (total == 0) return 0;
  scatter_add_rows_kernel<<<blocks_for(total), kThreads, 0, as_stream(stream)>>>(dst, y, rows, weight, scale, C,
                                                                                 K, total);
  return launched();
}

int scatter_add_rows_backward(float* dy, float* dweight, const float* dx, const float* y, const int* rows,
                              const float* weight, float scale, int n, int C, int K, int, void* stream) {
  if (n == 0) return 0;
  scatter_add_rows_backward_kernel<<<n, kThreads, 0, as_stream(stream)>>>(dy, dweight, dx, y, rows, weight,
                                                                          scale, C, K);
  return launched();
}

int gated_add_forward(float* dst, float* s, const float* z, const float* y, float scale, int N, int C,
                      void* stream) {
  if (N == 0) return 0;
  gated_add_forward_kernel<<<N, kThreads, 0, as_stream(stream)>>>(dst, s, z, y, scale, C);
  return launched();
}

int gated_add_backward(float* dy, float* dz, const float* dx, const float* y, const float* s, float scale, int N,
                       int C, void* stream) {
  if (N == 0) return 0;
  gated_add_backward_kernel<<<N, kThreads, 0, as_stream(stream)>>>(dy, dz, dx, y, s, scale, C);
  return launched();
}

// ---- DeepSeek's latent attention ----

namespace {

// One thread per element of qkv [N][3 H D].
__global__ void mla_assemble_kernel(float* qkv, const float* q, const float* kv_a, const float* kv_b, int H, int D,
                                    int R, int V, int kv_lora, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t Q = static_cast<std::size_t>(H) * D, t = i / (3 * Q), col = i % (3 * Q), part = col / Q,
                    h = col % Q / D, j = col % D;
  const int P = D - R;
  const std::size_t KB = static_cast<std::size_t>(H) * (P + V);
  float x = 0;
  if (part == 0) {  // query: rotary first
    x = j < static_cast<std::size_t>(R) ? q[t * Q + h * D + P + j] : q[t * Q + h * D + (j - R)];
  } else if (part == 1) {  // key: the token's rotary part, then the head's own
    x = j < static_cast<std::size_t>(R) ? kv_a[t * (kv_lora + R) + kv_lora + j]
                                        : kv_b[t * KB + h * (P + V) + (j - R)];
  } else if (j < static_cast<std::size_t>(V)) {  // value, zeros after it
    x = kv_b[t * KB + h * (P + V) + P + j];
  }
  qkv[i] = x;
}

// One thread per element of a query or key head (dq, dkv_b's keys) and of a value (dkv_b's values); the
// shared rotary key's gradient in mla_rope_sum_kernel.
__global__ void mla_scatter_kernel(float* dq, float* dkv_b, const float* dqkv, int H, int D, int R, int V,
                                   std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t Q = static_cast<std::size_t>(H) * D, t = i / Q, h = i % Q / D, j = i % D;
  const int P = D - R;
  const std::size_t KB = static_cast<std::size_t>(H) * (P + V);
  const float* row = dqkv + t * 3 * Q;
  // dq: the file's [nope | rotary] from the kernels' [rotary | nope]
  if (j < static_cast<std::size_t>(P)) {
    dq[t * Q + h * D + j] = row[h * D + R + j];
    dkv_b[t * KB + h * (P + V) + j] = row[Q + h * D + R + j];
  } else {
    dq[t * Q + h * D + j] = row[h * D + (j - P)];
  }
  if (j < static_cast<std::size_t>(V)) dkv_b[t * KB + h * (P + V) + P + j] = row[2 * Q + h * D + j];
}

// The shared rotary key's gradient: the sum over the heads, head after head (the CPU's order).
__global__ void mla_rope_sum_kernel(float* dkv_a, const float* dqkv, int H, int D, int R, int kv_lora,
                                    std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t Q = static_cast<std::size_t>(H) * D, t = i / R, j = i % R;
  float sum = 0;
  for (int h = 0; h < H; ++h) sum += dqkv[t * 3 * Q + Q + h * D + j];
  dkv_a[t * (kv_lora + R) + kv_lora + j] = sum;
}

// One thread per element of the wide heads [rows][D].
__global__ void narrow_heads_kernel(float* narrow, const float* wide, int D, int V, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / D, j = i % D;
  if (j < static_cast<std::size_t>(V)) narrow[row * V + j] = wide[i];
}

__global__ void widen_heads_kernel(float* wide, const float* narrow, int D, int V, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / D, j = i % D;
  wide[i] = j < static_cast<std::size_t>(V) ? narrow[row * V + j] : 0.0f;
}

}  // namespace

int mla_assemble(float* qkv, const float* q, const float* kv_a, const float* kv_b, int N, int H, int D, int R,
                 int V, int kv_lora, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * 3 * H * D;
  if (n == 0) return 0;
  mla_assemble_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(qkv, q, kv_a, kv_b, H, D, R, V, kv_lora,
                                                                          n);
  return launched();
}

int mla_scatter(float* dq, float* dkv_a, float* dkv_b, const float* dqkv, int N, int H, int D, int R, int V,
                int kv_lora, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * H * D, nr = static_cast<std::size_t>(N) * R;
  if (n == 0) return 0;
  mla_scatter_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dq, dkv_b, dqkv, H, D, R, V, n);
  if (int e = launched(); e != 0) return e;
  if (nr == 0) return 0;
  mla_rope_sum_kernel<<<blocks_for(nr), kThreads, 0, as_stream(stream)>>>(dkv_a, dqkv, H, D, R, kv_lora, nr);
  return launched();
}

int narrow_heads(float* narrow, const float* wide, std::size_t rows, int D, int V, void* stream) {
  const std::size_t n = rows * static_cast<std::size_t>(D);
  if (n == 0) return 0;
  narrow_heads_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(narrow, wide, D, V, n);
  return launched();
}

int widen_heads(float* wide, const float* narrow, std::size_t rows, int D, int V, void* stream) {
  const std::size_t n = rows * static_cast<std::size_t>(D);
  if (n == 0) return 0;
  widen_heads_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(wide, narrow, D, V, n);
  return launched();
}

// ---- Llama 4's ----

namespace {

// One thread per (row, head): the mean of squares in double, as the CPU's.
__global__ void l2_norm_heads_kernel(float* x, float* rstd, int stride, int heads, int hs, float eps,
                                     std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / heads, h = i % heads;
  float* v = x + row * stride + h * hs;
  double sum = 0;
  for (int j = 0; j < hs; ++j) sum += static_cast<double>(v[j]) * static_cast<double>(v[j]);
  const auto r = static_cast<float>(1.0 / sqrt(sum / hs + static_cast<double>(eps)));
  for (int j = 0; j < hs; ++j) v[j] *= r;
  if (rstd != nullptr) rstd[i] = r;
}

__global__ void l2_norm_heads_backward_kernel(float* d, const float* y, const float* rstd, int stride, int heads,
                                              int hs, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t at = i / heads * stride + i % heads * hs;
  double dot = 0;
  for (int j = 0; j < hs; ++j) dot += static_cast<double>(d[at + j]) * static_cast<double>(y[at + j]);
  const auto mean = static_cast<float>(dot / hs);
  const float r = rstd[i];
  for (int j = 0; j < hs; ++j) d[at + j] = r * (d[at + j] - y[at + j] * mean);
}

__global__ void scale_rows_by_position_kernel(float* rows, int T, int stride, int width, const float* by_position,
                                              std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = i / width, j = i % width;
  rows[row * stride + j] *= by_position[row % T];
}

// One block per routed row: dweight[rows[i]] += y[i] . x[rows[i] / K].
__global__ void add_row_dots_kernel(float* dweight, const float* y, const float* x, const int* rows, int C, int K) {
  __shared__ float shared[32];
  const std::size_t i = blockIdx.x, r = static_cast<std::size_t>(rows[i]);
  const float* yi = y + i * C;
  const float* xr = x + r / K * C;
  float dot = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dot += yi[c] * xr[c];
  dot = block_reduce<false>(dot, shared);
  if (threadIdx.x == 0) dweight[r] += dot;
}

}  // namespace

int l2_norm_heads(float* x, float* rstd, int N, int stride, int heads, int hs, float eps, void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * heads;
  if (n == 0) return 0;
  l2_norm_heads_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(x, rstd, stride, heads, hs, eps, n);
  return launched();
}

int l2_norm_heads_backward(float* d, const float* y, const float* rstd, int N, int stride, int heads, int hs,
                           void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * heads;
  if (n == 0) return 0;
  l2_norm_heads_backward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(d, y, rstd, stride, heads, hs,
                                                                                   n);
  return launched();
}

int scale_rows_by_position(float* rows, int N, int T, int stride, int width, const float* by_position,
                           void* stream) {
  const std::size_t n = static_cast<std::size_t>(N) * width;
  if (n == 0) return 0;
  scale_rows_by_position_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(rows, T, stride, width,
                                                                                   by_position, n);
  return launched();
}

int add_row_dots(float* dweight, const float* y, const float* x, const int* rows, int n, int C, int K, int,
                 void* stream) {
  if (n == 0) return 0;
  add_row_dots_kernel<<<n, kThreads, 0, as_stream(stream)>>>(dweight, y, x, rows, C, K);
  return launched();
}

}  // namespace memwall::kernels::cuda
