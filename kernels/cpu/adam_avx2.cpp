// AVX2 + FMA + F16C body of the Adam step: 8 elements per iteration, the scalar reference's exact operations.
#include <immintrin.h>

#include "cpu/adam.h"

namespace memwall::kernels::detail {

namespace {
inline __m256 load8(const void* g, DType type, std::size_t i) {
  switch (type) {
    case DType::kF32:
      return _mm256_loadu_ps(static_cast<const float*>(g) + i);
    case DType::kBF16: {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(g) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case DType::kF16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(g) + i)));
  }
  return _mm256_setzero_ps();
}

inline __m128i to_bf16(__m256 p) {
  const __m256i bits = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, quiet, nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
}  // namespace

void adam_range_avx2(const AdamArrays& a, const AdamConsts& c, std::size_t begin, std::size_t end) {
  const __m256 inv_scale = _mm256_set1_ps(c.inv_scale), beta1 = _mm256_set1_ps(c.beta1),
               omb1 = _mm256_set1_ps(c.one_minus_beta1), beta2 = _mm256_set1_ps(c.beta2),
               omb2 = _mm256_set1_ps(c.one_minus_beta2), isbc2 = _mm256_set1_ps(c.inv_sqrt_bc2),
               eps = _mm256_set1_ps(c.eps), nstep = _mm256_set1_ps(c.neg_step_size),
               decay = _mm256_set1_ps(c.decay), l2 = _mm256_set1_ps(c.l2);
  const bool use_l2 = c.l2 != 0.0f;
  auto* out = static_cast<std::uint16_t*>(a.params_out);
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 g = _mm256_mul_ps(load8(a.grads, a.grad_type, i), inv_scale);
    __m256 p = _mm256_loadu_ps(a.params + i);
    if (use_l2) g = _mm256_fmadd_ps(l2, p, g);
    const __m256 m = _mm256_fmadd_ps(beta1, _mm256_loadu_ps(a.exp_avg + i), _mm256_mul_ps(omb1, g));
    const __m256 v =
        _mm256_fmadd_ps(beta2, _mm256_loadu_ps(a.exp_avg_sq + i), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), isbc2, eps);
    p = _mm256_mul_ps(p, decay);
    p = _mm256_fmadd_ps(nstep, _mm256_div_ps(m, denom), p);
    _mm256_storeu_ps(a.params + i, p);
    _mm256_storeu_ps(a.exp_avg + i, m);
    _mm256_storeu_ps(a.exp_avg_sq + i, v);
    if (out) {
      const __m128i h = a.out_type == DType::kF16
                            ? _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                            : to_bf16(p);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
  }
  adam_range_scalar(a, c, i, end);
}

}  // namespace memwall::kernels::detail
