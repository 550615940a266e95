// kernels/cuda's interface on the emulated GPU (see emulation.h): each "kernel" checks that its pointer
// arguments are device memory of the right size, then queues the kernels/cpu operator on the stream.
#include <cuda_runtime_api.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cpu/adam.h"
#include "cpu/cast.h"
#include "cpu/gpt_ops.h"
#include "cuda/adam.h"
#include "cuda/cast.h"
#include "cuda/emulation/emulation.h"
#include "cuda/gpt_ops.h"

namespace memwall::kernels::cuda {

namespace {

namespace emu = memwall::emulated_gpu;

struct Arg {
  const void* p;
  std::size_t bytes;
  const char* what;
  bool write = false;  // the kernel writes it (else only reads)
};

// The device memory the next queued kernel of this thread reads and writes (set by device_args).
thread_local std::vector<emu::Access> tl_access;
thread_local const char* tl_kernel = "";

// 0 when every non-null argument is device memory of its size; notes what the kernel reads and writes.
int device_args(const char* kernel, std::initializer_list<Arg> args) {
  tl_access.clear();
  tl_kernel = kernel;
  for (const Arg& a : args) {
    if (a.p == nullptr) continue;
    std::string what = std::string(kernel) + " " + a.what;
    if (int e = emu::check_device(a.p, a.bytes, what.c_str()); e != 0) return e;
    tl_access.push_back({a.p, a.bytes, a.write});
  }
  return 0;
}

// Queues a kernel with the accesses device_args noted.
int enqueue(void* stream, std::function<void()> work) {
  return enqueue(stream, std::move(work), tl_access, tl_kernel);
}

std::size_t f32(std::size_t n) {
  return n * sizeof(float);
}
std::size_t f32(int a, int b) {
  return static_cast<std::size_t>(a) * static_cast<std::size_t>(b) * sizeof(float);
}
std::size_t b16(int a, int b) {
  return static_cast<std::size_t>(a) * static_cast<std::size_t>(b) * 2;
}

}  // namespace

Blas* Blas::create(int& status) {
  status = 0;
  Blas* b = new Blas();
  b->handle_ = b;  // a non-null handle; nothing behind it
  return b;
}

Blas::~Blas() = default;

int Blas::set_stream(void*) {
  return 0;
}

const char* error_string(int status) {
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

int matmul_forward(Blas&, float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                   int OC, void* stream) {
  if (int e = device_args("matmul_forward", {{out, f32(N, OC), "out", true},
                                             {inp, f32(N, IC), "inp"},
                                             {weight, f32(OC, IC), "weight"},
                                             {bias, f32(1, OC), "bias"}}))
    return e;
  return enqueue(stream, [=] { kernels::matmul_forward(out, inp, weight, bias, N, IC, OC); });
}

int matmul_forward_bf16(Blas&, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                        const float* bias, int N, int IC, int OC, void* stream) {
  if (int e = device_args("matmul_forward_bf16", {{out, f32(N, OC), "out", true},
                                                  {inp, b16(N, IC), "inp"},
                                                  {weight, b16(OC, IC), "weight"},
                                                  {bias, f32(1, OC), "bias"}}))
    return e;
  return enqueue(stream, [=] { kernels::matmul_forward_bf16(out, inp, weight, bias, N, IC, OC); });
}

int matmul_backward(Blas&, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int N, int IC, int OC, void* stream) {
  if (int e = device_args("matmul_backward", {{dinp, f32(N, IC), "dinp", true},
                                              {dweight, f32(OC, IC), "dweight", true},
                                              {dbias, f32(1, OC), "dbias", true},
                                              {dout, f32(N, OC), "dout"},
                                              {inp, f32(N, IC), "inp"},
                                              {weight, f32(OC, IC), "weight"}}))
    return e;
  return enqueue(stream,
                 [=] { kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC); });
}

int matmul_backward_bf16(Blas&, float* dinp, float* dweight, float* dbias, const float* dout,
                         const std::uint16_t* dout16, const std::uint16_t* inp16,
                         const std::uint16_t* weight16, int N, int IC, int OC, void* stream) {
  if (int e = device_args("matmul_backward_bf16", {{dinp, f32(N, IC), "dinp", true},
                                                   {dweight, f32(OC, IC), "dweight", true},
                                                   {dbias, f32(1, OC), "dbias", true},
                                                   {dout, f32(N, OC), "dout"},
                                                   {dout16, b16(N, OC), "dout16"},
                                                   {inp16, b16(N, IC), "inp16"},
                                                   {weight16, b16(OC, IC), "weight16"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::matmul_backward_bf16(dinp, dweight, dbias, dout, dout16, inp16, weight16, N, IC, OC);
  });
}

int layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C, void* stream, float weight_offset) {
  if (int e = device_args("layernorm_forward", {{out, f32(N, C), "out", true},
                                                {mean, f32(1, N), "mean", true},
                                                {rstd, f32(1, N), "rstd", true},
                                                {inp, f32(N, C), "inp"},
                                                {weight, f32(1, C), "weight"},
                                                {bias, f32(1, C), "bias"}}))
    return e;
  return enqueue(
      stream, [=] { kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, weight_offset); });
}

int layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* mean, const float* rstd, int N, int C, void* stream,
                       float weight_offset) {
  if (int e = device_args("layernorm_backward", {{dinp, f32(N, C), "dinp", true},
                                                 {dweight, f32(1, C), "dweight", true},
                                                 {dbias, f32(1, C), "dbias", true},
                                                 {dout, f32(N, C), "dout"},
                                                 {inp, f32(N, C), "inp"},
                                                 {weight, f32(1, C), "weight"},
                                                 {mean, f32(1, N), "mean", true},
                                                 {rstd, f32(1, N), "rstd", true}}))
    return e;
  return enqueue(stream, [=] {
    kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, weight_offset);
  });
}

int rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                    void* stream, float weight_offset) {
  if (int e = device_args("rmsnorm_forward", {{out, f32(N, C), "out", true},
                                              {rstd, f32(1, N), "rstd", true},
                                              {inp, f32(N, C), "inp"},
                                              {weight, f32(1, C), "weight"}}))
    return e;
  return enqueue(stream, [=] { kernels::rmsnorm_forward(out, rstd, inp, weight, N, C, eps, weight_offset); });
}

int rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     const float* rstd, int N, int C, void* stream, float weight_offset) {
  if (int e = device_args("rmsnorm_backward", {{dinp, f32(N, C), "dinp", true},
                                               {dweight, f32(1, C), "dweight", true},
                                               {dout, f32(N, C), "dout"},
                                               {inp, f32(N, C), "inp"},
                                               {weight, f32(1, C), "weight"},
                                               {rstd, f32(1, N), "rstd"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, weight_offset);
  });
}

int head_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int stride,
                         int NH, int KVH, int hs, int khs, float eps, void* stream, float weight_offset) {
  if (int e = device_args("head_rmsnorm_forward", {{out, f32(N, stride), "out", true},
                                                   {rstd, f32(N, NH + KVH), "rstd", true},
                                                   {inp, f32(N, stride), "inp"},
                                                   {weight, f32(1, hs + khs), "weight"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::head_rmsnorm_forward(out, rstd, inp, weight, N, stride, NH, KVH, hs, khs, eps, weight_offset);
  });
}

int head_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, const float* rstd, int N, int stride, int NH, int KVH, int hs,
                          int khs, void* stream, float weight_offset) {
  if (int e = device_args("head_rmsnorm_backward", {{dinp, f32(N, stride), "dinp", true},
                                                    {dweight, f32(1, hs + khs), "dweight", true},
                                                    {dout, f32(N, stride), "dout"},
                                                    {inp, f32(N, stride), "inp"},
                                                    {weight, f32(1, hs + khs), "weight"},
                                                    {rstd, f32(N, NH + KVH), "rstd"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::head_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, stride, NH, KVH, hs, khs,
                                   weight_offset);
  });
}

int head_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, int N,
                           int stride, int heads, int hs, float eps, void* stream) {
  if (int e = device_args("head_layernorm_forward", {{out, f32(N, stride), "out", true},
                                                     {mean, f32(N, heads), "mean", true},
                                                     {rstd, f32(N, heads), "rstd", true},
                                                     {inp, f32(N, stride), "inp"},
                                                     {weight, f32(heads, hs), "weight"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::head_layernorm_forward(out, mean, rstd, inp, weight, N, stride, heads, hs, eps);
  });
}

int head_layernorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N, int stride,
                            int heads, int hs, void* stream) {
  if (int e = device_args("head_layernorm_backward", {{dinp, f32(N, stride), "dinp", true},
                                                      {dweight, f32(heads, hs), "dweight", true},
                                                      {dout, f32(N, stride), "dout"},
                                                      {inp, f32(N, stride), "inp"},
                                                      {weight, f32(heads, hs), "weight"},
                                                      {mean, f32(N, heads), "mean"},
                                                      {rstd, f32(N, heads), "rstd"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::head_layernorm_backward(dinp, dweight, dout, inp, weight, mean, rstd, N, stride, heads, hs);
  });
}

int rope_apply(float* x, int B, int T, int stride, int heads, int hs, const float* cos, const float* sin,
               bool inverse, void* stream, int rotary, bool pairs) {
  // The rows' last element read is at (B T - 1) stride + heads hs.
  const std::size_t bytes =
      f32(static_cast<std::size_t>(B * T - 1) * stride + static_cast<std::size_t>(heads * hs));
  const int rot = rotary > 0 ? rotary : hs;
  const std::size_t table = f32(static_cast<std::size_t>(T) * static_cast<std::size_t>(rot / 2));
  if (int e = device_args("rope_apply", {{x, bytes, "x", true}, {cos, table, "cos"}, {sin, table, "sin"}})) {
    return e;
  }
  return enqueue(stream,
                 [=] { kernels::rope_apply(x, B, T, stride, heads, hs, cos, sin, inverse, rot, pairs); });
}

int swiglu_forward(float* out, const float* inp, int N, int F, void* stream) {
  if (int e = device_args("swiglu_forward", {{out, f32(N, F), "out", true}, {inp, f32(N, 2 * F), "inp"}}))
    return e;
  return enqueue(stream, [=] { kernels::swiglu_forward(out, inp, N, F); });
}

int clamped_swiglu_forward(float* out, const float* inp, int N, int F, float alpha, float limit,
                           void* stream) {
  if (int e =
          device_args("clamped_swiglu_forward", {{out, f32(N, F), "out", true}, {inp, f32(N, 2 * F), "inp"}}))
    return e;
  return enqueue(stream, [=] { kernels::clamped_swiglu_forward(out, inp, N, F, alpha, limit); });
}

int clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, float alpha,
                            float limit, void* stream) {
  if (int e = device_args(
          "clamped_swiglu_backward",
          {{dinp, f32(N, 2 * F), "dinp", true}, {inp, f32(N, 2 * F), "inp"}, {dout, f32(N, F), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::clamped_swiglu_backward(dinp, inp, dout, N, F, alpha, limit); });
}

int swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, void* stream) {
  if (int e = device_args(
          "swiglu_backward",
          {{dinp, f32(N, 2 * F), "dinp", true}, {inp, f32(N, 2 * F), "inp"}, {dout, f32(N, F), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::swiglu_backward(dinp, inp, dout, N, F); });
}

int geglu_forward(float* out, const float* inp, int N, int F, void* stream) {
  if (int e = device_args("geglu_forward", {{out, f32(N, F), "out", true}, {inp, f32(N, 2 * F), "inp"}}))
    return e;
  return enqueue(stream, [=] { kernels::geglu_forward(out, inp, N, F); });
}

int geglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, void* stream) {
  if (int e = device_args(
          "geglu_backward",
          {{dinp, f32(N, 2 * F), "dinp", true}, {inp, f32(N, 2 * F), "inp"}, {dout, f32(N, F), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::geglu_backward(dinp, inp, dout, N, F); });
}

int repeat_kv(float* qkv3, const float* qkv, int N, int C, int NH, int KVH, void* stream) {
  const int W = C + 2 * KVH * (C / NH);
  if (int e = device_args("repeat_kv", {{qkv3, f32(N, 3 * C), "qkv3", true}, {qkv, f32(N, W), "qkv"}}))
    return e;
  return enqueue(stream, [=] { kernels::repeat_kv(qkv3, qkv, N, C, NH, KVH); });
}

int sum_kv(float* dqkv, const float* dqkv3, int N, int C, int NH, int KVH, void* stream) {
  const int W = C + 2 * KVH * (C / NH);
  if (int e = device_args("sum_kv", {{dqkv, f32(N, W), "dqkv", true}, {dqkv3, f32(N, 3 * C), "dqkv3"}}))
    return e;
  return enqueue(stream, [=] { kernels::sum_kv(dqkv, dqkv3, N, C, NH, KVH); });
}

int gelu_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (int e = device_args("gelu_forward", {{out, f32(n), "out", true}, {inp, f32(n), "inp"}})) return e;
  return enqueue(stream, [=] { kernels::gelu_forward(out, inp, n); });
}

int gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (int e = device_args("gelu_backward",
                          {{dinp, f32(n), "dinp", true}, {inp, f32(n), "inp"}, {dout, f32(n), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::gelu_backward(dinp, inp, dout, n); });
}

int gelu_exact_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (int e = device_args("gelu_exact_forward", {{out, f32(n), "out", true}, {inp, f32(n), "inp"}})) return e;
  return enqueue(stream, [=] { kernels::gelu_exact_forward(out, inp, n); });
}

int gelu_exact_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (int e = device_args("gelu_exact_backward",
                          {{dinp, f32(n), "dinp", true}, {inp, f32(n), "inp"}, {dout, f32(n), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::gelu_exact_backward(dinp, inp, dout, n); });
}

int relu_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (int e = device_args("relu_forward", {{out, f32(n), "out", true}, {inp, f32(n), "inp"}})) return e;
  return enqueue(stream, [=] { kernels::relu_forward(out, inp, n); });
}

int relu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (int e = device_args("relu_backward",
                          {{dinp, f32(n), "dinp", true}, {inp, f32(n), "inp"}, {dout, f32(n), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::relu_backward(dinp, inp, dout, n); });
}

int relu2_forward(float* out, const float* inp, std::size_t n, void* stream) {
  if (int e = device_args("relu2_forward", {{out, f32(n), "out", true}, {inp, f32(n), "inp"}})) return e;
  return enqueue(stream, [=] { kernels::relu2_forward(out, inp, n); });
}

int relu2_backward(float* dinp, const float* inp, const float* dout, std::size_t n, void* stream) {
  if (int e = device_args("relu2_backward",
                          {{dinp, f32(n), "dinp", true}, {inp, f32(n), "inp"}, {dout, f32(n), "dout"}}))
    return e;
  return enqueue(stream, [=] { kernels::relu2_backward(dinp, inp, dout, n); });
}

// The real kernels' scratch sizes (kernels/cuda/gpt_ops.cu), so the model's allocations are checked.
std::size_t attention_forward_scratch(int B, int T, int C) {
  return 4 * static_cast<std::size_t>(B) * T * C;
}

std::size_t attention_backward_scratch(int B, int T, int C, int NH, bool softcap, bool sinks) {
  return 7 * static_cast<std::size_t>(B) * T * C +
         (softcap ? 2 : 1) * static_cast<std::size_t>(B) * NH * T * T +
         (sinks ? static_cast<std::size_t>(B) * NH * T : 0);
}

int softcap_forward(float* x, std::size_t n, float cap, void* stream) {
  if (int e = device_args("softcap_forward", {{x, f32(n), "x", true}})) return e;
  return enqueue(stream, [=] { kernels::softcap_forward(x, n, cap); });
}

int softcap_backward(float* dx, const float* y, std::size_t n, float cap, void* stream) {
  if (int e = device_args("softcap_backward", {{dx, f32(n), "dx", true}, {y, f32(n), "y"}})) return e;
  return enqueue(stream, [=] { kernels::softcap_backward(dx, y, n, cap); });
}

int scale_values(float* x, std::size_t n, float s, void* stream) {
  if (int e = device_args("scale_values", {{x, f32(n), "x", true}})) return e;
  return enqueue(stream, [=] { kernels::scale_values(x, n, s); });
}

int clamp_forward(float* x, std::size_t n, float clip, void* stream) {
  if (int e = device_args("clamp_forward", {{x, f32(n), "x", true}})) return e;
  return enqueue(stream, [=] { kernels::clamp_forward(x, n, clip); });
}

int clamp_backward(float* dx, const float* y, std::size_t n, float clip, void* stream) {
  if (int e = device_args("clamp_backward", {{dx, f32(n), "dx", true}, {y, f32(n), "y"}})) return e;
  return enqueue(stream, [=] { kernels::clamp_backward(dx, y, n, clip); });
}

// The emulation computes attention in fp32 whether or not `tf32` allows TF32 operands (cuda_simt_tests
// checks the TF32 path on the emulated cuBLAS).
int attention_forward(Blas&, float* out, float* att, const float* qkv, int B, int T, int C, int NH, bool,
                      float* scratch, void* stream, int window, float scale, float softcap, float alibi,
                      const float* sinks) {
  const int N = B * T;
  if (int e = device_args("attention_forward",
                          {{out, f32(N, C), "out", true},
                           {att, f32(B * NH, T * T), "att", true},
                           {qkv, f32(N, 3 * C), "qkv"},
                           {scratch, f32(attention_forward_scratch(B, T, C)), "scratch", true},
                           {sinks, f32(NH, 1), "sinks"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::attention_forward(out, att, qkv, B, T, C, NH, window, scale, softcap, alibi, sinks);
  });
}

int attention_backward(Blas&, float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                       int T, int C, int NH, bool, float* scratch, void* stream, int window, float scale,
                       float softcap, const float* sinks, float* dsinks) {
  const int N = B * T;
  if (int e =
          device_args("attention_backward",
                      {{dqkv, f32(N, 3 * C), "dqkv", true},
                       {dout, f32(N, C), "dout"},
                       {qkv, f32(N, 3 * C), "qkv"},
                       {att, f32(B * NH, T * T), "att"},
                       {scratch, f32(attention_backward_scratch(B, T, C, NH, softcap > 0, sinks != nullptr)),
                        "scratch", true},
                       {sinks, f32(NH, 1), "sinks"},
                       {dsinks, f32(NH, 1), "dsinks", true}}))
    return e;
  return enqueue(stream, [=] {
    kernels::attention_backward(dqkv, dout, qkv, att, B, T, C, NH, window, scale, softcap, sinks, dsinks);
  });
}

// The fused kernels' limit (head size at most two channels for each of a block's 128 threads) is the real
// one's too.
int flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                            void* stream, int window, float scale, float softcap, float alibi,
                            const float* sinks) {
  if (C / NH > 256) return static_cast<int>(cudaErrorInvalidValue);
  const int N = B * T;
  if (int e = device_args("flash_attention_forward", {{out, f32(N, C), "out", true},
                                                      {lse, f32(B * NH, T), "lse", true},
                                                      {qkv, f32(N, 3 * C), "qkv"},
                                                      {sinks, f32(NH, 1), "sinks"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::flash_attention_forward(out, lse, qkv, B, T, C, NH, window, scale, softcap, alibi, sinks);
  });
}

std::size_t flash_attention_backward_scratch(int B, int T, int NH, bool sinks) {
  return (sinks ? 2 : 1) * static_cast<std::size_t>(B) * NH * T;
}

int flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH, float* scratch, void* stream,
                             int window, float scale, float softcap, float alibi, const float* sinks,
                             float* dsinks) {
  if (C / NH > 256) return static_cast<int>(cudaErrorInvalidValue);
  const int N = B * T;
  if (int e = device_args(
          "flash_attention_backward",
          {{dqkv, f32(N, 3 * C), "dqkv", true},
           {dout, f32(N, C), "dout"},
           {qkv, f32(N, 3 * C), "qkv"},
           {out, f32(N, C), "out"},
           {lse, f32(B * NH, T), "lse"},
           {scratch, f32(flash_attention_backward_scratch(B, T, NH, sinks != nullptr)), "scratch", true},
           {sinks, f32(NH, 1), "sinks"},
           {dsinks, f32(NH, 1), "dsinks", true}}))
    return e;
  return enqueue(stream, [=] {
    kernels::flash_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, window, scale, softcap, alibi,
                                      sinks, dsinks);
  });
}

int embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                      void* stream, float scale) {
  if (int e = device_args("embedding_forward", {{out, f32(B * T, C), "out", true},
                                                {tokens, f32(B, T), "tokens"},
                                                {wte, f32(1, C), "wte"},
                                                {wpe, f32(T, C), "wpe"}}))
    return e;
  return enqueue(stream, [=] { kernels::embedding_forward(out, tokens, wte, wpe, B, T, C, scale); });
}

int embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                       void* stream, float scale) {
  if (int e = device_args("embedding_backward", {{dwte, f32(1, C), "dwte", true},
                                                 {dwpe, f32(T, C), "dwpe", true},
                                                 {dout, f32(B * T, C), "dout"},
                                                 {tokens, f32(B, T), "tokens"}}))
    return e;
  return enqueue(stream, [=] { kernels::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, scale); });
}

int crossentropy_forward(float* probs, float* losses, const float* logits, const int* targets, int N, int V,
                         void* stream) {
  if (int e = device_args("crossentropy_forward", {{probs, f32(N, V), "probs", true},
                                                   {losses, f32(1, N), "losses", true},
                                                   {logits, f32(N, V), "logits"},
                                                   {targets, f32(1, N), "targets"}}))
    return e;
  return enqueue(stream, [=] {
    kernels::crossentropy_forward(probs, logits, targets, N, V);
    for (int r = 0; r < N; ++r)
      losses[r] = -std::log(probs[static_cast<std::size_t>(r) * static_cast<std::size_t>(V) +
                                  static_cast<std::size_t>(targets[r])]);
  });
}

int crossentropy_backward(float* dlogits, const float* probs, const int* targets, int N, int V,
                          void* stream) {
  if (int e = device_args("crossentropy_backward", {{dlogits, f32(N, V), "dlogits", true},
                                                    {probs, f32(N, V), "probs"},
                                                    {targets, f32(1, N), "targets"}}))
    return e;
  return enqueue(stream, [=] { kernels::crossentropy_backward(dlogits, probs, targets, N, V); });
}

int accumulate(float* out, const float* in, std::size_t n, void* stream) {
  if (int e = device_args("accumulate", {{out, f32(n), "out", true}, {in, f32(n), "in"}})) return e;
  return enqueue(stream, [=] {
    for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
  });
}

int accumulate_strided(float* out, int ld_out, const float* in, int ld_in, int rows, int cols, float scale,
                       void* stream) {
  if (rows == 0 || cols == 0) return 0;
  const std::size_t out_n =
      static_cast<std::size_t>(rows - 1) * static_cast<std::size_t>(ld_out) + static_cast<std::size_t>(cols);
  const std::size_t in_n =
      static_cast<std::size_t>(rows - 1) * static_cast<std::size_t>(ld_in) + static_cast<std::size_t>(cols);
  if (int e = device_args("accumulate_strided", {{out, f32(out_n), "out", true}, {in, f32(in_n), "in"}}))
    return e;
  return enqueue(stream, [=] {
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
      for (std::size_t c = 0; c < static_cast<std::size_t>(cols); ++c)
        out[r * static_cast<std::size_t>(ld_out) + c] += scale * in[r * static_cast<std::size_t>(ld_in) + c];
    }
  });
}

int gather_rows(float* out, const float* x, const int* rows, const float* weight, int n, int C, int K,
                int tokens, void* stream) {
  if (n == 0) return 0;
  if (int e = device_args("gather_rows", {{out, f32(n, C), "out", true},
                                          {x, f32(tokens, C), "x"},
                                          {rows, f32(n, 1), "rows"},
                                          {weight, f32(tokens, K), "weight"}}))
    return e;
  return enqueue(stream, [=] { kernels::gather_rows(out, x, rows, weight, n, C, K); });
}

int scatter_add_rows(float* dst, const float* y, const int* rows, const float* weight, float scale, int n,
                     int C, int K, int tokens, void* stream) {
  if (n == 0) return 0;
  if (int e = device_args("scatter_add_rows", {{dst, f32(tokens, C), "dst", true},
                                               {y, f32(n, C), "y"},
                                               {rows, f32(n, 1), "rows"},
                                               {weight, f32(tokens, K), "weight"}}))
    return e;
  return enqueue(stream, [=] { kernels::scatter_add_rows(dst, y, rows, weight, scale, n, C, K); });
}

int scatter_add_rows_backward(float* dy, float* dweight, const float* dx, const float* y, const int* rows,
                              const float* weight, float scale, int n, int C, int K, int tokens,
                              void* stream) {
  if (n == 0) return 0;
  if (int e = device_args("scatter_add_rows_backward", {{dy, f32(n, C), "dy", true},
                                                        {dweight, f32(tokens, K), "dweight", true},
                                                        {dx, f32(tokens, C), "dx"},
                                                        {y, f32(n, C), "y"},
                                                        {rows, f32(n, 1), "rows"},
                                                        {weight, f32(tokens, K), "weight"}}))
    return e;
  return enqueue(
      stream, [=] { kernels::scatter_add_rows_backward(dy, dweight, dx, y, rows, weight, scale, n, C, K); });
}

int gated_add_forward(float* dst, float* s, const float* z, const float* y, float scale, int N, int C,
                      void* stream) {
  if (int e = device_args("gated_add_forward", {{dst, f32(N, C), "dst", true},
                                                {s, f32(N, 1), "s", true},
                                                {z, f32(N, 1), "z"},
                                                {y, f32(N, C), "y"}}))
    return e;
  return enqueue(stream, [=] { kernels::gated_add_forward(dst, s, z, y, scale, N, C); });
}

int gated_add_backward(float* dy, float* dz, const float* dx, const float* y, const float* s, float scale,
                       int N, int C, void* stream) {
  if (int e = device_args("gated_add_backward", {{dy, f32(N, C), "dy", true},
                                                 {dz, f32(N, 1), "dz", true},
                                                 {dx, f32(N, C), "dx"},
                                                 {y, f32(N, C), "y"},
                                                 {s, f32(N, 1), "s"}}))
    return e;
  return enqueue(stream, [=] { kernels::gated_add_backward(dy, dz, dx, y, s, scale, N, C); });
}

int mla_assemble(float* qkv, const float* q, const float* kv_a, const float* kv_b, int N, int H, int D, int R,
                 int V, int kv_lora, void* stream) {
  const int P = D - R;
  if (int e = device_args("mla_assemble", {{qkv, f32(N, 3 * H * D), "qkv", true},
                                           {q, f32(N, H * D), "q"},
                                           {kv_a, f32(N, kv_lora + R), "kv_a"},
                                           {kv_b, f32(N, H * (P + V)), "kv_b"}}))
    return e;
  return enqueue(stream, [=] { kernels::mla_assemble(qkv, q, kv_a, kv_b, N, H, D, R, V, kv_lora); });
}

int mla_scatter(float* dq, float* dkv_a, float* dkv_b, const float* dqkv, int N, int H, int D, int R, int V,
                int kv_lora, void* stream) {
  const int P = D - R;
  if (int e = device_args("mla_scatter", {{dq, f32(N, H * D), "dq", true},
                                          {dkv_a, f32(N, kv_lora + R), "dkv_a", true},
                                          {dkv_b, f32(N, H * (P + V)), "dkv_b", true},
                                          {dqkv, f32(N, 3 * H * D), "dqkv"}}))
    return e;
  return enqueue(stream, [=] { kernels::mla_scatter(dq, dkv_a, dkv_b, dqkv, N, H, D, R, V, kv_lora); });
}

int narrow_heads(float* narrow, const float* wide, std::size_t rows, int D, int V, void* stream) {
  if (int e = device_args("narrow_heads", {{narrow, f32(rows * static_cast<std::size_t>(V)), "narrow", true},
                                           {wide, f32(rows * static_cast<std::size_t>(D)), "wide"}}))
    return e;
  return enqueue(stream, [=] { kernels::narrow_heads(narrow, wide, rows, D, V); });
}

int widen_heads(float* wide, const float* narrow, std::size_t rows, int D, int V, void* stream) {
  if (int e = device_args("widen_heads", {{wide, f32(rows * static_cast<std::size_t>(D)), "wide", true},
                                          {narrow, f32(rows * static_cast<std::size_t>(V)), "narrow"}}))
    return e;
  return enqueue(stream, [=] { kernels::widen_heads(wide, narrow, rows, D, V); });
}

int l2_norm_heads(float* x, float* rstd, int N, int stride, int heads, int hs, float eps, void* stream) {
  if (int e =
          device_args("l2_norm_heads", {{x, f32(N, stride), "x", true}, {rstd, f32(N, heads), "rstd", true}}))
    return e;
  return enqueue(stream, [=] { kernels::l2_norm_heads(x, rstd, N, stride, heads, hs, eps); });
}

int l2_norm_heads_backward(float* d, const float* y, const float* rstd, int N, int stride, int heads, int hs,
                           void* stream) {
  if (int e = device_args(
          "l2_norm_heads_backward",
          {{d, f32(N, stride), "d", true}, {y, f32(N, stride), "y"}, {rstd, f32(N, heads), "rstd"}}))
    return e;
  return enqueue(stream, [=] { kernels::l2_norm_heads_backward(d, y, rstd, N, stride, heads, hs); });
}

int scale_rows_by_position(float* rows, int N, int T, int stride, int width, const float* by_position,
                           void* stream) {
  if (int e = device_args("scale_rows_by_position",
                          {{rows, f32(N, stride), "rows", true}, {by_position, f32(T, 1), "by_position"}}))
    return e;
  return enqueue(stream, [=] { kernels::scale_rows_by_position(rows, N, T, stride, width, by_position); });
}

int add_row_dots(float* dweight, const float* y, const float* x, const int* rows, int n, int C, int K,
                 int tokens, void* stream) {
  if (n == 0) return 0;
  if (int e = device_args("add_row_dots", {{dweight, f32(tokens, K), "dweight", true},
                                           {y, f32(n, C), "y"},
                                           {x, f32(tokens, C), "x"},
                                           {rows, f32(n, 1), "rows"}}))
    return e;
  return enqueue(stream, [=] { kernels::add_row_dots(dweight, y, x, rows, n, C, K); });
}

int sum_of_squares(const float* x, std::size_t n, double* partials, double* out, void* stream) {
  if (int e = device_args("sum_of_squares", {{x, f32(n), "x"},
                                             {partials, kSquaresSplit * sizeof(double), "partials", true},
                                             {out, sizeof(double), "out", true}}))
    return e;
  return enqueue(stream, [=] { *out = kernels::sum_of_squares(x, n); });
}

int adam_step(const AdamDeviceArrays& a, const AdamHyper& h, void* stream) {
  if (int e = device_args("adam_step", {{a.params, f32(a.n), "params", true},
                                        {a.exp_avg, f32(a.n), "exp_avg", true},
                                        {a.exp_avg_sq, f32(a.n), "exp_avg_sq", true},
                                        {a.grads, f32(a.n), "grads"},
                                        {a.params_bf16, a.n * 2, "params_bf16", true}}))
    return e;
  AdamArrays c = fp32_arrays(a.params, a.exp_avg, a.exp_avg_sq, a.grads, a.n);
  c.params_out = a.params_bf16;
  c.out_type = DType::kBF16;
  const detail::AdamConsts k = detail::adam_consts(h);
  return enqueue(stream, [=] { detail::adam_range_scalar(c, k, 0, c.n); });
}

int cast_f32_to_bf16(const float* in, void* out, std::size_t n, void* stream) {
  if (int e = device_args("cast_f32_to_bf16", {{in, f32(n), "in"}, {out, n * 2, "out", true}})) return e;
  return enqueue(stream, [=] { kernels::cast_f32_to_bf16(in, static_cast<std::uint16_t*>(out), n); });
}

int cast_bf16_to_f32(const void* in, float* out, std::size_t n, void* stream) {
  if (int e = device_args("cast_bf16_to_f32", {{in, n * 2, "in"}, {out, f32(n), "out", true}})) return e;
  return enqueue(stream, [=] { kernels::cast_bf16_to_f32(static_cast<const std::uint16_t*>(in), out, n); });
}

}  // namespace memwall::kernels::cuda
