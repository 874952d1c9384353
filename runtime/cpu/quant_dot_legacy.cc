// Row dots for ggml's 32-element block formats: q8_0, q4_0, q4_1, q5_0, q5_1
// (layouts in runtime/formats/quant.cc). The scalar path keeps the block's
// scale and min outside the sum: d * sum(q * x) (+ m * sum(x)). The AVX2 path
// decodes a block into four registers of f32 weights.

#include <cstdint>

#include "runtime/cpu/row_dot.h"
#include "runtime/util/half.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {
namespace {

float LoadF16(const uint8_t* p) { return F16ToF32(LoadLeU16(p)); }

// q8_0 (34 bytes): f16 d | int8 q[32]; w = d * q.
double BlockDotQ8_0(const uint8_t* b, const float* x) {
  double s = 0;
  for (int i = 0; i < 32; ++i) s += static_cast<double>(static_cast<int8_t>(b[2 + i])) * x[i];
  return LoadF16(b) * s;
}

// q4_0 (18 bytes): f16 d | qs[16]; byte j holds element j (low nibble) and
// element j + 16 (high nibble); w = d * (q - 8).
double BlockDotQ4_0(const uint8_t* b, const float* x) {
  const uint8_t* qs = b + 2;
  double s = 0;
  for (int j = 0; j < 16; ++j) {
    s += static_cast<double>((qs[j] & 0x0F) - 8) * x[j] +
         static_cast<double>((qs[j] >> 4) - 8) * x[j + 16];
  }
  return LoadF16(b) * s;
}

// q4_1 (20 bytes): f16 d | f16 m | qs[16] as q4_0; w = d * q + m.
double BlockDotQ4_1(const uint8_t* b, const float* x) {
  const uint8_t* qs = b + 4;
  double sq = 0, sx = 0;
  for (int j = 0; j < 16; ++j) {
    sq += static_cast<double>(qs[j] & 0x0F) * x[j] + static_cast<double>(qs[j] >> 4) * x[j + 16];
    sx += static_cast<double>(x[j]) + x[j + 16];
  }
  return LoadF16(b) * sq + LoadF16(b + 2) * sx;
}

// The 5-bit code of element i: its nibble (as q4_0) plus bit i of qh as bit 4.
int Q5Code(const uint8_t* qs, uint32_t qh, int i) {
  const int nibble = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
  return nibble | static_cast<int>((qh >> i) & 1) << 4;
}

// q5_0 (22 bytes): f16 d | qh[4] | qs[16]; w = d * (q - 16).
double BlockDotQ5_0(const uint8_t* b, const float* x) {
  const uint32_t qh = LoadLeU32(b + 2);
  double s = 0;
  for (int i = 0; i < 32; ++i) s += static_cast<double>(Q5Code(b + 6, qh, i) - 16) * x[i];
  return LoadF16(b) * s;
}

// q5_1 (24 bytes): f16 d | f16 m | qh[4] | qs[16]; w = d * q + m.
double BlockDotQ5_1(const uint8_t* b, const float* x) {
  const uint32_t qh = LoadLeU32(b + 4);
  double sq = 0, sx = 0;
  for (int i = 0; i < 32; ++i) {
    sq += static_cast<double>(Q5Code(b + 8, qh, i)) * x[i];
    sx += x[i];
  }
  return LoadF16(b) * sq + LoadF16(b + 2) * sx;
}

#if defined(__x86_64__)

struct Q8_0Block {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    const __m256 d = _mm256_set1_ps(avx2::LoadF16(b));
    for (int i = 0; i < 4; ++i) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * i));
      w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
  }
};

// The 32 4-bit codes of a q4_0/q4_1 block as eight-lane int32 vectors in
// element order: low nibbles of bytes 0-7, 8-15, then high nibbles.
KILN_AVX2 inline void Nibbles(const uint8_t* qs, __m256i* q) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
  q[0] = _mm256_cvtepu8_epi32(lo);
  q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
  q[2] = _mm256_cvtepu8_epi32(hi);
  q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

// Adds bit 4 to the codes from qh: vector i holds elements 8i..8i+7, whose
// fifth bits are bits 8i..8i+7 of qh.
KILN_AVX2 inline void AddFifthBits(uint32_t qh, __m256i* q) {
  const __m256i shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i one = _mm256_set1_epi32(1);
  for (int i = 0; i < 4; ++i) {
    const __m256i bits = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(qh >> (8 * i))), shifts), one);
    q[i] = _mm256_or_si256(q[i], _mm256_slli_epi32(bits, 4));
  }
}

// w = d * q + offset for the four code vectors.
KILN_AVX2 inline void Scale(const __m256i* q, float d, float offset, __m256* w) {
  const __m256 vd = _mm256_set1_ps(d), vo = _mm256_set1_ps(offset);
  for (int i = 0; i < 4; ++i) w[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[i]), vd, vo);
}

struct Q4_0Block {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    __m256i q[4];
    Nibbles(b + 2, q);
    const float d = avx2::LoadF16(b);
    Scale(q, d, -8.0f * d, w);
  }
};

struct Q4_1Block {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    __m256i q[4];
    Nibbles(b + 4, q);
    Scale(q, avx2::LoadF16(b), avx2::LoadF16(b + 2), w);
  }
};

struct Q5_0Block {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    __m256i q[4];
    Nibbles(b + 6, q);
    AddFifthBits(LoadLeU32(b + 2), q);
    const float d = avx2::LoadF16(b);
    Scale(q, d, -16.0f * d, w);
  }
};

struct Q5_1Block {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    __m256i q[4];
    Nibbles(b + 8, q);
    AddFifthBits(LoadLeU32(b + 4), q);
    Scale(q, avx2::LoadF16(b), avx2::LoadF16(b + 2), w);
  }
};

template <class Block, int kBlockBytes>
KILN_AVX2 void Avx2RowDot(const uint8_t* row, int64_t k, int64_t /*group*/, const float* x,
                          int64_t ldx, int64_t tokens, float* y, int64_t ldy) {
  avx2::RowDot<Block>(row, k / 32, kBlockBytes, 1, x, ldx, tokens, y, ldy);
}

#endif  // __x86_64__

}  // namespace

RowDotFn LegacyRowDot(GgmlType type, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx2) {
    switch (type) {
      case GgmlType::kQ8_0:
        return Avx2RowDot<Q8_0Block, 34>;
      case GgmlType::kQ4_0:
        return Avx2RowDot<Q4_0Block, 18>;
      case GgmlType::kQ4_1:
        return Avx2RowDot<Q4_1Block, 20>;
      case GgmlType::kQ5_0:
        return Avx2RowDot<Q5_0Block, 22>;
      case GgmlType::kQ5_1:
        return Avx2RowDot<Q5_1Block, 24>;
      default:
        return nullptr;
    }
  }
#endif
  switch (type) {
    case GgmlType::kQ8_0:
      return ScalarBlockRowDot<BlockDotQ8_0, 32, 34>;
    case GgmlType::kQ4_0:
      return ScalarBlockRowDot<BlockDotQ4_0, 32, 18>;
    case GgmlType::kQ4_1:
      return ScalarBlockRowDot<BlockDotQ4_1, 32, 20>;
    case GgmlType::kQ5_0:
      return ScalarBlockRowDot<BlockDotQ5_0, 32, 22>;
    case GgmlType::kQ5_1:
      return ScalarBlockRowDot<BlockDotQ5_1, 32, 24>;
    default:
      return nullptr;
  }
}

}  // namespace kiln::cpu
