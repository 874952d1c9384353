// Row dots for kiln's group-wise int4 / int2 (layout in
// runtime/formats/quant.h): per group f16 d | f16 m | codes, w = d * q + m.
// The scalar path sums d * sum(q * x) + m * sum(x) per group; the AVX2 path
// decodes eight elements per register (one variable shift spreads a 32-bit
// word of int4 codes, or a 16-bit word of int2 codes, over eight lanes),
// which works for any group size that is a multiple of 8.

#include <cstdint>

#include "runtime/cpu/row_dot.h"
#include "runtime/util/half.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {
namespace {

template <int kBits>
void ScalarRowDot(const uint8_t* row, int64_t k, int64_t group, const float* x, int64_t ldx,
                  int64_t tokens, float* y, int64_t ldy) {
  constexpr int kPerByte = 8 / kBits;
  constexpr int kMask = (1 << kBits) - 1;
  const int64_t group_bytes = group / kPerByte + 4;
  const int64_t groups = k / group;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * ldx;
    double acc = 0;
    for (int64_t g = 0; g < groups; ++g, xt += group) {
      const uint8_t* b = row + g * group_bytes;
      const uint8_t* codes = b + 4;
      double sq = 0, sx = 0;
      for (int64_t j = 0; j < group; ++j) {
        const int q = (codes[j / kPerByte] >> (kBits * (j % kPerByte))) & kMask;
        sq += static_cast<double>(q) * xt[j];
        sx += xt[j];
      }
      acc += static_cast<double>(F16ToF32(LoadLeU16(b))) * sq + F16ToF32(LoadLeU16(b + 2)) * sx;
    }
    y[t * ldy] = static_cast<float>(acc);
  }
}

#if defined(__x86_64__)

// Eight elements of int4 from the 32-bit word holding their nibbles
// (element j at bits 4j), scaled: d * q + m.
KILN_AVX2 inline __m256 Int4x8(uint32_t word, __m256 d, __m256 m) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i code = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts), _mm256_set1_epi32(15));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(code), d, m);
}

// Eight elements of int2 from the 16-bit word holding their codes (element j
// at bits 2j).
KILN_AVX2 inline __m256 Int2x8(uint32_t word, __m256 d, __m256 m) {
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i code = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts), _mm256_set1_epi32(3));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(code), d, m);
}

// Chunk `sub` of a group: kElems elements (8 for any group size, 32 when the
// group is a multiple of 32, which reads d and m once per 32 elements and
// lets the FMA chain alternate registers).
template <int kElemsPerChunk>
struct Int4Chunk {
  static constexpr int kElems = kElemsPerChunk;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    const __m256 d = _mm256_set1_ps(avx2::LoadF16(b)), m = _mm256_set1_ps(avx2::LoadF16(b + 2));
    const uint8_t* codes = b + 4 + sub * (kElems / 2);
    for (int i = 0; i < kElems / 8; ++i) w[i] = Int4x8(LoadLeU32(codes + 4 * i), d, m);
  }
};

template <int kElemsPerChunk>
struct Int2Chunk {
  static constexpr int kElems = kElemsPerChunk;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    const __m256 d = _mm256_set1_ps(avx2::LoadF16(b)), m = _mm256_set1_ps(avx2::LoadF16(b + 2));
    const uint8_t* codes = b + 4 + sub * (kElems / 4);
    for (int i = 0; i < kElems / 8; ++i) w[i] = Int2x8(LoadLeU16(codes + 2 * i), d, m);
  }
};

template <template <int> class Chunk, int kBits>
KILN_AVX2 void Avx2RowDot(const uint8_t* row, int64_t k, int64_t group, const float* x, int64_t ldx,
                          int64_t tokens, float* y, int64_t ldy) {
  const int64_t group_bytes = group * kBits / 8 + 4;
  if (group % 32 == 0) {
    avx2::RowDot<Chunk<32>>(row, k / group, group_bytes, static_cast<int>(group / 32), x, ldx,
                            tokens, y, ldy);
  } else {
    avx2::RowDot<Chunk<8>>(row, k / group, group_bytes, static_cast<int>(group / 8), x, ldx, tokens,
                           y, ldy);
  }
}

#endif  // __x86_64__

}  // namespace

RowDotFn GroupedRowDot(GroupedKind kind, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx2) {
    return kind == GroupedKind::kInt4 ? Avx2RowDot<Int4Chunk, 4> : Avx2RowDot<Int2Chunk, 2>;
  }
#endif
  return kind == GroupedKind::kInt4 ? ScalarRowDot<4> : ScalarRowDot<2>;
}

}  // namespace kiln::cpu
