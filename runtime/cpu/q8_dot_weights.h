// The weight types of the integer kernels (q8_dot.h): each supplies its
// 32-element sub-blocks as byte codes plus how a sub-block's integer sum I
// with an activation block (scale dx, codes summing to S) enters the dot
// product: mul dx I + add dx S. Signed codes go through the sign trick (the
// byte multiply-add takes unsigned times signed: |w| times x with w's
// sign); q6_K has one scale per 16 elements. Included by the kernels' files
// (q8_dot_kernels.h for AVX2 and AVX-VNNI, q8_dot_avx512.cc), each of which
// defines KILN_Q8_TARGET (the functions' target attribute) first; everything
// is in an anonymous namespace, compiled once per target. Internal to
// runtime/cpu.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "runtime/cpu/row_dot.h"
#include "runtime/cpu/row_dot_avx2.h"
#include "runtime/formats/quant.h"

namespace kiln::cpu {
namespace {

// One 32-element sub-block of a weight row.
struct SubBlock {
  __m256i w;        // codes: int8 (kSigned) or bytes 0..63
  __m256i scale16;  // kPer16: int16 scale of elements 0..15 (low half), 16..31 (high half)
  int sc16[2] = {1, 1};  // kPer16: the same two scales as integers
  float mul = 0;    // weight of the integer sum
  float add = 0;    // weight of the activation codes' sum (kHasAdd)
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
  static constexpr bool kSigned = true, kPer16 = false, kHasAdd = false;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    o->mul = avx2::LoadF16(b);
  }
};

// q4_0 (18 bytes): f16 d | qs[16]; w = d (q - 8): the offset through the
// activations' sum, so the codes stay unsigned.
struct Q4_0W {
  static constexpr int kBytes = 18, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = Nibbles32(b + 2);
    o->mul = avx2::LoadF16(b);
    o->add = -8.0f * o->mul;
  }
};

// q4_1 (20 bytes): f16 d | f16 m | qs[16]; w = d q + m.
struct Q4_1W {
  static constexpr int kBytes = 20, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = Nibbles32(b + 4);
    o->mul = avx2::LoadF16(b);
    o->add = avx2::LoadF16(b + 2);
  }
};

// q5_0 (22 bytes): f16 d | qh[4] | qs[16]; w = d (q - 16), bit i of qh is bit 4 of element i.
struct Q5_0W {
  static constexpr int kBytes = 22, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_or_si256(Nibbles32(b + 6), FifthBits(LoadLeU32(b + 2)));
    o->mul = avx2::LoadF16(b);
    o->add = -16.0f * o->mul;
  }
};

// q5_1 (24 bytes): f16 d | f16 m | qh[4] | qs[16]; w = d q + m.
struct Q5_1W {
  static constexpr int kBytes = 24, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_or_si256(Nibbles32(b + 8), FifthBits(LoadLeU32(b + 4)));
    o->mul = avx2::LoadF16(b);
    o->add = avx2::LoadF16(b + 2);
  }
};

// A q4_K / q5_K block's sub-block s: w = d sc q - dmin m (f16 d, dmin at
// the block's start, the 6-bit scales and mins after them).
KILN_Q8_TARGET inline void ScaleAndMinK(const uint8_t* b, int s, SubBlock* o) {
  int sc, m;
  GetScaleMinK4(b + 4, s, &sc, &m);
  o->mul = avx2::LoadF16(b) * static_cast<float>(sc);
  o->add = -avx2::LoadF16(b + 2) * static_cast<float>(m);
}

// q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128]; sub-block s is
// the low (s even) or high nibbles of qs[32 (s / 2) ..]; w = d sc q - dmin m.
struct Q4_KW {
  static constexpr int kBytes = 144, kSubs = 8;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int s, SubBlock* o) {
    o->w = NibblePlane(b + 16 + 32 * (s / 2), s % 2);
    ScaleAndMinK(b, s, o);
  }
};

// q5_K (176 bytes): as q4_K with qh[32] before qs: bit s of qh[l] is bit 4
// of element l of sub-block s.
struct Q5_KW {
  static constexpr int kBytes = 176, kSubs = 8;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int s, SubBlock* o) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256i fifth = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), 4),
                                           _mm256_set1_epi8(0x10));
    o->w = _mm256_or_si256(NibblePlane(b + 48 + 32 * (s / 2), s % 2), fifth);
    ScaleAndMinK(b, s, o);
  }
};

// q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d. Sub-block s
// is plane k = s % 4 of half s / 4: the low (k < 2) or high nibbles of
// ql[64 half + 32 (k % 2) ..], bits 2k of qh[32 half ..] as bits 4-5,
// w = d sc (q - 32) with one scale per 16 elements.
struct Q6_KW {
  static constexpr int kBytes = 210, kSubs = 8;
  static constexpr bool kSigned = true, kPer16 = true, kHasAdd = false;
  KILN_Q8_TARGET static void Sub(const uint8_t* b, int s, SubBlock* o) {
    const int half = s / 4, k = s % 4;
    const __m256i low = NibblePlane(b + 64 * half + 32 * (k % 2), k / 2);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
    const __m256i high = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), 4),
                                          _mm256_set1_epi8(0x30));
    o->w = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half + 2 * k);
    o->scale16 = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
    o->sc16[0] = sc[0];
    o->sc16[1] = sc[1];
    o->mul = avx2::LoadF16(b + 208);
  }
};

}  // namespace
}  // namespace kiln::cpu
