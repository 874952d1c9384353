// q4_K weights repacked for the AVX-512 VNNI integer kernels: rows in groups
// of eight, interleaved super-block by super-block, so that one sequential
// stream feeds eight rows' sums and each activation broadcast serves eight
// rows. Read one row at a time (q8_dot_avx512.cc) a core streamed q4_K rows
// at ~16 GB/s of the ~28 it can read; over these groups at the read limit
// (docs/perf/cpu-decode.md, session 50). Internal to runtime/cpu.
//
// A group's super-block s (the same 256 columns of its eight rows), 1184
// bytes: f16 d[8] | f16 dmin[8] | the 6-bit scales sc[8 sub-blocks][8 rows]
// | the 6-bit mins m[8][8] | codes in 16 chunks of 64 bytes, chunk c = 4 i +
// q holding each row's bytes qs[32 i + 8 q .. + 8] (low nibbles: elements
// 8q.. of sub-block 2 i; high: of sub-block 2 i + 1), row r at byte 8 r.
#pragma once

#include <cstdint>

#include "runtime/cpu/q8_dot.h"

namespace kiln::cpu {

inline constexpr int kQ4KGroupRows = 8;
inline constexpr int64_t kQ4KGroupBlockBytes = 16 + 16 + 64 + 64 + 1024;

// Bytes of one group of eight rows of k columns (k a multiple of 256).
inline int64_t Q4KRowGroupBytes(int64_t k) { return k / 256 * kQ4KGroupBlockBytes; }

// Whether this CPU runs the groups' kernel (the AVX-512 VNNI integer family
// is the chosen one: BestQ8Kernel()).
bool HasQ4KRowGroupKernel();

// Writes groups [first, last) of q4_K `rows` (row_bytes = k / 256 * 144
// apart, k a multiple of 256) to out, group g at out + g * Q4KRowGroupBytes(k).
void PackQ4KRowGroups(const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out);

// y[t * ldy + 8 g + r] = row r of group g (of `groups`) dotted with token
// row t of x (quantised for q4_K: Q8GroupOf 256), for t < tokens. As with
// RowDotQ8Fn, a result never depends on `tokens`, `groups` or the other
// rows. Needs HasQ4KRowGroupKernel().
void Q4KRowGroupsDot(const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, int64_t tokens, float* y,
                     int64_t ldy);

}  // namespace kiln::cpu
