// Vector casts: bf16 with AVX-512 (the scalar reference's integer rounding, 16 lanes), fp16 with F16C.
#include <immintrin.h>

#include "cpu/cast.h"

namespace memwall::kernels::detail {

__attribute__((target("avx512f,avx512bw"))) void cast_f32_to_bf16_avx512(const float* in, std::uint16_t* out,
                                                                         std::size_t n) {
  std::size_t i = 0;
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_loadu_ps(in + i);
    const __m512i bits = _mm512_castps_si512(f);
    const __m512i hi = _mm512_srli_epi32(bits, 16);
    __m512i r =
        _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), hi, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
  cast_f32_to_bf16_ref(in + i, out + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) void cast_bf16_to_f32_avx512(const std::uint16_t* in, float* out,
                                                                         std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  cast_bf16_to_f32_ref(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void cast_f32_to_f16_f16c(const float* in, std::uint16_t* out,
                                                              std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  cast_f32_to_f16_ref(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void cast_f16_to_f32_f16c(const std::uint16_t* in, float* out,
                                                              std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  cast_f16_to_f32_ref(in + i, out + i, n - i);
}

}  // namespace memwall::kernels::detail
