// The integer kernels of q8_dot.h on AVX-512 VNNI: two 32-element
// sub-blocks in one 512-bit register, so one vpdpbusd, one conversion, one
// scale product and one FMA cover 64 weights of a row against one token
// (AVX2's kernels take each of them per 32); the k-quants, whose
// activations have one scale a super-block, take no scale product (their
// sums run in units of that scale: Q8Rows::unit). Prefill runs tiles of 4
// rows x 4 tokens over rows decoded once (16 accumulators: each weight and
// activation register is used four times); up to 4 tokens walk the rows in
// place, decoding a k-quant super-block (or a pair of legacy blocks) at a
// time and stepping every token over it. Every (row, token) result takes
// the same operations in the same order on every path, so it never depends
// on the tile, the batch or the thread; its bits are not AVX2's (other sums).

#include "runtime/cpu/q8_dot.h"

#if defined(__x86_64__)
#define KILN_Q8_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/cpu/lane_sums_avx512.h"
#include "runtime/cpu/q8_dot_weights.h"

namespace kiln::cpu {
namespace {

// Sub-blocks 2p and 2p + 1 of a row (the second zero past an odd end).
// Int32 lane l of a vpdpbusd over them sums elements 4l..4l+3: lanes 0-7
// are sub-block 2p, 8-15 sub-block 2p + 1, each half of 4 lanes one
// 16-element half (where q6_K's scales change; the legacy types give each
// sub-block's scale to both of its quarters).
struct alignas(64) PairBlock {
  __m512i u;      // what vpdpbusd takes: the codes, or their magnitudes (kSigned)
  __m128 mul;     // the scale of each 16-element quarter
  __mmask64 neg;  // kSigned: the elements whose weight is negative
};

// The pair's codes from its two sub-blocks (the second zero past an odd end).
KILN_Q8_TARGET inline __m512i Join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

// Two 16-byte runs of nibbles (element i of a run: low nibble of byte i;
// element i + 16: its high nibble) as the 64 codes of a pair.
KILN_Q8_TARGET inline __m512i NibblePair(const uint8_t* first, const uint8_t* second) {
  const __m256i v =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(first))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(second)), 1);
  const __m256i m = _mm256_set1_epi8(0x0F);
  const __m512i z = Join(_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
  // z's 128-bit lanes: low nibbles of run 1, of run 2, high nibbles of run 1,
  // of run 2.
  return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

// 32 bytes as two planes: the low nibbles (elements 0-31), the high ones
// (32-63).
KILN_Q8_TARGET inline __m512i NibblePlanes(const uint8_t* qs) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  const __m256i m = _mm256_set1_epi8(0x0F);
  return Join(_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
}

// The weight types whose whole pairs have a decoding of their own on 512
// bits (the legacy types and the fetched models' q4_K, q6_K): fewer
// operations than two sub-blocks through W::Sub, which the others take.
template <class W>
constexpr bool kPairCodes =
    std::is_same_v<W, Q4_0W> || std::is_same_v<W, Q4_1W> || std::is_same_v<W, Q5_0W> || std::is_same_v<W, Q5_1W> ||
    std::is_same_v<W, Q8_0W> || std::is_same_v<W, Q4_KW> || std::is_same_v<W, Q6_KW>;

// The codes of sub-blocks j and j + 1 (j even) where kPairCodes<W>.
template <class W>
KILN_Q8_TARGET inline __m512i PairCodes(const uint8_t* row, int64_t j) {
  const uint8_t* b = row + (j / W::kSubs) * W::kBytes;
  if constexpr (std::is_same_v<W, Q4_0W> || std::is_same_v<W, Q4_1W> || std::is_same_v<W, Q5_0W> ||
                std::is_same_v<W, Q5_1W>) {
    // Legacy blocks: f16 d [| f16 m] [| qh[4]] | qs[16], one block a sub-block.
    constexpr int kM = std::is_same_v<W, Q4_1W> || std::is_same_v<W, Q5_1W> ? 2 : 0;
    constexpr bool kFifth = std::is_same_v<W, Q5_0W> || std::is_same_v<W, Q5_1W>;
    constexpr int kQs = 2 + kM + (kFifth ? 4 : 0);
    const __m512i w = NibblePair(b + kQs, b + W::kBytes + kQs);
    if constexpr (!kFifth) return w;
    const uint64_t bits = LoadLeU32(b + 2 + kM) | (uint64_t{LoadLeU32(b + W::kBytes + 2 + kM)} << 32);
    return _mm512_mask_add_epi8(w, static_cast<__mmask64>(bits), w, _mm512_set1_epi8(0x10));
  } else if constexpr (std::is_same_v<W, Q8_0W>) {
    return Join(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + W::kBytes + 2)));
  } else if constexpr (std::is_same_v<W, Q4_KW>) {
    // Sub-blocks 2i and 2i + 1 are the low and high nibbles of qs[32 i ..].
    return NibblePlanes(b + 16 + 32 * ((j % 8) / 2));
  } else {
    static_assert(std::is_same_v<W, Q6_KW>);
    // Planes k and k + 1 (k = 0 or 2) of a half: the low (k = 0) or high
    // nibbles of ql[64 half ..], 64 bytes; bits 2k and 2k + 2 of qh as bits
    // 4-5.
    const int s = static_cast<int>(j % 8), half = s / 4, k = s % 4;
    const __m512i ql = _mm512_loadu_si512(b + 64 * half);
    const __m512i low = _mm512_and_si512(k ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0F));
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half)));
    const __m512i shift =
        Join(_mm256_set1_epi16(static_cast<short>(2 * k)), _mm256_set1_epi16(static_cast<short>(2 * k + 2)));
    const __m512i high = _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(qh, shift), 4), _mm512_set1_epi8(0x30));
    return _mm512_sub_epi8(_mm512_or_si512(low, high), _mm512_set1_epi8(32));
  }
}

