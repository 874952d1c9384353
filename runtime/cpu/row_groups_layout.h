// The row groups' byte layout (row_groups.h) and the kernel families over
// it, shared by the packing (row_groups.cc) and the kernels
// (row_groups_avx512.cc, row_groups_avx2.cc). Internal to runtime/cpu.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/row_groups.h"
#include "runtime/formats/ggml_types.h"

namespace kiln::cpu::row_groups {

// Offsets within a group's super-block, q4_K.
inline constexpr int64_t kQ4KDmin = 16, kQ4KScales = 32, kQ4KMins = 96, kQ4KCodes = 160;
inline constexpr int64_t kQ4KBlockBytes = kQ4KCodes + 16 * 64;
// q6_K: d at 0, then c, the scales and the 24 code chunks.
inline constexpr int64_t kQ6KOffset = 16, kQ6KScales = 48, kQ6KCodes = 176;
inline constexpr int64_t kQ6KBlockBytes = kQ6KCodes + 24 * 64;

// RowGroupsDot's work for one family; xu: q6_K's activation codes plus 128
// (tokens x k bytes), null for q4_K.
void DotAvx512(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, const uint8_t* xu,
               int64_t tokens, float* y, int64_t ldy);
void DotAvx2(GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x, const uint8_t* xu,
             int64_t tokens, float* y, int64_t ldy);

// Every token of a call against each group in turn, up to kMax (4 or 2)
// tokens a tile: tile(g, t0, y of group g, std::integral_constant<int, T>).
template <int kMax, class Tile>
inline void EachGroup(int64_t num_groups, int64_t tokens, float* y, Tile tile) {
  for (int64_t g = 0; g < num_groups; ++g) {
    float* yg = y + kRowGroupRows * g;
    int64_t t = 0;
    for (; t + kMax <= tokens; t += kMax) tile(g, t, yg, std::integral_constant<int, kMax>());
    if constexpr (kMax == 4) {
      if (tokens - t == 3) tile(g, t, yg, std::integral_constant<int, 3>());
    }
    if (tokens - t == 2 && kMax > 2) tile(g, t, yg, std::integral_constant<int, 2>());
    if (tokens - t == 1) tile(g, t, yg, std::integral_constant<int, 1>());
  }
}

}  // namespace kiln::cpu::row_groups
