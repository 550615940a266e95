// AVX-512 (F, BW) body of the Adam step: 16 elements per iteration, the scalar reference's exact operations.
#include <immintrin.h>

#include "cpu/adam.h"

namespace memwall::kernels::detail {

namespace {
inline __m512 load16(const void* g, DType type, std::size_t i) {
  switch (type) {
    case DType::kF32:
      return _mm512_loadu_ps(static_cast<const float*>(g) + i);
    case DType::kBF16: {
      const __m256i h =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(g) + i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::kF16:
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(g) + i)));
  }
  return _mm512_setzero_ps();
}

inline __m256i to_bf16(__m512 p) {
  const __m512i bits = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}
}  // namespace

void adam_range_avx512(const AdamArrays& a, const AdamConsts& c, std::size_t begin, std::size_t end) {
  const __m512 inv_scale = _mm512_set1_ps(c.inv_scale), beta1 = _mm512_set1_ps(c.beta1),
               omb1 = _mm512_set1_ps(c.one_minus_beta1), beta2 = _mm512_set1_ps(c.beta2),
               omb2 = _mm512_set1_ps(c.one_minus_beta2), isbc2 = _mm512_set1_ps(c.inv_sqrt_bc2),
               eps = _mm512_set1_ps(c.eps), nstep = _mm512_set1_ps(c.neg_step_size),
               decay = _mm512_set1_ps(c.decay), l2 = _mm512_set1_ps(c.l2);
  const bool use_l2 = c.l2 != 0.0f;
  auto* out = static_cast<std::uint16_t*>(a.params_out);
  std::size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 g = _mm512_mul_ps(load16(a.grads, a.grad_type, i), inv_scale);
    __m512 p = _mm512_loadu_ps(a.params + i);
    if (use_l2) g = _mm512_fmadd_ps(l2, p, g);
    const __m512 m = _mm512_fmadd_ps(beta1, _mm512_loadu_ps(a.exp_avg + i), _mm512_mul_ps(omb1, g));
    const __m512 v =
        _mm512_fmadd_ps(beta2, _mm512_loadu_ps(a.exp_avg_sq + i), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), isbc2, eps);
    p = _mm512_mul_ps(p, decay);
    p = _mm512_fmadd_ps(nstep, _mm512_div_ps(m, denom), p);
    _mm512_storeu_ps(a.params + i, p);
    _mm512_storeu_ps(a.exp_avg + i, m);
    _mm512_storeu_ps(a.exp_avg_sq + i, v);
    if (out) {
      const __m256i h = a.out_type == DType::kF16
                            ? _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                            : to_bf16(p);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
    }
  }
  adam_range_scalar(a, c, i, end);
}

}  // namespace memwall::kernels::detail