// Sign handling and scales of a pair whose codes are w.
template <class W>
KILN_Q8_TARGET inline void SetPair(__m512i w, const float* quarter_scales, PairBlock* o) {
  if (W::kSigned) {
    o->neg = _mm512_movepi8_mask(w);
    o->u = _mm512_abs_epi8(w);
  } else {
    o->neg = 0;
    o->u = w;
  }
  o->mul = _mm_loadu_ps(quarter_scales);
}

// Decodes pair p of the row (the second sub-block zero where kTail: past an
// odd end); the offsets' weights go to adds[2p..]. The scales come from
// W::Sub, whose codes the compiler drops where PairCodes gives them.
template <class W, bool kTail>
KILN_Q8_TARGET inline void GetPair(const uint8_t* row, int64_t p, PairBlock* o, float* adds) {
  const int64_t j = 2 * p;
  SubBlock a, b;
  W::Sub(row + (j / W::kSubs) * W::kBytes, static_cast<int>(j % W::kSubs), &a);
  if (kTail) {
    b.w = _mm256_setzero_si256();
  } else {
    W::Sub(row + ((j + 1) / W::kSubs) * W::kBytes, static_cast<int>((j + 1) % W::kSubs), &b);
  }
  __m512i w;
  if constexpr (!kTail && kPairCodes<W>) {
    w = PairCodes<W>(row, j);
  } else {
    w = Join(a.w, b.w);
  }
  const float s[4] = {a.mul, a.mul, kTail ? 0.0f : b.mul, kTail ? 0.0f : b.mul};
  SetPair<W>(w, s, o);
  if (W::kHasAdd) {
    adds[j] = a.add;
    if (!kTail) adds[j + 1] = b.add;
  }
}

// Pairs are decoded a group at a time: a k-quant's super-block (4 pairs,
// its 8 or 16 scales unpacked together), else one pair.
template <class W>
constexpr int kGroupPairs = W::kSubs == 8 ? 4 : 1;

// Group g of the row into out[0..kGroupPairs) (whole pairs only; an odd
// end is GetPair<W, true>'s), the offsets' weights to adds[2 kGroupPairs g ..].
template <class W>
KILN_Q8_TARGET inline void DecodeGroup(const uint8_t* row, int64_t g, PairBlock* out, float* adds) {
  if constexpr (W::kSubs == 8) {
    const uint8_t* b = row + g * W::kBytes;
    alignas(64) float quarters[16];  // the 4 quarter scales of each pair
    if constexpr (std::is_same_v<W, Q6_KW>) {
      // One int8 scale per 16 elements: pair i's quarters are scales 4i..4i+3.
      const __m512 d = _mm512_set1_ps(avx2::LoadF16(b + 208));
      const __m512 sc =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
      _mm512_store_ps(quarters, _mm512_mul_ps(d, sc));
    } else {  // q4_K, q5_K
      alignas(32) float muls[8];
      BlockScalesK4(b, muls, adds + 8 * g);
      // Sub-block s's scale on both of its quarters.
      _mm512_store_ps(quarters, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                                      _mm512_castps256_ps512(_mm256_load_ps(muls))));
    }
    for (int i = 0; i < 4; ++i) {
      __m512i w;
      if constexpr (kPairCodes<W>) {
        w = PairCodes<W>(row, 8 * g + 2 * i);
      } else {
        w = Join(W::Codes(b, 2 * i), W::Codes(b, 2 * i + 1));
      }
      SetPair<W>(w, quarters + 4 * i, &out[i]);
    }
  } else {
    GetPair<W, false>(row, g, out, adds);
  }
}

