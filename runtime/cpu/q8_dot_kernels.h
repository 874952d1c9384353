// The integer row-dot kernels of q8_dot.h, included by q8_dot.cc (AVX2) and
// q8_dot_vnni.cc (AVX2 with AVX-VNNI's vpdpbusd), each of which defines
// KILN_Q8_TARGET (the functions' target attribute) and IntegerSums first.
// Everything is in an anonymous namespace: each includer compiles its own
// copy for its own target, and no copy is shared between them. The weight
// types are in q8_dot_weights.h. Internal to runtime/cpu.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/q8_dot_weights.h"
#include "runtime/cpu/row_dot_avx2.h"

namespace kiln::cpu {
namespace {

// Where a legacy row's blocks come from. RowInPlace decodes them from the
// weight row as it goes, keeping each one's offset weight in `adds`;
// DecodedRow holds a row decoded once for every token of a prefill tile.
template <class W>
struct RowInPlace {
  static_assert(W::kSubs == 1, "a legacy block is one sub-block");
  const uint8_t* row;
  float* adds;  // [subs]
  KILN_Q8_TARGET void Get(int64_t j, SubBlock* sb, __m256i* u) const {
    W::Sub(row + j * W::kBytes, 0, sb);
    if (W::kHasAdd) adds[j] = sb->add;
    *u = W::kSigned ? _mm256_abs_epi8(sb->w) : sb->w;
  }
  const float* Adds() const { return adds; }
};

template <class W>
struct DecodedRow {
  std::vector<__m256i> w, u;  // per block: codes, what the multiply-add takes
  std::vector<float> mul, add;
  KILN_Q8_TARGET void Decode(const uint8_t* row, int64_t subs) {
    w.resize(subs);
    u.resize(subs);
    mul.resize(subs);
    add.resize(subs);
    const RowInPlace<W> in{row, add.data()};
    for (int64_t j = 0; j < subs; ++j) {
      SubBlock sb;
      in.Get(j, &sb, &u[j]);
      w[j] = sb.w;
      mul[j] = sb.mul;
    }
  }
  KILN_Q8_TARGET void Get(int64_t j, SubBlock* sb, __m256i* u_out) const {
    sb->w = w[j];
    *u_out = u[j];
    sb->mul = mul[j];
  }
  const float* Adds() const { return add.data(); }
};

// Where a k-quant row's sub-blocks come from, a super-block at a time:
// Begin(g) gives super-block g's d (and its offsets' weights to the adds),
// Get(j) sub-block j's codes, what the multiply-add takes and its int16
// scale lanes.
template <class W>
struct SuperBlockInPlace {
  KILN_Q8_TARGET SuperBlockInPlace(const uint8_t* r, float* a) : row(r), adds(a), table(_mm256_setzero_si256()) {}
  const uint8_t* row;
  float* adds;            // [subs]
  mutable __m256i table;  // the scales of the super-block begun last
  KILN_Q8_TARGET float Begin(int64_t g) const {
    float d;
    table = W::ScaleTable(row + g * W::kBytes, &d, adds + 8 * g);
    return d;
  }
  KILN_Q8_TARGET void Get(int64_t j, __m256i* w, __m256i* u, __m256i* scale) const {
    *w = W::Codes(row + (j / 8) * W::kBytes, static_cast<int>(j % 8));
    *u = W::kSigned ? _mm256_abs_epi8(*w) : *w;
    *scale = W::SubScale(table, static_cast<int>(j % 8));
  }
  const float* Adds() const { return adds; }
};

template <class W>
struct DecodedSuperBlocks {
  std::vector<__m256i> w, u, scale16;  // per sub-block (w, the signed codes, for the sign only: kSigned)
  std::vector<float> d, add;           // per super-block, per sub-block
  KILN_Q8_TARGET void Decode(const uint8_t* row, int64_t subs) {
    if (W::kSigned) w.resize(subs);
    u.resize(subs);
    scale16.resize(subs);
    d.resize(subs / 8);
    add.resize(subs);
    const SuperBlockInPlace<W> in{row, add.data()};
    __m256i unsigned_codes;  // the same as u: not kept
    for (int64_t g = 0; g < subs / 8; ++g) {
      d[g] = in.Begin(g);
      for (int64_t j = 8 * g; j < 8 * g + 8; ++j) {
        in.Get(j, W::kSigned ? &w[j] : &unsigned_codes, &u[j], &scale16[j]);
      }
    }
  }
  float Begin(int64_t g) const { return d[g]; }
  KILN_Q8_TARGET void Get(int64_t j, __m256i* w_out, __m256i* u_out, __m256i* scale) const {
    if (W::kSigned) *w_out = w[j];
    *u_out = u[j];
    *scale = scale16[j];
  }
  const float* Adds() const { return add.data(); }
};

// sum_j adds[j] * (the token's d S of block j): the offsets of weights with a
// minimum or zero point, summed after a row's products.
KILN_Q8_TARGET inline float OffsetOf(const float* a, const float* ds, int64_t subs) {
  __m256 o = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= subs; j += 8) o = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(ds + j), o);
  float offset = avx2::HorizontalSum(o);
  for (; j < subs; ++j) offset = std::fma(a[j], ds[j], offset);
  return offset;
}

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
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(IntegerSums(u, xs)), _mm256_mul_ps(mul, _mm256_set1_ps(x.d[xt])), acc[t]);
    }
  }
  for (int t = 0; t < kTile; ++t) {
    const float offset = W::kHasAdd ? OffsetOf(src.Adds(), x.dsum + (t0 + t) * subs, subs) : 0.0f;
    const float v = avx2::HorizontalSum(acc[t]);
    out[t] = v + offset;  // (a statement of its own: never contracted into an FMA)
  }
}

