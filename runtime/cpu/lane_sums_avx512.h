// Horizontal sums of sixteen 16-lane vectors at once, for the AVX-512
// kernels (attention's scores, the integer matmul tiles' results). Internal
// to runtime/cpu; x86-64 only.
#pragma once

#include <immintrin.h>

namespace kiln::cpu {

// Lane m of the result is the sum of v[m]'s sixteen lanes, for m < 16, in
// the order _mm512_reduce_add_ps takes (lanes 8 apart, then 4, 2, 1), so
// each sum has the bits a single reduction gives it: 46 operations for the
// sixteen sums instead of 16 x 8.
__attribute__((target("avx512f"))) inline __m512 LaneSums16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) {  // lanes 0-7: v[2i]'s l + l+8; lanes 8-15: v[2i+1]'s
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int i = 0; i < 4; ++i) {  // quarter q: v[4i + q]'s l + l+4 (of the partial sums)
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int i = 0; i < 2; ++i) {  // quarter q: v[8i + q]'s two partials, then v[8i + 4 + q]'s
    c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lane 4q + m holds v[4m + q]'s sum.
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

}  // namespace kiln::cpu
