// exp over arrays: AVX-512 polynomial, scalar fallback.
#include "cpu/vexp.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/adam.h"

namespace memwall::kernels {

namespace detail {

__attribute__((target("avx512f"))) void exp_inplace_avx512(float* data, std::size_t n) {
  const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.7f);
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __m512 c6 = _mm512_set1_ps(1.9875691500e-4f), c5 = _mm512_set1_ps(1.3981999507e-3f),
               c4 = _mm512_set1_ps(8.3334519073e-3f), c3 = _mm512_set1_ps(4.1665795894e-2f),
               c2 = _mm512_set1_ps(1.6666665459e-1f), c1 = _mm512_set1_ps(5.0000001201e-1f),
               one = _mm512_set1_ps(1.0f);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_loadu_ps(data + i), lo), hi);
    const __m512 k =
        _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(k, ln2_hi, x);
    x = _mm512_fnmadd_ps(k, ln2_lo, x);
    __m512 p = _mm512_fmadd_ps(c6, x, c5);
    p = _mm512_fmadd_ps(p, x, c4);
    p = _mm512_fmadd_ps(p, x, c3);
    p = _mm512_fmadd_ps(p, x, c2);
    p = _mm512_fmadd_ps(p, x, c1);
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(x, x), _mm512_add_ps(x, one));
    _mm512_storeu_ps(data + i, _mm512_scalef_ps(p, k));
  }
  for (; i < n; ++i) data[i] = std::exp(std::min(std::max(data[i], -87.3f), 88.7f));
}

}  // namespace detail

void exp_inplace(float* data, std::size_t n) {
  if (best_isa() == Isa::kAvx512) return detail::exp_inplace_avx512(data, n);
  for (std::size_t i = 0; i < n; ++i) data[i] = std::exp(std::min(std::max(data[i], -87.3f), 88.7f));
}

}  // namespace memwall::kernels
