// Integer row dots against int8 activations (q8_dot.h). Each weight type
// supplies its 32-element sub-blocks as byte codes plus how a sub-block's
// integer sum I with an activation block (scale dx, code sum S) enters the
// dot product: dx * (mul * I + add * S). Signed codes go through the sign
// trick (vpmaddubsw multiplies unsigned by signed bytes: |w| times x with
// w's sign); q6_K's two 16-element scales weight the pair sums as int16.

#include "runtime/cpu/q8_dot.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/row_dot.h"
#include "runtime/formats/quant.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {

#if defined(__x86_64__)
namespace {

// One 32-element sub-block of a weight row.
struct SubBlock {
  __m256i w;        // codes: int8 (kSigned) or bytes 0..63
  __m256i scale16;  // kPer16: int16 scale of elements 0..15 (low half), 16..31 (high half)
  float mul = 0;    // weight of the integer sum
  float add = 0;    // weight of the activation codes' sum (kHasAdd)
};

// 16 bytes of nibbles: element j (low nibble of byte j), element j + 16 (its high nibble).
KILN_AVX2 inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

// The low or high nibbles of 32 bytes.
KILN_AVX2 inline __m256i NibblePlane(const uint8_t* qs, int high) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  return _mm256_and_si256(high ? _mm256_srli_epi16(b, 4) : b, _mm256_set1_epi8(0x0F));
}

// Byte i is 0x10 where bit i of `bits` is set, else 0.
KILN_AVX2 inline __m256i FifthBits(uint32_t bits) {
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
  KILN_AVX2 static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    o->mul = avx2::LoadF16(b);
  }
};

// q4_0 (18 bytes): f16 d | qs[16]; w = d (q - 8): the offset through the
// activations' sum, so the codes stay unsigned.
struct Q4_0W {
  static constexpr int kBytes = 18, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_AVX2 static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = Nibbles32(b + 2);
    o->mul = avx2::LoadF16(b);
    o->add = -8.0f * o->mul;
  }
};

// q4_1 (20 bytes): f16 d | f16 m | qs[16]; w = d q + m.
struct Q4_1W {
  static constexpr int kBytes = 20, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_AVX2 static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = Nibbles32(b + 4);
    o->mul = avx2::LoadF16(b);
    o->add = avx2::LoadF16(b + 2);
  }
};

// q5_0 (22 bytes): f16 d | qh[4] | qs[16]; w = d (q - 16), bit i of qh is bit 4 of element i.
struct Q5_0W {
  static constexpr int kBytes = 22, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_AVX2 static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_or_si256(Nibbles32(b + 6), FifthBits(LoadLeU32(b + 2)));
    o->mul = avx2::LoadF16(b);
    o->add = -16.0f * o->mul;
  }
};

// q5_1 (24 bytes): f16 d | f16 m | qh[4] | qs[16]; w = d q + m.
struct Q5_1W {
  static constexpr int kBytes = 24, kSubs = 1;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_AVX2 static void Sub(const uint8_t* b, int, SubBlock* o) {
    o->w = _mm256_or_si256(Nibbles32(b + 8), FifthBits(LoadLeU32(b + 4)));
    o->mul = avx2::LoadF16(b);
    o->add = avx2::LoadF16(b + 2);
  }
};

// q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128]; sub-block s is
// the low (s even) or high nibbles of qs[32 (s / 2) ..]; w = d sc q - dmin m.
struct Q4_KW {
  static constexpr int kBytes = 144, kSubs = 8;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_AVX2 static void Sub(const uint8_t* b, int s, SubBlock* o) {
    o->w = NibblePlane(b + 16 + 32 * (s / 2), s % 2);
    int sc, m;
    GetScaleMinK4(b + 4, s, &sc, &m);
    o->mul = avx2::LoadF16(b) * static_cast<float>(sc);
    o->add = -avx2::LoadF16(b + 2) * static_cast<float>(m);
  }
};

// q5_K (176 bytes): as q4_K with qh[32] before qs: bit s of qh[l] is bit 4
// of element l of sub-block s.
struct Q5_KW {
  static constexpr int kBytes = 176, kSubs = 8;
  static constexpr bool kSigned = false, kPer16 = false, kHasAdd = true;
  KILN_AVX2 static void Sub(const uint8_t* b, int s, SubBlock* o) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m256i fifth = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), 4),
                                           _mm256_set1_epi8(0x10));
    o->w = _mm256_or_si256(NibblePlane(b + 48 + 32 * (s / 2), s % 2), fifth);
    int sc, m;
    GetScaleMinK4(b + 4, s, &sc, &m);
    o->mul = avx2::LoadF16(b) * static_cast<float>(sc);
    o->add = -avx2::LoadF16(b + 2) * static_cast<float>(m);
  }
};

