// Adam / AdamW step on raw arrays: fp32 master parameters, momentum and variance, gradients in fp32, bf16 or
// fp16, optional fused write-back of the updated parameters as bf16 or fp16 (for the GPU copy), gradient
// unscaling and an inf/NaN check for fp16 loss scaling. PyTorch's torch.optim.Adam/AdamW semantics.
//
// Paths: a scalar reference, AVX2+FMA+F16C and AVX-512 (F/BW), chosen at run time from CPUID. Every path
// performs the same IEEE operations in the same order (one fused multiply-add where the others have one),
// so they agree bitwise. Work is split over up to `threads` threads in 64-element-aligned ranges of at least
// 32K elements.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memwall::kernels {

enum class Isa { kScalar, kAvx2, kAvx512 };
const char* isa_name(Isa isa);
Isa best_isa();  // the widest ISA this CPU supports
// The ISA adam_step uses: among those the CPU supports, the faster on a memory-bound step, measured once
// (all paths give bitwise the same results, so the choice never changes the numbers).
Isa adam_isa();

enum class DType { kF32, kBF16, kF16 };

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;   // AdamW: p *= 1 - lr * wd; Adam: g += wd * p
  long step = 1;            // 1-based step count for bias correction
  float grad_scale = 1.0f;  // loss scale: gradients are divided by it
};

struct AdamArrays {
  float* params = nullptr;      // [n] fp32 master parameters (updated)
  float* exp_avg = nullptr;     // [n] fp32 first moment (updated)
  float* exp_avg_sq = nullptr;  // [n] fp32 second moment (updated)
  const void* grads = nullptr;  // [n] of grad_type
  DType grad_type = DType::kF32;
  void* params_out = nullptr;     // optional [n] of out_type: updated params rounded to nearest even
  DType out_type = DType::kBF16;  // kBF16 or kF16
  std::size_t n = 0;
};

// The common case: fp32 gradients, no 16-bit write-back.
inline AdamArrays fp32_arrays(float* params, float* exp_avg, float* exp_avg_sq, const float* grads,
                              std::size_t n) {
  AdamArrays a;
  a.params = params;
  a.exp_avg = exp_avg;
  a.exp_avg_sq = exp_avg_sq;
  a.grads = grads;
  a.n = n;
  return a;
}

// One step with adam_isa(). Returns false, updating nothing, when `check_finite` and some unscaled gradient
// is inf or NaN (skip the step and lower the loss scale).
bool adam_step(const AdamArrays& a, const AdamHyper& h, int threads, bool check_finite = false);
// The same on a chosen ISA (must be supported), for tests and benchmarks.
bool adam_step_isa(Isa isa, const AdamArrays& a, const AdamHyper& h, int threads, bool check_finite = false);
// True when every gradient, divided by `scale`, is finite.
bool grads_finite(const void* grads, DType type, std::size_t n, float scale, int threads);
// The sum of squares of x[0, n) in double (gradient clipping's norm), in the CUDA kernel's fixed order so
// that both agree bitwise: kSquaresSplit contiguous chunks, in each kSquaresSplit strided partial sums added
// pairwise (halves, then quarters...), then the chunks' sums added pairwise the same way. The chunks go to up
// to `threads` threads (from a million elements; the result does not depend on the count).
inline constexpr int kSquaresSplit = 256;
double sum_of_squares(const float* x, std::size_t n, int threads = 1);

namespace detail {
// Per-ISA bodies over [begin, end); constants precomputed by the dispatcher.
struct AdamConsts {
  float inv_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, neg_step_size, decay,
      l2;
};
// The constants of one step (bias corrections in double, then rounded once), shared with the CUDA step.
AdamConsts adam_consts(const AdamHyper& h);
void adam_range_scalar(const AdamArrays& a, const AdamConsts& c, std::size_t begin, std::size_t end);
void adam_range_avx2(const AdamArrays& a, const AdamConsts& c, std::size_t begin, std::size_t end);
void adam_range_avx512(const AdamArrays& a, const AdamConsts& c, std::size_t begin, std::size_t end);
float load_grad(const void* grads, DType type, std::size_t i);
}  // namespace detail

}  // namespace memwall::kernels