// Every token of x against the legacy row of `src`: y[t * ldy].
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

// The k-quants, whose activations have one scale a super-block: kR rows
// (src[r], written to y[t * ldy + r]) against kT tokens from t0. Each
// sub-block's byte products are weighted by its integer scale in the word
// multiply-add (where the legacy types multiply by ones) and summed as int32
// across the super-block, then converted and weighted by the weights' d
// once per super-block: 3 operations a sub-block, row and token where
// converting each sub-block took 4 (5 for q6_K). The float sums run in
// units of the activations' super-block scale (Q8Rows::unit): at a
// super-block's end acc * rescale + its d-weighted sum in one FMA, the unit
// applied once at the end. Every (row, token) takes the same operations in
// the same order whatever the tile, so a result never depends on it. The
// integer sums cannot overflow: a sub-block's lane is at most 2 x 2 x 31 x
// 127 x 63 (q5_K) or 2 x 2 x 32 x 127 x 128 (q6_K), eight of them far under
// 2^31.
template <class W, class Src, int kR, int kT>
KILN_Q8_TARGET void SuperBlockTile(const Src* const* src, int64_t k, const Q8Rows& x, int64_t t0, float* y,
                                   int64_t ldy) {
  const int64_t subs = k / 32, supers = subs / 8;
  __m256 acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < supers; ++g) {
    __m256 d[kR];
    for (int r = 0; r < kR; ++r) d[r] = _mm256_set1_ps(src[r]->Begin(g));
    __m256i isum[kR][kT];
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kT; ++t) isum[r][t] = _mm256_setzero_si256();
    }
    for (int64_t j = 8 * g; j < 8 * g + 8; ++j) {
      __m256i w[kR], u[kR], scale[kR];
      for (int r = 0; r < kR; ++r) src[r]->Get(j, &w[r], &u[r], &scale[r]);
      for (int t = 0; t < kT; ++t) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * k + 32 * j));
        for (int r = 0; r < kR; ++r) {
          const __m256i xs = W::kSigned ? _mm256_sign_epi8(xq, w[r]) : xq;
          isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], xs), scale[r]));
        }
      }
    }
    for (int t = 0; t < kT; ++t) {
      const __m256 f = _mm256_set1_ps(x.rescale[(t0 + t) * supers + g]);
      for (int r = 0; r < kR; ++r) {
        acc[r][t] = _mm256_fmadd_ps(acc[r][t], f, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[r][t]), d[r]));
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) {
      const float offset = W::kHasAdd ? OffsetOf(src[r]->Adds(), x.dsum + (t0 + t) * subs, subs) : 0.0f;
      const float v = avx2::HorizontalSum(acc[r][t]) * x.unit[(t0 + t) * supers + supers - 1];
      y[(t0 + t) * ldy + r] = v + offset;  // (a statement of its own: never contracted into an FMA)
    }
  }
}

