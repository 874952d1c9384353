// Reference (scalar, exact) conversions between f32 and the ggml storage
// types, written from the GGUF/ggml block layouts, and kiln's own group-wise
// int4/int2. These define what a block means; fast kernels elsewhere are
// tested against them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "runtime/formats/ggml_types.h"

namespace kiln {

// Dequantises `n` elements (a whole number of blocks) from `src` into `dst`.
// `src` must hold exactly GgmlRowBytes(type, n) bytes. Unsupported types and
// bad sizes are InvalidArgument errors naming the type.
absl::Status Dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst);

// Quantises `src` (a whole number of blocks) into `dst` (GgmlRowBytes bytes)
// with a round-to-nearest reference quantiser of the block format.
absl::Status Quantize(GgmlType type, std::span<const float> src, std::span<uint8_t> dst);

// The 6-bit scale and min of sub-block s (0..7) of a q4_K or q5_K block
// from the block's 12 scale bytes `t` (ggml's get_scale_min_k4). Inline:
// the CPU's integer kernels take it once per 32 weights.
inline void GetScaleMinK4(const uint8_t* t, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = t[s] & 63;
    *min = t[s + 4] & 63;
  } else {
    *scale = (t[s + 4] & 0x0F) | ((t[s - 4] >> 6) << 4);
    *min = (t[s + 4] >> 4) | ((t[s] >> 6) << 4);
  }
}

// kiln's own group-wise formats (what the compiler's quantize pass writes for
// #kiln.storage<int4, group = G> and <int2, group = G>). A row is a sequence
// of groups of G elements (G a positive multiple of 8), each stored as
//   f16 d | f16 m | codes
// with value = d * q + m. int4: q in 0..15, element j of the group in byte
// j / 2 of the codes, low nibble for even j (G / 2 + 4 bytes per group).
// int2: q in 0..3, element j in byte j / 4 at bits 2 * (j % 4) (G / 4 + 4
// bytes per group). Multi-byte fields are little-endian.
enum class GroupedKind { kInt4, kInt2 };

std::string_view GroupedKindName(GroupedKind kind);  // "int4", "int2"

// A weight storage as plans and artifacts spell it: a ggml type name (case
// ignored: "q4_k", "F16") or "int4:gN" / "int2:gN" with N a positive multiple
// of 8 (at most 9 digits). ParseStorageName gives nullopt for anything else;
// whether a backend reads the storage is the backend's question.
struct StorageName {
  GgmlType ggml = GgmlType::kF32;      // when `grouped` is empty
  std::optional<GroupedKind> grouped;  // int4 / int2
  int64_t group = 0;                   // elements per group when grouped
};
std::optional<StorageName> ParseStorageName(std::string_view name);

// Bytes of `n` consecutive elements; nullopt when `group` is not a positive
// multiple of 8 or `n` is not a whole number of groups.
std::optional<uint64_t> GroupedRowBytes(GroupedKind kind, int64_t group, uint64_t n);

// As Dequantize / Quantize, for the group-wise formats. The quantiser fits
// each group's d and m by a small least-squares search over clipping ranges
// (plain min/max wastes most of int2's four levels on outliers); codes are
// rounded against the f16 values the decoder will read.
absl::Status DequantizeGrouped(GroupedKind kind, int64_t group, std::span<const uint8_t> src,
                               std::span<float> dst);
absl::Status QuantizeGrouped(GroupedKind kind, int64_t group, std::span<const float> src,
                             std::span<uint8_t> dst);

}  // namespace kiln
