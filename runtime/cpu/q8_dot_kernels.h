// The integer row-dot kernels of q8_dot.h, included by q8_dot.cc (AVX2) and
// q8_dot_vnni.cc (AVX2 with AVX-VNNI's vpdpbusd), each of which defines
// KILN_Q8_TARGET (the functions' target attribute) and IntegerSums first.
// Everything is in an anonymous namespace: each includer compiles its own
// copy for its own target, and no copy is shared between them. Internal to
// runtime/cpu.
//
// Each weight type supplies its 32-element sub-blocks as byte codes plus how
// a sub-block's integer sum I with an activation block (scale dx, codes
// summing to S) enters the dot product: mul dx I + add dx S. Signed codes go
// through the sign trick (the byte multiply-add takes unsigned times signed:
// |w| times x with w's sign); q6_K's two 16-element scales weight the pair
// sums as int16.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/row_dot.h"
#include "runtime/cpu/row_dot_avx2.h"
#include "runtime/formats/quant.h"

namespace kiln::cpu {
namespace {

// One 32-element sub-block of a weight row.
struct SubBlock {
  __m256i w;        // codes: int8 (kSigned) or bytes 0..63
  __m256i scale16;  // kPer16: int16 scale of elements 0..15 (low half), 16..31 (high half)
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
    o->mul = avx2::LoadF16(b + 208);
  }
};

// Where a row's sub-blocks come from. RowInPlace decodes them from the
// weight row as it goes, keeping each one's offset weight in `adds`;
// DecodedRow holds a row decoded once for every token of a prefill tile.
template <class W>
struct RowInPlace {
  const uint8_t* row;
  float* adds;  // [subs]
  KILN_Q8_TARGET void Get(int64_t j, SubBlock* sb, __m256i* u) const {
    W::Sub(row + (j / W::kSubs) * W::kBytes, static_cast<int>(j % W::kSubs), sb);
    *u = W::kSigned ? _mm256_abs_epi8(sb->w) : sb->w;
    if (W::kHasAdd) adds[j] = sb->add;
  }
  const float* Adds() const { return adds; }
};

template <class W>
struct DecodedRow {
  std::vector<__m256i> w, u, scale16;  // per sub-block: codes, what the multiply-add takes, q6_K's scales
  std::vector<float> mul, add;
  KILN_Q8_TARGET void Decode(const uint8_t* row, int64_t subs) {
    w.resize(subs);
    u.resize(subs);
    mul.resize(subs);
    add.resize(subs);
    if (W::kPer16) scale16.resize(subs);
    const RowInPlace<W> in{row, add.data()};
    for (int64_t j = 0; j < subs; ++j) {
      SubBlock sb;
      in.Get(j, &sb, &u[j]);
      w[j] = sb.w;
      mul[j] = sb.mul;
      if (W::kPer16) scale16[j] = sb.scale16;
    }
  }
  KILN_Q8_TARGET void Get(int64_t j, SubBlock* sb, __m256i* u_out) const {
    sb->w = w[j];
    *u_out = u[j];
    sb->mul = mul[j];
    if (W::kPer16) sb->scale16 = scale16[j];
  }
  const float* Adds() const { return add.data(); }
};

// The row of `src` against kTile tokens (rows t0.. of x): out[t]. Every
// token has its own accumulator fed by the same operations in the same order
// whatever kTile and the source are, so a result never depends on which
// tokens share its tile or whether the row was decoded ahead. The offsets
// (add dx S) are summed after the loop.
template <class W, class Src, int kTile>
KILN_Q8_TARGET void DotTileQ8(const Src& src, int64_t k, const Q8Rows& x, int64_t t0, float* out) {
  const int64_t subs = k / 32;
  __m256 acc[kTile];
  for (int t = 0; t < kTile; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t j = 0; j < subs; ++j) {
    SubBlock sb;
    __m256i u;
    src.Get(j, &sb, &u);
    const __m256 mul = _mm256_set1_ps(sb.mul);
    for (int t = 0; t < kTile; ++t) {
      const int64_t xt = (t0 + t) * subs + j;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * k + 32 * j));
      const __m256i xs = W::kSigned ? _mm256_sign_epi8(xq, sb.w) : xq;
      const __m256i p32 =
          W::kPer16 ? _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), sb.scale16) : IntegerSums(u, xs);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_mul_ps(mul, _mm256_set1_ps(x.d[xt])), acc[t]);
    }
  }
  for (int t = 0; t < kTile; ++t) {
    float offset = 0.0f;
    if (W::kHasAdd) {
      const float* a = src.Adds();
      const float* ds = x.dsum + (t0 + t) * subs;
      __m256 o = _mm256_setzero_ps();
      int64_t j = 0;
      for (; j + 8 <= subs; j += 8) o = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(ds + j), o);
      offset = avx2::HorizontalSum(o);
      for (; j < subs; ++j) offset = std::fma(a[j], ds[j], offset);
    }
    out[t] = avx2::HorizontalSum(acc[t]) + offset;
  }
}

