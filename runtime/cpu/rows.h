// Row-wise ops: embedding lookup, gathering rows, argmax.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/cpu/weight_storage.h"

namespace kiln::cpu {

// out[i, :] = row tokens[i] of `table`, dequantised (out: [count, table.cols]).
// Errors: a token outside [0, table.rows), an unsupported storage, or cols
// that are not whole blocks.
absl::Status EmbeddingLookup(const WeightMatrix& table, const int32_t* tokens, int64_t count,
                             float* out);

// out[i, :] = x[indices[i], :] for `count` indices into `rows` rows of
// `width`. Errors: an index outside [0, rows). out must not alias x.
absl::Status GatherRows(const float* x, int64_t rows, int64_t width, const int32_t* indices,
                        int64_t count, float* out);

// out[r] = the index of the largest element of row r (`rows` rows of
// `width`); the lowest such index on ties. NaNs never win; a row of NaNs (or
// of -inf) gives 0.
void ArgmaxRows(const float* x, int64_t rows, int64_t width, int32_t* out);

}  // namespace kiln::cpu
