// Row dots for ggml's k-quants: q2_K, q3_K, q4_K, q5_K, q6_K (256-element
// super-blocks; layouts in runtime/formats/quant.cc). The scalar path walks a
// super-block the way ggml's dequantize_row_* does and keeps each
// sub-block's scale and min outside the sum. The AVX2 path decodes 32
// elements (one q4_K/q5_K sub-block, two of q2_K/q3_K/q6_K) per step.

#include <cstdint>

#include "runtime/cpu/row_dot.h"
#include "runtime/formats/quant.h"
#include "runtime/util/half.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {
namespace {

float LoadF16(const uint8_t* p) { return F16ToF32(LoadLeU16(p)); }

// q2_K (84 bytes): scales[16] | qs[64] | f16 d | f16 dmin. Two halves of 128;
// in each, four 2-bit planes of the half's 32 qs bytes, each plane two
// sub-blocks of 16; sub-block s: w = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4).
double BlockDotQ2_K(const uint8_t* b, const float* x) {
  const float d = LoadF16(b + 80), dmin = LoadF16(b + 82);
  double acc = 0;
  int s = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b + 16 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++s, x += 16) {
        double sq = 0, sx = 0;
        for (int l = 0; l < 16; ++l) {
          sq += static_cast<double>((q[16 * part + l] >> shift) & 3) * x[l];
          sx += x[l];
        }
        acc += d * static_cast<double>(b[s] & 15) * sq - dmin * static_cast<double>(b[s] >> 4) * sx;
      }
    }
  }
  return acc;
}

// The signed 6-bit scale of q3_K sub-block s: low 4 bits in scales[s] (s < 8)
// or the high nibble of scales[s - 8], top 2 bits at bit 2 * (s / 4) of
// scales[8 + s % 4]; stored with a +32 bias.
int Q3Scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// q3_K (110 bytes): hmask[32] | qs[64] | scales[12] | f16 d. Low 2 bits as
// q2_K; the third bit of the element at plane p of half h is bit 4h + p of
// hmask[l]; a clear bit subtracts 4. w = d * scale * q.
double BlockDotQ3_K(const uint8_t* b, const float* x) {
  const uint8_t* hmask = b;
  const float d = LoadF16(b + 108);
  double acc = 0;
  int s = 0;
  int bit = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b + 32 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2, ++bit) {
      for (int part = 0; part < 2; ++part, ++s, x += 16) {
        double sq = 0;
        for (int l = 0; l < 16; ++l) {
          const int low = (q[16 * part + l] >> shift) & 3;
          const int high = (hmask[16 * part + l] >> bit) & 1;
          sq += static_cast<double>(low - (high ? 0 : 4)) * x[l];
        }
        acc += d * static_cast<double>(Q3Scale(b + 96, s)) * sq;
      }
    }
  }
  return acc;
}

// q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128]. Four chunks of
// 64: the low nibbles of the chunk's 32 bytes (sub-block 2c), then the high
// nibbles (2c + 1). w = d * scale * q - dmin * min.
double BlockDotQ4_K(const uint8_t* b, const float* x) {
  const float d = LoadF16(b), dmin = LoadF16(b + 2);
  double acc = 0;
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b + 16 + 32 * c;
    for (int nib = 0; nib < 2; ++nib, x += 32) {
      int sc, m;
      GetScaleMinK4(b + 4, 2 * c + nib, &sc, &m);
      double sq = 0, sx = 0;
      for (int l = 0; l < 32; ++l) {
        sq += static_cast<double>((q[l] >> (4 * nib)) & 0x0F) * x[l];
        sx += x[l];
      }
      acc += d * static_cast<double>(sc) * sq - dmin * static_cast<double>(m) * sx;
    }
  }
  return acc;
}

