#include "runtime/artifact/storage_type.h"

#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/formats/ggml_types.h"
#include "runtime/formats/quant.h"

namespace kiln {
namespace {

constexpr size_t kMaxRank = 8;

uint64_t BlockElements(const StorageName& storage) {
  if (storage.grouped) return static_cast<uint64_t>(storage.group);
  return static_cast<uint64_t>(GetGgmlTypeInfo(storage.ggml).block_elems);
}

std::optional<uint64_t> RowBytes(const StorageName& storage, uint64_t n) {
  if (storage.grouped) return GroupedRowBytes(*storage.grouped, storage.group, n);
  return GgmlRowBytes(storage.ggml, n);
}

}  // namespace

absl::StatusOr<uint64_t> StorageBytes(std::string_view storage, std::span<const int64_t> shape) {
  const std::optional<StorageName> parsed = ParseStorageName(storage);
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
