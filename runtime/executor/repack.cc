#include "runtime/executor/repack.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

}  // namespace kiln
