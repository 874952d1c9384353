#include "runtime/executor/repack.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/cpu/row_groups.h"
#include "runtime/formats/quant.h"

namespace kiln {

absl::StatusOr<std::vector<uint8_t>> RepackWeight(const cpu::WeightStorage& from, const cpu::WeightStorage& to,
                                                  int64_t rows, int64_t cols, std::span<const uint8_t> src) {
  const std::optional<uint64_t> in_row = from.RowBytes(cols);
  const std::optional<uint64_t> out_row = to.RowBytes(cols);
  if (!in_row || !out_row) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot repack %s to %s: rows of %d are not whole blocks",
                                                      from.Name(), to.Name(), cols));
  }
  if (src.size() != *in_row * rows) {
    return absl::InvalidArgumentError(absl::StrFormat("repack %s to %s: %d bytes given, %d expected", from.Name(),
                                                      to.Name(), src.size(), *in_row * rows));
  }
  std::vector<uint8_t> out(*out_row * rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    if (absl::Status s = cpu::DequantizeRow(from, src.subspan(r * *in_row, *in_row), row); !s.ok()) return s;
    std::span<uint8_t> dst(out.data() + r * *out_row, *out_row);
    absl::Status s = to.grouped ? QuantizeGrouped(*to.grouped, to.group, row, dst) : Quantize(to.ggml, row, dst);
    if (!s.ok()) return s;
  }
  return out;
}

absl::StatusOr<WeightBytes> StoredRows(const WeightBytes& src, int64_t rows, int64_t cols,
                                       std::vector<uint8_t>& owned) {
  if (!src.row_groups) return src;
  const GgmlType type = src.storage.ggml;
  if (src.storage.grouped || (type != GgmlType::kQ4_K && type != GgmlType::kQ6_K) || cols % 256 != 0 || rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s [%d, %d] cannot be in rows of eight", src.storage.Name(), rows, cols));
  }
  if (std::optional<uint64_t> want = RowGroupsWeightBytes(type, rows, cols); !want || src.data.size() != *want) {
    return absl::InvalidArgumentError(absl::StrFormat("%d bytes of %s in rows of eight do not hold [%d, %d]",
                                                      src.data.size(), src.storage.Name(), rows, cols));
  }
  const int64_t groups = rows / cpu::kRowGroupRows, row_bytes = *src.storage.RowBytes(cols);
  const int64_t grouped_bytes = groups * cpu::RowGroupBytes(type, cols);
  owned.resize(static_cast<size_t>(rows * row_bytes));
  cpu::UnpackRowGroups(type, src.data.data(), cols, 0, groups, owned.data());
  std::memcpy(owned.data() + groups * cpu::kRowGroupRows * row_bytes, src.data.data() + grouped_bytes,
              src.data.size() - grouped_bytes);
  WeightBytes out = src;
  out.data = owned;
  out.file_mapped = false;
  out.row_groups = false;
  return out;
}

}  // namespace kiln