// Every token of x against the row of `src`: y[t * ldy].
template <class W, class Src>
KILN_Q8_TARGET void TokensQ8(const Src& src, int64_t k, const Q8Rows& x, int64_t tokens, float* y, int64_t ldy) {
  float out[4];
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) {
    DotTileQ8<W, Src, 4>(src, k, x, t, out);
    for (int i = 0; i < 4; ++i) y[(t + i) * ldy] = out[i];
  }
  const int rest = static_cast<int>(tokens - t);
  switch (rest) {
    case 3:
      DotTileQ8<W, Src, 3>(src, k, x, t, out);
      break;
    case 2:
      DotTileQ8<W, Src, 2>(src, k, x, t, out);
      break;
    case 1:
      DotTileQ8<W, Src, 1>(src, k, x, t, out);
      break;
    default:
      return;
  }
  for (int i = 0; i < rest; ++i) y[(t + i) * ldy] = out[i];
}

// Prefill tiles (8 tokens or more) decode each row once and run every token
// over the decoded sub-blocks; decode walks the rows one after the other,
// decoding as it goes, the order the prefetchers follow (rows taken in
// pairs interleaved two weight streams: Qwen's decode 58.5 -> 28.4 tok/s).
template <class W>
KILN_Q8_TARGET void RowsDotQ8(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t k, const Q8Rows& x,
                              int64_t tokens, float* y, int64_t ldy) {
  const int64_t subs = k / 32;
  if (tokens >= 8) {
    thread_local DecodedRow<W> decoded;
    for (int64_t r = 0; r < nrows; ++r) {
      decoded.Decode(rows + r * row_bytes, subs);
      TokensQ8<W>(decoded, k, x, tokens, y + r, ldy);
    }
    return;
  }
  thread_local std::vector<float> adds;  // the offsets of the row in flight
  if (W::kHasAdd) adds.resize(static_cast<size_t>(subs));
  for (int64_t r = 0; r < nrows; ++r) {
    TokensQ8<W>(RowInPlace<W>{rows + r * row_bytes, adds.data()}, k, x, tokens, y + r, ldy);
  }
}

// The kernel of each type with an integer path, else nullptr.
RowDotQ8Fn KernelOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return RowsDotQ8<Q8_0W>;
    case GgmlType::kQ4_0:
      return RowsDotQ8<Q4_0W>;
    case GgmlType::kQ4_1:
      return RowsDotQ8<Q4_1W>;
    case GgmlType::kQ5_0:
      return RowsDotQ8<Q5_0W>;
    case GgmlType::kQ5_1:
      return RowsDotQ8<Q5_1W>;
    case GgmlType::kQ4_K:
      return RowsDotQ8<Q4_KW>;
    case GgmlType::kQ5_K:
      return RowsDotQ8<Q5_KW>;
    case GgmlType::kQ6_K:
      return RowsDotQ8<Q6_KW>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace kiln::cpu
