// Row dots for the plain float storages: f32, f16, bf16. The scalar path sums
// exact products in double; the AVX2 one converts eight elements per
// instruction (F16C for f16, a shift for bf16) and handles the last k % 32
// elements of a row with scalar code.

#include <cstdint>
#include <cstring>

#include "runtime/cpu/row_dot.h"
#include "runtime/util/half.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {
namespace {

float LoadF32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
float LoadF16(const uint8_t* p) { return F16ToF32(LoadLeU16(p)); }
float LoadBF16(const uint8_t* p) { return BF16ToF32(LoadLeU16(p)); }

template <float (*Load)(const uint8_t*), int kBytes>
void ScalarRowDot(const uint8_t* row, int64_t k, int64_t /*group*/, const float* x, int64_t ldx,
                  int64_t tokens, float* y, int64_t ldy) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * ldx;
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(Load(row + i * kBytes)) * xt[i];
    y[t * ldy] = static_cast<float>(acc);
  }
}

#if defined(__x86_64__)

// 32 consecutive elements per chunk.
struct F32Chunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    for (int i = 0; i < 4; ++i) w[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(b) + 8 * i);
  }
};

struct F16Chunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    for (int i = 0; i < 4; ++i) {
      w[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * i)));
    }
  }
};

// bf16 is the top half of an f32.
struct BF16Chunk {
  static constexpr int kElems = 32;
  KILN_AVX2 static void Decode(const uint8_t* b, int, __m256* w) {
    for (int i = 0; i < 4; ++i) {
      const __m256i h =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * i)));
      w[i] = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
  }
};

template <class Chunk, float (*Load)(const uint8_t*), int kBytes>
KILN_AVX2 void Avx2RowDot(const uint8_t* row, int64_t k, int64_t /*group*/, const float* x,
                          int64_t ldx, int64_t tokens, float* y, int64_t ldy) {
  const int64_t chunks = k / Chunk::kElems;
  avx2::RowDot<Chunk>(row, chunks, Chunk::kElems * kBytes, 1, x, ldx, tokens, y, ldy);
  const int64_t done = chunks * Chunk::kElems;
  if (done == k) return;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * ldx;
    float tail = 0;
    for (int64_t i = done; i < k; ++i) tail += Load(row + i * kBytes) * xt[i];
    y[t * ldy] += tail;
  }
}

#endif  // __x86_64__

}  // namespace

RowDotFn FloatRowDot(GgmlType type, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx2) {
    switch (type) {
      case GgmlType::kF32:
        return Avx2RowDot<F32Chunk, LoadF32, 4>;
      case GgmlType::kF16:
        return Avx2RowDot<F16Chunk, LoadF16, 2>;
      case GgmlType::kBF16:
        return Avx2RowDot<BF16Chunk, LoadBF16, 2>;
      default:
        return nullptr;
    }
  }
#endif
  switch (type) {
    case GgmlType::kF32:
      return ScalarRowDot<LoadF32, 4>;
    case GgmlType::kF16:
      return ScalarRowDot<LoadF16, 2>;
    case GgmlType::kBF16:
      return ScalarRowDot<LoadBF16, 2>;
    default:
      return nullptr;
  }
}

}  // namespace kiln::cpu
