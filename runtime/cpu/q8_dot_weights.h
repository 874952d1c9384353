// The weight types of the integer kernels (q8_dot.h): the legacy types
// (q8_0, q4_0/1, q5_0/1) supply each 32-element block as byte codes plus how
// its integer sum I with an activation block (scale dx, codes summing to S)
// enters the dot product: mul dx I + add dx S (Sub). The k-quants (q4_K,
// q5_K, q6_K) supply their codes a sub-block at a time (Codes) and a
// super-block's scales together: its sub-blocks' integer scales (one per 16
// elements for q6_K) and float d for the AVX2 kernels, which weight the
// integer sums by them before any conversion (ScaleTable, SubScale); the AVX-512
// kernels take q4_K / q5_K's as floats (BlockScalesK4). Signed codes go
// through the sign trick (the byte multiply-add takes unsigned times signed:
// |w| times x with w's sign). Included by the kernels' files
// (q8_dot_kernels.h for AVX2 and AVX-VNNI, q8_dot_avx512.cc), each of which
// defines KILN_Q8_TARGET (the functions' target attribute) first; everything
// is in an anonymous namespace, compiled once per target. Internal to
// runtime/cpu.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/row_dot.h"
#include "runtime/cpu/row_dot_avx2.h"
#include "runtime/formats/quant.h"

namespace kiln::cpu {
namespace {

// One 32-element sub-block of a weight row.
struct SubBlock {
  __m256i w;      // codes: int8 (kSigned) or bytes 0..63
  float mul = 0;  // weight of the integer sum
  float add = 0;  // weight of the activation codes' sum (kHasAdd)
};

// 16 bytes of nibbles: element j (low nibble of byte j), element j + 16 (its high nibble).
KILN_Q8_TARGET inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

// The low or high nibbles of 32 bytes.
KILN_Q8_TARGET inline __m256i NibblePlane(const uint8_t* qs, int high) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  return _mm256_and_si256(high ? _mm256_srli_epi16(b, 4) : b, _mm256_set1_epi8(0x0F));
}

// Byte i is 0x10 where bit i of `bits` is set, else 0.
KILN_Q8_TARGET inline __m256i FifthBits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), _mm256_set1_epi8(0x10));
}

// q8_0 (34 bytes): f16 d | int8 q[32].
struct Q8_0W {
  static constexpr int kBytes = 34, kSubs = 1;
  static constexpr bool kSigned = true, kHasAdd = false;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    o->mul = avx2::LoadF16(b);
  }
};

// q4_0 (18 bytes): f16 d | qs[16]; w = d (q - 8): the offset through the
// activations' sum, so the codes stay unsigned.
struct Q4_0W {
  static constexpr int kBytes = 18, kSubs = 1;
  static constexpr bool kSigned = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = Nibbles32(b + 2);
    o->mul = avx2::LoadF16(b);
    o->add = -8.0f * o->mul;
  }
};

// q4_1 (20 bytes): f16 d | f16 m | qs[16]; w = d q + m.
struct Q4_1W {
  static constexpr int kBytes = 20, kSubs = 1;
  static constexpr bool kSigned = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = Nibbles32(b + 4);
    o->mul = avx2::LoadF16(b);
    o->add = avx2::LoadF16(b + 2);
  }
};

// q5_0 (22 bytes): f16 d | qh[4] | qs[16]; w = d (q - 16), bit i of qh is bit 4 of element i.
struct Q5_0W {
  static constexpr int kBytes = 22, kSubs = 1;
  static constexpr bool kSigned = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_or_si256(Nibbles32(b + 6), FifthBits(LoadLeU32(b + 2)));
    o->mul = avx2::LoadF16(b);
    o->add = -16.0f * o->mul;
  }
};

// q5_1 (24 bytes): f16 d | f16 m | qh[4] | qs[16]; w = d q + m.
struct Q5_1W {
  static constexpr int kBytes = 24, kSubs = 1;
  static constexpr bool kSigned = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_or_si256(Nibbles32(b + 8), FifthBits(LoadLeU32(b + 4)));
    o->mul = avx2::LoadF16(b);
    o->add = avx2::LoadF16(b + 2);
  }
};

// The 8 sub-block scales and mins of a q4_K / q5_K super-block (12 bytes at
// t, 6 bits each: sub-blocks 0-3 in the low 6 bits of t[0..3] / t[4..7],
// 4-7 in the nibbles of t[8..11] with their top 2 bits in bits 6-7 of
// t[0..3] / t[4..7]), unpacked four bytes at a time.
inline void ScalesAndMinsK4(const uint8_t* t, uint8_t sc[8], uint8_t m[8]) {
  const uint32_t a = LoadLeU32(t), b = LoadLeU32(t + 4), c = LoadLeU32(t + 8);
  const uint32_t low6 = 0x3F3F3F3Fu, nibble = 0x0F0F0F0Fu, top2 = 0x30303030u;
  const uint32_t words[4] = {a & low6, (c & nibble) | ((a >> 2) & top2), b & low6,
                             ((c >> 4) & nibble) | ((b >> 2) & top2)};
  std::memcpy(sc, words, 8);
  std::memcpy(m, words + 2, 8);
}

// Eight bytes as eight floats.
KILN_Q8_TARGET inline __m256 BytesToFloats(const uint8_t* v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))));
}

// A q4_K / q5_K super-block's 8 sub-block weights at once (its 6-bit
// scales unpacked together, not one sub-block at a time): mul[s] = d sc,
// add[s] = -dmin m (f16 d, dmin at the block's start, the scales after them).
KILN_Q8_TARGET inline void BlockScalesK4(const uint8_t* b, float* mul, float* add) {
  uint8_t sc[8], m[8];
  ScalesAndMinsK4(b + 4, sc, m);
  _mm256_storeu_ps(mul, _mm256_mul_ps(_mm256_set1_ps(avx2::LoadF16(b)), BytesToFloats(sc)));
  _mm256_storeu_ps(add, _mm256_mul_ps(_mm256_set1_ps(-avx2::LoadF16(b + 2)), BytesToFloats(m)));
}

