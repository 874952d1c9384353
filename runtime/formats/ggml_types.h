// The ggml tensor element types that GGUF files carry: ids, names and block
// geometry. Sizes are what the GGUF format fixes, so a reader can validate
// tensor extents for every type even where kiln cannot dequantise it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;   // as llama.cpp prints it: "f32", "q4_K", ...
  int64_t block_elems;     // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool dequantizable;      // kiln can turn it into f32
};

// nullopt for an id that is not a known ggml type.
std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t id);
const GgmlTypeInfo& GetGgmlTypeInfo(GgmlType type);
std::string_view GgmlTypeName(GgmlType type);
// Case-insensitive: "q4_k", "Q4_K", "f16".
std::optional<GgmlType> ParseGgmlType(std::string_view name);

// Bytes of `n` consecutive elements; nullopt when n is not a whole number of
// blocks or the size overflows.
std::optional<uint64_t> GgmlRowBytes(GgmlType type, uint64_t n);

}  // namespace kiln