// q5_K (176 bytes): f16 d | f16 dmin | scales[12] | qh[32] | qs[128]. As q4_K
// with a fifth bit: bit s of qh[l] for element l of sub-block s.
double BlockDotQ5_K(const uint8_t* b, const float* x) {
  const float d = LoadF16(b), dmin = LoadF16(b + 2);
  const uint8_t* qh = b + 16;
  double acc = 0;
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b + 48 + 32 * c;
    for (int nib = 0; nib < 2; ++nib, x += 32) {
      const int s = 2 * c + nib;
      int sc, m;
      GetScaleMinK4(b + 4, s, &sc, &m);
      double sq = 0, sx = 0;
      for (int l = 0; l < 32; ++l) {
        const int code = ((q[l] >> (4 * nib)) & 0x0F) | (((qh[l] >> s) & 1) << 4);
        sq += static_cast<double>(code) * x[l];
        sx += x[l];
      }
      acc += d * static_cast<double>(sc) * sq - dmin * static_cast<double>(m) * sx;
    }
  }
  return acc;
}

// q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d. Two halves of
// 128 (ql += 64, qh += 32, scales += 8); within a half, element l + 32k takes
// nibble k / 2 of ql[l + 32 (k % 2)] and bits 2k..2k+1 of qh[l], scale
// 2k + l / 16. w = d * scale * (q - 32).
double BlockDotQ6_K(const uint8_t* b, const float* x) {
  const float d = LoadF16(b + 208);
  double acc = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    for (int k = 0; k < 4; ++k) {
      for (int part = 0; part < 2; ++part, x += 16) {
        double sq = 0;
        for (int i = 0; i < 16; ++i) {
          const int l = 16 * part + i;
          const int low = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 0x0F;
          const int high = (qh[l] >> (2 * k)) & 3;
          sq += static_cast<double>((low | (high << 4)) - 32) * x[i];
        }
        acc += d * static_cast<double>(sc[2 * k + part]) * sq;
      }
    }
  }
  return acc;
}

#if defined(__x86_64__)

KILN_AVX2 inline __m256i ShiftRight(__m256i v, int bits) {
  return _mm256_srl_epi32(v, _mm_cvtsi32_si128(bits));
}

// Chunk `sub` (0..7) of q2_K/q3_K/q6_K is elements 32 sub .. 32 sub + 31:
// plane sub % 4 of half sub / 4, and sub-blocks 2 sub (vectors 0, 1) and
// 2 sub + 1 (vectors 2, 3).

struct Q2_KChunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    const float d = avx2::LoadF16(b + 80), dmin = avx2::LoadF16(b + 82);
    const uint8_t* q = b + 16 + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    const __m256i three = _mm256_set1_epi32(3);
    for (int i = 0; i < 4; ++i) {
      const uint8_t sc = b[2 * sub + i / 2];
      const __m256i code = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(q + 8 * i), shift), three);
      w[i] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(d * static_cast<float>(sc & 15)),
                          _mm256_set1_ps(-dmin * static_cast<float>(sc >> 4)));
    }
  }
};

struct Q3_KChunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    const float d = avx2::LoadF16(b + 108);
    const uint8_t* q = b + 32 + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    const __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1),
                  four = _mm256_set1_epi32(4);
    for (int i = 0; i < 4; ++i) {
      const __m256i low = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(q + 8 * i), shift), three);
      const __m256i high = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(b + 8 * i), sub), one);
      const __m256i code = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 2)), four);
      const float scale = d * static_cast<float>(Q3Scale(b + 96, 2 * sub + i / 2));
      w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(scale));
    }
  }
};

// q4_K/q5_K chunk `sub` is sub-block `sub`: nibble sub % 2 of qs[32 (sub / 2) + l].
struct Q4_KChunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    int sc, m;
    GetScaleMinK4(b + 4, sub, &sc, &m);
    const __m256 scale = _mm256_set1_ps(avx2::LoadF16(b) * static_cast<float>(sc));
    const __m256 offset = _mm256_set1_ps(-avx2::LoadF16(b + 2) * static_cast<float>(m));
    const uint8_t* q = b + 16 + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    const __m256i mask = _mm256_set1_epi32(0x0F);
    for (int i = 0; i < 4; ++i) {
      const __m256i code = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(q + 8 * i), shift), mask);
      w[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(code), scale, offset);
    }
  }
};

