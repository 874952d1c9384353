// Rows in groups of eight (row_groups.h): the packing and the AVX-512 VNNI
// kernels over it. For each 64-byte chunk of codes (8 rows x 8 bytes) and
// token, a vpdpbusd takes each plane of codes against 8 activation bytes
// broadcast to every row; a sub-block's int32 sums (two lanes a row) are
// weighted by its integer scales, added over the super-block, and converted
// once a super-block per row and token; q4_K's mins enter in float through
// the activations' block sums, q6_K's offset of 32 as the packed integer
// c. Every (row, token) result takes the same operations in the same order
// whatever the tile, so it never depends on the batch or the thread.

#include "runtime/cpu/row_groups.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/formats/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KILN_GROUP_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

namespace kiln::cpu {

namespace {

constexpr int64_t kQ4KBlockBytes = 16 + 16 + 64 + 64 + 16 * 64;
constexpr int64_t kQ6KBlockBytes = 16 + 32 + 128 + 24 * 64;
constexpr int64_t kQ6KChunks = 176;  // offset of the code chunks

void PackQ4K(const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out) {
  const int64_t supers = k / 256, row_bytes = supers * 144;
  for (int64_t g = first; g < last; ++g) {
    for (int64_t s = 0; s < supers; ++s) {
      uint8_t* o = out + g * RowGroupBytes(GgmlType::kQ4_K, k) + s * kQ4KBlockBytes;
      for (int r = 0; r < kRowGroupRows; ++r) {
        const uint8_t* b = rows + (g * kRowGroupRows + r) * row_bytes + s * 144;
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

// Element e = 128 h + 32 p + l of a q6_K block (quant.cc's layout): plane p
// of half h, its low bits in ql[64 h + 32 (p % 2) + l] (nibble p / 2), its
// high two in bits 2 p of qh[32 h + l].
int Q6KCode(const uint8_t* b, int e) {
  const int h = e / 128, p = e % 128 / 32, l = e % 32;
  const int low = (b[64 * h + 32 * (p % 2) + l] >> (4 * (p / 2))) & 0x0F;
  const int high = (b[128 + 32 * h + l] >> (2 * p)) & 3;
  return low | (high << 4);
}

void PackQ6K(const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out) {
  const int64_t supers = k / 256, row_bytes = supers * 210;
  for (int64_t g = first; g < last; ++g) {
    for (int64_t s = 0; s < supers; ++s) {
      uint8_t* o = out + g * RowGroupBytes(GgmlType::kQ6_K, k) + s * kQ6KBlockBytes;
      for (int r = 0; r < kRowGroupRows; ++r) {
        const uint8_t* b = rows + (g * kRowGroupRows + r) * row_bytes + s * 210;
        std::memcpy(o + 2 * r, b + 208, 2);
        int32_t c = 0;
        for (int sub = 0; sub < 16; ++sub) {
          o[48 + 8 * sub + r] = b[192 + sub];
          int32_t codes = 0;
          for (int e = 16 * sub; e < 16 * sub + 16; ++e) codes += Q6KCode(b, e) - 32;
          c += static_cast<int8_t>(b[192 + sub]) * codes;
        }
        c *= 128;
        std::memcpy(o + 16 + 4 * r, &c, 4);
        for (int h = 0; h < 2; ++h) {
          for (int l0 = 0; l0 < 32; l0 += 8) {
            const int chunk = 3 * (4 * h + l0 / 8);
            std::memcpy(o + kQ6KChunks + 64 * chunk + 8 * r, b + 64 * h + l0, 8);
            std::memcpy(o + kQ6KChunks + 64 * (chunk + 1) + 8 * r, b + 64 * h + 32 + l0, 8);
            std::memcpy(o + kQ6KChunks + 64 * (chunk + 2) + 8 * r, b + 128 + 32 * h + l0, 8);
          }
        }
      }
    }
  }
}

}  // namespace

bool HasRowGroupKernel(GgmlType type) {
#if defined(__x86_64__)
  return (type == GgmlType::kQ4_K || type == GgmlType::kQ6_K) && BestQ8Kernel() == Q8Kernel::kAvx512Vnni &&
         Q8RowDot(type) != nullptr;
#else
  (void)type;
  return false;
#endif
}

int64_t RowGroupBytes(GgmlType type, int64_t k) {
  return k / 256 * (type == GgmlType::kQ6_K ? kQ6KBlockBytes : kQ4KBlockBytes);
}

void PackRowGroups(GgmlType type, const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out) {
  if (type == GgmlType::kQ6_K) {
    PackQ6K(rows, k, first, last, out);
  } else {
    PackQ4K(rows, k, first, last, out);
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
KILN_GROUP_TARGET void Q4KGroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, int64_t t0, float* y,
                                   int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * kQ4KBlockBytes;
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

// kT tokens (t0..) against one q6_K group, their activation codes plus 128
// at xu + t * k.
template <int kT>
KILN_GROUP_TARGET void Q6KGroupTokens(const uint8_t* group, int64_t k, const Q8Rows& x, const uint8_t* xu,
                                      int64_t t0, float* y, int64_t ldy) {
  const int64_t supers = k / 256, blocks = k / 32;
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(0x30), offset = _mm512_set1_epi8(32);
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* o = group + s * kQ6KBlockBytes;
    __m512i isum[kT];
    for (int t = 0; t < kT; ++t) isum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {  // sub-blocks 8 h + half + 2 p, p < 4
        __m512i sums[4][kT];
        for (int p = 0; p < 4; ++p) {
          for (int t = 0; t < kT; ++t) sums[p][t] = _mm512_setzero_si512();
        }
        for (int l0 = 16 * half; l0 < 16 * half + 16; l0 += 8) {
          const uint8_t* chunk = o + kQ6KChunks + 64 * 3 * (4 * h + l0 / 8);
          const __m512i a = _mm512_loadu_si512(chunk), b = _mm512_loadu_si512(chunk + 64);
          const __m512i hb = _mm512_loadu_si512(chunk + 128);
          const __m512i codes[4] = {
              _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(a, low), _mm512_and_si512(_mm512_slli_epi16(hb, 4), high)),
                              offset),
              _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(b, low), _mm512_and_si512(_mm512_slli_epi16(hb, 2), high)),
                              offset),
              _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low), _mm512_and_si512(hb, high)),
                              offset),
              _mm512_sub_epi8(
                  _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), low),
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
          const __m128i sc = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(o + 48 + 8 * (8 * h + half + 2 * p)));
          const __m512i scale = _mm512_cvtepi8_epi32(_mm_unpacklo_epi8(sc, sc));
          for (int t = 0; t < kT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sums[p][t], scale));
        }
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 16));
    for (int t = 0; t < kT; ++t) {
      const __m512i pairs = _mm512_add_epi32(isum[t], _mm512_shuffle_epi32(isum[t], _MM_PERM_CDAB));
      const __m256 sums = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm512_cvtepi64_epi32(pairs), c));
      const float dx = x.d[(t0 + t) * blocks + 8 * s];
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, sums), _mm256_set1_ps(dx), acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(y + (t0 + t) * ldy, acc[t]);
}