// kR k-quant rows against every token: tiles of 4 tokens, then the rest.
template <class W, class Src, int kR>
KILN_Q8_TARGET void SuperBlockTokens(const Src* const* src, int64_t k, const Q8Rows& x, int64_t tokens, float* y,
                                     int64_t ldy) {
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) SuperBlockTile<W, Src, kR, 4>(src, k, x, t, y, ldy);
  switch (tokens - t) {
    case 3:
      SuperBlockTile<W, Src, kR, 3>(src, k, x, t, y, ldy);
      break;
    case 2:
      SuperBlockTile<W, Src, kR, 2>(src, k, x, t, y, ldy);
      break;
    case 1:
      SuperBlockTile<W, Src, kR, 1>(src, k, x, t, y, ldy);
      break;
  }
}

// Prefill tiles (8 tokens or more) decode rows once (the k-quants two at a
// time, each activation load serving both) and run every token over the
// decoded sub-blocks; decode walks the rows one after the other, decoding
// as it goes, the order the prefetchers follow (rows taken in pairs
// interleaved two weight streams: Qwen's decode 58.5 -> 28.4 tok/s).
template <class W>
KILN_Q8_TARGET void RowsDotQ8(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t k, const Q8Rows& x,
                              int64_t tokens, float* y, int64_t ldy) {
  const int64_t subs = k / 32;
  thread_local std::vector<float> adds;  // the offsets of the row in flight
  if constexpr (kSuperBlockUnits<W>) {
    if (tokens >= 8) {
      thread_local DecodedSuperBlocks<W> decoded[2];
      const DecodedSuperBlocks<W>* pair[2] = {&decoded[0], &decoded[1]};
      int64_t r = 0;
      for (; r + 2 <= nrows; r += 2) {
        for (int i = 0; i < 2; ++i) decoded[i].Decode(rows + (r + i) * row_bytes, subs);
        SuperBlockTokens<W, DecodedSuperBlocks<W>, 2>(pair, k, x, tokens, y + r, ldy);
      }
      if (r < nrows) {
        decoded[0].Decode(rows + r * row_bytes, subs);
        SuperBlockTokens<W, DecodedSuperBlocks<W>, 1>(pair, k, x, tokens, y + r, ldy);
      }
      return;
    }
    adds.resize(static_cast<size_t>(subs));
    for (int64_t r = 0; r < nrows; ++r) {
      const SuperBlockInPlace<W> in(rows + r * row_bytes, adds.data());
      const SuperBlockInPlace<W>* one[1] = {&in};
      SuperBlockTokens<W, SuperBlockInPlace<W>, 1>(one, k, x, tokens, y + r, ldy);
    }
  } else {
    if (tokens >= 8) {
      thread_local DecodedRow<W> decoded;
      for (int64_t r = 0; r < nrows; ++r) {
        decoded.Decode(rows + r * row_bytes, subs);
        TokensQ8<W>(decoded, k, x, tokens, y + r, ldy);
      }
      return;
    }
    if (W::kHasAdd) adds.resize(static_cast<size_t>(subs));
    for (int64_t r = 0; r < nrows; ++r) {
      TokensQ8<W>(RowInPlace<W>{rows + r * row_bytes, adds.data()}, k, x, tokens, y + r, ldy);
    }
  }
}

// The kernel of each type with an integer path, else nullptr.
struct Avx2Family {
  template <class W>
  static RowDotQ8Fn Of() {
    return RowsDotQ8<W>;
  }
};

RowDotQ8Fn KernelOf(GgmlType type) { return KernelForType<Avx2Family>(type); }

}  // namespace
}  // namespace kiln::cpu
