// The row groups' byte layout (row_groups.h) and the kernel families over
// it, shared by the packing (row_groups.cc) and the kernels
// (row_groups_avx512.cc, row_groups_avx2.cc). Internal to runtime/cpu.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/row_groups.h"
#include "runtime/formats/ggml_types.h"

namespace kiln::cpu::row_groups {

// Offsets within a group's super-block, q4_K.
inline constexpr int64_t kQ4KDmin = 16, kQ4KScales = 32, kQ4KMins = 96, kQ4KCodes = 160;
inline constexpr int64_t kQ4KBlockBytes = kQ4KCodes + 16 * 64;
// q6_K: d at 0, then c, the scales and the 24 code chunks.
inline constexpr int64_t kQ6KOffset = 16, kQ6KScales = 48, kQ6KCodes = 176;
inline constexpr int64_t kQ6KBlockBytes = kQ6KCodes + 24 * 64;

// RowGroupsDot's work for one family; xu: q6_K's activation codes plus 128
// (tokens x k bytes), null for q4_K.
void DotAvx512(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, const uint8_t* xu,
               int64_t tokens, float* y, int64_t ldy);
void DotAvx2(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, const uint8_t* xu,
             int64_t tokens, float* y, int64_t ldy);

// Every token of a call against each group in turn, up to kMax (4 or 2)
// tokens a tile: tile(g, t0, y of group g, std::integral_constant<int, T>).
template <int kMax, class Tile>
inline void EachGroup(int64_t num_groups, int64_t tokens, float* y, Tile tile) {
  for (int64_t g = 0; g < num_groups; ++g) {
    float* yg = y + kRowGroupRows * g;
    int64_t t = 0;
    for (; t + kMax <= tokens; t += kMax) tile(g, t, yg, std::integral_constant<int, kMax>());
    if constexpr (kMax == 4) {
      if (tokens - t == 3) tile(g, t, yg, std::integral_constant<int, 3>());
    }
    if (tokens - t == 2 && kMax > 2) tile(g, t, yg, std::integral_constant<int, 2>());
    if (tokens - t == 1) tile(g, t, yg, std::integral_constant<int, 1>());
  }
}

// A family's DotAvx*: its kernels (Family::Q4K<T>, Family::Q6K<T>, T
// tokens a tile, up to kMax) over every group and token of the call.
template <class Family, int kMax>
inline void DotFamily(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x,
                      const uint8_t* xu, int64_t tokens, float* y, int64_t ldy) {
  const int64_t bytes = RowGroupBytes(type, k);
  EachGroup<kMax>(num_groups, tokens, y, [&](int64_t g, int64_t t, float* yg, auto kt) {
    if (type == GgmlType::kQ6_K) {
      Family::template Q6K<decltype(kt)::value>(groups + g * bytes, k, x, xu, t, yg, ldy);
    } else {
      Family::template Q4K<decltype(kt)::value>(groups + g * bytes, k, x, t, yg, ldy);
    }
  });
}

#if defined(__x86_64__)
#define KILN_ROW_GROUPS_AVX2 __attribute__((target("avx2,fma,f16c")))

// The float stage of a super-block, on eight rows' int32 sums for one
// token, shared by the families (the AVX-512 kernels inline it too).
// q4_K: d, dmin and the mins as floats, loaded once for every token.
struct Q4KFloats {
  __m256 d, dmin, mins[8];
};

KILN_ROW_GROUPS_AVX2 inline Q4KFloats LoadQ4KFloats(const uint8_t* o) {
  Q4KFloats f;
  f.d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
  f.dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + kQ4KDmin)));
  for (int j = 0; j < 8; ++j) {
    f.mins[j] = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(o + kQ4KMins + 8 * j))));
  }
  return f;
}

// acc + d dx sums - dmin (mins . the activations' block sums dsum[0..7]).
KILN_ROW_GROUPS_AVX2 inline __m256 AddQ4K(const Q4KFloats& f, __m256i sums, float dx, const float* dsum, __m256 acc) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < 8; ++j) m = _mm256_fmadd_ps(f.mins[j], _mm256_set1_ps(dsum[j]), m);
  acc = _mm256_fmadd_ps(_mm256_mul_ps(f.d, _mm256_cvtepi32_ps(sums)), _mm256_set1_ps(dx), acc);
  return _mm256_fnmadd_ps(f.dmin, m, acc);
}

// q6_K: acc + d dx (sums - c), o the group's super-block.
KILN_ROW_GROUPS_AVX2 inline __m256 AddQ6K(const uint8_t* o, __m256i sums, float dx, __m256 acc) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kQ6KOffset));
  return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, c))), _mm256_set1_ps(dx), acc);
}
#endif

}  // namespace kiln::cpu::row_groups
