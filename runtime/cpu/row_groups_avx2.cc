// The row groups' kernels on 256 bits (row_groups.h), for CPUs without
// AVX-512 (the AVX-VNNI family runs them too): each 64-byte chunk of codes
// is taken as two halves of four rows; the byte multiply-add (vpmaddubsw)
// takes a half's codes against 8 activation bytes broadcast to its rows,
// and the word multiply-add (vpmaddwd) by the sub-block's integer scale
// (each row's four times) gives int32 sums, two lanes a row, kept over the
// super-block and converted once a super-block per row and token. Nothing
// saturates: a byte pair is at most 2 x 15 x 127 (q4_K) or 2 x 255 x 32
// (q6_K, codes q - 32 against the activations plus 128). Every (row,
// token) result takes the same operations in the same order whatever the
// tile, so it never depends on the batch or the thread.

#include <cstring>

#include "runtime/cpu/row_groups_layout.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KILN_GROUP_TARGET __attribute__((target("avx2,fma,f16c")))

namespace kiln::cpu::row_groups {
namespace {

KILN_GROUP_TARGET inline __m256i Broadcast8(const void* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

// int16 lanes: the scales of rows 4 half .. 4 half + 3 (bytes sc[4 half +
// r] of a sub-block's eight), each four times, as its byte pairs' lanes.
template <bool kSigned>
KILN_GROUP_TARGET inline __m256i RowScales(const uint8_t* sc, int half) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
  const __m128i pick = half ? _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)
                            : _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m128i b = _mm_shuffle_epi8(v, pick);
  return kSigned ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
}

// One sum a row, rows in order, from two halves' pairs (rows 0-3 in a, 4-7
// in b, row r's two lanes at 2 r, 2 r + 1 of its half).
KILN_GROUP_TARGET inline __m256i RowSums(__m256i a, __m256i b) {
  const __m256i h = _mm256_hadd_epi32(a, b);  // rows 0 1 4 5 | 2 3 6 7
  return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

KILN_GROUP_TARGET inline __m256i ScaledSum(__m256i codes, __m256i x, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, x), scales);
}

template <int kT>
KILN_GROUP_TARGET void Q4KGroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, int64_t t0, float* y,
                                      int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * kQ4KBlockBytes;
    const int8_t* xs = x.q + t0 * k + 256 * s;
    __m256i isum[2][kT];
    for (int half = 0; half < 2; ++half) {
      for (int t = 0; t < kT; ++t) isum[half][t] = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        const __m256i sc_lo = RowScales<false>(o + kQ4KScales + 8 * (2 * i), half);
        const __m256i sc_hi = RowScales<false>(o + kQ4KScales + 8 * (2 * i + 1), half);
        for (int q = 0; q < 4; ++q) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kQ4KCodes + 64 * (4 * i + q) + 32 * half));
          const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
          for (int t = 0; t < kT; ++t) {
            const __m256i sums = _mm256_add_epi32(ScaledSum(lo, Broadcast8(xs + t * k + 64 * i + 8 * q), sc_lo),
                                                  ScaledSum(hi, Broadcast8(xs + t * k + 64 * i + 32 + 8 * q), sc_hi));
            isum[half][t] = _mm256_add_epi32(isum[half][t], sums);
          }
        }
      }
    }
    const Q4KFloats f = LoadQ4KFloats(o);
    for (int t = 0; t < kT; ++t) {
      const int64_t b0 = (t0 + t) * blocks + 8 * s;
      acc[t] = AddQ4K(f, RowSums(isum[0][t], isum[1][t]), x.d[b0], x.dsum + b0, acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(y + (t0 + t) * ldy, acc[t]);
}

template <int kT>
KILN_GROUP_TARGET void Q6KGroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, const uint8_t* xu, int64_t t0,
                                      float* y, int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30), offset = _mm256_set1_epi8(32);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * kQ6KBlockBytes;
    alignas(32) int32_t first_half[kT][8];
    __m256i isum[kT];
    for (int half = 0; half < 2; ++half) {
      for (int t = 0; t < kT; ++t) isum[t] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        for (int lp = 0; lp < 2; ++lp) {  // sub-blocks 8 h + lp + 2 p, p < 4
          __m256i scales[4];
          for (int p = 0; p < 4; ++p) scales[p] = RowScales<true>(o + kQ6KScales + 8 * (8 * h + lp + 2 * p), half);
          for (int l0 = 16 * lp; l0 < 16 * lp + 16; l0 += 8) {
            const uint8_t* chunk = o + kQ6KCodes + 64 * 3 * (4 * h + l0 / 8) + 32 * half;
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk));
            const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 64));
            const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 128));
            const __m256i codes[4] = {
                _mm256_sub_epi8(
                    _mm256_or_si256(_mm256_and_si256(a, low), _mm256_and_si256(_mm256_slli_epi16(hb, 4), high)),
                    offset),
                _mm256_sub_epi8(
                    _mm256_or_si256(_mm256_and_si256(b, low), _mm256_and_si256(_mm256_slli_epi16(hb, 2), high)),
                    offset),
                _mm256_sub_epi8(
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low), _mm256_and_si256(hb, high)),
                    offset),
                _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), low),
                                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), high)),
                                offset)};
            for (int p = 0; p < 4; ++p) {
              for (int t = 0; t < kT; ++t) {
                const uint8_t* xs = xu + (t0 + t) * k + 256 * s + 128 * h + 32 * p + l0;
                isum[t] = _mm256_add_epi32(isum[t], ScaledSum(Broadcast8(xs), codes[p], scales[p]));
              }
            }
          }
        }
      }
      if (half == 0) {
        for (int t = 0; t < kT; ++t) _mm256_store_si256(reinterpret_cast<__m256i*>(first_half[t]), isum[t]);
      }
    }
    for (int t = 0; t < kT; ++t) {
      const __m256i rows = RowSums(_mm256_load_si256(reinterpret_cast<const __m256i*>(first_half[t])), isum[t]);
      acc[t] = AddQ6K(o, rows, x.d[(t0 + t) * blocks + 8 * s], acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(y + (t0 + t) * ldy, acc[t]);
}

// What DotFamily calls: this file's kernels.
struct Kernels {
  template <int kT>
  static constexpr auto Q4K = Q4KGroupTokens<kT>;
  template <int kT>
  static constexpr auto Q6K = Q6KGroupTokens<kT>;
};

}  // namespace

void DotAvx2(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, const uint8_t* xu,
             int64_t tokens, float* y, int64_t ldy) {
  DotFamily<Kernels, 2>(type, groups, num_groups, k, x, xu, tokens, y, ldy);
}

}  // namespace kiln::cpu::row_groups
#endif
