// The inner kernel of the matmul (internal to runtime/cpu): one weight row
// against a few rows of activations, decoding the row block by block as it
// goes (the matrix is never dequantised as a whole). One file per storage
// family provides these, each with a scalar path and an AVX2 path.
#pragma once

#include <cstdint>

#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/weight_storage.h"

namespace kiln::cpu {

// y[t * ldy] = sum over i < k of W(row)[i] * x[t * ldx + i], for t < tokens.
// `row` holds k elements (whole blocks) in the kernel's storage; `group` is
// the group size of int4 / int2 and unused otherwise. The result for one
// token never depends on `tokens` or on the other tokens: a decode step and a
// prefill give the same bits for the same row of x.
using RowDotFn = void (*)(const uint8_t* row, int64_t k, int64_t group, const float* x, int64_t ldx,
                          int64_t tokens, float* y, int64_t ldy);

// The scalar loop for block formats: `BlockDot(block, x)` is one block's
// contribution to a dot product. Scalar kernels sum in double throughout
// (products of codes and f32 activations are exact there), so the scalar
// path is the accurate one; the formats with a min (d * sum(q x) + m *
// sum(x)) would otherwise lose digits to cancellation.
template <double (*BlockDot)(const uint8_t* block, const float* x), int kBlockElems,
          int kBlockBytes>
void ScalarBlockRowDot(const uint8_t* row, int64_t k, int64_t /*group*/, const float* x,
                       int64_t ldx, int64_t tokens, float* y, int64_t ldy) {
  const int64_t blocks = k / kBlockElems;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * ldx;
    double acc = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      acc += BlockDot(row + b * kBlockBytes, xt + b * kBlockElems);
    }
    y[t * ldy] = static_cast<float>(acc);
  }
}

// Little-endian field readers for the scalar decoders (no alignment assumed).
inline uint16_t LoadLeU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadLeU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Each family returns its kernel for `isa`, or nullptr for a type that is not
// its own (or for kAvx2 on a non-x86 build).
RowDotFn FloatRowDot(GgmlType type, CpuIsa isa);       // f32, f16, bf16
RowDotFn LegacyRowDot(GgmlType type, CpuIsa isa);      // q8_0, q4_0, q4_1, q5_0, q5_1
RowDotFn KQuantRowDot(GgmlType type, CpuIsa isa);      // q2_K, q3_K, q4_K, q5_K, q6_K
RowDotFn GroupedRowDot(GroupedKind kind, CpuIsa isa);  // int4, int2

}  // namespace kiln::cpu
