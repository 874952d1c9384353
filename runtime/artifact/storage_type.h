// Byte sizes of weights by storage type. The artifact does not interpret
// weight bytes; it only checks that each tensor's extent is what its shape
// and storage type say, so a corrupt index cannot hand a kernel a short
// buffer. Storage types are strings:
//   - a ggml type name ("f32", "f16", "bf16", "q8_0", "q4_k", ...; case is
//     ignored, as ParseGgmlType does), sized by its ggml block geometry;
//   - "int4:gN" / "int2:gN": group-wise integers, N elements (a positive
//     multiple of 8) per group sharing an f16 scale and zero point:
//     N/2 + 4 and N/4 + 4 bytes per group (as #kiln.storage<int4, group = N>).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"

namespace kiln {

// Bytes of a tensor of `shape` (row-major: shape.back() is the contiguous
// row, which must hold whole blocks) stored as `storage`. Errors (without
// file or tensor context) for an unknown storage type, a rank outside 1..8,
// a dimension below 1, a row that is not whole blocks, or overflow.
absl::StatusOr<uint64_t> StorageBytes(std::string_view storage, std::span<const int64_t> shape);

}  // namespace kiln