// q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d. Sub-block s
// is plane k = s % 4 of half s / 4: the low (k < 2) or high nibbles of
// ql[64 half + 32 (k % 2) ..], bits 2k of qh[32 half ..] as bits 4-5,
// w = d sc (q - 32) with one scale per 16 elements.
struct Q6_KW {
  static constexpr int kBytes = 210, kSubs = 8;
  static constexpr bool kSigned = true, kPer16 = true, kHasAdd = false;
  KILN_AVX2 static void Sub(const uint8_t* b, int s, SubBlock* o) {
    const int half = s / 4, k = s % 4;
    const __m256i low = NibblePlane(b + 64 * half + 32 * (k % 2), k / 2);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
    const __m256i high = _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), 4),
                                          _mm256_set1_epi8(0x30));
    o->w = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half + 2 * k);
    o->scale16 = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
    o->mul = avx2::LoadF16(b + 208);
  }
};

// kTile tokens (rows t0.. of x) against one weight row. Each token keeps its
// own accumulators, alternating by activation block, so its sum takes the
// same operations in the same order whatever kTile is.
template <class W, int kTile>
KILN_AVX2 void DotTileQ8(const uint8_t* row, int64_t k, const Q8Rows& x, int64_t t0, float* out) {
  const int64_t subs = k / 32;
  __m256 acc[kTile][2];
  float add[kTile];
  for (int t = 0; t < kTile; ++t) {
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    add[t] = 0.0f;
  }
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t j = 0; j < subs; ++j) {
    SubBlock sb;
    W::Sub(row + (j / W::kSubs) * W::kBytes, static_cast<int>(j % W::kSubs), &sb);
    const __m256i aw = W::kSigned ? _mm256_abs_epi8(sb.w) : sb.w;
    for (int t = 0; t < kTile; ++t) {
      const int64_t xt = (t0 + t) * subs + j;
      __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * k + 32 * j));
      if (W::kSigned) xq = _mm256_sign_epi8(xq, sb.w);
      const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xq), W::kPer16 ? sb.scale16 : ones16);
      acc[t][j & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(sb.mul * x.d[xt]), acc[t][j & 1]);
      if (W::kHasAdd) add[t] = std::fma(sb.add, x.dsum[xt], add[t]);
    }
  }
  for (int t = 0; t < kTile; ++t) out[t] = avx2::HorizontalSum(_mm256_add_ps(acc[t][0], acc[t][1])) + add[t];
}

template <class W>
KILN_AVX2 void RowDotQ8(const uint8_t* row, int64_t k, const Q8Rows& x, int64_t tokens, float* y, int64_t ldy) {
  float sums[4];
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) {
    DotTileQ8<W, 4>(row, k, x, t, sums);
    for (int i = 0; i < 4; ++i) y[(t + i) * ldy] = sums[i];
  }
  switch (tokens - t) {
    case 3:
      DotTileQ8<W, 3>(row, k, x, t, sums);
      break;
    case 2:
      DotTileQ8<W, 2>(row, k, x, t, sums);
      break;
    case 1:
      DotTileQ8<W, 1>(row, k, x, t, sums);
      break;
    default:
      return;
  }
  for (int i = 0; t + i < tokens; ++i) y[(t + i) * ldy] = sums[i];
}

// One block of 32: d = max|x| / 127, codes rounded to nearest even (the
// MXCSR default), stored in element order.
KILN_AVX2 void QuantizeBlock(const float* x, int8_t* q, float* d, float* dsum) {
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 m8 = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  *d = amax / 127.0f;
  const __m256 inv = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i c[4];
  for (int i = 0; i < 4; ++i) c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
  const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  *dsum = *d * static_cast<float>(_mm_cvtsi128_si32(s4));
  // packs interleave the 128-bit lanes; the permute puts the dwords back in order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

KILN_AVX2 void QuantizeRows(const float* x, int64_t tokens, int64_t k, int8_t* q, float* d, float* dsum) {
  const int64_t blocks = tokens * (k / 32);
  for (int64_t b = 0; b < blocks; ++b) QuantizeBlock(x + 32 * b, q + 32 * b, d + b, dsum + b);
}

}  // namespace

void QuantizeQ8(const float* x, int64_t tokens, int64_t k, int8_t* q, float* d, float* dsum) {
  QuantizeRows(x, tokens, k, q, d, dsum);
}

RowDotQ8Fn Q8RowDot(GgmlType type) {
  if (DetectCpuIsa() != CpuIsa::kAvx2) return nullptr;
  switch (type) {
    case GgmlType::kQ8_0:
      return RowDotQ8<Q8_0W>;
    case GgmlType::kQ4_0:
      return RowDotQ8<Q4_0W>;
    case GgmlType::kQ4_1:
      return RowDotQ8<Q4_1W>;
    case GgmlType::kQ5_0:
      return RowDotQ8<Q5_0W>;
    case GgmlType::kQ5_1:
      return RowDotQ8<Q5_1W>;
    case GgmlType::kQ4_K:
      return RowDotQ8<Q4_KW>;
    case GgmlType::kQ5_K:
      return RowDotQ8<Q5_KW>;
    case GgmlType::kQ6_K:
      return RowDotQ8<Q6_KW>;
    default:
      return nullptr;
  }
}

#else  // !__x86_64__

void QuantizeQ8(const float*, int64_t, int64_t, int8_t*, float*, float*) {}
RowDotQ8Fn Q8RowDot(GgmlType) { return nullptr; }

#endif

}  // namespace kiln::cpu
