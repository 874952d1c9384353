// The AVX2 row-dot loop shared by the quant_dot_* files (internal to
// runtime/cpu; include only under __x86_64__). A family supplies a decoder
// that turns one chunk of a block into f32 weights in registers; this loop
// multiplies them into up to four tokens at once, so that a chunk decoded
// once serves several tokens of a prefill.
//
// A decoder is a struct with
//   static constexpr int kElems;  // 8 or 32: elements per Decode call
//   static void Decode(const uint8_t* block, int sub, __m256* w);
// writing elements [sub * kElems, (sub + 1) * kElems) of the block starting
// at `block` into w[0 .. kElems / 8), eight consecutive elements per register.
// Every function here carries the target attribute, so nothing AVX2 is
// reached on a CPU without it unless the caller picked the AVX2 kernel.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kiln::cpu::avx2 {

KILN_AVX2 inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

KILN_AVX2 inline float HorizontalSum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Eight bytes at p, zero-extended to eight int32 lanes.
KILN_AVX2 inline __m256i LoadU8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Dot products of one row with kTile consecutive tokens of x. Each token has
// its own two accumulators (alternating registers of a chunk, to halve the
// FMA dependency chain), so a token's sum is computed by the same operations
// in the same order whatever kTile is.
template <class Decoder, int kTile>
KILN_AVX2 void DotTile(const uint8_t* row, int64_t blocks, int64_t block_bytes, int subs,
                       const float* x, int64_t ldx, float* sums) {
  constexpr int kVecs = Decoder::kElems / 8;
  __m256 acc[kTile][2];
  for (int t = 0; t < kTile; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  const float* xc = x;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * block_bytes;
    for (int s = 0; s < subs; ++s, xc += Decoder::kElems) {
      __m256 w[kVecs];
      Decoder::Decode(block, s, w);
      for (int t = 0; t < kTile; ++t) {
        for (int v = 0; v < kVecs; ++v) {
          acc[t][v & 1] =
              _mm256_fmadd_ps(w[v], _mm256_loadu_ps(xc + t * ldx + 8 * v), acc[t][v & 1]);
        }
      }
    }
  }
  for (int t = 0; t < kTile; ++t) sums[t] = HorizontalSum(_mm256_add_ps(acc[t][0], acc[t][1]));
}

// A row of `blocks` blocks of `block_bytes` bytes, each decoded in `subs`
// chunks, against `tokens` rows of x; results to y[t * ldy].
template <class Decoder>
KILN_AVX2 void RowDot(const uint8_t* row, int64_t blocks, int64_t block_bytes, int subs,
                      const float* x, int64_t ldx, int64_t tokens, float* y, int64_t ldy) {
  float sums[4];
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) {
    DotTile<Decoder, 4>(row, blocks, block_bytes, subs, x + t * ldx, ldx, sums);
    for (int i = 0; i < 4; ++i) y[(t + i) * ldy] = sums[i];
  }
  const int rest = static_cast<int>(tokens - t);
  const float* xt = x + t * ldx;
  switch (rest) {
    case 3:
      DotTile<Decoder, 3>(row, blocks, block_bytes, subs, xt, ldx, sums);
      break;
    case 2:
      DotTile<Decoder, 2>(row, blocks, block_bytes, subs, xt, ldx, sums);
      break;
    case 1:
      DotTile<Decoder, 1>(row, blocks, block_bytes, subs, xt, ldx, sums);
      break;
    default:
      return;
  }
  for (int i = 0; i < rest; ++i) y[(t + i) * ldy] = sums[i];
}

}  // namespace kiln::cpu::avx2