// The four quarter scales of a pair across its 16 lanes.
KILN_Q8_TARGET inline __m512 LaneScales(__m128 mul) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                               _mm512_castps128_ps512(mul));
}

// A token's activations for pair p: its 64 codes (32 past an odd end) and
// its two block scales across the lanes.
struct PairX {
  __m512i q;
  __m512 d;
};

template <bool kTail>
KILN_Q8_TARGET inline PairX LoadX(const Q8Rows& x, int64_t subs, int64_t token, int64_t p) {
  const int8_t* q = x.q + token * x.k + 64 * p;
  const float* d = x.d + token * subs + 2 * p;
  PairX o;
  o.q = kTail ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, q) : _mm512_loadu_si512(q);
  const __m128 d2 = kTail ? _mm_load_ss(d) : _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(d)));
  o.d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                              _mm512_castps128_ps512(d2));
  return o;
}

// acc += the pair's 16 lane sums, each times its weight and activation
// scales (the weight's alone in units: the k-quants' sums run in units of
// their super-block's activation scale, rescaled between super-blocks).
template <class W>
KILN_Q8_TARGET inline __m512 PairStep(const PairBlock& w, __m512 w_scale, const PairX& x, __m512 acc) {
  const __m512i xs = W::kSigned ? _mm512_mask_sub_epi8(x.q, w.neg, _mm512_setzero_si512(), x.q) : x.q;
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u, xs);
  if constexpr (kSuperBlockUnits<W>) return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), w_scale, acc);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(w_scale, x.d), acc);
}

// The first pair of a k-quant's super-block: acc * rescale + its sums, so
// that the rescaling is not a step of its own in the chain of dependent
// operations a row's sums are (decode takes a row at a time: Qwen2.5-Coder-
// 1.5B at 1 thread 24.1-25.3 tok/s with a multiply of its own before the
// pair's FMA, 27.7-28.4 this way).
template <class W>
KILN_Q8_TARGET inline __m512 FirstPairStep(const PairBlock& w, __m512 w_scale, const PairX& x, __m512 acc,
                                           __m512 rescale) {
  static_assert(kSuperBlockUnits<W>);
  const __m512i xs = W::kSigned ? _mm512_mask_sub_epi8(x.q, w.neg, _mm512_setzero_si512(), x.q) : x.q;
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u, xs);
  return _mm512_fmadd_ps(acc, rescale, _mm512_mul_ps(_mm512_cvtepi32_ps(sums), w_scale));
}

// A token's sum of a row out of its lanes (in units: times the unit of its
// last super-block), plus its offset; the tile's LaneSums16 gives the same
// bits as the lane reduction here.
template <class W>
KILN_Q8_TARGET inline float RowResult(float lanes_sum, const Q8Rows& x, int64_t subs, int64_t token, float offset) {
  float v = lanes_sum;
  if constexpr (kSuperBlockUnits<W>) v = v * x.unit[token * (subs / 8) + subs / 8 - 1];
  return v + offset;  // (a statement of its own: never contracted into an FMA)
}

// sum_j adds[j] * (the token's d S of block j), before its lanes are summed.
KILN_Q8_TARGET inline __m512 OffsetLanes(const float* adds, const float* dsum, int64_t subs) {
  __m512 o = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= subs; j += 16) o = _mm512_fmadd_ps(_mm512_loadu_ps(adds + j), _mm512_loadu_ps(dsum + j), o);
  if (j < subs) {
    const __mmask16 m = static_cast<__mmask16>((1u << (subs - j)) - 1);
    o = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, adds + j), _mm512_maskz_loadu_ps(m, dsum + j), o);
  }
  return o;
}

KILN_Q8_TARGET inline float Offset(const float* adds, const float* dsum, int64_t subs) {
  return _mm512_reduce_add_ps(OffsetLanes(adds, dsum, subs));
}

// A row decoded once: its pairs and offsets' weights.
struct DecodedRow {
  std::vector<PairBlock> pairs;
  std::vector<float> adds;
};

