// q4_K and q6_K weights repacked for the integer kernels: rows in groups of
// eight, interleaved super-block by super-block, so that one sequential
// stream feeds eight rows' sums and each activation broadcast serves eight
// rows. Read one row at a time (q8_dot_avx512.cc) a core
// streamed q4_K rows at ~16 GB/s of the ~28 it can read; over these groups
// near the read limit (docs/perf/cpu-decode.md, session 50). Internal to
// runtime/cpu.
//
// A group's super-block s (the same 256 columns of its eight rows), codes
// in chunks of 64 bytes, each eight bytes of each row (row r at byte 8 r):
//  q4_K, 1184 bytes: f16 d[8] | f16 dmin[8] | the 6-bit scales sc[8
//   sub-blocks][8 rows] | the 6-bit mins m[8][8] | 16 code chunks, chunk
//   4 i + q holding qs[32 i + 8 q .. + 8] (low nibbles: elements 8 q.. of
//   sub-block 2 i; high: of sub-block 2 i + 1).
//  q6_K, 1712 bytes: f16 d[8] | int32 c[8] | int8 scales sc[16 sub-blocks
//   of 16][8 rows] | for half h < 2 and l0 = 0, 8, 16, 24: the chunks of
//   ql[64 h + l0 ..], ql[64 h + 32 + l0 ..] and qh[32 h + l0 ..]. The kernel
//   multiplies the signed codes q - 32 by the activations plus 128 (the
//   byte multiply-add takes unsigned times signed), and c = 128 sum_g sc_g
//   sum_{e in g} (q_e - 32), a row's part of that offset, is taken back.
#pragma once

#include <cstdint>

#include "runtime/cpu/q8_dot.h"
#include "runtime/formats/ggml_types.h"

namespace kiln::cpu {

inline constexpr int kRowGroupRows = 8;

// Whether `kernel`'s family runs the groups of `type` on this CPU (q4_K or
// q6_K, wherever the family has its one-row kernel: AVX-512 VNNI has a
// kernel of its own, AVX2 and AVX-VNNI share one on 256 bits). Measured
// and left out: q8_0's groups (prefill +60-80%, two-thread decode -13% on
// Qwen2.5-Coder-0.5B at q8_0), q5_0's (decode -3-8%) and q5_K's (q4_K's
// with the fifth bits in four more chunks: prefill +30%, decode -13%).
bool HasRowGroupKernel(GgmlType type, Q8Kernel kernel = BestQ8Kernel());

// Bytes of one group of eight rows of k columns (k a multiple of 256) of
// `type` (q4_K or q6_K).
int64_t RowGroupBytes(GgmlType type, int64_t k);

// Writes groups [first, last) of `rows` of `type` (stored back to back, k a
// multiple of 256) to out, group g at out + g * RowGroupBytes(type, k).
void PackRowGroups(GgmlType type, const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out);

// y[t * ldy + 8 g + r] = row r of group g (of `num_groups`) dotted with
// token row t of x (quantised for the type: Q8GroupOf 256), for t < tokens.
// As with RowDotQ8Fn, a result never depends on `tokens`, `num_groups` or
// the other rows; its bits are the family's own. Needs
// HasRowGroupKernel(type, kernel).
void RowGroupsDot(Q8Kernel kernel, GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x,
                  int64_t tokens, float* y, int64_t ldy);

}  // namespace kiln::cpu
