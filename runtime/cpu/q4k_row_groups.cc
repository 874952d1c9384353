// q4_K rows in groups of eight (q4k_row_groups.h): the packing and the
// AVX-512 VNNI kernel over it. For each 64-byte chunk of codes (8 rows x 16
// elements) and token, two vpdpbusd take the low and high nibbles against
// 8 activation bytes broadcast to every row; a sub-block's int32 sums (two
// lanes a row) are weighted by its 6-bit scales in integers, added over the
// super-block, and converted once a super-block per row and token; the mins
// enter in float through the activations' block sums. Every (row, token)
// result takes the same operations in the same order whatever the tile, so
// it never depends on the batch or the thread.

#include "runtime/cpu/q4k_row_groups.h"

#include <cstring>

#include "runtime/formats/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KILN_GROUP_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

namespace kiln::cpu {

bool HasQ4KRowGroupKernel() {
#if defined(__x86_64__)
  return BestQ8Kernel() == Q8Kernel::kAvx512Vnni && Q8RowDot(GgmlType::kQ4_K) != nullptr;
#else
  return false;
#endif
}

void PackQ4KRowGroups(const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out) {
  const int64_t supers = k / 256, row_bytes = supers * 144;
  for (int64_t g = first; g < last; ++g) {
    for (int64_t s = 0; s < supers; ++s) {
      uint8_t* o = out + g * Q4KRowGroupBytes(k) + s * kQ4KGroupBlockBytes;
      for (int r = 0; r < kQ4KGroupRows; ++r) {
        const uint8_t* b = rows + (g * kQ4KGroupRows + r) * row_bytes + s * 144;
        std::memcpy(o + 2 * r, b, 2);
        std::memcpy(o + 16 + 2 * r, b + 2, 2);
        for (int j = 0; j < 8; ++j) {
          int scale = 0, min = 0;
          GetScaleMinK4(b + 4, j, &scale, &min);
          o[32 + 8 * j + r] = static_cast<uint8_t>(scale);
          o[96 + 8 * j + r] = static_cast<uint8_t>(min);
        }
        for (int c = 0; c < 16; ++c) std::memcpy(o + 160 + 64 * c + 8 * r, b + 16 + 32 * (c / 4) + 8 * (c % 4), 8);
      }
    }
  }
}

#if defined(__x86_64__)
namespace {

KILN_GROUP_TARGET inline __m512i Broadcast8(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// kT tokens (t0..) against one group: eight rows' results per token.
template <int kT>
KILN_GROUP_TARGET void GroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, int64_t t0, float* y,
                                   int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * kQ4KGroupBlockBytes;
    const int8_t* xs = x.q + t0 * k + 256 * s;
    __m512i isum[kT];
    for (int t = 0; t < kT; ++t) isum[t] = _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
      __m512i sum_lo[kT], sum_hi[kT];
      for (int t = 0; t < kT; ++t) sum_lo[t] = sum_hi[t] = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        const __m512i v = _mm512_loadu_si512(o + 160 + 64 * (4 * i + q));
        const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        for (int t = 0; t < kT; ++t) {
          sum_lo[t] = _mm512_dpbusd_epi32(sum_lo[t], lo, Broadcast8(xs + t * k + 64 * i + 8 * q));
          sum_hi[t] = _mm512_dpbusd_epi32(sum_hi[t], hi, Broadcast8(xs + t * k + 64 * i + 32 + 8 * q));
        }
      }
      // Sub-blocks 2i and 2i + 1's scales, each row's twice (its two lanes).
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 32 + 16 * i));
      const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sc, sc));
      const __m512i sc_hi = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(sc, sc));
      for (int t = 0; t < kT; ++t) {
        isum[t] = _mm512_add_epi32(
            isum[t], _mm512_add_epi32(_mm512_mullo_epi32(sum_lo[t], sc_lo), _mm512_mullo_epi32(sum_hi[t], sc_hi)));
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
    __m256 mins[8];
    for (int j = 0; j < 8; ++j) {
      mins[j] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(o + 96 + 8 * j))));
    }
    for (int t = 0; t < kT; ++t) {
      // A row's two lanes added, then the even lanes (one a row) in order.
      const __m512i pairs = _mm512_add_epi32(isum[t], _mm512_shuffle_epi32(isum[t], _MM_PERM_CDAB));
      const __m256 sums = _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(pairs));
      const float* dsum = x.dsum + (t0 + t) * blocks + 8 * s;
      __m256 m = _mm256_setzero_ps();
      for (int j = 0; j < 8; ++j) m = _mm256_fmadd_ps(mins[j], _mm256_set1_ps(dsum[j]), m);
      const float dx = x.d[(t0 + t) * blocks + 8 * s];
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, sums), _mm256_set1_ps(dx), acc[t]);
      acc[t] = _mm256_fnmadd_ps(dmin, m, acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(y + (t0 + t) * ldy, acc[t]);
}

}  // namespace

KILN_GROUP_TARGET void Q4KRowGroupsDot(const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x,
                                       int64_t tokens, float* y, int64_t ldy) {
  const int64_t bytes = Q4KRowGroupBytes(k);
  for (int64_t g = 0; g < num_groups; ++g) {
    const uint8_t* group = groups + g * bytes;
    float* yg = y + kQ4KGroupRows * g;
    int64_t t = 0;
    for (; t + 4 <= tokens; t += 4) GroupTokens<4>(group, k, x, t, yg, ldy);
    switch (tokens - t) {
      case 3:
        GroupTokens<3>(group, k, x, t, yg, ldy);
        break;
      case 2:
        GroupTokens<2>(group, k, x, t, yg, ldy);
        break;
      case 1:
        GroupTokens<1>(group, k, x, t, yg, ldy);
        break;
    }
  }
}

#else

void Q4KRowGroupsDot(const uint8_t*, int64_t, int64_t, const Q8Rows&, int64_t, float*, int64_t) {}

#endif

}  // namespace kiln::cpu
