// Integer row dots against int8 activations (q8_dot.h): the quantiser, the
// AVX2 kernels (q8_dot_kernels.h), and the choice among them, AVX-VNNI's
// (q8_dot_vnni.cc; the same results: neither saturates) and AVX-512's
// (q8_dot_avx512.cc).

#include "runtime/cpu/q8_dot.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/cpu/cpu_isa.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"

#define KILN_Q8_TARGET KILN_AVX2

namespace kiln::cpu {
namespace {

// The 32-element integer dot in eight int32 lanes: byte products added in
// pairs (int16, no saturation for codes under 128 times 127) then in fours.
KILN_AVX2 inline __m256i IntegerSums(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

}  // namespace
}  // namespace kiln::cpu

#include "runtime/cpu/q8_dot_kernels.h"
#endif

namespace kiln::cpu {

#if defined(__x86_64__)
namespace {

// max|x| over 32 elements.
KILN_AVX2 float BlockMax(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m8 = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
  for (int i = 1; i < 4; ++i) m8 = _mm256_max_ps(m8, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// One block of 32 against its group's largest magnitude amax: d = amax /
// 127, codes rounded to nearest even (the MXCSR default), stored in element
// order.
KILN_AVX2 void QuantizeBlock(const float* x, float amax, int8_t* q, float* d, float* dsum) {
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  *d = amax / 127.0f;
  const __m256 inv = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i c[4];
  for (int i = 0; i < 4; ++i) c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
  const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  *dsum = *d * static_cast<float>(_mm_cvtsi128_si32(s4));
  // packs interleave the 128-bit lanes; the permute puts the dwords back in order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

KILN_AVX2 void QuantizeRows(const float* x, int64_t tokens, int64_t k, int8_t* q, float* d, float* dsum) {
  const int64_t blocks = tokens * (k / 32);
  for (int64_t b = 0; b < blocks; ++b) QuantizeBlock(x + 32 * b, BlockMax(x + 32 * b), q + 32 * b, d + b, dsum + b);
}

// Groups of 256 (eight blocks, one scale), with their units and rescale factors.
KILN_AVX2 void QuantizeSuperBlocks(const float* x, int64_t tokens, int64_t k, int8_t* q, float* d, float* dsum,
                                   float* unit, float* rescale) {
  const int64_t supers = k / 256;
  for (int64_t t = 0; t < tokens; ++t) {
    float u = 1.0f;
    for (int64_t s = 0; s < supers; ++s) {
      const int64_t e = t * k + 256 * s, b = e / 32;
      float amax = 0.0f;
      for (int i = 0; i < 8; ++i) amax = std::max(amax, BlockMax(x + e + 32 * i));
      for (int i = 0; i < 8; ++i) QuantizeBlock(x + e + 32 * i, amax, q + e + 32 * i, d + b + i, dsum + b + i);
      const float before = u;
      if (d[b] > 0.0f) u = d[b];
      unit[t * supers + s] = u;
      rescale[t * supers + s] = s == 0 ? 1.0f : before / u;
    }
  }
}

}  // namespace

RowDotQ8Fn Q8RowDotVnni(GgmlType type);    // q8_dot_vnni.cc
RowDotQ8Fn Q8RowDotAvx512(GgmlType type);  // q8_dot_avx512.cc

void QuantizeQ8(const float* x, int64_t tokens, int64_t k, int group, int8_t* q, float* d, float* dsum, float* unit,
                float* rescale) {
  if (group == 256) {
    QuantizeSuperBlocks(x, tokens, k, q, d, dsum, unit, rescale);
  } else {
    QuantizeRows(x, tokens, k, q, d, dsum);
  }
}

namespace {

bool HasKernel(Q8Kernel kernel) {
  if (DetectCpuIsa() != CpuIsa::kAvx2) return false;
  switch (kernel) {
    case Q8Kernel::kAvx2:
      return true;
    case Q8Kernel::kAvxVnni:
      return __builtin_cpu_supports("avxvnni");
    case Q8Kernel::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

}  // namespace

namespace {

// The fastest kernel, or the one KILN_CPU_INT8_KERNEL names (avx2, avx-vnni,
// avx512-vnni) where this CPU has it: how one machine measures the kernels
// of CPUs without its wider instructions.
Q8Kernel ChooseQ8Kernel() {
  const Q8Kernel best = HasKernel(Q8Kernel::kAvx512Vnni) ? Q8Kernel::kAvx512Vnni
                        : HasKernel(Q8Kernel::kAvxVnni)  ? Q8Kernel::kAvxVnni
                                                         : Q8Kernel::kAvx2;
  const char* named = std::getenv("KILN_CPU_INT8_KERNEL");
  if (named == nullptr || *named == '\0') return best;
  for (const Q8Kernel k : {Q8Kernel::kAvx2, Q8Kernel::kAvxVnni, Q8Kernel::kAvx512Vnni}) {
    if (Q8KernelName(k) != named) continue;
    if (HasKernel(k)) return k;
    std::fprintf(stderr, "kiln: KILN_CPU_INT8_KERNEL=%s: this CPU lacks its instructions; using %s\n", named,
                 std::string(Q8KernelName(best)).c_str());
    return best;
  }
  std::fprintf(stderr, "kiln: KILN_CPU_INT8_KERNEL=%s is none of avx2, avx-vnni, avx512-vnni; using %s\n", named,
               std::string(Q8KernelName(best)).c_str());
  return best;
}

}  // namespace

Q8Kernel BestQ8Kernel() {
  static const Q8Kernel chosen = ChooseQ8Kernel();
  return chosen;
}

RowDotQ8Fn Q8RowDot(GgmlType type, Q8Kernel kernel) {
  if (!HasKernel(kernel)) return nullptr;
  switch (kernel) {
    case Q8Kernel::kAvx2:
      return KernelOf(type);
    case Q8Kernel::kAvxVnni:
      return Q8RowDotVnni(type);
    case Q8Kernel::kAvx512Vnni:
      return Q8RowDotAvx512(type);
  }
  return nullptr;
}

#else  // !__x86_64__

void QuantizeQ8(const float*, int64_t, int64_t, int, int8_t*, float*, float*, float*, float*) {}
Q8Kernel BestQ8Kernel() { return Q8Kernel::kAvx2; }
RowDotQ8Fn Q8RowDot(GgmlType, Q8Kernel) { return nullptr; }

#endif

RowDotQ8Fn Q8RowDot(GgmlType type) { return Q8RowDot(type, BestQ8Kernel()); }

int Q8GroupOf(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K ? 256 : 32;
}

std::string_view Q8KernelName(Q8Kernel kernel) {
  switch (kernel) {
    case Q8Kernel::kAvx2:
      return "avx2";
    case Q8Kernel::kAvxVnni:
      return "avx-vnni";
    case Q8Kernel::kAvx512Vnni:
      return "avx512-vnni";
  }
  return "?";
}

}  // namespace kiln::cpu
