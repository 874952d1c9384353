#include "runtime/artifact/storage_type.h"

#include <optional>
#include <string>
#include <variant>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/formats/ggml_types.h"
#include "runtime/formats/quant.h"

namespace kiln {
namespace {

constexpr size_t kMaxRank = 8;

struct Grouped {
  GroupedKind kind;
  int64_t group;
};
using Storage = std::variant<GgmlType, Grouped>;

// "int4:g128" -> {kInt4, 128}. Digits only: no sign, no spaces, at most 9.
// The group size itself is checked by GroupedRowBytes.
std::optional<Grouped> ParseGrouped(std::string_view storage) {
  GroupedKind kind;
  if (storage.starts_with("int4:g")) {
    kind = GroupedKind::kInt4;
  } else if (storage.starts_with("int2:g")) {
    kind = GroupedKind::kInt2;
  } else {
    return std::nullopt;
  }
  const std::string_view digits = storage.substr(6);
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  int64_t group = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    group = group * 10 + (c - '0');
  }
  if (group < 8 || group % 8 != 0) return std::nullopt;
  return Grouped{kind, group};
}

std::optional<Storage> ParseStorage(std::string_view storage) {
  if (std::optional<Grouped> g = ParseGrouped(storage)) return *g;
  if (std::optional<GgmlType> t = ParseGgmlType(storage)) return *t;
  return std::nullopt;
}

uint64_t BlockElements(const Storage& storage) {
  if (const auto* g = std::get_if<Grouped>(&storage)) return static_cast<uint64_t>(g->group);
  return static_cast<uint64_t>(GetGgmlTypeInfo(std::get<GgmlType>(storage)).block_elems);
}

std::optional<uint64_t> RowBytes(const Storage& storage, uint64_t n) {
  if (const auto* g = std::get_if<Grouped>(&storage)) return GroupedRowBytes(g->kind, g->group, n);
  return GgmlRowBytes(std::get<GgmlType>(storage), n);
}

}  // namespace

absl::StatusOr<uint64_t> StorageBytes(std::string_view storage, std::span<const int64_t> shape) {
  const std::optional<Storage> parsed = ParseStorage(storage);
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown storage type '%s' (a ggml type such as f32, f16, q8_0, q4_k, or int4:gN / int2:gN with N a "
        "positive multiple of 8)",
        absl::CHexEscape(std::string(storage))));
  }
  if (shape.empty() || shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d (1 to %d allowed)", shape.size(), kMaxRank));
  }
  for (int64_t d : shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shape [%s] has a dimension below 1", absl::StrJoin(shape, ", ")));
    }
  }
  const auto row = static_cast<uint64_t>(shape.back());
  if (row % BlockElements(*parsed) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("row length %d is not a multiple of the %s block of %d elements",
                                                      row, storage, BlockElements(*parsed)));
  }
  std::optional<uint64_t> row_bytes = RowBytes(*parsed, row);
  uint64_t bytes = row_bytes.value_or(0);
  bool overflow = !row_bytes.has_value();
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(shape[i]), &bytes);
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shape [%s] stored as %s overflows 64 bits", absl::StrJoin(shape, ", "), storage));
  }
  return bytes;
}

}  // namespace kiln
