#include "runtime/cpu/peak.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu/cpu_isa.h"

namespace kiln::cpu {

#if defined(__x86_64__)
namespace {

// Twelve chains: more than an FMA's latency times the FMA ports of current
// cores (4 x 2, 5 x 2), so the loop is bound by issue, not by a chain.
constexpr int kChains = 12;

// The chains' sum, so the compiler keeps every one.
volatile int32_t g_int_sink;
volatile float g_float_sink;

__attribute__((target("avx2,fma"))) double F32Loop(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  g_float_sink = _mm256_cvtss_f32(s);
  return 2.0 * 8 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx2,avx512f,avx512bw,avx512vnni"))) double Int8Loop512(int64_t iterations) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i u = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], u, x);
  }
  __m512i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, acc[c]);
  g_int_sink = _mm512_reduce_add_epi32(s);
  return 2.0 * 64 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx2,avxvnni"))) double Int8LoopVnni(int64_t iterations) {
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(c);
  const __m256i u = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_dpbusd_avx_epi32(acc[c], u, x);
  }
  __m256i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_epi32(s, acc[c]);
  g_int_sink = _mm256_extract_epi32(s, 0);
  return 2.0 * 32 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx2"))) double Int8LoopAvx2(int64_t iterations) {
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(c);
  const __m256i u = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) {
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones));
    }
  }
  __m256i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_epi32(s, acc[c]);
  g_int_sink = _mm256_extract_epi32(s, 0);
  return 2.0 * 32 * kChains * static_cast<double>(iterations);
}

}  // namespace

double RunF32Peak(int64_t iterations) {
  return DetectCpuIsa() == CpuIsa::kAvx2 ? F32Loop(iterations) : 0.0;
}

double RunInt8Peak(Q8Kernel kernel, int64_t iterations) {
  if (Q8RowDot(GgmlType::kQ8_0, kernel) == nullptr) return 0.0;  // this CPU lacks the kernel
  switch (kernel) {
    case Q8Kernel::kAvx2:
      return Int8LoopAvx2(iterations);
    case Q8Kernel::kAvxVnni:
      return Int8LoopVnni(iterations);
    case Q8Kernel::kAvx512Vnni:
      return Int8Loop512(iterations);
  }
  return 0.0;
}

#else

double RunF32Peak(int64_t) { return 0.0; }
double RunInt8Peak(Q8Kernel, int64_t) { return 0.0; }

#endif

}  // namespace kiln::cpu