struct Q5_KChunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    int sc, m;
    GetScaleMinK4(b + 4, sub, &sc, &m);
    const __m256 scale = _mm256_set1_ps(avx2::LoadF16(b) * static_cast<float>(sc));
    const __m256 offset = _mm256_set1_ps(-avx2::LoadF16(b + 2) * static_cast<float>(m));
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + 48 + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    const __m256i mask = _mm256_set1_epi32(0x0F), one = _mm256_set1_epi32(1);
    for (int i = 0; i < 4; ++i) {
      const __m256i low = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(q + 8 * i), shift), mask);
      const __m256i high = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(qh + 8 * i), sub), one);
      const __m256i code = _mm256_or_si256(low, _mm256_slli_epi32(high, 4));
      w[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(code), scale, offset);
    }
  }
};

struct Q6_KChunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int sub, __m256* w) {
    const float d = avx2::LoadF16(b + 208);
    const int half = sub / 4, k = sub % 4;
    const uint8_t* ql = b + 64 * half + 32 * (k % 2);
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const __m256i mask = _mm256_set1_epi32(0x0F), three = _mm256_set1_epi32(3),
                  bias = _mm256_set1_epi32(32);
    for (int i = 0; i < 4; ++i) {
      const __m256i low =
          _mm256_and_si256(ShiftRight(avx2::LoadU8x8(ql + 8 * i), 4 * (k / 2)), mask);
      const __m256i high = _mm256_and_si256(ShiftRight(avx2::LoadU8x8(qh + 8 * i), 2 * k), three);
      const __m256i code = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), bias);
      const float scale = d * static_cast<float>(sc[2 * sub + i / 2]);
      w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(scale));
    }
  }
};

template <class Chunk, int kBlockBytes>
KILN_AVX2 void Avx2RowDot(const uint8_t* row, int64_t k, int64_t /*group*/, const float* x,
                          int64_t ldx, int64_t tokens, float* y, int64_t ldy) {
  avx2::RowDot<Chunk>(row, k / 256, kBlockBytes, 256 / Chunk::kElems, x, ldx, tokens, y, ldy);
}

#endif  // __x86_64__

}  // namespace

RowDotFn KQuantRowDot(GgmlType type, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx2) {
    switch (type) {
      case GgmlType::kQ2_K:
        return Avx2RowDot<Q2_KChunk, 84>;
      case GgmlType::kQ3_K:
        return Avx2RowDot<Q3_KChunk, 110>;
      case GgmlType::kQ4_K:
        return Avx2RowDot<Q4_KChunk, 144>;
      case GgmlType::kQ5_K:
        return Avx2RowDot<Q5_KChunk, 176>;
      case GgmlType::kQ6_K:
        return Avx2RowDot<Q6_KChunk, 210>;
      default:
        return nullptr;
    }
  }
#endif
  switch (type) {
    case GgmlType::kQ2_K:
      return ScalarBlockRowDot<BlockDotQ2_K, 256, 84>;
    case GgmlType::kQ3_K:
      return ScalarBlockRowDot<BlockDotQ3_K, 256, 110>;
    case GgmlType::kQ4_K:
      return ScalarBlockRowDot<BlockDotQ4_K, 256, 144>;
    case GgmlType::kQ5_K:
      return ScalarBlockRowDot<BlockDotQ5_K, 256, 176>;
    case GgmlType::kQ6_K:
      return ScalarBlockRowDot<BlockDotQ6_K, 256, 210>;
    default:
      return nullptr;
  }
}

}  // namespace kiln::cpu
