// Converting a weight between storages (the repack the compiler's quantize
// pass records, e.g. "f32->q4_k"): row by row through f32 with the
// reference decoders and encoders of runtime/formats/quant.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cpu/weight_storage.h"

namespace kiln {

absl::StatusOr<std::vector<uint8_t>> RepackWeight(const cpu::WeightStorage& from, const cpu::WeightStorage& to,
                                                  int64_t rows, int64_t cols, std::span<const uint8_t> src);

}  // namespace kiln