template <class W>
KILN_Q8_TARGET void Decode(const uint8_t* row, int64_t subs, DecodedRow* o) {
  const int64_t pairs = (subs + 1) / 2;
  o->pairs.resize(static_cast<size_t>(pairs));
  o->adds.resize(static_cast<size_t>(subs));
  const int64_t full = subs / 2;
  for (int64_t g = 0; g < full / kGroupPairs<W>; ++g) {
    DecodeGroup<W>(row, g, &o->pairs[kGroupPairs<W> * g], o->adds.data());
  }
  if constexpr (W::kSubs == 1) {  // k-quant rows are whole super-blocks: no odd end
    if (subs % 2) GetPair<W, true>(row, full, &o->pairs[full], o->adds.data());
  }
}

// Pair p for every (row, token) of a kR x kT tile.
template <class W, int kR, int kT, bool kTail>
KILN_Q8_TARGET inline void TileStep(const PairBlock* const* rows, const Q8Rows& x, int64_t subs, int64_t t0, int64_t p,
                                    __m512 (&acc)[kR][kT]) {
  PairX xs[kT];
  for (int t = 0; t < kT; ++t) xs[t] = LoadX<kTail>(x, subs, t0 + t, p);
  if constexpr (kSuperBlockUnits<W>) {
    if (p % 4 == 0) {  // a super-block's first pair
      __m512 f[kT];
      for (int t = 0; t < kT; ++t) f[t] = _mm512_set1_ps(x.rescale[(t0 + t) * (subs / 8) + p / 4]);
      for (int r = 0; r < kR; ++r) {
        const PairBlock& w = rows[r][p];
        const __m512 w_scale = LaneScales(w.mul);
        for (int t = 0; t < kT; ++t) acc[r][t] = FirstPairStep<W>(w, w_scale, xs[t], acc[r][t], f[t]);
      }
      return;
    }
  }
  for (int r = 0; r < kR; ++r) {
    const PairBlock& w = rows[r][p];
    const __m512 w_scale = LaneScales(w.mul);
    for (int t = 0; t < kT; ++t) acc[r][t] = PairStep<W>(w, w_scale, xs[t], acc[r][t]);
  }
}

// y[t * ldy + r] for kR decoded rows and kT tokens from t0. A 4 x 4 tile's
// sixteen sums (and offsets) are summed across lanes together, with the
// bits single reductions give (LaneSums16): the same results as in place.
template <class W, int kR, int kT>
KILN_Q8_TARGET void Tile(const DecodedRow* const* rows, const Q8Rows& x, int64_t subs, int64_t t0, float* y,
                         int64_t ldy) {
  const PairBlock* pairs[kR];
  for (int r = 0; r < kR; ++r) pairs[r] = rows[r]->pairs.data();
  __m512 acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int64_t full = subs / 2;
  for (int64_t p = 0; p < full; ++p) TileStep<W, kR, kT, false>(pairs, x, subs, t0, p, acc);
  if (subs % 2) TileStep<W, kR, kT, true>(pairs, x, subs, t0, full, acc);
  if constexpr (kR * kT == 16) {
    __m512 lanes[16], offsets[16];
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kT; ++t) {
        lanes[r * kT + t] = acc[r][t];
        if (W::kHasAdd) offsets[r * kT + t] = OffsetLanes(rows[r]->adds.data(), x.dsum + (t0 + t) * subs, subs);
      }
    }
    __m512 sums = LaneSums16(lanes);
    if constexpr (kSuperBlockUnits<W>) {
      alignas(64) float units[16];
      for (int r = 0; r < kR; ++r) {
        for (int t = 0; t < kT; ++t) units[r * kT + t] = x.unit[(t0 + t) * (subs / 8) + subs / 8 - 1];
      }
      sums = _mm512_mul_ps(sums, _mm512_load_ps(units));
    }
    alignas(64) float out[16];
    _mm512_store_ps(out, W::kHasAdd ? _mm512_add_ps(sums, LaneSums16(offsets)) : sums);
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kT; ++t) y[(t0 + t) * ldy + r] = out[r * kT + t];
    }
  } else {
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kT; ++t) {
        const float offset = W::kHasAdd ? Offset(rows[r]->adds.data(), x.dsum + (t0 + t) * subs, subs) : 0.0f;
        y[(t0 + t) * ldy + r] = RowResult<W>(_mm512_reduce_add_ps(acc[r][t]), x, subs, t0 + t, offset);
      }
    }
  }
}

// kR decoded rows against every token: tiles of 4 tokens, then one at a time.
template <class W, int kR>
KILN_Q8_TARGET void RowsTokens(const DecodedRow* const* rows, const Q8Rows& x, int64_t subs, int64_t tokens, float* y,
                               int64_t ldy) {
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) Tile<W, kR, 4>(rows, x, subs, t, y, ldy);
  for (; t < tokens; ++t) Tile<W, kR, 1>(rows, x, subs, t, y, ldy);
}

