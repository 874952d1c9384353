#include "runtime/cpu/rows.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <span>

#include "absl/strings/str_format.h"

namespace kiln::cpu {

absl::Status EmbeddingLookup(const WeightMatrix& table, const int32_t* tokens, int64_t count,
                             float* out) {
  const std::optional<uint64_t> row_bytes = table.storage.RowBytes(table.cols);
  if (!row_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("EmbeddingLookup: a row of %d elements is not whole blocks of %s",
                        table.cols, table.storage.Name()));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= table.rows) {
      return absl::InvalidArgumentError(
          absl::StrFormat("EmbeddingLookup: token %d (entry %d) is outside the table's %d rows",
                          tokens[i], i, table.rows));
    }
  }
  const auto cols = static_cast<size_t>(table.cols);
  for (int64_t i = 0; i < count; ++i) {
    const std::span<const uint8_t> row(table.data + static_cast<size_t>(tokens[i]) * *row_bytes,
                                       static_cast<size_t>(*row_bytes));
    if (absl::Status st = DequantizeRow(table.storage, row, {out + i * table.cols, cols});
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status GatherRows(const float* x, int64_t rows, int64_t width, const int32_t* indices,
                        int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    if (indices[i] < 0 || indices[i] >= rows) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GatherRows: index %d (entry %d) is outside the %d rows", indices[i], i, rows));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    std::copy_n(x + static_cast<int64_t>(indices[i]) * width, width, out + i * width);
  }
  return absl::OkStatus();
}

void ArgmaxRows(const float* x, int64_t rows, int64_t width, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float best = -std::numeric_limits<float>::infinity();
    int32_t index = 0;
    for (int64_t i = 0; i < width; ++i) {
      if (xr[i] > best) {  // strict: the first of equal maxima stays
        best = xr[i];
        index = static_cast<int32_t>(i);
      }
    }
    out[r] = index;
  }
}

}  // namespace kiln::cpu
