// Integer dot products (internal to runtime/cpu): the activations of a
// matmul are quantised once to int8 per 32 elements (per 256 for the
// k-quants), x ~ d * q, and each weight row is multiplied into them with
// AVX2's byte multiply-adds (vpmaddubsw), its own codes kept as integers
// and its scales applied once per 32 elements (on AVX2, the k-quants'
// integer sub-block scales inside the integer sums and their float scale
// once per 256). Several times fewer
// instructions per weight than decoding to f32 (row_dot_avx2.h), for what
// llama.cpp's CPU path also pays: the activations' rounding (relative error
// ~1/254 of a group's largest value).
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/formats/ggml_types.h"

namespace kiln::cpu {

// Token rows of k activations (k a multiple of 32) as int8 blocks of 32:
// row t's codes at q + t * k, its block scales at d + t * k / 32 and the
// blocks' sums d * sum(q) at dsum + t * k / 32 (for weights with an offset).
// Quantised for the k-quants (Q8GroupOf: 256), a super-block's eight blocks
// share one scale, and per token and super-block s (k / 256 a token) `unit`
// holds the unit u(s) of the AVX-512 kernels' sums (that scale, or where it
// is 0 the unit before it, 1 if none) and `rescale` u(s - 1) / u(s) (1 for
// s = 0): they carry a row's sum in units of the current super-block's scale
// (at a super-block's first pair: sum * rescale + the pair's) and apply the
// scale once at the end, not once per block and row. The k-quants' kernels
// need both; the other types' ignore them.
struct Q8Rows {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* dsum = nullptr;
  int64_t k = 0;
  const float* unit = nullptr;
  const float* rescale = nullptr;
};

// Elements per activation scale for weights of `type`: 256 for the k-quants
// (q4_K, q5_K, q6_K; as llama.cpp's q8_K), else 32.
int Q8GroupOf(GgmlType type);

// Quantises `tokens` rows of x (row-major, k a multiple of `group`, 32 or
// 256): per group d = max|x| / 127 (each of its blocks' scale) and q = x / d
// rounded to nearest (ties to even); for group 256 also the units and
// rescale factors of Q8Rows (k / 256 a token). A row's codes depend on that
// row alone. Needs AVX2 (callers hold a kernel of Q8RowDot, which exists
// only there).
void QuantizeQ8(const float* x, int64_t tokens, int64_t k, int group, int8_t* q, float* d, float* dsum,
                float* unit = nullptr, float* rescale = nullptr);

// y[t * ldy + r] = the dot product of row r (of `nrows`, row_bytes apart)
// with token row t of x, for t < tokens. A result never depends on
// `tokens`, `nrows` or the other rows (the same operations in the same
// order), as for RowDotFn.
using RowDotQ8Fn = void (*)(const uint8_t* rows, int64_t row_bytes, int64_t nrows, int64_t k, const Q8Rows& x,
                            int64_t tokens, float* y, int64_t ldy);

// The integer kernels, each for x86-64 CPUs that have its instructions:
// AVX2 (vpmaddubsw + vpmaddwd a 32-element block), AVX-VNNI (vpdpbusd on
// 256 bits; AVX2's bits) and AVX-512 VNNI (two blocks a 512-bit vpdpbusd,
// prefill in tiles of 4 rows x 4 tokens; bits of its own, as batch- and
// thread-invariant as the others).
enum class Q8Kernel { kAvx2, kAvxVnni, kAvx512Vnni };

// The fastest kernel this CPU has (kAvx2 where it has none; the kernels
// exist only where DetectCpuIsa() is kAvx2), or the one the environment's
// KILN_CPU_INT8_KERNEL names (avx2, avx-vnni, avx512-vnni) where the CPU has
// it; read once.
Q8Kernel BestQ8Kernel();

std::string_view Q8KernelName(Q8Kernel kernel);  // "avx2", "avx-vnni", "avx512-vnni"

// `kernel`'s function for `type` (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K,
// q6_K), or nullptr where the type has none or this CPU lacks the kernel's
// instructions.
RowDotQ8Fn Q8RowDot(GgmlType type, Q8Kernel kernel);

// The best kernel's function for `type`, or nullptr.
RowDotQ8Fn Q8RowDot(GgmlType type);

}  // namespace kiln::cpu
