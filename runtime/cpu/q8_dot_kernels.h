// The integer row-dot kernels of q8_dot.h, included by q8_dot.cc (AVX2) and
// q8_dot_vnni.cc (AVX2 with AVX-VNNI's vpdpbusd), each of which defines
// KILN_Q8_TARGET (the functions' target attribute) and IntegerSums first.
// Everything is in an anonymous namespace: each includer compiles its own
// copy for its own target, and no copy is shared between them. The weight
// types are in q8_dot_weights.h; q6_K's two 16-element scales weight the
// pair sums as int16 here. Internal to runtime/cpu.
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

// Where a row's sub-blocks come from. RowInPlace decodes them from the
// weight row as it goes, keeping each one's offset weight in `adds`;
// DecodedRow holds a row decoded once for every token of a prefill tile.
template <class W>
struct RowInPlace {
  const uint8_t* row;
  float* adds;  // [subs]
  mutable float block_mul[8] = {};  // kBlockScales: the super-block's, unpacked at its first sub-block
  // Sub-blocks are taken in order, j = 0, 1, ...
  KILN_Q8_TARGET void Get(int64_t j, SubBlock* sb, __m256i* u) const {
    const uint8_t* b = row + (j / W::kSubs) * W::kBytes;
    const int s = static_cast<int>(j % W::kSubs);
    if constexpr (W::kBlockScales) {
      if (s == 0) BlockScalesK4(b, block_mul, adds + j);
      sb->w = W::Codes(b, s);
      sb->mul = block_mul[s];
    } else {
      W::Sub(b, s, sb);
      if (W::kHasAdd) adds[j] = sb->add;
    }
    *u = W::kSigned ? _mm256_abs_epi8(sb->w) : sb->w;
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
// The k-quants' sums run in units of their activations' super-block scale
// (kSuperBlockUnits), a super-block's first sub-block taking acc * rescale +
// its scaled sums in one FMA, so that no step multiplies the two scales (as
// the AVX-512 kernels; Qwen2.5-Coder-1.5B prefill 64 on this family +17-20%).
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
      if constexpr (kSuperBlockUnits<W>) {
        if (j % 8 == 0) {
          const __m256 f = _mm256_set1_ps(x.rescale[(t0 + t) * (subs / 8) + j / 8]);
          acc[t] = _mm256_fmadd_ps(acc[t], f, _mm256_mul_ps(_mm256_cvtepi32_ps(p32), mul));
        } else {
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), mul, acc[t]);
        }
      } else {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_mul_ps(mul, _mm256_set1_ps(x.d[xt])), acc[t]);
      }
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
    float v = avx2::HorizontalSum(acc[t]);
    if constexpr (kSuperBlockUnits<W>) v = v * x.unit[(t0 + t) * (subs / 8) + subs / 8 - 1];
    out[t] = v + offset;  // (a statement of its own: never contracted into an FMA)
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
struct Avx2Family {
  template <class W>
  static RowDotQ8Fn Of() {
    return RowsDotQ8<W>;
  }
};

RowDotQ8Fn KernelOf(GgmlType type) { return KernelForType<Avx2Family>(type); }

}  // namespace
}  // namespace kiln::cpu