// A q4_K / q5_K super-block's integer scales for the AVX2 kernels, as a
// table SubScale reads sub-block s's from: sc[0..8) as int16 in both
// 128-bit halves; d, and adds[s] = -dmin m[s].
KILN_Q8_TARGET inline __m256i ScaleTableK4(const uint8_t* b, float* d, float* adds) {
  uint8_t sc[8], m[8];
  ScalesAndMinsK4(b + 4, sc, m);
  *d = avx2::LoadF16(b);
  _mm256_storeu_ps(adds, _mm256_mul_ps(_mm256_set1_ps(-avx2::LoadF16(b + 2)), BytesToFloats(m)));
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
}

// Sub-block s's scale on every int16 lane: one byte shuffle of the table.
KILN_Q8_TARGET inline __m256i SubScaleK4(__m256i table, int s) {
  return _mm256_shuffle_epi8(table, _mm256_set1_epi16(static_cast<short>((2 * s + 1) << 8 | 2 * s)));
}

// q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128]; sub-block s is
// the low (s even) or high nibbles of qs[32 (s / 2) ..]; w = d sc q - dmin m
// (BlockScalesK4).
struct Q4_KW {
  static constexpr int kBytes = 144, kSubs = 8;
  static constexpr bool kSigned = false, kHasAdd = true;
  KILN_Q8_TARGET static __m256i Codes(const uint8_t* b, int s) { return NibblePlane(b + 16 + 32 * (s / 2), s % 2); }
  KILN_Q8_TARGET static __m256i ScaleTable(const uint8_t* b, float* d, float* adds) { return ScaleTableK4(b, d, adds); }
  KILN_Q8_TARGET static __m256i SubScale(__m256i table, int s) { return SubScaleK4(table, s); }
};

// q5_K (176 bytes): as q4_K with qh[32] before qs: bit s of qh[l] is bit 4
// of element l of sub-block s.
struct Q5_KW {
  static constexpr int kBytes = 176, kSubs = 8;
  static constexpr bool kSigned = false, kHasAdd = true;
  KILN_Q8_TARGET static __m256i Codes(const uint8_t* b, int s) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256i fifth = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), 4),
                                           _mm256_set1_epi8(0x10));
    return _mm256_or_si256(NibblePlane(b + 48 + 32 * (s / 2), s % 2), fifth);
  }
  KILN_Q8_TARGET static __m256i ScaleTable(const uint8_t* b, float* d, float* adds) { return ScaleTableK4(b, d, adds); }
  KILN_Q8_TARGET static __m256i SubScale(__m256i table, int s) { return SubScaleK4(table, s); }
};

// q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d. Sub-block s
// is plane k = s % 4 of half s / 4: the low (k < 2) or high nibbles of
// ql[64 half + 32 (k % 2) ..], bits 2k of qh[32 half ..] as bits 4-5,
// w = d sc (q - 32) with one scale per 16 elements.
struct Q6_KW {
  static constexpr int kBytes = 210, kSubs = 8;
  static constexpr bool kSigned = true, kHasAdd = false;
  KILN_Q8_TARGET static __m256i Codes(const uint8_t* b, int s) {
    const int half = s / 4, k = s % 4;
    const __m256i low = NibblePlane(b + 64 * half + 32 * (k % 2), k / 2);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
    const __m256i high = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), 4),
                                          _mm256_set1_epi8(0x30));
    return _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
  }
  // The 16 int8 scales as int16 (lanes 0-7 in the low half, 8-15 in the
  // high half), and d.
  KILN_Q8_TARGET static __m256i ScaleTable(const uint8_t* b, float* d, float*) {
    *d = avx2::LoadF16(b + 208);
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
  }
  // Sub-block s's scales i = 8 (s / 4) + 2 (s % 4) (its elements 0-15) and
  // i + 1 (16-31) on the int16 lanes of each half: the dword holding both
  // everywhere, then each half's word of it.
  KILN_Q8_TARGET static __m256i SubScale(__m256i table, int s) {
    const int i = 8 * (s / 4) + 2 * (s % 4);
    const __m256i pair = _mm256_permutevar8x32_epi32(table, _mm256_set1_epi32(i / 2));
    return _mm256_shuffle_epi8(pair, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3,
                                                      2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  }
};

// The weight types whose activations have one scale a super-block (those of
// Q8GroupOf's 256: the k-quants, 8 sub-blocks a block): every kernel family
// carries their sums in units of that scale (Q8Rows::unit).
template <class W>
constexpr bool kSuperBlockUnits = W::kSubs == 8;

// A kernel family's function for `type` (Family::Of<W>() gives the one for
// weight type W), or nullptr where the type has no integer path.
template <class Family>
RowDotQ8Fn KernelForType(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return Family::template Of<Q8_0W>();
    case GgmlType::kQ4_0:
      return Family::template Of<Q4_0W>();
    case GgmlType::kQ4_1:
      return Family::template Of<Q4_1W>();
    case GgmlType::kQ5_0:
      return Family::template Of<Q5_0W>();
    case GgmlType::kQ5_1:
      return Family::template Of<Q5_1W>();
    case GgmlType::kQ4_K:
      return Family::template Of<Q4_KW>();
    case GgmlType::kQ5_K:
      return Family::template Of<Q5_KW>();
    case GgmlType::kQ6_K:
      return Family::template Of<Q6_KW>();
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace kiln::cpu
