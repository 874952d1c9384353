// How the rows of a weight are stored: a ggml type (f32, f16, bf16, the
// legacy 32-element blocks, the 256-element k-quants) or kiln's group-wise
// int4 / int2 (runtime/formats/quant.h). A row of K elements is always a
// whole number of blocks (groups), laid out back to back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/formats/ggml_types.h"
#include "runtime/formats/quant.h"

namespace kiln::cpu {

struct WeightStorage {
  GgmlType ggml = GgmlType::kF32;      // meaningful when `grouped` is empty
  std::optional<GroupedKind> grouped;  // int4 / int2
  int64_t group = 0;                   // elements per group when grouped

  static WeightStorage Ggml(GgmlType type) { return {type, std::nullopt, 0}; }
  static WeightStorage Grouped(GroupedKind kind, int64_t group) {
    return {GgmlType::kF32, kind, group};
  }

  // Elements per block (the group size for int4 / int2).
  int64_t block_elems() const;
  // Bytes of a row of `k` elements; nullopt when k is not whole blocks or the
  // storage is not one the CPU kernels read.
  std::optional<uint64_t> RowBytes(int64_t k) const;
  // As the artifact and plan spell it: "q4_K", "f16", "int4:g128".
  std::string Name() const;
};

// A 2-D weight: `rows` rows of `cols` elements, stored as `storage`.
struct WeightMatrix {
  WeightStorage storage;
  const uint8_t* data = nullptr;  // rows of storage.RowBytes(cols) bytes, back to back
  int64_t rows = 0;               // N: output features (or vocabulary entries)
  int64_t cols = 0;               // K: input features (or embedding width)
  // Where set (q4_K or q6_K, for the AVX-512 VNNI integer kernels): the
  // first rows - rows % 8 rows again as groups of eight (row_groups.h),
  // which the int8 matmuls read instead of `data`.
  const uint8_t* row_groups = nullptr;
};

// Parses the plan's storage names: a ggml type name (case ignored: "q4_k",
// "F16") or "int4:gN" / "int2:gN" with N a positive multiple of 8. Errors
// name the storage and say which types the CPU kernels read.
absl::StatusOr<WeightStorage> ParseWeightStorage(std::string_view name);

// True for the storages the CPU kernels read: f32, f16, bf16, q8_0, q4_0,
// q4_1, q5_0, q5_1, q2_K..q6_K, int4, int2 (with a valid group).
bool IsSupported(const WeightStorage& storage);

// Decodes one row (`dst.size()` elements) with the reference decoders of
// runtime/formats/quant.h.
absl::Status DequantizeRow(const WeightStorage& storage, std::span<const uint8_t> src,
                           std::span<float> dst);

}  // namespace kiln::cpu
