// The integer kernels of q8_dot_kernels.h on AVX-VNNI: vpdpbusd adds the
// four byte products of each int32 lane in one instruction (AVX2 takes a
// byte multiply-add and a word multiply-add), for the legacy types; the
// k-quants take AVX2's byte and word multiply-adds, the word one by their
// integer scales (q8_dot_kernels.h). Chosen by q8_dot.cc where the CPU has
// AVX-VNNI; the results are the same bits as AVX2's.

#include "runtime/cpu/q8_dot.h"

#if defined(__x86_64__)
#include "runtime/cpu/row_dot_avx2.h"

#define KILN_Q8_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))

namespace kiln::cpu {
namespace {

KILN_Q8_TARGET inline __m256i IntegerSums(__m256i u, __m256i x) {
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
}

}  // namespace
}  // namespace kiln::cpu

#include "runtime/cpu/q8_dot_kernels.h"

namespace kiln::cpu {

RowDotQ8Fn Q8RowDotVnni(GgmlType type) { return KernelOf(type); }

}  // namespace kiln::cpu
#endif