// Every token of the call against each group in turn, four at a time.
template <class Tile>
KILN_GROUP_TARGET void EachGroup(int64_t num_groups, int64_t tokens, float* y, Tile tile) {
  for (int64_t g = 0; g < num_groups; ++g) {
    float* yg = y + kRowGroupRows * g;
    int64_t t = 0;
    for (; t + 4 <= tokens; t += 4) tile(g, t, yg, std::integral_constant<int, 4>());
    switch (tokens - t) {
      case 3:
        tile(g, t, yg, std::integral_constant<int, 3>());
        break;
      case 2:
        tile(g, t, yg, std::integral_constant<int, 2>());
        break;
      case 1:
        tile(g, t, yg, std::integral_constant<int, 1>());
        break;
    }
  }
}

}  // namespace

KILN_GROUP_TARGET void RowGroupsDot(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k,
                                    const Q8Rows& x, int64_t tokens, float* y, int64_t ldy) {
  const int64_t bytes = RowGroupBytes(type, k);
  if (type == GgmlType::kQ6_K) {
    // The activation codes plus 128, as the byte multiply-add's unsigned side.
    thread_local std::vector<uint8_t> shifted;
    shifted.resize(static_cast<size_t>(tokens * k));
    for (int64_t i = 0; i < tokens * k; ++i) shifted[i] = static_cast<uint8_t>(x.q[i]) ^ 0x80;
    const uint8_t* xu = shifted.data();
    EachGroup(num_groups, tokens, y, [&](int64_t g, int64_t t, float* yg, auto kt) {
      Q6KGroupTokens<decltype(kt)::value>(groups + g * bytes, k, x, xu, t, yg, ldy);
    });
  } else {
    EachGroup(num_groups, tokens, y, [&](int64_t g, int64_t t, float* yg, auto kt) {
      Q4KGroupTokens<decltype(kt)::value>(groups + g * bytes, k, x, t, yg, ldy);
    });
  }
}

#else

void RowGroupsDot(GgmlType, const uint8_t*, int64_t, int64_t, const Q8Rows&, int64_t, float*, int64_t) {}

#endif

}  // namespace kiln::cpu
