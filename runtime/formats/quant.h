// Reference (scalar, exact) conversions between f32 and the ggml storage
// types, written from the GGUF/ggml block layouts. These define what a block
// means; fast kernels elsewhere are tested against them.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "runtime/formats/ggml_types.h"

namespace kiln {

// Dequantises `n` elements (a whole number of blocks) from `src` into `dst`.
// `src` must hold exactly GgmlRowBytes(type, n) bytes. Unsupported types and
// bad sizes are InvalidArgument errors naming the type.
absl::Status Dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst);

// Quantises `src` (a whole number of blocks) into `dst` (GgmlRowBytes bytes)
// with a round-to-nearest reference quantiser of the block format.
absl::Status Quantize(GgmlType type, std::span<const float> src, std::span<uint8_t> dst);

}  // namespace kiln
