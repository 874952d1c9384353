#include "runtime/cpu/weight_storage.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::cpu {

namespace {

constexpr GgmlType kSupportedGgml[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K,
    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

}  // namespace

int64_t WeightStorage::block_elems() const {
  return grouped ? group : GetGgmlTypeInfo(ggml).block_elems;
}

std::optional<uint64_t> WeightStorage::RowBytes(int64_t k) const {
  if (k < 0 || !IsSupported(*this)) return std::nullopt;
  return grouped ? GroupedRowBytes(*grouped, group, static_cast<uint64_t>(k))
                 : GgmlRowBytes(ggml, static_cast<uint64_t>(k));
}

std::string WeightStorage::Name() const {
  if (grouped) return absl::StrCat(std::string(GroupedKindName(*grouped)), ":g", group);
  return std::string(GgmlTypeName(ggml));
}

bool IsSupported(const WeightStorage& storage) {
  if (storage.grouped) return storage.group >= 8 && storage.group % 8 == 0;
  for (GgmlType t : kSupportedGgml) {
    if (t == storage.ggml) return true;
  }
  return false;
}

absl::StatusOr<WeightStorage> ParseWeightStorage(std::string_view name) {
  const std::optional<StorageName> parsed = ParseStorageName(name);
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (!parsed && (lower.rfind("int4:", 0) == 0 || lower.rfind("int2:", 0) == 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("storage '%s': the group size must be a positive multiple of 8 (int4:gN, int2:gN)", name));
  }
  if (parsed) {
    const WeightStorage storage =
        parsed->grouped ? WeightStorage::Grouped(*parsed->grouped, parsed->group) : WeightStorage::Ggml(parsed->ggml);
    if (IsSupported(storage)) return storage;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "storage '%s' is not one the CPU kernels read (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
      "q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, int4:gN, int2:gN)",
      name));
}

absl::Status DequantizeRow(const WeightStorage& storage, std::span<const uint8_t> src,
                           std::span<float> dst) {
  if (storage.grouped) return DequantizeGrouped(*storage.grouped, storage.group, src, dst);
  return Dequantize(storage.ggml, src, dst);
}

}  // namespace kiln::cpu
