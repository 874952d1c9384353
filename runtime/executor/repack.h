// Converting a weight between storages (the repack the compiler's quantize
// pass records, e.g. "f32->q4_k"): row by row through f32 with the
// reference decoders and encoders of runtime/formats/quant.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/executor/executor.h"

namespace kiln {

absl::StatusOr<std::vector<uint8_t>> RepackWeight(const cpu::WeightStorage& from, const cpu::WeightStorage& to,
                                                  int64_t rows, int64_t cols, std::span<const uint8_t> src);

// A weight's rows as stored, one after another: `src` itself, or where it
// holds them in groups of eight (WeightBytes::row_groups) the rows
// unpacked into `owned`. An error where the bytes do not hold [rows, cols].
absl::StatusOr<WeightBytes> StoredRows(const WeightBytes& src, int64_t rows, int64_t cols, std::vector<uint8_t>& owned);

}  // namespace kiln
