#include "runtime/formats/ggml_types.h"

#include <array>

#include <cctype>

namespace kiln {
namespace {

constexpr int64_t kQK = 256;  // super-block size of the k-quants and i-quants

constexpr std::array<GgmlTypeInfo, 31> kTypes = {{
    {GgmlType::kF32, "f32", 1, 4, true},
    {GgmlType::kF16, "f16", 1, 2, true},
    {GgmlType::kQ4_0, "q4_0", 32, 2 + 16, true},
    {GgmlType::kQ4_1, "q4_1", 32, 2 + 2 + 16, true},
    {GgmlType::kQ5_0, "q5_0", 32, 2 + 4 + 16, true},
    {GgmlType::kQ5_1, "q5_1", 32, 2 + 2 + 4 + 16, true},
    {GgmlType::kQ8_0, "q8_0", 32, 2 + 32, true},
    {GgmlType::kQ8_1, "q8_1", 32, 2 + 2 + 32, false},
    {GgmlType::kQ2_K, "q2_K", kQK, kQK / 16 + kQK / 4 + 2 + 2, true},
    {GgmlType::kQ3_K, "q3_K", kQK, kQK / 8 + kQK / 4 + 12 + 2, true},
    {GgmlType::kQ4_K, "q4_K", kQK, 2 + 2 + 12 + kQK / 2, true},
    {GgmlType::kQ5_K, "q5_K", kQK, 2 + 2 + 12 + kQK / 8 + kQK / 2, true},
    {GgmlType::kQ6_K, "q6_K", kQK, kQK / 2 + kQK / 4 + kQK / 16 + 2, true},
    {GgmlType::kQ8_K, "q8_K", kQK, 4 + kQK + kQK / 16 * 2, false},
    {GgmlType::kIQ2_XXS, "iq2_xxs", kQK, 2 + kQK / 8 * 2, false},
    {GgmlType::kIQ2_XS, "iq2_xs", kQK, 2 + kQK / 8 * 2 + kQK / 32, false},
    {GgmlType::kIQ3_XXS, "iq3_xxs", kQK, 2 + 3 * (kQK / 8), false},
    {GgmlType::kIQ1_S, "iq1_s", kQK, 2 + kQK / 8 + kQK / 16, false},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 2 + 16, false},
    {GgmlType::kIQ3_S, "iq3_s", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4, false},
    {GgmlType::kIQ2_S, "iq2_s", kQK, 2 + kQK / 4 + kQK / 16, false},
    {GgmlType::kIQ4_XS, "iq4_xs", kQK, 2 + 2 + kQK / 64 + kQK / 2, false},
    {GgmlType::kI8, "i8", 1, 1, false},
    {GgmlType::kI16, "i16", 1, 2, false},
    {GgmlType::kI32, "i32", 1, 4, false},
    {GgmlType::kI64, "i64", 1, 8, false},
    {GgmlType::kF64, "f64", 1, 8, false},
    {GgmlType::kIQ1_M, "iq1_m", kQK, kQK / 8 + kQK / 16 + kQK / 32, false},
    {GgmlType::kBF16, "bf16", 1, 2, true},
    {GgmlType::kTQ1_0, "tq1_0", kQK, 2 + 4 * 13, false},
    {GgmlType::kTQ2_0, "tq2_0", kQK, 2 + 64, false},
}};

}  // namespace

std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const GgmlTypeInfo& GetGgmlTypeInfo(GgmlType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t;
  }
  return kTypes[0];  // unreachable for a valid enum value
}

std::string_view GgmlTypeName(GgmlType type) { return GetGgmlTypeInfo(type).name; }

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  auto same = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(a[i])) !=
          std::tolower(static_cast<unsigned char>(b[i]))) {
        return false;
      }
    }
    return true;
  };
  for (const auto& t : kTypes) {
    if (same(t.name, name)) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> GgmlRowBytes(GgmlType type, uint64_t n) {
  const GgmlTypeInfo& info = GetGgmlTypeInfo(type);
  const auto be = static_cast<uint64_t>(info.block_elems);
  if (n % be != 0) return std::nullopt;
  const uint64_t blocks = n / be;
  const auto bb = static_cast<uint64_t>(info.block_bytes);
  if (blocks != 0 && bb > UINT64_MAX / blocks) return std::nullopt;
  return blocks * bb;
}

}  // namespace kiln