// A few tokens (kT): each row decoded a group at a time as it is read,
// every token's step taken on the group while it is in registers.
template <class W, int kT>
KILN_Q8_TARGET void RowsInPlace(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t subs, const Q8Rows& x,
                                int64_t t0, float* y, int64_t ldy) {
  thread_local std::vector<float> adds;
  adds.resize(static_cast<size_t>(subs));
  const int64_t full = subs / 2;
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = rows + r * row_bytes;
    __m512 acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
    PairBlock group[kGroupPairs<W>];
    for (int64_t g = 0; g < full / kGroupPairs<W>; ++g) {
      DecodeGroup<W>(row, g, group, adds.data());
      for (int i = 0; i < kGroupPairs<W>; ++i) {
        const int64_t p = kGroupPairs<W> * g + i;
        const __m512 w_scale = LaneScales(group[i].mul);
        for (int t = 0; t < kT; ++t) {
          const PairX xt = LoadX<false>(x, subs, t0 + t, p);
          if constexpr (kSuperBlockUnits<W>) {
            if (i == 0) {
              const __m512 f = _mm512_set1_ps(x.rescale[(t0 + t) * (subs / 8) + g]);
              acc[t] = FirstPairStep<W>(group[i], w_scale, xt, acc[t], f);
              continue;
            }
          }
          acc[t] = PairStep<W>(group[i], w_scale, xt, acc[t]);
        }
      }
    }
    if constexpr (W::kSubs == 1) {
      if (subs % 2) {
        PairBlock w;
        GetPair<W, true>(row, full, &w, adds.data());
        const __m512 w_scale = LaneScales(w.mul);
        for (int t = 0; t < kT; ++t) acc[t] = PairStep<W>(w, w_scale, LoadX<true>(x, subs, t0 + t, full), acc[t]);
      }
    }
    for (int t = 0; t < kT; ++t) {
      const float offset = W::kHasAdd ? Offset(adds.data(), x.dsum + (t0 + t) * subs, subs) : 0.0f;
      y[(t0 + t) * ldy + r] = RowResult<W>(_mm512_reduce_add_ps(acc[t]), x, subs, t0 + t, offset);
    }
  }
}

template <class W>
KILN_Q8_TARGET void RowsDotQ8(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t k, const Q8Rows& x,
                              int64_t tokens, float* y, int64_t ldy) {
  const int64_t subs = k / 32;
  // Up to 4 tokens in place (a 2-token step cost 1.6x a 1-token one through
  // decoded rows, 1.2x in place: decoding rows ahead left memory idle while
  // the tiles ran); more in tiles over decoded rows (5 tokens: 59 ms in
  // them, 66 in place, Qwen2.5-Coder-1.5B at 2 threads).
  if (tokens <= 4) {
    int64_t t = 0;
    for (; t + 4 <= tokens; t += 4) RowsInPlace<W, 4>(rows, row_bytes, nrows, subs, x, t, y, ldy);
    switch (tokens - t) {
      case 3:
        RowsInPlace<W, 3>(rows, row_bytes, nrows, subs, x, t, y, ldy);
        break;
      case 2:
        RowsInPlace<W, 2>(rows, row_bytes, nrows, subs, x, t, y, ldy);
        break;
      case 1:
        RowsInPlace<W, 1>(rows, row_bytes, nrows, subs, x, t, y, ldy);
        break;
    }
    return;
  }
  thread_local DecodedRow decoded[4];
  const DecodedRow* tile[4] = {&decoded[0], &decoded[1], &decoded[2], &decoded[3]};
  int64_t r = 0;
  for (; r + 4 <= nrows; r += 4) {
    for (int i = 0; i < 4; ++i) Decode<W>(rows + (r + i) * row_bytes, subs, &decoded[i]);
    RowsTokens<W, 4>(tile, x, subs, tokens, y + r, ldy);
  }
  for (; r < nrows; ++r) {
    Decode<W>(rows + r * row_bytes, subs, &decoded[0]);
    RowsTokens<W, 1>(tile, x, subs, tokens, y + r, ldy);
  }
}

struct Avx512Family {
  template <class W>
  static RowDotQ8Fn Of() {
    return RowsDotQ8<W>;
  }
};

}  // namespace

RowDotQ8Fn Q8RowDotAvx512(GgmlType type) { return KernelForType<Avx512Family>(type); }

}  // namespace kiln::cpu
#endif
