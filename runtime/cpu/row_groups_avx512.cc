// The row groups' kernels on AVX-512 VNNI (row_groups.h): for each 64-byte
// chunk of codes (8 rows x 8 bytes) and token, a vpdpbusd takes each plane
// of codes against 8 activation bytes broadcast to every row; a sub-block's
// int32 sums (two lanes a row) are weighted by its integer scales
// (vpmulld), added over the super-block, and converted once a super-block
// per row and token; q4_K's mins enter in float through the activations'
// block sums, q6_K's offset of 32 as the packed integer c. Every (row,
// token) result takes the same operations in the same order whatever the
// tile, so it never depends on the batch or the thread.

#include <cstring>

#include "runtime/cpu/row_groups_layout.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KILN_GROUP_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace kiln::cpu::row_groups {
namespace {

KILN_GROUP_TARGET inline __m512i Broadcast8(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// kT tokens (t0..) against one group: eight rows' results per token.
template <int kT>
KILN_GROUP_TARGET void Q4KGroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, int64_t t0, float* y,
                                      int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * row_groups::kQ4KBlockBytes;
    const int8_t* xs = x.q + t0 * k + 256 * s;
    __m512i isum[kT];
    for (int t = 0; t < kT; ++t) isum[t] = _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
      __m512i sum_lo[kT], sum_hi[kT];
      for (int t = 0; t < kT; ++t) sum_lo[t] = sum_hi[t] = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        const __m512i v = _mm512_loadu_si512(o + row_groups::kQ4KCodes + 64 * (4 * i + q));
        const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        for (int t = 0; t < kT; ++t) {
          sum_lo[t] = _mm512_dpbusd_epi32(sum_lo[t], lo, Broadcast8(xs + t * k + 64 * i + 8 * q));
          sum_hi[t] = _mm512_dpbusd_epi32(sum_hi[t], hi, Broadcast8(xs + t * k + 64 * i + 32 + 8 * q));
        }
      }
      // Sub-blocks 2i and 2i + 1's scales, each row's twice (its two lanes).
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(o + row_groups::kQ4KScales + 16 * i));
      const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sc, sc));
      const __m512i sc_hi = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(sc, sc));
      for (int t = 0; t < kT; ++t) {
        isum[t] = _mm512_add_epi32(
            isum[t], _mm512_add_epi32(_mm512_mullo_epi32(sum_lo[t], sc_lo), _mm512_mullo_epi32(sum_hi[t], sc_hi)));
      }
    }
    const Q4KFloats f = LoadQ4KFloats(o);
    for (int t = 0; t < kT; ++t) {
      // A row's two lanes added, then the even lanes (one a row) in order.
      const __m512i pairs = _mm512_add_epi32(isum[t], _mm512_shuffle_epi32(isum[t], _MM_PERM_CDAB));
      const int64_t b0 = (t0 + t) * blocks + 8 * s;
      acc[t] = AddQ4K(f, _mm512_cvtepi64_epi32(pairs), x.d[b0], x.dsum + b0, acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(y + (t0 + t) * ldy, acc[t]);
}

// kT tokens (t0..) against one q6_K group, their activation codes plus 128
// at xu + t * k.
template <int kT>
KILN_GROUP_TARGET void Q6KGroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, const uint8_t* xu, int64_t t0,
                                      float* y, int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(0x30), offset = _mm512_set1_epi8(32);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * row_groups::kQ6KBlockBytes;
    __m512i isum[kT];
    for (int t = 0; t < kT; ++t) isum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {  // sub-blocks 8 h + half + 2 p, p < 4
        __m512i sums[4][kT];
        for (int p = 0; p < 4; ++p) {
          for (int t = 0; t < kT; ++t) sums[p][t] = _mm512_setzero_si512();
        }
        for (int l0 = 16 * half; l0 < 16 * half + 16; l0 += 8) {
          const uint8_t* chunk = o + row_groups::kQ6KCodes + 64 * 3 * (4 * h + l0 / 8);
          const __m512i a = _mm512_loadu_si512(chunk), b = _mm512_loadu_si512(chunk + 64);
          const __m512i hb = _mm512_loadu_si512(chunk + 128);
          const __m512i codes[4] = {
              _mm512_sub_epi8(
                  _mm512_or_si512(_mm512_and_si512(a, low), _mm512_and_si512(_mm512_slli_epi16(hb, 4), high)), offset),
              _mm512_sub_epi8(
                  _mm512_or_si512(_mm512_and_si512(b, low), _mm512_and_si512(_mm512_slli_epi16(hb, 2), high)), offset),
              _mm512_sub_epi8(
                  _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low), _mm512_and_si512(hb, high)), offset),
              _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), low),
                                              _mm512_and_si512(_mm512_srli_epi16(hb, 2), high)),
                              offset)};
          for (int p = 0; p < 4; ++p) {
            for (int t = 0; t < kT; ++t) {
              const uint8_t* xs = xu + (t0 + t) * k + 256 * s + 128 * h + 32 * p + l0;
              sums[p][t] = _mm512_dpbusd_epi32(sums[p][t], Broadcast8(reinterpret_cast<const int8_t*>(xs)), codes[p]);
            }
          }
        }
        for (int p = 0; p < 4; ++p) {
          const __m128i sc = _mm_loadl_epi64(
              reinterpret_cast<const __m128i*>(o + row_groups::kQ6KScales + 8 * (8 * h + half + 2 * p)));
          const __m512i scale = _mm512_cvtepi8_epi32(_mm_unpacklo_epi8(sc, sc));
          for (int t = 0; t < kT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sums[p][t], scale));
        }
      }
    }
    for (int t = 0; t < kT; ++t) {
      const __m512i pairs = _mm512_add_epi32(isum[t], _mm512_shuffle_epi32(isum[t], _MM_PERM_CDAB));
      acc[t] = AddQ6K(o, _mm512_cvtepi64_epi32(pairs), x.d[(t0 + t) * blocks + 8 * s], acc[t]);
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

void DotAvx512(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, const uint8_t* xu,
               int64_t tokens, float* y, int64_t ldy) {
  DotFamily<Kernels, 4>(type, groups, num_groups, k, x, xu, tokens, y, ldy);
}

}  // namespace kiln::cpu::row_groups
#endif
